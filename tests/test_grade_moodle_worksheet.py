"""Moodle without a hand-made roster (issue 37; a fresh instructor, 7.5/10: "no for Moodle": the folders of
Moodle's *Download all submissions* carry a per-assignment participant id, so moodle.csv matched students only
through a roster built by hand). The course file's ``moodle_worksheet`` names the assignment's offline grading
worksheet; the grader writes it back with the grades filled, matched by that participant id.

The worksheet is read back here the way Moodle's *Upload grading worksheet* reads it
(mod/assign/feedback/offline/importgradeslib.php and locallib.php; lib/csvlib.class.php, load_csv_content):
the BOM dropped, \\r\\n read as \\n, the columns found by their exact English names (Identifier, Grade,
Last modified (grade), Feedback comments), the participant id the Identifier less "Participant ", the grade
through unformat_float (the language's decimal separator swapped for "."), a blank grade skipped.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
grade = importlib.import_module("grade")
course = importlib.import_module("course")
lms_export = importlib.import_module("lms_export")

HEADER = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum grade", "Grade can be changed",
          "Last modified (submission)", "Last modified (grade)", "Feedback comments"]
# Moodle's download in folders: <Full name>_<participant id>_assignsubmission_file
FOLDERS = {"Ann Lee_4411_assignsubmission_file": "4411", "Bo Chen_4412_assignsubmission_file": "4412",
           "Cy Dee_4414_assignsubmission_file": "4414"}
LINES = [  # Participant 4413 handed nothing in (no folder); 4415 is not in this download at all
    ["Participant 4411", "Ann Lee", "ann@example.edu", "Submitted for grading", "", "10.00", "Yes",
     "Monday, 3 May 2027, 10:00 AM", "-", ""],
    ["Participant 4412", "Bo Chen", "bo@example.edu", "Submitted for grading", "4.00", "10.00", "Yes",
     "Monday, 3 May 2027, 11:00 AM", "Tuesday, 4 May 2027, 9:00 AM", "Seen in class"],
    ["Participant 4413", "Di Fox", "di@example.edu", "No submission", "", "10.00", "Yes", "-", "-", ""],
    ["Participant 4414", "Cy Dee", "cy@example.edu", "Submitted for grading", "", "10.00", "Yes",
     "Monday, 3 May 2027, 12:00 PM", "-", ""],
]


def _csv(rows: list[list[str]], newline: str = "\n", bom: bool = False) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator=newline).writerows(rows)
    return (b"\xef\xbb\xbf" if bom else b"") + out.getvalue().encode("utf-8")


def moodle_reads(data: bytes, decsep: str = ".") -> dict[str, tuple]:
    """``{participant id: (grade or None, feedback comment)}`` as Moodle's upload reads the worksheet; a grade
    Moodle would skip (blank) is None. Refuses (AssertionError) what Moodle refuses: no Identifier, Grade or
    Last modified (grade) column."""
    text = data.decode("utf-8").removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").strip()
    rows = list(csv.reader(io.StringIO(text)))
    columns = rows[0]
    index = {name: (max(i for i, c in enumerate(columns) if c == name) if name in columns else -1)
             for name in ("Identifier", "Grade", "Last modified (grade)", "Feedback comments")}
    assert min(index["Identifier"], index["Grade"], index["Last modified (grade)"]) >= 0, "invalidgradeimport"
    out = {}
    for row in rows[1:]:
        pid = row[index["Identifier"]][len("Participant "):]
        cell = row[index["Grade"]].strip().replace(" ", "").replace(decsep, ".")
        comment = row[index["Feedback comments"]] if index["Feedback comments"] > 0 else None
        out[pid] = (float(cell) if cell not in ("",) else None, comment)
    return out


def _row(key: str, subs: Path, status: str = "graded", points: float | None = 7.5) -> dict:
    return dict(student=grade.display_name(key), key=key, notebook="ch03_exercises.ipynb",
                assignment="masked_softmax", status=status, passed=3, total=4, seed=1, sha256="x",
                path=str(subs / key / "ch03_exercises.ipynb"), reason="", late_days=0, penalty=0.0,
                points=points, max_points=10.0, score=0.75, cases=[])


def _student(key: str) -> dict:
    return {"key": key, "student": grade.display_name(key), "name": grade.display_name(key), "id": "",
            "sis_user_id": "", "login": key, "section": "", "email": ""}


def _class(tmp_path: Path, worksheet: bytes, folders=FOLDERS) -> tuple[Path, course.Course]:
    subs = tmp_path / "subs"
    for folder in folders:
        (subs / folder).mkdir(parents=True)
        (subs / folder / "ch03_exercises.ipynb").write_text("{}")
    (tmp_path / "worksheet.csv").write_bytes(worksheet)
    (tmp_path / "course.toml").write_text('[assignments.masked_softmax]\nmoodle_worksheet = "worksheet.csv"\n')
    return subs, course.load_course(tmp_path / "course.toml")


def _grade(tmp_path: Path, subs: Path, taught: course.Course, rows: list[dict], partial: bool = False) -> Path:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    keys = sorted({r["key"] for r in rows})
    grade.write_outputs(rows, out / "grades.csv", [_student(k) for k in keys], taught,
                        [("ch03", "masked_softmax")], [], [], partial, subs)
    return out


def test_the_worksheet_comes_back_with_the_grades_and_nothing_else_changed(tmp_path, capsys):
    """Graded folders get their points (a graded 0 is a 0); a grader error keeps the grade Moodle wrote, so the
    upload changes nothing for that student; a participant without a folder is left as downloaded."""
    given = _csv([HEADER, *LINES])
    subs, taught = _class(tmp_path, given)
    ann, bo, cy = FOLDERS
    rows = [_row(ann, subs), _row(bo, subs, status="grader error", points=None),
            _row(cy, subs, status="timeout", points=0.0)]
    out = _grade(tmp_path, subs, taught, rows)
    written = (out / "moodle_worksheet_masked_softmax.csv").read_bytes()
    read = moodle_reads(written)
    assert read["4411"][0] == 7.5 and read["4414"][0] == 0.0
    assert read["4412"] == (4.0, "Seen in class"), "not graded: the grade and comment Moodle wrote"
    assert read["4413"] == (None, ""), "no folder: blank, which Moodle's upload skips"
    assert read["4411"][1] == lms_export.worksheet_comment(7.5, 10.0) == (
        "7.5 of 10 points (autograded). Your feedback: feedback.html, under Feedback files.")
    table = list(csv.reader(io.StringIO(written.decode("utf-8"))))
    assert table[0] == HEADER and table[2:4] == [LINES[1], LINES[2]], "every other cell as it came"
    assert [line[:4] + line[5:9] for line in table[1:]] == [line[:4] + line[5:9] for line in LINES]
    said = capsys.readouterr().out
    assert "Wrote moodle_worksheet_masked_softmax.csv: 2 grades filled, 2 participants left as downloaded" in said
    # a comma-decimal language: Moodle wrote "4,00"; "7.5" still reads as 7.5 (unformat_float swaps "," for
    # "."), so the grader writes "." whatever the worksheet holds
    commas = _csv([HEADER, *[line[:4] + [line[4].replace(".", ",")] + line[5:] for line in LINES]])
    (tmp_path / "worksheet.csv").write_bytes(commas)
    taught = course.load_course(tmp_path / "course.toml")
    again = moodle_reads((_grade(tmp_path, subs, taught, rows) / "moodle_worksheet_masked_softmax.csv")
                         .read_bytes(), decsep=",")
    assert again["4411"][0] == 7.5 and again["4412"][0] == 4.0


def test_a_folder_not_in_the_worksheet_is_listed_never_guessed(tmp_path, capsys):
    folders = {**FOLDERS, "Ann Lee_4415_assignsubmission_file": "4415"}  # the same name, another participant
    subs, taught = _class(tmp_path, _csv([HEADER, *LINES]), folders)
    out = _grade(tmp_path, subs, taught, [_row(k, subs) for k in folders])
    read = moodle_reads((out / "moodle_worksheet_masked_softmax.csv").read_bytes())
    assert read["4411"][0] == 7.5 and "4415" not in read
    said = capsys.readouterr()
    assert "not in the worksheet: 'Ann Lee_4415_assignsubmission_file' (participant 4415)" in said.out
    assert "1 folder not in the worksheet" in said.out and "Ann Lee_4415_assignsubmission_file" in said.err
    # a worksheet of another Moodle assignment (no id in common): not written, and said
    (tmp_path / "worksheet.csv").write_bytes(_csv([HEADER, ["Participant 9"] + LINES[0][1:]]))
    taught = course.load_course(tmp_path / "course.toml")
    out = _grade(tmp_path, subs, taught, [_row(k, subs) for k in folders])
    assert not (out / "moodle_worksheet_masked_softmax.csv").exists(), "the earlier run's file is gone too"
    assert "WARNING: moodle_worksheet_masked_softmax.csv not written" in capsys.readouterr().err


def test_hostile_cells_are_written_as_they_came(tmp_path):
    """A formula-looking name or e-mail is Moodle's own cell: it is in the download the instructor already has,
    Moodle's upload never reads it, and a "'" added to a Feedback comments cell would make the upload change
    that comment. So every cell the grader does not fill is written as it came; the cells it fills hold digits
    and fixed words only, never a student's text, and never start with = + - @."""
    hostile = ["Participant 4411", "=cmd|' /C calc'!A0", "@SUM(1+1)", "+x", "", "10.00", "Yes", "-", "-",
               "-see me <b>now</b>"]
    subs, taught = _class(tmp_path, _csv([HEADER, hostile, LINES[3]]))
    rows = [_row("Ann Lee_4411_assignsubmission_file", subs), _row("Cy Dee_4414_assignsubmission_file", subs)]
    rows[1].update(key="<b>Cy<i>_4414_assignsubmission_file")
    out = _grade(tmp_path, subs, taught, rows)
    table = list(csv.reader((out / "moodle_worksheet_masked_softmax.csv").open(newline="", encoding="utf-8")))
    assert table[1] == hostile[:4] + ["7.5"] + hostile[5:], "the instructor's comment is kept, as it came"
    assert table[2][4] == "7.5" and table[2][9] == lms_export.worksheet_comment(7.5, 10.0)
    assert all(cell[:1] not in "=+-@" for cell in (table[2][4], table[2][9])) and "<" not in table[2][9]


def test_a_bom_and_crlf_worksheet_is_written_back_the_same_way(tmp_path):
    given = _csv([HEADER, *LINES], newline="\r\n", bom=True)
    subs, taught = _class(tmp_path, given)
    out = _grade(tmp_path, subs, taught, [_row("Ann Lee_4411_assignsubmission_file", subs)])
    written = (out / "moodle_worksheet_masked_softmax.csv").read_bytes()
    assert written.startswith(b"\xef\xbb\xbfIdentifier,") and written.count(b"\r\n") == len(LINES) + 1
    assert b"\n" not in written.replace(b"\r\n", b"")
    comment = b'"' + lms_export.worksheet_comment(7.5, 10).encode() + b'"'  # it holds a comma: quoted
    assert written.replace(b"7.5", b"", 1).replace(comment, b"", 1) == given, "every other byte as it came"
    assert moodle_reads(written)["4411"][0] == 7.5


@pytest.mark.parametrize("lines, line, words", [
    ([HEADER, LINES[0], LINES[1], LINES[0]], 4, "'Participant 4411' again (first on line 2)"),
    ([HEADER, LINES[0], ["Ann Lee"] + LINES[1][1:]], 3, "the Identifier 'Ann Lee' is not 'Participant <number>'"),
    ([HEADER, ["Participant 4411 "] + LINES[0][1:]], 2, "is not 'Participant <number>'"),
    ([HEADER[1:], LINES[0][1:]], 1, "no 'Identifier' column"),
    ([HEADER[:4] + HEADER[5:], LINES[0][:4] + LINES[0][5:]], 1, "no 'Grade' column"),
    ([[h.lower() for h in HEADER], LINES[0]], 1, "no 'Identifier' column"),
    ([HEADER[:8] + HEADER[9:], LINES[0][:8] + LINES[0][9:]], 1, "no 'Last modified (grade)' column"),
    ([HEADER, LINES[0][:5]], 2, "5 cells, where the header has 10"),
])
def test_a_worksheet_moodle_would_not_take_stops_the_run_naming_file_and_line(tmp_path, lines, line, words):
    (tmp_path / "worksheet.csv").write_bytes(_csv(lines))
    (tmp_path / "course.toml").write_text('[assignments.masked_softmax]\nmoodle_worksheet = "worksheet.csv"\n')
    with pytest.raises(course.CourseError) as err:
        course.load_course(tmp_path / "course.toml")
    assert f"worksheet.csv, line {line}: " in str(err.value) and words in str(err.value), str(err.value)


def test_the_course_file_keys(tmp_path):
    (tmp_path / "w.csv").write_bytes(_csv([HEADER, LINES[0]]))
    (tmp_path / "course.toml").write_text('[assignments.masked_cross_entropy]\nmoodle_worksheet = "w.csv"\n'
                                          '[assignments.bleu]\nmoodle_worksheet = "./w.csv"\n')
    with pytest.raises(course.CourseError, match="have the same moodle_worksheet"):
        course.load_course(tmp_path / "course.toml")
    (tmp_path / "course.toml").write_text('[assignments.bleu]\nmoodle_worksheet = "nowhere.csv"\n')
    with pytest.raises(course.CourseError, match="moodle_worksheet nowhere.csv does not exist"):
        course.load_course(tmp_path / "course.toml")
    (tmp_path / "w.csv").write_bytes(b"Identifier,Grade,Last modified (grade)\nParticipant 1,\xff,-\n")
    (tmp_path / "course.toml").write_text('[assignments.bleu]\nmoodle_worksheet = "w.csv"\n')
    with pytest.raises(course.CourseError, match="is not UTF-8"):
        course.load_course(tmp_path / "course.toml")


def test_a_partial_run_or_a_course_without_worksheets_leaves_none(tmp_path):
    subs, taught = _class(tmp_path, _csv([HEADER, *LINES]))
    rows = [_row("Ann Lee_4411_assignsubmission_file", subs)]
    out = _grade(tmp_path, subs, taught, rows)
    assert (out / "moodle_worksheet_masked_softmax.csv").exists()
    _grade(tmp_path, subs, taught, rows, partial=True)
    assert not (out / "moodle_worksheet_masked_softmax.csv").exists()
    _grade(tmp_path, subs, taught, rows)
    _grade(tmp_path, subs, course.Course(), rows)
    assert not list(out.glob("moodle_worksheet_*")), "an earlier run's worksheet no longer matches"


def test_grades_moodle_would_skip_are_said(tmp_path, capsys):
    """Moodle's upload skips a grade over the assignment's maximum or a locked one: said, not silent (a maximum
    other than the course file's points is refused: tests/test_grade_moodle_i10.py)."""
    lines = [LINES[0][:5] + ["10.00", "No"] + LINES[0][7:], LINES[3]]
    subs, taught = _class(tmp_path, _csv([HEADER, *lines]))
    rows = [_row("Ann Lee_4411_assignsubmission_file", subs), _row("Cy Dee_4414_assignsubmission_file", subs)]
    rows[1]["max_points"] = 20.0
    rows[1]["points"] = 15.0
    _grade(tmp_path, subs, taught, rows)
    said = capsys.readouterr().out
    assert "Grade can be changed is No" in said and "15 points is over the worksheet's Maximum grade 10.00" in said


@pytest.mark.slow
def test_a_moodle_class_graded_end_to_end_fills_its_worksheet(tmp_path):
    """The real run: Moodle's folders graded in the sandbox, the worksheet from the course file, no roster."""
    from test_grade import GOOD, SCAFFOLD, notebook
    if grade.Sandbox.detect().kind == "none":
        pytest.skip("the grader's sandbox (bubblewrap) is not available here")
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    folders = {"Ann Lee_4411_assignsubmission_file": GOOD, "Bo Chen_4412_assignsubmission_file": SCAFFOLD}
    for folder, source in folders.items():
        (tmp_path / "subs" / folder).mkdir(parents=True)
        (tmp_path / "subs" / folder / "ch03_exercises.ipynb").write_text(json.dumps(notebook(source)))
    (tmp_path / "worksheet.csv").write_bytes(_csv([HEADER, *LINES[:3]]))
    (tmp_path / "course.toml").write_text('[assignments.masked_softmax]\nmoodle_worksheet = "worksheet.csv"\n')
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), str(tmp_path / "subs"), "--out",
                           str(tmp_path / "out" / "grades.csv"), "--reference", str(tmp_path / "ref"),
                           "--timeout", "120", "--memory-gb", "3", "--course", str(tmp_path / "course.toml"),
                           "--secret", "a course secret for the tests, 32+ characters long"],
                          check=False, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    read = moodle_reads((tmp_path / "out" / "moodle_worksheet_masked_softmax.csv").read_bytes())
    assert read["4411"][0] == 10.0 and read["4412"][0] == 0.0 and read["4413"] == (None, ""), read
    assert "Wrote moodle_worksheet_masked_softmax.csv: 2 grades filled" in done.stdout
