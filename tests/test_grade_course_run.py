"""What a fresh instructor (issue 37, 7/10) met grading chapters 3 and 4 with the guide's example course;
no sandbox needed (the sandbox's run is replaced, or the grader's parts are called directly).

- chapter 4's graded ``bleu`` feedback told every student, at full marks, that the chapter's own cell
  ``sentences = [...]`` raised NameError (``gru_model``): an earlier chapter cell met a function the
  grader blocks. That cell is the student edition's (it guards the lines that use an exercise's names),
  not the committed notebook's, so the grader took it for the student's;
- ``masked_cross_entropy``, which the course file does not name, was run, blocked and journalled.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
grade = importlib.import_module("grade")
editions = importlib.import_module("editions")

CH04 = "ch04_exercises.ipynb"


def _code(nb: dict) -> list[int]:
    return [i for i, c in enumerate(nb["cells"]) if c.get("cell_type") == "code"]


def _first(nb: dict, start: str) -> int:
    return next(i for i in _code(nb) if grade._source(nb["cells"][i]).startswith(start))


def test_a_chapter_cell_that_fails_after_a_blocked_call_is_not_the_students():
    """Ada, 10/10 on bleu, read "code cell 10 of 14 (first line: sentences = [...]) raised NameError: name
    'gru_model' is not defined in the grader's run ..." and a What to do line. The chapter's training
    cell met the blocked ``bleu`` (its report scores translations), so ``gru_model`` was never defined; the
    cell that raised is the chapter's, in the student edition's form: no line. A cell the student wrote
    that raises on the same name still gets its line."""
    reference = json.loads((ROOT / "notebooks" / CH04).read_text(encoding="utf-8"))
    student = editions.make_edition(reference, "student")
    g = grade.Grader.__new__(grade.Grader)
    g.reference_sources = {CH04: grade.chapter_sources(reference)}
    training, sentences = _first(student, "data = ab.load_translation"), _first(student, "sentences = [")
    assert "try:  # student edition" in grade._source(student["cells"][sentences])
    errors = [{"cell": training, "error": "BlockedAnswer: the package's own bleu is not available"},
              {"cell": sentences, "error": "NameError: name 'gru_model' is not defined"}]
    assert g._run_all_stop(student, errors, CH04) == ""
    assert not any(g._students_cell(student, i, CH04) for i in _code(student)
                   if "graded" not in student["cells"][i]["metadata"].get("tags", []))
    student["cells"][sentences]["source"] += "\nprint(gru_model)  # the student's own line"
    line = g._run_all_stop(student, errors, CH04)
    assert "NameError: name 'gru_model' is not defined in the grader's run, after an earlier cell" in line


class _Recorder:
    """The grader's place: records the assignments each notebook is to be graded on (its seeds)."""

    seen: list[tuple[str, list[str]]] = []

    def __init__(self, reference, *args):
        self.sandbox = type("Box", (), {"kind": "fake", "missing": []})()
        self.missing: set[str] = set()
        self.extras = {}

    def grade_notebook(self, who, path, reference, seeds):
        _Recorder.seen.append((reference, sorted(seeds)))
        return [dict(student=who, notebook=reference, assignment=n, passed=1, total=1, status="graded",
                     reason="", cases=[], seed=seeds[n]) for n in seeds]

    def close(self):
        pass


def test_only_the_course_files_assignments_run(tmp_path, monkeypatch):
    """The console printed ``ada/ch04_exercises.ipynb masked_cross_entropy: 0/5 cases (not implemented)``
    and grades.jsonl held its rows while the course file named only bleu of chapter 4: the guide says
    only the assignments the course file names are graded. Now the others are not run (no seed, no
    hidden cases, not blocked) and have no rows; the Grader is told which to load."""
    _Recorder.seen = []
    monkeypatch.setattr(grade, "Grader", _Recorder)
    monkeypatch.setattr(grade, "_announce", lambda grader: None)
    reference = tmp_path / "ref"
    reference.mkdir()
    (reference / CH04).write_text((ROOT / "notebooks" / CH04).read_text(encoding="utf-8"))
    subs = tmp_path / "subs" / "ada"
    subs.mkdir(parents=True)
    (subs / CH04).write_text("{}")
    (tmp_path / "c.toml").write_text('[assignments.bleu]\npoints = 10\n')
    out = tmp_path / "out" / "grades.csv"
    rows = grade.grade(tmp_path / "subs", out, 10, reference, secret="s" * 40, course_file=tmp_path / "c.toml")
    assert _Recorder.seen == [(CH04, ["bleu"])]
    assert [r["assignment"] for r in rows] == ["bleu"]
    journal = [json.loads(line) for line in (out.parent / "grades.jsonl").read_text().splitlines()]
    assert {r["assignment"] for r in journal} == {"bleu"}, journal
    assert grade.reference_assignments(reference, ["bleu"]) == {CH04: ["bleu"]}
    assert grade.reference_assignments(reference, ["masked_softmax"]) == {}
    assert grade.reference_assignments(reference) == {CH04: ["masked_cross_entropy", "bleu"]}


# --------------------------------------------------------------------------- a class graded without a sandbox

CH03 = "ch03_exercises.ipynb"
DUE = '\ndue = 2027-04-30T23:59:00\n'


def _class(tmp_path, monkeypatch, course: str, files: dict[str, str], overrides: str = "",
           times: str = "") -> tuple:
    """A class of ``files`` (relative path -> '{}'), graded by the engine's fake grader (every case passed)
    under the course file ``course``; returns (grade's arguments, the output folder)."""
    from test_grade import SCAFFOLD, notebook
    from test_grade_engine import FakeGrader, fake_grading

    class Passing(FakeGrader):  # its one case passed: full points
        def grade_notebook(self, *args):
            return [dict(r, cases=[{"index": 1, "passed": True, "visible": False, "label": "one", "status": "ok",
                                    "why": ""}]) for r in super().grade_notebook(*args)]

    fake_grading(monkeypatch)
    monkeypatch.setattr(grade, "Grader", Passing)
    reference = tmp_path / "ref"
    reference.mkdir(exist_ok=True)
    (reference / CH03).write_text(json.dumps(notebook(SCAFFOLD)))
    for rel in files:
        (tmp_path / "subs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "subs" / rel).write_text("{}")
    if overrides:
        (tmp_path / "overrides.csv").write_text(overrides)
        course += '\n[overrides]\nfile = "overrides.csv"\n'
    if times:
        (tmp_path / "times.csv").write_text(times)
        course = '[late]\nper_day = 0.10\ncap = 0.5\ntimes = "times.csv"\n' + course
    (tmp_path / "c.toml").write_text(course)
    out = tmp_path / "out" / "grades.csv"
    return (tmp_path / "subs", out, 10, reference), dict(secret="s" * 40, course_file=tmp_path / "c.toml")


def _csv(path: Path) -> list[dict]:
    import csv

    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_overrides_set_points_excuse_lateness_and_extend_a_due_date_at_every_run(tmp_path, monkeypatch):
    """A fresh instructor (issue 37): "Appeals have no override mechanism ... A hand-edited canvas.csv is
    overwritten by the next --regrade or re-run." The course file's [overrides] CSV sets a student's
    points, excuses their lateness or gives them their own due date; every run applies it, grades.csv and
    the gradebook show it, and the student's feedback says the instructor changed the grade."""
    students = {f"{s}/{CH03}": "{}" for s in ("ann", "bob", "cat", "dan")}
    times = ("student,notebook,submitted_at\nann,ch03_exercises.ipynb,2027-05-03T12:00:00+00:00\n"
             "bob,ch03_exercises.ipynb,2027-05-02T12:00:00+00:00\n"
             "cat,ch03_exercises.ipynb,2027-05-02T12:00:00+00:00\n"
             "dan,ch03_exercises.ipynb,2027-05-03T12:00:00+00:00\n")
    overrides = ("student,assignment,points,due,excuse_late,note\nann,masked_softmax,15,,,regraded on appeal\n"
                 "bob,masked_softmax,,,yes,illness\ncat,masked_softmax,,2027-05-10T23:59:00,,\n")
    args, kw = _class(tmp_path, monkeypatch, '[assignments.masked_softmax]\npoints = 20' + DUE, students,
                      overrides, times)
    for _ in range(2):  # a second run into the same folder applies them again
        grade.grade(*args, **kw)
        rows = {r["student"]: r for r in _csv(args[1])}
        assert (rows["ann"]["points"], rows["bob"]["points"], rows["cat"]["points"]) == ("15.0", "20.0", "20.0")
        assert rows["dan"]["points"] == "14.0" and rows["dan"]["penalty"] == "0.3", rows["dan"]
        assert rows["ann"]["override"] == "override: points set to 15 (computed 14); regraded on appeal"
        assert rows["bob"]["override"] == "override: lateness excused; illness" and rows["bob"]["penalty"] == "0.0"
        book = {r["Student"]: r for r in _csv(args[1].parent / "gradebook.csv")}
        assert "override: due 2027-05-10T23:59" in book["cat"]["ch03 masked_softmax status"], book["cat"]
    feedback = next((args[1].parent / "feedback").glob("ann-*.md")).read_text()
    assert "**15 of 20 points**" in feedback and "Your instructor changed this grade:" in feedback, feedback


def test_an_override_for_no_such_student_or_assignment_is_refused_with_the_near_name(tmp_path, monkeypatch):
    import pytest
    course_module = importlib.import_module("course")

    course = '[assignments.masked_softmax]\npoints = 20' + DUE
    args, kw = _class(tmp_path, monkeypatch, course, {f"ann/{CH03}": "{}"},
                      "student,assignment,points\nanm,masked_softmax,5\n")
    with pytest.raises(grade.GradeError, match="no student 'anm' in this class \\(did you mean 'ann'\\?\\)"):
        grade.grade(*args, **kw)
    for text, match in (("student,assignment,points\nann,masked_sofmax,5\n", "did you mean 'masked_softmax'"),
                        ("student,assignment,pionts\nann,masked_softmax,5\n", "did you mean 'points'"),
                        ("student,assignment,points\nann,masked_softmax,25\n", "not between 0 and"),
                        ("student,assignment,points\nann,masked_softmax,\n", "sets nothing")):
        (tmp_path / "overrides.csv").write_text(text)
        with pytest.raises(course_module.CourseError, match=match):
            course_module.load_course(tmp_path / "c.toml")


def test_a_second_run_into_the_same_folder_says_what_changed(tmp_path, monkeypatch, capsys):
    """A fresh instructor (issue 37): after adding a case and re-running into the same folder, "every grade
    was silently replaced (only --regrade prints 'was X')". Each change is printed, was and now, and the
    line after them says to upload again."""
    args, kw = _class(tmp_path, monkeypatch, '[assignments.masked_softmax]\npoints = 20\n',
                      {f"ann/{CH03}": "{}", f"bob/{CH03}": "{}"})
    grade.grade(*args, **kw)
    assert "changed:" not in capsys.readouterr().out
    grade.grade(*args, **kw)
    assert "no grade changed since the last run into this folder" in capsys.readouterr().out
    (tmp_path / "c.toml").write_text('[assignments.masked_softmax]\npoints = 10\n')
    grade.grade(*args, **kw)
    out = capsys.readouterr().out
    assert "changed: ann masked_softmax: was 20 (graded), now 10 (graded)" in out, out
    assert "2 grades changed since the last run into this folder: upload canvas.csv or moodle.csv" in out, out


def test_files_canvas_marked_late_are_named_when_there_is_no_times_file(tmp_path, monkeypatch, capsys):
    """A fresh instructor (issue 37): "`_LATE_` in Canvas's bulk-download file names is ignored", so a
    Canvas class without a times file got no word of who was late. Those files are named (console and
    gradebook); the days still need a times file."""
    args, kw = _class(tmp_path, monkeypatch, '[assignments.masked_softmax]\npoints = 20' + DUE,
                      {"ann_LATE_300_901_ch03_exercises.ipynb": "{}", "bob_301_902_ch03_exercises.ipynb": "{}"})
    grade.grade(*args, **kw)
    out = capsys.readouterr().out
    assert "1 graded notebook Canvas marked late (_LATE_ in the file name)" in out, out
    assert "Canvas marked late: ann_300 masked_softmax" in out and "Canvas marked late: bob" not in out, out
    book = {r["Student"]: r for r in _csv(args[1].parent / "gradebook.csv")}
    assert "Canvas marked it late (_LATE_ in its name; no time in a times file)" in book["ann_300"]["ch03 masked_softmax status"], book


def test_the_in_place_case_and_hint_say_what_they_mean():
    """A fresh instructor (issue 37): dan's "Hidden case 9: the scores are not modified in place" over "the
    result is wrong" read as an in-place complaint; kim used masked_fill_ and the hint named only
    scores[~keep] = .... The case's name reads as a check (its label, which weights name, stays), and the
    hint names the trailing underscore."""
    from attention_book.assignments.ch03 import IN_PLACE
    from attention_book.assignments.grading import grading_cases

    _, cases = grading_cases("masked_softmax", 3)
    case = next(c for c in cases if c.label == "the scores are not modified in place")
    assert case.name.startswith("a check for writes in place"), case.name
    assert "masked_fill_ with its trailing underscore" in IN_PLACE and "masked_fill (no underscore)" in IN_PLACE


def test_the_example_overrides_file_loads_with_the_example_course(tmp_path):
    """course.example.toml's commented [overrides] names course_example/overrides.csv: with it on, the
    example course loads, and each line names a student of the example roster."""
    import shutil

    course_module = importlib.import_module("course")
    text = (ROOT / "course.example.toml").read_text().replace("# [overrides]\n# file", "[overrides]\nfile")
    shutil.copytree(ROOT / "course_example", tmp_path / "course_example")  # its paths are relative to it
    (tmp_path / "course.toml").write_text(text)
    course = course_module.load_course(tmp_path / "course.toml")
    assert set(course.overrides) <= {(s, a) for s in course.roster for a in course.assignments}
    assert len(course.overrides) == 3
