"""Chapter 10's exercises page keeps the promises its own text makes (issue 36).

A fresh learner (8/10) found that the page's size banner promised "each ab.sized(ci=..., full=...)
in the code shows which" while Exercise 10.8's sizes were changed in a hidden cell, and that
Exercise 10.1's scaffold had no runnable cell after it although the page says "replace the marked
part and run the cells below it" (its check sat inside the folded solution). Checked here on the
committed notebook:

- every ``ab.sized`` call of the page is in a cell the website shows;
- every function that an ungraded scaffold leaves to write is called by a cell the website shows
  after its solution, so the learner's version gets run and printed.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "notebooks" / "ch10_exercises.ipynb"
HIDDEN = {"remove-cell", "remove-input", "hide-cell", "hide-input"}


def _code_cells() -> list[tuple[str, set[str]]]:
    nb = json.loads(PAGE.read_text(encoding="utf-8"))
    return [("".join(c["source"]), set(c["metadata"].get("tags", [])))
            for c in nb["cells"] if c["cell_type"] == "code"]


def _called(code: str) -> set[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    return {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def test_every_sized_call_is_shown():
    cells = _code_cells()
    sized = [tags for code, tags in cells if "sized(" in code]
    assert sized, "the page picks nothing by size: its banner would say so"
    assert all(not tags & HIDDEN for tags in sized), "an ab.sized call is in a cell the website hides"


def test_every_scaffold_function_is_run_by_a_shown_cell_after_it():
    cells = _code_cells()
    for i, (code, tags) in enumerate(cells):
        if "solution" not in tags or "graded" in tags:
            continue
        functions = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
        for name in functions:
            later = [c for c, t in cells[i + 1:] if not t & (HIDDEN | {"solution"})]
            assert any(name in _called(c) for c in later), f"no shown cell after its solution runs {name}"
