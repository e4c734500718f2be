"""Notebook editions: what the public site, the instructor edition and students see.

Standard library only: ``make student`` runs with a plain ``python3`` (no torch).

Cell tags (see CONTRIBUTING.md):

``instructor``  markdown with a worked answer.
``solution``    code whose part between ``# BEGIN SOLUTION`` and ``# END SOLUTION``
                is the worked solution (the whole cell when it has no markers).
``graded``      (with ``solution``) the solution of a graded assignment: the committed
                notebook holds only its scaffold (the student's stub); the solution
                itself lives outside the notebooks, in ``solutions/<notebook>.json``
                (:func:`split_solutions`, :func:`merge_solutions`).
``checker``     a cell that calls an autograder; always kept.

Solutions policy: the answers to the *ungraded* exercises are public (folded on the
website); the solutions of *graded* assignments are in no notebook of ``notebooks/``,
on no page of the website and behind no Colab or download button. They are kept in
``solutions/`` at the repository's root, which neither the site build nor the package
ships; only the instructor edition merges them back.

Editions:

* ``instructor``: everything: the committed notebook with every graded solution merged
  back from ``solutions/`` (never deployed; ``EDITION=instructor make book``).
* ``public`` (the website): graded assignments as the student sees them (the task, its
  scaffold, its checker, which prints "Not done yet"); the code that needs an
  unfinished scaffold guarded (:func:`guard_dependents`); every ``instructor`` answer
  folded in a closed dropdown labelled "Show answer" (:func:`fold_answer`); ungraded
  solution cell folded whole, code and outputs, behind a "Show solution" toggle
  (``hide-cell``, its ``BEGIN/END SOLUTION`` marker lines dropped): a reader meets the
  exercise before its answer, and the printed results of the solution are part of it.
  Above such a cell the page shows the scaffold a learner completes (:func:`scaffold_cell`:
  its definitions with their ``# YOUR CODE HERE`` stubs, as a code block, never run).
* ``student``: ``instructor`` answers removed; every solution replaced by a
  ``# YOUR CODE HERE`` stub (:func:`stub`); the code that needs an unfinished stub
  guarded (:func:`guard_dependents`), so "Run All" reaches the last cell; outputs cleared.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import copy
import json
import re
from pathlib import Path

BEGIN = re.compile(r"^(?P<indent>[ \t]*)#\s*BEGIN SOLUTION\s*$")
BEGIN_ANYWHERE = re.compile(r"(?m)^[ \t]*#\s*BEGIN SOLUTION\s*$")
END = re.compile(r"^[ \t]*#\s*END SOLUTION\s*$")
EDITIONS = ("instructor", "public", "student")
ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"  # the graded assignments' solutions: outside the site and the package
NOT_DONE = "Not done yet: replace this line with your code."


def tags(cell: dict) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _contexts(code: str, lines: list[str]) -> dict[int, str]:
    """For each line number (1-based) of ``code`` inside a function or class body, the
    innermost of the two: ``"function"`` or ``"class"``; top-level lines are absent.

    Uses :mod:`ast`; a cell that does not parse (an IPython magic, say) falls back
    to indentation: an indented line counts as inside a function.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {n: "function" for n, line in enumerate(lines, start=1) if line[:1] in (" ", "\t")}
    context: dict[int, str] = {}
    for node in ast.walk(tree):  # breadth first: an inner body overwrites its outer one
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            context.update(dict.fromkeys(range(node.lineno + 1, (node.end_lineno or node.lineno) + 1), kind))
    return context


def stub(indent: str, context: str | None) -> list[str]:
    """What replaces a solution in the student edition (``context``: see :func:`_contexts`).

    * In a function body: ``raise NotImplementedError``. The function fails only when
      it is called; a checker then reports "not implemented yet".
    * In a class body: an ``__init__`` that raises ``NotImplementedError``, so the class
      is defined and fails only when it is used.
    * At the top level: a line that prints "Not done yet", so the cell goes on.
    """
    if context == "function":
        return [f"{indent}# YOUR CODE HERE", f"{indent}raise NotImplementedError"]
    if context == "class":
        return [f"{indent}# YOUR CODE HERE", f"{indent}def __init__(self, *args, **kwargs):  # replace this stub",
                f"{indent}    raise NotImplementedError"]
    return [f"{indent}# YOUR CODE HERE", f"{indent}print({NOT_DONE!r})"]


def scaffold(code: str) -> str:
    """Replace each BEGIN/END SOLUTION block by a ``# YOUR CODE HERE`` stub (see :func:`stub`).

    Without markers the whole cell becomes the (top-level) stub. Unbalanced markers
    raise ``ValueError`` (a solution must never leak into the student edition).
    """
    lines = code.split("\n")
    if not any(BEGIN.match(line) for line in lines):
        if any(END.match(line) for line in lines):
            raise ValueError("'# END SOLUTION' without '# BEGIN SOLUTION'")
        return "\n".join(stub("", None))
    context = _contexts(code, lines)
    out, inside, indent = [], False, ""
    for number, line in enumerate(lines, start=1):
        begin = BEGIN.match(line)
        if begin:
            if inside:
                raise ValueError(f"line {number}: nested '# BEGIN SOLUTION'")
            inside, indent = True, begin.group("indent")
            out += stub(indent, context.get(number))
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


YOUR_CODE = re.compile(r"^[ \t]*# YOUR CODE HERE\s*$")
GUARD = "try:  # student edition: the rest of this cell runs once the code it needs is written"
SKIPPED = ("except (NotImplementedError, NameError, KeyError) as not_done:",
           "    print(\"Not done yet, so the rest of this cell is skipped:\", repr(not_done))")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
_ALWAYS_DEFINED = set(dir(builtins)) | {"get_ipython", "display", "In", "Out", "exit", "quit", "__file__"}


def _parse(code: str) -> ast.Module | None:
    """``code`` parsed, with IPython line magics and shell escapes (``%pip``, ``!ls``)
    read as ``pass``; None for a cell magic or a syntax error."""
    if code.lstrip().startswith("%%"):
        return None
    lines = [re.sub(r"^([ \t]*)[%!].*$", r"\1pass", line) for line in code.split("\n")]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _bound(tree: ast.AST) -> set[str]:
    """Every name ``tree`` binds anywhere (assignments, arguments, definitions, imports)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _bound_here(node: ast.AST) -> set[str]:
    """The names a top-level statement binds in the notebook's namespace (not the names
    local to a function, class body, lambda or comprehension inside it)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return set()
    if isinstance(node, ast.Name):
        return set() if isinstance(node.ctx, ast.Load) else {node.id}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    names = {node.name} if isinstance(node, ast.ExceptHandler) and node.name else set()
    for child in ast.iter_child_nodes(node):
        names |= _bound_here(child)
    return names


def _used(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def guard_tail(code: str, start: int) -> str:
    """``code`` with its lines from ``start`` (1-based) on inside ``try:`` ... ``except
    (NotImplementedError, NameError, KeyError)``: instead of stopping "Run All", the cell
    prints that it skipped the rest because an unfinished scaffold raised (or a name the
    student has yet to define is missing, or a result an unfinished loop never stored)."""
    lines = code.rstrip().split("\n")
    tail = ["    " + line if line.strip() else "" for line in lines[start - 1:]]
    return "\n".join(lines[: start - 1] + [GUARD] + tail + list(SKIPPED))


def guard_dependents(cells: list[dict]) -> None:
    """Guard (:func:`guard_tail`), in place, the part of each student-edition code cell that
    can fail because a scaffold is unfinished, so that "Run All" reaches the last cell.

    That part starts at the first top-level statement (other than a definition or an import)
    that comes after a scaffold stub in the same cell, or that uses a name that a scaffold
    was to define: a function or class with a stub, a name bound in an earlier guarded part,
    or a name the student edition never binds (only the solution did). Checker cells are
    never guarded: they report "not implemented yet" themselves. The cells before the first
    ``solution`` cell, and cells that do not parse, are left alone.
    """
    trees = {i: _parse(source(c)) for i, c in enumerate(cells) if c.get("cell_type") == "code"}
    trees = {i: tree for i, tree in trees.items() if tree is not None}
    defined = set().union(*map(_bound, trees.values())) | _ALWAYS_DEFINED
    tainted = set().union(*map(_used, trees.values())) - defined
    first = next((i for i, c in enumerate(cells) if "solution" in tags(c)), len(cells))
    for i, tree in trees.items():
        if i < first or "checker" in tags(cells[i]):
            continue
        lines = source(cells[i]).split("\n")
        stub_lines = [n for n, line in enumerate(lines, start=1) if YOUR_CODE.match(line)]
        in_stub = set(stub_lines) | {n + 1 for n in stub_lines if lines[n:n + 1] == [f"print({NOT_DONE!r})"]}
        start = None
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if any(node.lineno <= n <= node.end_lineno for n in stub_lines):
                    tainted.add(node.name)
                continue
            if isinstance(node, _DEFINITIONS) or node.lineno in in_stub:
                continue
            if (stub_lines and node.lineno > stub_lines[0]) or _used(node) & tainted:
                start = node.lineno
                break
        if start is None:
            continue
        tainted |= {name for node in tree.body if node.lineno >= start for name in _bound_here(node)}
        cells[i]["source"] = guard_tail(source(cells[i]), start)


ANSWER_LABEL = "Show answer"  # the toggle over an instructor answer on the website
CODE_LABELS = ("Show solution", "Hide solution")  # the toggle over a solution cell on the website


def fold_answer(markdown: str) -> str:
    """``markdown`` inside a closed MyST dropdown labelled "Show answer" (sphinx-design,
    colon fence): the website shows the label; a click opens the typeset answer.
    The fence is longer than any colon fence inside the answer."""
    inner = max((len(m.group(0)) for m in re.finditer(r"(?m)^[ \t]*(:{3,})", markdown)), default=2)
    fence = ":" * max(3, inner + 1)
    return f"{fence}{{dropdown}} {ANSWER_LABEL}\n{markdown.strip()}\n{fence}"


SCAFFOLD_INTRO = "Start from this scaffold (fill in each `# YOUR CODE HERE`), then compare with the solution:"


def scaffold_preview(code: str) -> str | None:
    """The part of ``code``'s scaffold a learner completes, as the public page shows it above the
    folded solution: the top-level definitions (the given helpers and every stubbed function or
    class), the statements that only run them left to the solution; where a stub stands among
    the top-level statements (the task is to write them), the whole scaffold.
    None where the cell has no ``BEGIN/END SOLUTION`` markers (its scaffold would be one stub line)."""
    if not BEGIN_ANYWHERE.search(code):
        return None
    shown = scaffold(code)
    tree = _parse(shown)
    lines = shown.split("\n")
    if tree is None:
        return shown
    if any(line.startswith("# YOUR CODE HERE") for line in lines):  # a stub among the driver code
        return shown.strip("\n")
    keep = ["\n".join(lines[min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1:node.end_lineno])
            for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return "\n\n\n".join(keep) if keep else shown.strip("\n")


def scaffold_cell(cell: dict) -> dict | None:
    """A markdown cell showing :func:`scaffold_preview` of solution cell ``cell`` (public edition)."""
    preview = scaffold_preview(source(cell))
    if preview is None:
        return None
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`{3,}", preview)), default=0))
    return {"cell_type": "markdown", "id": f"{cell.get('id', 'cell')}-scaffold"[:64],
            "metadata": {"tags": ["scaffold"]},
            "source": f"{SCAFFOLD_INTRO}\n\n{fence}python\n{preview}\n{fence}"}


def strip_markers(code: str) -> str:
    """``code`` without its ``# BEGIN SOLUTION`` / ``# END SOLUTION`` lines."""
    return "\n".join(line for line in code.split("\n") if not (BEGIN.match(line) or END.match(line)))


def is_graded(cell: dict) -> bool:
    return cell.get("cell_type") == "code" and "graded" in tags(cell)


def split_solutions(nb: dict) -> tuple[dict, dict[str, str]]:
    """``(committed, solutions)`` from a notebook whose graded cells hold their solutions:
    each graded cell scaffolded (:func:`scaffold`), and ``{cell id: solution source}``."""
    nb = copy.deepcopy(nb)
    found = {}
    for cell in nb.get("cells", []):
        if is_graded(cell) and BEGIN_ANYWHERE.search(source(cell)):  # (else: already its scaffold)
            if not cell.get("id"):
                raise ValueError("a graded cell needs a cell id (nbformat 4.5)")
            found[cell["id"]] = source(cell)
            cell["source"] = scaffold(source(cell)).splitlines(keepends=True)
            cell["outputs"], cell["execution_count"] = [], None
    return nb, found


def merge_solutions(nb: dict, solutions: dict[str, str]) -> dict:
    """A copy of committed notebook ``nb`` with each graded cell's solution put back. Refuses
    a graded cell without a solution, a solution whose scaffold is not the committed cell
    (the two drifted apart), and a solution for no cell."""
    nb = copy.deepcopy(nb)
    used = set()
    for cell in nb.get("cells", []):
        if not is_graded(cell):
            continue
        solution = solutions.get(cell.get("id", ""))
        if solution is None:
            raise ValueError(f"graded cell {cell.get('id')!r} has no solution in {SOLUTIONS.name}/")
        if scaffold(solution) != source(cell):
            raise ValueError(f"graded cell {cell['id']!r}: the committed scaffold is not the scaffold of its "
                             "solution; run `python scripts/editions.py split` after editing")
        cell["source"] = solution.splitlines(keepends=True)
        used.add(cell["id"])
    extra = set(solutions) - used
    if extra:
        raise ValueError(f"solutions for cells that are not graded cells of this notebook: {sorted(extra)}")
    return nb


def solutions_path(notebook_name: str, folder: Path = SOLUTIONS) -> Path:
    return folder / (Path(notebook_name).stem + ".json")


def load_solutions(notebook_name: str, folder: Path = SOLUTIONS) -> dict[str, str]:
    """The graded solutions of ``notebook_name`` ({} when it has none)."""
    path = solutions_path(notebook_name, folder)
    if not path.is_file():
        return {}
    return {cid: "".join(lines) for cid, lines in json.loads(path.read_text(encoding="utf-8"))["cells"].items()}


def save_solutions(notebook_name: str, solutions: dict[str, str], folder: Path = SOLUTIONS) -> Path:
    path = solutions_path(notebook_name, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = {cid: code.splitlines(keepends=True) for cid, code in solutions.items()}
    data = {"notebook": f"notebooks/{Path(notebook_name).name}",
            "about": "Solutions of the graded assignments (instructors only): the committed notebook holds "
                     "each cell's scaffold. See scripts/editions.py.",
            "cells": cells}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _add_tag(cell: dict, tag: str) -> None:
    meta = cell.setdefault("metadata", {})
    meta["tags"] = sorted(set(meta.get("tags", [])) | {tag})


GLUE_CALLS = ("glue", "glue_counts")  # the package's calls that only hand numbers to the website's text


def _names_only(target: ast.AST) -> bool:
    return isinstance(target, ast.Name) or isinstance(target, (ast.Tuple, ast.List)) and all(
        _names_only(t) for t in target.elts)


def _pure(node: ast.AST) -> bool:
    """Does top-level statement ``node`` only glue, or bind plain names (no ``d[k] = ...``, no
    ``x.append(...)``: a change to an object a later cell could read)?"""
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant) or _is_glue(node)
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        return all(map(_names_only, getattr(node, "targets", None) or [node.target]))
    if isinstance(node, (ast.For, ast.If)):
        return (not isinstance(node, ast.For) or _names_only(node.target)) and all(
            map(_pure, node.body + node.orelse))
    return isinstance(node, ast.Pass)


def _is_glue(node: ast.AST) -> bool:
    """A statement that only glues: ``ab.glue(...)``, or a loop over plain names of nothing else."""
    if isinstance(node, ast.For):
        return _names_only(node.target) and not node.orelse and all(map(_is_glue, node.body))
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
        isinstance(node.value.func, ast.Attribute) and node.value.func.attr in GLUE_CALLS


def drop_bookkeeping(cells: list[dict]) -> list[dict]:
    """``cells`` without the website's bookkeeping, in the code cells hidden on the website
    (``remove-cell``): their top-level ``ab.glue(...)``/``ab.glue_counts(...)`` statements (they hand
    numbers to the website's text, which a student's notebook does not have) are cut, and a cell left
    with nothing else but plain names (:func:`_pure`) that no later code cell uses is dropped."""
    trees = [_parse(source(c)) if c.get("cell_type") == "code" else None for c in cells]
    kept = []
    for i, (cell, tree) in enumerate(zip(cells, trees)):
        if "remove-cell" not in tags(cell) or tree is None or not any(map(_is_glue, tree.body)):
            kept.append(cell)
            continue
        lines = source(cell).split("\n")
        cut = {n for node in tree.body if _is_glue(node) for n in range(node.lineno, node.end_lineno + 1)}
        rest = [node for node in tree.body if not _is_glue(node)]
        later = set().union(*(_used(t) for t in trees[i + 1:] if t is not None))
        # a later cell that does not parse (a cell magic) is read by its words
        later |= set(re.findall(r"\w+", " ".join(source(c) for c, t in zip(cells[i + 1:], trees[i + 1:])
                                                 if t is None and c.get("cell_type") == "code")))
        if all(map(_pure, rest)) and not set().union(*map(_bound_here, rest)) & later:
            continue
        cell["source"] = "\n".join(line for n, line in enumerate(lines, start=1) if n not in cut).strip("\n")
        kept.append(cell)
    return kept


def make_edition(nb: dict, edition: str, solutions: dict[str, str] | None = None) -> dict:
    """A copy of committed notebook ``nb`` (nbformat JSON as a dict) for ``edition``;
    ``solutions`` (the instructor edition only): its graded solutions, see
    :func:`load_solutions`."""
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, got {edition!r}")
    if edition == "instructor":
        return merge_solutions(nb, solutions or {})
    nb = copy.deepcopy(nb)
    cells = []
    for cell in nb.get("cells", []):
        cell_tags = tags(cell)
        if "instructor" in cell_tags and cell.get("cell_type") == "markdown":
            if edition == "student":
                continue
            cell["source"] = fold_answer(source(cell))
        elif "instructor" in cell_tags:
            continue
        if is_graded(cell):
            if "BEGIN SOLUTION" in source(cell) or "END SOLUTION" in source(cell):
                raise ValueError(f"graded cell {cell.get('id')!r} holds a solution: the committed notebook "
                                 "must hold only its scaffold (python scripts/editions.py split)")
            cell["outputs"], cell["execution_count"] = [], None
        elif "solution" in cell_tags and cell.get("cell_type") == "code":
            if edition == "public":
                preview = scaffold_cell(cell)
                if preview is not None:
                    cells.append(preview)
                cell["source"] = strip_markers(source(cell))
                _add_tag(cell, "hide-cell")
                show, hide = CODE_LABELS
                cell["metadata"].setdefault("mystnb", {}).update(code_prompt_show=show, code_prompt_hide=hide)
            else:
                cell["source"] = scaffold(source(cell))
        if edition == "student" and cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
    if edition == "student":
        cells = drop_bookkeeping(cells)
    nb["cells"] = cells
    guard_dependents(cells)
    if edition == "student":
        nb.get("metadata", {}).pop("widgets", None)
    return nb


def main(argv: list[str] | None = None) -> None:
    """``split``: move the graded solutions of notebooks out into ``solutions/`` (the notebook
    keeps their scaffolds); ``merge``: put them back for editing (never commit that form)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("action", choices=("split", "merge"))
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for path in args.notebooks:
        nb = json.loads(path.read_text(encoding="utf-8"))
        if args.action == "split":
            nb, found = split_solutions(nb)
            if found:
                merged = {**load_solutions(path.name), **found}
                save_solutions(path.name, merged)
        else:
            nb = merge_solutions(nb, load_solutions(path.name))
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{args.action}: {path}")


if __name__ == "__main__":
    main()
