"""The full-size smoke run (`make test-smoke`) skips SMOKE_SAME_AS_CI, the notebooks whose full
size is their ci size: `make test-notebooks` already executes exactly that configuration, with
every training run to its end. This keeps the list honest: a listed notebook that gains a size
setting, an explorer or a data set (which the smoke run reads another way) fails here, and so
does a package function that starts reading the size itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = ROOT / "Makefile"
PACKAGE = ROOT / "src" / "attention_book"

# What makes a notebook run differently at the full size or in the smoke run: the size switch
# (and the package's config names around it), an explorer or live view (drawn live in the smoke
# run, as static frames in the ci run) and data read from disk or the network (the smoke run
# drops ATTENTION_BOOK_DATA).
SIZE_DEPENDENT = re.compile(
    r"\bsized\(|experiment_size|is_full|ATTENTION_BOOK_|\bexplore\(|\blive\b|\.live_|load_(?!state_dict)\w+\(|data_dir|fetch\(")
# The only package modules that may read the size: config.py defines it, claims.py records it.
SIZE_READERS = {"core/config.py", "book/claims.py"}


def smoke_skips(makefile: Path = MAKEFILE) -> list[str]:
    found = re.search(r"^SMOKE_SAME_AS_CI\s*:?=(.*)$", makefile.read_text(encoding="utf-8"), re.MULTILINE)
    assert found, "the Makefile defines no SMOKE_SAME_AS_CI"
    return found.group(1).split()


def notebook_code(name: str) -> str:
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def test_the_size_check_catches_each_kind():
    for line in ['steps = ab.sized(ci=10, full=100)', 'ab.explore(f, name="ch05.x")',
                 'corpus = ab.load_corpus()', 'print(ab.experiment_size())']:
        assert SIZE_DEPENDENT.search(line), line
    assert not SIZE_DEPENDENT.search("history = ab.fit(model, batches, loss, epochs=6)")


@pytest.mark.parametrize("name", smoke_skips())
def test_a_notebook_the_smoke_run_skips_runs_alike_at_both_sizes(name):
    assert (ROOT / "notebooks" / f"{name}.ipynb").is_file(), f"SMOKE_SAME_AS_CI names {name}, no such notebook"
    found = sorted({m.group(0) for m in SIZE_DEPENDENT.finditer(notebook_code(name))})
    assert not found, (
        f"{name} uses {found}: its full-size run may differ from the ci run; take it out of "
        "SMOKE_SAME_AS_CI in the Makefile so the smoke run executes it")


def test_only_config_and_claims_read_the_size():
    """A package function that picks its defaults by size would make a listed notebook's full-size
    run differ from its ci run without a change to the notebook."""
    readers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if re.search(r"\bsized\(|experiment_size\(|is_full\(|SIZE_ENV",
                                  p.read_text(encoding="utf-8")))
    assert set(readers) <= SIZE_READERS, (
        f"{sorted(set(readers) - SIZE_READERS)} read the experiment size: check that no notebook in "
        "SMOKE_SAME_AS_CI calls them, then add them here")
