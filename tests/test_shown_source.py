"""A class a chapter shows must fit on a page, and be shown whole.

At most 80 lines without its docstring: the classes a reader sees are those a notebook
prints with ``ab.show_source(...)`` and those a notebook cell defines itself. A class that
grew every later chapter's options belongs split: the chapter's core class, and
subclasses where the options are taught.

Whole: ``ab.show_source`` shows no line wider than the column's 88 characters (a longer
line would wrap to the left margin on the page and lose its indentation). It reformats a
snippet with long lines (ruff where installed, else a hanging-indent wrap) and the result
is still the same Python.
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


def test_the_scan_finds_shown_and_defined_classes(tmp_path):
    """The scan is not vacuous: it finds a class shown with ab.show_source and one a cell defines."""
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [],
              "source": "%matplotlib inline\nab.show_source(ab.MultiHeadAttention, ab.masked_softmax)\n"},
             {"cell_type": "code", "metadata": {}, "outputs": [], "source": "class Mine:\n    x = 1\n"}]
    path = tmp_path / "ch99_scan.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    found = shown_classes(path)
    assert [where for where, _ in found] == ["cell 0: ab.show_source(ab.MultiHeadAttention)", "cell 1: class Mine"]
    assert found[0][1] > 10 and found[1][1] == 2


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


LONG_SNIPPET = (
    "    def forward(self, queries, keys, values, valid_lens=None, *, attention_mask=None, causal=False):\n"
    "        # a comment that is far too long to fit in the column of the page, so it must be refilled by the wrap\n"
    "        scores = self.combine(queries, keys, values, valid_lens, attention_mask, causal, extra_argument=1)\n"
    "        if scores is None:  # pragma: no cover - defensive\n"
    "            raise ValueError(f\"the scores of {type(self).__name__} came out empty for queries of shape {queries.shape}\")\n"
    "        return scores\n"
)


def _compiles(code: str) -> None:
    import textwrap

    compile("class Shown:\n" + textwrap.indent(textwrap.dedent(code), "    "), "<shown>", "exec")


@pytest.mark.parametrize("ruff", [True, False], ids=["ruff", "without-ruff"])
def test_a_snippet_with_long_lines_is_reformatted_to_the_column(monkeypatch, ruff):
    from attention_book.book import source

    if not ruff:
        monkeypatch.setattr(source, "_ruff_format", lambda code, limit: None)
    code, changed = source.fit_column(source._without_pragmas(LONG_SNIPPET))
    assert changed and "pragma" not in code
    lines = code.splitlines()
    assert max(map(len, lines)) <= source.LINE_LIMIT, code
    _compiles(code)
    body = [line for line in lines[1:] if line.strip()]
    assert all(len(line) - len(line.lstrip()) >= 4 for line in body), f"a line lost its indentation:\n{code}"
    assert "        # refilled by the wrap" in code or "        # must be refilled by the wrap" in code, code
    assert source.fit_column("def f():\n    return 1\n") == ("def f():\n    return 1\n", False)


def test_shown_code_fits_the_column_and_says_when_it_was_rewrapped():
    from attention_book.book.source import LINE_LIMIT

    shown = ab.show_source(ab.MultiHeadAttention, ab.masked_softmax, ab.TransformerEncoderBlock)
    for (path, code, first, last), rewrapped in zip(shown.parts, shown.rewrapped):
        assert max(map(len, code.splitlines())) <= LINE_LIMIT, path
        _compiles(code)
        assert ("re-wrapped" in shown._header(path, first, last, rewrapped)[0]) == rewrapped
    page = shown._repr_html_()
    assert page.count('class="ab-line"') == sum(len(code.rstrip("\n").split("\n")) for _, code, _, _ in shown.parts)
    assert 'style="--indent: 8ch"' in page, "each line carries its indentation for the hanging wrap"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_shown_source_fits_the_column(notebook):
    from attention_book.book.source import LINE_LIMIT

    long = []
    for index, tree, _ in _code_cells(notebook):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "show_source":
                objects = [obj for obj in map(_resolve, node.args) if obj is not None]
                for path, code, _, _ in ab.show_source(*objects).parts if objects else []:
                    long += [f"cell {index}: {path}: {line.strip()[:50]}"
                             for line in code.splitlines() if len(line) > LINE_LIMIT]
    assert not long, f"{notebook.name}: shown lines over {LINE_LIMIT} characters: {long}"
