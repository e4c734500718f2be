"""A fresh instructor's Moodle route (issue 37, i10, 8/10): what the grading-worksheet route (commit 1f557fb)
still got wrong on a Moodle class graded twice, the second time from a fresh download with --resume.

1. ``--resume`` from another folder wrote ``moodle_feedback.zip: 3 feedback files`` for 9 students: a row kept
   from the earlier run pointed at the old folder, so its feedback entry was dropped without a word.
2. Lateness: the worksheet has each participant's ``Last modified (submission)``, and a due date with no
   times file gave a late student full marks (the run warned, but gave no way to use Moodle's time); a times
   file line for 'Ivo Late' (not the folder name) matched nobody, without a word.
"""
from __future__ import annotations

import csv
import hashlib
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

HEADER = ("Identifier,Full name,Email address,Status,Grade,Maximum grade,Grade can be changed,"
          "Last modified (submission),Last modified (grade),Feedback comments")
PEOPLE = {"4411": "Ann Lee", "4412": "Bo Chen", "4413": "Di Fox"}


def _folder(pid: str) -> str:
    return f"{PEOPLE[pid]}_{pid}_assignsubmission_file"


def _download(where: Path, *pids: str) -> Path:
    for pid in pids:
        (where / _folder(pid)).mkdir(parents=True, exist_ok=True)
        (where / _folder(pid) / "ch03_exercises.ipynb").write_text('{"mine": "%s"}' % pid)
    return where


def _moodle_class(tmp_path: Path, monkeypatch, worksheet: str | None = None, course_extra: str = "",
                  points: str = "10.00", due: str = "", when: dict | None = None) -> tuple[Path, Path]:
    """A reference folder and a course file (the worksheet of three participants, 4413 without a file); the
    notebooks are graded by test_grade_engine's FakeGrader (1 of 1 case, nothing run)."""
    from test_grade_engine import FakeGrader, fake_grading
    fake_grading(monkeypatch)

    class Hashing(FakeGrader):  # as the real grader: the row records its file's sha256, which --resume compares
        def grade_notebook(self, who, path, reference, seeds):
            digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            case = dict(index=1, name="", visible=True, label="a case", title="a case", passed=True, status="ok",
                        why="")
            return [dict(r, sha256=digest, cases=[case])
                    for r in super().grade_notebook(who, path, reference, seeds)]

    monkeypatch.setattr(grade, "Grader", Hashing)
    monkeypatch.setattr(grade, "case_count", lambda name, extra=None: 1)
    (tmp_path / "ref").mkdir()
    shutil.copy(ROOT / "notebooks" / "ch03_exercises.ipynb", tmp_path / "ref")
    if worksheet is None:
        worksheet = HEADER + "\n" + "".join(
            f'Participant {pid},{name},{pid}@example.edu,Submitted for grading,,{points},Yes,'
            f'"{(when or {}).get(pid, "Friday, 30 April 2027, 9:12 PM")}",-,\n' for pid, name in PEOPLE.items())
    (tmp_path / "ws.csv").write_text(worksheet, encoding="utf-8")
    (tmp_path / "c.toml").write_text('[course]\nname = "T"\ntimezone = "Europe/Berlin"\n' + course_extra +
                                     '[assignments.masked_softmax]\npoints = 10\nmoodle_worksheet = "ws.csv"\n'
                                     + (f"due = {due}\n" if due else ""))
    return tmp_path / "ref", tmp_path / "c.toml"


def _grade(tmp_path, subs, ref, course_file, **kw):
    out = tmp_path / "out" / "grades.csv"
    grade.grade(subs, out, 10, ref, secret="s" * 40, course_file=course_file, **kw)
    return out.parent


def test_resume_from_a_fresh_download_in_another_folder_keeps_every_feedback_entry(tmp_path, monkeypatch,
                                                                                     capsys):
    ref, course_file = _moodle_class(tmp_path, monkeypatch)
    first = _download(tmp_path / "dl1", "4411", "4412")
    out = _grade(tmp_path, first, ref, course_file)
    second = _download(tmp_path / "dl2", "4411", "4412", "4413")  # the same files and one new student
    capsys.readouterr()
    _grade(tmp_path, second, ref, course_file, resume=True)
    said = capsys.readouterr()
    assert f"{_folder('4411')}/ch03" not in said.out, said.out  # kept from the first run, not graded again
    names = sorted(zipfile.ZipFile(out / "moodle_feedback.zip").namelist())
    assert names == sorted(f"{_folder(p)}/feedback.html" for p in PEOPLE), (names, said.out)
    assert "REFUSED" not in said.out


def test_a_row_whose_file_is_not_under_the_submissions_is_said_not_dropped(tmp_path, capsys):
    folder = _folder("4411")
    row = dict(student=folder, key=folder, notebook="ch03_exercises.ipynb", assignment="masked_softmax",
               status="graded", path=str(tmp_path / "old" / folder / "ch03_exercises.ipynb"), passed=1, total=1,
               cases=[], points=10.0, max_points=10.0, reason="", seed=1)
    student = {"key": folder, "student": folder, "name": "Ann Lee", "id": "", "sis_user_id": "", "login": folder,
               "section": "", "email": ""}
    zips, refused = grade.lms_feedback([row], [student], None, tmp_path / "new")
    assert not zips["moodle_feedback.zip"]
    assert refused and refused[0][:2] == ("moodle_feedback.zip", folder) and "not under" in refused[0][2]


LATE = '[late]\nper_day = 0.10\ncap = 0.50\n'


@pytest.mark.parametrize("text, iso", [("Friday, 30 April 2027, 9:12 PM", "2027-04-30T21:12:00+02:00"),
                                       ("Monday, 3 May 2027, 2:00 AM", "2027-05-03T02:00:00+02:00"),
                                       ("Sunday, 12 December 2027, 12:05 AM", "2027-12-12T00:05:00+01:00"),
                                       ("3 May 2027, 12:30 PM", "2027-05-03T12:30:00+02:00"), ("-", None)])
def test_moodles_english_dates_are_read_in_the_course_timezone(text, iso):
    when = course.moodle_date(text, "Europe/Berlin")
    assert (when.isoformat() if when else None) == iso


@pytest.mark.parametrize("text", ["Freitag, 30. April 2027, 21:12", "30/04/2027 21:12", "2027-04-30 21:12",
                                  "Saturday, 30 April 2027, 9:12 PM", "Friday, 30 Avril 2027, 9:12 PM"])
def test_a_date_moodle_did_not_write_in_english_stops_the_run_naming_file_and_line(tmp_path, monkeypatch, text):
    with pytest.raises(course.CourseError, match=r"ws.csv, line 3: Last modified \(submission\) .*English"):
        _moodle_class(tmp_path, monkeypatch, course_extra=LATE, due="2027-04-30T23:59:00", when={"4412": text})
        course.load_course(tmp_path / "c.toml")


def test_the_worksheets_submission_time_is_the_moodle_routes_late_source(tmp_path, monkeypatch, capsys):
    """No times file, a due date: Bo's 'Monday, 3 May 2027, 2:00 AM' is 3 days late (30 % taken), said
    with the timezone used; Ann, on time, keeps her points."""
    ref, course_file = _moodle_class(tmp_path, monkeypatch, course_extra=LATE, due="2027-04-30T23:59:00",
                                     when={"4412": "Monday, 3 May 2027, 2:00 AM"})
    assert course.load_course(course_file).late_source == "moodle_worksheet"
    rows = _grade(tmp_path, _download(tmp_path / "dl", "4411", "4412"), ref, course_file)
    said = capsys.readouterr()
    got = {r["student"]: r for r in csv.DictReader(open(rows / "grades.csv", encoding="utf-8"))}
    assert float(got[_folder("4411")]["points"]) == 10 and float(got[_folder("4412")]["points"]) == 7, got
    assert got[_folder("4412")]["late_days"] == "3"
    assert "read in Europe/Berlin (the course timezone" in said.out
    assert "NO submission time" not in said.out


def test_a_times_file_line_for_no_student_is_said_with_the_near_folder(tmp_path, monkeypatch, capsys):
    (tmp_path / "times.csv").write_text("student,notebook,submitted_at\n"
                                        "Ann Lee,ch03_exercises.ipynb,2027-05-03T02:00:00+02:00\n")
    ref, course_file = _moodle_class(tmp_path, monkeypatch, course_extra=LATE + 'times = "times.csv"\n',
                                     due="2027-04-30T23:59:00")
    _grade(tmp_path, _download(tmp_path / "dl", "4411"), ref, course_file)
    said = capsys.readouterr()
    assert f"'Ann Lee' (ch03_exercises.ipynb) matches no student of this run (did you mean '{_folder('4411')}'?)" \
        in said.err
    assert "NO submission time" in said.out and "Ann Lee_4411_assignsubmission_file masked_softmax" in said.err


def test_a_worksheet_out_of_other_points_is_not_written_and_said_last(tmp_path, monkeypatch, capsys):
    """The worksheet's Maximum grade 100, the course file's points 10: Moodle's upload would take 10 as 10 out
    of 100. Not written, with the fix; the WARNING is repeated after the run's summary line."""
    ref, course_file = _moodle_class(tmp_path, monkeypatch, points="100.00")
    out = _grade(tmp_path, _download(tmp_path / "dl", "4411"), ref, course_file)
    said = capsys.readouterr()
    assert not (out / "moodle_worksheet_masked_softmax.csv").exists()
    warning = ("WARNING: moodle_worksheet_masked_softmax.csv not written for " + str(tmp_path / "ws.csv") +
               ": its Maximum grade is 100 where the course file gives 10 points")
    assert warning in said.err
    assert said.out.rstrip().splitlines()[-1].startswith(warning), said.out[-600:]
    assert "set points = 100 in the course file" in said.out


def test_the_sample_worksheet_is_the_one_the_example_course_file_names():
    text = (ROOT / "course.example.toml").read_text(encoding="utf-8")
    assert '# moodle_worksheet = "course_example/masked_softmax_worksheet.csv"' in text
    sheet = course.load_worksheet(ROOT / "course_example" / "masked_softmax_worksheet.csv")
    assert sheet.header[:2] == ["Identifier", "Full name"] and len(sheet.ids) == 3
    assert course.worksheet_times(sheet, "Europe/Berlin")["1000001"].isoformat() == "2027-04-30T21:12:00+02:00"
    from lms_export import worksheet_maximum_problem
    assert worksheet_maximum_problem(sheet, 20.0) == ""


def test_a_moodle_only_class_gets_no_canvas_warning_no_moodle_csv_and_its_full_names(tmp_path, monkeypatch,
                                                                                     capsys):
    """No roster, Moodle's folders, a worksheet: no 'canvas.csv not written' WARNING, no moodle.csv whose
    Username would be a folder name, one quiet line; the feedback is headed with the worksheet's Full name."""
    ref, course_file = _moodle_class(tmp_path, monkeypatch)
    out = _grade(tmp_path, _download(tmp_path / "dl", "4411", "4412"), ref, course_file)
    said = capsys.readouterr()
    assert not (out / "moodle.csv").exists() and not (out / "canvas.csv").exists()
    assert "WARNING" not in said.err and "WARNING" not in said.out, said
    assert said.out.count("canvas.csv and moodle.csv not written: these are Moodle folders") == 1
    feedback = zipfile.ZipFile(out / "moodle_feedback.zip").read(f"{_folder('4411')}/feedback.html").decode()
    assert f"Ann Lee ({_folder('4411')})" in feedback, feedback[:800]


# a diff reviewer (issue 37): naming a moodle_worksheet with no [late] switched the late source to the worksheet
# and read every 'Last modified (submission)' at load, so one date it could not read (en_US, month first) or a
# worksheet without the column stopped load_course on a course with no due date and no late penalty
@pytest.mark.parametrize("late", ["", LATE])
def test_a_course_without_lateness_loads_whatever_the_worksheets_dates(tmp_path, monkeypatch, late):
    _moodle_class(tmp_path, monkeypatch, course_extra=late, when={"4412": "30/04/2027 21:12"})
    assert course.load_course(tmp_path / "c.toml").late_source == "none"


def test_a_worksheet_without_the_submission_column_loads_when_no_date_is_needed(tmp_path, monkeypatch):
    sheet = HEADER.replace("Last modified (submission),", "") + "\nParticipant 4411,Ann Lee,a@x,S,,10.00,Yes,-,\n"
    _moodle_class(tmp_path, monkeypatch, worksheet=sheet, course_extra='[late]\nsource = "moodle_worksheet"\n')
    assert course.load_course(tmp_path / "c.toml").submitted == {}


@pytest.mark.parametrize("text, iso", [("Friday, April 30, 2027, 9:12 PM", "2027-04-30T21:12:00+02:00"),
                                       ("Monday, May 3, 2027, 2:00 AM", "2027-05-03T02:00:00+02:00")])
def test_moodles_en_us_dates_month_first_are_read(text, iso):
    """Moodle's en_us language pack: strftimedaydatetime '%A, %B %d, %Y, %I:%M %p'."""
    assert course.moodle_date(text, "Europe/Berlin").isoformat() == iso


def test_an_unreadable_date_says_which_formats_are_read(tmp_path, monkeypatch):
    with pytest.raises(course.CourseError, match=r"read: .*'Friday, April 30, 2027, 9:12 PM' \(en_US\)"):
        _moodle_class(tmp_path, monkeypatch, course_extra=LATE, due="2027-04-30T23:59:00",
                      when={"4412": "30/04/2027 21:12"})
        course.load_course(tmp_path / "c.toml")


def test_an_override_for_a_moodle_full_name_is_said_with_the_near_folder():
    """The overrides file's did-you-mean is the times file's (one course.near): 'Ann Lee' -> her folder."""
    taught = course.Course(overrides_file="o.csv")
    taught.overrides[("Ann Lee", "masked_softmax")] = course.Override("Ann Lee", "masked_softmax")
    with pytest.raises(course.CourseError, match=f"no student 'Ann Lee' in this class \\(did you mean "
                                                 f"'{_folder('4411')}'\\?\\)"):
        course.check_override_students(taught, [_folder("4411"), _folder("4412")])
