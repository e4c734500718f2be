"""Feedback back into Canvas and Moodle without hand work (issue 37; three fresh instructors, 8/10: "feedback
return to Canvas/Moodle is by hand"), and every text the grader writes safe for a lone surrogate.

The submissions are in the LMSs' real download layouts; each zip's names are read back the way the LMS
reads them on upload:
- Canvas (app/models/assignment.rb, ``infer_comment_context_from_filename``): the file's base name split
  at "_", the first two parts that are all digits the user id and the attachment id of the download;
- Moodle (mod/assign/feedback/file/importziplib.php, ``is_valid_filename_for_import``): each path part
  split at "_" into at most five, the first with four or more whose second is a participant id names the
  student and the plugin (``assignsubmission_file``); a file name the submission does not hold is added
  as a new feedback file; names starting with "." or "~" are skipped.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import sys
import zipfile
from pathlib import Path

import pytest

from attention_book.assignments import collect_cases
from attention_book.assignments.grading import case_results, dump_data, hidden_arguments, load_results, run_hidden

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
grade = importlib.import_module("grade")
course = importlib.import_module("course")
lms_export = importlib.import_module("lms_export")

REFS = {"ch03_exercises.ipynb": ["masked_softmax"]}
# Canvas's bulk download: <namekey>_<user id>_<attachment id>_<file>, _LATE_ after the name key when late
CANVAS = {"wumei_107_9007_ch03_exercises.ipynb": ("107", "9007"),
          "smithjohn_LATE_208_9108_ch03_exercises-1.ipynb": ("208", "9108")}
# Moodle's download in folders: <Full name>_<participant id>_assignsubmission_file (4.1 on), with a
# trailing "_" before 4.1; the files inside keep the names the students gave them
MOODLE = {"Ann Lee_4411_assignsubmission_file": "4411", "Bo Chen_4412_assignsubmission_file_": "4412"}


def _canvas_match(name: str) -> tuple[str, str] | None:
    """What Canvas's re-upload reads from a file's name: (user id, attachment id), or None (ignored)."""
    base = name.rsplit("/", 1)[-1]
    if base.startswith("._"):
        return None
    digits = [p for p in base.split("_") if p.isdigit()][:2]
    return (digits[0], digits[1]) if len(digits) == 2 and not base.split("_")[-1].startswith("link") else None


def _moodle_match(name: str, submitted: set[str]) -> tuple[str, str] | None:
    """What Moodle's feedback-zip import reads from a path: (participant id, file name), or None."""
    parts = name.split("/")
    if parts[-1][:1] in (".", "~"):
        return None
    while parts:
        info = parts.pop(0).split("_", 4)
        if len(info) < 4 or not info[1].isdigit() or (info[2], info[3]) != ("assignsubmission", "file"):
            continue
        filename = "/".join([info[4] if len(info) == 5 else "", *parts])
        return (info[1], filename) if filename.strip("/") not in submitted else None
    return None


def _row(key: str, rel: str, subs: Path, **extra) -> dict:
    return dict(student=grade.display_name(key), key=key, notebook="ch03_exercises.ipynb",
                assignment="masked_softmax", status="graded", passed=1, total=2, seed=1, sha256="x",
                path=str(subs / rel), reason="", late_days=0, penalty=0.0, points=5.0, max_points=10.0,
                score=0.5, cases=[{"index": 1, "visible": False, "label": "rows", "title": "rows", "passed": False,
                                   "why": "the result is wrong", "weight": 1.0}], **extra)


def _student(key: str) -> dict:
    return {"key": key, "student": grade.display_name(key), "name": grade.display_name(key), "id": "",
            "sis_user_id": "", "login": key, "section": "", "email": ""}


def _write(tmp_path: Path, subs: Path, rows: list[dict], partial: bool = False, name: str = "") -> Path:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    keys = sorted({r["key"] for r in rows})
    grade.write_outputs(rows, out / "grades.csv", [_student(k) for k in keys], course.Course(name=name),
                        [("ch03", "masked_softmax")], [], [], partial, subs)
    return out


def _layout(tmp_path: Path) -> Path:
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in CANVAS:
        (subs / name).write_text("{}")
    for folder in MOODLE:
        (subs / folder).mkdir()
        (subs / folder / "ch03_exercises.ipynb").write_text("{}")
    return subs


def test_the_grader_reads_both_download_layouts(tmp_path):
    subs = _layout(tmp_path)
    found, _ = grade.find_submissions(subs, REFS)
    assert sorted(s.key for s in found) == sorted(["wumei_107", "smithjohn_208", *MOODLE])


def test_canvas_feedback_zip_names_match_what_canvas_reads_back(tmp_path):
    """Today's code wrote no zip: each student's feedback went back by hand in SpeedGrader."""
    subs = _layout(tmp_path)
    found, _ = grade.find_submissions(subs, REFS)
    rows = [_row(s.key, s.rel, subs) for s in found]
    out = _write(tmp_path, subs, rows, name="Attention, spring")
    with zipfile.ZipFile(out / "canvas_feedback.zip") as z:
        names = z.namelist()
        assert sorted(names) == ["smithjohn_LATE_208_9108_feedback.html", "wumei_107_9007_feedback.html"]
        assert sorted(_canvas_match(n) for n in names) == sorted(CANVAS.values())
        page = z.read("wumei_107_9007_feedback.html").decode("utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<title>Feedback: Attention, spring</title>" in page
    assert "<strong>5 of 10 points</strong>" in page and "<h1>Feedback: Attention, spring</h1>" in page
    assert all(_canvas_match(n) is None for n in ["._wumei_107_9007_feedback.html"]), "the test's reader"


def test_moodle_feedback_zip_names_match_what_moodle_reads_back(tmp_path):
    subs = _layout(tmp_path)
    found, _ = grade.find_submissions(subs, REFS)
    rows = [_row(s.key, s.rel, subs) for s in found]
    out = _write(tmp_path, subs, rows)
    with zipfile.ZipFile(out / "moodle_feedback.zip") as z:
        names = z.namelist()
    assert sorted(names) == sorted(f"{folder}/feedback.html" for folder in MOODLE)
    read = sorted(_moodle_match(n, {"ch03_exercises.ipynb"}) for n in names)
    assert read == sorted((pid, "/feedback.html") for pid in MOODLE.values()), read
    # the Canvas students are not in Moodle's zip, nor Moodle's in Canvas's
    with zipfile.ZipFile(out / "canvas_feedback.zip") as z:
        assert not any("assignsubmission" in n for n in z.namelist())


def test_plain_folders_get_no_zip_and_a_stale_one_goes(tmp_path):
    subs = tmp_path / "subs"
    (subs / "ada").mkdir(parents=True)
    (subs / "ada" / "ch03_exercises.ipynb").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    (out / "canvas_feedback.zip").write_bytes(b"an earlier run's")
    _write(tmp_path, subs, [_row("ada", "ada/ch03_exercises.ipynb", subs)])
    assert not (out / "canvas_feedback.zip").exists() and not (out / "moodle_feedback.zip").exists()
    assert (out / "feedback").is_dir()


def test_a_partial_run_writes_no_feedback_zip(tmp_path):
    subs = _layout(tmp_path)
    found, _ = grade.find_submissions(subs, REFS)
    out = tmp_path / "out"
    out.mkdir()
    (out / "moodle_feedback.zip").write_bytes(b"an earlier run's")
    _write(tmp_path, subs, [_row(s.key, s.rel, subs) for s in found], partial=True)
    assert not (out / "canvas_feedback.zip").exists() and not (out / "moodle_feedback.zip").exists()


def test_a_misnamed_files_feedback_goes_back_too(tmp_path):
    """A misnamed file's row names no graded path; its student needs the feedback most."""
    subs = tmp_path / "subs"
    subs.mkdir()
    rel = "wumei_107_9007_ch03_exercises_final.ipynb"
    (subs / rel).write_text("{}")
    row = _row("wumei_107", rel, subs, handed_path=rel, handed_in="ch03_exercises_final.ipynb")
    row.update(status="misnamed file", path="", points=None, cases=[])
    out = _write(tmp_path, subs, [row])
    with zipfile.ZipFile(out / "canvas_feedback.zip") as z:
        assert z.namelist() == ["wumei_107_9007_feedback.html"]
        assert "misnamed" in z.read("wumei_107_9007_feedback.html").decode()


def test_hostile_names_are_refused_loudly_and_the_text_stays_text(tmp_path, capsys):
    subs = tmp_path / "subs"
    subs.mkdir()
    keys = {"x\\y_4413_assignsubmission_file": "a backslash",
            "Eve_4414_assignsubmission_file": "the same name, ignoring case",
            "EVE_4414_assignsubmission_file": "the same name, ignoring case",
            "<b>Mal<i>_4415_assignsubmission_file": ""}
    rows = []
    for key in keys:
        (subs / key).mkdir()
        (subs / key / "ch03_exercises.ipynb").write_text("{}")
        rows.append(_row(key, f"{key}/ch03_exercises.ipynb", subs))
    rows[-1]["cases"][0].update(visible=True, name="v", why="<script>alert(1)</script>")
    (subs / "12345_107_9007_ch03_exercises.ipynb").write_text("{}")  # Canvas would read 12345 as the user
    rows.append(_row("12345_107", "12345_107_9007_ch03_exercises.ipynb", subs))
    zips, refused = grade.lms_feedback(rows, [_student(r["key"]) for r in rows], course.Course(), subs)
    assert sorted(zips["moodle_feedback.zip"]) == ["<b>Mal<i>_4415_assignsubmission_file/feedback.html"]
    assert zips["canvas_feedback.zip"] == {}
    said = {name: why for _, name, why in refused}
    assert "backslash" in said["x\\y_4413_assignsubmission_file/feedback.html"]
    assert "same name" in said["EVE_4414_assignsubmission_file/feedback.html"] and len(said) == 4
    assert "Canvas would read" in said["12345_107_9007_feedback.html"]
    page = zips["moodle_feedback.zip"]["<b>Mal<i>_4415_assignsubmission_file/feedback.html"]
    assert "<script>" not in page and "&lt;script&gt;" in page and "<b>Mal" not in page
    _write(tmp_path, subs, rows)
    assert capsys.readouterr().out.count("REFUSED in ") == 4
    for bad in ("../x/feedback.html", "/abs/feedback.html", "a/./b", ".hidden/feedback.html", "~x/f", "a\x00b",
                "a\udcffb"):
        assert lms_export.entry_problem(bad), bad


def test_the_html_escapes_everything_and_keeps_the_fenced_text_whole():
    text = "# Feedback\n\nStudent:\n\n````text\n<img src=x onerror=alert(1)>\n```\n````\n\n**a** `b` <i>\n"
    page = lms_export.feedback_html(text, "T<")
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;\n```</code></pre>" in page
    assert "<title>T&lt;</title>" in page and "<strong>a</strong> <code>b</code> &lt;i&gt;" in page


def test_a_lone_surrogate_in_an_exception_reaches_every_file_escaped(tmp_path):
    """An attacker (issue 37): a function raising ValueError("\\ud800"), an instructor's extra case equal to
    a visible case (so the exception's text is shown whole): UTF-8 cannot write the lone surrogate, and
    grades.csv (then the feedback, results.json, the zips) stopped the run with UnicodeEncodeError."""
    extra = tmp_path / "extra.py"
    extra.write_text("from attention_book.assignments import collect_cases\n"
                     "def cases(name, seed):\n    return collect_cases(name, None)[1][:1]\n")
    namespace: dict = {}
    exec("def my_masked_softmax(*args, **kwargs):\n    raise ValueError('\\ud800')\n", namespace)
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments("masked_softmax", 3, "n", str(extra))))
    run_hidden("masked_softmax", namespace["my_masked_softmax"], str(tmp_path / "cases.bin"),
               str(tmp_path / "r.bin"))
    cases = case_results("masked_softmax", 3, "n", load_results((tmp_path / "r.bin").read_bytes()), str(extra))
    assert cases[-1]["visible"] and "\ud800" in cases[-1]["why"], cases[-1]
    assert collect_cases("masked_softmax", None)[1], "a visible case to copy"
    subs = tmp_path / "subs"
    (subs / "Ann Lee_4411_assignsubmission_file").mkdir(parents=True)
    rel = "Ann Lee_4411_assignsubmission_file/ch03_exercises.ipynb"
    (subs / rel).write_text("{}")
    row = _row("Ann Lee_4411_assignsubmission_file", rel, subs)
    row.update(cases=cases, reason=grade.case_summary(cases), passed=0, total=len(cases))
    out = _write(tmp_path, subs, [row])
    table = list(csv.DictReader(io.StringIO((out / "grades.csv").read_text(encoding="utf-8"))))
    assert "\\ud800" in table[0]["reason"]
    assert "\\ud800" in next((out / "feedback").glob("*.md")).read_text(encoding="utf-8")
    json.loads(next((out / "gradescope").glob("*/results.json")).read_text(encoding="utf-8"))  # written whole
    with zipfile.ZipFile(out / "moodle_feedback.zip") as z:
        assert "\\ud800" in z.read(z.namelist()[0]).decode("utf-8")
    assert grade.escape_undecodable("a\ud800\udcff\U0001F600") == "a\\ud800\\xff\U0001F600"


@pytest.mark.parametrize("rel", ["wumei_107_9007_ch03_exercises.ipynb"])
def test_the_same_feedback_gives_the_same_zip(tmp_path, rel):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / rel).write_text("{}")
    first = _write(tmp_path, subs, [_row("wumei_107", rel, subs)])
    before = (first / "canvas_feedback.zip").read_bytes()
    _write(tmp_path, subs, [_row("wumei_107", rel, subs)])
    assert (first / "canvas_feedback.zip").read_bytes() == before
