"""Notebook code fits the page's column: every line a reader sees is at most 88 characters.

At 1280 px the site's column holds about 88 characters of code; a longer line puts a
scroll bar under its cell and hides its end. `ruff format` (settings in pyproject.toml's
[tool.ruff]) keeps code within the limit; strings and comments it cannot break are
split by hand. Cells tagged ``remove-cell`` or ``remove-input`` show no code on the
page (Jupyter Book drops it; the setup cell is one), so their lines are not counted.
Cells folded under "Show code" (``hide-input``, added to solutions by
scripts/editions.py) are counted: a click shows them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_CHARS = 88
HIDDEN_TAGS = {"remove-cell", "remove-input"}


def visible_code_lines(nb: dict) -> list[tuple[str, int, str]]:
    """(cell id, line number in the cell, line) of every code line the page shows."""
    lines = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        if HIDDEN_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        source = "".join(cell.get("source", ""))
        for number, line in enumerate(source.splitlines(), start=1):
            lines.append((cell.get("id", "?"), number, line))
    return lines


def too_long(nb: dict, limit: int = MAX_CHARS) -> list[str]:
    return [f"cell {cid} line {n} ({len(line)} chars): {line.strip()[:60]}..."
            for cid, n, line in visible_code_lines(nb) if len(line) > limit]


def test_the_counter_skips_removed_cells_and_counts_folded_ones():
    long = "x = " + "1 + " * 30 + "1"
    nb = {"cells": [
        {"cell_type": "code", "id": "a", "metadata": {"tags": ["remove-cell"]}, "source": [long]},
        {"cell_type": "code", "id": "b", "metadata": {"tags": ["remove-input"]}, "source": long},
        {"cell_type": "markdown", "id": "c", "metadata": {}, "source": long},
        {"cell_type": "code", "id": "d", "metadata": {"tags": ["hide-input"]}, "source": ["y = 1\n", long]},
        {"cell_type": "code", "id": "e", "metadata": {}, "source": "z = 2"},
    ]}
    assert len(long) > MAX_CHARS
    found = too_long(nb)
    assert len(found) == 1 and found[0].startswith("cell d line 2 ")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_visible_code_lines_fit_the_column(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = too_long(nb)
    assert not found, (
        f"{path.name}: {len(found)} visible code lines longer than {MAX_CHARS} characters "
        f"(run `.venv/bin/ruff format {path.relative_to(ROOT)}`, then split the strings "
        "and comments it leaves long):\n  " + "\n  ".join(found))
