"""The book's prose is its own: no run of 12 or more words in a row shared with the source
documents (../shared/seeds/), maths and code names aside."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEEDS = Path(os.environ.get("ATTENTION_BOOK_SEEDS", ROOT.parent / "shared" / "seeds"))
RUN = 12


def words(text: str) -> list[str]:
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)  # display maths
    text = re.sub(r"\$[^$]*\$", " ", text)                # inline maths
    text = re.sub(r"`[^`]*`", " ", text)                   # code names
    return re.findall(r"[a-z0-9']+", text.lower())


def prose() -> dict[str, list[str]]:
    """Every markdown text of the book: notebook markdown cells and book/*.md pages."""
    texts = {str(p.relative_to(ROOT)): [p.read_text(encoding="utf-8")] for p in sorted((ROOT / "book").glob("*.md"))}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        texts[str(path.relative_to(ROOT))] = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    return texts


def shared_runs(text: str, grams: set[tuple[str, ...]]) -> list[str]:
    w, found, i = words(text), [], 0
    while i <= len(w) - RUN:
        if tuple(w[i:i + RUN]) in grams:
            j = i + RUN
            while j < len(w) and tuple(w[j - RUN + 1:j + 1]) in grams:
                j += 1
            found.append(" ".join(w[i:j]))
            i = j
        else:
            i += 1
    return found


def test_shared_runs_are_found():
    grams = {tuple("one two three four five six seven eight nine ten eleven twelve".split())}
    assert shared_runs("Count: one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve!", grams)
    assert not shared_runs("one two three four five six seven eight nine ten eleven", grams)
    assert not shared_runs("$one two three four five six seven eight nine ten eleven twelve$", grams)


def test_no_prose_run_of_twelve_words_comes_from_the_sources():
    if not SEEDS.is_dir():
        pytest.skip(f"the source documents are not beside the repository ({SEEDS}); they are not part of it")
    source = " ".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(SEEDS.glob("*.txt")))
    sw = words(source)
    grams = {tuple(sw[i:i + RUN]) for i in range(len(sw) - RUN + 1)}
    copied = [f"{where}: {run}" for where, texts in prose().items() for t in texts for run in shared_runs(t, grams)]
    assert not copied, "prose shared word for word with the source documents:\n  " + "\n  ".join(copied)
