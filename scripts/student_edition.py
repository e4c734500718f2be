"""Build the student edition of the notebooks (standard library only: no torch needed).

Usage: python3 scripts/student_edition.py [SRC_DIR] [DEST_DIR]   (default: notebooks student)

Every notebook in SRC_DIR is written to DEST_DIR with instructor answers removed,
each solution replaced by a ``# YOUR CODE HERE`` stub, the code that needs an
unfinished stub guarded so that "Run All" reaches the last cell (see
scripts/editions.py), checker cells kept and outputs cleared. DEST_DIR is
ignored by git. The build fails (exit 1) if any solution line would survive.

The website offers each exercises page's *practice notebook* (book/_ext/book_site.py writes
them with :func:`build_practice`): its student edition without the hidden cells that only
check the book's own solutions (:func:`drop_checks`).
"""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from editions import (  # noqa: E402
    _bound_here, _parse, _used, is_graded, load_solutions, make_edition, solution_text, source, tags)


def leaked_lines(original: dict, student: dict, solutions: dict[str, str] | None = None) -> list[str]:
    """Solution lines of ``original`` (and of its graded ``solutions``, by cell id) that still
    appear in ``student`` code cells, and instructor answers that still appear anywhere."""
    student_code = "\n".join(source(c) for c in student["cells"])
    leaks = []
    for cell in original["cells"]:
        if is_graded(cell):  # the committed cell is the scaffold; its solution is kept apart
            own = [s for s in solution_text((solutions or {}).get(cell.get("id", ""), "")) if len(s.strip()) > 12]
            outside = "\n".join(source(c) for c in original["cells"] if c is not cell)
            leaks += [s for s in own if s.strip() in student_code and s.strip() not in outside]
        elif "solution" in tags(cell) and cell.get("cell_type") == "code":
            own = [s for s in solution_text(source(cell)) if len(s.strip()) > 12]
            # A line that the scaffold keeps elsewhere in the notebook is not a leak of this solution.
            outside = "\n".join(source(c) for c in original["cells"] if c is not cell and "solution" not in tags(c))
            leaks += [s for s in own if s.strip() in student_code and s.strip() not in outside]
        if "instructor" in tags(cell) and source(cell).strip() and source(cell).strip() in student_code + "\n".join(
            source(c) for c in student["cells"]
        ):
            leaks.append(source(cell).strip()[:60])
    return leaks


def build(src_dir: Path, dest_dir: Path, names: list[str] | None = None) -> list[Path]:
    """Write the student edition of every notebook in ``src_dir`` (or of those ``names``): the
    same notebook as the website's practice copy (:func:`practice_edition`), so the hidden checks
    of the book's own answers are gone from both (a fresh instructor found ch01's hidden check
    holding the one-line answer of exercise 11.1.2, and ch05/ch06's ``ab.claim`` and
    ``ab.assert_trained`` run on a student's own results)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src_dir.glob("*.ipynb")):
        if names is not None and path.name not in names:
            continue
        student = practice_edition(json.loads(path.read_text(encoding="utf-8")), path.name)
        out = dest_dir / path.name
        out.write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(out)
    return written


CHECK_CALLS = ("claim", "glue", "glue_counts", "assert_trained", "assert_close", "assert_equal")


def _only_checks(node: ast.AST) -> bool:
    """Does top-level statement ``node`` only check or record a result: an ``assert``, a call of
    ``ab.claim``/``ab.glue``/``ab.assert_trained``/``torch.testing.assert_close``, a plain-name
    assignment, a loop or a student-edition guard (``try``) of nothing else?"""
    if isinstance(node, (ast.Assert, ast.Pass)):
        return True
    if isinstance(node, ast.Expr):
        call = node.value
        return isinstance(node.value, ast.Constant) or isinstance(call, ast.Call) and isinstance(
            call.func, ast.Attribute) and call.func.attr in CHECK_CALLS
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = getattr(node, "targets", None) or [node.target]
        return all(isinstance(n, (ast.Name, ast.Tuple, ast.List, ast.Store, ast.Starred))
                   for t in targets for n in ast.walk(t))
    if isinstance(node, ast.For):
        return not node.orelse and all(map(_only_checks, node.body))
    if isinstance(node, ast.Try):
        return not node.orelse and not node.finalbody and all(map(_only_checks, node.body))
    return False


def drop_checks(cells: list[dict]) -> list[dict]:
    """``cells`` (a student edition's) without the cells hidden on the website (``remove-cell``)
    that only check the book's own answers (:func:`_only_checks`: ``ab.claim``, ``assert``,
    ``ab.assert_trained``, ``torch.testing.assert_close``), unless a later code cell uses a
    name they bind. A learner's page shows none of them, and a learner's own (right but
    different) answer could fail one where the page gives no clue why."""
    trees = [_parse(source(c)) if c.get("cell_type") == "code" else None for c in cells]
    kept = []
    for i, (cell, tree) in enumerate(zip(cells, trees)):
        if "remove-cell" in tags(cell) and tree is not None and tree.body and all(map(_only_checks, tree.body)):
            # a name a later cell reads and does not bind itself (its own loop variables do not count)
            later = set().union(*(_used(t) - _bound_here(t) for t in trees[i + 1:] if t is not None))
            later |= {w for c, t in zip(cells[i + 1:], trees[i + 1:]) if t is None and c.get("cell_type") == "code"
                      for w in re.findall(r"\w+", source(c))}  # a cell magic: read by its words
            handlers = {n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler)}  # the guard's not_done
            if not (set().union(*map(_bound_here, tree.body)) - handlers) & later:
                continue
        kept.append(cell)
    return kept


ROLE = re.compile(r"\{(?P<role>cite(?::[tp])?|glue:text)\}`(?P<arg>[^`]*)`")
NO_VALUE = "(the number your run prints above)"


@functools.lru_cache(maxsize=None)
def cite_labels(bib: Path | None = None) -> dict[str, tuple[str, str]]:
    """key -> (who, year) of every entry in book/references.bib (``bib``); empty when it or
    pybtex is missing (a role then reads "[key]"). Parsed once per process: a parse takes about
    5 s, and each of the 20 notebooks of ``make student`` asks (a diff reviewer timed it)."""
    bib = bib or Path(__file__).resolve().parent.parent / "book" / "references.bib"
    try:
        ext = str(bib.parent / "_ext")
        if ext not in sys.path:
            sys.path.insert(0, ext)
        from book_site import author_year  # the website's own author-year label
        from pybtex.database import parse_file

        entries = parse_file(str(bib)).entries
    except Exception:  # noqa: BLE001 (no pybtex, no bib: "[key]")
        return {}
    return {key: tuple(author_year(e).rsplit(", ", 1)) for key, e in entries.items()}


def render_roles(text: str, labels: dict[str, tuple[str, str]], glued: dict | None = None) -> str:
    """Markdown ``text`` with the MyST roles a notebook shows raw rendered as the page does:
    {cite}`k` -> "(Shaw et al., 2018)", {cite:t}`k` -> "Shaw et al. (2018)", {glue:text}`name:fmt`
    -> the glued value (``glued``, formatted with fmt) or a neutral "(the number your run prints
    above)". Fresh learners read {glue:text}`sim_input:.2f` and {cite}`zhang2023d2l` raw."""
    def one(m: re.Match) -> str:
        role, arg = m.group("role"), m.group("arg")
        if role == "glue:text":
            name, _, fmt = arg.partition(":")
            if glued is None or name not in glued:
                return NO_VALUE
            try:
                return format(glued[name], fmt)
            except (TypeError, ValueError):
                return str(glued[name])
        keys = [k.strip() for k in arg.split(",") if k.strip()]
        if role == "cite:t":
            return ", ".join(f"{labels[k][0]} ({labels[k][1]})" if k in labels else f"[{k}]" for k in keys)
        if not all(k in labels for k in keys):
            return " ".join(f"[{k}]" for k in keys)
        return "(" + "; ".join(", ".join(labels[k]) for k in keys) + ")"
    return ROLE.sub(one, text)


def glued_values(executed: dict) -> dict:
    """name -> value of every output executed notebook ``executed`` glued (myst-nb marks each
    with metadata "scrapbook": {"name": ...}; ``executed`` may also be the name -> output map
    myst-nb writes beside it, jupyter_execute/<page>.glue.json); a text/plain that is a Python
    literal is read back as one (so {glue:text}`name:.2f` formats it), else kept as text."""
    values = {}
    outputs = [o for c in executed.get("cells", []) for o in c.get("outputs", [])] if "cells" in executed \
        else [o for o in executed.values() if isinstance(o, dict)]
    for out in outputs:
        name = (out.get("metadata") or {}).get("scrapbook", {}).get("name")
        text = (out.get("data") or {}).get("text/plain")
        if name and text is not None:
            text = "".join(text) if isinstance(text, list) else text
            try:
                values[name] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                values[name] = text.strip("'\"")
    return values


def practice_edition(original: dict, name: str = "", glued: dict | None = None) -> dict:
    """The student edition (``make student``), which is also the practice notebook the website
    offers for an exercises page: committed notebook ``original`` with every solution a scaffold,
    guards, no outputs, and without the hidden checks (:func:`drop_checks`). Raises SystemExit if
    a solution line would survive. ``glued``: the values the page's executed notebook glued
    (name -> value; :func:`render_roles`)."""
    student = make_edition(original, "student")
    student["cells"] = drop_checks(student["cells"])
    labels = cite_labels()
    for cell in student["cells"]:
        if cell.get("cell_type") == "markdown" and ROLE.search(source(cell)):
            cell["source"] = render_roles(source(cell), labels, glued)
    leaks = leaked_lines(original, student, load_solutions(name) if name else None)
    if leaks:
        raise SystemExit(f"{name}: solution text would survive in the student edition: {leaks[:3]}")
    return student


def build_practice(src_dir: Path, dest_dir: Path, glued: dict[str, dict] | None = None) -> list[Path]:
    """Write the practice notebook (:func:`practice_edition`) of every ``chNN_exercises.ipynb``
    in ``src_dir`` to ``dest_dir`` under the same name; ``glued``: notebook name -> the values
    its executed copy glued."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src_dir.glob("ch[0-9][0-9]_exercises.ipynb")):
        practice = practice_edition(json.loads(path.read_text(encoding="utf-8")), path.name,
                                    (glued or {}).get(path.name))
        out = dest_dir / path.name
        out.write_text(json.dumps(practice, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(out)
    return written


def main(argv: list[str]) -> None:
    src = Path(argv[1]) if len(argv) > 1 else Path("notebooks")
    dest = Path(argv[2]) if len(argv) > 2 else Path("student")
    written = build(src, dest)
    print(f"Student edition: {len(written)} notebooks written to {dest}/")


if __name__ == "__main__":
    main(sys.argv)
