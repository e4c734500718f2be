"""The seed knob, ab.claim, the seed check's report, and the rules the notebooks follow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import attention_book as ab
from attention_book.book import claims as claims_mod

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def cells(path: Path, kind: str | None = None):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if kind is None or cell["cell_type"] == kind:
            yield "".join(cell["source"])


# --- the seed knob -------------------------------------------------------------------------

def test_book_seed_defaults_to_zero_and_follows_the_environment(monkeypatch):
    monkeypatch.delenv(ab.core.config.SEED_ENV, raising=False)
    assert ab.book_seed() == 0
    monkeypatch.setenv(ab.core.config.SEED_ENV, " 7 ")
    assert ab.book_seed() == 7
    assert ab.resolve_seed(None) == 7 and ab.resolve_seed(None, offset=3) == 10
    assert ab.resolve_seed(2) == 2  # an explicit seed wins


@pytest.mark.parametrize("bad", ["-1", "one", "1.5"])
def test_bad_book_seed_is_a_clear_error(monkeypatch, bad):
    monkeypatch.setenv(ab.core.config.SEED_ENV, bad)
    with pytest.raises(ValueError, match="ATTENTION_BOOK_SEED"):
        ab.book_seed()


@pytest.mark.parametrize("bad", [-1, 1.0, True, "3"])
def test_resolve_seed_rejects_bad_seeds(bad):
    with pytest.raises(ValueError, match="seed"):
        ab.resolve_seed(bad)


def test_seed_everything_uses_the_book_seed(monkeypatch):
    monkeypatch.setenv(ab.core.config.SEED_ENV, "5")
    assert ab.seed_everything() == 5
    a = torch.rand(3)
    ab.seed_everything(5)
    assert torch.equal(a, torch.rand(3))
    monkeypatch.setenv(ab.core.config.SEED_ENV, "6")
    ab.seed_everything()
    assert not torch.equal(a, torch.rand(3))


def test_describe_run_names_the_seed(monkeypatch, capsys):
    monkeypatch.setenv(ab.core.config.SEED_ENV, "4")
    assert "seed: 4" in ab.describe_run()


# --- ab.claim --------------------------------------------------------------------------------

def test_claim_prints_the_outcome_and_never_raises_for_a_false_one(capsys, monkeypatch):
    monkeypatch.delenv(ab.core.config.CLAIMS_ENV, raising=False)
    assert ab.claim("ch99.example", False, "an example that fails") is False
    out = capsys.readouterr().out
    assert "does not hold in this run: an example that fails" in out
    assert ab.claim("ch99.example", np.bool_(True), "an example that fails") is True
    assert ab.claim("ch99.example", torch.tensor(True), "an example that fails") is True


def test_claim_records_to_the_log(tmp_path, monkeypatch):
    log = tmp_path / "sub" / "claims.jsonl"
    monkeypatch.setenv(ab.core.config.CLAIMS_ENV, str(log))
    monkeypatch.setenv(ab.core.config.SEED_ENV, "3")
    ab.claim("ch99.logged", True, "  spaces   are\nfolded ", value=torch.tensor([0.123456, 2.0]), quiet=True)
    ab.claim("ch99.logged", False, "spaces are folded", value={"a": np.float32(1.5)}, quiet=True)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["holds"] for x in lines] == [True, False]
    assert lines[0]["statement"] == "spaces are folded" and lines[0]["seed"] == 3
    assert lines[0]["value"] == [0.1235, 2.0] and lines[1]["value"] == {"a": 1.5}


@pytest.mark.parametrize("key, holds, statement, match", [
    ("bad key", True, "s", "key"),
    ("ch05.ok", 1, "s", "True or False"),
    ("ch05.ok", torch.tensor([True, False]), "s", "one boolean"),
    ("ch05.ok", None, "s", "True or False"),
    ("ch05.ok", True, "  ", "statement"),
])
def test_claim_rejects_bad_input(key, holds, statement, match):
    with pytest.raises(ValueError, match=match):
        ab.claim(key, holds, statement)


def test_claim_reports_the_seed_check_count(monkeypatch, capsys):
    fake = {"claims": {"ch99.counted": {"statement": "it held", "held": 4, "runs": 5, "values": []}}}
    monkeypatch.setattr(claims_mod, "_load_report", lambda: fake)
    ab.claim("ch99.counted", True, "it held")
    assert "held in 4 of 5 runs of the seed check" in capsys.readouterr().out
    ab.claim("ch99.counted", True, "it held, said otherwise")
    assert "statement changed" in capsys.readouterr().out
    ab.claim("ch99.new", True, "new")
    assert "not yet counted" in capsys.readouterr().out


# --- the notebooks and the report ------------------------------------------------------------

CLAIM_CALL = re.compile(r"ab\.claim\(\s*[\"'](ch\d\d[a-z]?\.[a-z0-9_.]+)[\"']")


def claim_keys_in_notebooks() -> dict[str, str]:
    found = {}
    for path in NOTEBOOKS:
        for src in cells(path, "code"):
            for key in CLAIM_CALL.findall(src):
                assert key[:4] == path.name[:4], f"{path.name}: claim {key} must start with its chapter, {path.name[:4]}"
                assert key not in found, f"claim {key} appears in {found[key]} and {path.name}: keys are unique"
                found[key] = path.name
    return found


def test_every_claim_in_the_notebooks_was_counted_by_the_seed_check():
    """A claim gets into the book only through `make claims` (CONTRIBUTING.md)."""
    report = ab.book.claims.claim_report()
    counted = report.get("claims", {})
    missing = sorted(set(claim_keys_in_notebooks()) - set(counted))
    assert not missing, f"claims not in book/_claims_report.json (run `make claims`): {missing}"
    for key, entry in counted.items():
        assert entry["runs"] >= len(report["seeds"]) - sum(f["notebook"][:4] == key[:4] for f in report["failures"]), (
            f"{key}: counted in only {entry['runs']} runs")


def test_the_report_has_no_claims_the_notebooks_dropped():
    stale = sorted(set(ab.book.claims.claim_report().get("claims", {})) - set(claim_keys_in_notebooks()))
    assert not stale, f"the claims report lists claims no notebook makes any more (rerun `make claims`): {stale}"


def test_the_robustness_page_shows_the_report():
    table = (ROOT / "book" / "_claims.md").read_text(encoding="utf-8")
    for key in ab.book.claims.claim_report().get("claims", {}):
        assert f"`{key}`" in table, f"book/_claims.md misses {key}: rerun `make claims`"
    assert "_claims.md" in (ROOT / "book" / "robustness.md").read_text(encoding="utf-8")


# "the seed" alone means the project's source documents, which readers never saw; a random seed is
# "a seed", "the random seed", "the book's seed", "seed k", or "the seed check".
SOURCE_SENSE = re.compile(r"\bthe seed\b(?!(?:'s|’s)?\s*check|\s*=|\s*\d)|\bseed (?:chapter|text)\b", re.I)


@pytest.mark.parametrize("path", NOTEBOOKS + sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.name)
def test_no_page_calls_its_source_documents_the_seed(path):
    """Readers never saw the project's source documents: a page names them (d2l's chapter, a paper)."""
    if path.suffix == ".ipynb":
        texts = list(cells(path))
    else:
        texts = [path.read_text(encoding="utf-8")]
    hits = [m.group(0) for t in texts for m in SOURCE_SENSE.finditer(t)]
    assert not hits, f"{path.name} says {hits}: name the source (d2l's chapter, with a citation) instead"


def test_notebooks_use_the_book_seed_not_literal_seeds():
    literal = re.compile(r"seed_everything\(\s*\d|manual_seed\(\s*\d|\bseed\s*=\s*\d")
    for path in NOTEBOOKS:
        for src in cells(path, "code"):
            hit = literal.search(src)
            assert not hit, f"{path.name}: {hit.group(0)!r} pins a seed; use ab.seed_everything() or ab.book_seed() + k"


def test_a_partial_rerun_keeps_the_claims_of_notebooks_it_did_not_run(tmp_path):
    """Chapter 4's chapter and exercises page share the "ch04." prefix: rerunning one keeps the other's."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    claims_script = importlib.import_module("claims")
    chapter = tmp_path / "ch04_bahdanau.ipynb"
    chapter.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ['ab.claim("ch04.in_chapter", 1, "s")']}]}))
    exercises = tmp_path / "ch04_exercises.ipynb"
    exercises.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ['ab.claim("ch04.ex_in_exercises", 1, "s")']}]}))
    report = {"claims": {"ch04.in_chapter": {}, "ch04.ex_in_exercises": {}, "ch04.dropped_since": {}},
              "failures": [{"notebook": "ch04_bahdanau.ipynb", "seed": 0}, {"notebook": "ch04_exercises.ipynb", "seed": 1}]}
    kept = claims_script.merge_base(report, [chapter], notebooks=[chapter, exercises])
    assert list(kept["claims"]) == ["ch04.ex_in_exercises"]  # a claim no notebook makes any more is gone too
    assert kept["failures"] == [{"notebook": "ch04_exercises.ipynb", "seed": 1}]


def test_assert_trained_raises_unless_training_was_capped(monkeypatch, capsys):
    ab.assert_trained(True, "loss fell")
    ab.assert_trained(torch.tensor(True), "loss fell")
    with pytest.raises(AssertionError, match="loss fell by half"):
        ab.assert_trained(False, "loss fell by half")
    with pytest.raises(ValueError, match="statement"):
        ab.assert_trained(True, " ")
    with pytest.raises(ValueError, match="one truth value"):
        ab.assert_trained(torch.tensor([True, False]), "two")
    monkeypatch.setenv("ATTENTION_BOOK_MAX_STEPS", "2")
    ab.assert_trained(False, "loss fell by half")
    assert "capped at 2 steps" in capsys.readouterr().out
