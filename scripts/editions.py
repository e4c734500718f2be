"""Notebook editions: what the public site, the instructor edition and students see.

Cell tags (see CONTRIBUTING.md):

``instructor``  markdown with a worked answer — instructors only.
``solution``    code whose part between ``# BEGIN SOLUTION`` and ``# END SOLUTION``
                is the worked solution (the whole cell when it has no markers).
``checker``     a cell that calls an autograder; always kept.

Editions:

* ``instructor``: everything, as committed.
* ``public`` (the website): instructor answers removed; solution code folded
  behind a "show code" toggle (the outputs stay, so the page shows what the
  solution produces).
* ``student``: instructor answers removed; every solution replaced by
  ``# YOUR CODE HERE`` and ``raise NotImplementedError``; outputs cleared.
"""

from __future__ import annotations

import copy
import re

BEGIN = re.compile(r"^(?P<indent>[ \t]*)#\s*BEGIN SOLUTION\s*$")
END = re.compile(r"^[ \t]*#\s*END SOLUTION\s*$")
EDITIONS = ("instructor", "public", "student")


def tags(cell: dict) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def scaffold(code: str) -> str:
    """Replace each BEGIN/END SOLUTION block by a ``raise NotImplementedError`` stub.

    Without markers the whole cell becomes the stub. Unbalanced markers raise
    ``ValueError`` (a solution must never leak into the student edition).
    """
    lines = code.split("\n")
    if not any(BEGIN.match(line) for line in lines):
        if any(END.match(line) for line in lines):
            raise ValueError("'# END SOLUTION' without '# BEGIN SOLUTION'")
        return "# YOUR CODE HERE\nraise NotImplementedError"
    out, inside, indent = [], False, ""
    for number, line in enumerate(lines, start=1):
        begin = BEGIN.match(line)
        if begin:
            if inside:
                raise ValueError(f"line {number}: nested '# BEGIN SOLUTION'")
            inside, indent = True, begin.group("indent")
            out.append(f"{indent}# YOUR CODE HERE")
            out.append(f"{indent}raise NotImplementedError")
        elif END.match(line):
            if not inside:
                raise ValueError(f"line {number}: '# END SOLUTION' without '# BEGIN SOLUTION'")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("'# BEGIN SOLUTION' without a matching '# END SOLUTION'")
    return "\n".join(out)


def solution_text(code: str) -> list[str]:
    """The lines of ``code`` that are solution (inside the markers, or all of it)."""
    lines = code.split("\n")
    if not any(BEGIN.match(line) for line in lines):
        return [line for line in lines if line.strip()]
    inside, found = False, []
    for line in lines:
        if BEGIN.match(line):
            inside = True
        elif END.match(line):
            inside = False
        elif inside and line.strip():
            found.append(line)
    return found


def _add_tag(cell: dict, tag: str) -> None:
    meta = cell.setdefault("metadata", {})
    meta["tags"] = sorted(set(meta.get("tags", [])) | {tag})


def make_edition(nb: dict, edition: str) -> dict:
    """A copy of notebook ``nb`` (nbformat JSON as a dict) for ``edition``."""
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, got {edition!r}")
    nb = copy.deepcopy(nb)
    if edition == "instructor":
        return nb
    cells = []
    for cell in nb.get("cells", []):
        cell_tags = tags(cell)
        if "instructor" in cell_tags:
            continue
        if "solution" in cell_tags and cell.get("cell_type") == "code":
            if edition == "public":
                _add_tag(cell, "hide-input")
            else:
                cell["source"] = scaffold(source(cell))
        if edition == "student" and cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
    nb["cells"] = cells
    if edition == "student":
        nb.get("metadata", {}).pop("widgets", None)
    return nb
