"""--resume and --regrade keep a row only if its cases are the ones the class would meet now (issue 37,
a fresh instructor: with ``extra_cases`` added, ``--resume`` printed "no grade changed since the last run
into this folder" and grades.csv mixed 11-case totals with a newly graded 12-case one). The output
folder records each assignment's extra cases (cases.json); a change is refused, naming the assignment.
A course file that gives two assignments one canvas_id (canvas.csv had two "(4720)" columns) is refused.
No sandbox: the grading is faked."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
import grade
from test_grade import SCAFFOLD, notebook
from test_grade_engine import FakeGrader, fake_grading

CH03 = "ch03_exercises.ipynb"
EXTRA = "def cases(name, seed):\n    return []  # {}\n"
COURSE = '[assignments.masked_softmax]\npoints = 10\nextra_cases = "extra.py"\n'


class Counted(FakeGrader):  # every case passed, as many as the class meets now
    def grade_notebook(self, who, path, reference, seeds):
        rows = super().grade_notebook(who, path, reference, seeds)
        extra = str(Path(path).parents[2] / "extra.py")
        return [dict(r, total=grade.case_count(r["assignment"], extra)) for r in rows]


def _class(tmp_path, monkeypatch, students=("ann", "bob")):
    fake_grading(monkeypatch)
    monkeypatch.setattr(grade, "Grader", Counted)
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / CH03).write_text(json.dumps(notebook(SCAFFOLD)))
    for who in students:
        (tmp_path / "subs" / who).mkdir(parents=True)
        (tmp_path / "subs" / who / CH03).write_text("{}")
    (tmp_path / "extra.py").write_text(EXTRA.format("first"))
    (tmp_path / "c.toml").write_text(COURSE)
    return ((tmp_path / "subs", tmp_path / "out" / "grades.csv", 10, tmp_path / "ref"),
            dict(secret="s" * 40, course_file=tmp_path / "c.toml"))


@pytest.mark.parametrize("again", [dict(resume=True), dict(regrade="ann")])
def test_changed_extra_cases_are_refused_on_resume_and_regrade(tmp_path, monkeypatch, again):
    args, kw = _class(tmp_path, monkeypatch)
    grade.grade(*args, **kw)
    assert json.loads((tmp_path / "out" / "cases.json").read_text()).keys() == {"masked_softmax"}
    grade.grade(*args, **kw, **again)  # the same cases: kept, no refusal
    (tmp_path / "extra.py").write_text(EXTRA.format("second"))
    with pytest.raises(grade.GradeError, match="the cases of masked_softmax changed since .* was graded .*"
                                               "run without --resume or --regrade"):
        grade.grade(*args, **kw, **again)
    grade.grade(*args, **kw)  # without --resume: everyone graded again, and recorded
    grade.grade(*args, **kw, **again)


def test_a_folder_graded_before_the_record_is_checked_by_its_case_counts(tmp_path, monkeypatch):
    args, kw = _class(tmp_path, monkeypatch)
    grade.grade(*args, **kw)
    (tmp_path / "out" / "cases.json").unlink()
    journal = tmp_path / "out" / "grades.jsonl"
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    journal.write_text("".join(json.dumps(dict(r, total=r["total"] - 1)) + "\n" for r in rows))
    with pytest.raises(grade.GradeError, match="the cases of masked_softmax changed"):
        grade.grade(*args, **kw, resume=True)
