"""Build the student edition of the notebooks (standard library only: no torch needed).

Usage: python3 scripts/student_edition.py [SRC_DIR] [DEST_DIR] [--practice]   (default: notebooks student)
(``--practice``: only the exercises pages, ``chNN_exercises.ipynb``, as the website offers them)

Every notebook in SRC_DIR is written to DEST_DIR with instructor answers removed,
each solution replaced by a ``# YOUR CODE HERE`` stub, the code that needs an
unfinished stub guarded so that "Run All" reaches the last cell (see
scripts/editions.py), checker cells kept and outputs cleared. DEST_DIR is
ignored by git. The build fails (exit 1) if any solution line would survive.

The website offers each exercises page's *practice notebook* (book/_ext/book_site.py writes
them with :func:`build_practice`): its student edition without the hidden cells that only
check the book's own solutions (:func:`drop_checks`).

Both editions are read outside the website (downloaded, or opened in Colab): their MyST roles are
rendered as text (:func:`render_roles`) and their relative links point at the website
(:func:`absolute_links`, from ``repository: url:`` in _config.yml).
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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


EXERCISES = "ch[0-9][0-9]_exercises.ipynb"  # the exercises pages: each offers a practice notebook


def build(src_dir: Path, dest_dir: Path, names: list[str] | None = None, pattern: str = "*.ipynb",
          glued: dict[str, dict] | None = None) -> list[Path]:
    """Write the student edition of every notebook in ``src_dir`` matching ``pattern`` (or of
    those ``names``): the same notebook as the website's practice copy (:func:`practice_edition`),
    so the hidden checks of the book's own answers are gone from both (a fresh instructor found
    ch01's hidden check holding the one-line answer of exercise 11.1.2, and ch05/ch06's
    ``ab.claim`` and ``ab.assert_trained`` run on a student's own results). ``glued``: notebook
    name -> the values its executed copy glued (:func:`render_roles`)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src_dir.glob(pattern)):
        if names is not None and path.name not in names:
            continue
        student = practice_edition(json.loads(path.read_text(encoding="utf-8")), path.name,
                                   (glued or {}).get(path.name))
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
# A seed-check count (ab.glue_counts): "held in {glue:text}`x_held` of {glue:text}`x_runs` runs".
COUNTS = re.compile(r"\{glue:text\}`(?P<name>\w+)_held(?::[^`]*)?`(?P<of>\s+of\s+)"
                    r"\{glue:text\}`(?P=name)_runs(?::[^`]*)?`")
ROLES = re.compile(f"{COUNTS.pattern}|{ROLE.pattern}")
# Where the practice notebook has no value for a glued number (make student has no executed
# notebooks): words that are true wherever the notebook is read. "(the number your run prints
# above)" was not: ch06's seed-check counts are printed by no run of the learner (issue 36).
NO_VALUE = "(a number given on {page})"
NO_COUNT = "(a count given on {page})"
PAGE_WORDS = "the book's website"
# Under a text whose run-specific numbers are the book's own (the site's executed notebook): the
# text says "in this run", and a learner's run is another.
BOOKS_RUN = "*The numbers in this text are from the book's own run, as on {page}; a run of yours may give others.*"


@functools.lru_cache(maxsize=None)
def _bibliography(bib: Path | None = None):
    """The parsed book/references.bib (``bib``), or None when it or pybtex is missing. Parsed once
    per process: a parse takes about 5 s, and each of the 20 notebooks of ``make student`` asks (a
    diff reviewer timed it)."""
    bib = bib or Path(__file__).resolve().parent.parent / "book" / "references.bib"
    try:
        ext = str(bib.parent / "_ext")
        if ext not in sys.path:
            sys.path.insert(0, ext)
        from pybtex.database import parse_file

        return parse_file(str(bib))
    except Exception:  # noqa: BLE001 (no pybtex, no bib)
        return None


@functools.lru_cache(maxsize=None)
def cite_labels(bib: Path | None = None) -> dict[str, tuple[str, str]]:
    """key -> (who, year) of every entry in book/references.bib (``bib``); empty when it or
    pybtex is missing (a role then reads "[key]")."""
    data = _bibliography(bib)
    if data is None:
        return {}
    from book_site import author_year  # the website's own author-year label

    return {key: tuple(author_year(e).rsplit(", ", 1)) for key, e in data.entries.items()}


CITED = re.compile(r"\{cite(?::[tp])?\}`(?P<keys>[^`]*)`")


def references_cell(texts: list[str], bib: Path | None = None) -> dict | None:
    """A markdown cell "References" listing, as the website's bibliography writes them (its style,
    book_site.AuthorYearStyle), the works cited in ``texts`` (markdown with {cite} roles), each under
    the label its citations read ("Shaw et al., 2018"); None when nothing is cited or the entries
    cannot be had. A practice notebook cited "(Shaw et al., 2018)" with no list to look it up in
    (a fresh learner, issue 36)."""
    keys = list(dict.fromkeys(k.strip() for t in texts for m in CITED.finditer(t)
                              for k in m.group("keys").split(",") if k.strip()))
    data = _bibliography(bib)
    if not keys or data is None or not all(k in data.entries for k in keys):
        return None
    from book_site import AuthorYearStyle, author_year
    from pybtex.database import BibliographyData

    cited = BibliographyData({k: data.entries[k] for k in keys})
    lines = ["## References", ""]
    for entry in AuthorYearStyle().format_bibliography(cited):
        text = " ".join(entry.text.render_as("markdown").split())
        lines.append(f"* **{author_year(data.entries[entry.key])}.** {text}")
    return {"cell_type": "markdown", "id": "references", "metadata": {}, "source": "\n".join(lines)}


def render_roles(text: str, labels: dict[str, tuple[str, str]], glued: dict | None = None,
                 page: str = "") -> str:
    """Markdown ``text`` with the MyST roles a notebook shows raw rendered as the page does:
    {cite}`k` -> "(Shaw et al., 2018)", {cite:t}`k` -> "Shaw et al. (2018)", {glue:text}`name:fmt`
    -> the glued value (``glued``: the site's executed notebook's, formatted with fmt). Fresh
    learners read {glue:text}`sim_input:.2f` and {cite}`zhang2023d2l` raw.

    A text showing the book's run-specific numbers ends with a line saying they are the book's
    run's (:data:`BOOKS_RUN`); the seed check's counts (``x_held``/``x_runs``) are the book's
    anyway. A value ``glued`` lacks reads "(a number given on the book's website)", and the pair
    "{x_held} of {x_runs}" "(a count given on the book's website)", the first of them in a text
    linked to ``page`` (the notebook's page on the website) when given: never a printout the
    notebook may not make."""
    glued = glued or {}
    books_run, linked = [], []

    def where() -> str:  # the page linked once per text, its name alone after that
        if page and not linked:
            linked.append(page)
            return f"[{PAGE_WORDS}]({page})"
        return PAGE_WORDS

    def one(m: re.Match) -> str:
        if m.group("name"):  # a seed-check count "held in x_held of x_runs"
            name = m.group("name")
            if f"{name}_held" not in glued or f"{name}_runs" not in glued:
                return NO_COUNT.format(page=where())
            return f"{glued[name + '_held']}{m.group('of')}{glued[name + '_runs']}"
        role, arg = m.group("role"), m.group("arg")
        if role == "glue:text":
            name, _, fmt = arg.partition(":")
            if name not in glued:
                return NO_VALUE.format(page=where())
            if not name.endswith(("_held", "_runs")):
                books_run.append(name)
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
    text = ROLES.sub(one, text)  # one pass: the first role in the text gets the link
    return text.rstrip("\n") + "\n\n" + BOOKS_RUN.format(page=where()) if books_run else text


MD_LINK = re.compile(r"(?P<image>!?)\[(?P<text>[^\]]*)\]\((?P<target>[^()\s]+)(?P<title>\s+\"[^\"]*\")?\)")
PAGE_SUFFIXES = (".ipynb", ".md")  # files the website shows as pages (.html)


@functools.cache
def site_addresses(root: Path = ROOT) -> tuple[str, str, str]:
    """(the website's root URL, the repository's URL, its branch) from ``root``/_config.yml's
    ``repository: url:``/``branch:`` (the one setting; scripts/set_repository.py) and the site
    address book/_ext/size_banner.py derives from it (GitHub Pages', or ``size_banner_site_url``).
    Empty strings for what cannot be had (read without yaml: ``make student`` needs no package)."""
    try:
        config = (root / "_config.yml").read_text(encoding="utf-8")
    except OSError:
        return "", "", ""

    def value(key: str, text: str) -> str:  # a plain `key: value` line of the YAML
        found = re.search(rf"^[ \t]*{key}:[ \t]*[\"']?([^\"'\s#]+)", text, re.MULTILINE)
        return found[1] if found else ""

    block = re.search(r"^repository:[ \t]*\n((?:[ \t]+.*\n?|[ \t]*\n)*)", config, re.MULTILINE)
    repo = value("url", block[1]).rstrip("/") if block else ""
    branch = (value("branch", block[1]) if block else "") or "main"
    configured = value("size_banner_site_url", config)
    try:
        ext = str(root / "book" / "_ext")
        if ext not in sys.path:
            sys.path.insert(0, ext)
        # the website's own address, as its size line links it
        from size_banner import site_url
    except Exception:  # noqa: BLE001 (no docutils: the GitHub file URLs)
        return "", repo, branch
    return site_url(repo, configured), repo, branch


def absolute_links(text: str, folder: str = "notebooks", addresses: tuple[str, str, str] | None = None) -> str:
    """Markdown ``text`` (from a notebook in the repository's ``folder``) with its relative links made
    absolute: a page (.ipynb, .md) -> its page on the website (``ch06_self_attention.ipynb#sec`` ->
    ``https://owner.github.io/repo/notebooks/ch06_self_attention.html#sec``), any other file, or a
    page where no site address can be derived -> its file on GitHub. A fresh learner's relative links
    led nowhere from a practice notebook opened in Colab or downloaded (issue 36)."""
    site, repo, branch = site_addresses() if addresses is None else addresses

    def one(m: re.Match) -> str:
        target = m.group("target")
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:|[#/]", target):  # a URL, an anchor, a site path
            return m.group(0)
        path, hash_, anchor = target.partition("#")
        path = posixpath.normpath(posixpath.join(folder, path))
        if path.startswith("..") or not (site or repo):
            return m.group(0)
        if site and path.endswith(PAGE_SUFFIXES):
            url = site + path.rsplit(".", 1)[0] + ".html" + hash_ + anchor
        elif repo:
            url = f"{repo}/{'raw' if m.group('image') else 'blob'}/{branch}/{path}" + hash_ + anchor
        else:
            return m.group(0)
        return f"{m.group('image')}[{m.group('text')}]({url}{m.group('title') or ''})"
    return MD_LINK.sub(one, text)


def glued_values(executed: dict) -> dict:
    """name -> value of every output executed notebook ``executed`` glued (myst-nb marks each
    with metadata "scrapbook": {"name": ...}; ``executed`` may also be the name -> output map
    myst-nb writes beside it, jupyter_execute/<page>.glue.json); a text/plain that is a Python
    literal is read back as one (so {glue:text}`name:.2f` formats it), else kept as text. In the
    executed notebook a value glued without display (``ab.glue``) is stored under its scrapbook
    prefix, "application/papermill.record/text/plain": read too (the staged notebooks of ``make
    book`` gave no value at all, and a first build's practice notebooks none)."""
    values = {}
    outputs = [o for c in executed.get("cells", []) for o in c.get("outputs", [])] if "cells" in executed \
        else [o for o in executed.values() if isinstance(o, dict)]
    for out in outputs:
        scrapbook = (out.get("metadata") or {}).get("scrapbook", {})
        name, data = scrapbook.get("name"), out.get("data") or {}
        text = data.get("text/plain", data.get(scrapbook.get("mime_prefix", "") + "text/plain"))
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
    guards, no outputs, without the hidden checks (:func:`drop_checks`), its roles rendered as text
    and its relative links absolute (:func:`render_roles`, :func:`absolute_links`): it is read
    away from the website. Raises SystemExit if a solution line would survive. ``glued``: the
    values the page's executed notebook glued (name -> value; :func:`render_roles`)."""
    student = make_edition(original, "student")
    student["cells"] = drop_checks(student["cells"])
    labels = cite_labels()
    references = references_cell([source(c) for c in student["cells"] if c.get("cell_type") == "markdown"])
    if references is not None:
        student["cells"].append(references)
    site = site_addresses()
    page = site[0] + "notebooks/" + name.rsplit(".", 1)[0] + ".html" if site[0] and name else ""
    for cell in student["cells"]:
        if cell.get("cell_type") != "markdown":
            continue
        text = source(cell)
        if ROLE.search(text):
            text = render_roles(text, labels, glued, page)
        text = absolute_links(text, addresses=site)
        if text != source(cell):
            cell["source"] = text
    leaks = leaked_lines(original, student, load_solutions(name) if name else None)
    if leaks:
        raise SystemExit(f"{name}: solution text would survive in the student edition: {leaks[:3]}")
    return student


def build_practice(src_dir: Path, dest_dir: Path, glued: dict[str, dict] | None = None) -> list[Path]:
    """:func:`build` of the exercises pages only (the website's practice notebooks, each under
    its own name); ``glued``: notebook name -> the values its executed copy glued."""
    return build(src_dir, dest_dir, pattern=EXERCISES, glued=glued)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="student_edition.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("src", nargs="?", default="notebooks", help="the notebooks (default: notebooks)")
    parser.add_argument("dest", nargs="?", default="student", help="where to write them (default: student)")
    parser.add_argument("--practice", action="store_true",
                        help="only the exercises pages (chNN_exercises.ipynb): the website's practice notebooks")
    args = parser.parse_args(argv[1:])
    src, dest = Path(args.src), Path(args.dest)
    if not src.is_dir():
        parser.error(f"{src} is not a folder of notebooks")
    written = build(src, dest, pattern=EXERCISES if args.practice else "*.ipynb")
    print(f"Student edition: {len(written)} notebooks written to {dest}/")


if __name__ == "__main__":
    main(sys.argv)
