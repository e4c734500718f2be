"""Each chapter from 4 to 10 writes its experiment on the page (issue 29).

A reader must be able to rebuild what a chapter trains from the cells they see: at
least one visible cell takes a training step by hand (``.backward()``) or runs the
experiment's loop around ``ab.fit``, and the experiment's hyper-parameters are one
configuration chosen by ``ab.sized`` and printed where it runs. Chapter 4 writes the
training loop by hand and shows that ``ab.fit`` runs the same steps; from chapter 5 on, a
visible ``ab.fit(...)`` call with its optimiser settings counts as a visible training run.
Chapter 6 trains nothing: its experiment is a measurement, whose loop must be visible.
"""

import ast
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
HIDDEN = {"remove-cell", "remove-input"}
CHAPTERS = sorted(p for p in NOTEBOOKS.glob("ch*_*.ipynb")
                  if "exercises" not in p.stem and 4 <= int(p.stem[2:4]) <= 10)


def visible_code(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = []
    for cell in cells:
        if cell["cell_type"] == "code" and not HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
            source = "".join(cell["source"])
            # IPython magics are not Python: blank them for the parser.
            out.append(re.sub(r"^\s*[%!].*$", "", source, flags=re.M))
    return out


def _calls(node: ast.AST, dotted: str) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) == dotted for n in ast.walk(node))


def steps_by_hand(tree: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward"
               for n in ast.walk(tree))


def loop_around_fit(tree: ast.AST) -> bool:
    return any(isinstance(n, (ast.For, ast.While)) and _calls(n, "ab.fit") for n in ast.walk(tree))


def prints_sized_config(tree: ast.AST) -> bool:
    return _calls(tree, "ab.sized") and _calls(tree, "print")


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_the_experiment_is_written_on_the_page(path):
    trees = [ast.parse(src) for src in visible_code(path)]
    if path.stem.startswith("ch06"):
        assert any(isinstance(n, ast.For) for t in trees for n in ast.walk(t)), \
            f"{path.name}: the measurement's loop is not in a visible cell"
    elif path.stem.startswith("ch04"):
        assert any(steps_by_hand(t) for t in trees), (
            f"{path.name}: no visible cell takes a training step by hand (.backward())")
    else:
        assert any(steps_by_hand(t) or loop_around_fit(t) or _calls(t, "ab.fit") for t in trees), (
            f"{path.name}: no visible cell takes a training step (.backward()) or loops around ab.fit")
    assert any(prints_sized_config(t) for t in trees), (
        f"{path.name}: no visible cell prints a configuration chosen by ab.sized")


def test_the_checks_can_fail():
    assert not steps_by_hand(ast.parse("loss = f(x)\nprint(loss)"))
    assert steps_by_hand(ast.parse("loss = f(x)\nloss.backward()"))
    assert not loop_around_fit(ast.parse("history = ab.fit(model, data)"))
    assert loop_around_fit(ast.parse("for h in heads:\n    ab.fit(model(h), data)"))
    assert not prints_sized_config(ast.parse("cfg = ab.sized(ci=1, full=2)"))
    assert prints_sized_config(ast.parse("cfg = ab.sized(ci=1, full=2)\nprint(cfg)"))
