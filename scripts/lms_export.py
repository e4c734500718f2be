"""Exports of a graded class that an LMS takes unchanged: Canvas's and Moodle's gradebook CSV and
Gradescope's ``results.json`` (one per submission). Used by scripts/grade.py.

A missing submission is left blank (never 0: a blank does not overwrite a grade already in the
LMS). So is a row the grader could not score (grader error, flagged results); a refused name gets no
row at all (scripts/grade.py leaves it out). Both are listed on the console for the instructor to
settle by hand.
"""

from __future__ import annotations

import csv
import io
import json

# Statuses whose points are a grade the LMS should receive (0 included: the code ran and failed).
GRADED = ("graded", "not implemented", "not defined", "timeout", "no results", "unreadable", "memory",
          "kernel died")


def _safe(value):
    """A spreadsheet cell that is text, never a formula (=, +, -, @ first)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value


def column_title(course, chapter: str, assignment: str) -> str:
    spec = course.assignment(assignment)
    title = spec.title or f"{chapter} {assignment}"
    return f"{title} ({spec.canvas_id})" if spec.canvas_id else title


def _points_by_student(rows: list[dict]) -> dict[tuple[str, str], dict]:
    return {(r["student"], r["assignment"]): r for r in rows if r.get("assignment")}


def canvas_csv(rows: list[dict], students: list[dict], course, columns: list[tuple[str, str]]) -> str:
    """Canvas's gradebook import: ``Student, ID, SIS User ID, SIS Login ID, Section`` then one column
    per assignment, ``<title> (<Canvas assignment id>)``; no total column (Canvas would make it an
    assignment); a missing or unscored submission blank."""
    return _gradebook(rows, students, course, columns,
                      {"Student": "name", "ID": "id", "SIS User ID": "sis_user_id", "SIS Login ID": "login",
                       "Section": "section"})


def moodle_csv(rows: list[dict], students: list[dict], course, columns: list[tuple[str, str]]) -> str:
    """Moodle's grade import (Grades → Import → CSV file): map ``Username`` (or ``Email address`` or
    ``ID number``) to the user field of the same name; one column per assignment; blanks are skipped."""
    return _gradebook(rows, students, course, columns,
                      {"Full name": "name", "Username": "login", "Email address": "email",
                       "ID number": "sis_user_id"})


def _gradebook(rows: list[dict], students: list[dict], course, columns: list[tuple[str, str]],
               identity: dict[str, str]) -> str:
    """One row per student: the ``identity`` columns (header -> student field), then each
    assignment's points, blank where nothing was scored."""
    by = _points_by_student(rows)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(identity) + [column_title(course, ch, a) for ch, a in columns])
    for s in students:
        cells = []
        for _, a in columns:
            r = by.get((s["student"], a))
            cells.append(r["points"] if r is not None and r["status"] in GRADED else "")
        writer.writerow([_safe(s[field]) for field in identity.values()] + cells)
    return out.getvalue()


def gradescope_results(rows: list[dict], feedback_text: str) -> dict:
    """Gradescope's ``results.json`` for one submission: ``score`` (points after any late penalty),
    ``output`` (the feedback, Markdown), and one test per case, ``score``/``max_score`` from the
    case's weight, ``status`` passed or failed; visible cases ``visible``, hidden cases shown after
    the due date (and described without their inputs)."""
    tests = []
    for r in rows:
        cases = r.get("cases") or []
        weights = sum(c.get("weight", 1.0) for c in cases) or 1.0
        if not cases:
            tests.append({"name": f"{r['assignment']}: {r['status']}", "score": 0.0,
                          "max_score": float(r.get("max_points", 10.0)), "status": "failed",
                          "output": r.get("reason", ""), "visibility": "visible"})
        # each case's share unrounded: cases of equal weight are worth exactly the same (rounding each to 4
        # places and giving the last what was left showed 3.3333 beside 3.3331), and the tests' max_score add
        # up to the assignment's points to within 1e-12 (Gradescope shows the sum rounded: 20.0)
        worths = [float(r.get("max_points", 10.0)) * c.get("weight", 1.0) / weights for c in cases]
        for c, worth in zip(cases, worths):
            tests.append({
                "name": f"{r['assignment']}: " + (c["name"] if c.get("visible") else hidden_title(c)),
                "score": worth * (1 - float(r.get("penalty", 0.0))) if c["passed"] else 0.0,
                "max_score": worth,
                "status": "passed" if c["passed"] else "failed",
                "output": c.get("why", ""),
                "visibility": "visible" if c.get("visible") else "after_due_date",
            })
    score = round(sum(float(r["points"]) for r in rows), 2)
    return {"score": score, "output": feedback_text, "output_format": "md", "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests}


def hidden_title(case: dict) -> str:
    """``hidden case 5: padding queries far past the end see no key``: a hidden case's number and the name the
    student's checker prints for it (``title``; a row written before there was one: its label)."""
    title = case.get("title") or case.get("label") or ""
    return f"hidden case {case['index']}" + (f": {title}" if title else "")


def dump_json(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"
