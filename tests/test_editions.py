"""Student edition and public edition (scripts/editions.py, student_edition.py); grading is tests/test_grade.py."""

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
editions = importlib.import_module("editions")
student_edition = importlib.import_module("student_edition")
grade = importlib.import_module("grade")

SOLUTION = '''def f(x):
    """Double x."""
    # BEGIN SOLUTION
    y = x * 2  # the distinctive solution line
    return y
    # END SOLUTION
'''


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = list(cells)
    return json.loads(nbformat.writes(nb))


def _code(src, *tags):
    return nbformat.v4.new_code_cell(src, metadata={"tags": list(tags)})


def _md(src, *tags):
    return nbformat.v4.new_markdown_cell(src, metadata={"tags": list(tags)})


def test_scaffold_keeps_signature_and_indentation():
    out = editions.scaffold(SOLUTION)
    assert 'def f(x):\n    """Double x."""\n    # YOUR CODE HERE\n    raise NotImplementedError' in out
    assert "x * 2" not in out and "BEGIN SOLUTION" not in out


def test_scaffold_without_markers_replaces_everything():
    assert editions.scaffold("secret = 42") == f"# YOUR CODE HERE\nprint({editions.NOT_DONE!r})"


def test_scaffold_raises_only_inside_functions():
    """A stub in a function body raises when the function is called; one in a class body
    makes the class raise when it is used; a top-level stub prints and lets the cell go on."""
    top = editions.scaffold("x = 1\n# BEGIN SOLUTION\ny = 2\n# END SOLUTION\nz = x")
    assert top == f"x = 1\n# YOUR CODE HERE\nprint({editions.NOT_DONE!r})\nz = x"
    cls = editions.scaffold("class A:\n    # BEGIN SOLUTION\n    def f(self):\n        return 1\n    # END SOLUTION\n")
    namespace = {}
    exec(cls, namespace)  # defining the class does not raise
    with pytest.raises(NotImplementedError):
        namespace["A"]()
    method = editions.scaffold("class B:\n    def f(self):\n        # BEGIN SOLUTION\n        return 1\n        # END SOLUTION\n")
    assert "        # YOUR CODE HERE\n        raise NotImplementedError" in method


@pytest.mark.parametrize("bad", [
    "# BEGIN SOLUTION\nx = 1",
    "x = 1\n# END SOLUTION",
    "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION",
])
def test_unbalanced_markers_are_rejected(bad):
    with pytest.raises(ValueError, match="SOLUTION"):
        editions.scaffold(bad)


def test_editions_treat_tags_as_documented():
    nb = _nb(_md("# Title"), _md("The answer is 42 because $x^2$ ...", "instructor"), _code(SOLUTION, "solution"),
             _code("check_double(f)", "checker"))
    nb["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "done"}]
    student = editions.make_edition(nb, "student")
    texts = [editions.source(c) for c in student["cells"]]
    assert len(texts) == 3 and "The answer is 42" not in "".join(texts)
    assert "raise NotImplementedError" in texts[1] and "x * 2" not in texts[1]
    assert texts[2] == "check_double(f)" and student["cells"][1]["outputs"] == []
    # The public site shows the answer folded under "Show answer", and folds a solution cell (code and
    # outputs: its printed results would give the answer away) under "Show solution".
    public = editions.make_edition(nb, "public")
    assert len(public["cells"]) == 5
    assert editions.source(public["cells"][1]) == ":::{dropdown} Show answer\nThe answer is 42 because $x^2$ ...\n:::"
    # Above the folded solution, the scaffold a learner completes, shown (a code block, never run):
    # the definition with its stub, without the solution (a reader saw no scaffold to complete).
    shown = public["cells"][2]
    assert shown["cell_type"] == "markdown" and "scaffold" in editions.tags(shown)
    assert "def f(x):" in editions.source(shown) and "# YOUR CODE HERE" in editions.source(shown)
    assert "x * 2" not in editions.source(shown) and "```python" in editions.source(shown)
    code = public["cells"][3]
    assert "hide-cell" in editions.tags(code) and "hide-input" not in editions.tags(code)
    assert "x * 2" in editions.source(code)
    assert "SOLUTION" not in editions.source(code)  # the markers are dropped on the website
    assert code["metadata"]["mystnb"] == {"code_prompt_show": "Show solution", "code_prompt_hide": "Hide solution"}
    assert code["outputs"] == nb["cells"][2]["outputs"]
    # A whole-cell solution (no markers) gets no scaffold block: its scaffold would be one stub line.
    whole = editions.make_edition(_nb(_code("y = 2 * 21", "solution")), "public")
    assert [c["cell_type"] for c in whole["cells"]] == ["code"]
    assert editions.make_edition(nb, "instructor") == nb
    with pytest.raises(ValueError, match="edition"):
        editions.make_edition(nb, "teacher")


def test_fold_answer_uses_a_longer_fence_than_the_answer():
    folded = editions.fold_answer("Note:\n\n:::{note}\nInner\n:::\n")
    assert folded.startswith("::::{dropdown} Show answer\n") and folded.endswith("\n::::")


def test_student_edition_guards_code_that_needs_an_unfinished_scaffold():
    """Run top to bottom, the student edition of a page raises nowhere: a cell that calls an
    unfinished function or uses a name the student has yet to define prints "Not done yet"."""
    nb = _nb(_code("import math\nbase = 2"), _code(SOLUTION + "\n\nfour = f(base)\nprint(four)", "solution"),
             _code("# BEGIN SOLUTION\ntotal = 3\n# END SOLUTION\nprint(total + four)", "solution"),
             _code("eight = f(four)\nprint(eight)"), _code("print(eight + total)"),
             _code("print(math.sqrt(base))"), _code("check(f)", "checker"))
    student = editions.make_edition(nb, "student")
    sources = [editions.source(c) for c in student["cells"]]
    assert sources[0] == "import math\nbase = 2" and sources[5] == "print(math.sqrt(base))"
    assert sources[6] == "check(f)"  # checker cells report "Not done yet" themselves
    assert all(editions.GUARD in s for s in sources[1:5])
    namespace, printed = {"check": lambda fn: None}, []
    namespace["print"] = lambda *args: printed.append(" ".join(map(str, args)))
    for code in sources:
        exec(code, namespace)
    assert printed.count(editions.NOT_DONE) == 1
    skipped = [p for p in printed if p.startswith("Not done yet, so the rest")]
    assert len(skipped) == 4 and "NotImplementedError" in skipped[0] and "NameError" in skipped[1]
    assert printed[-1] == str(math.sqrt(2))
    for edition in ("instructor", "public"):
        assert not any(editions.GUARD in editions.source(c) for c in editions.make_edition(nb, edition)["cells"])


GRADED = '''def g(x):
    """Triple x."""
    # BEGIN SOLUTION
    return x * 3  # the graded solution line
    # END SOLUTION
'''


def _graded_notebook():
    solved = _nb(_md("## Assignment"), _code(GRADED, "solution", "graded"), _code("report = check(g)", "checker"),
                 _code("print(g(2))"))
    return solved, *editions.split_solutions(solved)


def test_graded_solutions_live_outside_the_notebook():
    solved, committed, solutions = _graded_notebook()
    graded_id = solved["cells"][1]["id"]
    assert solutions == {graded_id: GRADED}
    assert editions.source(committed["cells"][1]) == editions.scaffold(GRADED)
    assert "x * 3" not in json.dumps(committed)
    merged = editions.make_edition(committed, "instructor", solutions)
    assert [editions.source(c) for c in merged["cells"]] == [editions.source(c) for c in solved["cells"]]
    # the committed notebook is the public page's source: the task, its scaffold, its checker
    public = editions.make_edition(committed, "public")
    text = json.dumps(public)
    assert "x * 3" not in text and "BEGIN SOLUTION" not in text
    assert "hide-input" not in editions.tags(public["cells"][1])
    assert editions.GUARD in editions.source(public["cells"][3])  # g(2) would raise NotImplementedError
    student = editions.make_edition(committed, "student")
    assert editions.source(student["cells"][1]) == editions.scaffold(GRADED)


def test_a_graded_solution_must_match_its_scaffold_and_never_be_committed():
    solved, committed, solutions = _graded_notebook()
    with pytest.raises(ValueError, match="holds a solution"):
        editions.make_edition(solved, "public")
    with pytest.raises(ValueError, match="no solution"):
        editions.make_edition(committed, "instructor", {})
    drifted = json.loads(json.dumps(committed))
    drifted["cells"][1]["source"] = "def g(x, y):\n    # YOUR CODE HERE\n    raise NotImplementedError"
    with pytest.raises(ValueError, match="scaffold"):
        editions.make_edition(drifted, "instructor", solutions)
    with pytest.raises(ValueError, match="not graded cells"):
        editions.make_edition(committed, "instructor", {**solutions, "other": "x = 1"})


def test_split_and_merge_round_trip_through_the_solutions_folder(tmp_path):
    _, _, solutions = _graded_notebook()
    editions.save_solutions("chXX_exercises.ipynb", solutions, tmp_path)
    assert editions.load_solutions("chXX_exercises.ipynb", tmp_path) == solutions
    assert editions.load_solutions("chYY_exercises.ipynb", tmp_path) == {}


def test_leak_detection_catches_surviving_solution():
    nb = _nb(_code(SOLUTION, "solution"))
    clean = editions.make_edition(nb, "student")
    assert student_edition.leaked_lines(nb, clean) == []
    leaky = json.loads(json.dumps(clean))
    leaky["cells"].append(_code("    y = x * 2  # the distinctive solution line"))
    assert student_edition.leaked_lines(nb, leaky)


# --- the real notebooks ------------------------------------------------------------------

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXERCISES = [p for p in NOTEBOOKS if p.stem.endswith("_exercises")]


def test_student_edition_of_the_book_has_no_solutions(tmp_path):
    written = student_edition.build(ROOT / "notebooks", tmp_path)
    assert len(written) == len(NOTEBOOKS)
    for path in written:
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            assert "instructor" not in editions.tags(cell), path.name
            assert not cell.get("outputs"), path.name
            assert "BEGIN SOLUTION" not in editions.source(cell), path.name


def test_committed_notebooks_hold_no_graded_solution():
    """The repository's notebooks (the Colab and download links) hold each graded assignment's scaffold;
    its solution is in solutions/, and its scaffold is the committed cell."""
    for path in EXERCISES:
        nb = json.loads(path.read_text())
        graded = [c for c in nb["cells"] if editions.is_graded(c)]
        assert graded, f"{path.name} has no graded cell"
        for cell in graded:
            assert "SOLUTION" not in editions.source(cell) and not cell.get("outputs"), path.name
        solutions = editions.load_solutions(path.name)
        if solutions:  # absent in a copy of the repository without solutions/
            assert set(solutions) == {c["id"] for c in graded}, path.name
            editions.make_edition(nb, "instructor", solutions)  # raises if a scaffold drifted


def _staged(path, edition, tmp_path):
    stage = importlib.import_module("stage")
    dest = tmp_path / f"{edition}-{path.name}"
    stage.stage_notebook(path, dest, edition, "test")
    return json.loads(dest.read_text())


@pytest.mark.parametrize("path", EXERCISES, ids=[p.stem for p in EXERCISES])
def test_the_public_edition_shows_no_solution_and_the_instructor_edition_all(path, tmp_path):
    public = _staged(path, "public", tmp_path)
    text = json.dumps(public)
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text and "all cases passed" not in text
    solutions = editions.load_solutions(path.name)
    if not solutions:
        pytest.skip("solutions/ is absent")
    public_code = "\n".join(editions.source(c) for c in public["cells"])
    for solution in solutions.values():
        own = [line.strip() for line in editions.solution_text(solution) if len(line.strip()) > 12]
        assert own and not [line for line in own if line in public_code], path.name
    instructor = _staged(path, "instructor", tmp_path)
    instructor_code = "\n".join(editions.source(c) for c in instructor["cells"])
    assert all(solution in instructor_code for solution in solutions.values())


@pytest.mark.parametrize("path", EXERCISES, ids=[p.stem for p in EXERCISES])
def test_the_public_checker_prints_not_done_yet(path, tmp_path, capsys):
    """What the website's checker cell prints: the student's view of the stub, never a pass."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    import attention_book as ab

    public = _staged(path, "public", tmp_path)
    namespace = {"torch": torch, "ab": ab, "math": math, "nn": nn, "F": F}
    for cell in public["cells"]:
        if editions.is_graded(cell) or "checker" in editions.tags(cell):
            capsys.readouterr()
            exec(editions.source(cell), namespace)
            if "checker" in editions.tags(cell):
                out = capsys.readouterr().out
                assert out.startswith("Not done yet") and "(0 of " in out, out


def test_every_exercises_page_has_a_checked_assignment():
    for path in EXERCISES:
        nb = json.loads(path.read_text())
        assert grade.expected_assignments(nb), f"{path.name} has no checker cell calling ab.assignments.check_*"
        assert any(editions.is_graded(c) for c in nb["cells"]), f"{path.name} has no graded cell"


# Tests that start Jupyter kernels run on one xdist worker, one after another: kernels started at the
# same moment by two processes can pick the same free TCP ports (jupyter/jupyter_client#487).
@pytest.mark.slow
@pytest.mark.xdist_group("kernels")
@pytest.mark.parametrize("path", EXERCISES, ids=[p.stem for p in EXERCISES])
def test_student_notebook_runs_all_to_the_end(path, tmp_path, monkeypatch):
    """"Run All" on a student notebook executes every cell without an error: unfinished scaffolds
    print "Not done yet" and so does every checker.

    What this checks is the edition's flow (a stub never breaks a later cell), not the results,
    which test-notebooks checks on the same notebooks run whole: so every training run is capped at
    two steps (ATTENTION_BOOK_MAX_STEPS, the smoke run's switch; the kernel inherits it), which
    took the ten notebooks, under the same load (about 8 on 2 cores), from over 310 s (the four
    slowest alone: ch07 194, ch08 50, ch10 43, ch04 23 s) to 145 s (ch07 24 s)."""
    monkeypatch.setenv("ATTENTION_BOOK_MAX_STEPS", "2")
    student_edition.build(path.parent, tmp_path, names=[path.name])
    _runs_all_to_the_end(tmp_path / path.name)


def _runs_all_to_the_end(path):
    """Execute the student-edition notebook at ``path`` top to bottom and check that Run All
    reached every cell without an error, that every checker printed "Not done yet" and that
    some scaffold did."""
    from nbclient import NotebookClient

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import kernel_poll  # noqa: F401  (a missed socket wake-up would stall this run: see its docstring)

    node = nbformat.read(path, as_version=4)
    NotebookClient(node, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    code = [c for c in node.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), f"{path.name}: Run All did not reach every cell"
    for cell in code:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, (f"{path.name}: Run All stopped at {errors[0]['ename']}: {errors[0]['evalue']}\n"
                            f"{cell.source[:300]}")
    printed = ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream") for c in code]
    for cell, out in zip(code, printed):
        if "checker" in editions.tags(cell):
            assert out.startswith("Not done yet") and "(0 of " in out, f"{path.name}: checker printed {out!r}"
            assert "all cases passed" not in out
    assert any("Not done yet" in out for out in printed), f"{path.name}: no scaffold said it is not done"


def test_the_student_edition_drops_the_websites_bookkeeping():
    """A fresh instructor: the student edition kept the internal ``ab.glue(...)``/``ab.glue_counts(...)``
    cells (``remove-cell``: hidden only on the website). A bookkeeping cell whose names no later cell
    uses is dropped; one a later cell needs, and a remove-cell without glue, are kept."""
    nb = _nb(_code("import attention_book as ab\nratio = 2.0"),
             _code('ab.glue("ex_ratio", ratio)\nab.glue_counts("c", "ch03.x")\nscratch = ratio * 2', "remove-cell"),
             _code('ab.glue("ex_kept", ratio)\nneeded = ratio + 1', "remove-cell"),
             _code("setup = 1", "remove-cell"),
             _code('log = []\nab.glue("ex_log", ratio)\nlog.append(1)', "remove-cell"),
             _code("print(needed, setup)"))
    student = editions.make_edition(nb, "student")
    sources = [editions.source(c) for c in student["cells"]]
    assert not any("ex_ratio" in s for s in sources), sources
    assert "needed = ratio + 1" in sources and "setup = 1" in sources, sources  # glue cut, the rest kept
    assert "log = []\nlog.append(1)" in sources, sources  # it changes an object: kept, its glue cut
    assert editions.source(editions.make_edition(nb, "public")["cells"][1]).startswith('ab.glue("ex_ratio"')
    real = editions.make_edition(json.loads((ROOT / "notebooks" / "ch03_exercises.ipynb").read_text()), "student")
    assert not any("ab.glue" in editions.source(c) for c in real["cells"])


# --- the website's practice notebooks (book/_ext/book_site.py, issues 36 and 37) -------------

def _book_site():
    ext = str(ROOT / "book" / "_ext")
    if ext not in sys.path:
        sys.path.insert(0, ext)
    return importlib.import_module("book_site")


def test_the_sites_practice_notebooks_hold_no_solution(tmp_path):
    """A fresh learner on chapter 10's exercises page had no notebook to work in (the page's
    download holds the solutions as runnable cells). The site's build writes one practice notebook
    per exercises page: the student edition, with no solution line and no hidden check."""
    written = _book_site().write_practice(ROOT / "notebooks", tmp_path / "_static")
    assert sorted(p.name for p in written) == sorted(p.name for p in EXERCISES)
    assert all(p.parent == tmp_path / "_static" / "practice" for p in written)
    for path in written:
        nb = json.loads(path.read_text())
        original = json.loads((ROOT / "notebooks" / path.name).read_text())
        assert not student_edition.leaked_lines(original, nb, editions.load_solutions(path.name)), path.name
        for cell in nb["cells"]:
            text = editions.source(cell)
            assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, path.name
            assert "instructor" not in editions.tags(cell) and not cell.get("outputs"), path.name
            assert not ("remove-cell" in editions.tags(cell) and "ab.claim(" in text), (path.name, text[:80])
        assert "# YOUR CODE HERE" in "\n".join(map(editions.source, nb["cells"])), path.name


def test_the_practice_notebook_drops_only_checks_nothing_later_needs():
    """Hidden cells of nothing but ``ab.claim``, ``assert``, ``ab.assert_trained`` and
    ``torch.testing.assert_close`` (guarded or not) go; one binding a name a later cell reads, one
    with other work (a thread setting) and the visible cells stay."""
    nb = _nb(_code("import attention_book as ab\nimport torch\nx = 2.0"),
             _code(SOLUTION, "solution"),
             _code('ab.claim("ch01.x", x > 1, "x above one")\nassert x > 0', "remove-cell"),
             _code("try:\n    torch.testing.assert_close(f(x), 2 * x)\nexcept NameError as not_done:\n"
                   "    print(not_done)", "remove-cell"),
             _code("kept = x * 3\nassert kept > 0", "remove-cell"),
             _code("torch.set_num_threads(1)", "remove-cell"),
             _code("assert x > 0"),
             _code("print(kept)"))
    practice = student_edition.practice_edition(nb)
    sources = [editions.source(c) for c in practice["cells"]]
    assert not any("ch01.x" in s or "assert_close" in s for s in sources), sources
    assert "kept = x * 3\nassert kept > 0" in sources and "torch.set_num_threads(1)" in sources
    assert "assert x > 0" in sources and sources[-1] == "print(kept)"
    assert len(sources) == len(editions.make_edition(nb, "student")["cells"]) - 2


@pytest.mark.slow
@pytest.mark.xdist_group("kernels")
def test_a_practice_notebook_runs_all_to_the_end(tmp_path, monkeypatch):
    """The practice copy drops cells, so Run All is checked on it too, on one notebook: chapter
    10's, 6 of its 39 cells dropped (test_student_notebook_runs_all_to_the_end runs every
    student edition)."""
    monkeypatch.setenv("ATTENTION_BOOK_MAX_STEPS", "2")
    written = _book_site().write_practice(ROOT / "notebooks", tmp_path)
    _runs_all_to_the_end(next(p for p in written if p.name == "ch10_exercises.ipynb"))


def test_the_student_edition_is_the_practice_notebook(tmp_path):
    """A fresh instructor found the student edition (make student) still held a hidden check cell
    with the one-line answer of exercise 11.1.2 (``torch.cov(K.T, ..., aweights=...)``), and
    ch05/ch06's ``ab.claim``/``ab.assert_trained`` cells run on a student's own results. The
    student edition is now the website's practice notebook: both drop those hidden checks."""
    written = student_edition.build(ROOT / "notebooks", tmp_path)
    for path in written:
        nb = json.loads(path.read_text())
        original = json.loads((ROOT / "notebooks" / path.name).read_text())
        assert nb == student_edition.practice_edition(original, path.name), path.name
    text = (tmp_path / "ch01_exercises.ipynb").read_text()
    assert "torch.cov(" not in text and "aweights" not in text
    for name in ("ch05_exercises.ipynb", "ch06_exercises.ipynb"):
        cells = json.loads((tmp_path / name).read_text())["cells"]
        assert not any("remove-cell" in editions.tags(c) and ("ab.claim(" in editions.source(c)
                       or "ab.assert_trained(" in editions.source(c)) for c in cells), name


def test_the_practice_notebook_renders_cite_and_glue_roles(tmp_path):
    """Fresh learners read raw MyST in their practice notebooks: {glue:text}`sim_input:.2f` (the
    discussion had no numbers), {cite}`zhang2023d2l`, {cite:t}`shaw2018`. The practice and student
    editions render them as the page does: author-year text from book/references.bib, the glued
    value the site's executed notebook shows, and neutral words where no value is known."""
    text = "As {cite:t}`shaw2018` say {cite}`zhang2023d2l`, it is {glue:text}`sim_input:.2f` ({cite}`nokey`)."
    nb = _nb(_md(text), _code("x = 1"))
    student = editions.source(student_edition.practice_edition(nb)["cells"][0])
    assert student == ("As Shaw et al. (2018) say (Zhang et al., 2023), it is "
                       "(a number given on the book's website) ([nokey])."), student
    site = editions.source(student_edition.practice_edition(nb, glued={"sim_input": 0.24695})["cells"][0])
    assert "it is 0.25 (" in site, site
    # the site's build reads the values from the executed notebook, or myst-nb's glue.json
    glue = {"sim_input": {"data": {"text/plain": "0.24695803225040436"}, "output_type": "display_data",
                          "metadata": {"scrapbook": {"mime_prefix": "application/papermill.record/",
                                                     "name": "sim_input"}}}}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "ch06_exercises.glue.json").write_text(json.dumps(glue))
    written = _book_site().write_practice(ROOT / "notebooks", tmp_path / "_static", [tmp_path / "run"])
    md = {p.name: "\n".join(editions.source(c) for c in json.loads(p.read_text())["cells"]
                            if c["cell_type"] == "markdown") for p in written}
    assert "{glue:" not in "".join(md.values()) and "{cite" not in "".join(md.values())
    assert "0.25" in md["ch06_exercises.ipynb"]  # sim_one: not in the glue.json, neutral words
    assert "(a number given on [the book's website](https://" in md["ch06_exercises.ipynb"]
    built = student_edition.build(ROOT / "notebooks", tmp_path / "student")
    assert not any("{glue:" in p.read_text() or "{cite" in p.read_text() for p in built)


def test_a_glued_number_the_notebook_lacks_never_points_at_a_printout():
    """Fresh learners on ch06_exercises read "held in (the number your run prints above) of (the number
    your run prints above) runs of the book's seed check" in 11.6.1: no run of theirs prints those
    counts. The practice notebook now shows the site's own numbers, the seed check's counts as they
    are ("5 of 5 runs of the book's seed check") and a run's numbers said to be the book's run's; a
    number it lacks is "given on the book's website" (linked to the page), never a printout."""
    text = ("It ends at {glue:text}`acc:.3f` in this run; it held in {glue:text}`x_held` of\n"
            "{glue:text}`x_runs` runs of the book's seed check.")
    site = student_edition.render_roles(text, {}, {"acc": 0.91234, "x_held": 5, "x_runs": 5}, "https://s/p.html")
    assert site.startswith("It ends at 0.912 in this run; it held in 5 of\n5 runs of the book's seed check.")
    assert site.endswith("*The numbers in this text are from the book's own run, as on "
                         "[the book's website](https://s/p.html); a run of yours may give others.*"), site
    counts_only = student_edition.render_roles("held in {glue:text}`x_held` of {glue:text}`x_runs` runs.", {},
                                               {"x_held": 4, "x_runs": 5})
    assert counts_only == "held in 4 of 5 runs.", counts_only  # the seed check is the book's anyway
    bare = student_edition.render_roles(text, {}, None, "https://s/p.html")
    assert bare == ("It ends at (a number given on [the book's website](https://s/p.html)) in this run; it held "
                    "in (a count given on the book's website) runs of the book's seed check.")  # one link
    assert student_edition.render_roles(text, {}) == (
        "It ends at (a number given on the book's website) in this run; it held "
        "in (a count given on the book's website) runs of the book's seed check.")
    # chapter 6's page itself, from the committed notebook: with the site's values and without
    nb = json.loads((ROOT / "notebooks" / "ch06_exercises.ipynb").read_text())
    glued = {"sim_input": 0.27, "sim_one": 0.97, "sim_plain": 0.99, "sim_res_4": 0.41, "sim_res_6": 0.5,
             "sim_residual": 0.6, "res_slows_held": 5, "res_slows_runs": 5}
    for values in (glued, None):
        md = "\n".join(editions.source(c) for c in student_edition.practice_edition(nb, "ch06_exercises.ipynb",
                                                                                  values)["cells"]
                       if c["cell_type"] == "markdown")
        assert "prints above" not in md and "{glue" not in md
        if values:
            assert "held in 5 of\n5 runs of the book's seed check" in md and "from the book's own run" in md
        else:
            assert "held in (a count given on the book's website) runs of the book's seed check" in md
            assert md.count("[the book's website](https://attention-book.github.io/attention-book/notebooks/"
                            "ch06_exercises.html)") == 1  # once in the paragraph, at its first number


def test_the_editions_link_to_the_website_not_to_relative_files(tmp_path):
    """A practice notebook opened in Colab or downloaded lost its relative links
    (``ch06_self_attention.ipynb``, ``../book/setup.md``). They point at the website's pages, whose
    address comes from _config.yml's ``repository: url:`` (GitHub Pages', as the size line's), and
    at the file on GitHub where no site address can be had; URLs and anchors are left alone."""
    site = ("https://o.github.io/r/", "https://github.com/o/r", "dev")
    text = ("[the chapter](ch06_self_attention.ipynb#a-b), [setup](../book/setup.md), ![f](img/a.png), "
            '[t](ch05_multihead_attention.ipynb "title"), [u](https://x.org/y.ipynb), [a](#here), [m](mailto:a@b)')
    assert student_edition.absolute_links(text, addresses=site) == (
        "[the chapter](https://o.github.io/r/notebooks/ch06_self_attention.html#a-b), "
        "[setup](https://o.github.io/r/book/setup.html), ![f](https://github.com/o/r/raw/dev/notebooks/img/a.png), "
        '[t](https://o.github.io/r/notebooks/ch05_multihead_attention.html "title"), [u](https://x.org/y.ipynb), '
        "[a](#here), [m](mailto:a@b)")
    no_site = student_edition.absolute_links("[c](ch06_self_attention.ipynb)", addresses=("", *site[1:]))
    assert no_site == "[c](https://github.com/o/r/blob/dev/notebooks/ch06_self_attention.ipynb)"
    assert student_edition.absolute_links("[c](x.ipynb)", addresses=("", "", "main")) == "[c](x.ipynb)"
    # the address is the one setting in _config.yml (a fork's), or the configured site address
    assert student_edition.site_addresses(ROOT) == (
        "https://attention-book.github.io/attention-book/", "https://github.com/attention-book/attention-book",
        "main")

    def config(tmp, text):
        tmp.mkdir()
        (tmp / "_config.yml").write_text(text)
        return student_edition.site_addresses(tmp)

    fork = config(tmp_path / "a", 'title: x\nrepository:\n  url: "https://github.com/Some-One/book/"\n'
                                   "  branch: dev\nhtml:\n  favicon: x\n")
    assert fork[1:] == ("https://github.com/Some-One/book", "dev")
    if fork[0]:  # book/_ext/size_banner.py needs docutils; without it the GitHub file URLs serve
        assert fork[0] == "https://some-one.github.io/book/"
    own = config(tmp_path / "b", "repository:\n  url: https://github.com/a/b\nsphinx:\n  config:\n"
                                  "    size_banner_site_url: https://book.example.org\n")
    assert own[0] in ("https://book.example.org/", "")
    assert config(tmp_path / "c", "title: no repository\n") == ("", "", "main")
    # every markdown link of every student edition is absolute (or an anchor)
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = student_edition.practice_edition(json.loads(path.read_text()), path.name)
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                for target in re.findall(r"\]\(([^)\s]+)", editions.source(cell)):
                    assert re.match(r"https?://|#|mailto:", target), (path.name, target)


def test_build_makes_both_editions_in_one_loop(tmp_path, capsys):
    """A diff reviewer: build_practice repeated build's loop. The practice notebooks are build's
    exercises pages (``pattern``), also from the command line (``--practice``)."""
    practice = student_edition.build_practice(ROOT / "notebooks", tmp_path / "practice")
    names = sorted(p.name for p in (ROOT / "notebooks").glob("ch[0-9][0-9]_exercises.ipynb"))
    assert [p.name for p in practice] == names
    student_edition.main(["student_edition.py", str(ROOT / "notebooks"), str(tmp_path / "cli"), "--practice"])
    assert f"{len(names)} notebooks written" in capsys.readouterr().out
    for path in practice:
        assert path.read_text() == (tmp_path / "cli" / path.name).read_text(), path.name
    with pytest.raises(SystemExit):
        student_edition.main(["student_edition.py", "--help"])
    assert "--practice" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        student_edition.main(["student_edition.py", str(tmp_path / "nowhere"), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_the_values_of_an_executed_notebook_are_read_under_their_scrapbook_prefix():
    """``ab.glue`` glues without display: the executed notebook (make book's staged one, which the
    site's build reads first) stores the value under "application/papermill.record/text/plain", and
    myst-nb's glue.json under "text/plain". Only the latter was read, so a first build's practice
    notebooks showed no number at all."""
    prefix = "application/papermill.record/"
    executed = {"cells": [{"cell_type": "code", "source": "", "outputs": [
        {"output_type": "display_data", "data": {prefix + "text/plain": "0.24695803225040436"},
         "metadata": {"scrapbook": {"mime_prefix": prefix, "name": "sim_input"}}},
        {"output_type": "display_data", "data": {prefix + "text/plain": "5"},
         "metadata": {"scrapbook": {"mime_prefix": prefix, "name": "res_slows_held"}}},
        {"output_type": "stream", "name": "stdout", "text": "printed\n"}]}]}
    assert student_edition.glued_values(executed) == {"sim_input": 0.24695803225040436, "res_slows_held": 5}


def test_a_practice_notebook_lists_the_works_it_cites():
    """ch06's practice notebook read "(Zhang et al., 2023)" and "(Shaw et al., 2018)" with no list
    to look them up in (a fresh learner, issue 36): it ends with a References cell, its entries as
    the website's bibliography writes them; a notebook citing nothing gets none."""
    nb = json.loads((ROOT / "notebooks" / "ch06_exercises.ipynb").read_text(encoding="utf-8"))
    cells = student_edition.practice_edition(nb, "ch06_exercises.ipynb")["cells"]
    last = editions.source(cells[-1])
    assert last.startswith("## References")
    entries = [line for line in last.split("\n") if line.startswith("* ")]
    assert [e.split("**")[1] for e in entries] == ["Shaw et al., 2018.", "Zhang et al., 2023."]
    assert "Self\\-attention with relative position representations" in entries[0]
    assert student_edition.references_cell(["no citation here"]) is None
