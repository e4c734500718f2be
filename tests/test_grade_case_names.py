"""A hidden case in the feedback carries the name the student's checker prints for the same case."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from test_grade_engine import SEED, function, results
from test_grade_in_place import EXTRA, WRITES_ALWAYS

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
grade = importlib.import_module("grade")
course = importlib.import_module("course")


def test_the_feedback_names_a_hidden_case_as_the_checker_does(tmp_path):
    """A fresh instructor (8/10): the feedback's 'Hidden case 5: rows with no allowed key' is the case the
    student's checker prints as 'padding queries far past the end see no key': the student could not tell
    which of their own cases it was. The feedback, Gradescope's tests and the grades' summary now use the
    checker's name (the same at every seed: it holds no input); an extra case keeps its label, and weights
    keyed by either still weigh the case."""
    from attention_book.assignments import collect_cases

    extra = tmp_path / "extra.py"
    extra.write_text(EXTRA)
    got = results(tmp_path, function(WRITES_ALWAYS), extra=str(extra))
    _, shown = collect_cases("masked_softmax", None)
    assert [c["title"] for c in got[:len(shown)]] == [c.name for c in shown]
    assert [c["title"] for c in got[len(shown):]] == ["causal, no padding", "its own rule"]
    assert got[4]["label"] == "rows with no allowed key" and not got[4]["visible"]
    row = dict(student="gus", notebook="ch03_exercises.ipynb", assignment="masked_softmax", status="graded",
               points=0.0, max_points=20.0, passed=0, total=len(got), cases=got, reason="", seed=SEED)
    # each case under its own heading (a write on every case is said once, the cases on one line)
    listed = dict(row, cases=[dict(c, why="the result is wrong", cause="") for c in got])
    text = grade.feedback_markdown({"student": "gus"}, [listed])
    assert "### Hidden case 5: padding queries far past the end see no key\n" in text
    assert "rows with no allowed key" not in text and "### Hidden case 10: causal, no padding\n" in text
    assert "hidden case 5: padding queries far past the end see no key:" in grade.case_summary(got)
    tests = grade.lms_export.gradescope_results([row], "")["tests"]
    assert "masked_softmax: hidden case 5: padding queries far past the end see no key" in [t["name"] for t in tests]
    for key in ("rows with no allowed key", "padding queries far past the end see no key"):
        spec = course.Assignment("masked_softmax", weights={key: 3})
        assert [spec.weight(c) for c in got].count(3.0) == 1, key
