"""ab.glue: numbers of a run handed to the page's prose, and notebooks that run without myst-nb."""

import builtins
import json
from pathlib import Path

import pytest

import attention_book as ab

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_glue_without_myst_nb_is_quiet(monkeypatch):
    real_import = builtins.__import__

    def no_myst(name, *args, **kwargs):
        if name.startswith("myst_nb"):
            raise ImportError("no myst_nb here (as in Colab)")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_myst)
    assert ab.glue("loss", 0.25) is None


def test_glue_hands_the_value_to_myst_nb(monkeypatch):
    myst_nb = pytest.importorskip("myst_nb")
    seen = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: seen.update({name: (value, display)}))
    ab.glue("bleu", 0.5)
    assert seen == {"bleu": (0.5, False)}


@pytest.mark.parametrize("name", ["", "two words", "1st", None, 3])
def test_glue_rejects_names_the_prose_cannot_refer_to(name):
    with pytest.raises(ValueError, match="glue"):
        ab.glue(name, 1.0)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_glue_through_the_package(path):
    """Colab has no myst-nb: a notebook importing it directly would stop at that cell."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if cell["cell_type"] == "code":
            assert "myst_nb" not in "".join(cell["source"]), f"{path.name}: use ab.glue, not myst_nb"


def test_glue_counts_hands_the_seed_checks_counts_to_the_prose(monkeypatch):
    myst_nb = pytest.importorskip("myst_nb")
    seen = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: seen.update({name: value}))
    key, counted = next(iter(ab.book.claims.claim_report()["claims"].items()))
    assert ab.glue_counts("c", key) is None
    assert seen == {"c_held": counted["held"], "c_runs": counted["runs"]}
    ab.glue_counts("new", "ch99.not_counted_yet")  # not yet in the report: 0 of 0
    assert seen["new_held"] == 0 and seen["new_runs"] == 0
    with pytest.raises(ValueError, match="key"):
        ab.glue_counts("c", "no chapter")


def test_a_claim_prints_nothing_on_a_website_build(monkeypatch, capsys):
    """A built page states results in prose: no "Claim ✘ does not hold" line (issue 36)."""
    from attention_book.core.config import EXPLORERS_ENV

    monkeypatch.setenv(EXPLORERS_ENV, "static")
    assert ab.claim("ch99.quiet_on_pages", False, "a statement that fails here") is False
    assert capsys.readouterr().out == ""
    monkeypatch.setenv(EXPLORERS_ENV, "live")
    ab.claim("ch99.quiet_on_pages", False, "a statement that fails here")
    assert "✘ does not hold" in capsys.readouterr().out
