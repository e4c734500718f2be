"""A class a chapter shows must fit on a page: at most 80 lines without its docstring.

The classes a reader sees are those a notebook prints with ``ab.show_source(...)`` and
those a notebook cell defines itself. A class that grew every later chapter's options
belongs split: the chapter's core class, and subclasses where the options are taught.
"""

import ast
import inspect
import json
from pathlib import Path

import pytest

import attention_book as ab
from attention_book.book.source import _without_docstrings

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("ch*.ipynb"))
MAX_LINES = 80


def _code_cells(path: Path):
    for index, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            # IPython lines (%pip, !ls) are not Python: a `pass` in their place keeps blocks and line numbers
            lines = [line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!"))
                     else line for line in source.splitlines()]
            yield index, ast.parse("\n".join(lines)), "\n".join(lines)


def _resolve(node: ast.expr):
    """``ab.Name`` or ``ab.Name.method`` as the object it names (None for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not (isinstance(node, ast.Name) and node.id == "ab" and parts):
        return None
    obj = ab
    for name in reversed(parts):
        obj = getattr(obj, name)
    return obj


def shown_classes(path: Path) -> list[tuple[str, int]]:
    """(where, lines without docstrings) of every class the notebook shows or defines."""
    found = []
    for index, tree, text in _code_cells(path):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "show_source":
                for arg in node.args:
                    obj = _resolve(arg)
                    if inspect.isclass(obj):
                        code = ab.show_source(obj).parts[0][1]
                        found.append((f"cell {index}: ab.show_source(ab.{obj.__qualname__})",
                                      len(code.splitlines())))
            elif isinstance(node, ast.ClassDef):
                code = _without_docstrings(ast.get_source_segment(text, node))
                found.append((f"cell {index}: class {node.name}", len(code.splitlines())))
    return found


def test_the_scan_finds_what_chapter_5_shows():
    """The scan is not vacuous: chapter 5 prints its MultiHeadAttention and chapter 7 its blocks."""
    ch05 = [where for where, _ in shown_classes(Path(NOTEBOOKS[0]).with_name("ch05_multihead_attention.ipynb"))]
    assert any("ab.show_source(ab.MultiHeadAttention)" in where for where in ch05)
    ch07 = [where for where, _ in shown_classes(Path(NOTEBOOKS[0]).with_name("ch07_transformer.ipynb"))]
    assert any("TransformerDecoderBlock" in where for where in ch07)


def test_a_long_class_is_caught(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES + 1))
    cell = {"cell_type": "code", "source": f'class Long:\n    """doc"""\n{body}\n', "metadata": {}, "outputs": []}
    path = tmp_path / "ch99_long.ipynb"
    path.write_text(json.dumps({"cells": [cell]}))
    assert shown_classes(path) == [("cell 0: class Long", MAX_LINES + 2)]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_shown_class_fits_on_a_page(notebook):
    long = [f"{where} has {n} lines" for where, n in shown_classes(notebook) if n > MAX_LINES]
    assert not long, f"{notebook.name}: classes over {MAX_LINES} lines without docstrings: {long}"
