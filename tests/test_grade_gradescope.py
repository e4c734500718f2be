"""The Gradescope autograder bundle (issue 37): what the zip holds, and that its run_autograder step
grades a submission in Gradescope's layout into a results.json of Gradescope's format."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_grade import GOOD, notebook  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gradescope_bundle.py"), "build", "--out", str(out),
                          "--notebooks", "ch03_exercises", "--course", str(ROOT / "course.example.toml")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return out


def test_the_bundle_holds_setup_run_and_the_checkers(bundle):
    with zipfile.ZipFile(bundle) as z:
        names = set(z.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}
        setup = z.read("setup.sh").decode()
        run = z.read("run_autograder").decode()
        settings = json.loads(z.read("gradescope.json"))
    # Gradescope extracts the whole zip into /autograder/source: everything sits at the zip's root, where
    # setup.sh's `pip install /autograder/source` and run_autograder's `cd /autograder/source` expect it
    # (an attacker found the bundle's files one folder too deep, under source/source/).
    assert {"setup.sh", "run_autograder", "scripts/grade.py", "scripts/gradescope_bundle.py",
            "src/attention_book/assignments/ch03.py", "src/attention_book/assignments/grading.py",
            "notebooks/ch03_exercises.ipynb", "book/_ext/kernel_poll.py", "pyproject.toml",
            "course/course.toml", "course/extra_cases/masked_softmax.py"} <= names
    assert not any(n.startswith("source/") for n in names)
    assert modes["setup.sh"] & stat.S_IXUSR and modes["run_autograder"] & stat.S_IXUSR
    assert setup.startswith("#!/usr/bin/env bash") and "bubblewrap" in setup and "pip install /autograder/source" in setup
    assert "gradescope_bundle.py run" in run and len(settings["secret"]) >= 32
    # the installed package (with the checkers' answers) is root's only, after the install
    install = setup.index("pip install /autograder/source")
    assert setup.index('chmod -R go-rwx "$(/autograder/venv/bin/python -c \'import attention_book') > install
    assert not any(n.startswith("notebooks/") and "ch03" not in n for n in names)
    # the tested torch, not whatever is newest; no roster or times of the class in the bundle
    assert 'pip install "torch==2.13.0"' in setup
    # Python 3.10 (Gradescope's Ubuntu 22.04 image) has no tomllib: tomli in its place; the venv readable by
    # ab-student (the fallback runs its Python), then the installed package made root's only again
    assert "\"tomli>=2; python_version < '3.11'\"" in setup and "chmod go+rx /autograder\n" in setup
    assert setup.index("chmod -R go+rX /autograder/venv") < setup.index('chmod -R go-rwx "$(')
    assert not any(n.endswith(("roster.csv", "submitted.csv")) for n in names)
    with zipfile.ZipFile(bundle) as z:
        shipped = z.read("course/course.toml").decode()
    assert "[roster]" not in shipped and "times =" not in shipped and "[assignments.masked_softmax]" in shipped
    assert "[assignments.bleu]" not in shipped  # a ch03 bundle: only ch03's assignments (issue 37)


def test_the_bundle_is_the_instructors_alone_and_out_of_git(tmp_path):
    """A fresh instructor (8/10): the zip (the secret, the extra cases) was written 0644 inside grades/'s 0700
    folder, readable by anyone the folder lets in. It is written 0600 now, and a folder the build makes for
    it gets a .gitignore of '*'."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gradescope_bundle

    out = tmp_path / "new-folder" / "autograder.zip"
    old = os.umask(0o022)
    try:
        gradescope_bundle.build(out, ["ch03_exercises"], None)
        assert stat.S_IMODE(out.stat().st_mode) == 0o600, oct(out.stat().st_mode)
        out.chmod(0o644)
        gradescope_bundle.build(out, ["ch03_exercises"], None)  # written again over a file of another mode
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and zipfile.is_zipfile(out)
    assert (out.parent / ".gitignore").read_text().splitlines()[-1] == "*"
    assert sorted(p.name for p in out.parent.iterdir()) == [".gitignore", "autograder.zip"]


def test_the_bundle_reads_the_course_file_once(tmp_path, monkeypatch):
    """A diff reviewer: the bundle read the course file with load_course (which kept the raw TOML in
    Course.data for it) and parsed the file's text a second time to check what it kept. It reads it once
    now; the torch version and the extra cases come from the Course ([gradescope] torch, each
    assignment's extra_cases), and Course holds no raw TOML."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import course
    import gradescope_bundle

    text = (ROOT / "course.example.toml").read_text(encoding="utf-8")
    mine = tmp_path / "course.toml"
    mine.write_text(text.replace("# [gradescope]", "[gradescope]\ntorch = \"2.9.1\"\n# ", 1))
    shutil.copytree(ROOT / "course_example", tmp_path / "course_example")
    parsed = []
    for toml in {id(m.tomllib): m.tomllib for m in (course, gradescope_bundle)}.values():  # tomllib, or tomli
        monkeypatch.setattr(toml, "loads", lambda s, _f=toml.loads: parsed.append(s) or _f(s))
    out = gradescope_bundle.build(tmp_path / "b" / "a.zip", ["ch03_exercises"], mine)
    assert parsed.count(mine.read_text(encoding="utf-8")) == 1, len(parsed)
    assert not hasattr(course.load_course(mine), "data")
    with zipfile.ZipFile(out) as z:
        assert 'pip install "torch==2.9.1"' in z.read("setup.sh").decode()
        extra = z.read("course/extra_cases/masked_softmax.py")
    assert extra == (ROOT / "course_example" / "extra_cases.py").read_bytes()


def test_the_bundles_course_file_keeps_only_its_notebooks_assignments():
    """A fresh instructor (issue 37, 7.5/10): the ch03-only bundle's course/course.toml still carried
    [assignments.bleu]; it keeps the assignments of the bundle's notebooks only."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gradescope_bundle

    shipped = gradescope_bundle._without_roster_and_times(
        (ROOT / "course.example.toml").read_text(encoding="utf-8"), {"masked_softmax"}).decode()
    assert "[assignments.masked_softmax]" in shipped and "bleu" not in shipped and "[roster]" not in shipped
    assert "extra_cases" in shipped and "[late]" in shipped
    # the instructor's overrides name the class: Gradescope's own extensions and grade edits apply there
    with_overrides = (ROOT / "course.example.toml").read_text(encoding="utf-8") + '\n[overrides]\nfile = "o.csv"\n'
    shipped = gradescope_bundle._without_roster_and_times(with_overrides, {"masked_softmax"}).decode()
    assert "[overrides]" not in shipped and "o.csv" not in shipped, shipped


def test_extra_cases_outside_the_course_folder_go_into_the_bundle_under_course(tmp_path):
    """A fresh attacker (issue 37, 7/10): a course file whose extra_cases is "../elsewhere/extra.py" (or
    absolute) made the zip entry "course/../elsewhere/extra.py": unzip put it outside course/ and every
    Gradescope submission ended in GRADER ERROR. The bundle copies each extra-cases file to
    course/extra_cases/<assignment>.py and points the bundled course file at it; unzipped as the guide's
    "Try the bundle" does, the course file loads. The folder the build makes is private (0700), as the
    grades folder is."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import course as course_mod
    import gradescope_bundle

    (tmp_path / "elsewhere").mkdir()
    shutil.copy(ROOT / "course_example" / "extra_cases.py", tmp_path / "elsewhere" / "extra.py")
    (tmp_path / "cdir").mkdir()
    for n, where in enumerate(["../elsewhere/extra.py", str(tmp_path / "elsewhere" / "extra.py")]):
        mine = tmp_path / "cdir" / "course.toml"
        mine.write_text(f'[course]\nname = "t"\n[assignments.masked_softmax]\npoints = 10\n'
                        f'extra_cases = "{where}"  # the instructor\'s\n')
        out = gradescope_bundle.build(tmp_path / f"b{n}" / "deep" / "a.zip", ["ch03_exercises"], mine)
        assert stat.S_IMODE(out.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(out.parent.parent.stat().st_mode) == 0o700
        with zipfile.ZipFile(out) as z:
            names = z.namelist()
            z.extractall(tmp_path / f"try{n}" / "source")
        assert not any(".." in Path(name).parts or name.startswith("/") for name in names), names
        source = tmp_path / f"try{n}" / "source"
        assert not (tmp_path / f"try{n}" / "elsewhere").exists()
        loaded = course_mod.load_course(source / "course" / "course.toml")
        assert loaded.assignments["masked_softmax"].extra_cases == str(source / "course" / "extra_cases" /
                                                                       "masked_softmax.py")
        assert (source / "course" / "extra_cases" / "masked_softmax.py").read_bytes() == \
            (tmp_path / "elsewhere" / "extra.py").read_bytes()


def test_the_scripts_read_course_files_without_tomllib():
    """Where Python has no tomllib (3.10, Gradescope's default Ubuntu 22.04 image) the scripts read the
    course file with tomli, which setup.sh installs there (before: ModuleNotFoundError at import, and
    no results.json)."""
    code = ("import sys, tomllib; sys.modules['tomli'] = tomllib; sys.modules['tomllib'] = None\n"
            "sys.path.insert(0, 'scripts'); import course, gradescope_bundle\n"
            "print(course.load_course(course.Path('course.example.toml')).assignments['masked_softmax'].points)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0 and run.stdout.split() == ["20.0"], run.stderr[-2000:]


def _drawn(passed: list[bool]) -> dict:
    """One graded row of masked_softmax as one draw of its 9 hidden cases left it: ``passed`` per case,
    the failed ones with a cause; a cell that raised; a day late (10 %)."""
    cases = [{"index": i + 1, "visible": False, "label": f"label {i + 1}", "name": "", "passed": ok,
              "why": "" if ok else f"wrong on case {i + 1}", "cause": "" if ok else "the window is off by one",
              "weight": 1.0} for i, ok in enumerate(passed)]
    score = sum(passed) / len(passed)
    return dict(student="4242", key="4242", notebook="ch03_exercises.ipynb", assignment="masked_softmax",
                status="graded", passed=sum(passed), total=len(passed), score=score, max_points=20.0,
                points=round(20.0 * score * 0.9, 2), penalty=0.1, late_days=1, cases=cases,
                cell_error="code cell 2 of 5 (first line: plot(x)) raised NameError: name 'plot' is not defined")


def _shown(data: dict) -> dict:
    """What a Gradescope student sees before the due date: the top-level output and the visible tests."""
    return {"output": data["output"], "tests": [t for t in data["tests"] if t.get("visibility") == "visible"]}


def test_before_the_due_date_no_hidden_result_and_no_score_shows():
    """A fresh attacker (issue 37): each resubmission draws new hidden cases (the seed derives from the
    notebook's bytes) and Gradescope showed the score at once, so a wrong masked_softmax resubmitted
    with a blank line until a lucky draw scored 0..6 of 9 over 30 seeds: best-of-N. By default nothing a
    student sees before the due date depends on the draw: two draws of the same notebook, 2 and 6 cases
    passed, show the same; the tests that do (every hidden case, the points) show after the due date, and
    so, by Gradescope's specification, does the total score."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import course as course_mod
    import grade

    scores = course_mod.load_course(ROOT / "course.example.toml").gradescope_scores
    assert scores == "after_due_date"  # the default: the example sets nothing
    student = {"student": "4242"}
    unlucky = grade.gradescope_json(student, [_drawn([True] * 2 + [False] * 7)], scores)
    lucky = grade.gradescope_json(student, [_drawn([True] * 6 + [False] * 3)], scores)
    assert _shown(unlucky) == _shown(lucky)
    assert unlucky["score"] == 4.0 and lucky["score"] == 12.0  # Gradescope records the true score
    shown = _shown(lucky)
    for leak in ("points —", "of 20", "12", "6 of 9", "cases passed", "failed", "off by one", "wrong on"):
        assert leak not in shown["output"], leak
    # what stays: the notebook was received and run, the late days, how many hidden cases there are;
    # not the cell that raised (a cell can see the draw: it could raise on the draws it fails)
    assert "raised NameError" not in shown["output"] and "1 day(s) late" in shown["output"]
    assert "9 hidden case(s)" in shown["output"] and "after the due date" in shown["output"]
    [ran] = shown["tests"]
    assert ran["name"] == "masked_softmax: your notebook was received and run" and ran["status"] == "passed"
    assert "score" not in ran and "max_score" not in ran and "9 hidden case(s)" in ran["output"]
    later = [t for t in lucky["tests"] if t.get("visibility") != "visible"]
    assert {t["visibility"] for t in later} == {"after_due_date"} and len(later) == 10
    assert round(sum(t.get("max_score", 0.0) for t in lucky["tests"]), 6) == 20.0
    assert "12 of 20 points" in later[-1]["output"] and "off by one" in later[-1]["output"]
    # after_published: the same, until the instructor publishes the grades
    published = grade.gradescope_json(student, [_drawn([True] * 6 + [False] * 3)], "after_published")
    assert {t["visibility"] for t in published["tests"] if t["visibility"] != "visible"} == {"after_published"}
    assert "publishes the grades" in published["output"] and "after the due date" not in published["output"]


def test_before_the_due_date_how_the_run_went_does_not_show():
    """A fresh attacker (issue 37, after the points were held back): the visible test said whether the
    notebook ran, so a function that killed its kernel on the hidden cases it failed (it receives their
    inputs) made a one-bit oracle: resubmit until the run "passed", then hold 20/20 for a wrong answer.
    Whatever running the notebook gave now shows only after the due date; a status decided from the file
    alone (misnamed, unreadable) still shows at once."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import grade

    student = {"student": "4242"}
    full = dict(_drawn([True] * 9), cell_error="")
    outcomes = [full, dict(full, status="kernel died", passed=0, points=0.0, reason="killed by signal 9"),
                dict(full, status="timeout", passed=0, points=0.0, reason="ran past 300 s"),
                dict(full, status="no results", passed=0, points=0.0), _drawn([True] * 2 + [False] * 7),
                dict(full, status="not defined", passed=0, points=0.0)]
    shown = [_shown(grade.gradescope_json(student, [row], "after_due_date")) for row in outcomes]
    assert all(s == shown[0] for s in shown[1:]), [s["tests"] for s in shown]
    for word in ("died", "signal", "timeout", "300 s", "raised NameError", "is not defined", "no results"):
        assert word not in shown[0]["output"] and word not in shown[0]["tests"][0]["output"], word
    # rows as the grader really writes them for a status the run gave: no cases, a reason naming the
    # run (a fresh attacker: their status test was visible at once, the same one-bit oracle)
    for status in ("kernel died", "timeout", "memory", "no results", "flagged", "grader error"):
        real = dict(full, status=status, passed=0, points=0.0, cases=[], reason=f"REASON {status}")
        seen = _shown(grade.gradescope_json(student, [real], "after_due_date"))
        assert seen == shown[0], (status, seen["tests"], shown[0]["tests"])
        assert "REASON" not in json.dumps(seen), status
    misnamed = dict(full, status="misnamed file", passed=0, points=None, cases=[],
                    reason="handed in 'ch03_exercises_final.ipynb'")
    told = _shown(grade.gradescope_json(student, [misnamed], "after_due_date"))["tests"][0]
    assert told["status"] == "failed" and "another name" in told["output"]


def test_scores_visible_shows_every_result_at_once(tmp_path):
    """[gradescope] scores = "visible": the results.json as before (every test and the points at once),
    for an instructor who accepts re-rolling; a misspelt value or key stops the course file."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import course as course_mod
    import grade
    import lms_export

    path = tmp_path / "course.toml"
    path.write_text('[gradescope]\nscores = "visible"\ntorch = "2.13.0"\n')
    assert course_mod.load_course(path).gradescope_scores == "visible"
    rows = [_drawn([True] * 6 + [False] * 3)]
    data = grade.gradescope_json({"student": "4242"}, rows, "visible")
    assert data == lms_export.gradescope_results(rows, grade.feedback_markdown({"student": "4242"}, rows,
                                                                               hidden_details=False))
    assert "12 of 20 points" in data["output"] and "6 of 9 cases passed" in data["output"]
    for text in ('[gradescope]\nscores = "now"\n', '[gradescope]\nscore = "visible"\n'):
        path.write_text(text)
        with pytest.raises(course_mod.CourseError, match=r"\[gradescope\]"):
            course_mod.load_course(path)
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "gradescope_bundle.py"), "build", "--out",
                          str(tmp_path / "a.zip"), "--notebooks", "ch03_exercises", "--course", str(path)],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "[gradescope]" in bad.stderr and not (tmp_path / "a.zip").exists()


def _run_fake(tmp_path, monkeypatch, handed: list[str]) -> tuple[list[str], dict]:
    """gradescope_bundle.run on the files ``handed`` (paths under /autograder/submission), with FakeGrader:
    (the names of the files it graded, results.json)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gradescope_bundle
    import grade
    from test_grade_engine import fake_grading

    ran = fake_grading(monkeypatch)
    monkeypatch.setattr(grade.Sandbox, "detect", staticmethod(lambda *a, **k: type("Box", (), {
        "kind": "bubblewrap", "missing": []})()))
    root = tmp_path / "autograder"
    (root / "source" / "notebooks").mkdir(parents=True)
    shutil.copyfile(ROOT / "notebooks" / "ch03_exercises.ipynb", root / "source" / "notebooks" /
                    "ch03_exercises.ipynb")
    (root / "source" / "gradescope.json").write_text(json.dumps({"secret": "s" * 64, "course": None}))
    for rel in handed:
        (root / "submission" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "submission" / rel).write_text("{}")
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"id": 4242, "name": "Ada"}]}))
    return ran, gradescope_bundle.run(root)


@pytest.mark.parametrize("handed, graded, other", [
    (["ch03_exercises.ipynb", "ch03_exercises_final.ipynb"], "ch03_exercises.ipynb", "ch03_exercises_final.ipynb"),
    (["ch03_exercises.ipynb", "ch03_exercises (1).ipynb"], "ch03_exercises (1).ipynb", "ch03_exercises.ipynb"),
    (["ch03_exercises-1.ipynb", "work/Ch03 Exercises.ipynb"], "ch03_exercises-1.ipynb", "Ch03 Exercises.ipynb"),
    # a fresh attacker (issue 37, 7/10): the solved file at the top and the scaffold in notebooks/ graded the
    # scaffold (the last of equal copy numbers) and dropped the other unlisted; as make grade: the top is graded
    (["ch03_exercises.ipynb", "notebooks/ch03_exercises.ipynb"], "ch03_exercises.ipynb",
     "ch03_exercises.ipynb (in the folder notebooks/: only files directly in the submission are graded)"),
    (["notebooks/ch03_exercises (2).ipynb", "ch03_exercises (1).ipynb"], "ch03_exercises (1).ipynb",
     "ch03_exercises (2).ipynb (in the folder notebooks/"),
    (["ch03_exercises.ipynb", ".ch03_exercises.ipynb"], "ch03_exercises.ipynb", ".ch03_exercises.ipynb (hidden"),
])
def test_gradescope_says_which_of_several_files_was_graded(tmp_path, monkeypatch, handed, graded, other):
    """A fresh attacker (issue 37, 7/10): in /autograder/submission, ``ch03_exercises.ipynb`` and a newer
    ``ch03_exercises_final.ipynb``: only the first was copied to the grader, so the student never heard of
    the second. Every file that looks like the assignment's notebook now reaches the grader under the name
    the student gave it; the one with the assignment's name is graded, as make grade does, and the
    feedback shown at once (the files are decided before anything runs) names the others."""
    ran, data = _run_fake(tmp_path, monkeypatch, handed)
    assert ran == [graded], (ran, data["output"])
    shown = _shown(data)["output"]
    assert f"graded:     {graded}\nnot graded: {other}" in shown, shown
    assert "hand it in again named ch03_exercises.ipynb, alone" in shown


def test_gradescope_grades_no_file_in_a_folder(tmp_path, monkeypatch):
    """Only files directly in /autograder/submission are graded (make grade's rule in a student's folder):
    a notebook only in a folder is not graded, and the output says where it was found and why."""
    ran, data = _run_fake(tmp_path, monkeypatch, ["work/ch03_exercises.ipynb"])
    assert ran == [] and data["score"] == 0
    assert "files in a folder are not graded" in data["output"] and "work/ch03_exercises.ipynb" in data["output"]


@pytest.mark.slow
def test_run_autograder_grades_a_submission_in_gradescopes_layout(bundle, tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    if __import__("grade").Sandbox.detect().kind == "none":
        pytest.skip("the grader's sandbox (bubblewrap) is not available here")
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as z:
        z.extractall(root / "source")  # as Gradescope does: the whole zip into /autograder/source
    (root / "submission").mkdir()
    (root / "submission" / "ch03_exercises (2).ipynb").write_text(json.dumps(notebook(GOOD)))
    (root / "submission" / "ch03_exercises (3).ipynb").symlink_to(root / "source" / "notebooks" /
                                                                   "ch03_exercises.ipynb")  # a link: ignored
    # handed in two days late (the example course: due 2027-04-30 23:59 Berlin, 10 % a day)
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"id": 4242, "email": "a@b.c",
                                                                          "name": "Ada\u202eLovelace"}],
                                                               "created_at": "2027-05-02T12:00:00.5+02:00"}))
    run = subprocess.run([sys.executable, str(root / "source" / "scripts" / "gradescope_bundle.py"), "run"],
                         capture_output=True, text=True, cwd=root / "source",
                         env=dict(os.environ, AUTOGRADER_ROOT=str(root), OMP_NUM_THREADS="1", GRADE_TIMEOUT="300"))
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] > 0 and data["tests"] and all(t["status"] in ("passed", "failed") for t in data["tests"])
    # the example course gives masked_softmax 20 points and one extra hidden case of the instructor's
    # the last case takes what rounding left
    assert round(sum(t.get("max_score", 0.0) for t in data["tests"]), 6) == 20.0
    assert any("large scores" in t["name"] for t in data["tests"])
    assert "Feedback" in data["output"]
    assert data["score"] == pytest.approx(16.0)  # every case passed, 20 points less 2 late days of 10 %
    assert "2 day(s) late" in data["output"]
    # which hidden cases failed, and the points, only in the tests shown after the due date (the example
    # course sets no [gradescope] scores), never in the output
    assert all(t["visibility"] == "after_due_date" for t in data["tests"] if "hidden case" in t["name"])
    assert "16 of 20 points" not in data["output"] and "16 of 20 points" in data["tests"][-1]["output"]
    # the feedback names the student as Gradescope does, escaped as a key is (issue 37)
    assert "Ada\\u202eLovelace (4242)" in data["output"] and "\u202e" not in data["output"]
    # no advice about the LMS exports (a roster for canvas.csv) in Gradescope's log (issue 37)
    assert "canvas.csv" not in run.stdout + run.stderr and "roster" not in run.stdout + run.stderr


TRY = "#### Try the bundle before uploading"


def _guide_try_lines() -> list[str]:
    """The shell lines of the guide's "Try the bundle before uploading" (book/instructors.md)."""
    text = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8")
    assert TRY in text, "the guide lost its subsection on trying the bundle"
    block = text.split(TRY, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].rstrip() for line in block.splitlines() if line.strip()]


def test_the_guide_says_how_to_try_the_bundle_in_gradescopes_layout():
    """A fresh instructor (issue 37): the guide never said how to try the bundle before uploading it.
    Its recipe lays out what run() reads (source/, submission/, submission_metadata.json; results/ is
    made) and names the results.json fields that gradescope_json writes."""
    lines = _guide_try_lines()
    joined = "\n".join(lines)
    for part in ("-d try/source", "try/submission/", "try/submission_metadata.json", "AUTOGRADER_ROOT=",
                 "scripts/gradescope_bundle.py run", '"created_at"', '"users"'):
        assert part in joined, part
    sys.path.insert(0, str(ROOT / "scripts"))
    import grade

    data = grade.gradescope_json({"student": "4242"}, [_drawn([True] * 9)])
    text = (ROOT / "book" / "instructors.md").read_text(encoding="utf-8").split(TRY, 1)[1].split("\n## ", 1)[0]
    for key in ("score", "output", "tests", "visibility"):
        assert key in data or all(key in t for t in data["tests"]), key
        assert f"`{key}`" in text, key
    assert {t["visibility"] for t in data["tests"]} <= {"visible", "after_due_date"}


@pytest.mark.slow
def test_the_guides_try_the_bundle_lines_grade_a_notebook(bundle, tmp_path):
    """The guide's lines, run as written (the bundle's path, the notebook and the Python put in): the
    bundle grades the notebook, writes try/results/results.json and prints its score."""
    sys.path.insert(0, str(ROOT / "scripts"))
    if __import__("grade").Sandbox.detect().kind == "none":
        pytest.skip("the grader's sandbox (bubblewrap) is not available here")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(GOOD)))
    script = "set -e\n" + "\n".join(_guide_try_lines()).replace(
        "grades/gradescope_autograder.zip", str(bundle)).replace(
        "cp ch03_exercises.ipynb", f"cp {tmp_path / 'mine' / 'ch03_exercises.ipynb'}").replace(
        " python scripts/", f" {sys.executable} scripts/")
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path, check=False,
                         env=dict(os.environ, OMP_NUM_THREADS="1", GRADE_TIMEOUT="300"))
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    data = json.loads((tmp_path / "try" / "results" / "results.json").read_text())
    assert data["score"] == pytest.approx(20.0) and f"score {data['score']}" in run.stdout  # on time, all passed
    assert {t["visibility"] for t in data["tests"]} == {"visible", "after_due_date"}
    assert "canvas.csv" not in run.stdout + run.stderr


# A notebook that, when nothing isolates it, rewrites the checkers the judge will import (every case then
# passes), steals the bundle's secret and writes a results.json of its own.
FORGE = '''
import glob, os, pathlib
import attention_book.assignments.ch03 as _ch03
targets = [_ch03.__file__] + glob.glob({src!r} + "/**/assignments/ch03.py", recursive=True)
forged = []
for path in targets:
    try:
        text = pathlib.Path(path).read_text()
        pathlib.Path(path).write_text(text.replace("return check(got)", "return None"))
        forged.append(path)
    except OSError as err:
        forged.append(f"refused: {{err.strerror}}")
for path, what in (({secret!r}, "secret"), ({results!r}, "results")):
    try:
        if what == "secret":
            pathlib.Path({leak!r}, "secret").write_text(pathlib.Path(path).read_text())
        else:
            pathlib.Path(path).write_text('{{"score": 99.0}}')
    except OSError:
        pass
pathlib.Path({leak!r}, "ran").write_text(str(os.getuid()) + " " + repr(forged))
def my_masked_softmax(scores, valid_lens, window):
    return torch.zeros_like(scores)
'''


def _unpack(bundle, root):
    with zipfile.ZipFile(bundle) as z:
        z.extractall(root / "source")  # as Gradescope does: the whole zip into /autograder/source
    (root / "submission").mkdir()


@pytest.mark.slow
def test_where_bubblewrap_cannot_start_the_notebook_cannot_forge_its_grade(bundle, tmp_path):
    """Gradescope's container may refuse bubblewrap's namespaces. The notebook then runs as an unprivileged
    user: it cannot rewrite the checkers, read the secret or write results.json; the judge loaded the
    checkers before it ran. Without such a user nothing runs: results.json says 'NOT GRADED'."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("dropping to an unprivileged user needs root, as in Gradescope's container")
    root = tmp_path / "autograder"
    _unpack(bundle, root)
    leak = Path(tempfile.mkdtemp(prefix="g37-leak-"))
    leak.chmod(0o777)
    # the fake bwrap where every user reaches it: the probe runs bwrap as the sandbox's user, whose PATH
    # search skips a folder it cannot enter (tmp_path is root's 0700) and finds the real bwrap
    fake = leak / "bin"
    fake.mkdir(mode=0o755)
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    try:
        cell = FORGE.format(src=str(root / "source" / "src"), secret=str(root / "source" / "gradescope.json"),
                            results=str(root / "results" / "results.json"), leak=str(leak))
        (root / "submission" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(cell)))
        checker = (root / "source" / "src" / "attention_book" / "assignments" / "ch03.py").read_text()
        env = dict(os.environ, AUTOGRADER_ROOT=str(root), OMP_NUM_THREADS="1", GRADE_TIMEOUT="180",
                   PATH=f"{fake}:{os.environ['PATH']}", PYTHONPATH=str(root / "source" / "src"),
                   GRADE_SANDBOX_USER="nobody")
        command = [sys.executable, str(root / "source" / "scripts" / "gradescope_bundle.py"), "run"]
        run = subprocess.run(command, capture_output=True, text=True, cwd=root / "source", env=env)
        data = json.loads((root / "results" / "results.json").read_text())
        assert (root / "source" / "src" / "attention_book" / "assignments" / "ch03.py").read_text() == checker
        assert data["score"] == 0.0 and not (leak / "secret").exists(), data
        if "cannot run this Python" in data["output"]:
            # here uid 65534 cannot even run the grader's Python (it lies under a private folder): so nothing ran
            assert run.returncode == 1 and data["output"].startswith("NOT GRADED") and not (leak / "ran").exists()
            return
        assert run.returncode == 0, run.stderr[-3000:]
        ran = (leak / "ran").read_text()
        assert ran.startswith("65534 "), ran  # the notebook ran, as nobody
        assert data["score"] == 0.0 and data["tests"], data  # zeros everywhere: no case passes
        assert (root / "source" / "src" / "attention_book" / "assignments" / "ch03.py").read_text() == checker
        assert not (leak / "secret").exists()
        # no bubblewrap and no user to run as: not graded, and the notebook never ran
        (leak / "ran").unlink()
        run = subprocess.run(command, capture_output=True, text=True, cwd=root / "source",
                             env=dict(env, GRADE_SANDBOX_USER="no-such-user-g37"))
        data = json.loads((root / "results" / "results.json").read_text())
        assert run.returncode == 1 and data["output"].startswith("NOT GRADED") and not (leak / "ran").exists()
        assert "no user 'no-such-user-g37'" in data["output"]
    finally:
        shutil.rmtree(leak, ignore_errors=True)


def _python_for(user: str, python: str) -> bool:
    """Can ``user`` run ``python`` with the grader's modules (as the grader's own probe does)?"""
    import pwd

    entry = pwd.getpwnam(user)

    def drop():
        os.setgroups([])
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)

    try:
        probe = subprocess.run([python, "-c", "import torch, nbclient, ipykernel"], capture_output=True, cwd="/",
                               env={"PATH": "/usr/bin:/bin"}, preexec_fn=drop, check=False)
    except OSError:  # the user cannot reach the file at all
        return False
    return probe.returncode == 0


@pytest.fixture(scope="module")
def student_venv(bundle, tmp_path_factory):
    """Gradescope's layout after setup.sh, for the user fallback: the user ab-student (made as setup.sh
    makes it), and a venv that user can run, with the bundle's package installed (not editable) and
    root's only. The venv is this one linked file by file under a folder ab-student can reach (its Python
    may lie under root's private home), never changed in place: edited files are replaced, not written."""
    if os.geteuid() != 0:
        pytest.skip("running notebooks as ab-student needs root, as in Gradescope's container")
    if sys.prefix == sys.base_prefix:
        pytest.skip("this test links the grader's venv: run it from one")
    if subprocess.run(["id", "-u", "ab-student"], capture_output=True, check=False).returncode != 0:
        if shutil.which("useradd") is None:
            pytest.skip("no user ab-student, and no useradd to make it as setup.sh does")
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "ab-student"],
                       check=True)
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="ab-gradescope-", dir="/opt" if os.access("/opt", os.W_OK) else None))
    top.chmod(0o755)
    try:
        base = Path(sys.base_prefix)
        if not _python_for("ab-student", str(base / "bin" / "python3")):
            linked = subprocess.run(["cp", "-al", str(base), str(top / "base")], capture_output=True, check=False)
            if linked.returncode != 0:
                pytest.skip(f"ab-student cannot run {base}, and it cannot be linked elsewhere: {linked.stderr[-200:]}")
            base = top / "base"
        venv = top / "venv"
        # the venv's real folder: where sys.prefix is a link (a checkout whose .venv links the shared one),
        # `cp -al` copies the link itself, and every edit below would land in the grader's own venv
        real = os.path.realpath(sys.prefix)
        if subprocess.run(["cp", "-al", real, str(venv)], capture_output=True, check=False).returncode != 0:
            pytest.skip(f"{real} cannot be linked under {top}")
        if venv.is_symlink() or os.path.realpath(venv) == real:
            pytest.skip(f"{venv} is not a copy of {real}")
        for link in (venv / "bin").iterdir():  # bin/python3 -> the base Python, wherever it now is
            if link.is_symlink() and os.readlink(link).startswith(sys.base_prefix):
                target = str(base) + os.readlink(link)[len(sys.base_prefix):]
                link.unlink()
                link.symlink_to(target)
        cfg = (venv / "pyvenv.cfg").read_text().replace(sys.base_prefix, str(base))
        (venv / "pyvenv.cfg").unlink()  # a link to the grader's own file: replaced, never written into
        (venv / "pyvenv.cfg").write_text(cfg)
        site = next(venv.glob("lib/python3*/site-packages"))
        for editable in site.glob("__editable__*attention_book*"):
            editable.unlink()  # the package installed as setup.sh's `pip install /autograder/source` does
        root = top / "autograder"
        _unpack(bundle, root)
        shutil.copytree(root / "source" / "src" / "attention_book", site / "attention_book")
        for p in (root / "source", site / "attention_book"):  # setup.sh: the answers and the secret root's only
            subprocess.run(["chmod", "-R", "go-rwx", str(p)], check=True)
        python = str(venv / "bin" / "python")
        if not _python_for("ab-student", python):
            pytest.skip(f"ab-student cannot run the linked venv {venv}")
        yield root, python
    finally:
        shutil.rmtree(top, ignore_errors=True)  # links only: the grader's venv is untouched


@pytest.mark.slow
def test_the_ab_student_fallback_grades_as_gradescope_would(student_venv, tmp_path):
    """The fallback Gradescope's container needs when bubblewrap cannot make namespaces, run as there:
    setup.sh's user, the venv's Python, the package installed and root's only. The notebook runs as
    ab-student, is graded (every case judged, the run exits 0), and cannot rewrite the checkers, read the
    secret or write results.json (before, this path had never run: only as uid 65534, which could not
    even start the grader's Python here)."""
    import pwd

    root, python = student_venv
    fake = root.parent / "bin"  # where uid 65534 reaches it too (the probe runs bwrap as that user)
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    leak = Path(__import__("tempfile").mkdtemp(prefix="g37-leak-"))
    leak.chmod(0o777)
    site = Path(subprocess.run([python, "-c", "import attention_book, os; print(os.path.dirname("
                                "attention_book.__file__))"], capture_output=True, text=True, check=True,
                               env={"PATH": "/usr/bin:/bin"}).stdout.strip())
    try:
        cell = FORGE.format(src=str(site.parent), secret=str(root / "source" / "gradescope.json"),
                            results=str(root / "results" / "results.json"), leak=str(leak))
        (root / "submission" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(cell)))
        checker = (site / "assignments" / "ch03.py").read_text()
        env = {"PATH": f"{fake}:/usr/bin:/bin", "HOME": "/root", "AUTOGRADER_ROOT": str(root),
               "OMP_NUM_THREADS": "1", "GRADE_TIMEOUT": "180"}
        run = subprocess.run([python, "scripts/gradescope_bundle.py", "run"], capture_output=True, text=True,
                             cwd=root / "source", env=env, check=False)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        assert "sandbox: user" in run.stdout, run.stdout[-2000:]
        data = json.loads((root / "results" / "results.json").read_text())
        # the points and the counts only in the test shown after the due date
        assert "status: graded; 0 of 10 cases passed" in data["tests"][-1]["output"], data["tests"][-1]
        # and a failed test worth 0 saying the instructor will read it: the notebook writes files (review flag)
        assert len(data["tests"]) == 13 and data["score"] == 0.0, data
        assert "REVIEW" in data["tests"][-2]["name"] and data["tests"][-2]["max_score"] == 0.0, data["tests"][-2]
        ran = (leak / "ran").read_text()
        assert ran.startswith(f"{pwd.getpwnam('ab-student').pw_uid} ") and "refused" in ran, ran
        assert (site / "assignments" / "ch03.py").read_text() == checker and not (leak / "secret").exists()
    finally:
        shutil.rmtree(leak, ignore_errors=True)


def test_before_the_due_date_a_drawn_case_equal_to_a_checker_case_does_not_show():
    """A fresh attacker (issue 37, 7/10): a hidden case whose drawn inputs equal a checker case is
    visible (mlm_masking's seeds 8, 18 and 22 draw one, its case 8), and its test showed at once with
    its status, while a killed run showed none and counted 10 hidden cases, not 9: graded or killed
    could be told apart before the due date, the oracle the sealed mode closes. Now a graded run, a
    killed run and a timeout at such a seed show exactly the same JSON before the due date."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import grade
    from attention_book.assignments import grading

    for seed in (8, 18, 22):
        records = [{"status": "raised", "error": "NameError: name 'x' is not defined"}] * 10
        cases = grading.case_results("mlm_masking", seed, "n", {"assignment": "mlm_masking", "nonce": "n",
                                                                "records": records})
        assert [c["index"] for c in cases if c["visible"]] == [8], seed  # the coincidence
        graded = dict(student="4242", key="4242", notebook="ch09_exercises.ipynb", assignment="mlm_masking",
                      status="graded", passed=0, total=10, score=0.0, max_points=10.0, points=0.0,
                      penalty=0.0, late_days=0, cases=cases, seed=seed)
        killed = dict(graded, status="kernel died", cases=[], reason="killed by signal 9")
        timeout = dict(graded, status="timeout", cases=[], reason="ran past 300 s")
        shown = [json.dumps(_shown(grade.gradescope_json({"student": "4242"}, [row], "after_due_date")),
                         sort_keys=True) for row in (graded, killed, timeout)]
        assert shown[0] == shown[1] == shown[2], seed
        assert "10 hidden case(s)" in shown[0] and "NameError" not in shown[0]
