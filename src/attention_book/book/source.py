"""Code on the page: the package's source of a class or function, shown where a chapter explains it.

``ab.show_source(ab.TransformerEncoderBlock)`` displays the code as it is in the
installed package — on the website it is read when the book is built, in Jupyter
and Colab when the cell runs — so the page can never drift from the code it
describes. The header names the file and lines and links to them in the book's
repository. Docstrings are left out (the chapter's prose is the explanation);
pass ``docstring=True`` to keep them.
"""

from __future__ import annotations

import html
import inspect
from pathlib import Path
from typing import Any

__all__ = ["show_source", "REPOSITORY_URL"]

# The repository of _config.yml (a test checks they agree): where a reader opens the file.
REPOSITORY_URL = "https://github.com/attention-book/attention-book"
BRANCH = "main"


def _without_docstrings(code: str) -> str:
    """``code`` without the docstrings of the classes and functions it defines."""
    import ast

    tree = ast.parse(code)
    drop: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
                    and isinstance(first.value.value, str):
                drop.update(range(first.lineno, first.end_lineno + 1))
    lines = code.splitlines()
    kept = [line for number, line in enumerate(lines, start=1) if number not in drop]
    return "\n".join(kept) + "\n"


class Source:
    """What :func:`show_source` displays: the code of one or more objects, with where it lives."""

    def __init__(self, parts: list[tuple[str, str, int, int]]):
        self.parts = parts  # (file under src/, code, first line, last line)

    def _header(self, path: str, first: int, last: int) -> tuple[str, str]:
        url = f"{REPOSITORY_URL}/blob/{BRANCH}/src/{path}#L{first}-L{last}"
        return f"src/{path}, lines {first}–{last}", url

    def _repr_html_(self) -> str:
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer

            render = lambda code: highlight(code, PythonLexer(), HtmlFormatter(nowrap=True))  # noqa: E731
        except ImportError:  # pragma: no cover - pygments comes with IPython
            render = html.escape
        blocks = []
        for path, code, first, last in self.parts:
            label, url = self._header(path, first, last)
            blocks.append(f'<div class="ab-source"><div class="ab-source-file">'
                          f'<a href="{html.escape(url)}">{html.escape(label)}</a></div>'
                          f'<div class="highlight"><pre>{render(code)}</pre></div></div>')
        return "".join(blocks)

    def __repr__(self) -> str:
        out = []
        for path, code, first, last in self.parts:
            label, url = self._header(path, first, last)
            out.append(f"# {label} ({url})\n{code}")
        return "\n".join(out)


def show_source(*objects: Any, docstring: bool = False) -> Source:
    """The package's source of each class or function in ``objects``, for a notebook to display."""
    if not objects:
        raise ValueError("show_source needs at least one class or function")
    parts = []
    for obj in objects:
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            raise ValueError(f"show_source shows classes and functions, got {type(obj).__name__}")
        module = inspect.getmodule(obj)
        if module is None or not module.__name__.startswith("attention_book"):
            raise ValueError(f"{obj.__qualname__} is not part of the attention_book package")
        lines, first = inspect.getsourcelines(obj)
        code = "".join(lines)
        if not docstring:
            code = _without_docstrings(code)
        package_root = Path(inspect.getfile(module)).resolve().parents[len(module.__name__.split(".")) - 1]
        path = Path(inspect.getfile(obj)).resolve().relative_to(package_root).as_posix()
        parts.append((path, code, first, first + len(lines) - 1))
    return Source(parts)

