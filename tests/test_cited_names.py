"""Every name the book cites is real: each ``ab.X`` a reader sees resolves (issue 36).

A learner who reads "``ab.train_translator`` trains the model" and types it gets an
``AttributeError`` when the name moved into a layer long ago. This test reads

- every markdown cell (inline code and plain text alike) and every code cell of every
  notebook in notebooks/ (chapters and exercises), and
- every docstring in src/attention_book (module, class and function docstrings, by ast),

finds each cited dotted name whose head is ``ab``, ``attention_book`` or a module the
notebook imports by name (``from attention_book.experiments import offset_task`` makes
``offset_task.X`` a cited name; ``import attention_book.models.attention as attn`` makes
``attn.X`` one), and resolves it attribute by attribute with ``getattr`` (importing a
submodule where the attribute is a module not yet imported). A name that does not
resolve is listed with its file, cell (or docstring line) and the dotted name.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "attention_book"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ALWAYS = {"ab": "attention_book", "attention_book": "attention_book"}
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def imported_modules(code: str) -> dict[str, str]:
    """Alias -> module path for every ``attention_book`` module that ``code`` imports by name."""
    aliases: dict[str, str] = {}
    for tree in _parse_pieces(code):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "attention_book":
                        if alias.asname:
                            aliases[alias.asname] = alias.name
                        else:
                            aliases["attention_book"] = "attention_book"
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.split(".")[0] != "attention_book":
                    continue
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if _is_module(full):
                        aliases[alias.asname or alias.name] = full
    return aliases


def _parse_pieces(code: str) -> list[ast.AST]:
    """Parse a cell's code; IPython magics and shell lines become comments (line numbers kept)."""
    lines = [("#" + line) if line.lstrip().startswith(("%", "!")) else line
             for line in code.splitlines()]
    try:
        return [ast.parse("\n".join(lines))]
    except SyntaxError:
        # a cell that is not valid Python as a whole: parse what its import lines say
        trees = []
        for line in lines:
            try:
                trees.append(ast.parse(line.strip()))
            except SyntaxError:
                pass
        return trees


def _is_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def cited_names(text: str, aliases: dict[str, str]) -> list[tuple[int, str]]:
    """(line number, dotted name) of every ``alias.X[.Y...]`` in ``text``."""
    heads = "|".join(sorted(map(re.escape, aliases), key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w./\\-])({heads})((?:\.{IDENT})+)")
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in pattern.finditer(line):
            found.append((number, match.group(1) + match.group(2)))
    return found


def resolves(dotted: str, aliases: dict[str, str]) -> bool:
    """Whether ``dotted`` (its head an alias) names a real object, attribute by attribute."""
    head, *parts = dotted.split(".")
    obj = importlib.import_module(aliases[head])
    for part in parts:
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        if isinstance(obj, types.ModuleType):
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
                continue
            except ImportError:
                pass
        return isinstance(obj, type) and part in _instance_attributes(obj)
    return True


def _instance_attributes(cls: type) -> set[str]:
    """Names a class's methods assign on ``self`` (``self.x = ...``): real attributes of its instances."""
    names = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] != "attention_book":
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"):
                names.add(node.attr)
    return names


def notebook_problems(nb: dict, name: str) -> list[str]:
    """(file, cell, name) of every cited name in a notebook that does not resolve."""
    code = "\n".join("".join(c.get("source", "")) for c in nb["cells"] if c["cell_type"] == "code")
    aliases = {**ALWAYS, **imported_modules(code)}
    problems = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] not in ("markdown", "code"):
            continue
        text = "".join(cell.get("source", ""))
        for number, dotted in cited_names(text, aliases):
            if not resolves(dotted, aliases):
                where = f"cell {index} ({cell['cell_type']}, id {cell.get('id', '?')}) line {number}"
                problems.append(f"{name}: {where}: {dotted}")
    return problems


def docstrings(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of each module, class and function docstring in a Python file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                found.append((body[0].lineno, body[0].value.value))
    return found


def docstring_problems(path: Path) -> list[str]:
    """(file, line, name) of every cited name in a file's docstrings that does not resolve."""
    problems = []
    for first, text in docstrings(path):
        aliases = {**ALWAYS, **imported_modules(_import_lines(text))}
        for number, dotted in cited_names(text, aliases):
            if not resolves(dotted, aliases):
                problems.append(f"{path.relative_to(ROOT)}: line {first + number - 1}: {dotted}")
    return problems


def _import_lines(text: str) -> str:
    """The ``import``/``from ... import`` lines a docstring's example writes (prompts removed)."""
    lines = []
    for line in text.splitlines():
        line = line.strip().removeprefix(">>>").strip().strip("`")
        if re.match(r"(from\s+attention_book[\w.]*\s+import\s|import\s+attention_book)", line):
            lines.append(line)
    return "\n".join(lines)


def test_the_reader_catches_a_name_that_does_not_exist(tmp_path):
    nb = {"cells": [
        {"cell_type": "code", "id": "a", "metadata": {},
         "source": "import attention_book as ab\nfrom attention_book.experiments import offset_task\n"},
        {"cell_type": "markdown", "id": "b", "metadata": {},
         "source": "Call `ab.fit` (real), then ab.no_such_thing, then `offset_task.not_there(...)`."},
        {"cell_type": "code", "id": "c", "metadata": {},
         "source": "x = ab.MultiHeadAttention(num_hiddens=8, num_heads=2)\n"
                   "y = ab.models.attention.masked_softmax\nz = ab.gone_name(1)  # lab.py, x.ab.q\n"},
    ]}
    problems = notebook_problems(nb, "fake.ipynb")
    assert [p.rsplit(": ", 1)[1] for p in problems] == [
        "ab.no_such_thing", "offset_task.not_there", "ab.gone_name"]
    assert "cell 1 (markdown, id b) line 1" in problems[0]
    module = tmp_path / "fake.py"
    module.write_text('"""Use ``ab.fit`` and ``attention_book.models.attention.nope``."""\n'
                      'def f():\n    """See `ab.MultiHeadAttention.forward` and `ab.Missing`."""\n')
    found = []
    for first, text in docstrings(module):
        for number, dotted in cited_names(text, ALWAYS):
            if not resolves(dotted, ALWAYS):
                found.append((first + number - 1, dotted))
    assert found == [(1, "attention_book.models.attention.nope"), (3, "ab.Missing")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_name_a_notebook_cites_exists(path):
    problems = notebook_problems(json.loads(path.read_text(encoding="utf-8")), path.name)
    assert not problems, f"{len(problems)} cited names do not resolve:\n  " + "\n  ".join(problems)


def test_every_name_a_docstring_cites_exists():
    problems = [p for path in sorted(PACKAGE.rglob("*.py")) for p in docstring_problems(path)]
    assert not problems, f"{len(problems)} cited names do not resolve:\n  " + "\n  ".join(problems)
