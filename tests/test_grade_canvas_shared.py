"""Chapter 4's notebook holds two graded assignments, handed in once: in Canvas, one assignment (issue 37).

Before, a course file that gave masked_cross_entropy and bleu the same canvas_id was refused, so an instructor
made two Canvas assignments for one notebook (or summed two imported columns by hand). Now assignments that
share a canvas_id share its canvas.csv column: the sum of their points, blank only where none was scored.
"""
from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import course  # noqa: E402
import lms_export  # noqa: E402


def _row(student, assignment, status, points):
    return dict(student=student, key=student, notebook="ch04_exercises.ipynb", assignment=assignment,
                status=status, points=points, max_points=10.0, cases=[])


def test_two_assignments_with_one_canvas_id_share_a_summed_column(tmp_path):
    (tmp_path / "c.toml").write_text('[assignments.masked_cross_entropy]\ntitle = "Masked cross-entropy"\n'
                                     'canvas_id = "4713"\n[assignments.bleu]\ntitle = "BLEU"\ncanvas_id = "4713"\n'
                                     '[assignments.masked_softmax]\ncanvas_id = "4711"\n')
    c = course.load_course(tmp_path / "c.toml")  # was refused: "have the same canvas_id"
    rows = [_row("ada", "masked_cross_entropy", "graded", 7.5), _row("ada", "bleu", "graded", 10.0),
            _row("bo", "masked_cross_entropy", "not submitted", None), _row("bo", "bleu", "not submitted", None),
            _row("cy", "masked_cross_entropy", "timeout", 0.0), _row("cy", "bleu", "grader error", None),
            _row("ada", "masked_softmax", "graded", 3.0)]
    students = [{"student": k, "name": k.title(), "id": i, "sis_user_id": "", "login": k, "section": "", "email": ""}
                for k, i in (("ada", "1"), ("bo", "2"), ("cy", "3"))]
    columns = [("ch03", "masked_softmax"), ("ch04", "masked_cross_entropy"), ("ch04", "bleu")]
    table = list(csv.reader(io.StringIO(lms_export.canvas_csv(rows, students, c, columns))))
    assert table[0][5:] == ["ch03 masked_softmax (4711)", "Masked cross-entropy + BLEU (4713)"], table[0]
    assert [r[5:] for r in table[1:]] == [["3.0", "17.5"], ["", ""], ["", "0.0"]], table
    # Moodle's CSV keeps a column per assignment (a Moodle assignment takes one grade: the guide's route)
    moodle = list(csv.reader(io.StringIO(lms_export.moodle_csv(rows, students, c, columns))))
    assert len(moodle[0]) == 4 + 3 and moodle[1][-2:] == ["7.5", "10.0"], moodle
