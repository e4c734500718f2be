"""A fresh instructor's findings (issue 37, i11: 1-6): renamed files, a times-file hint, raised errors, late
times, a weight of the example course file.

1, 2. Canvas's ``renamegus_107_507_my_homework.ipynb`` (the student's LMS prefix, any notebook name) was
ignored as "at the top level without an LMS name", and Moodle's ``Gus Rename_1000007_assignsubmission_file/my
homework (1).ipynb`` as "no reference notebook of this name": the student read 'not submitted', with no
feedback. Now, where one notebook of the run is missing for that student, the file stands for it: a 'misnamed
file' row, and feedback naming the notebook to hand in. Beside a file of the right name, a stray notebook
changes nothing.
3. A times-file key that is right, for a student the run found no notebook of, got "did you mean" a roster
folder. 4. A hidden case that raised said only the exception's type. 5. Late feedback did not say the times.
6. A weight naming an extra case's label, without the extra_cases file, is refused with the reason.
"""
from __future__ import annotations

import csv
import json
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import grade  # noqa: E402
from test_grade import SCAFFOLD, notebook  # noqa: E402
from test_grade_engine import _graded_with_roster  # noqa: E402
from test_grade_moodle_i10 import LATE, _download, _folder, _grade, _moodle_class  # noqa: E402

CH03 = {"ch03_exercises.ipynb": ["masked_softmax"]}


def _handed(where: Path, *rels: str) -> Path:
    for rel in rels:
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_text("{}")
    return where


def test_find_submissions_hands_strays_to_the_caller(tmp_path):
    subs = _handed(tmp_path, "gus_107_507_my_homework.ipynb", "ann/my homework (1).ipynb", "ann/notes.pdf",
                   "bob/ch03_exercises.ipynb", "bob/scratch.ipynb", "zed_9_1_report.pdf")
    misnamed, strays = {}, {}
    found, ignored = grade.find_submissions(subs, CH03, misnamed, strays)
    assert [s.key for s in found] == ["bob"] and not misnamed
    assert strays == {"gus_107": ["gus_107_507_my_homework.ipynb"], "ann": ["ann/my homework (1).ipynb"],
                      "bob": ["bob/scratch.ipynb"]}, strays
    why = {str(rel): w for rel, w in ignored}
    # a Canvas name that is no notebook is the student's file, not a file "without an LMS name"
    assert why["zed_9_1_report.pdf"] == "handed in by zed_9 (its LMS name), but not a notebook of any assignment"
    assert "no reference notebook" in why["ann/notes.pdf"]


def test_without_strays_the_old_listing_stays_and_the_message_is_right(tmp_path):
    subs = _handed(tmp_path, "gus_107_507_my_homework.ipynb")
    found, ignored = grade.find_submissions(subs, CH03, {})
    assert not found and ignored == [(Path("gus_107_507_my_homework.ipynb"), "handed in by gus_107 (its LMS "
                                      "name), but not a notebook of any assignment")], ignored


def test_place_strays_one_missing_notebook_several_or_none():
    found = [grade.Submission("bob", Path("b"), "ch03_exercises.ipynb", "bob/ch03_exercises.ipynb", "", 0)]
    refs = {"ch03_exercises.ipynb": ["masked_softmax"], "ch04_exercises.ipynb": ["masked_cross_entropy", "bleu"]}
    misnamed = {}
    strays = {"ann": ["ann/b.ipynb", "ann/a.ipynb"], "bob": ["bob/scratch.ipynb"]}
    ignored = dict(grade.place_strays(strays, found, misnamed, refs))
    # only ch03 was handed in this run (a download of one assignment): ann's files stand for it
    assert misnamed == {("ann", "ch03_exercises.ipynb"): "ann/a.ipynb"}, misnamed
    assert "ch03_exercises.ipynb (the name to hand it in under)" in ignored[Path("ann/b.ipynb")]
    assert ignored[Path("bob/scratch.ipynb")].startswith("not graded: no assignment has this name (the student's")
    # nobody handed in a right name and two notebooks are graded: no guess, both named, and each missing
    # notebook's row is 'misnamed file' (it used to be 'not submitted', with no feedback)
    misnamed = {}
    ignored = dict(grade.place_strays({"ann": ["ann/a.ipynb"]}, [], misnamed, refs))
    assert misnamed == {("ann", "ch03_exercises.ipynb"): "ann/a.ipynb", ("ann", "ch04_exercises.ipynb"): "ann/a.ipynb"}
    assert "any of ch03_exercises.ipynb, ch04_exercises.ipynb" in ignored[Path("ann/a.ipynb")]


def test_misnamed_reason_names_every_file_and_never_guesses():
    one, step = grade.misnamed_reason(["ann/hw.ipynb"], ["ch03_exercises.ipynb"], "ch03_exercises.ipynb")
    assert "'hw.ipynb', which is not named ch03_exercises.ipynb" in one and "{notebook}" in step, one
    two, step = grade.misnamed_reason(["ann/b.ipynb", "ann/a.ipynb"], ["ch03_exercises.ipynb"],
                                      "ch03_exercises.ipynb")
    assert "2 notebooks, none named ch03_exercises.ipynb" in two and two.index("'a.ipynb'") < two.index("'b.ipynb'")
    assert "the one that answers this assignment" in two and "the notebook that answers" in step, (two, step)
    many, step = grade.misnamed_reason(["ann/a.ipynb"], ["ch04_exercises.ipynb", "ch03_exercises.ipynb"],
                                       "ch04_exercises.ipynb")
    assert "ch03_exercises.ipynb and ch04_exercises.ipynb are both missing" in many and "cannot tell" in many, many


def test_a_stray_beside_a_loosely_named_file_joins_its_row(tmp_path):
    """i14: Moodle ``ch03 Exercises.ipynb`` + ``hw3.ipynb``: the feedback named one file, and ignored.csv said
    of hw3 "the student's notebooks of this run are graded" (none was)."""
    subs = _handed(tmp_path, "kim/ch03 Exercises.ipynb", "kim/hw3.ipynb", "bob/ch03_exercises.ipynb")
    misnamed, strays, files_of = {}, {}, {}
    found, ignored = grade.find_submissions(subs, CH03, misnamed, strays)
    ignored = dict(ignored + grade.place_strays(strays, found, misnamed, CH03, files_of))
    assert misnamed == {("kim", "ch03_exercises.ipynb"): "kim/ch03 Exercises.ipynb"}, misnamed
    assert files_of[("kim", "ch03_exercises.ipynb")] == ["kim/ch03 Exercises.ipynb", "kim/hw3.ipynb"], files_of
    assert "handed in ch03_exercises.ipynb only under another name" in ignored[Path("kim/hw3.ipynb")], ignored


def test_a_canvas_file_with_the_students_prefix_is_their_misnamed_row(tmp_path):
    rows, out = _graded_with_roster(tmp_path, ["renamegus_107_507_my_homework.ipynb"], "Gus Rename,107,S107,grename,A")
    (row,) = rows
    assert row["key"] == "renamegus_107" and row["status"] == "misnamed file", row
    assert "'my_homework.ipynb'" in row["reason"] and "ch03_exercises.ipynb" in row["reason"], row
    (feedback,) = (out.parent / "feedback").iterdir()
    text = feedback.read_text()
    assert "my_homework.ipynb" in text and "rename your file to ch03_exercises.ipynb" in text.lower(), text
    canvas = list(csv.DictReader((out.parent / "canvas.csv").open(encoding="utf-8")))
    assert [r["SIS Login ID"] for r in canvas if r.get("SIS Login ID")] == ["grename"], canvas
    entries = zipfile.ZipFile(out.parent / "canvas_feedback.zip").namelist()
    assert len(entries) == 1 and "107" in entries[0], entries
    ignored = (out.parent / "ignored.csv").read_text()
    assert "without an LMS name" not in ignored and "the name to hand it in under" in ignored, ignored


def test_a_moodle_folder_with_another_notebook_name_is_a_misnamed_row(tmp_path, monkeypatch):
    ref, course_file = _moodle_class(tmp_path, monkeypatch)
    subs = _download(tmp_path / "dl", "4411")
    (subs / _folder("4412")).mkdir()
    (subs / _folder("4412") / "my homework (1).ipynb").write_text("{}")
    (subs / _folder("4411") / "scratch.ipynb").write_text("{}")  # beside the right name: changes nothing
    out = _grade(tmp_path, subs, ref, course_file)
    book = {r["Student"]: r for r in csv.DictReader((out / "gradebook.csv").open(encoding="utf-8"))}
    assert book[_folder("4412")]["ch03 masked_softmax status"] == "misnamed file", book
    assert book[_folder("4411")]["ch03 masked_softmax status"] == "graded", book
    names = zipfile.ZipFile(out / "moodle_feedback.zip").namelist()
    assert f"{_folder('4412')}/feedback.html" in names, names
    page = zipfile.ZipFile(out / "moodle_feedback.zip").read(f"{_folder('4412')}/feedback.html").decode()
    assert "my homework (1).ipynb" in page and "ch03_exercises.ipynb" in page, page
    # not graded, as a loosely named file: the worksheet keeps the row as downloaded (the guide's "blank")
    sheet = {r["Identifier"]: r for r in csv.DictReader((out / "moodle_worksheet_masked_softmax.csv").open())}
    assert sheet["Participant 4412"]["Grade"] == "", sheet


def test_a_real_run_grades_nothing_for_a_stray_beside_the_right_name(tmp_path):
    subs, reference = tmp_path / "subs", tmp_path / "ref"
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    _handed(subs, "hal/homework.ipynb")
    rows = grade.grade(subs, tmp_path / "out" / "grades.csv", 10, reference, secret="s" * 40)
    (row,) = rows
    assert row["status"] == "misnamed file" and "'homework.ipynb'" in row["reason"], row


def test_a_real_run_names_both_stray_files_in_the_feedback(tmp_path):
    subs, reference = tmp_path / "subs", tmp_path / "ref"
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    _handed(subs, "hal/homework.ipynb", "hal/homework (1).ipynb")
    (row,) = grade.grade(subs, tmp_path / "out" / "grades.csv", 10, reference, secret="s" * 40)
    assert row["status"] == "misnamed file" and "'homework (1).ipynb', 'homework.ipynb'" in row["reason"], row
    (page,) = (tmp_path / "out" / "feedback").iterdir()
    text = page.read_text()
    assert "homework (1).ipynb" in text and "the notebook that answers this assignment to ch03_exercises.ipynb" \
        in text, text


def _bea_with_times(tmp_path, handed: str, key: str, monkeypatch=None) -> list[dict]:
    """Grade Canvas's file ``handed`` (an empty notebook, or any file) of Bea (roster folder kochbea, user id 102),
    with a times file keyed ``key``, 2 days after the due date, 10 % a day; with ``monkeypatch``, nothing runs."""
    subs, reference = tmp_path / "subs", tmp_path / "ref"
    subs.mkdir()
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    (subs / handed).write_text(json.dumps(notebook(SCAFFOLD)))
    (tmp_path / "roster.csv").write_text("folder,name,id,login\nkochbea,Bea Koch,102,bkoch\n")
    (tmp_path / "times.csv").write_text(f"student,notebook,submitted_at\n"
                                        f"{key},ch03_exercises.ipynb,2027-05-02T09:30:00+02:00\n")
    (tmp_path / "c.toml").write_text('[late]\nper_day = 0.1\nsource = "csv"\ntimes = "times.csv"\n'
                                     '[roster]\nfile = "roster.csv"\n[assignments.masked_softmax]\n'
                                     'due = 2027-04-30T23:59:00\n')
    if monkeypatch is not None:
        from test_grade_engine import fake_grading
        fake_grading(monkeypatch)
    return grade.grade(subs, tmp_path / "out" / "grades.csv", 10, reference, secret="s" * 40,
                       course_file=tmp_path / "c.toml")


def test_a_times_line_for_a_student_with_no_graded_file_names_the_roster_row(tmp_path, capsys):
    """i11: ``kochbea_102`` in the times file (the documented key) got "did you mean 'kochbea'?", the roster's
    folder, when the run ignored Bea's file; the key was right, so the warning says whose it is instead."""
    _bea_with_times(tmp_path, "kochbea_102_502_ch03.pdf", "kochbea_102")
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("WARNING: times file")]
    assert "user id 102 is the roster's 'kochbea', who has no graded notebook" in line, line
    assert "did you mean" not in line


def test_a_hidden_case_that_raised_a_shape_error_names_the_cause_without_sizes():
    """i11: "your function raised RuntimeError" and nothing more, for ``scores @ torch.ones(3, 7)``. Torch's
    shape and type errors get a cause in words; the sizes in torch's message never reach the feedback."""
    import torch

    from attention_book.assignments.grading import raised_cause
    tries = [lambda: torch.ones(2, 5) @ torch.ones(3, 7), lambda: torch.ones(2, 5) + torch.ones(3),
             lambda: torch.ones(6).view(4, 4), lambda: torch.ones(2, 3).t().view(6),
             lambda: torch.ones(2).sum(dim=3), lambda: torch.ones(2)[5],
             lambda: torch.ones(2, 2) @ torch.ones(2, 2, dtype=torch.float64),
             lambda: bool(torch.ones(2))]
    for make in tries:
        try:
            make()
        except Exception as err:  # noqa: BLE001 (torch raises several kinds)
            text = f"{type(err).__name__}: {err}"
            cause = raised_cause(text)
            assert cause, text
            assert not any(ch.isdigit() for ch in cause.replace("float16", "").replace("float64", "")), cause
        else:
            raise AssertionError("no error raised")


def test_late_feedback_shows_the_times_and_the_policy(tmp_path, monkeypatch):
    """i11: "Handed in 2 day(s) late: 20 % of the points taken" without the times it rests on. The feedback
    now says when it came, when it was due (in the course's timezone), the grace and the policy."""
    ref, course_file = _moodle_class(tmp_path, monkeypatch, course_extra=LATE, due="2027-04-30T23:59:00",
                                     when={"4412": "Monday, 3 May 2027, 2:00 AM"})
    out = _grade(tmp_path, _download(tmp_path / "dl", "4411", "4412"), ref, course_file)
    late = next(f for f in (out / "feedback").iterdir() if "4412" in f.name).read_text()
    assert "handed in 2027-05-03 02:00, due 2027-04-30 23:59 (Europe/Berlin)" in late, late
    assert "% per day or part of a day" in late, late
    on_time = next(f for f in (out / "feedback").iterdir() if "4411" in f.name).read_text()
    assert "handed in 20" not in on_time and "late" not in on_time.lower(), on_time


def test_a_weight_for_an_extra_case_without_its_file_is_refused_with_the_reason(tmp_path):
    (tmp_path / "c.toml").write_text('[assignments.masked_softmax]\n'
                                     'weights = { "large scores and a short window" = 2 }\n')
    course = grade.load_course(tmp_path / "c.toml")
    try:
        grade.check_weight_keys(course)
    except grade.CourseError as err:
        assert "only with the file that adds them: extra_cases" in str(err), err
    else:
        raise AssertionError("a weight matching no case was accepted")


def test_code_that_gets_past_the_in_call_blocks_is_flagged_for_review(tmp_path, monkeypatch, capsys):
    """Fresh attackers r2 and r3 (4/10, 5/10): a thread or subprocess doing the forbidden call, stepping out of
    the dispatcher's mode, one assignment to the grading module's state, PyTorch's own Python im2col or
    nll_loss_forward each scored full marks. Those blocks live in the student's process; the grader flags
    such a notebook for the instructor (gradebook status, console), score unchanged."""
    review = lambda path, a="": sorted(grade.review_counts(path, a))  # noqa: E731
    nb = lambda code: json.dumps({"cells": [{"cell_type": "code", "source": code}], "nbformat": 4})  # noqa: E731
    (tmp_path / "a.ipynb").write_text(nb(["import attention_book.assignments.grading as G\n",
                                         "G._CALLING.clear()\n"]))
    (tmp_path / "b.ipynb").write_text(nb("from torch._decomp.decompositions import im2col\nt = threading"))
    (tmp_path / "c.ipynb").write_text(nb("x = F.unfold(X, 2)"))
    assert review(tmp_path / "a.ipynb") == ["assignments.grading"]
    assert review(tmp_path / "b.ipynb") == ["_decomp", "threading"]
    assert review(tmp_path / "c.ipynb") == [] and review(tmp_path / "c.ipynb",
                                                                                "patchify") == ["unfold"]
    # the package's masks, which r3 built in an earlier cell, are not in the sandbox's copy at all now
    # (test_grade_blocked_routes): a student's variable of that name is no word either (r4's false positive)
    (tmp_path / "f.ipynb").write_text(nb("causal_mask = j <= i\nkey_mask = j < lens\nconverted = x.float()"))
    assert review(tmp_path / "f.ipynb", "masked_softmax") == [] and review(tmp_path / "f.ipynb", "patchify") == []
    for name in ("ch03_exercises", "ch04_exercises", "ch08_exercises", "ch10_exercises"):  # the books' own cells:
        for a in ("", "patchify", "masked_cross_entropy"):  # only the Colab install cell, which a student keeps
            assert grade.review_counts(ROOT / "notebooks" / f"{name}.ipynb", a) == {"sys.modules": 1, "%pip": 1}, \
                (name, a)
    ref, course_file = _moodle_class(tmp_path, monkeypatch)
    subs = _download(tmp_path / "dl", "4411", "4412")
    (subs / _folder("4412") / "ch03_exercises.ipynb").write_text(nb("import subprocess"))
    # the flag is read where the student's process could get past a block: under bubblewrap, where the package
    # is sealed, only for the assignments whose text forbids a torch function (a fresh instructor, i16: a
    # correct masked_softmax that printed to stderr was flagged and held); chapter 3's is not one of them
    with monkeypatch.context() as patch:
        patch.setattr(grade, "TORCH_BLOCKED", {**grade.TORCH_BLOCKED, "masked_softmax": {}})
        out = _grade(tmp_path, subs, ref, course_file)
    book = {r["Student"]: r for r in csv.DictReader((out / "gradebook.csv").open(encoding="utf-8"))}
    assert book[_folder("4412")]["ch03 masked_softmax status"] == "graded; REVIEW: its code uses subprocess", book
    assert "REVIEW" not in book[_folder("4411")]["ch03 masked_softmax status"]
    assert book[_folder("4412")]["ch03 masked_softmax (10 pts)"] == "10.0"
    assert f"REVIEW: {_folder('4412')} masked_softmax: its code uses subprocess" in capsys.readouterr().out
    out = _grade(tmp_path, subs, ref, course_file)
    book = {r["Student"]: r for r in csv.DictReader((out / "gradebook.csv").open(encoding="utf-8"))}
    assert book[_folder("4412")]["ch03 masked_softmax status"] == "graded", book


def test_a_raw_cell_is_read_as_code(tmp_path):
    """Attacker r4: ``import threading`` and ``F.unfold`` in a raw cell that the graded function reads and runs."""
    (tmp_path / "n.ipynb").write_text(json.dumps({"cells": [
        {"cell_type": "raw", "source": "import threading\nF.unfold(X, 2)"},
        {"cell_type": "markdown", "source": "No convolution and no unfold: only reshape and permute."}]}))
    assert sorted(grade.review_counts(tmp_path / "n.ipynb", "patchify")) == ["threading", "unfold"]


def test_code_that_hides_its_words_is_flagged_too(tmp_path):
    """What a word match cannot see through is itself a word: names built from strings, source run from a
    string or a written file, torch's operator registry, IPython magics and shell lines, and identifiers in
    another Unicode form (Python reads them NFKC). A model's .eval() and torch.compile are not flagged."""
    def review(*lines):
        (tmp_path / "n.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": list(lines)}]}))
        return sorted(grade.review_counts(tmp_path / "n.ipynb", "patchify"))
    assert review('f = getattr(torch, "as_" + "strided")\n') == ["getattr"]
    assert review("exec(base64.b64decode(s))\n") == ["base64", "exec"]
    assert review("%%writefile helper.py\n") == ["%%writefile"] and review("  !python x.py\n") == ["!shell"]
    assert review("import \uff53\uff55\uff42\uff50\uff52\uff4f\uff43\uff45\uff53\uff53\n") == ["subprocess"]
    assert review("y = torch.ops.aten.im2col(x, (2, 2), (1, 1), (0, 0), (2, 2))\n") == ["im2col", "torch.ops"]
    assert review("f = vars(torch.Tensor)['as_' 'strided']\n") == ["vars"]
    assert review("model.eval()\n", "m = torch.compile(model)\n", "r = a % b\n", "open('a.py').read()\n") == []
    # attacker r4: the dispatcher's mode stack, code run from a string by another module, the notebook file
    assert review("torch._C._pop_torch_dispatch_stack(None)\n") == ["torch._C"]
    assert review("import timeit\n", "from pkgutil import resolve_name\n") == ["pkgutil", "resolve_name", "timeit"]
    assert review("nb = json.load(open('/in/ch08_exercises.ipynb'))\n") == [".ipynb"]
    # a comment never runs (i14: "# I first tried threading" was flagged); a string can (exec), so it counts
    assert review("x = 1  # I first tried threading and a subprocess\n", "# as_strided: no\n") == []
    assert review("s = 'import subprocess'  # no\n") == ["subprocess"]
    assert review("x = (\n") == [] and review("y = (  # threading\n") == ["threading"]  # untokenizable: as is


def test_a_times_file_keyed_by_the_rosters_folder_applies_to_canvas_files(tmp_path, capsys, monkeypatch):
    """i12: the guide's example times file keys ``ada``, the roster's folder; Canvas's download gives
    ``ada_101_501_...``, so no time matched, every late penalty was lost, with a WARNING per line."""
    (row,) = _bea_with_times(tmp_path, "kochbea_102_502_ch03_exercises.ipynb", "kochbea", monkeypatch)
    assert row["late_days"] == 2 and row["penalty"] == 0.2, row
    assert "matches no student" not in capsys.readouterr().out
