"""Whose file is a Canvas download's (issue 37; a fresh attacker, 8/10). Canvas names a bulk-download file
``<sortable name>[_LATE]_<user id>_<attachment id>_<the file's own name>`` and reads a re-uploaded name back by
its first two all-digit "_" parts (app/models/assignment.rb, infer_comment_context_from_filename):

- one Canvas user id is one student: a student renamed between two downloads graded together
  (``jonesbob_102_…`` and ``smithbob_102_…``) got two rows, two canvas.csv lines for one user;
- a sortable name with "_" and digits (``A_102._999._B`` -> ``a_102_999_b_300_9007_ch03_exercises``) put a
  classmate's user id first: the file became Bob's (his name on Eve's feedback, a second blank Bob row);
- ``\\d`` took Arabic-Indic and fullwidth digits for ids;
- with a roster of ids, a name key alone took a classmate's row.
"""
from __future__ import annotations

import csv
import io
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import course
import grade

REFS = {"ch03_exercises.ipynb": ["masked_softmax"], "ch04_exercises.ipynb": ["bleu"]}


def _files(folder: Path, *names: str) -> Path:
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_text("{}")
    return folder


def _run(tmp_path: Path, monkeypatch, *names: str) -> Path:
    """Grade ``names`` (FakeGrader) with a roster of Bob (user id 102) and Eve (300); the output folder."""
    from test_grade_engine import fake_grading

    fake_grading(monkeypatch)
    reference = _files(tmp_path / "ref")
    for name in REFS:
        (reference / name).write_text((ROOT / "notebooks" / name).read_text())
    subs = _files(tmp_path / "subs", *names)
    (tmp_path / "roster.csv").write_text("folder,name,id,sis_user_id,login,section,email\n"
                                         "bob,Bob Jones,102,S102,bjones,1,bob@x\n"
                                         "eve,Eve Stone,300,S300,estone,1,eve@x\n")
    (tmp_path / "c.toml").write_text('[course]\nname = "T"\n[roster]\nfile = "roster.csv"\n'
                                     '[assignments.masked_softmax]\npoints = 10\ncanvas_id = "1"\n'
                                     '[assignments.bleu]\npoints = 10\ncanvas_id = "2"\n')
    out = tmp_path / "out" / "grades.csv"
    grade.grade(subs, out, 10, reference, secret="s" * 40, course_file=tmp_path / "c.toml")
    return out.parent


def _csv(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8-sig"))))


def test_one_canvas_user_id_is_one_student_whatever_name_key_each_file_has(tmp_path, monkeypatch):
    """The attacker's e1: Bob renamed himself between two downloads graded together. One student, named by
    the name key of his latest file (the highest attachment id), one row in every file, both grades in it."""
    out = _run(tmp_path, monkeypatch, "jonesbob_102_5000_ch03_exercises.ipynb",
               "smithbob_102_6000_ch04_exercises.ipynb")
    for name in ("canvas.csv", "moodle.csv", "gradebook.csv"):
        rows = [r for r in _csv(out / name) if "Bob" in str(r) or "bob" in str(r)]
        assert len(rows) == 1, (name, rows)
    assert {r["student"] for r in _csv(out / "grades.csv")} == {"smithbob_102", "eve"}
    bob = [r for r in _csv(out / "grades.csv") if r["student"] == "smithbob_102"]
    assert all(r["status"] != "not submitted" for r in bob), bob


def test_two_files_of_one_notebook_under_two_name_keys_are_one_students_versions(tmp_path):
    subs = _files(tmp_path / "subs", "jonesbob_102_5000_ch03_exercises.ipynb",
                  "smithbob_102_6000_ch03_exercises.ipynb")
    found, _ = grade.find_submissions(subs, REFS)
    assert [(s.key, s.rel) for s in found] == [("smithbob_102", "smithbob_102_6000_ch03_exercises.ipynb")]
    assert found[0].others == [("jonesbob_102_5000_ch03_exercises.ipynb",
                                "an earlier version (a lower LMS submission ID)")], found[0].others


def test_a_crafted_sortable_name_cannot_claim_another_user_id(tmp_path, monkeypatch):
    """Eve's sortable name ``A_102._999._B``: her file is refused (listed, not graded), never Bob's."""
    crafted = "a_102_999_b_300_9007_ch03_exercises.ipynb"
    out = _run(tmp_path, monkeypatch, crafted, "bob_102_5000_ch04_exercises.ipynb")
    assert [r["Student"] for r in _csv(out / "canvas.csv") if r["ID"] == "102"] == ["Bob Jones"]
    assert not [r for r in _csv(out / "grades.csv") if r["student"].startswith("a_")]
    why = {r["path"]: r["why"] for r in _csv(out / "ignored.csv")}
    assert why[crafted].startswith("REFUSED: its name holds the user IDs 102 and 300"), why
    assert not [f for f in (out / "feedback").rglob("*") if f.is_file() and "a_102" in f.name]
    with zipfile.ZipFile(out / "canvas_feedback.zip") as z:
        names = z.namelist()
    assert names == ["bob_102_5000_feedback.html"], names
    assert grade.canvas_ids(crafted) == ("102", "999") and grade.inner_ids(crafted[:-6]) == ("300", "9007")


def test_the_feedback_zip_never_holds_a_name_canvas_reads_otherwise(tmp_path):
    """Whatever row reaches lms_feedback, an entry Canvas would read as other ids is left out and listed."""
    subs = _files(tmp_path / "subs", "a_102_999_b_300_9007_ch03_exercises.ipynb")
    row = dict(student="a_102", key="a_102", notebook="ch03_exercises.ipynb", assignment="masked_softmax",
               status="graded", passed=1, total=2, seed=1, sha256="x", reason="", cases=[], late_days=0,
               penalty=0.0, points=5.0, max_points=10.0, score=0.5,
               path=str(subs / "a_102_999_b_300_9007_ch03_exercises.ipynb"))
    student = {"key": "a_102", "student": "a_102", "name": "a_102", "id": "", "sis_user_id": "", "login": "a",
               "section": "", "email": ""}
    zips, refused = grade.lms_feedback([row], [student], course.Course(), subs)
    assert zips["canvas_feedback.zip"] == {}
    assert [(z, n) for z, n, _ in refused] == [("canvas_feedback.zip", "a_102_999_feedback.html")], refused


def test_ids_are_ascii_digits():
    for name in ("bob_\u0661\u0660\u0662_5000_ch03_exercises", "bob_\uff11\uff10\uff12_5000_ch03_exercises"):
        assert grade.LMS_PREFIX.match(name) is None, name
    assert grade.MOODLE_FOLDER.match("Ann Lee_\u0664\u0664\u0661\u0661_assignsubmission_file") is None
    assert grade.MOODLE_FOLDER.match("Ann Lee_4411_assignsubmission_file")


def test_with_canvas_ids_in_the_roster_a_name_key_alone_takes_no_row():
    """A student renamed to a classmate's name key (``bob_555``) does not take Bob's row (id 102), nor a row
    without an id in a roster of ids; a roster without ids keeps the documented name-key fallback."""
    with_ids = {"bob": course.Student(key="bob", id="102"), "amy": course.Student(key="amy")}
    assert grade.roster_keys({"bob_555": "555", "amy_556": "556", "eve_300": "300"}, with_ids) == {}
    assert grade.roster_keys({"bob_102": "102", "bob_555_x": ""}, with_ids) == {"bob_102": "bob"}
    assert grade.roster_keys({"smithjohn_103": "103"}, {"smithjohn_103": course.Student(key="x", id="207"),
                                                        "y": course.Student(key="y", id="1")}) == {}
    without = {"bob": course.Student(key="bob"), "amy": course.Student(key="amy")}
    assert grade.roster_keys({"bob_555": "555"}, without) == {"bob_555": "bob"}
