"""Code on the page: the package's source of a class or function, shown where a chapter explains it.

``ab.show_source(ab.TransformerEncoderBlock)`` displays the code as it is in the
installed package — on the website it is read when the book is built, in Jupyter
and Colab when the cell runs — so the page can never drift from the code it
describes. The header names the file and lines and links to them in the book's
repository. Docstrings are left out (the chapter's prose is the explanation);
pass ``docstring=True`` to keep them.

The code is shown whole: no line is wider than the page's column of 88 characters
(a longer line would wrap to the left margin and lose its indentation). A snippet
that has longer lines is reformatted to 88 columns with ``ruff format`` when ruff is
installed; what is still long (a comment, a string), or everything where ruff is not
installed, is wrapped with a hanging indent inside its brackets, and comments are
refilled. The header then says the lines were re-wrapped. Coverage and linter
pragmas (``# pragma: no cover``, ``# noqa``) are tooling, not code: they are dropped.
"""

from __future__ import annotations

import html
import inspect
import io
import re
import subprocess
import textwrap
import tokenize
from pathlib import Path
from typing import Any

__all__ = ["show_source", "REPOSITORY_URL"]

# The repository of _config.yml (a test checks they agree): where a reader opens the file.
REPOSITORY_URL = "https://github.com/attention-book/attention-book"
BRANCH = "main"
# The widest line the page's column shows whole (the notebooks' limit too).
LINE_LIMIT = 88
_PRAGMA = re.compile(r"\s*#\s*(pragma: no cover|noqa|type: ignore)\b.*$")


def _without_pragmas(code: str) -> str:
    """``code`` without trailing coverage and linter pragmas (a line that held nothing else goes)."""
    lines = []
    for line in code.splitlines():
        if "#" in line and _PRAGMA.search(line):
            stripped = _PRAGMA.sub("", line)
            if not stripped.strip():
                continue
            line = stripped.rstrip()
        lines.append(line)
    return "\n".join(lines) + "\n"


def _ruff_format(code: str, limit: int) -> str | None:
    """``code`` formatted by ruff at ``limit`` columns, or None when ruff is not installed or
    cannot parse it."""
    try:
        from ruff.__main__ import find_ruff_bin

        ruff = find_ruff_bin()
    except (ImportError, FileNotFoundError):
        return None
    try:
        done = subprocess.run([str(ruff), "format", "--isolated", "--line-length", str(limit),
                               "--stdin-filename", "shown.py", "-"],
                              input=code, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def _breaks(code: str) -> dict[int, list[tuple[int, int]]]:
    """Per line (1-based), (column, bracket depth) of each place where the line may break inside
    brackets: after a comma or an opening bracket, and before a binary operator or keyword."""
    found: dict[int, list[tuple[int, int]]] = {}
    depth = 0
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return found
    for tok in tokens:
        (row, col), (_, end) = tok.start, tok.end
        if tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        if depth > 0 and (
                (tok.type == tokenize.OP and tok.string in {"+", "-", "*", "/", "//", "%", "@", "|", "&",
                                                             "==", "!=", "<", ">", "<=", ">=", "**"})
                or (tok.type == tokenize.NAME and tok.string in {"and", "or", "if", "else", "for", "in"})):
            found.setdefault(row, []).append((col, depth))
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
            found.setdefault(row, []).append((end, depth - 1))
        elif tok.type == tokenize.OP and tok.string == "," and depth > 0:
            found.setdefault(row, []).append((end, depth - 1))
    return found


def _string_pieces(body: str, is_f: bool, first_room: int, room: int) -> list[str]:
    """A string literal's body cut after spaces (never inside an f-string's braces or after a
    backslash) into pieces of at most ``first_room``, then ``room``, characters where it can be."""
    cuts, braces = [], 0
    for i, ch in enumerate(body):
        if is_f and ch in "{}":
            braces += 1 if ch == "{" else -1
        if ch == " " and braces == 0 and (i == 0 or body[i - 1] != "\\"):
            cuts.append(i + 1)
        elif is_f and braces == 0 and ch == "}" and i + 1 < len(body) and body[i + 1] != "}":
            cuts.append(i + 1)  # between a replacement field and what follows it
    pieces, last, width = [], 0, first_room
    while len(body) - last > width:
        fits = [c for c in cuts if last < c and c - last <= width]
        if not fits:
            break
        cut = max(fits)
        pieces.append(body[last:cut])
        last, width = cut, room
    pieces.append(body[last:])
    return pieces


def _split_strings(code: str, limit: int) -> str:
    """Split each one-line string literal that runs past ``limit`` (inside brackets, so the pieces
    concatenate) at spaces into pieces on lines of their own, hanging four spaces in."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return code
    lines = code.splitlines()
    depth, edits = 0, []  # (row, start col, end col, replacement)
    for tok in tokens:
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif (tok.type == tokenize.STRING and tok.start[0] == tok.end[0]
              and len(lines[tok.start[0] - 1]) > limit
              and tok.end[1] + 3 >= limit - (len(lines[tok.start[0] - 1]) - tok.end[1])):
            match = re.fullmatch(r"([A-Za-z]*)(['\"])(.*)\2", tok.string, re.S)
            if not match or match.group(3).startswith(match.group(2) * 2):
                continue  # triple-quoted or unusual: leave it
            prefix, quote, body = match.groups()
            line = lines[tok.start[0] - 1]
            at = tok.start[1]
            # outside brackets the pieces go in parentheses (they concatenate only inside them)
            opening, closing = ("", "") if depth > 0 else ("(", ")")
            if not line[:at].strip() or at + len(opening) <= 40:
                hang = " " * (at + len(opening))
            else:
                hang = line[: len(line) - len(line.lstrip())] + " " * 4
            # room for a piece: the line less its quotes, prefix and whatever follows the string
            after = len(line) - tok.end[1] + len(closing)
            first_room = limit - at - len(opening) - len(prefix) - 2 - after  # the first piece stays put
            room = limit - len(hang) - len(prefix) - 2 - after
            pieces = _string_pieces(body, "f" in prefix.lower(), first_room, room)
            if len(pieces) > 1:
                joined = (quote + "\n" + hang + prefix + quote).join(pieces)
                edits.append((tok.start[0], at, tok.end[1], opening + prefix + quote + joined + quote + closing))
    for row, start, end, text in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:start] + text + line[end:]
    return "\n".join(lines) + "\n"


def _hang(code: str, limit: int) -> str:
    """Wrap each line of ``code`` longer than ``limit``: a comment is refilled (a trailing one moves
    above its line), code breaks inside its brackets with a hanging indent of four more spaces."""
    breaks = _breaks(code)
    comments: dict[int, int] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.start[1]
    except (tokenize.TokenError, SyntaxError):
        pass
    out = []
    for row, line in enumerate(code.splitlines(), start=1):
        if len(line) <= limit:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        if row in comments:
            at = comments[row]
            text = line[at:].lstrip("#").strip()
            fill = textwrap.wrap(text, width=max(limit - len(indent) - 2, 20), break_long_words=False,
                                 break_on_hyphens=False)
            out.extend(f"{indent}# {piece}" for piece in fill)
            line = line[:at].rstrip()
            if not line.strip():
                continue
            if len(line) <= limit:
                out.append(line)
                continue
        hang = indent + " " * 4
        start, prefix, pieces = 0, "", []
        cuts = sorted(set(breaks.get(row, [])))
        while len(prefix) + len(line) - start > limit:
            fits = [(depth, -c) for c, depth in cuts
                    if c > start and len(prefix) + c - start <= limit and line[start:c].strip()]
            if not fits:
                break
            cut = -min(fits)[1]  # the outermost brackets first, then as far right as fits
            pieces.append(prefix + line[start:cut].rstrip())
            start = cut + len(line[cut:]) - len(line[cut:].lstrip(" "))
            prefix = hang
        pieces.append(prefix + line[start:])
        out.extend(pieces)
    return "\n".join(out) + "\n"


def fit_column(code: str, limit: int = LINE_LIMIT) -> tuple[str, bool]:
    """``code`` with no line longer than ``limit`` where it can be done, and whether it changed.

    The snippet keeps its own indentation (a method's source is indented); ruff formats it
    at the width left, and :func:`_hang` wraps what is still long."""
    if all(len(line) <= limit for line in code.splitlines()):
        return code, False
    body = textwrap.dedent(code)
    indent = next((line[: len(line) - len(line.lstrip())] for line in code.splitlines() if line.strip()), "")
    width = limit - len(indent)
    formatted = _ruff_format(body, width) or body
    if any(len(line) > width for line in formatted.splitlines()):
        formatted = _hang(_split_strings(formatted, width), width)
    return textwrap.indent(formatted, indent), True


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

    def __init__(self, parts: list[tuple[str, str, int, int]], rewrapped: list[bool] | None = None):
        self.parts = parts  # (file under src/, code, first line, last line)
        self.rewrapped = rewrapped or [False] * len(parts)  # lines re-wrapped to the column

    def _header(self, path: str, first: int, last: int, rewrapped: bool = False) -> tuple[str, str]:
        url = f"{REPOSITORY_URL}/blob/{BRANCH}/src/{path}#L{first}-L{last}"
        note = f" (long lines re-wrapped to {LINE_LIMIT} columns)" if rewrapped else ""
        return f"src/{path}, lines {first}–{last}{note}", url

    def _repr_html_(self) -> str:
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer

            render = lambda code: highlight(code, PythonLexer(), HtmlFormatter(nowrap=True))  # noqa: E731
        except ImportError:  # pragma: no cover - pygments comes with IPython
            render = html.escape
        blocks = []
        for (path, code, first, last), rewrapped in zip(self.parts, self.rewrapped):
            label, url = self._header(path, first, last, rewrapped)
            blocks.append(f'<div class="ab-source"><div class="ab-source-file">'
                          f'<a href="{html.escape(url)}">{html.escape(label)}</a></div>'
                          f'<div class="highlight"><pre>{_lines_html(code, render(code))}</pre></div></div>')
        return "".join(blocks)

    def __repr__(self) -> str:
        out = []
        for (path, code, first, last), rewrapped in zip(self.parts, self.rewrapped):
            label, url = self._header(path, first, last, rewrapped)
            out.append(f"# {label} ({url})\n{code}")
        return "\n".join(out)


def _lines_html(code: str, highlighted: str) -> str:
    """The highlighted code, one ``<span class="ab-line">`` per line carrying the line's indentation
    (``--indent``, in characters): where a narrow screen wraps a line, book.css hangs the rest
    under the line's own indentation instead of at the left margin. Pygments closes its spans
    at every line end, so each line's HTML stands alone."""
    lines = highlighted.rstrip("\n").split("\n")
    plain = code.rstrip("\n").split("\n")
    if len(lines) != len(plain):  # not one HTML line per code line: leave the code as it is
        return highlighted
    spans = []
    for text, markup in zip(plain, lines):
        indent = len(text) - len(text.lstrip(" "))
        # the indentation in a span of its own that never wraps (book.css): else a narrow
        # screen may break the line right after it and leave it blank
        markup = _LEADING_SPACES.sub(r'\1<span class="ab-indent">\2</span>', markup, count=1)
        spans.append(f'<span class="ab-line" style="--indent: {indent}ch">{markup}\n</span>')
    return "".join(spans)


_LEADING_SPACES = re.compile(r"^((?:<span[^>]*>(?:</span>)?)*)( +)")


def show_source(*objects: Any, docstring: bool = False) -> Source:
    """The package's source of each class or function in ``objects``, for a notebook to display."""
    if not objects:
        raise ValueError("show_source needs at least one class or function")
    parts, rewrapped = [], []
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
        code, changed = fit_column(_without_pragmas(code))
        package_root = Path(inspect.getfile(module)).resolve().parents[len(module.__name__.split(".")) - 1]
        path = Path(inspect.getfile(obj)).resolve().relative_to(package_root).as_posix()
        parts.append((path, code, first, first + len(lines) - 1))
        rewrapped.append(changed)
    return Source(parts, rewrapped)

