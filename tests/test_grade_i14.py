"""A fresh instructor's findings (issue 37, i14, 8/10): a folder graded twice kept stale feedback pages and
mixed two downloads silently; a Canvas ``_LATE_`` file with a times file lacking its line said only "no
submission time"; the in-place reason said itself twice; chapter 4's columns and feedback came in
alphabetical order, with no total for the one Canvas column they share; the review flag was buried in
Gradescope's log; a misnamed Gradescope file was said to be "in a folder"."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import grade  # noqa: E402
from test_grade import SCAFFOLD, notebook  # noqa: E402


def _run(tmp_path, out: Path, *rels: str) -> list[dict]:
    subs, reference = tmp_path / f"subs{len(list(tmp_path.glob('subs*')))}", tmp_path / "ref"
    reference.mkdir(exist_ok=True)
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    for rel in rels:
        (subs / rel).parent.mkdir(parents=True, exist_ok=True)
        (subs / rel).write_text("{}")
    return grade.grade(subs, out / "grades.csv", 10, reference, secret="s" * 40)


def test_a_second_run_into_a_folder_leaves_no_stale_feedback(tmp_path):
    out = tmp_path / "out"
    _run(tmp_path, out, "ann/ch03_exercises.ipynb", "bob/ch03_exercises.ipynb")
    assert len(list((out / "feedback").glob("*.md"))) == 2 and len(list((out / "gradescope").iterdir())) == 2
    _run(tmp_path, out, "ann/ch03_exercises.ipynb")
    pages = [p.name for p in (out / "feedback").glob("*.md")]
    assert len(pages) == 1 and pages[0].startswith("ann-"), pages
    assert [p.name for p in (out / "gradescope").iterdir()] == [pages[0][:-3]]


def test_a_folder_that_held_another_downloads_grades_is_a_warning():
    before = {("ada", "masked_softmax"): ("20", "graded"), ("ada", "bleu"): ("", "not submitted")}
    rows = [dict(student="ada", assignment="masked_softmax", points=None, status="not submitted"),
            dict(student="ada", assignment="bleu", points=9.0, status="graded")]
    lines = grade.grade_changes(before, rows)
    assert lines[-1].startswith("WARNING: this folder held grades of masked_softmax, and this run found no "
                                "submission of it: grade each download into a folder of its own"), lines
    rows[0].update(points=20.0, status="graded")
    assert not any(line.startswith("WARNING") for line in grade.grade_changes(before, rows))


def test_the_in_place_reason_says_it_once():
    import torch

    from attention_book.assignments import Case, grading
    from attention_book.assignments.ch03 import IN_PLACE

    case = Case("a case", (torch.zeros(2),), lambda got: None, unchanged=IN_PLACE)
    verdict = grading._verdict(case, {"status": "ok", "got": torch.zeros(2), "args": (torch.ones(2),),
                                      "kwargs": {}}, visible=False)
    why = verdict["why"]
    assert why.count("changed its input") == 1 and why.startswith(grading.IN_PLACE + " (scores[~keep]"), why
    assert verdict["result_right"] is True and verdict["cause"] == IN_PLACE, verdict


def test_shared_canvas_assignments_get_their_total_in_the_feedback(tmp_path):
    (tmp_path / "c.toml").write_text('[assignments.masked_cross_entropy]\ncanvas_id = "4713"\n'
                                     'title = "Masked cross-entropy"\n[assignments.bleu]\ncanvas_id = "4713"\n'
                                     'title = "BLEU"\n')
    course = grade.course_mod.load_course(tmp_path / "c.toml")
    rows = [dict(assignment="masked_cross_entropy", points=3.27, max_points=10.0),
            dict(assignment="bleu", points=9.0, max_points=10.0)]
    assert grade.canvas_totals(rows, course) == [
        "**In Canvas, Masked cross-entropy and BLEU are one assignment:** 12.27 of 20 points.", ""]
    assert grade.canvas_totals(rows[:1], course) == []


def test_chapter_4s_columns_come_in_the_notebooks_order(tmp_path):
    subs, reference = tmp_path / "subs", ROOT / "notebooks"
    (subs / "ann").mkdir(parents=True)
    (subs / "ann" / "ch04_exercises.ipynb").write_text("{}")
    grade.grade(subs, tmp_path / "out" / "grades.csv", 10, reference, secret="s" * 40)
    header = (tmp_path / "out" / "gradebook.csv").read_text().splitlines()[0]
    assert header.index("masked_cross_entropy") < header.index("bleu"), header


def test_the_review_flag_is_a_test_on_the_gradescope_page():
    row = dict(assignment="masked_softmax", review=["subprocess"])
    (test,) = grade.review_tests([row, dict(assignment="bleu")], "after_due_date")
    assert test["visibility"] == "after_due_date" and test["max_score"] == 0.0 and test["status"] == "failed"
    assert "REVIEW" in test["name"] and "subprocess" in test["output"], test


def test_a_canvas_late_file_without_its_times_line_says_canvas_marked_it(tmp_path, monkeypatch, capsys):
    """i14: ``_LATE_`` in the name, a times file without the file's line: only "no submission time" was said."""
    from test_grade_engine import FakeGrader
    from test_grade_i11 import _bea_with_times

    class Passing(FakeGrader):  # one passed case: points a late policy could take
        def grade_notebook(self, who, path, reference, seeds):
            rows = super().grade_notebook(who, path, reference, seeds)
            return [dict(r, cases=[dict(name="a", label="a", index=1, passed=True, why="")]) for r in rows]

    (row,) = _bea_with_times(tmp_path, "kochbea_LATE_102_502_ch03_exercises.ipynb", "somebody_else", monkeypatch)
    monkeypatch.setattr(grade, "Grader", Passing)
    (tmp_path / "again").mkdir()
    (row,) = _bea_with_times(tmp_path / "again", "kochbea_LATE_102_502_ch03_exercises.ipynb", "somebody_else")
    assert row.get("canvas_late") and row.get("no_time"), row
    book = (tmp_path / "again" / "out" / "gradebook.csv").read_text()
    assert "Canvas marked it late (_LATE_ in its name; no time in a times file)" in book, book
    said = capsys.readouterr()
    assert "1 graded notebook Canvas marked late" in said.out + said.err
    # i15: it went to canvas.csv at full credit; held out (blank) until a time gives the days, and said
    import csv as csv_mod

    (canvas,) = list(csv_mod.DictReader((tmp_path / "again" / "out" / "canvas.csv").open(encoding="utf-8")))
    assert [v for k, v in canvas.items() if "masked_softmax" in k.lower() or "Masked" in k] == [""], canvas
    assert "left blank until it does" in said.out + said.err
    (page,) = (tmp_path / "again" / "out" / "feedback").iterdir()
    assert "Canvas marked this file late" in page.read_text()


def test_a_lost_grade_is_reported_by_login_whatever_the_key():
    """i15: a Canvas student is kimtwo_105 in a week she handed in and the roster's kimtwo in a week she did
    not; the lost 2.22 read "no earlier grade"."""
    before = {("kim2", "masked_softmax"): ("2.22", "graded")}
    rows = [dict(student="kimtwo", login="kim2", assignment="masked_softmax", points=None, status="not submitted")]
    assert grade.grade_changes(before, rows)[0] == ("changed: kimtwo masked_softmax: was 2.22 (graded), now no "
                                                    "points (not submitted)")


def test_a_gradescope_file_at_the_top_under_another_name_is_not_said_to_be_in_a_folder(tmp_path, monkeypatch):
    from test_grade_gradescope import _run_fake

    ran, data = _run_fake(tmp_path, monkeypatch, ["hw3.ipynb"])
    assert ran == [] and data["score"] == 0, data
    assert "in a folder" not in data["output"] and "'hw3.ipynb' is not named as the assignment's" in data["output"]
    assert "Rename your file to ch03_exercises.ipynb and submit again." in data["output"], data["output"]


def test_one_mistake_on_every_hidden_case_lists_the_cases_on_one_line():
    """i14: a crash printed 9 sections of "your function raised RuntimeError (the cause named above)"."""
    cause = "two tensors whose shapes do not broadcast"
    cases = [{"index": i, "passed": False, "visible": False, "label": f"l{i}", "cause": cause, "status": "raised",
              "why": f"your function raised RuntimeError: {cause}"} for i in range(1, 10)]
    row = dict(student="eve", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=0.0,
               max_points=20.0, passed=0, total=9, cases=cases, status="graded", reason="")
    text = grade.feedback_markdown({"student": "eve"}, [row])
    assert text.count(cause) == 1 and "One mistake explains all 9 failed cases" in text, text
    assert "The cases: hidden cases 1, 2, 3, 4, 5, 6, 7, 8 and 9; in each, your function raised RuntimeError." \
        in text and "###" not in text, text


def test_the_routes_a_fresh_attacker_r5_hid_are_words_too(tmp_path):
    """Attacker r5 (c6954a6): ten 10/10 routes past the flag: another library's threads and processes,
    ``string.Formatter().get_field``, ``print.__self__`` (the builtins module), ``from torch import _C``,
    ``from sys import modules``, ``import json, pydoc``, ``os.posix_spawn``, code in a markdown cell run by
    reading the notebook's own file."""
    def review(code, assignment="patchify"):
        (tmp_path / "n.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": code}]}))
        return sorted(grade.review_counts(tmp_path / "n.ipynb", assignment))
    assert review("from tqdm.contrib.concurrent import thread_map\n") == ["thread_map"]
    assert review("from joblib import Parallel, delayed\n") == ["joblib"]
    assert review("f = string.Formatter().get_field('0.un' + 'fold', (F,), {})[0]\n") == ["get_field", "string.Formatter"]
    assert review("B = print.__self__\nB.getattr(ab, 'x')\n") == [".getattr", "__self__"]
    assert review("from torch import _C as c\n") == ["_C"]
    assert review("from sys import modules\n") == ["from sys import"]
    assert review("import json, pydoc\nimport os, gc\n") == ["gc", "pydoc"]
    assert review("os.posix_spawn(s.executable, [], {})\n") == ["executable", "posix_spawn"]
    assert review("p = os.path.join('/', 'in')\nnb = [f for f in os.listdir(p) if f.endswith('.ipynb')]\n") \
        == [".ipynb"]
    assert review("vocab = ['the', 'in', 'hat']\n") == []  # attacker r6's false positive: the word "in"


def test_only_the_cells_a_student_wrote_or_changed_count(tmp_path):
    """Attacker r5: the flag compared counts with the chapter's, so deleting the demo cell that uses
    ``ab.softmax_block`` let the graded cell spell it once (softmax_block is now removed from the sandbox). Now a cell counts unless it is the chapter's own,
    as the committed notebook or an edition gives it; the student edition itself has no word."""
    import editions

    ref = json.loads((ROOT / "notebooks" / "ch10_exercises.ipynb").read_text())
    chapter = grade.chapter_sources(ref)
    student = editions.make_edition(ref, "student")
    (tmp_path / "s.ipynb").write_text(json.dumps(student))
    assert grade.review_counts(tmp_path / "s.ipynb", "merge_softmax", chapter) == {}
    assert grade.review_counts(tmp_path / "s.ipynb", "merge_softmax")  # without the chapter: its own words
    student["cells"].append({"cell_type": "code", "source": "import threading", "metadata": {}})
    (tmp_path / "s.ipynb").write_text(json.dumps(student))
    assert grade.review_counts(tmp_path / "s.ipynb", "merge_softmax", chapter) == {"threading": 1}


def test_the_loosely_named_file_is_said_to_look_like_the_notebook():
    """i15: beside a stray hw3.ipynb, the grader knew 'ch03 Exercises.ipynb' looked like ch03 but did not say."""
    why, _ = grade.misnamed_reason(["lea/ch03 Exercises.ipynb", "lea/hw3.ipynb"], ["ch03_exercises.ipynb"],
                                   "ch03_exercises.ipynb")
    assert "rename the one that answers this assignment ('ch03 Exercises.ipynb' looks like it) to " \
           "ch03_exercises.ipynb" in why, why
    why, _ = grade.misnamed_reason(["lea/a.ipynb", "lea/hw3.ipynb"], ["ch03_exercises.ipynb"], "ch03_exercises.ipynb")
    assert "looks like" not in why


def test_an_in_place_writer_with_every_result_right_is_not_told_to_fix_failed_cases():
    """i15: 9 of 9 right apart from the write, and still "then fix the failed cases it shows"."""
    from attention_book.assignments import grading

    cases = [{"index": i, "passed": False, "visible": False, "label": f"l{i}", "cause": "", "result_right": True,
              "status": "ok", "why": grading.IN_PLACE + " (scores[~keep] = ...)"} for i in range(1, 10)]
    row = dict(student="ida", notebook="ch03_exercises.ipynb", assignment="masked_softmax", points=0.0,
               max_points=20.0, passed=0, total=9, cases=cases, status="graded", reason="")
    text = grade.feedback_markdown({"student": "ida"}, [row])
    assert "its results were right in 9 of 9 cases" in text and "fix the failed cases it shows" not in text, text
    assert "stop your function writing into its input (above): its results were right" in text, text


def test_the_routes_a_fresh_attacker_r6_hid_are_words_too(tmp_path):
    """Attacker r6 (80d92c1): eight 10/10 routes past the flag: the dispatcher switched off (no_dispatch),
    TorchScript, a module printed to a file and put on the path, a pickle run by torch.load, a string
    annotation evaluated, a DataLoader's forkserver worker, a logging QueueListener's thread."""
    def review(code):
        (tmp_path / "n.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": code}]}))
        return sorted(grade.review_counts(tmp_path / "n.ipynb", "patchify"))
    assert review("from torch.utils._mode_utils import no_dispatch\n") == ["_mode_utils", "no_dispatch"]
    assert review("cu = torch.jit.CompilationUnit(src)\n") == ["CompilationUnit", "torch.jit"]
    assert review("print(MOD, file=f)\nsite.addsitedir(d)\n") == ["addsitedir", "file="]
    assert review("torch.load(b, weights_only=False)\n") == ["weights_only="]
    assert review("typing.get_type_hints(h)\n") == ["get_type_hints"]
    assert review("DataLoader(d, num_workers=1, multiprocessing_context='forkserver')\n") == [
        "forkserver", "multiprocessing_context"]
    assert review("q = logging.handlers.QueueListener(queue, h)\n") == ["QueueListener"]
