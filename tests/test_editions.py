"""Student edition and public edition (scripts/editions.py, student_edition.py); grading is tests/test_grade.py."""

import importlib.util
import json
import math
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
    # The public site shows the answer folded under "Show answer", and folds solution code under "Show code".
    public = editions.make_edition(nb, "public")
    assert len(public["cells"]) == 4
    assert editions.source(public["cells"][1]) == ":::{dropdown} Show answer\nThe answer is 42 because $x^2$ ...\n:::"
    code = public["cells"][2]
    assert "hide-input" in editions.tags(code) and "x * 2" in editions.source(code)
    assert code["metadata"]["mystnb"] == {"code_prompt_show": "Show code", "code_prompt_hide": "Hide code"}
    assert code["outputs"] == nb["cells"][2]["outputs"]
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
    assert sources[6] == "check(f)"  # checker cells report "not implemented yet" themselves
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


def test_every_exercises_page_has_a_checked_assignment():
    for path in EXERCISES:
        nb = json.loads(path.read_text())
        assert grade.expected_assignments(nb), f"{path.name} has no checker cell calling ab.assignments.check_*"
        assert any("solution" in editions.tags(c) for c in nb["cells"]), f"{path.name} has no solution cell"


# Tests that start Jupyter kernels run on one xdist worker, one after another: kernels started at the
# same moment by two processes can pick the same free TCP ports (jupyter/jupyter_client#487).
@pytest.mark.slow
@pytest.mark.xdist_group("kernels")
@pytest.mark.parametrize("path", EXERCISES, ids=[p.stem for p in EXERCISES])
def test_student_notebook_runs_all_to_the_end(path, tmp_path):
    """"Run All" on a student notebook (3-25 s each at the ci size) executes every cell without
    an error: unfinished scaffolds print "Not done yet" and every checker "not implemented yet"."""
    from nbclient import NotebookClient

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import kernel_poll  # noqa: F401  (a missed socket wake-up would stall this run: see its docstring)

    student_edition.build(path.parent, tmp_path, names=[path.name])
    node = nbformat.read(tmp_path / path.name, as_version=4)
    NotebookClient(node, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in node.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), f"{path.name}: Run All did not reach every cell"
    for cell in code:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, (f"{path.name}: Run All stopped at {errors[0]['ename']}: {errors[0]['evalue']}\n"
                            f"{cell.source[:300]}")
    printed = ["".join(o.get("text", "") for o in c.outputs if o.output_type == "stream") for c in code]
    for cell, out in zip(code, printed):
        if "checker" in editions.tags(cell):
            assert "not implemented yet" in out, f"{path.name}: checker printed {out!r}"
    assert any("Not done yet" in out for out in printed), f"{path.name}: no scaffold said it is not done"
