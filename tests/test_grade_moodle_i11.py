"""A fresh instructor's Moodle route (issue 37, i11, 7 and 8): a grading worksheet and no roster.

7. gradebook.csv was not the class list: a worksheet participant with no folder had no row. Now every
   participant has one ('not submitted', as a roster student without a file), and the worksheet keeps their
   row as downloaded (blank Grade: Moodle's upload changes nothing there).
8. A folder whose participant is not in the worksheet got a page in moodle_feedback.zip, which Moodle would
   reject or misfile. Now it is left out, said loudly with the folder's name, and its gradebook status says so.
"""
from __future__ import annotations

import csv
import shutil
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import course  # noqa: E402
import grade  # noqa: E402
import pytest  # noqa: E402
from test_grade_moodle_i10 import _download, _folder, _grade, _moodle_class  # noqa: E402


def _rows(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open(encoding="utf-8")))


def test_every_worksheet_participant_is_a_gradebook_row(tmp_path, monkeypatch, capsys):
    ref, course_file = _moodle_class(tmp_path, monkeypatch)  # 4413 Di Fox has no folder
    out = _grade(tmp_path, _download(tmp_path / "dl", "4411", "4412"), ref, course_file)
    book = {r["Student"]: r for r in _rows(out / "gradebook.csv")}
    assert sorted(book) == sorted(_folder(p) for p in ("4411", "4412", "4413")), book
    assert book[_folder("4413")]["ch03 masked_softmax status"] == "not submitted"
    sheet = {r["Identifier"]: r for r in _rows(out / "moodle_worksheet_masked_softmax.csv")}
    assert sheet["Participant 4413"]["Grade"] == "" and sheet["Participant 4413"]["Feedback comments"] == ""
    assert sheet["Participant 4411"]["Grade"] == "10"
    names = zipfile.ZipFile(out / "moodle_feedback.zip").namelist()
    assert sorted(names) == sorted(f"{_folder(p)}/feedback.html" for p in ("4411", "4412"))
    assert not (out / "feedback" / f"{_folder('4413')}.md").exists()
    said = capsys.readouterr()
    assert "WARNING" not in said.out and "WARNING" not in said.err, said


def test_a_folder_not_in_the_worksheet_gets_no_feedback_entry_and_is_said(tmp_path, monkeypatch, capsys):
    ref, course_file = _moodle_class(tmp_path, monkeypatch)
    subs = _download(tmp_path / "dl", "4411", "4412", "4413")
    stranger = "Zed Stranger_1000099_assignsubmission_file"
    (subs / stranger).mkdir()
    (subs / stranger / "ch03_exercises.ipynb").write_text('{"mine": "zed"}')
    out = _grade(tmp_path, subs, ref, course_file)
    said = capsys.readouterr()
    names = zipfile.ZipFile(out / "moodle_feedback.zip").namelist()
    assert sorted(names) == sorted(f"{_folder(p)}/feedback.html" for p in ("4411", "4412", "4413")), names
    assert any(line.startswith("WARNING") and stranger in line and "moodle_feedback.zip" in line
               for line in said.err.splitlines()), said.err
    assert f"REFUSED in moodle_feedback.zip: {stranger}: not in the worksheet" in said.out, said.out
    book = {r["Student"]: r for r in _rows(out / "gradebook.csv")}
    assert "not in the Moodle worksheet" in book[stranger]["ch03 masked_softmax status"]
    assert book[_folder("4411")]["ch03 masked_softmax status"] == "graded"  # the others unaffected
    sheet = {r["Identifier"]: r for r in _rows(out / "moodle_worksheet_masked_softmax.csv")}
    assert [sheet[f"Participant {p}"]["Grade"] for p in ("4411", "4412", "4413")] == ["10"] * 3


# 9. A function that writes into its scores failed every case of masked_softmax (0 points, though its results
# were right in 4 of 9 cases): [course] or [assignments.X] in_place = "case" scores those cases on their results;
# the assignment's own in-place case still fails. "zero" (the default) is the behaviour before.
IN_PLACE_WHY = grade.IN_PLACE + ": " + "your function changed its input scores in place"
DEDICATED = "the scores are not modified in place"  # ch03's case 9 (grade.IN_PLACE_CASES)


def _writing_cases() -> list[dict]:
    """Nine hidden cases of a function that writes into its scores: right on the grader's copy in 1-4 and 9."""
    return [dict(index=i, name="", visible=False, label=DEDICATED if i == 9 else f"case {i}", title=f"case {i}",
                 passed=False, status="ok", why=IN_PLACE_WHY, result_right=i in (1, 2, 3, 4, 9))
            for i in range(1, 10)]


def _in_place_course(tmp_path: Path, course_line: str = "", assignment_line: str = "") -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f'[course]\nname = "T"\n{course_line}\n[assignments.masked_softmax]\npoints = 9\n'
                    f'{assignment_line}\n')
    return path


@pytest.mark.parametrize("course_line, assignment_line, points, passed", [
    ("", "", 0.0, 0),  # the default: as before
    ('in_place = "zero"', "", 0.0, 0),
    ('in_place = "case"', "", 4.0, 4),  # cases 1-4; case 9 (the in-place case) still fails
    ("", 'in_place = "case"', 4.0, 4),
    ('in_place = "case"', 'in_place = "zero"', 0.0, 0),  # the assignment's own wins
])
def test_the_in_place_policy_scores_a_writing_function(tmp_path, course_line, assignment_line, points, passed):
    c = course.load_course(_in_place_course(tmp_path, course_line, assignment_line))
    row = dict(student="ann", key="ann", notebook="ch03_exercises.ipynb", assignment="masked_softmax",
               status="graded", passed=0, total=9, cases=_writing_cases(), seed=1)
    grade.score_row(row, c, None)
    assert (row["points"], row["passed"]) == (points, passed)
    assert not next(x for x in row["cases"] if x["label"] == DEDICATED)["passed"]
    # scored again under the other policy (a resume with a changed course file): from the judged cases
    other = course.load_course(_in_place_course(tmp_path, 'in_place = "zero"' if passed else 'in_place = "case"'))
    grade.score_row(row, other, None)
    assert row["points"] == (0.0 if passed else 4.0)


@pytest.mark.parametrize("table, line", [("course", 'in_place = "zeros"'), ("assignments.masked_softmax",
                                                                          'in_place = "per case"')])
def test_an_unknown_in_place_policy_is_refused_naming_its_table(tmp_path, table, line):
    path = _in_place_course(tmp_path, *((line, "") if table == "course" else ("", line)))
    with pytest.raises(course.CourseError, match=rf"\[{table}\] in_place is \"zero\" .* or \"case\" .*, not "
                                                 rf"'{line.split(chr(34))[1]}'"):
        course.load_course(path)


def test_a_regrade_reproduces_the_in_place_policy(tmp_path, monkeypatch, capsys):
    from test_grade_engine import FakeGrader, fake_grading
    fake_grading(monkeypatch)

    class Writing(FakeGrader):
        def grade_notebook(self, who, path, reference, seeds):
            return [dict(r, passed=0, total=9, cases=_writing_cases())
                    for r in super().grade_notebook(who, path, reference, seeds)]

    monkeypatch.setattr(grade, "Grader", Writing)
    monkeypatch.setattr(grade, "case_count", lambda name, extra=None: 9)
    (tmp_path / "ref").mkdir()
    shutil.copy(ROOT / "notebooks" / "ch03_exercises.ipynb", tmp_path / "ref")
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    (tmp_path / "subs" / "ann" / "ch03_exercises.ipynb").write_text('{"mine": 1}')
    course_file = _in_place_course(tmp_path, 'in_place = "case"')
    out = tmp_path / "out" / "grades.csv"
    grade.grade(tmp_path / "subs", out, 10, tmp_path / "ref", secret="s" * 40, course_file=course_file)
    assert [r["points"] for r in _rows(out)] == ["4.0"]
    capsys.readouterr()
    grade.grade(tmp_path / "subs", out, 10, tmp_path / "ref", secret="s" * 40, course_file=course_file,
                regrade="ann")
    said = capsys.readouterr().out
    assert "regrade ann masked_softmax: 4.0/9" in said and "was 4.0 (graded): the same" in said, said
    assert [r["points"] for r in _rows(out)] == ["4.0"]
    feedback = (out.parent / "feedback").glob("*.md").__next__().read_text()
    assert "4 of 9 cases passed" in feedback and "this course scores such a case on its result" in feedback
    assert "not judged" not in feedback, feedback[:1500]


def test_the_in_place_case_named_is_one_of_the_assignments_own():
    from attention_book.assignments.grading import grading_cases
    for name, label in grade.IN_PLACE_CASES.items():
        _, cases = grading_cases(name, 0)
        assert label in [c.label for c in cases], (name, [c.label for c in cases])
