"""Bookkeeping stays out of sight: at most 5% of a chapter's visible code is claims, glue or asserts.

The seed check's claims (``ab.claim``), the numbers glued into the prose (``ab.glue``,
``ab.glue_counts``), the training guards (``ab.assert_trained``) and asserts serve the
build, not the reader; they go into cells tagged ``remove-cell`` (issue 36). In each
chapter notebook (``chNN_<slug>.ipynb``, not the exercises), among the non-blank lines of
the code cells the page shows (the cells tests/test_notebook_layout.py counts: not tagged
``remove-cell`` or ``remove-input``), the lines spanned by a statement that is an
``assert`` or a call to one of those functions or to ``torch.testing.assert_close`` (the
one visible check of the page's own class against the package's) are at most 5%. Lines are
counted by the statements' ast line spans, so a claim written over eight lines counts eight.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from test_notebook_layout import HIDDEN_TAGS, visible_code_lines

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted(p for p in (ROOT / "notebooks").glob("ch[0-9][0-9]_*.ipynb")
                  if not p.stem.endswith("_exercises"))
LIMIT = 0.05
BOOKKEEPING = {"claim", "glue", "glue_counts", "assert_trained", "assert_close"}

assert HIDDEN_TAGS == {"remove-cell", "remove-input"}


def _called_name(node: ast.AST) -> str | None:
    """The last name of a call's function (``ab.glue`` -> ``glue``), or None for a non-call."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def bookkeeping_lines(source: str) -> set[int]:
    """Line numbers (1-based, in ``source``) spanned by assert statements and bookkeeping calls."""
    # IPython magics and shell lines are not Python; blank them so line numbers stay put
    lines = ["" if re.match(r"\s*[%!]", line) else line for line in source.splitlines()]
    tree = ast.parse("\n".join(lines))
    found: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        value = getattr(node, "value", None)
        if isinstance(node, ast.Assert) or (
                isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign))
                and _called_name(value) in BOOKKEEPING):
            found.update(range(node.lineno, node.end_lineno + 1))
    return found


def bookkeeping_share(nb: dict) -> tuple[int, int]:
    """(bookkeeping lines, non-blank visible code lines) of a notebook."""
    visible = [(cid, n, line) for cid, n, line in visible_code_lines(nb) if line.strip()]
    cells = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and not HIDDEN_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            cells[cell.get("id", "?")] = bookkeeping_lines("".join(cell.get("source", "")))
    spent = sum(1 for cid, n, _ in visible if n in cells.get(cid, ()))
    return spent, len(visible)


def test_the_counter_counts_bookkeeping_spans_in_visible_cells_only():
    nb = {"cells": [
        {"cell_type": "code", "id": "a", "metadata": {"tags": ["remove-cell"]},
         "source": "ab.claim(\n    'hidden',\n    True,\n)\n"},
        {"cell_type": "code", "id": "b", "metadata": {},
         "source": "%matplotlib inline\nx = 1\n\nab.glue(\n    'x', x\n)\nassert x == 1\n"
                   "for h in (1, 2):\n    ok = ab.claim('h', h > 0)\n"},
        {"cell_type": "code", "id": "c", "metadata": {},
         "source": "torch.testing.assert_close(a, b)\ny = f(x)\nprint(y)\nz = y\n"},
        {"cell_type": "markdown", "id": "d", "metadata": {}, "source": "ab.claim(x)"},
    ]}
    # visible non-blank: b has 8, c has 4; bookkeeping: glue 3 + assert 1 + claim 1 + assert_close 1
    assert bookkeeping_share(nb) == (6, 12)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_bookkeeping_is_at_most_five_percent_of_visible_code(path):
    spent, total = bookkeeping_share(json.loads(path.read_text(encoding="utf-8")))
    share = spent / max(total, 1)
    assert share <= LIMIT, (
        f"{path.name}: {spent} of {total} visible code lines ({100 * share:.1f}%) are claims, "
        f"glue or asserts (limit {100 * LIMIT:.0f}%): move them into cells tagged remove-cell")
