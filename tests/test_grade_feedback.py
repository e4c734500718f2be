"""Feedback a student can act on, and an upload Canvas can match (issue 37, a fresh instructor's read):

- a notebook that runs out of time is told which cell was running (its place and first line);
- a cell of the student's own that raised is named, although the graded functions still score;
- without a roster no canvas.csv is written (its rows could not be matched), loudly.

The end-to-end test grades two notebooks in the sandbox (about a minute on two busy cores).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
import grade
from test_grade import GOOD, SCAFFOLD, notebook

SECRET = "a course secret for the feedback tests, 32+ characters"
LOOP = "while True:  # a loop that never ends\n    pass\n"
BOOM = 'raise RuntimeError("boom")\n'
KILL_ALL = "import os\nos.kill(-1, 9)  # every process the notebook can reach"
# folder names refused in pairs (the same once the spaces at their ends are removed); one a formula
REFUSED = ("ada", "ada ", "=1+1", " =1+1")
TIMEOUT = 45  # seconds per notebook: room for the kernel and torch's import on a busy machine


def _with_cell(nb: dict, index: int, source: str) -> dict:
    nb["cells"].insert(index, {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
                               "execution_count": None})
    return nb


# --------------------------------------------------------------------------- which cell (no sandbox)


def test_the_running_cell_is_named_by_place_and_first_line_only():
    """"code cell N of M" counts code cells from 1 (markdown cells left out); the first non-blank line
    is quoted on one line, cut near 80 characters; the cell the grader appends (the hidden tests) and
    a kernel that never started are said in words, with nothing of the hidden cases."""
    nb = notebook(GOOD, "\n\n  x = [" + "1234567890, " * 20 + "]\nprint(x)")
    nb["cells"].insert(1, {"cell_type": "markdown", "metadata": {}, "source": "# Not counted"})
    code = len([c for c in nb["cells"] if c["cell_type"] == "code"])
    where = grade.running_cell(nb, {"started:0": b"", "started:3": b""})
    assert where.startswith(f"it was running code cell 3 of {code} (first line: x = [1234567890,"), where
    line = where.split("(first line: ", 1)[1]
    assert "\n" not in where and line.endswith(" …)") and len(line) <= grade.FIRST_LINE + 1, line
    assert "print(x)" not in where
    assert "hidden tests were running" in grade.running_cell(nb, {f"started:{len(nb['cells'])}": b""})
    assert "had not yet started your first cell" in grade.running_cell(nb, {"worker": b"{}"})


def test_an_error_line_reuses_the_short_error_of_graded_cells():
    """One definition of an error as a student sees it: the line for a cell of theirs that raised is the
    grader's :func:`short_error` (type and at most 100 characters of one line), after the cell's place."""
    nb = _with_cell(notebook(GOOD), 0, BOOM)
    long = "RuntimeError: " + "boom " * 60 + "\nsecond line"
    line = grade.stopped_run_all(nb, 0, long)
    assert line == (f"code cell 1 of 4 (first line: {BOOM.strip()}) raised {grade.short_error(long)} "
                    "(your own Run All stops here; the grader ran the rest)"), line
    assert "second line" not in line and "\n" not in line


def test_an_error_the_sandbox_caused_is_not_said_to_stop_run_all():
    """The sandbox's package blocks the graded function, which a chapter cell or an ungraded exercise
    of the student's may call honestly (the student edition of chapter 3 did): that BlockedAnswer does
    not stop the student's own Run All, so no line is given for it. A cell of theirs that raised after
    it may only follow from it: its line says so and tells the student to run all from the top (it was
    suppressed, and the student had nothing to act on). A cell of the chapter's own is never the
    student's; the first cell of theirs that raised is named."""
    reference = notebook(SCAFFOLD)
    grader = grade.Grader.__new__(grade.Grader)
    grader.reference_sources = {"ch03_exercises.ipynb": grade._code_sources(reference)}
    nb = _with_cell(_with_cell(notebook(GOOD), 1, "x = ab.masked_softmax(torch.ones(1, 2, 2))"), 0, BOOM)
    blocked = "BlockedAnswer: the package's own masked_softmax is not available while this assignment is graded"

    def line(*errors):
        return grader._run_all_stop(nb, [{"cell": i, "error": e} for i, e in errors], "ch03_exercises.ipynb")

    after = line((2, blocked), (3, "NameError: name 'x' is not defined"))
    assert after == grade.stopped_run_all(nb, 3, "NameError: name 'x' is not defined", after_blocked=True)
    assert after.startswith("code cell 4 of 5") and "Run All from the top" in after, after
    assert "may only follow from it" in after and "NameError" in after, after
    assert line((2, blocked)) == "" and line((1, "ValueError: the chapter's")) == ""
    assert line((1, "ValueError: the chapter's"), (0, "RuntimeError: boom")).startswith("code cell 1 of 5")
    assert line((0, "RuntimeError: boom"), (2, blocked)) == grade.stopped_run_all(nb, 0, "RuntimeError: boom")


# --------------------------------------------------------------------------- a small class, end to end


# The tests that read this class carry one xdist group: make test-unit (--dist loadgroup) runs
# them on one worker, which grades the class once (about 65 s) instead of once per worker.
@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    if grade.Sandbox.detect(2**30).kind != "bubblewrap":
        pytest.skip("the grader's sandbox (bubblewrap) is not available here")
    base = tmp_path_factory.mktemp("feedback-class")
    (base / "ref").mkdir()
    (base / "ref" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    class_ = {"loop": _with_cell(notebook(GOOD), 2, LOOP), "boom": _with_cell(notebook(GOOD), 0, BOOM),
              "killer": notebook(GOOD, KILL_ALL), "gone": notebook("x = 1")}
    class_.update({who: notebook(GOOD) for who in REFUSED})  # refused in pairs, never run
    for who, nb in class_.items():
        (base / "subs" / who).mkdir(parents=True)
        (base / "subs" / who / "ch03_exercises.ipynb").write_text(json.dumps(nb))
    done = _run(base, "out")
    assert done.returncode == 0, done.stderr[-3000:]
    return base, done


def _run(base: Path, out: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), str(base / "subs"), "--out",
                           str(base / out / "grades.csv"), "--reference", str(base / "ref"), "--timeout",
                           str(TIMEOUT), "--memory-gb", "3", "--secret", SECRET, *extra],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
                          timeout=600, check=False)


def _rows(path: Path) -> dict[str, dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


def _feedback(base: Path, out: str, who: str) -> str:
    return (base / out / "feedback" / f"{grade.slug(who)}.md").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.xdist_group("feedback_class")
def test_a_timeout_names_the_cell_that_was_running(graded):
    base, _ = graded
    row = _rows(base / "out" / "grades.csv")["loop"]
    assert row["status"] == "timeout" and row["points"] == "0.0", row
    want = "it was running code cell 3 of 4 (first line: while True:  # a loop that never ends)"
    assert row["reason"] == f"did not finish within {TIMEOUT} s: {want}", row["reason"]
    assert want in _feedback(base, "out", "loop")


@pytest.mark.slow
@pytest.mark.xdist_group("feedback_class")
def test_a_students_cell_that_raised_is_named_and_the_score_stands(graded):
    base, _ = graded
    row = _rows(base / "out" / "grades.csv")["boom"]
    assert (row["status"], row["passed"], row["points"]) == ("graded", row["total"], "10.0"), row
    line = ('code cell 1 of 4 (first line: raise RuntimeError("boom")) raised RuntimeError: boom '
            "(your own Run All stops here; the grader ran the rest)")
    feedback = _feedback(base, "out", "boom")
    assert line in feedback and feedback.count("raised RuntimeError") == 1, feedback
    results = json.loads((base / "out" / "gradescope" / grade.slug("boom") / "results.json").read_text())
    # Gradescope, before the due date (the default): a cell that raised is an outcome of the run, which
    # can depend on the draw, so it waits in the held-back feedback test (test_grade_gradescope.py)
    held = [t for t in results["tests"] if t.get("visibility") == "after_due_date"]
    assert line not in results["output"] and line in held[-1]["output"] and results["score"] == 10.0


@pytest.mark.slow
@pytest.mark.xdist_group("feedback_class")
def test_without_a_roster_no_canvas_csv_and_the_run_says_why(graded):
    """canvas.csv without a roster had empty ID and SIS User ID columns and folder names as logins:
    Canvas could match none of its rows. It is not written; stderr and the run's summary say why; a
    roster added afterwards (--resume: nothing is graded again) gives the upload."""
    base, done = graded
    assert not (base / "out" / "canvas.csv").exists()
    assert (base / "out" / "moodle.csv").exists() and (base / "out" / "gradebook.csv").exists()
    assert f"WARNING: {grade.NO_ROSTER}" in done.stderr and grade.NO_ROSTER in done.stdout
    assert "canvas.csv" not in done.stdout.splitlines()[-1]
    (base / "roster.csv").write_text("folder,name,id,sis_user_id,login,section\n"
                                     "loop,Lu Oop,11,S11,lloop,A\nboom,Bo Om,12,S12,bboom,B\n")
    (base / "course.toml").write_text('[roster]\nfile = "roster.csv"\n')
    again = _run(base, "out", "--course", str(base / "course.toml"), "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert " cases (" not in again.stdout and grade.NO_ROSTER not in again.stdout + again.stderr
    with (base / "out" / "canvas.csv").open(newline="", encoding="utf-8") as f:
        canvas = {r["SIS Login ID"]: r for r in csv.DictReader(f)}
    assert {(k, r["ID"], r["SIS User ID"]) for k, r in canvas.items()} == {("lloop", "11", "S11"),
                                                                         ("bboom", "12", "S12")}
    assert canvas["bboom"]["ch03 masked_softmax"] == "10.0" and canvas["lloop"]["ch03 masked_softmax"] == "0.0"


@pytest.mark.slow
@pytest.mark.xdist_group("feedback_class")
def test_a_notebook_that_kills_every_process_names_its_cell_without_noise(graded):
    """Before: 'no results', 'the hidden tests did not run (worker exited with 137: Fontconfig error:
    Cannot load default config file ...)': no cell, a library's stderr in the student's feedback."""
    base, _ = graded
    row = _rows(base / "out" / "grades.csv")["killer"]
    assert (row["status"], row["points"]) == ("kernel died", "0.0"), row
    assert "killed by signal 9 (SIGKILL)" in row["reason"], row["reason"]
    assert "code cell 3 of 4 (first line: import os)" in row["reason"], row["reason"]
    feedback = _feedback(base, "out", "killer")
    assert "code cell 3 of 4" in feedback and "Fontconfig" not in feedback and "exited with" not in feedback


@pytest.mark.slow
@pytest.mark.xdist_group("feedback_class")
def test_a_missing_function_is_said_once(graded):
    """Before: 'graded', 0/9, 'the function named in your checker cell is not there' on each of 9 cases."""
    base, _ = graded
    row = _rows(base / "out" / "grades.csv")["gone"]
    assert (row["status"], row["passed"], row["total"], row["points"]) == ("not defined", "0", "9", "0.0"), row
    assert row["reason"].startswith("`my_masked_softmax` is not defined: define it in the exercise cell"), row
    feedback = _feedback(base, "out", "gone")
    assert feedback.count("is not defined") == 1 and "Hidden case" not in feedback, feedback


@pytest.mark.slow
@pytest.mark.xdist_group("feedback_class")
def test_refused_folders_are_told_apart_and_kept_out_of_lms_files(graded):
    """Before: 'ada' and 'ada ' were two rows 'ada' in grades.csv and gradebook.csv and two 'REFUSED: ada'
    lines; moodle.csv held 'ada ' raw; with a roster each was printed 'not in the roster: ada (graded; ...)'.
    Now every refused folder keeps its row, its name written out (a space at an end as \\x20), text to a
    spreadsheet; the LMS files leave them out (their grade there stays as it is) and the run says so."""
    base, done = graded
    shown = {"ada": "ada", "ada ": "ada\\x20", "=1+1": "'=1+1", " =1+1": "\\x20=1+1"}
    rows = _rows(base / "out" / "grades.csv")
    assert all(rows[name]["status"] == "refused" and rows[name]["points"] == "" for name in shown.values()), rows
    with (base / "out" / "gradebook.csv").open(newline="", encoding="utf-8") as f:
        book = [r["Student"] for r in csv.DictReader(f)]
    assert all(book.count(name) == 1 for name in shown.values()), book
    moodle = (base / "out" / "moodle.csv").read_text(encoding="utf-8")
    assert "ada" not in moodle and "1+1" not in moodle, moodle
    refused = [line for line in done.stdout.splitlines() if line.startswith("REFUSED: ")]
    assert sorted(line.split(":")[1].strip() for line in refused) == sorted(
        grade.display_name(n) for n in REFUSED), refused
    assert all("left out of canvas.csv and moodle.csv" in line for line in refused), refused
    (base / "roster2.csv").write_text("folder,name,id,sis_user_id,login,section\nada,Ada L,21,S21,alove,A\n")
    (base / "course2.toml").write_text('[roster]\nfile = "roster2.csv"\n')
    shutil.copytree(base / "out", base / "out-roster")  # the class's own folder stays as the other tests read it
    again = _run(base, "out-roster", "--course", str(base / "course2.toml"), "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert not any("ada" in line or "1+1" in line for line in again.stdout.splitlines()
                   if line.startswith("not in the roster")), again.stdout
    canvas = (base / "out-roster" / "canvas.csv").read_text(encoding="utf-8")
    assert "alove" not in canvas and "1+1" not in canvas, canvas


# --------------------------------------------------------------------------- a grader that cannot start


def test_a_kernel_that_never_started_is_a_grader_error_not_a_zero(tmp_path, monkeypatch):
    """A fresh attacker's read: with a kernelspec whose Python the sandbox cannot see, every notebook came
    back 'no results' (scored, 0 in the LMS files) although nothing of the student's had run. When no cell
    started and the worker reports why, the row is 'grader error': not scored, the instructor looks at it."""
    if grade.Sandbox.detect(2**30).kind != "bubblewrap":
        pytest.skip("the grader's sandbox (bubblewrap) is not available here")
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    sub = tmp_path / "ch03_exercises.ipynb"
    sub.write_text(json.dumps(notebook(GOOD)))
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/elsewhere/.venv/bin/python'"
    report = json.dumps({"errors": [], "harness": [], "worker": missing}).encode()
    grader = grade.Grader(tmp_path / "ref", 30, 2.0, 64)
    try:
        seeds = {n: 1 for n in grader.references["ch03_exercises.ipynb"]}
        monkeypatch.setattr(grade, "run_sandboxed", lambda *a, **k: ("exit", {"worker": report}, 0.2))
        rows = grader.grade_notebook("ann", sub, "ch03_exercises.ipynb", seeds)
        assert rows and all(r["status"] == "grader error" for r in rows), rows
        assert all("no kernel could be started" in r["reason"] and "/elsewhere" in r["reason"] for r in rows)
        assert "grader error" not in grade.SCORED
        # once a cell has started, a run without results is the notebook's: still 'no results'
        monkeypatch.setattr(grade, "run_sandboxed",
                            lambda *a, **k: ("exit", {"worker": report, "started:0": b""}, 0.2))
        rows = grader.grade_notebook("ann", sub, "ch03_exercises.ipynb", seeds)
        assert all(r["status"] == "no results" for r in rows), rows
    finally:
        grader.close()


def test_tied_causes_come_in_the_same_order_on_every_run():
    """A fresh instructor's read: two causes that explain as many failed cases each came out in either
    order from one grading to the next (a set's order follows Python's per-run string hashing), so the
    same notebook's feedback changed on regrade. Ties keep the order of the failed cases."""
    code = ("import sys; sys.path.insert(0, 'scripts'); import grade\n"
            "cases = [dict(index=i, passed=False, visible=False, label='l', why='w', cause=c)\n"
            "         for i, c in enumerate(['cause zeta', 'cause alpha', 'cause mu', 'cause alpha', 'cause zeta'])]\n"
            "row = dict(student='ann', notebook='ch03_exercises.ipynb', assignment='masked_softmax', status='graded',\n"
            "           points=0.0, max_points=10.0, passed=0, total=5, cases=cases, reason='')\n"
            "print(grade.feedback_markdown({'student': 'ann', 'key': 'ann'}, [row]))\n")
    texts = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                            env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout for seed in range(6)}
    (text,) = texts
    assert text.index("cause zeta") < text.index("cause alpha") < text.index("cause mu"), text


def test_every_outcome_but_full_marks_says_what_to_do_next():
    """A fresh instructor's read: after a crash (a kernel that died, a cell of the chapter's that met a
    blocked function) the feedback said what happened but not what to do. Every status, and a graded
    row with a failed case or a cell that raised, now ends with a "What to do" line that tells the
    student how to see it for themselves (Run All from the top, where the notebook runs) and what to
    change; full marks get none."""
    base = dict(student="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=0.0,
                max_points=10.0, passed=0, total=9, reason="it was running code cell 3 of 12", cases=[])
    for status in grade.STATUS_WORDS:
        row = dict(base, status=status)
        text = grade.feedback_markdown({"student": "ada"}, [row])
        step = [line for line in text.splitlines() if line.startswith("**What to do:** ")]
        assert len(step) == 1 and len(step[0].split()) > 8, (status, text)
        # last, after the causes, the failed cases and the cell it refers to ("named above")
        assert text.rstrip().splitlines()[-1] == step[0], (status, text)
        if status in ("graded", "not implemented", "timeout", "memory", "kernel died", "no results"):
            assert "Run All from the top" in step[0], (status, step)
        if status in ("not submitted", "misnamed file"):
            assert "ch03_exercises.ipynb" in step[0], (status, step)
    failed = dict(base, status="graded", passed=8, cases=[
        {"index": 2, "passed": False, "visible": False, "label": "rows with no allowed key",
         "why": "the result is wrong", "cause": ""}])
    text = grade.feedback_markdown({"student": "ada"}, [failed]).rstrip().splitlines()
    assert text.index("### Hidden case 2: rows with no allowed key") < len(text) - 1
    assert text[-1].startswith("**What to do:** Restart your kernel and Run All from the top"), text
    full = dict(base, status="graded", passed=9, points=10.0)
    assert "What to do" not in grade.feedback_markdown({"student": "ada"}, [full])
    raised = dict(full, cell_error="code cell 1 of 4 raised RuntimeError: boom")
    step = grade.feedback_markdown({"student": "ada"}, [raised]).rstrip().splitlines()[-1]
    assert step.startswith("**What to do:** Restart your kernel and Run All") and "points stand" in step, step
    assert "failed cases" not in step, step


def test_the_heading_shows_the_name_the_student_uploaded():
    """A fresh instructor (issue 37, 7.5/10): the heading read ``## kochbea_LATE_102_901_ch03_exercises-1.ipynb
    (graded as ...)``, Canvas's prefix and ``_LATE_`` included, while the several-files box below showed the
    uploaded name; and its example sentence named ``ch03_exercises (2).ipynb after ch03_exercises (1).ipynb``
    though the graded file was ``ch03_exercises-1.ipynb``. The heading now shows the uploaded name; the
    sentence no example file."""
    row = dict(student="kochbea_102", key="kochbea_102", notebook="ch03_exercises.ipynb",
               assignment="masked_softmax", points=10.0, max_points=10.0, passed=9, total=9, status="graded",
               reason="", cases=[], path="/s/kochbea_LATE_102_901_ch03_exercises-1.ipynb",
               files=["ch03_exercises-1.ipynb", [["ch03_exercises.ipynb", "an earlier version"]]])
    text = grade.feedback_markdown({"student": "kochbea_102"}, [row])
    assert "## ch03_exercises-1.ipynb (graded as ch03_exercises.ipynb): masked_softmax" in text, text
    assert "kochbea" not in text.split("## ", 1)[1].splitlines()[0] and "(2).ipynb" not in text, text
    folder = dict(row, key="ada", path="/s/ada/kochbea_102_901_ch03_exercises.ipynb")
    assert "## kochbea_102_901_ch03_exercises.ipynb (graded" in grade.feedback_markdown({"student": "ada"}, [folder])


def test_a_timeout_says_one_consistent_thing():
    """A fresh instructor (issue 37, 7.5/10): a timeout said "did not finish ... so the hidden tests did not
    run", then "every cell had run, and the hidden tests were running: your function did not return on some
    case", and asked to "time the cell named above" where no cell was named. One story per case now."""
    base = dict(student="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=0.0,
                max_points=10.0, passed=0, total=9, cases=[], status="timeout")
    in_tests = dict(base, reason="did not finish within 300 s: " + grade.running_cell(
        {"cells": []}, {"started:0": 1}))
    text = grade.feedback_markdown({"student": "ada"}, [in_tests])
    assert "hidden tests were running" in text and "did not run" not in text, text
    assert "named above" not in text and "return quickly" in text, text
    in_cell = dict(base, reason="did not finish within 300 s: it was running code cell 3 of 9")
    text = grade.feedback_markdown({"student": "ada"}, [in_cell])
    assert "time the cell named above" in text and "did not run" not in text, text


def test_weighted_points_can_be_followed_from_the_feedback():
    """A fresh instructor (issue 37, 7.5/10): "5.33 of 20 points — 4 of 10 cases passed ... 20 % taken" could
    not be followed (cases 5 and 10 counted double). The line now gives the weighted case points."""
    cases = [{"index": i, "passed": i <= 4, "visible": False, "label": "", "why": "wrong", "cause": "",
              "weight": 2.0 if i in (5, 10) else 1.0} for i in range(1, 11)]
    row = dict(student="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=5.33,
               max_points=20.0, passed=4, total=10, cases=cases, status="graded", reason="", late_days=2,
               penalty=0.2)
    text = grade.feedback_markdown({"student": "ada"}, [row])
    assert "4 of 10 cases passed (4 of 12 weighted case points: cases 5 and 10 count 2)" in text, text
    assert round(20 * 4 / 12 * 0.8, 2) == 5.33
    plain = dict(row, cases=[dict(c, weight=1.0) for c in cases])
    assert "weighted" not in grade.feedback_markdown({"student": "ada"}, [plain])


def test_a_cause_said_above_is_not_repeated_under_each_case():
    """A fresh instructor (issue 37, 7.5/10): with course.example.toml's extra case (no cause of its own), a
    padding-only answer read "In 9 of 10 failed cases: only the padding is masked ..." and then the same
    sentence under each of the nine cases. It is said once; each case points at it."""
    cause = "only the padding is masked, as in the chapter's masked softmax"
    cases = [{"index": i, "passed": False, "visible": False, "label": f"l{i}", "cause": cause if i < 10 else "",
              "why": f"the result is wrong: {cause}" if i < 10 else "the result is wrong (hint: build the mask)"}
             for i in range(1, 11)]
    row = dict(student="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=0.0,
               max_points=20.0, passed=0, total=10, cases=cases, status="graded", reason="")
    text = grade.feedback_markdown({"student": "ada"}, [row])
    assert text.count(cause) == 1 and "In 9 of 10 failed cases:" in text, text
    assert text.count("the result is wrong (the cause named above)") == 9, text
    assert "the result is wrong (hint: build the mask)" in text


def test_what_to_do_after_a_crash_names_the_exception_not_causes_that_are_not_there():
    """A fresh instructor (8/10): carl's function raised RuntimeError on every case and his feedback's
    'What to do' said 'fix the failed cases it shows, and the causes named above', where no cause was
    named. Without a named cause the step names what the function raised; with one it keeps pointing up."""
    base = dict(student="carl", notebook="ch03_exercises.ipynb", assignment="masked_softmax", status="graded",
                points=0.0, max_points=10.0, passed=0, total=2, reason="")
    crash = [{"index": i, "passed": False, "visible": False, "label": f"case {i}", "status": "raised",
              "why": "your function raised RuntimeError", "cause": ""} for i in (1, 2)]
    step = grade.feedback_markdown({"student": "carl"}, [dict(base, cases=crash)]).rstrip().splitlines()[-1]
    assert "named above" not in step and "your function raised RuntimeError in the grader's run" in step, step
    half = dict(crash[1], status="raised", why="your function raised an exception")
    step = grade.feedback_markdown({"student": "carl"}, [dict(base, cases=[crash[0], half])]).rstrip()
    assert "raised RuntimeError and an exception in the grader's run" in step.splitlines()[-1], step
    cause = "a constant too large for the half-precision dtype"
    named = [dict(c, why=f"your function raised RuntimeError: {cause}", cause=cause) for c in crash]
    text = grade.feedback_markdown({"student": "carl"}, [dict(base, cases=named)])
    assert cause in text and "the causes named above" in text.rstrip().splitlines()[-1], text
    wrong = [dict(c, status="ok", why="the result is wrong") for c in crash]
    step = grade.feedback_markdown({"student": "carl"}, [dict(base, cases=wrong)]).rstrip().splitlines()[-1]
    assert "named above" not in step and "raised" not in step and "fix the failed cases it shows, and hand" in step


def test_several_causes_are_numbered_and_each_case_names_its_own():
    """A fresh instructor (issue 37, 8/10): under several causes every case read "(the cause named
    above)", which did not say which. The causes are numbered and each case names its number."""
    first, second = "the window is ignored", "only the padding is masked"
    cases = [{"index": i, "passed": False, "visible": False, "label": f"l{i}", "cause": first if i < 4 else second,
              "why": f"the result is wrong: {first if i < 4 else second}"} for i in range(1, 6)]
    row = dict(student="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=0.0,
               max_points=20.0, passed=0, total=5, cases=cases, status="graded", reason="")
    text = grade.feedback_markdown({"student": "ada"}, [row])
    assert "Cause 1, in 3 of 5 failed cases:" in text and "Cause 2, in 2 of 5 failed cases:" in text, text
    assert text.count("the result is wrong (cause 1 above)") == 3 and text.count("(cause 2 above)") == 2, text
    assert "the cause named above" not in text and text.count(first) == 1 and text.count(second) == 1


def test_the_same_exception_on_every_case_is_said_once():
    """A fresh instructor (issue 37, 8/10): dan's function raised NameError on every case and his
    feedback said "your function raised NameError" ten times, under ten headings. It is said once, as
    one mistake, as a wrong result's single cause is, and the cases are listed under it (hints kept)."""
    hint = " (hint: build the mask from the positions)"
    cases = [{"index": i, "passed": False, "visible": False, "label": f"label {i}", "title": f"title {i}",
              "status": "raised", "cause": "", "why": "your function raised NameError" + (hint if i == 10 else "")}
             for i in range(1, 11)]
    row = dict(student="dan", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=0.0,
               max_points=20.0, passed=0, total=10, cases=cases, status="graded", reason="")
    text = grade.feedback_markdown({"student": "dan"}, [row])
    assert "**One mistake explains all 10 failed cases:**" in text, text
    body = text.split("**What to do:**")[0]
    assert body.count("your function raised NameError") == 1 and "### Hidden case" not in text, text
    assert "Hidden case 1: title 1\n" in text and f"Hidden case 10: title 10{hint}\n" in text, text
    assert "your function raised NameError in the grader's run" in text.rstrip().splitlines()[-1]
    # two different exceptions: each case keeps its own heading
    mixed = [dict(c, why="your function raised TypeError") if c["index"] == 2 else c for c in cases]
    text = grade.feedback_markdown({"student": "dan"}, [dict(row, cases=mixed)])
    assert "One mistake" not in text and text.count("### Hidden case") == 10


def test_the_feedback_names_the_course_and_the_assignments_title():
    """A fresh instructor (issue 37, 8/10): every feedback file began "# Feedback" and
    "## ch03_exercises.ipynb: masked_softmax" though the course file gives the course's name and the
    assignment's title. With a course file they head the feedback; without one it reads as before."""
    from course import load_course

    course = load_course(ROOT / "course.example.toml")
    row = dict(student="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=20.0,
               max_points=20.0, passed=10, total=10, cases=[], status="graded", reason="")
    text = grade.feedback_markdown({"student": "ada"}, [row], course=course)
    assert text.startswith("# Feedback: Attention and Transformers, spring term\n"), text
    assert "## ch03_exercises.ipynb: Masked softmax (masked_softmax)\n" in text, text
    sealed = grade.gradescope_json({"student": "ada"}, [row], "after_due_date", course)["output"]
    assert "## ch03_exercises.ipynb: Masked softmax (masked_softmax)" in sealed
    plain = grade.feedback_markdown({"student": "ada"}, [row])
    assert plain.startswith("# Feedback\n") and "## ch03_exercises.ipynb: masked_softmax\n" in plain


def _row(cases: list[dict], status: str = "graded") -> dict:
    return dict(student="gus", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=0.0,
                max_points=20.0, passed=0, total=len(cases), cases=cases, status=status, reason="")


def test_one_reason_on_every_case_is_said_once_with_the_cases_on_one_line():
    """A fresh instructor (issue 37, 8/10): gus (calls the blocked package function) read the same line under
    all ten cases, and his 'What to do' never said not to call it; dan (not implemented) read his line ten
    times under a summary. The reason is said once, the cases listed on one line, and gus's step names it."""
    blocked = "your function called the package's masked_softmax, which this assignment blocks"
    cases = [{"index": i, "passed": False, "visible": False, "label": f"l{i}", "status": "blocked", "why": blocked}
             for i in range(1, 11)]
    text = grade.feedback_markdown({"student": "gus"}, [_row(cases)])
    assert text.count(blocked) == 1 and "One mistake explains all 10 failed cases" in text, text
    assert "The cases: hidden cases 1, 2, 3, 4, 5, 6, 7, 8, 9 and 10." in text and "### Hidden" not in text, text
    # i16: "fix the failed cases it shows" pointed at none (the checker passes it, with a Note)
    last = text.rstrip().splitlines()[-1]
    assert "without calling the package's masked_softmax" in last and "Note above its cases" in last, text
    assert "fix the failed cases" not in last, text
    nie = "not implemented yet (raised NotImplementedError)"
    dan = [dict(c, status="not_implemented", why=nie) for c in cases]
    text = grade.feedback_markdown({"student": "dan"}, [_row(dan, "not implemented")])
    assert text.count(nie) == 0 and "Every case still raises NotImplementedError" in text, text
    assert "The cases: hidden cases 1," in text and "### Hidden" not in text, text


def test_a_write_in_place_on_every_case_says_the_results_were_not_judged():
    """A fresh instructor (issue 37, 8/10): smithjohn wrote into his scores and had a window off by one; his
    feedback said 'One mistake explains all 10 failed cases', and after he fixed the write 8 of 9 cases still
    failed. The write still fails each case, but the feedback says the results were not judged, and how
    many of them were right on the grader's copy (unscored)."""
    cause = "your function changed its input scores in place (scores[~keep] = ...): use masked_fill"
    cases = [{"index": i, "passed": False, "visible": False, "label": f"l{i}", "status": "ok", "cause": cause,
              "why": f"your function changed its input in place: {cause}", "result_right": i in (4, 9)}
             for i in range(1, 11)]
    text = grade.feedback_markdown({"student": "smithjohn"}, [_row(cases)])
    assert "One mistake explains" not in text and text.count(cause) == 1, text
    assert ("Your function changed its input in place in all 10 cases, so its results were not judged; "
            "fix that first:") in text, text
    assert "Apart from that, its results were right in 2 of 10 cases (not scored)." in text, text
    assert "### Hidden" not in text and "the write named above first" not in text, text
    assert ("first stop your function writing into its input (above), then fix the failed cases it shows, and "
            "hand the notebook in again") in text.rstrip().splitlines()[-1], text
