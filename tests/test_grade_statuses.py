"""Every outcome of a notebook said once, plainly, and as the instructors' guide says it (issue 37,
the last attacker's and instructor's reads):

- a notebook that kills every process (``os.kill(-1, 9)``) was "no results: worker exited with 137:
  Fontconfig error ...": no cell named, a library's stderr shown to the student;
- a notebook without the required function was "graded 0/9" with "not there" nine times, while the
  guide's table said "no results";
- the guide's status table and the statuses the grader writes could drift apart.

The first two are graded here with the sandbox's run replaced by what it returns (seconds, no
kernel); tests/test_grade_feedback.py grades both for real.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
import grade
import lms_export
from attention_book.assignments.grading import run_hidden
from test_grade import GOOD, SCAFFOLD, notebook

REFERENCE = "ch03_exercises.ipynb"
NOISE = b"Fontconfig error: Cannot load default config file: No such file: (null)\n"


@pytest.fixture(scope="module")
def grader(tmp_path_factory):
    """A grader (its judge and package copy: about 10 s on a busy machine), shared by this file's tests."""
    if grade.Sandbox.detect(2**30).kind != "bubblewrap":
        pytest.skip("the grader's sandbox (bubblewrap) is not available here")
    ref = tmp_path_factory.mktemp("statuses") / "ref"
    ref.mkdir()
    (ref / REFERENCE).write_text(json.dumps(notebook(SCAFFOLD)))
    g = grade.Grader(ref, 30, 2.0, 64)
    yield g
    g.close()


def _grade(grader, tmp_path, monkeypatch, nb: dict, sandbox_run) -> list[dict]:
    sub = tmp_path / "sub.ipynb"
    sub.write_text(json.dumps(nb))
    monkeypatch.setattr(grade, "run_sandboxed", sandbox_run)
    seeds = {n: 3 for n in grader.references[REFERENCE]}
    return grader.grade_notebook("ann", sub, REFERENCE, seeds)


@pytest.mark.slow
@pytest.mark.xdist_group("statuses")
def test_a_notebook_that_kills_every_process_is_told_which_cell(grader, tmp_path, monkeypatch):
    """The worker is killed with the kernel, so it never reports: the row is 'kernel died', names the
    cell that started last and the signal, and carries nothing of the sandbox's stderr. Before: 'no
    results' with 'the hidden tests did not run (worker exited with 137: Fontconfig error ...)'."""
    nb = notebook(GOOD, "import os\nos.kill(-1, 9)")
    killed = {"started:0": b"", "started:1": b"", "started:2": b"", grade.STDERR_KEY: NOISE}
    rows = _grade(grader, tmp_path, monkeypatch, nb, lambda *a, **k: ("worker exited with 137", killed, 2.0))
    assert [r["status"] for r in rows] == ["kernel died"], rows
    reason = rows[0]["reason"]
    assert "killed by signal 9 (SIGKILL)" in reason and "code cell 3 of 4 (first line: import os)" in reason
    assert "Fontconfig" not in reason and "137" not in reason and "worker" not in reason, reason
    text = grade.feedback_markdown({"student": "ann"}, [dict(rows[0], points=0.0, max_points=10.0)])
    assert "Fontconfig" not in text and "code cell 3 of 4" in text and "Run All from the top" in text
    # a worker that stopped before any cell started is the grader's failure: its stderr is the instructor's
    rows = _grade(grader, tmp_path, monkeypatch, nb,
                  lambda *a, **k: ("worker exited with 1", {grade.STDERR_KEY: NOISE}, 0.5))
    assert rows[0]["status"] == "grader error" and "Fontconfig error" in rows[0]["reason"], rows
    assert "grader error" not in grade.SCORED


def _syntax_error_run(cell: int):
    """The run of a notebook whose exercise cell (code cell ``cell``) does not parse: the kernel raises
    SyntaxError there, so the function never exists when the hidden tests run."""
    def run(sandbox, stage, pkg, *args, **kwargs):
        out = stage.parent / "results"
        run_hidden("masked_softmax", None, str(stage / "cases-masked_softmax.bin"), str(out))
        worker = {"errors": [{"cell": cell, "error": "SyntaxError: unmatched ')' (line 2)"}],
                  "harness": [], "worker": ""}
        return "finished", {"worker": json.dumps(worker).encode(), "started:0": b"", "started:1": b"",
                            "started:2": b"", "results:masked_softmax": out.read_bytes()}, 3.0
    return run


@pytest.mark.slow
@pytest.mark.xdist_group("statuses")
def test_a_function_that_does_not_parse_is_not_defined_and_says_why(grader, tmp_path, monkeypatch):
    """An instructor (8/10): 'return torch.softmax(filled, dim=-1) * keep)' (one parenthesis too many)
    got 'not defined: define it in the exercise cell' and the SyntaxError was named nowhere: the student
    says 'but I did define it'. The row and the feedback now name the cell and its error."""
    nb = notebook("def my_masked_softmax(scores, valid_lens, window):\n"
                  "    return torch.softmax(scores, dim=-1) * 1)")
    rows = _grade(grader, tmp_path, monkeypatch, nb, _syntax_error_run(1))
    assert [r["status"] for r in rows] == ["not defined"], rows
    r = dict(rows[0])
    assert "SyntaxError" in r["reason"] and "code cell 2 of 3" in r["reason"], r["reason"]
    assert r["reason"].startswith("`my_masked_softmax` is not defined"), r["reason"]
    text = grade.feedback_markdown({"student": "ann"}, [dict(r, points=0.0, max_points=10.0)])
    assert "SyntaxError" in text and "One of your cells raised an error" in text, text


def test_exit_words():
    assert grade.exit_words("worker exited with 137") == "killed by signal 9 (SIGKILL)"
    assert grade.exit_words("worker exited with -15") == "killed by signal 15 (SIGTERM)"
    assert grade.exit_words("worker exited with 2") == "exit status 2"


def _missing_function_run():
    """The sandbox's run of a notebook whose function does not exist: the harness's own records."""
    def run(sandbox, stage, pkg, *args, **kwargs):
        out = stage.parent / "results"
        run_hidden("masked_softmax", None, str(stage / "cases-masked_softmax.bin"), str(out))
        return "finished", {"worker": b'{"errors": [], "harness": [], "worker": ""}', "started:0": b"",
                            "started:3": b"", "results:masked_softmax": out.read_bytes()}, 3.0
    return run


@pytest.mark.slow
@pytest.mark.xdist_group("statuses")
def test_a_missing_function_is_one_line_and_its_own_status(grader, tmp_path, monkeypatch):
    """Before: 'graded', 0 of 9, and 'the function named in your checker cell is not there' once per
    case. Now 'not defined' (scored 0, as the guide says), one line naming the function and where to
    define it, no case listed in the feedback."""
    nb = notebook("x = 1")  # the scaffold's cell deleted: my_masked_softmax is never defined
    rows = _grade(grader, tmp_path, monkeypatch, nb, _missing_function_run())
    assert [r["status"] for r in rows] == ["not defined"], rows
    r = dict(rows[0])
    assert r["passed"] == 0 and r["total"] == 9 and len(r["cases"]) == 9
    assert r["reason"].startswith("`my_masked_softmax` is not defined: define it in the exercise cell"), r
    assert "check_masked_softmax" in r["reason"] and r["reason"].count("not defined") == 1
    assert "not defined" in grade.SCORED and "not defined" in lms_export.GRADED
    text = grade.feedback_markdown({"student": "ann"}, [dict(r, points=0.0, max_points=10.0)])
    assert text.count("is not defined") == 1 and "Hidden case" not in text and "not there" not in text, text
    assert "**What to do:** Define the function in the exercise cell" in text
    # a name bound to something else than a function
    assert grade.not_defined("f", "bleu", "... (expected your function, got int)").startswith(
        "`f` is not a function (it is a int)")


def _guide_statuses() -> dict[str, list[str]]:
    text = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    table = text.split("| status | meaning | points | in `canvas.csv` |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for line in table.strip().splitlines()[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        rows[re.fullmatch(r"`([a-z ]+)`", cells[0]).group(1)] = cells[1:]
    return rows


def test_the_guides_status_table_is_what_the_grader_writes():
    """Every status the guide lists is one the grader writes, and the other way round; 'none' points
    and a blank Canvas cell exactly for the statuses that are not scored; the guide's line for a
    missing function is the grader's own."""
    guide = _guide_statuses()
    assert set(guide) == set(grade.STATUS_WORDS), set(guide) ^ set(grade.STATUS_WORDS)
    for status, (meaning, points, canvas) in guide.items():
        scored = status in grade.SCORED
        assert scored == (status in lms_export.GRADED), status
        assert (points != "none") == scored and (canvas not in ("blank", "no row")) == scored, (status, canvas)
    assert guide["refused"][2] == "no row"  # refused folders are left out of the LMS files (see tests of them)
    line = grade.not_defined("my_masked_softmax", "masked_softmax", "(expected your function, got NoneType)")
    assert line.split(", and keep")[0] in guide["not defined"][0], (line, guide["not defined"])
    assert "does not exist" not in guide["no results"][0]


def test_an_ignored_files_reason_names_the_graded_file_escaped(tmp_path):
    """'an earlier version: <the graded file> is graded instead' quoted the folder's raw name (a tab) in
    ignored.csv's reason and the console line; it is written as display_name does."""
    folder = tmp_path / "bo\tb "
    folder.mkdir()
    for name in ("ch03_exercises.ipynb", "ch03_exercises-1.ipynb"):
        (folder / name).write_text("{}")
    found, ignored = grade.find_submissions(tmp_path, {REFERENCE: ["masked_softmax"]})
    assert len(found) == 1 and len(ignored) == 1, (found, ignored)
    why = ignored[0][1]
    assert "bo\\x09b /ch03_exercises-1.ipynb is graded instead" in why and "\t" not in why, why


def test_the_blocked_call_hedge_is_only_for_errors_that_may_follow_from_it():
    """A fresh instructor: a student's own ``raise RuntimeError("I was debugging this")`` was told it
    "may only follow from" the chapter's blocked ``ab.masked_softmax`` call. The hedge is for an error
    that call could cause: a NameError on a name the blocked cell would have defined, or an error in a
    cell that uses one; a student's own error is said plainly."""
    nb = notebook(GOOD)
    cells = ["weights = ab.masked_softmax(torch.ones(1, 2, 2))", 'raise RuntimeError("I was debugging this")',
             "print(weights.shape)", "print(undefined_here)"]
    for i, source in enumerate(cells):
        nb["cells"].insert(1 + i, {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
                                   "execution_count": None})
    grader = grade.Grader.__new__(grade.Grader)
    grader.reference_sources = {REFERENCE: set()}
    blocked = {"cell": 1, "error": "BlockedAnswer: the package's own masked_softmax is not available"}

    def line(cell, error):
        return grader._run_all_stop(nb, [blocked, {"cell": cell, "error": error}], REFERENCE)

    own = line(2, "RuntimeError: I was debugging this")
    assert own == grade.stopped_run_all(nb, 2, "RuntimeError: I was debugging this"), own
    assert "blocks" not in own and "may only follow" not in own
    follows = line(3, "NameError: name 'weights' is not defined")
    assert "may only follow from it" in follows, follows
    assert "may only follow" not in line(4, "NameError: name 'undefined_here' is not defined")
    assert "may only follow" in line(3, "AttributeError: 'NoneType' object has no attribute 'shape'")


@pytest.mark.parametrize("files, graded, why", [
    # a fresh attacker (issue 37, 7/10): "100" < "99" as text, so 99 was graded and 100 called earlier
    (["ada/ada_101_99_ch03_exercises.ipynb", "ada/ada_101_100_ch03_exercises.ipynb"],
     "ada/ada_101_100_ch03_exercises.ipynb", "an earlier version (a lower LMS submission ID)"),
    # the exact name beats an LMS-looking name in a student's folder (zz_ sorted after ch03 and was graded)
    (["ada/ch03_exercises.ipynb", "ada/zz_1_1_ch03_exercises.ipynb"], "ada/ch03_exercises.ipynb",
     "its name has an LMS prefix; the file named ch03_exercises.ipynb is graded"),
    (["ada/ch03_exercises.ipynb", "ada/ada_101_100_ch03_exercises.ipynb"], "ada/ch03_exercises.ipynb",
     "its name has an LMS prefix; the file named ch03_exercises.ipynb is graded"),
    # a notebook in a subfolder of a student's folder: never graded, listed in the student's feedback
    (["ada/ch03_exercises.ipynb", "ada/old/ch03_exercises (5).ipynb"], "ada/ch03_exercises.ipynb",
     "in the folder old/: only files directly in the submission are graded"),
])
def test_which_file_of_a_students_folder_is_graded(tmp_path, files, graded, why):
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    found, ignored = grade.find_submissions(tmp_path, {REFERENCE: ["masked_softmax"]})
    assert [s.rel for s in found] == [graded], (found, ignored)
    assert [w for _, w in found[0].others] == [why], found[0].others


def test_a_file_with_two_lms_prefixes_of_one_user_id_is_the_students_and_listed(tmp_path):
    """A fresh attacker (issue 37, 7/10): ``eve_300_900_eve_300_800_ch03_exercises.ipynb`` (a download renamed
    again) was ignored "at the top level without an LMS name" and missing from eve's several-files note: it is
    eve's, listed there. Two prefixes of two user ids (``eve_300_900_bob_102_999_…``) cannot be told from a
    crafted sortable name (8/10, test_grade_canvas_ids.py): refused, listed, no one's."""
    for name in ("eve_300_900_ch03_exercises.ipynb", "eve_300_900_eve_300_800_ch03_exercises.ipynb",
                 "eve_300_900_bob_102_999_ch03_exercises.ipynb"):
        (tmp_path / name).write_text("{}")
    found, ignored = grade.find_submissions(tmp_path, {REFERENCE: ["masked_softmax"]})
    assert [(s.key, s.rel) for s in found] == [("eve_300", "eve_300_900_ch03_exercises.ipynb")], ignored
    note = grade.several_files(found[0])["note"]
    assert "'eve_300_800_ch03_exercises.ipynb' (its name is not ch03_exercises.ipynb)" in note, note
    assert "bob" not in note, note
    why = dict((str(rel), w) for rel, w in ignored)["eve_300_900_bob_102_999_ch03_exercises.ipynb"]
    assert why.startswith("REFUSED: its name holds the user IDs 300 and 102"), why


def test_a_course_file_grades_and_exports_only_its_assignments(tmp_path, monkeypatch):
    """A fresh instructor (issue 37, 7.5/10, a blocker): ``zed_300_904_ch01_exercises.ipynb`` was graded while
    the course file named only masked_softmax and bleu, and got a column in canvas.csv/moodle.csv with no
    Canvas ID (an import would create a new assignment). With a course file, only its assignments are graded
    and exported; a notebook with none of them is listed in ignored.csv with the reason."""
    from test_grade_engine import fake_grading

    ran = fake_grading(monkeypatch)
    reference = tmp_path / "ref"
    reference.mkdir()
    for name in ("ch01_exercises.ipynb", "ch03_exercises.ipynb", "ch04_exercises.ipynb"):
        (reference / name).write_text((Path(grade.__file__).parent.parent / "notebooks" / name).read_text())
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ("ch01_exercises", "ch03_exercises", "ch04_exercises"):
        (subs / f"zed_300_904_{name}.ipynb").write_text("{}")
    (tmp_path / "c.toml").write_text('[assignments.masked_softmax]\npoints = 20\ncanvas_id = "4711"\n'
                                     '[assignments.bleu]\npoints = 10\ncanvas_id = "4712"\n')
    out = tmp_path / "out" / "grades.csv"
    rows = grade.grade(subs, out, 10, reference, secret="s" * 40, course_file=tmp_path / "c.toml")
    assert sorted(r["assignment"] for r in rows) == ["bleu", "masked_softmax"], rows
    assert sorted(ran) == ["zed_300_904_ch03_exercises.ipynb", "zed_300_904_ch04_exercises.ipynb"], ran
    header = (out.parent / "moodle.csv").read_text().splitlines()[0]
    assert "softmax_pool" not in header and "masked_cross_entropy" not in header, header
    ignored = (out.parent / "ignored.csv").read_text()
    assert "zed_300_904_ch01_exercises.ipynb" in ignored
    assert "the course file names none of ch01_exercises.ipynb's assignments (softmax_pool)" in ignored, ignored
