"""Exports of a graded class that an LMS takes unchanged: Canvas's and Moodle's gradebook CSV, Moodle's
offline grading worksheet filled in, Gradescope's ``results.json`` (one per submission), and the students'
feedback as HTML pages in a zip (the names, chosen by scripts/grade.py, are those Canvas's and Moodle's
feedback uploads match). Used by scripts/grade.py.

A missing submission is left blank (never 0: a blank does not overwrite a grade already in the
LMS). So is a row the grader could not score (grader error, flagged results); a refused name gets no
row at all (scripts/grade.py leaves it out). Both are listed on the console for the instructor to
settle by hand.
"""

from __future__ import annotations

import contextlib
import csv
import html
import io
import json
import re
import unicodedata
import zipfile

from course import WORKSHEET_GRADE, Worksheet

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
    assignment); a missing or unscored submission blank. Assignments that share a ``canvas_id`` (chapter
    4's two, graded from one notebook, in one Canvas assignment) share one column: the sum of their
    points, blank only where none of them was scored."""
    return _gradebook(rows, students, course, columns,
                      {"Student": "name", "ID": "id", "SIS User ID": "sis_user_id", "SIS Login ID": "login",
                       "Section": "section"}, by_canvas_id=True)


def moodle_csv(rows: list[dict], students: list[dict], course, columns: list[tuple[str, str]]) -> str:
    """Moodle's grade import (Grades → Import → CSV file): map ``Username`` (or ``Email address`` or
    ``ID number``) to the user field of the same name; one column per assignment; blanks are skipped."""
    return _gradebook(rows, students, course, columns,
                      {"Full name": "name", "Username": "login", "Email address": "email",
                       "ID number": "sis_user_id"})


def canvas_groups(course, names: list[str]) -> dict[str, list[str]]:
    """``{Canvas assignment id: [assignment, ...]}``, in ``names``' order: the assignments of ``names`` that share
    one Canvas assignment (chapter 4's two, graded from one notebook); an assignment with no ``canvas_id`` is a
    group of its own, under a key that is no id."""
    groups: dict[str, list[str]] = {}
    for a in names:
        groups.setdefault(course.assignment(a).canvas_id or f"\0{a}", []).append(a)
    return groups


def _columns(course, columns: list[tuple[str, str]], by_canvas_id: bool) -> list[tuple[str, list[str]]]:
    """``[(header, [assignment, ...])]``: a column per assignment, or with ``by_canvas_id`` one per Canvas
    assignment id, shared by the assignments that name it (in ``columns``' order; titles joined by " + ")."""
    chapter = {a: ch for ch, a in columns}
    names = [a for _, a in columns]
    groups = canvas_groups(course, names) if by_canvas_id else {a: [a] for a in names}
    out = []
    for cid, names in groups.items():
        parts = [(chapter[a], a) for a in names]
        if len(parts) == 1:
            out.append((column_title(course, *parts[0]), [parts[0][1]]))
        else:
            titles = " + ".join(course.assignment(a).title or f"{ch} {a}" for ch, a in parts)
            out.append((f"{titles} ({cid})", [a for _, a in parts]))
    return out


def _gradebook(rows: list[dict], students: list[dict], course, columns: list[tuple[str, str]],
               identity: dict[str, str], by_canvas_id: bool = False) -> str:
    """One row per student: the ``identity`` columns (header -> student field), then each
    assignment's points (or, ``by_canvas_id``, each Canvas assignment's: :func:`_columns`), blank where
    nothing was scored."""
    by = _points_by_student(rows)
    groups = _columns(course, columns, by_canvas_id)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(identity) + [header for header, _ in groups])
    for s in students:
        cells = []
        for _, names in groups:
            scored = [r for a in names if (r := by.get((s["student"], a))) is not None and r["status"] in GRADED]
            held = any((r := by.get((s["student"], a))) is not None and r["status"] == "held" for a in names)
            # a held part (grade.py: late, no time yet) blanks a shared column: never a partial sum
            cells.append(round(sum(r["points"] for r in scored), 2) if scored and not held else "")
        writer.writerow([_safe(s[field]) for field in identity.values()] + cells)
    return out.getvalue()


# Moodle's offline grading worksheet, read back by its *Upload grading worksheet*
# (mod/assign/feedback/offline/locallib.php, process_import_grades, and the same tests in importgradesform.php):
#     $record->grade = unformat_float($record->grade);
#     if ($usergrade && $usergrade->grade == $record->grade) { $skip = true; }          // not modified
#     else if (!isset($record->grade) || $record->grade === '' || $record->grade < 0) { $skip = true; }  // blank
#     else if (!$ignoremodified && $stalemodificationdate) { $skip = true; }         // changed in Moodle since
#     else if ($this->assignment->grading_disabled($record->user->id)) { $skip = true; }  // locked
#     else if (... ($record->grade > $this->assignment->get_instance()->grade)) { $skip = true; }  // over the max
# with $stalemodificationdate = ($usergrade && $usergrade->timemodified > ($modified + 60)), $modified the row's
# "Last modified (grade)". A feedback column (its header the plugin's field description: "Feedback comments")
# is set wherever it differs from Moodle's text ($newvalue != $oldvalue), and is stored as the comment's text.
# So a cell left as downloaded changes nothing, and the Grade is written with "." (unformat_float only swaps the
# language's decimal separator for "."; "7.5" reads as 7.5 in every language).
WORKSHEET_COMMENTS = "Feedback comments"  # get_string('pluginname', 'assignfeedback_comments')
WORKSHEET_MAX, WORKSHEET_LOCK = "Maximum grade", "Grade can be changed"  # optional columns, read for warnings
WORKSHEET_COMMENT = re.compile(r"[0-9.]+ of [0-9.]+ points \((?:autograded|set by your instructor)\)\. Your "
                               r"feedback: feedback\.html, under Feedback files\.")


def _number(points: float) -> str:
    """Points as Moodle's upload reads them in every language: ``7.5``, ``10``, ``0`` (5 places at most, as
    Moodle keeps a grade)."""
    return f"{round(float(points), 5):.5f}".rstrip("0").rstrip(".")


def worksheet_comment(points: float, max_points: float, decided: bool = False) -> str:
    """The worksheet's Feedback comments cell: the points, who gave them (``decided``: an override's, not the
    grader's; a fresh instructor, i16), and where the feedback is. Digits and fixed words only: nothing a
    student wrote, nothing Moodle would render as markup."""
    return (f"{_number(points)} of {_number(max_points)} points ({'set by your instructor' if decided else 'autograded'})"
            ". Your feedback: feedback.html, under Feedback files.")


def worksheet_maximum_problem(sheet: Worksheet, points: float) -> str:
    """Why the worksheet cannot take these grades as they are, or '': a Maximum grade other than the course
    file's ``points`` (Moodle's upload takes a grade as it is, so 20 points would read as 20 out of 100)."""
    col = sheet.column(WORKSHEET_MAX, exact=False)
    if col < 0:
        return ""
    tops = set()
    for i in sheet.ids.values():
        with contextlib.suppress(ValueError):
            tops.add(float(sheet.rows[i][col].replace(" ", "").replace(",", ".")))
    other = sorted(t for t in tops if abs(t - points) > 1e-9)
    if not other:
        return ""
    return (f"its Maximum grade is {', '.join(_number(t) for t in other)} where the course file gives "
            f"{_number(points)} points, and Moodle's upload takes a grade as it is ({_number(points)} would be "
            f"{_number(points)} out of {_number(other[0])}): set points = {_number(other[0])} in the course file's "
            "assignment (or the Moodle assignment's Maximum grade to the points, then download the worksheet "
            "again) and run again with --resume")


def moodle_worksheet(sheet: Worksheet, rows: list[dict], participant: dict[str, str]) -> tuple[str, list[str], int]:
    """``(text, notes, filled)``: the worksheet ``sheet`` as it came (every row and column, the header, the
    order, a BOM and the line ending it had), with the Grade of each participant whose folder (``participant``:
    ``{row key: participant id}``) was graded set to the row's points (after the late penalty and any
    override, as in canvas.csv), and a Feedback comments cell, when the worksheet has that column, set to
    :func:`worksheet_comment` where it was blank or held the grader's own comment. A participant whose row was
    not graded (not submitted, misnamed, grader error, flagged) keeps the Grade Moodle wrote, so the upload
    changes nothing for them; a graded 0 is a 0. ``notes``: one line for each folder not in the worksheet (never
    matched otherwise), each participant id of two folders (left as downloaded), each comment kept, each grade
    Moodle will skip (locked, over its Maximum grade: an override can give more). The caller refuses a worksheet
    whose Maximum grade is not the course file's points (:func:`worksheet_maximum_problem`)."""
    grade_col, comment_col = sheet.column(WORKSHEET_GRADE), sheet.column(WORKSHEET_COMMENTS)
    max_col, lock_col = sheet.column(WORKSHEET_MAX, exact=False), sheet.column(WORKSHEET_LOCK, exact=False)
    out_rows = [list(r) for r in sheet.rows]
    notes: list[str] = []
    by_pid: dict[str, list[dict]] = {}
    for r in rows:
        if r["key"] in participant:
            by_pid.setdefault(participant[r["key"]], []).append(r)
    filled = 0
    for pid, mine in sorted(by_pid.items(), key=lambda item: int(item[0])):
        keys = sorted({r["key"] for r in mine})
        if len(keys) > 1:
            notes.append(f"participant {pid} is two folders ({', '.join(repr(k) for k in keys)}): left as "
                         "downloaded; grade it by hand")
            continue
        r = mine[0]
        if pid not in sheet.ids:
            notes.append(f"not in the worksheet: {keys[0]!r} (participant {pid}): grade it by hand")
            continue
        if r["status"] not in GRADED or r.get("points") is None:
            continue
        row = out_rows[sheet.ids[pid]]
        row[grade_col] = _number(r["points"])
        filled += 1
        top = None
        if max_col >= 0:
            with contextlib.suppress(ValueError):
                top = float(row[max_col].replace(" ", "").replace(",", "."))
        if top is not None and float(r["points"]) > top + 1e-9:
            notes.append(f"participant {pid} ({keys[0]!r}): {_number(r['points'])} points is over the "
                         f"worksheet's Maximum grade {row[max_col]}: Moodle's upload skips it")
        if lock_col >= 0 and row[lock_col].strip().casefold() == "no":
            notes.append(f"participant {pid} ({keys[0]!r}): Grade can be changed is No (locked in Moodle): "
                         "Moodle's upload skips it")
        if comment_col >= 0:
            cell = row[comment_col]
            if not cell.strip() or WORKSHEET_COMMENT.fullmatch(cell):
                row[comment_col] = worksheet_comment(r["points"], r["max_points"],
                                                     str(r.get("override", "")).startswith("override: points"))
            else:
                notes.append(f"participant {pid} ({keys[0]!r}): the Feedback comments already there are kept")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=sheet.newline)
    writer.writerow(sheet.header)
    writer.writerows(out_rows)
    return ("\ufeff" if sheet.bom else "") + buffer.getvalue(), notes, filled


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


# --------------------------------------------------------------------------- feedback back into the LMS

def _inline(text: str) -> str:
    """One line of the feedback's own Markdown as HTML: escaped first, then ``**bold**`` and ```code```."""
    text = html.escape(text, quote=False)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def feedback_html(markdown: str, title: str) -> str:
    """A student's feedback (scripts/grade.py's feedback_markdown) as a page a browser shows: headings,
    paragraphs, bold, lists and fenced blocks, the only Markdown that function writes. Every character of
    the text is escaped (a fenced block whole, as ``<pre>``): what a student's code or name put there stays
    text, never markup. No Markdown library: the grader needs none (markdown-it is a dev dependency)."""
    out, para, items = [], [], []
    fence = ""

    def flush():
        if para:
            out.append("<p>" + "\n".join(_inline(p) for p in para) + "</p>")
            para.clear()
        if items:
            out.append("<ul>\n" + "\n".join(f"<li>{_inline(i)}</li>" for i in items) + "\n</ul>")
            items.clear()

    block: list[str] = []
    for line in markdown.split("\n"):
        if fence:
            if line == fence:
                out.append("<pre><code>" + html.escape("\n".join(block), quote=False) + "</code></pre>")
                fence, block = "", []
            else:
                block.append(line)
            continue
        opening = re.match(r"^(`{3,})\w*$", line)
        heading = re.match(r"^(#{1,6}) (.*)$", line)
        if opening:
            flush()
            fence = opening.group(1)
        elif heading:
            flush()
            level = len(heading.group(1))
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif line.startswith("- "):
            if para:
                flush()
            items.append(line[2:])
        elif not line.strip():
            flush()
        else:
            if items:
                flush()
            para.append(line)
    if fence:  # never left open (fenced() always closes): what is left is text
        out.append("<pre><code>" + html.escape("\n".join(block), quote=False) + "</code></pre>")
    flush()
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width\">\n<title>{html.escape(title)}</title>\n"
            "<style>body{font-family:sans-serif;max-width:50em;margin:1em auto;padding:0 1em;line-height:1.4}"
            "pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap;overflow-wrap:anywhere}</style>\n"
            "</head>\n<body>\n" + "\n".join(out) + "\n</body>\n</html>\n")


def entry_problem(name: str) -> str:
    """Why ``name`` may not be a file's name in a feedback zip, or '': it must be relative, without ``..``,
    a backslash (a Windows unzip reads it as a folder), a control or format character or a byte that
    was not UTF-8, and no part of it may start with ``.`` or ``~`` (Moodle's import skips those files)."""
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return "it would reach outside the zip's folder"
    if "\\" in name:
        return "it holds a backslash (a folder separator to a Windows unzip)"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in name):
        return "it holds a control character or a byte that is not UTF-8"
    if any(p[:1] in (".", "~") for p in parts):
        return "a part of it starts with '.' or '~' (a hidden file, which Moodle's import skips)"
    return ""


def feedback_zip(entries: dict[str, bytes]) -> bytes:
    """A zip of ``{name: content}`` (names checked by :func:`entry_problem`), in name order, every date
    the same: the same feedback gives the same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in sorted(entries.items()):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, content)
    return buffer.getvalue()
