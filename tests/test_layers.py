"""The package's layers (issue 29): imports run one way only.

core <- data <- models <- experiments, and the book's machinery (book/) on top. A building
block (models/, data/) never imports an experiment or the book's machinery; core imports no
other layer. The test reads the import statements of every module, including imports inside
functions, so a late import cannot hide a wrong-way arrow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attention_book as ab

ROOT = Path(ab.__file__).parent
ALLOWED = {
    "core": {"core"},
    "data": {"core", "data"},
    "models": {"core", "data", "models"},
    "experiments": {"core", "data", "models", "experiments"},
    "book": {"core", "data", "models", "experiments", "book", "<top level>"},
}


def imported_layers(path: Path) -> list[tuple[int, str]]:
    """(line, layer) for every import of the package's own modules in ``path``."""
    layer = path.parent.name
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] != "attention_book":
                    continue
                parts = parts[1:]
            elif node.level == 1:
                parts = [layer] + (node.module or "").split(".")
            else:  # from ..x import y: x is a layer (or the top level, for level 2 with no module)
                parts = (node.module or "").split(".") if node.module else []
            if not parts or not parts[0]:
                found.append((node.lineno, "<top level>"))
            else:
                found.append((node.lineno, parts[0]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "attention_book":
                    found.append((node.lineno, parts[1] if len(parts) > 1 else "<top level>"))
    return found


MODULES = sorted(p for layer in ALLOWED for p in (ROOT / layer).glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_imports_run_down_the_layers(path):
    layer = path.parent.name
    wrong = [f"line {line}: imports {target}" for line, target in imported_layers(path)
             if target not in ALLOWED[layer]]
    assert not wrong, f"{layer}/{path.name} reaches outside its layer {sorted(ALLOWED[layer])}: {wrong}"


def test_every_module_is_in_a_layer():
    loose = [p.name for p in ROOT.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules outside the layer folders: {loose}"
    assert len(MODULES) > 30


def test_the_reader_catches_a_wrong_way_import(tmp_path):
    fake = tmp_path / "models" / "bad.py"
    fake.parent.mkdir()
    fake.write_text("from ..experiments.translation import train_translator\n"
                    "def f():\n    from ..book import explorer\n    import attention_book as ab\n")
    assert [t for _, t in imported_layers(fake)] == ["experiments", "book", "<top level>"]
