"""A course's grading settings: the course file (TOML), the roster, the grading secret, late days.

Read by scripts/grade.py (``--course course.toml``); see course.example.toml and
book/instructors.md. Only the standard library (tomllib, hmac, csv).
"""

from __future__ import annotations

import csv
import datetime as dt
import difflib
import hashlib
import hmac
import io
import math
import os
import re
import secrets
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (Ubuntu 22.04, Gradescope's image): setup.sh installs tomli
    import tomli as tomllib
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo

ROSTER_COLUMNS = {  # accepted header spellings (compared lower-case, spaces and dashes as underscores)
    "folder": ("folder", "submission", "canvas_name", "file_prefix"),
    "name": ("name", "student", "full_name"),
    "id": ("id", "canvas_id", "user_id"),
    "sis_user_id": ("sis_user_id", "sis_id", "id_number"),
    "login": ("login", "sis_login_id", "username", "sis_login"),
    "section": ("section",),
    "email": ("email", "email_address"),
}


# When a Gradescope student sees the hidden cases' results and the score they make ([gradescope] scores),
# what a write into an input that must stay unchanged costs: "zero" (the default, as before: every case
# where it happened fails, whatever it returned) or "case" (such a case is scored on its result on the
# grader's own copy; the assignment's own in-place case still fails) (a fresh instructor, i11, issue 37)
IN_PLACE_POLICIES = ("zero", "case")
# in Gradescope's own words for a test's visibility; the first is the default
GRADESCOPE_SCORES = ("after_due_date", "after_published", "visible")


class CourseError(ValueError):
    """A course file or roster that cannot be used: the message says where and why."""


@dataclass
class Assignment:
    name: str
    points: float = 10.0
    title: str = ""  # the gradebook column (Canvas: "<title> (<canvas_id>)")
    canvas_id: str = ""
    due: dt.datetime | None = None
    weights: dict[str, float] = field(default_factory=dict)  # "visible", "hidden", or a case's label
    extra_cases: str = ""  # a Python file defining cases(name, seed) -> list[Case]
    moodle_worksheet: str = ""  # Moodle's offline grading worksheet of this assignment (Worksheet)
    in_place: str = ""  # IN_PLACE_POLICIES, '' for the course's

    def weight(self, case: dict) -> float:
        """A case's weight: its label's (or the checker's name for it), else its group's (visible/hidden), else 1."""
        for key in (case.get("label") or "", case.get("name") or "", case.get("title") or ""):
            if key and key in self.weights:
                return float(self.weights[key])
        return float(self.weights.get("visible" if case.get("visible") else "hidden", 1.0))


@dataclass
class Student:
    key: str  # the folder name (or LMS file prefix) the submissions come under
    name: str = ""
    id: str = ""
    sis_user_id: str = ""
    login: str = ""
    section: str = ""
    email: str = ""


# the columns of an overrides CSV ([overrides] file): who and which assignment, then what changes
OVERRIDE_COLUMNS = ("student", "assignment", "points", "due", "excuse_late", "note")
YES, NO = ("yes", "true", "1", "y"), ("", "no", "false", "0", "n")


@dataclass
class Override:
    """An instructor's decision for one student and assignment (an appeal, an extension, an excused late
    day), applied at every run and regrade: ``points`` replaces the computed points, ``due`` is this
    student's own due date, ``excuse_late`` takes no late penalty; ``note`` is shown in the gradebook."""
    student: str
    assignment: str
    points: float | None = None
    due: dt.datetime | None = None
    excuse_late: bool = False
    note: str = ""

    def describe(self, computed: float | None = None) -> str:
        """The gradebook's words for it: ``override: points set to 8 (computed 6.5); regraded on appeal``."""
        parts = []
        if self.points is not None:
            parts.append(f"points set to {self.points:g}" + (f" (computed {computed:g})" if computed is not None
                                                             and computed != self.points else ""))
        if self.due is not None:
            parts.append(f"due {self.due.isoformat(timespec='minutes')}")
        if self.excuse_late:
            parts.append("lateness excused")
        return "override: " + ", ".join(parts) + (f"; {self.note}" if self.note else "")


@dataclass
class Course:
    name: str = ""
    assignments: dict[str, Assignment] = field(default_factory=dict)
    per_day: float = 0.0  # fraction of the points taken per day (or part of a day) late
    cap: float = 1.0  # the largest fraction late days can take
    grace_minutes: float = 0.0
    late_source: str = "none"  # "none", "mtime", "csv" or "moodle_worksheet"
    times_file: str = ""  # CSV: student, notebook, submitted_at (ISO 8601)
    timezone: str = "UTC"
    roster: dict[str, Student] | None = None
    roster_file: str = ""
    secret_file: str = ""
    gradescope_scores: str = GRADESCOPE_SCORES[0]  # [gradescope] scores: when hidden cases' results show
    torch: str = ""  # [gradescope] torch: the version the Gradescope bundle installs ('' for its default)
    path: Path | None = None
    overrides: dict[tuple[str, str], Override] = field(default_factory=dict)  # (student, assignment) ->
    overrides_file: str = ""
    worksheets: dict[str, Worksheet] = field(default_factory=dict)  # assignment -> its moodle_worksheet
    # [late] source = "moodle_worksheet": assignment -> {participant id: Last modified (submission)}
    submitted: dict[str, dict[str, dt.datetime]] = field(default_factory=dict)
    in_place: str = IN_PLACE_POLICIES[0]  # [course] in_place; an assignment's own in_place wins
    hold_flagged: bool = False  # [course] hold_flagged: a notebook the review flag marks is left out of the uploads

    def assignment(self, name: str) -> Assignment:
        return self.assignments.get(name) or Assignment(name)

    def in_place_policy(self, name: str) -> str:
        """Assignment ``name``'s ``in_place`` (:data:`IN_PLACE_POLICIES`), else the course's."""
        return self.assignment(name).in_place or self.in_place

    def late_days(self, name: str, submitted: dt.datetime | None, due: dt.datetime | None = None) -> int:
        """Days (or parts of a day) late after ``due`` (None: the assignment's), less the grace minutes."""
        due = due or self.assignment(name).due
        if due is None or submitted is None:
            return 0
        over = (submitted - due).total_seconds() - 60 * self.grace_minutes
        return max(0, math.ceil(over / 86400)) if over > 0 else 0

    def penalty(self, days: int) -> float:
        """The fraction of the points late days take: per_day × days, at most cap."""
        # rounded: 3 days at 0.10 was 0.30000000000000004 in grades.csv (a fresh instructor, issue 37)
        return round(min(self.cap, self.per_day * days), 6) if days > 0 else 0.0


def _when(value, zone: str, where: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=ZoneInfo(zone))
    if isinstance(value, dt.date):
        return dt.datetime.combine(value, dt.time(23, 59, 59), ZoneInfo(zone))
    try:
        when = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise CourseError(f"{where}: {value!r} is not a date and time (write 2026-12-01T23:59:00+01:00)") from None
    return when if when.tzinfo else when.replace(tzinfo=ZoneInfo(zone))


# every key the course file may have, per table (None: the top level); a misspelt key ("[course] nmae",
# "[late] per_dya") is refused rather than ignored (it left the name empty and no late penalty, unsaid)
COURSE_KEYS: dict[str | None, tuple[str, ...]] = {
    None: ("course", "late", "roster", "gradescope", "assignments", "overrides"),
    "course": ("name", "timezone", "secret_file", "in_place", "hold_flagged"),
    "late": ("per_day", "cap", "grace_minutes", "source", "times"),
    "roster": ("file",),
    "overrides": ("file",),
    "gradescope": ("scores", "torch"),
    "assignments.": ("points", "title", "canvas_id", "due", "weights", "extra_cases", "moodle_worksheet",
                     "in_place"),
}


def _check_keys(path: Path, table: str | None, value) -> None:
    """Refuse a key of ``table`` (or a top-level key) the course file does not know, in one line with the
    known keys and, for a near miss, the one meant."""
    where = f"[{table}]" if table else "the top level"
    if table is not None and not isinstance(value, dict):
        raise CourseError(f"course file {path}: {where} must be a table")
    known = COURSE_KEYS["assignments." if table and table.startswith("assignments.") else table]
    unknown = [key for key in value if key not in known]
    if unknown:
        close = {k: m[0] for k in unknown if (m := difflib.get_close_matches(k, known, n=1))}
        hint = "".join(f" ({k!r}: did you mean {m!r}?)" for k, m in close.items())
        raise CourseError(f"course file {path}: {where} has unknown keys {unknown}{hint}; known: {', '.join(known)}")


def load_course(path: Path | None) -> Course:
    """The course file at ``path`` (None: every default: 10 points per assignment, every case weighs
    1, no due dates). Relative paths in it are relative to the file."""
    if path is None:
        return Course()
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise CourseError(f"course file {path}: {err}") from None
    here = path.parent
    _check_keys(path, None, data)
    if "assignments" in data and not isinstance(data["assignments"], dict):
        raise CourseError(f"course file {path}: [assignments] must be a table")
    for table in ("course", "late", "roster", "gradescope"):  # each must be a table of known keys
        _check_keys(path, table, data.get(table, {}))
    for name, spec in data.get("assignments", {}).items():
        _check_keys(path, f"assignments.{name}", spec)
    top = data.get("course", {})
    late = data.get("late", {})
    course = Course(name=str(top.get("name", "")), timezone=str(top.get("timezone", "UTC")), path=path,
                    per_day=float(late.get("per_day", 0.0)), cap=float(late.get("cap", 1.0)),
                    grace_minutes=float(late.get("grace_minutes", 0.0)),
                    late_source=str(late.get("source", "csv" if late.get("times") else "none")))
    try:
        ZoneInfo(course.timezone)
    except Exception:
        raise CourseError(f"course file {path}: unknown timezone {course.timezone!r}") from None
    if not (0 <= course.per_day <= 1 and 0 <= course.cap <= 1):
        raise CourseError(f"course file {path}: [late] per_day and cap are fractions between 0 and 1")
    if course.late_source not in LATE_SOURCES:
        raise CourseError(f"course file {path}: [late] source is {', '.join(LATE_SOURCES)} (not "
                          f"{course.late_source!r})")
    gradescope = data.get("gradescope", {})
    course.gradescope_scores = str(gradescope.get("scores", GRADESCOPE_SCORES[0]))
    course.torch = str(gradescope.get("torch", ""))
    if course.gradescope_scores not in GRADESCOPE_SCORES:
        raise CourseError(f"course file {path}: [gradescope] scores is one of {', '.join(GRADESCOPE_SCORES)} "
                          f"(not {course.gradescope_scores!r})")
    if late.get("times"):
        course.times_file = str(here / late["times"])
    if top.get("secret_file"):
        course.secret_file = str(here / top["secret_file"])
    for table, spec in [("course", top)] + [(f"assignments.{n}", a) for n, a in data.get("assignments", {}).items()]:
        if "in_place" in spec and spec["in_place"] not in IN_PLACE_POLICIES:
            raise CourseError(f"course file {path}: [{table}] in_place is \"zero\" (a write into the inputs fails "
                              "every case where it happened, as by default) or \"case\" (such a case is scored on "
                              "its result; the assignment's own in-place case still fails), not "
                              f"{spec['in_place']!r}")
    course.in_place = str(top.get("in_place", IN_PLACE_POLICIES[0]))
    if not isinstance(top.get("hold_flagged", False), bool):
        raise CourseError(f"course file {path}: [course] hold_flagged is true or false (not "
                          f"{top['hold_flagged']!r})")
    course.hold_flagged = top.get("hold_flagged", False)
    for name, spec in data.get("assignments", {}).items():  # tables of known keys (_check_keys)
        weights = {str(k): float(v) for k, v in spec.get("weights", {}).items()}
        if any(w < 0 for w in weights.values()):
            raise CourseError(f"course file {path}: [assignments.{name}] weights must not be negative")
        extra = spec.get("extra_cases", "")
        if extra and not (here / extra).is_file():
            raise CourseError(f"course file {path}: [assignments.{name}] extra_cases {extra} does not exist")
        sheet = str(spec.get("moodle_worksheet", ""))
        if sheet and not (here / sheet).is_file():
            raise CourseError(f"course file {path}: [assignments.{name}] moodle_worksheet {sheet} does not exist")
        course.assignments[name] = Assignment(
            name, points=float(spec.get("points", 10.0)), title=str(spec.get("title", "")),
            canvas_id=str(spec.get("canvas_id", "")),
            due=_when(spec["due"], course.timezone, f"[assignments.{name}] due") if "due" in spec else None,
            weights=weights, extra_cases=str((here / extra).resolve()) if extra else "",
            moodle_worksheet=str((here / sheet).resolve()) if sheet else "", in_place=str(spec.get("in_place", "")))
        if sheet:
            course.worksheets[name] = load_worksheet(Path(course.assignments[name].moodle_worksheet))
    # the Moodle route's default, where lateness is used: the worksheet has the times (a diff reviewer, issue 37:
    # made the default with no due date and no penalty, one date it could not read stopped a course that needs none)
    lateness = course.per_day > 0 and any(a.due is not None for a in course.assignments.values())
    if "source" not in late and not late.get("times") and course.worksheets and lateness:
        course.late_source = "moodle_worksheet"
    if course.late_source == "moodle_worksheet" and not course.worksheets:
        raise CourseError(f"course file {path}: [late] source = \"moodle_worksheet\" reads each assignment's "
                          "moodle_worksheet, and no assignment names one")
    sheets: dict[str, str] = {}  # one worksheet per assignment: Moodle's assignment takes one grade per student
    for name, spec in course.assignments.items():
        if spec.moodle_worksheet and spec.moodle_worksheet in sheets:
            raise CourseError(f"course file {path}: [assignments.{sheets[spec.moodle_worksheet]}] and "
                              f"[assignments.{name}] have the same moodle_worksheet: a Moodle assignment takes "
                              "one grade per student, so give each its own Moodle assignment and worksheet")
        if spec.moodle_worksheet:
            sheets.setdefault(spec.moodle_worksheet, name)
    overrides = data.get("overrides", {}).get("file")
    if overrides:
        course.overrides_file = str(here / overrides)
        course.overrides = load_overrides(Path(course.overrides_file), course)
    roster = data.get("roster", {}).get("file")
    if roster:
        course.roster_file = str(here / roster)
        course.roster = load_roster(Path(course.roster_file))
    if course.late_source == "moodle_worksheet":  # read only where a date can count: a due date, the course's
        dated = {n for n, a in course.assignments.items() if a.due is not None}  # or an override's
        dated |= {n for (_, n), o in course.overrides.items() if o.due is not None}
        course.submitted = {name: worksheet_times(sheet, course.timezone)
                            for name, sheet in course.worksheets.items() if name in dated}
    return course


def _header_key(text: str) -> str:
    return text.strip().lower().replace(" ", "_").replace("-", "_")


def _csv_rows(path: Path, what: str, empty: str = "") -> list[list[str]]:
    """The rows of the CSV file ``what`` (roster, overrides) at ``path``; a CourseError when it cannot be
    read or is empty (``empty``: what the message adds then)."""
    try:
        with Path(path).open(newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as err:
        raise CourseError(f"{what} {path}: {err}") from None
    if not rows:
        raise CourseError(f"{what} {path} is empty{empty}")
    return rows


def load_roster(path: Path) -> dict[str, Student]:
    """``{folder: Student}`` from a roster CSV whose columns include ``folder`` (the name the
    student's submissions come under: folder name or LMS file prefix) and any of name, id,
    sis_user_id, login, section, email. Names are matched exactly (Unicode NFC)."""
    rows = _csv_rows(path, "roster")
    header = [_header_key(h) for h in rows[0]]
    where = {}
    for field_name, spellings in ROSTER_COLUMNS.items():
        for i, h in enumerate(header):
            if h in spellings:
                where[field_name] = i
                break
    if "folder" not in where:
        if "login" in where:
            where["folder"] = where["login"]
        else:
            raise CourseError(f"roster {path}: no 'folder' (or 'login') column; columns are {rows[0]}")
    out: dict[str, Student] = {}
    for n, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        values = {k: (row[i] if i < len(row) else "") for k, i in where.items()}
        key = unicodedata.normalize("NFC", values["folder"])
        if key in out:
            raise CourseError(f"roster {path}, line {n}: folder {key!r} appears twice")
        out[key] = Student(key=key, **{k: v for k, v in values.items() if k != "folder"})
    return out


# Moodle's offline grading worksheet (the assignment's *View all submissions*, *Grading action: Download
# grading worksheet*), read as Moodle's *Upload grading worksheet* reads it back. The download
# (mod/assign/gradingtable.php) heads its first column ``get_string('recordid', 'assign')`` ("Identifier")
# and fills it with ``get_string('hiddenuser', 'assign') . $this->assignment->get_uniqueid_for_user(...)``
# ("Participant 1234567": the participant id of this assignment, the same number as in the folders of its
# *Download all submissions*). The upload (mod/assign/feedback/offline/importgradeslib.php) finds its columns
# by their English names and refuses the file without any of the three:
#     $strgrade = get_string('gradenoun');   $strid = get_string('recordid', 'assign');
#     $strmodified = get_string('lastmodifiedgrade', 'assign');
#     if ($this->idindex < 0 || $this->gradeindex < 0 || $this->modifiedindex < 0) { return false; }
# and takes the participant id back as the Identifier less its prefix:
#     $id = substr($idstr, strlen(get_string('hiddenuser', 'assign')));
# Its reader (lib/csvlib.class.php, load_csv_content) drops a UTF-8 BOM and reads \r\n and \r as \n.
WORKSHEET_ID, WORKSHEET_GRADE, WORKSHEET_MODIFIED = "Identifier", "Grade", "Last modified (grade)"
WORKSHEET_PARTICIPANT = re.compile(r"Participant ([0-9]+)")  # fullmatch


@dataclass
class Worksheet:
    """A Moodle grading worksheet as it came: its header and rows (every cell a string, blank lines kept), the
    line each row starts on, ``{participant id: row index}``, and how it was written (BOM, line ending), so
    that the grader writes it back the same way with only the Grade (and comment) cells changed."""
    path: str
    header: list[str]
    rows: list[list[str]]
    lines: list[int]
    ids: dict[str, int]
    bom: bool = False
    newline: str = "\n"

    def column(self, name: str, exact: bool = True) -> int:
        """The index of the column ``name``, or -1: its exact name, as Moodle's upload compares
        (``$column == $strgrade``); with ``exact=False`` ignoring case and spaces at the ends."""
        def key(h: str) -> str:
            return h if exact else h.strip().casefold()
        return next((i for i, h in enumerate(self.header) if key(h) == key(name)), -1)


def load_worksheet(path: Path) -> Worksheet:
    """The Moodle grading worksheet at ``path``, checked as strictly as the roster: it must be UTF-8 CSV
    (Moodle writes it so, and its upload reads it so), have Moodle's Identifier, Grade and Last modified
    (grade) columns, once each, and on every non-blank line as many cells as the header and an Identifier
    ``Participant <number>`` that no other line has. A CourseError names the file and the line."""
    where = f"moodle_worksheet {path}"
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise CourseError(f"{where}: {err}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CourseError(f"{where} is not UTF-8, which Moodle's worksheet is: give the file as Moodle's "
                          "*Download grading worksheet* wrote it (a spreadsheet that saves it again may change "
                          "its encoding)") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    rows, lines = [], []
    try:
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                break
            rows.append(row)
            lines.append(start)
    except csv.Error as err:
        raise CourseError(f"{where}, line {reader.line_num}: not CSV ({err})") from None
    if not rows:
        raise CourseError(f"{where} is empty")
    header, rows, lines = rows[0], rows[1:], lines[1:]
    for name in (WORKSHEET_ID, WORKSHEET_GRADE, WORKSHEET_MODIFIED):
        count = header.count(name)
        if count != 1:
            raise CourseError(f"{where}, line 1: " + (f"no {name!r} column" if not count else f"{count} {name!r} "
                              "columns") + f" (Moodle's upload needs {WORKSHEET_ID}, {WORKSHEET_GRADE} and "
                              f"{WORKSHEET_MODIFIED}, once each); its columns are {header}: give the worksheet "
                              "Moodle's *Download grading worksheet* wrote, with Moodle's language English")
    sheet = Worksheet(str(path), header, rows, lines, {}, bom=data.startswith(b"\xef\xbb\xbf"),
                      newline="\r\n" if "\r\n" in text else "\n")
    idcol = sheet.column(WORKSHEET_ID)
    for i, (row, n) in enumerate(zip(rows, lines)):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise CourseError(f"{where}, line {n}: {len(row)} cells, where the header has {len(header)}")
        found = WORKSHEET_PARTICIPANT.fullmatch(row[idcol])
        if not found:
            raise CourseError(f"{where}, line {n}: the {WORKSHEET_ID} {row[idcol]!r} is not 'Participant "
                              "<number>', as Moodle writes it")
        pid = found.group(1)
        if pid in sheet.ids:
            raise CourseError(f"{where}, line {n}: {row[idcol]!r} again (first on line {lines[sheet.ids[pid]]}); "
                              "Moodle writes each participant once")
        sheet.ids[pid] = i
    return sheet


LATE_SOURCES = ("none", "mtime", "csv", "moodle_worksheet")
WORKSHEET_SUBMITTED = "Last modified (submission)"  # get_string('lastmodifiedsubmission', 'assign')
# gradingtable.php, col_timesubmitted: userdate($row->timesubmitted), whose default format is the language's
# strftimedaydatetime, in English '%A, %d %B %Y, %I:%M %p' with the day and hour without a leading zero
# ("Friday, 30 April 2027, 9:12 PM"), in the downloading user's timezone; "-" when nothing was submitted.
# Moodle's en_us language pack puts the month first: '%A, %B %d, %Y, %I:%M %p' ("Friday, April 30, 2027, 9:12 PM").
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MOODLE_DATE = re.compile(r"(?:(?P<wday>[A-Za-z]+), )?(?:(?P<d>[0-9]{1,2}) (?P<month>[A-Za-z]+)|"
                         r"(?P<us_month>[A-Za-z]+) (?P<us_d>[0-9]{1,2}),) (?P<y>[0-9]{4}), "
                         r"(?P<h>[0-9]{1,2}):(?P<m>[0-9]{2}) (?P<ampm>AM|PM|am|pm)")
MOODLE_FORMATS = "'Friday, 30 April 2027, 9:12 PM' (en) or 'Friday, April 30, 2027, 9:12 PM' (en_US)"


def moodle_date(text: str, zone: str) -> dt.datetime | None:
    """A worksheet date as Moodle writes it in English (``Friday, 30 April 2027, 9:12 PM``; en_US's
    ``Friday, April 30, 2027, 9:12 PM``) read in ``zone`` (the course's timezone: Moodle wrote it in the
    downloading user's), None for ``-`` or blank; ValueError
    for anything else (another language, a spreadsheet's own date format)."""
    text = text.strip()
    if text in ("", "-"):
        return None
    found = MOODLE_DATE.fullmatch(text)
    month = found and (found.group("month") or found.group("us_month"))
    if not found or month not in MONTHS or int(found.group("h")) not in range(1, 13):
        raise ValueError(text)
    hour = int(found.group("h")) % 12 + (12 if found.group("ampm").upper() == "PM" else 0)
    when = dt.datetime(int(found.group("y")), MONTHS.index(month) + 1, int(found.group("d") or found.group("us_d")),
                       hour, int(found.group("m")), tzinfo=ZoneInfo(zone))
    if found.group("wday") and found.group("wday") != WEEKDAYS[when.weekday()]:
        raise ValueError(text)
    return when


def worksheet_times(sheet: Worksheet, zone: str) -> dict[str, dt.datetime]:
    """``{participant id: submission time}`` from the worksheet's Last modified (submission) column, read in
    ``zone``; a participant with ``-`` (no submission) has none. A CourseError names the file and line of a
    date that is not Moodle's English one, or a worksheet without the column."""
    col = sheet.column(WORKSHEET_SUBMITTED)
    if col < 0:
        raise CourseError(f"moodle_worksheet {sheet.path}: no {WORKSHEET_SUBMITTED!r} column, which [late] source "
                          "= \"moodle_worksheet\" reads: download the worksheet again with Moodle's language "
                          "English, or give the times in a times file")
    out = {}
    for pid, i in sheet.ids.items():
        try:
            when = moodle_date(sheet.rows[i][col], zone)
        except ValueError:
            raise CourseError(f"moodle_worksheet {sheet.path}, line {sheet.lines[i]}: {WORKSHEET_SUBMITTED} "
                              f"{sheet.rows[i][col]!r} is not a date as Moodle writes it in English (read: "
                              f"{MOODLE_FORMATS}): download the worksheet with Moodle's language English and "
                              "keep it as it came, or give the times in a times file") from None
        if when is not None:
            out[pid] = when
    return out


def near(value: str, known, cutoff: float = 0.6) -> str:
    """`` (did you mean 'x'?)`` for the name in ``known`` nearest ``value``, or ''. A name that starts with
    ``value`` and ``_`` comes first: a Moodle folder's Full name_participant id_assignsubmission_file, where
    an instructor wrote the Full name (a fresh instructor, i10: 'Ivo Late')."""
    close = [k for k in sorted(known) if k.casefold().startswith(f"{value.casefold()}_")] or \
        difflib.get_close_matches(value, sorted(known), n=1, cutoff=cutoff)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_overrides(path: Path, course: Course) -> dict[tuple[str, str], Override]:
    """``{(student, assignment): Override}`` from the CSV at ``path`` (columns :data:`OVERRIDE_COLUMNS`;
    student and assignment required, the others may be empty). Strict, as the course file: an unknown
    column or assignment, a value that is not a number, date or yes/no, or a second line for the same
    student and assignment is refused, with the near match. Students are checked when the class is known
    (grade.py refuses an override for a student it does not know)."""
    rows = _csv_rows(path, "overrides", f" (its first line names the columns: {', '.join(OVERRIDE_COLUMNS)})")
    header = [_header_key(h) for h in rows[0]]
    unknown = [h for h in header if h not in OVERRIDE_COLUMNS]
    if unknown or not {"student", "assignment"} <= set(header):
        hint = "".join(f" ({h!r}: did you mean {m[0]!r}?)" for h in unknown
                       if (m := difflib.get_close_matches(h, OVERRIDE_COLUMNS, n=1)))
        raise CourseError(f"overrides {path}: unknown columns {unknown}{hint}; the columns are "
                          f"{', '.join(OVERRIDE_COLUMNS)} (student and assignment required)")
    out: dict[tuple[str, str], Override] = {}
    for n, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        v = {h: (row[i].strip() if i < len(row) else "") for i, h in enumerate(header)}
        where = f"overrides {path}, line {n}"
        key = (unicodedata.normalize("NFC", v["student"]), v["assignment"])
        if not key[0]:
            raise CourseError(f"{where}: no student")
        if v["assignment"] not in course.assignments:
            raise CourseError(f"{where}: the course file names no assignment {v['assignment']!r}"
                              f"{near(v['assignment'], course.assignments)}; its assignments: "
                              f"{', '.join(sorted(course.assignments)) or 'none'}")
        if key in out:
            raise CourseError(f"{where}: a second line for {key[0]!r} and {key[1]!r} (one line each)")
        o = Override(*key, note=v.get("note", ""))
        if v.get("points", ""):
            try:
                o.points = float(v["points"])
            except ValueError:
                raise CourseError(f"{where}: points {v['points']!r} is not a number") from None
            if not 0 <= o.points <= course.assignments[key[1]].points:
                raise CourseError(f"{where}: points {o.points:g} is not between 0 and the assignment's "
                                  f"{course.assignments[key[1]].points:g}")
        if v.get("due", ""):
            o.due = _when(v["due"], course.timezone, f"{where}, due")
        excuse = v.get("excuse_late", "").lower()
        if excuse not in YES + NO:
            raise CourseError(f"{where}: excuse_late is yes or no (not {v['excuse_late']!r})")
        o.excuse_late = excuse in YES
        if o.points is None and o.due is None and not o.excuse_late:
            raise CourseError(f"{where}: sets nothing (give points, due or excuse_late = yes)")
        out[key] = o
    return out


def check_override_students(course: Course, students) -> None:
    """Refuse an override for a student the class does not have (a typo would silently change nobody)."""
    known = set(students)
    for student, assignment in course.overrides:
        if student not in known:
            raise CourseError(f"overrides {course.overrides_file}: no student {student!r} in this class"
                              f"{near(student, known)} (the student column is the folder name, or the "
                              "roster's folder column)")


def load_times(path: Path, zone: str) -> dict[tuple[str, str], dt.datetime]:
    """``{(student, notebook or assignment): submitted_at}`` from a CSV with those three columns."""
    out = {}
    with Path(path).open(newline="", encoding="utf-8-sig") as f:
        for n, row in enumerate(csv.DictReader(f), start=2):
            row = {_header_key(k): v for k, v in row.items() if k}
            try:
                key = (unicodedata.normalize("NFC", row["student"]), row.get("notebook") or row["assignment"])
            except KeyError:
                raise CourseError(f"times {path}: columns student, notebook (or assignment), submitted_at") from None
            out[key] = _when(row["submitted_at"], zone, f"times {path}, line {n}")
    return out


# --------------------------------------------------------------------------- the grading secret and seeds


def grading_secret(explicit: str | None, course: Course, out_dir: Path) -> tuple[bytes, str]:
    """``(secret, where it came from)``: ``--secret`` or ``$GRADE_SECRET``, else the course file's
    ``secret_file``, else ``OUT/.grade-secret`` (made once, mode 0600, and reused by every later run
    into that folder, so a regrade draws the same hidden cases)."""
    if explicit:
        return explicit.encode("utf-8"), "given"
    if os.environ.get("GRADE_SECRET"):
        return os.environ["GRADE_SECRET"].encode("utf-8"), "$GRADE_SECRET"
    path = Path(course.secret_file) if course.secret_file else Path(out_dir) / ".grade-secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    text = path.read_text(encoding="utf-8").strip()
    if len(text) < 16:
        raise CourseError(f"the grading secret in {path} is shorter than 16 characters")
    return text.encode("utf-8"), str(path)


def secret_id(secret: bytes) -> str:
    """A short name of a secret that does not reveal it (recorded in each row)."""
    return hashlib.sha256(b"grade-secret-id\0" + secret).hexdigest()[:12]


def derive_seed(secret: bytes, assignment: str, student: str, content: bytes = b"") -> int:
    """The hidden-case seed of one student's assignment: HMAC-SHA256(secret, assignment NUL student NUL
    SHA-256 of the submitted notebook's bytes), first 4 bytes, below 2**31. The same inputs always give
    the same seed (a regrade of the same file, the same grade); a changed resubmission meets new cases,
    so what one run revealed of its cases is worth nothing to the next; without the secret the seed
    cannot be guessed."""
    # a folder name that is not UTF-8 arrives with surrogate escapes; its bytes are used as they are
    message = (f"{assignment}\0{unicodedata.normalize('NFC', student)}\0{hashlib.sha256(content).hexdigest()}"
               .encode("utf-8", "surrogateescape"))
    return int.from_bytes(hmac.new(secret, message, hashlib.sha256).digest()[:4], "big") % 2**31
