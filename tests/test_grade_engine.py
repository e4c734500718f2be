"""The grading engine's parts, each against an attack or a format (issue 37); no sandbox needed.

The whole grader on a class of hostile notebooks is tests/test_grade.py; a small class graded
twice, in parallel, interrupted and resumed is tests/test_grade_class.py.
"""

from __future__ import annotations

import csv
import errno
import importlib
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import attention_book as ab
from attention_book.assignments.grading import (case_results, dump_data, grading_cases, hidden_arguments, judge,
                                                load_results, package_without, run_hidden)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
grade = importlib.import_module("grade")
course = importlib.import_module("course")
lms_export = importlib.import_module("lms_export")
from test_grade import CHECK, GOOD, SCAFFOLD, STOPS, TILED, WRONG, notebook  # noqa: E402

SEED = 5


def function(source: str):
    namespace: dict = {"torch": torch, "ab": ab}
    exec(source, namespace)
    return namespace["my_masked_softmax"]


def results(tmp_path, fn, offset=SEED, name="masked_softmax", extra=None) -> list[dict]:
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments(name, offset, "n", extra)))
    run_hidden(name, fn, str(tmp_path / "cases.bin"), str(tmp_path / "r.bin"))
    return case_results(name, offset, "n", load_results((tmp_path / "r.bin").read_bytes()), extra)


# --------------------------------------------------------------------------- scoring over every case


def test_a_function_that_stops_scores_only_what_it_answered(tmp_path):
    honest = results(tmp_path, function(GOOD))
    stops = results(tmp_path, function(STOPS))
    total = len(honest)
    assert all(c["passed"] for c in honest)
    assert len(stops) == total, "every case has a result, also after NotImplementedError"
    assert sum(c["passed"] for c in stops) == sum(c["passed"] for c in honest[:2]) <= 2
    assert [c["status"] for c in stops[2:]] == ["not_implemented"] * (total - 2)
    report = judge("masked_softmax", SEED, "n", load_results((tmp_path / "r.bin").read_bytes()))
    assert report.total == total and report.score <= 2 / total and not report.not_implemented


def test_a_function_that_raises_on_some_cases_never_beats_honest_code(tmp_path):
    wrong = function(WRONG)

    def raises_where_wrong(*args, **kwargs):  # answers only where its answer would be right
        out = wrong(*args, **kwargs)
        if out.shape[-1] % 2:
            raise NotImplementedError
        return out

    honest = sum(c["passed"] for c in results(tmp_path, wrong))
    dodging = sum(c["passed"] for c in results(tmp_path, raises_where_wrong))
    assert dodging == honest


# attend's fused path (need_weights=False): the identity as keys and values gives the softmax weights
FUSED = """
def my_masked_softmax(scores, valid_lens, window):
    n = scores.shape[-1]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = (j <= i) & (j > i - window) & (j < valid_lens[:, None, None])
    eye = torch.eye(n, dtype=scores.dtype).expand(*scores.shape[:-2], n, n)
    return ab.attend(scores, eye, eye, keep, scale=1.0)[0]
"""
# a softmax with a temperature by another name: the sampler's next-token distribution
SAMPLER = """
def my_masked_softmax(scores, valid_lens, window):
    n = scores.shape[-1]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = (j <= i) & (j > i - window) & (j < valid_lens[:, None, None])
    filled = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return ab.models.decoding.next_token_distribution(filled, 1.0) * keep
"""


@pytest.mark.parametrize("route, called", [(TILED, "tiled_attention"), (FUSED, "attend"),
                                           (SAMPLER, "next_token_distribution")])
def test_the_package_and_its_other_routes_earn_nothing(tmp_path, route, called):
    """A masked softmax that wraps ab.tiled_attention, attend's fused path or the sampler's softmax passes
    with the whole package, and earns 0 in the grader's copy, where the feedback names the route."""
    outside = sum(c["passed"] for c in results(tmp_path, function(route)))
    assert outside > 0, "the attack is real: with the package's route the wrapper passes"
    package_without(["masked_softmax"], tmp_path / "pkg")
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments("masked_softmax", SEED, "n")))
    code = (f"import torch, attention_book as ab\nfrom attention_book.assignments.grading import run_hidden\n"
            f"{route}\nrun_hidden('masked_softmax', my_masked_softmax, {str(tmp_path / 'cases.bin')!r}, "
            f"{str(tmp_path / 'r.bin')!r})\n"
            "import attention_book.assignments.ch03 as c\nprint(sorted(k for k, v in vars(c).items() "
            "if callable(v) and getattr(v, '__blocked_answer__', False)))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path / "pkg"), OMP_NUM_THREADS="1"))
    assert run.returncode == 0, run.stderr[-2000:]
    inside = case_results("masked_softmax", SEED, "n", load_results((tmp_path / "r.bin").read_bytes()))
    assert sum(c["passed"] for c in inside) == 0
    assert all(c["why"].startswith(f"your function called the package's {called}, which this assignment blocks")
               for c in inside), inside[0]
    # the checker's own reference answer (and every helper that computes cases) is gone from the copy too
    assert "check_masked_softmax" in run.stdout and ("reference" in run.stdout or "_case" in run.stdout)


@pytest.mark.parametrize("how", ["float64", "empty", "list", "wrong shape", "number"])
def test_results_of_the_wrong_form_fail(tmp_path, how):
    good = function(GOOD)

    def bent(*args, **kwargs):
        out = good(*args, **kwargs)
        return {"float64": out.double(), "empty": out[..., :0], "list": out.tolist(),
                "wrong shape": out.reshape(-1), "number": 0.5}[how]

    cases = results(tmp_path, bent)
    assert not any(c["passed"] for c in cases)
    assert all("wrong form" in c["why"] for c in cases), cases[0]


# --------------------------------------------------------------------------- what feedback shows


def test_hidden_cases_show_no_input_expected_value_or_exception_text(tmp_path):
    def leaky(scores, *rest, **kwargs):
        raise ValueError(f"the hidden input was {scores.tolist()}")

    for c in results(tmp_path, leaky) + results(tmp_path, function(WRONG)):
        assert not c["visible"] and not c["name"] and "input" not in c and "expected" not in c
        before_hint = c["why"].split("(hint:")[0].replace(c.get("cause") or "\0", "")  # a cause is fixed text
        assert "hidden input" not in c["why"] and "tensor" not in before_hint and "[" not in before_hint, c["why"]


def test_visible_cases_show_input_expected_and_got_whole(tmp_path):
    cases = results(tmp_path, function(WRONG), offset=0)  # seed 0: the very cases the checker cell shows
    failed = [c for c in cases if not c["passed"]]
    assert failed and all(c["visible"] and c["name"] for c in cases)
    for c in failed:
        assert {"input", "expected", "got"} <= set(c) and "..." not in c["input"] + c["expected"] + c["got"]
        assert "values [" in c["got"] and "values [" in c["expected"]


def test_feedback_cannot_become_markdown_or_html(tmp_path):
    markdown_it = pytest.importorskip("markdown_it")
    evil = ("```\n# 10.0/10 points\n![x](http://e/x.png) [click](http://e) <script>alert(1)</script>\n"
            "`````` <img src=x onerror=alert(1)>")
    student = {"student": "# Ada 10/10 <b>", "key": "ada"}
    rows = [dict(student="ada", key="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax",
                 status="no results", points=0.0, max_points=10.0, passed=0, total=8, reason=evil, late_days=0,
                 penalty=0.0, cases=[{"index": 1, "visible": True, "name": "case", "passed": False, "why": evil,
                                      "input": evil, "expected": "1", "got": evil},
                                     {"index": 2, "visible": False, "label": "rows", "passed": False,
                                      "why": evil}])]
    text = grade.feedback_markdown(student, rows)
    html = markdown_it.MarkdownIt("commonmark").render(text)
    assert "<script" not in html and "<img" not in html and "<a " not in html and "<b>" not in html
    headings = [line for line in html.splitlines() if line.startswith("<h")]
    assert headings and not any("10.0/10" in h or "10/10" in h for h in headings), headings


def test_feedback_keeps_the_case_of_names_it_starts_a_sentence_with():
    row = dict(notebook="ch03_exercises.ipynb", assignment="masked_softmax", status="not implemented", points=0.0,
               max_points=10.0, passed=0, total=8, cases=[])
    text = grade.feedback_markdown({"student": "ada"}, [row])
    assert "Every case still raises NotImplementedError" in text and "notimplementederror" not in text


def test_gradescopes_top_level_output_names_no_hidden_case():
    """Gradescope shows the top-level output before the due date: failed hidden cases are only counted
    there; which ones failed is in the tests shown after the due date."""
    rows = [dict(_rows()[0], score=0.75, penalty=0.0)]
    cases = rows[0]["cases"]
    full = grade.feedback_markdown({"student": "ada"}, rows)
    short = grade.feedback_markdown({"student": "ada"}, rows, hidden_details=False)
    assert "Hidden case 2: rows" in full and "Hidden case" not in short and "rows" not in short
    assert "1 hidden case(s) failed" in short
    data = lms_export.gradescope_results(rows, short)
    assert [t["visibility"] for t in data["tests"]] == ["visible", "after_due_date"] and len(cases) == 2


def test_every_status_is_explained_in_words():
    for status in ("timeout", "memory", "kernel died", "no results", "unreadable", "flagged", "grader error",
                   "not submitted", "refused", "not implemented"):
        assert len(grade.STATUS_WORDS[status].split()) > 5, status


# --------------------------------------------------------------------------- reproducible seeds


def test_seeds_derive_from_the_secret_the_assignment_and_the_student(tmp_path):
    s = course.derive_seed(b"k" * 32, "masked_softmax", "ada")
    assert s == course.derive_seed(b"k" * 32, "masked_softmax", "ada") and 0 <= s < 2**31
    assert s != course.derive_seed(b"k" * 32, "masked_softmax", "bea")
    assert s != course.derive_seed(b"k" * 32, "bleu", "ada") != course.derive_seed(b"j" * 32, "bleu", "ada")
    # the submitted notebook's content too: the same file the same seed, a changed resubmission another
    nb = json.dumps(notebook(GOOD)).encode()
    assert course.derive_seed(b"k" * 32, "masked_softmax", "ada", nb) == course.derive_seed(
        b"k" * 32, "masked_softmax", "ada", bytes(nb))
    assert course.derive_seed(b"k" * 32, "masked_softmax", "ada", nb) != course.derive_seed(
        b"k" * 32, "masked_softmax", "ada", nb + b" ")
    secret, where = course.grading_secret(None, course.Course(), tmp_path)
    assert (tmp_path / ".grade-secret").stat().st_mode & 0o777 == 0o600 and where.endswith(".grade-secret")
    assert course.grading_secret(None, course.Course(), tmp_path)[0] == secret  # reused: a regrade draws the same
    assert course.secret_id(secret) not in secret.decode()


# --------------------------------------------------------------------------- identity


def test_names_that_collide_are_refused_and_listed():
    nfc, nfd = "Jos\u00e9", "Jose\u0301"
    problems = grade.identity_problems(["ada", " ada", "ada ", nfc, nfd, "Bea", "bea", "bea-2", "x\ny", "x y", "cy"])
    assert set(problems) == {"ada", " ada", "ada ", nfc, nfd, "Bea", "bea", "x\ny", "x y"}
    # the spaces at either end written out (issue 37: ' ada' and 'ada ' were both 'ada' in a cell or a line)
    assert "'\\x20ada'" in problems["ada"] and "'ada\\x20'" in problems["ada"] and "rename" in problems["Bea"]


def test_ids_are_never_cut_and_file_names_are_stable_and_distinct():
    long_a, long_b = "s" * 600 + "a", "s" * 600 + "b"
    assert grade.display_name(long_a) == long_a
    assert grade.identity_problems([long_a, long_b]) == {}
    names = grade.file_names(["Bea", "bea-2", "bea", long_a, long_b])
    assert len(set(names.values())) == 5 and all(len(n) < 80 for n in names.values())
    assert grade.slug("bea") == grade.slug("bea") != grade.slug("bea-2")


@pytest.mark.parametrize("name,expected", [
    ("ch03_exercises.ipynb", ("ch03_exercises.ipynb", 0, "")),
    ("ch03_exercises (1).ipynb", ("ch03_exercises.ipynb", 1, "")),
    ("ch03_exercises-2.ipynb", ("ch03_exercises.ipynb", 2, "")),
    ("smithjohn_12345_67890_ch03_exercises.ipynb", ("ch03_exercises.ipynb", 0, "smithjohn_12345")),
    ("smithjohn_LATE_12345_67890_ch03_exercises-1.ipynb", ("ch03_exercises.ipynb", 1, "smithjohn_12345")),
    ("ch03_exercises_final.ipynb", None), ("ch99_bonus.ipynb", None), ("ch03_exercises.py", None)])
def test_common_renamings_are_matched(name, expected):
    assert grade.match_reference(name, {"ch03_exercises.ipynb": ["masked_softmax"]}) == expected


def test_submissions_found_in_every_layout_and_the_rest_listed(tmp_path):
    refs = {"ch03_exercises.ipynb": ["masked_softmax"]}
    files = ["ada/ch03_exercises.ipynb", "bea/ch03_exercises (1).ipynb", "cy/ch03_exercises.ipynb",
             "cy/ch03_exercises-1.ipynb", "dan_111_222_ch03_exercises.ipynb", ".hidden/ch03_exercises.ipynb",
             "eve/.ipynb_checkpoints/ch03_exercises-checkpoint.ipynb", "eve/notes.ipynb", "loose.ipynb"]
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("{}")
    found, ignored = grade.find_submissions(tmp_path, refs)
    assert [(s.key, s.rel) for s in found] == [("ada", "ada/ch03_exercises.ipynb"),
                                               ("bea", "bea/ch03_exercises (1).ipynb"),
                                               ("cy", "cy/ch03_exercises-1.ipynb"),
                                               ("dan_111", "dan_111_222_ch03_exercises.ipynb")]
    listed = {str(p) for p, _ in ignored}
    assert {".hidden", "eve/.ipynb_checkpoints", "cy/ch03_exercises.ipynb", "eve/notes.ipynb",
            "loose.ipynb"} <= listed, listed


# --------------------------------------------------------------------------- course file and exports


EXAMPLE = ROOT / "course.example.toml"


def test_the_example_course_file_loads(tmp_path):
    c = course.load_course(EXAMPLE)
    a = c.assignment("masked_softmax")
    assert a.points > 0 and a.due is not None and a.canvas_id and c.per_day > 0 and c.roster is not None
    assert a.extra_cases and Path(a.extra_cases).is_file()


def test_weights_points_and_late_days(tmp_path):
    (tmp_path / "c.toml").write_text(
        '[late]\nper_day = 0.1\ncap = 0.3\n[assignments.masked_softmax]\npoints = 20\n'
        'due = 2026-12-01T23:59:00Z\nweights = { visible = 0, hidden = 1, "rows with no allowed key" = 3 }\n')
    c = course.load_course(tmp_path / "c.toml")
    import datetime as dt

    due = c.assignment("masked_softmax").due
    assert c.late_days("masked_softmax", due) == 0
    assert c.late_days("masked_softmax", due + dt.timedelta(hours=1)) == 1
    assert c.penalty(2) == pytest.approx(0.2) and c.penalty(9) == pytest.approx(0.3)
    cases = [{"passed": True, "visible": True, "label": "v"}, {"passed": True, "visible": False, "label": "x"},
             {"passed": False, "visible": False, "label": "rows with no allowed key"}]
    row = grade.score_row(dict(assignment="masked_softmax", status="graded", cases=cases), c,
                          due + dt.timedelta(days=1, hours=1))
    assert row["score"] == 0.25 and row["late_days"] == 2 and row["points"] == round(20 * 0.25 * 0.8, 2)
    missing = grade.score_row(dict(assignment="masked_softmax", status="not submitted", cases=[]), c, None)
    assert missing["points"] is None
    # a fresh instructor (issue 37, 7.5/10): gradebook.csv showed the points, not that 20 % had been taken
    row.update(student="ada", key="ada", notebook="ch03_exercises.ipynb", passed=2, total=3, reason="",
               cases=[dict(c, index=i, name="n", why="w") for i, c in enumerate(cases, 1)])
    student = dict(key="ada", student="ada", name="Ada", id="", sis_user_id="", login="ada", section="",
                   email="")
    grade.write_outputs([row], tmp_path / "out" / "grades.csv", [student], c, [("ch03", "masked_softmax")], [],
                        [], False, tmp_path)
    book = (tmp_path / "out" / "gradebook.csv").read_text()
    assert "graded; 2 day(s) late, 20 % of the points taken" in book, book


def test_weights_by_description_apply_and_unknown_keys_are_refused(tmp_path):
    """A hidden case keeps its description (label), feedback names it, and a course file's weight for
    that description changes the score; a weight for a description that does not exist is an error."""
    cases = results(tmp_path, function(GOOD))
    hidden = [c for c in cases if not c["visible"]]
    assert hidden and all(c["label"] for c in hidden)
    target = hidden[0]["label"]
    target_case = dict(hidden[0], passed=False, why="the result is wrong")
    assert grade.case_title(target_case) == f"hidden case {target_case['index']}: {target}"
    (tmp_path / "c.toml").write_text(f'[assignments.masked_softmax]\nweights = {{ "{target}" = 5 }}\n')
    c = course.load_course(tmp_path / "c.toml")
    grade.check_weight_keys(c)
    mixed = [target_case if x is hidden[0] else x for x in cases]
    row = grade.score_row(dict(assignment="masked_softmax", status="graded", cases=mixed), c, None)
    assert row["score"] == pytest.approx((len(cases) - 1) / (len(cases) + 4), abs=1e-4)
    (tmp_path / "c.toml").write_text('[assignments.masked_softmax]\nweights = { "rows with no alowed key" = 2 }\n')
    with pytest.raises(course.CourseError,
                       match="unknown keys.*rows with no alowed key.*known keys.*rows with no allowed"):
        grade.check_weight_keys(course.load_course(tmp_path / "c.toml"))


def test_bad_course_files_say_what_is_wrong(tmp_path):
    for text, words in (("[assignments.x]\npointz = 3\n", "unknown keys"), ("[late]\nper_day = 5\n", "fractions"),
                        ("[assignments.x]\nextra_cases = 'nope.py'\n", "does not exist"), ("[course\n", "course file")):
        (tmp_path / "c.toml").write_text(text)
        with pytest.raises(course.CourseError, match=words):
            course.load_course(tmp_path / "c.toml")


def test_an_instructors_extra_cases_are_graded(tmp_path):
    extra = tmp_path / "extra.py"
    extra.write_text(
        "import torch\nfrom attention_book.assignments import Case, compare\n"
        "def cases(name, seed):\n"
        "    if name != 'masked_softmax':\n        return []\n"
        "    g = torch.Generator().manual_seed(seed)\n"
        "    s = torch.randn(1, 3, 3, generator=g)\n"
        "    lens = torch.tensor([3])\n"
        "    return [Case('instructor: a window of one', (s, lens, 1), compare(torch.eye(3)[None]), label='all keys')]\n")
    base = len(grading_cases("masked_softmax", SEED)[1])
    with_extra = results(tmp_path, function(GOOD), extra=str(extra))
    assert len(with_extra) == base + 1 and all(c["passed"] for c in with_extra)
    assert with_extra[-1]["label"] == "all keys" and not with_extra[-1]["visible"]


def _rows():
    return [dict(student="ada", key="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax",
                 status="graded", points=7.5, max_points=10.0, penalty=0.0, passed=3, total=4,
                 cases=[{"index": 1, "visible": True, "name": "v", "passed": True, "why": "", "weight": 1.0},
                        {"index": 2, "visible": False, "label": "rows", "passed": False, "why": "wrong",
                         "weight": 1.0}]),
            dict(student="bo", key="bo", notebook="", assignment="masked_softmax", status="not submitted",
                 points=None, max_points=10.0, cases=[]),
            dict(student="cy", key="cy", notebook="ch03_exercises.ipynb", assignment="masked_softmax",
                 status="grader error", points=None, max_points=10.0, cases=[])]


def _students():
    return [{"key": k, "student": k, "name": n, "id": i, "sis_user_id": f"s{i}", "login": f"{k}@u", "section": "A",
             "email": f"{k}@u.edu"} for k, n, i in (("ada", "Ada L", "101"), ("bo", "Bo", "102"), ("cy", "-Cy", "103"))]


def test_canvas_csv_uploads_unchanged():
    c = course.Course(assignments={"masked_softmax": course.Assignment("masked_softmax", title="Masked softmax",
                                                                       canvas_id="4711")})
    text = lms_export.canvas_csv(_rows(), _students(), c, [("ch03", "masked_softmax")])
    table = list(csv.reader(io.StringIO(text)))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Masked softmax (4711)"]
    assert table[1] == ["Ada L", "101", "s101", "ada@u", "A", "7.5"]
    assert table[2][-1] == "" and table[3][-1] == "", "a missing or unscored submission is blank, never 0"
    assert table[3][0] == "'-Cy" and not any("Total" in h for h in table[0])


def test_moodle_csv():
    table = list(csv.reader(io.StringIO(lms_export.moodle_csv(_rows(), _students(), course.Course(),
                                                              [("ch03", "masked_softmax")]))))
    assert table[0] == ["Full name", "Username", "Email address", "ID number", "ch03 masked_softmax"]
    assert table[1] == ["Ada L", "ada@u", "ada@u.edu", "s101", "7.5"] and table[2][-1] == ""


def test_gradescope_results_json_follows_the_specification():
    data = json.loads(lms_export.dump_json(lms_export.gradescope_results(_rows()[:1], "# Feedback")))
    assert set(data) <= {"score", "output", "output_format", "visibility", "stdout_visibility", "tests",
                         "execution_time", "extra_data", "leaderboard"}
    assert data["score"] == 7.5 and isinstance(data["output"], str) and data["visibility"] in (
        "hidden", "after_due_date", "after_published", "visible")
    for t in data["tests"]:
        assert set(t) <= {"score", "max_score", "status", "name", "number", "output", "tags", "visibility",
                          "extra_data", "output_format", "name_format"}
        assert isinstance(t["score"], float) and isinstance(t["max_score"], float)
        assert t["status"] in ("passed", "failed") and t["visibility"] in ("hidden", "after_due_date",
                                                                            "after_published", "visible")
    assert sum(t["max_score"] for t in data["tests"]) == pytest.approx(10.0)
    assert data["tests"][1]["name"] == "masked_softmax: hidden case 2: rows"
    # nine cases of 20 points: the tests add up to 20 exactly (a fresh instructor saw 19.9998)
    row = dict(_rows()[0], max_points=20.0, total=9,
               cases=[{"index": i, "visible": False, "label": "l", "passed": True, "why": "", "weight": 1.0}
                      for i in range(1, 10)])
    tests = lms_export.gradescope_results([row], "")["tests"]
    assert round(sum(t["max_score"] for t in tests), 6) == 20.0 and len({t["max_score"] for t in tests}) == 1
    # a fresh instructor (issue 37, 7.5/10): two cases of equal weight were worth 3.3333 and 3.3331
    row = dict(row, cases=[dict(c, weight=2.0 if c["index"] in (5, 9) else 1.0) for c in row["cases"]])
    tests = lms_export.gradescope_results([row], "")["tests"]
    assert tests[4]["max_score"] == tests[8]["max_score"] and abs(sum(t["max_score"] for t in tests) - 20) < 1e-9


# --------------------------------------------------------------------------- output folder and sandbox


def test_a_write_that_fails_leaves_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "gradebook.csv"
    target.write_text("old")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        grade.write_atomic(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["gradebook.csv"]


@pytest.mark.parametrize("code,words", [(errno.ENOSPC, "disk full"), (errno.EROFS, "not writable")])
def test_a_full_or_read_only_disk_is_one_clear_line(tmp_path, monkeypatch, capsys, code, words):
    def fails(*args, **kwargs):
        raise OSError(code, os.strerror(code), str(tmp_path / "out" / "grades.csv"))

    monkeypatch.setattr(grade, "grade", fails)
    (tmp_path / "subs").mkdir()
    with pytest.raises(SystemExit) as exit_:
        grade.main([str(tmp_path / "subs"), "--out", str(tmp_path / "out" / "grades.csv")])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 1 and len(err.splitlines()) == 1 and words in err and "Traceback" not in err


def test_two_runs_into_one_folder_are_refused(tmp_path):
    import fcntl

    (tmp_path / "subs").mkdir()
    with open(tmp_path / ".grade.lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(grade.GradeError, match="another grade.py run"):
            grade.grade(tmp_path / "subs", tmp_path / "grades.csv", 10, tmp_path)


def test_cgroups_v1_are_made_under_the_graders_own():
    text = "12:pids:/user.slice/grader\n4:memory:/process_api/abc\n3:cpu,cpuacct:/\n0::/\n"
    assert grade.cgroup_v1_paths(text) == {"pids": "/user.slice/grader", "memory": "/process_api/abc",
                                           "cpu": "/", "cpuacct": "/"}


def test_the_sandbox_root_is_read_only_after_the_binds(tmp_path):
    box = grade.Sandbox("bubblewrap", True)
    argv = box.command(tmp_path, tmp_path, 2**20, ["python"])
    i = argv.index("--remount-ro", argv.index("/sandbox/home"))
    assert argv[i + 1] == "/" and not any(a in ("--bind", "--tmpfs", "--dir", "--ro-bind") for a in argv[i:])


def test_the_judge_reads_no_pickle():
    source = (ROOT / "src" / "attention_book" / "assignments" / "grading.py").read_text()
    assert "pickle" not in source.replace("never pickle", "").replace("no pickle", "").replace(
        "without pickle", "") and "torch.load" not in source


def in_the_sandbox(tmp_path, code: str) -> subprocess.CompletedProcess:
    """``python -c code`` in the grader's sandbox (skips where there is none)."""
    box = grade.Sandbox.detect(2**30)
    if box.kind == "none":
        pytest.skip("no bubblewrap here")
    for name in ("passwd", "group"):
        (tmp_path / name).write_text("")
    os.chmod(tmp_path, 0o755)
    return subprocess.run(box.command(tmp_path, tmp_path, 2**24, [sys.executable, "-c", code]), capture_output=True,
                          text=True, preexec_fn=box._start(None, 2**31), timeout=120)


def test_inside_the_sandbox_etc_and_the_root_are_read_only(tmp_path):
    code = ("import os\nfor p in ('/etc/fill', '/fill', '/sandbox/ok', '/tmp/ok'):\n"
            "    try:\n        open(p, 'w').write('x'); print(p, 'written')\n"
            "    except OSError as e:\n        print(p, 'refused')\n")
    run = in_the_sandbox(tmp_path, code)
    assert run.stdout.split("\n")[:4] == ["/etc/fill refused", "/fill refused", "/sandbox/ok written",
                                          "/tmp/ok written"], run.stdout + run.stderr[-1000:]


def test_d2l_is_an_empty_folder_in_the_sandbox(tmp_path):
    """Attacker r1 read d2l/torch.py's bleu from the grading Python (10/10 for bleu, issue 37): in the
    sandbox the folder is empty, so a cell that imports d2l or reads its files gets nothing."""
    if not grade.hidden_packages() or grade.Sandbox.detect(2**30).kind != "bubblewrap":
        pytest.skip("d2l is not installed here, or no bubblewrap")
    code = ("import importlib.util, pathlib\nspec = importlib.util.find_spec('d2l')\n"
            "where = list(spec.submodule_search_locations) if spec else []\n"
            "print(sum(1 for w in where for _ in pathlib.Path(w).iterdir()))\n"
            "try:\n    from d2l import torch as d2l\n    print('imported', hasattr(d2l, 'bleu'))\n"
            "except ImportError:\n    print('no d2l')\n")
    run = in_the_sandbox(tmp_path, code)
    assert run.stdout.split("\n")[:2] == ["0", "no d2l"], run.stdout + run.stderr[-1000:]


def test_every_installed_copy_of_a_hidden_package_is_found(tmp_path, monkeypatch):
    """A diff reviewer: find_spec named only the first d2l on sys.path, so a second copy under a bound
    prefix (a venv with --system-site-packages, say) stayed readable in the sandbox."""
    for where in ("a", "b"):
        (tmp_path / where / "d2l").mkdir(parents=True)
        (tmp_path / where / "d2l" / "__init__.py").write_text("")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "a"), str(tmp_path / "b"), *sys.path])
    found = grade.hidden_packages()
    assert tmp_path / "a" / "d2l" in found and tmp_path / "b" / "d2l" in found


def test_the_run_folder_is_private(tmp_path):
    grader = grade.Grader(tmp_path, 10, 1.0, 64)
    try:
        info = grader.run_dir.stat()
        assert info.st_mode & 0o777 == 0o700
        assert info.st_uid == (grade.NOBODY if grader.sandbox.unprivileged else os.geteuid())
    finally:
        grader.close()
    assert not grader.run_dir.exists()


def test_odd_names_missing_times_and_missing_notebooks_in_a_class(tmp_path):
    """A folder and a file whose names are not UTF-8 are graded and listed (escaped), not a crash; a
    notebook with a due date but no submission time is said loudly, never silently on time; a row
    of a student who handed nothing in still counts every case in ``total``."""
    if grade.Sandbox.detect().kind == "none":
        pytest.skip("the grader's sandbox (bubblewrap) is not available here")
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    subs = os.fsencode(tmp_path / "subs")
    for folder in (b"bad\xff", b"ada"):
        os.makedirs(subs + b"/" + folder)
        (Path(os.fsdecode(subs + b"/" + folder)) / "ch03_exercises.ipynb").write_text("not a notebook")
    Path(os.fsdecode(subs + b"/ada/notes\xff.ipynb")).write_text("{}")
    os.makedirs(subs + b"/cy")
    (Path(os.fsdecode(subs)) / "cy" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(GOOD)))
    (tmp_path / "roster.csv").write_text("folder,name,id,sis_user_id,login,section\nada,Ada,1,S1,ada,A\n"
                                         "eve,Eve,2,S2,eve,A\ncy,Cy,3,S3,cy,A\n")
    (tmp_path / "c.toml").write_text('[roster]\nfile = "roster.csv"\n[assignments.masked_softmax]\n'
                                     'due = 2026-12-01T23:59:00Z\n')
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), os.fsdecode(subs), "--out",
                           str(tmp_path / "out" / "grades.csv"), "--reference", str(tmp_path / "ref"), "--timeout",
                           "60", "--course", str(tmp_path / "c.toml"), "--secret", "s" * 40],
                          capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "out" / "grades.csv").open(encoding="utf-8"))}
    assert set(rows) == {"ada", "bad\\xff", "cy", "eve"} and rows["bad\\xff"]["status"] == "unreadable"
    assert "ada/notes\\xff.ipynb" in (tmp_path / "out" / "ignored.csv").read_text(encoding="utf-8")
    assert rows["eve"]["status"] == "not submitted" and rows["eve"]["total"] == rows["ada"]["total"] != "0"
    assert "NO submission time" in done.stdout and "no submission time: cy masked_softmax" in done.stdout
    # a row with no points to take is not said to lack a time (a fresh instructor, issue 37: "late policy not
    # applied" on rows whose kernel died, not implemented, 0 points)
    assert rows["ada"]["points"] in ("", "0.0") and "no submission time: ada" not in done.stdout, done.stdout
    book = {r["Student"]: r for r in csv.DictReader((tmp_path / "out" / "gradebook.csv").open(encoding="utf-8"))}
    status = [k for k in book["cy"] if k.endswith("masked_softmax status")][0]
    assert "no submission time, late policy not applied" in book["cy"][status], book["cy"]
    assert "late policy" not in book["ada"][status], book["ada"]


# --------------------------------------------------------------------------- results too large to send back


@pytest.mark.parametrize("body, words", [
    ("return torch.zeros(1).expand(10**10)", "too large to send back"),  # 1e10 elements, as an expanded view
    ("out = []\n    for _ in range(200_000):\n        out = [out]\n    return out", "nested more than"),
])
def test_a_result_too_large_to_send_back_is_said_so(tmp_path, body, words):
    fn = function(f"def my_masked_softmax(scores, valid_lens, window):\n    {body}\n")
    found = results(tmp_path, fn)
    assert all(c["status"] == "too_large" and words in c["why"] and not c["passed"] for c in found), found[0]


def test_no_results_feedback_lists_only_the_cells_the_student_wrote():
    """An error in a cell the chapter gives (it calls a function the grader blocks) is not the student's:
    only cells the student wrote are named in a notebook's reason; the chapter's own checker cell is not
    (the package's checker is blocked in the sandbox: not the honest student's error)."""
    reference = notebook(SCAFFOLD, "ms = ab.masked_softmax(torch.zeros(1, 2, 2))")
    grader = grade.Grader.__new__(grade.Grader)
    grader.reference_sources = {"ch03_exercises.ipynb": grade._code_sources(reference)}
    submitted = notebook(GOOD, "ms = ab.masked_softmax(torch.zeros(1, 2, 2))", "print(ms)")
    mine = [i for i in range(len(submitted["cells"]))
            if grader._students_cell(submitted, i, "ch03_exercises.ipynb")]
    assert mine == [1, 3]  # the student's function and their own print; not the book's checker cell
    changed = notebook(GOOD, checker=CHECK + "\nprint(report)")
    assert grader._students_cell(changed, 2, "ch03_exercises.ipynb")  # a checker the student rewrote is theirs


def test_an_error_from_a_students_cell_comes_back_as_one_short_line():
    """A cell can raise any text, e.g. every hidden case's inputs read from the grader's files: the
    feedback gets the exception's type and at most about 100 characters of its first line."""
    leak = "ValueError: " + "tensor([[0.1234, 0.5678, 0.9012]]) " * 40 + "\nsecond line " * 5
    short = grade.short_error(leak)
    assert short.startswith("ValueError: tensor([[0.1234,") and short.endswith(" …"), short
    assert len(short) <= len("ValueError: ") + grade.SHORT_ERROR + 2 and "\n" not in short
    assert "second line" not in short and short.count("0.1234") <= 3
    assert grade.short_error("KeyError: 'x'") == "KeyError: 'x'" and grade.short_error("StopIteration: ") == (
        "StopIteration")


# --------------------------------------------------------------------------- hints only where they apply

NO_WINDOW = GOOD + '''
_right = my_masked_softmax
def my_masked_softmax(scores, valid_lens, window):
    return _right(scores, valid_lens, scores.shape[-1])
'''


def test_one_mistake_across_cases_is_named_once_and_no_unrelated_hint_is_given(tmp_path):
    """A student who only left out the window (causal attention over the real tokens) fails every case with a
    window shorter than the sequence: the feedback says that, first and once, and gives none of the other
    cases' hints (NaN rows, float16, in-place writes)."""
    cases = results(tmp_path, function(NO_WINDOW))
    failed = [c for c in cases if not c["passed"]]
    assert len(failed) >= 3 and all("the window is ignored" in c["why"] for c in failed), failed
    row = dict(student="ada", key="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax",
               status="graded", points=1.0, max_points=10.0, passed=len(cases) - len(failed), total=len(cases),
               reason="", late_days=0, penalty=0.0, cases=cases)
    text = grade.feedback_markdown({"student": "ada"}, [row])
    assert f"One mistake explains all {len(failed)} failed cases" in text
    # every failed case reads the same without the mistake: the cases on one line, no section each (i14)
    assert "### " not in text and text.index("One mistake") < text.index("The cases: hidden case")
    hints = "\n".join(line for line in text.splitlines() if not line.startswith("### "))  # not the cases' names
    for unrelated in ("NaN", "float16", "in place", "-1e6", "uniform"):
        assert unrelated not in hints, unrelated
    # the student's own checker says the same, case by case
    report = ab.assignments.check_masked_softmax(function(NO_WINDOW), verbose=False)
    reasons = [why for _, ok, why in report.results if not ok]
    assert reasons and all("the window is ignored" in w and "overflow" not in w and "in place" not in w
                           for w in reasons)


# --------------------------------------------------------------------------- small things an instructor meets


def test_a_misnamed_file_is_said_in_the_students_row_and_the_output_is_private(tmp_path):
    """``hal/ch 03 exercises.ipynb`` is not graded, and hal's gradebook status and feedback say why (not
    only ignored.csv); the output folder is 0700 and its files 0600 (--shared-output: the umask)."""
    subs, reference = tmp_path / "subs", tmp_path / "ref"
    (subs / "hal").mkdir(parents=True)
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    (subs / "hal" / "ch 03 exercises.ipynb").write_text(json.dumps(notebook(GOOD)))
    out = tmp_path / "out" / "grades.csv"
    rows = grade.grade(subs, out, 10, reference, secret="s")
    (row,) = [r for r in rows if r["assignment"] == "masked_softmax"]
    assert row["status"] == "misnamed file" and "ch 03 exercises.ipynb" in row["reason"], row
    assert row["points"] is None
    book = (out.parent / "gradebook.csv").read_text()
    assert "misnamed file" in book
    # grades.csv names the file handed in (a fresh instructor, issue 37: only the expected name was there)
    (line,) = [r for r in csv.DictReader(out.open(encoding="utf-8")) if r["assignment"] == "masked_softmax"]
    assert line["notebook"] == "ch03_exercises.ipynb" and line["handed_in"] == "ch 03 exercises.ipynb", line
    assert "handed_in" not in book and "ch 03 exercises" not in (out.parent / "moodle.csv").read_text()
    (feedback,) = (out.parent / "feedback").iterdir()
    assert "ch 03 exercises.ipynb" in feedback.read_text() and "rename" in feedback.read_text()
    assert (out.parent.stat().st_mode & 0o777) == 0o700
    for path in out.parent.rglob("*"):
        assert (path.stat().st_mode & 0o777) == (0o700 if path.is_dir() else 0o600), path
    old = os.umask(0o022)
    try:
        grade.grade(subs, tmp_path / "shared" / "grades.csv", 10, reference, secret="s", shared_output=True)
    finally:
        os.umask(old)
    assert ((tmp_path / "shared" / "gradebook.csv").stat().st_mode & 0o777) == 0o644


def test_names_that_differ_only_in_their_code_points_are_told_apart():
    nfc, nfd = "Jos\u00e9", "Jose\u0301"
    why = grade.identity_problems([nfc, nfd])[nfc]
    assert "Jos\\xe9" in why and "Jose\\u0301" in why


def test_feedback_names_the_file_that_was_graded():
    row = dict(student="ada", key="ada", notebook="ch03_exercises.ipynb", assignment="masked_softmax",
               status="graded", points=10.0, max_points=10.0, passed=8, total=8, reason="", late_days=0,
               penalty=0.0, cases=[], path="/x/ada/ch03_exercises-1.ipynb")
    text = grade.feedback_markdown({"student": "ada"}, [row])
    assert "## ch03_exercises-1.ipynb (graded as ch03_exercises.ipynb): masked_softmax" in text
    row["path"] = "/x/ada/`<b>`_1_2_ch03_exercises.ipynb"
    assert "<b>" not in grade.feedback_markdown({"student": "ada"}, [row])


def test_a_non_editable_install_does_not_hand_the_sandbox_the_answers(tmp_path):
    """The package installed into a prefix the sandbox binds (``pip install .``, as Gradescope's setup.sh
    does) holds the checkers' ``reference``; a notebook that loads that file by path and hands in its
    ``reference`` earns 0 points: the sandbox sees the student copy there (simulated: the installed copy
    lies under a folder the sandbox binds, and the grader imports the package from it)."""
    if grade.Sandbox.detect(2**30).kind != "bubblewrap":
        pytest.skip("no bubblewrap here")
    import shutil

    site = tmp_path / "data" / "site-packages"
    shutil.copytree(ROOT / "src" / "attention_book", site / "attention_book",
                    ignore=shutil.ignore_patterns("__pycache__"))
    os.chmod(tmp_path, 0o755)
    for p in (tmp_path / "data", site):
        os.chmod(p, 0o755)
    installed = site / "attention_book" / "assignments" / "ch03.py"
    assert "def reference" in installed.read_text()
    attack = ("import importlib.util\n"
              f"_s = importlib.util.spec_from_file_location('attention_book.assignments._ref', {str(installed)!r})\n"
              "_m = importlib.util.module_from_spec(_s)\n_s.loader.exec_module(_m)\n"
              "my_masked_softmax = _m.reference\n")
    subs, reference = tmp_path / "subs", tmp_path / "ref"
    (subs / "mal").mkdir(parents=True)
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    (subs / "mal" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(attack)))
    env = dict(os.environ, PYTHONPATH=str(site), ATTENTION_BOOK_DATA=str(tmp_path / "data"), OMP_NUM_THREADS="1")
    out = tmp_path / "out" / "grades.csv"
    done = subprocess.run([sys.executable, "-c", "import attention_book, sys; print(attention_book.__file__)"],
                          env=env, capture_output=True, text=True, check=False)
    assert done.stdout.strip() == str(site / "attention_book" / "__init__.py"), "the grader uses the install"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), str(subs), "--out", str(out),
                           "--reference", str(reference), "--timeout", "90", "--memory-gb", "3", "--secret",
                           "a course secret for the tests, 32+ characters long"],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sandbox: bubblewrap" in done.stdout, done.stdout + done.stderr[-3000:]
    with out.open(newline="", encoding="utf-8") as f:
        (row,) = [r for r in csv.DictReader(f) if r["assignment"] == "masked_softmax"]
    assert int(row["total"]) > 0 and row["passed"] == "0", row


@pytest.mark.parametrize("name", ["jim/ch03_exercises_final.ipynb", "jim/Ch03-Exercises (2).ipynb",
                                  "jim/ch03 exercises-v2.ipynb", "jim/Copy of ch03_exercises.ipynb",
                                  "jim/ch03_exercises - Copy.ipynb", "jim_209_905_ch03_exercises_final.ipynb",
                                  "jim_209_905_ch03 exercises.ipynb", "jim_209_905_Ch03-Exercises.ipynb"])
def test_a_near_name_is_misnamed_in_either_layout(tmp_path, name):
    """A fresh instructor: ``jim/ch03_exercises_final.ipynb`` was ignored ("no reference notebook of this
    name"), and Canvas's ``doejane_208_904_ch03 exercises.ipynb`` ignored as "without an LMS name": no
    row, no feedback. Both layouts now say ``misnamed file`` for one student, with the name to use."""
    (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / name).write_text("{}")
    misnamed = {}
    found, ignored = grade.find_submissions(tmp_path, {"ch03_exercises.ipynb": ["masked_softmax"]}, misnamed)
    key = "jim" if "/" in name else "jim_209"
    assert not found and misnamed == {(key, "ch03_exercises.ipynb"): name}, (misnamed, ignored)
    assert [why for _, why in ignored] == ["misnamed: not graded; it looks like ch03_exercises.ipynb, the name "
                                           "to hand it in under"]


def test_other_notebooks_are_not_near_names(tmp_path):
    for name in ("jim/ch03_scoring_functions.ipynb", "jim/ch04_exercises.ipynb", "jim/ch03.ipynb",
                 "jim_209_905_notes_final.ipynb"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    misnamed = {}
    found, ignored = grade.find_submissions(tmp_path, {"ch03_exercises.ipynb": ["masked_softmax"]}, misnamed)
    assert not found and not misnamed and len(ignored) == 4, ignored


class FakeGrader:
    """Grader's place in a test that needs no notebook to run: every notebook "graded", 1 of 1 case,
    without a sandbox, a judge or a package copy (seconds saved: which file is graded, and what the
    student is told about the others, is decided before anything runs)."""

    def __init__(self, reference, *args):
        self.sandbox = type("Box", (), {"kind": "fake", "missing": []})()
        self.missing: set[str] = set()
        self.references = grade.reference_assignments(reference)
        self.paths: list[Path] = []

    def grade_notebook(self, who, path, reference, seeds):
        FakeGrader.graded.append(Path(path).name)
        return [dict(student=who, notebook=reference, assignment=n, passed=1, total=1, status="graded",
                     reason="", cases=[], seed=seeds[n]) for n in seeds]  # the assignments to grade

    def close(self):
        pass


def fake_grading(monkeypatch) -> list[str]:
    """Grade with FakeGrader; returns the list of the files' names it is handed, in order."""
    FakeGrader.graded = []
    monkeypatch.setattr(grade, "Grader", FakeGrader)
    monkeypatch.setattr(grade, "_announce", lambda grader: None)
    return FakeGrader.graded


@pytest.mark.parametrize("handed, graded, other, why", [
    # a folder per student: the newer file under a near name, and a copy number / Canvas's resubmission
    (["jim/ch03_exercises.ipynb", "jim/ch03_exercises_final.ipynb"], "ch03_exercises.ipynb",
     "ch03_exercises_final.ipynb", "its name is not ch03_exercises.ipynb"),
    (["jim/ch03_exercises.ipynb", "jim/ch03_exercises (1).ipynb"], "ch03_exercises (1).ipynb",
     "ch03_exercises.ipynb", "an earlier version (a lower resubmission number)"),
    (["jim/ch03_exercises-1.ipynb", "jim/Copy of ch03_exercises.ipynb"], "ch03_exercises-1.ipynb",
     "Copy of ch03_exercises.ipynb", "its name is not ch03_exercises.ipynb"),
    # Canvas's flat bulk download (login_uid_sub_name): quoted as the student named the file
    (["jim_209_905_ch03_exercises.ipynb", "jim_209_906_ch03_exercises_final.ipynb"], "ch03_exercises.ipynb",
     "ch03_exercises_final.ipynb",
     "its name is not ch03_exercises.ipynb; handed in after the graded file (a higher LMS submission ID)"),
    (["jim_209_905_ch03_exercises.ipynb", "jim_209_906_ch03_exercises-1.ipynb"], "ch03_exercises-1.ipynb",
     "ch03_exercises.ipynb", "an earlier version (a lower LMS submission ID)"),
])
def test_a_students_other_files_for_a_notebook_are_never_lost_silently(tmp_path, monkeypatch, handed, graded,
                                                                        other, why):
    """A fresh attacker (issue 37, 7/10): ``ch03_exercises.ipynb`` and, later, ``ch03_exercises_final.ipynb``
    beside it: the old file was graded and the newer one only listed in ignored.csv, nothing in the
    student's feedback or gradebook row. The rule: the file with the assignment's name is graded (of
    several versions of it, the latest), whatever the others hold and whenever they came (no file times:
    a zip or a download resets them); the row's note, its gradebook status and the feedback name the
    file graded and every other, with why it was not graded."""
    ran = fake_grading(monkeypatch)
    subs = tmp_path / "subs"
    for rel in handed:
        (subs / rel).parent.mkdir(parents=True, exist_ok=True)
        (subs / rel).write_text("{}")
    os.utime(subs / handed[0], (4e9, 4e9))  # the other file is the newer by its time: no matter
    reference = tmp_path / "ref"
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    out = tmp_path / "out" / "grades.csv"
    (row,) = grade.grade(subs, out, 10, reference, secret="s" * 40)
    assert row["status"] == "graded" and len(ran) == 1 and ran[0].endswith(graded), (row, ran)
    assert row["note"] == f"several files for ch03_exercises.ipynb: graded {graded!r}; not graded: {other!r} " \
                          f"({why})", row["note"]
    with out.open(newline="", encoding="utf-8") as f:
        assert [r["note"] for r in csv.DictReader(f)] == [row["note"]]
    book = (out.parent / "gradebook.csv").read_text()
    assert "graded; 1 other file(s) handed in, not graded (see the feedback)" in book, book
    (feedback,) = (out.parent / "feedback").iterdir()
    text = feedback.read_text()
    assert f"```text\ngraded:     {graded}\nnot graded: {other} ({why})\n```" in text, text
    assert "hand it in again named ch03_exercises.ipynb, alone" in text
    ignored = (out.parent / "ignored.csv").read_text()
    assert other in ignored and ("said in the student's feedback" in ignored or "earlier version" in ignored)
    # Gradescope's results.json, held back until the due date: the files are decided before any run
    results = json.loads(next((out.parent / "gradescope").rglob("results.json")).read_text())
    assert f"not graded: {other} ({why})" in results["output"], results["output"]


def test_the_other_files_names_are_escaped(tmp_path, monkeypatch):
    """A file's name is the student's text: a control character in it is shown escaped, in a fenced
    block, never obeyed."""
    fake_grading(monkeypatch)
    subs, reference = tmp_path / "subs", tmp_path / "ref"
    (subs / "jim").mkdir(parents=True)
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    for name in ("ch03_exercises.ipynb", "ch03_exercises\x1b_final.ipynb"):
        (subs / "jim" / name).write_text("{}")
    (row,) = grade.grade(subs, tmp_path / "out" / "grades.csv", 10, reference, secret="s" * 40)
    text = next((tmp_path / "out" / "feedback").iterdir()).read_text()
    assert "\x1b" not in text and "\x1b" not in row["note"], text
    assert "not graded: ch03_exercises\\x1b_final.ipynb (its name" in text, text


@pytest.mark.parametrize("out", ["folder", "new_folder/"])
def test_out_names_the_csv_file_not_a_folder(tmp_path, capsys, out):
    """An instructor (issue 37) gave ``--out grades/`` expecting a folder; --out is the grades CSV, the
    other outputs go beside it. A folder (or a name ending in '/') stops with one line saying so,
    before anything is written."""
    (tmp_path / "subs").mkdir()
    (tmp_path / "folder").mkdir()
    with pytest.raises(SystemExit) as stop:
        grade.main([str(tmp_path / "subs"), "--out", f"{tmp_path}/{out}"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "is a folder: name the CSV file to write, such as" in err and "grades.csv" in err, err
    assert not (tmp_path / "new_folder").exists() and not list((tmp_path / "folder").iterdir())


def _graded_with_roster(tmp_path, handed: list[str], roster_row: str, **options):
    """Grade ``handed`` (paths under SUBMISSIONS, each an empty "notebook") against ch03's scaffold, with a
    roster of one ``roster_row`` and masked_softmax's Canvas id; ``(rows, grades.csv's path)``."""
    subs, reference = tmp_path / "subs", tmp_path / "ref"
    subs.mkdir()
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    for rel in handed:
        (subs / rel).parent.mkdir(parents=True, exist_ok=True)
        (subs / rel).write_text("{}")
    (tmp_path / "roster.csv").write_text(f"name,id,sis_user_id,login,section\n{roster_row}\n")
    (tmp_path / "c.toml").write_text('[roster]\nfile = "roster.csv"\n[assignments.masked_softmax]\n'
                                     'canvas_id = "77"\n')
    out = tmp_path / "out" / "grades.csv"
    return grade.grade(subs, out, 10, reference, secret="s" * 40, course_file=tmp_path / "c.toml", **options), out


def test_a_misnamed_student_not_in_the_roster_is_left_out_of_the_lms_files(tmp_path, capsys):
    """The guide: a folder not in the roster is left out of canvas.csv and moodle.csv and listed. A
    misnamed ``hal`` not in the roster was written ``hal,,,hal,,,`` in canvas.csv and not listed; a Canvas
    file renamed by a rostered student (user id 208) is that student's misnamed row, under the roster."""
    rows, out = _graded_with_roster(tmp_path, ["hal/ch03_exercises_final.ipynb",
                                               "doejane_208_904_ch03 exercises.ipynb"], "Jane Doe,208,S208,jdoe,A")
    assert sorted((r["key"], r["status"]) for r in rows) == [("doejane_208", "misnamed file"),
                                                             ("hal", "misnamed file")], rows
    assert "not in the roster: hal" in capsys.readouterr().out
    for export in ("canvas.csv", "moodle.csv"):
        text = (out.parent / export).read_text()
        assert "hal" not in text and text.count("jdoe") == 1, (export, text)
    assert len(list((out.parent / "feedback").iterdir())) == 2  # each told the name to hand it in under


def test_feedback_quotes_the_uploaded_name_and_the_rosters_name(tmp_path):
    """A fresh instructor (issue 37): Canvas's misnamed file was quoted as
    'wumei_107_9007_ch03_exercises_final.ipynb', a name the student never saw, and the feedback's
    "Student:" showed the key ``wumei_107`` though the roster has the name and the guide says each file
    begins with the student's name. Now: the uploaded name, and the roster's name (escaped as the key
    is: a control character in it is shown, not obeyed) with the key beside it."""
    rows, out = _graded_with_roster(tmp_path, ["wumei_107_9007_ch03_exercises_final.ipynb"],
                                    '"Wu\x1bMei",107,S107,wmei,A')
    (row,) = rows
    assert row["status"] == "misnamed file" and "'ch03_exercises_final.ipynb'" in row["reason"], row
    assert "9007" not in row["reason"]
    (feedback,) = (out.parent / "feedback").iterdir()
    text = feedback.read_text()
    assert "Student:\n\n```text\nWu\\x1bMei (wumei_107)\n```" in text, text[:300]
    assert "\x1b" not in text and "9007" not in text


def test_a_name_given_where_the_roster_has_none_heads_the_feedback(tmp_path):
    """Gradescope's run gives the student's name from submission_metadata.json (``names``): the
    feedback shows it beside the key, escaped; the roster's name, where there is one, comes first."""
    _, out = _graded_with_roster(tmp_path, ["hal/ch03_exercises_final.ipynb",
                                            "doejane_208_904_ch03 exercises.ipynb"], "Jane Doe,208,S208,jdoe,A",
                                 names={"hal": "Hal\u202eRoe", "doejane_208": "not Jane"})
    texts = [p.read_text() for p in (out.parent / "feedback").iterdir()]
    assert sum("```text\nHal\\u202eRoe (hal)\n```" in t for t in texts) == 1, texts
    assert sum("```text\nJane Doe (doejane_208)\n```" in t for t in texts) == 1, texts


def test_two_students_with_one_canvas_name_key_are_two_students(tmp_path):
    """Canvas's bulk download names files ``<namekey>_<user id>_<submission id>_<file>``: two John Smiths
    (user ids 103 and 207) are two students, each with their own row in grades.csv, canvas.csv and
    moodle.csv (matched to the roster by user id); one user id's later submission replaces its earlier."""
    subs = tmp_path / "subs"
    subs.mkdir()
    refs = {"ch03_exercises.ipynb": ["masked_softmax"]}
    for name in ("smithjohn_103_501_ch03_exercises.ipynb", "smithjohn_207_502_ch03_exercises.ipynb",
                 "smithjohn_LATE_207_1000_ch03_exercises.ipynb", "smithjohn_207_99_ch03_exercises.ipynb"):
        (subs / name).write_text("not a notebook: graded 'unreadable', without running anything")
    found, ignored = grade.find_submissions(subs, refs)
    assert [(s.key, s.rel) for s in found] == [("smithjohn_103", "smithjohn_103_501_ch03_exercises.ipynb"),
                                               ("smithjohn_207", "smithjohn_LATE_207_1000_ch03_exercises.ipynb")]
    assert {str(p) for p, _ in ignored} == {"smithjohn_207_502_ch03_exercises.ipynb",
                                            "smithjohn_207_99_ch03_exercises.ipynb"}
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    (tmp_path / "roster.csv").write_text("name,id,sis_user_id,login,section\nJohn Smith,103,S103,jsmith1,A\n"
                                         "John Smith,207,S207,jsmith2,B\n")
    (tmp_path / "c.toml").write_text('[roster]\nfile = "roster.csv"\n[assignments.masked_softmax]\n'
                                     'canvas_id = "77"\n')
    out = tmp_path / "out" / "grades.csv"
    rows = grade.grade(subs, out, 10, tmp_path / "ref", secret="s" * 40, course_file=tmp_path / "c.toml")
    graded = {r["key"]: Path(r["path"]).name for r in rows if r["assignment"] == "masked_softmax"}
    assert graded == {"smithjohn_103": "smithjohn_103_501_ch03_exercises.ipynb",
                      "smithjohn_207": "smithjohn_LATE_207_1000_ch03_exercises.ipynb"}, rows
    key, _ = course.grading_secret("s" * 40, course.load_course(tmp_path / "c.toml"), out.parent)
    for r in rows:  # each seed from the secret, the assignment, the student and the file's content
        content = (subs / graded[r["key"]]).read_bytes()
        assert int(r["seed"]) == course.derive_seed(key, "masked_softmax", r["key"], content)
    for export, columns, want in (
            ("canvas.csv", ("ID", "SIS Login ID"), [("103", "jsmith1"), ("207", "jsmith2")]),
            ("moodle.csv", ("ID number", "Username"), [("S103", "jsmith1"), ("S207", "jsmith2")])):
        with (out.parent / export).open(newline="", encoding="utf-8") as f:
            table = list(csv.DictReader(f))
        assert sorted(tuple(r[c] for c in columns) for r in table) == want, (export, table)


def test_a_parallel_run_ends_without_tracebacks_and_the_default_timeout_suits_a_class(tmp_path):
    """``--jobs 2``: the pool's idle workers end quietly after a successful run (they used to get
    SIGTERM and print ``KeyboardInterrupt: signal 15``); the default time per notebook is 300 s."""
    assert grade.TIMEOUT == 300 and "--timeout 300" in grade.__doc__
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    for who in ("ada", "bea", "cy"):
        (tmp_path / "subs" / who).mkdir(parents=True)
        (tmp_path / "subs" / who / "ch03_exercises.ipynb").write_text("not a notebook")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "grade.py"), str(tmp_path / "subs"), "--out",
                           str(tmp_path / "out" / "grades.csv"), "--reference", str(tmp_path / "ref"), "--jobs", "2",
                           "--secret", "s" * 40], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "grading 3 notebooks, 2 at a time" in done.stdout
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr[-3000:]


def test_hidden_cases_name_the_value_free_causes_of_a_single_tensor_and_a_float16_overflow(tmp_path):
    """ch01: a function that returns one tensor instead of (pooled, weights) is told so on hidden cases
    too (not only "the result is wrong"); ch03: a -1e9 fill that overflows float16 on a hidden case
    names that cause (not only "raised RuntimeError"); neither shows a value of the case."""
    def one_tensor(scores, values, temperature):
        t = temperature[..., None]
        return torch.softmax(scores / torch.where(t > 0, t, 1.0), dim=-1) @ values

    cases = results(tmp_path, one_tensor, name="softmax_pool")
    hidden = [c for c in cases if not c.get("visible")]
    assert hidden and all("got one tensor" in c["why"] for c in hidden), [c["why"] for c in hidden]

    def overflows(scores, valid_lens, window):
        n = scores.shape[-1]
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        keep = (j <= i) & (j > i - window) & (j < valid_lens.reshape(-1, 1, 1))
        out = torch.softmax(scores.masked_fill(~keep, -1e9), dim=-1)
        return out.masked_fill(~keep.any(-1, keepdim=True), 0.0)

    cases = results(tmp_path, overflows)
    raised = [c for c in cases if not c.get("visible") and c["status"] == "raised"]
    assert raised, [c["why"] for c in cases]
    for c in raised:
        assert c["why"].startswith("your function raised RuntimeError: ") and "65504" in c["why"], c["why"]
        assert "c10::Half" not in c["why"]


def test_a_cell_that_raises_the_hidden_inputs_gets_one_short_line_back(tmp_path):
    """A cell after the checker reads the hidden cases' file, stops the hidden tests (no results) and
    raises a ValueError holding every hidden input: the feedback names the error in one short line."""
    if grade.Sandbox.detect(2**30).kind != "bubblewrap":
        pytest.skip("no bubblewrap here")
    leak = ("import glob, sys\nfrom attention_book.assignments.grading import load_data\n"
            "_data = load_data(open(glob.glob('/in/cases-*.bin')[0], 'rb').read())\n"
            "sys.modules['attention_book.assignments.grading'] = None  # the hidden tests cannot run\n"
            "raise ValueError('HIDDEN ' + repr(_data) * 20)\n")
    nb = notebook(GOOD)
    nb["cells"].append({"cell_type": "code", "metadata": {}, "source": leak, "outputs": [],
                        "execution_count": None})
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    (tmp_path / "subs" / "lee").mkdir(parents=True)
    (tmp_path / "subs" / "lee" / "ch03_exercises.ipynb").write_text(json.dumps(nb))
    out = tmp_path / "out" / "grades.csv"
    rows = grade.grade(tmp_path / "subs", out, 90, tmp_path / "ref", memory_gb=3.0, secret="s" * 40)
    (row,) = rows
    assert row["status"] == "no results" and "cells you wrote that raised: ValueError: HIDDEN" in row["reason"], row
    shown = row["reason"].split("cells you wrote that raised: ", 1)[1]
    assert len(shown) <= len("ValueError: ") + grade.SHORT_ERROR + 2 and "\n" not in shown, shown
    (feedback,) = (out.parent / "feedback").iterdir()
    assert feedback.read_text().count("HIDDEN") == 1 and "tensor(" not in feedback.read_text()[
        feedback.read_text().index("HIDDEN") + 150:]


# --------------------------------------------------------------------------- cases that share inputs


def test_what_one_call_writes_into_its_inputs_does_not_change_later_cases():
    """A fresh attacker's read: cases may share an input tensor (chapter 9's `big` batch feeds several cases
    and their checks). The judge once copied the student's view of the inputs after a call into the
    grader's tensors for that case's check, so a function that wrote into them (attacker S7: chapter 9's
    tokens filled with <pad>) changed what its own case was checked against. Every check now sees the
    grader's untouched copy, and the tensors are the same after a verdict as before it; a case about
    writing in place (``unchanged``) compares the inputs after the call with that copy on their own."""
    from attention_book.assignments import Case
    from attention_book.assignments.grading import _verdict

    shared = torch.arange(6.0).reshape(1, 2, 3)
    original = shared.clone()
    seen = []
    case = Case("writes", (shared,), lambda got: seen.append(shared.clone()) or None)
    record = {"status": "ok", "got": torch.zeros(1), "args": (torch.full((1, 2, 3), 7.0),)}
    assert _verdict(case, record, visible=False)["passed"]
    assert torch.equal(seen[0], original), "the check sees the inputs as the grader drew them"
    assert torch.equal(shared, original), "and so does the next case"
    strict = Case("keeps its inputs", (shared,), lambda got: None, unchanged="it wrote into its inputs")
    assert not _verdict(strict, record, visible=False)["passed"]
    assert "it wrote into its inputs" in _verdict(strict, record, visible=False)["why"]
    assert _verdict(strict, dict(record, args=(original.clone(),)), visible=False)["passed"]
    assert torch.equal(shared, original)


def test_each_masked_softmax_case_tests_what_its_label_says_at_every_seed(tmp_path):
    """A fresh instructor's read: four byte-identical notebooks with one bug (a -1e6 fill, rows with no
    allowed key left uniform) scored 2.22, 4.44, 2.22 and 3.33 of 10 with one secret: whether 'a window and
    padding' or 'not modified in place' met a row with no allowed key depended on each student's draw. Now
    the cases about the window, the fill value and in-place writes never have such a row, and the cases
    about padding (a window of one, long padding, no real token, float16) always do, at every seed."""
    from attention_book.assignments.ch03 import _keep

    without = {"a window and padding", "scores far below -1e6",
               "a check for writes in place (the caller's scores after the call)",
               "no padding"}
    with_empty = {"a window of one: each token sees only itself", "padding queries far past the end see no key",
                  "a sequence with no real token", "float16 scores stay finite, with empty rows"}
    for seed in range(40):
        _, cases = grading_cases("masked_softmax", seed)
        empty = {c.name: bool((~_keep(c.args[0].shape[-1], c.args[1], c.args[2]).any(-1)).any()) for c in cases}
        assert not any(empty[n] for n in without), (seed, empty)
        assert all(empty[n] for n in with_empty), (seed, empty)
        padded = next(c for c in cases if c.name == "a window and padding").args[1]
        assert (padded < padded.max()).any() and int(padded.max()) == cases[0].args[0].shape[-1], (seed, padded)

    # the instructor's notebook: identical code gets one grade whoever hands it in
    bug = function("""
def my_masked_softmax(scores, valid_lens, window):
    n = scores.shape[-1]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = (j <= i) & (j > i - window) & (j[None] < valid_lens[:, None, None])
    return torch.softmax(scores.masked_fill(~keep, -1e6), dim=-1)
""")
    passed = {sum(c["passed"] for c in results(tmp_path, bug, offset=seed)) for seed in range(8)}
    assert len(passed) == 1, passed


def test_out_in_a_folder_the_grader_did_not_make(tmp_path, capsys):
    """A fresh attacker (issue 37, 7/10): --out /tmp/grades.csv chmodded /tmp to 0700 (its sticky bit
    lost; as root, /tmp itself), and --out grades.csv at the repository root wrote the secret, the grades
    and the feedback there, unignored. The grader never chmods a folder it did not make, and refuses, in
    one line and before writing anything, an existing folder that holds files and is not its own (no
    .grade.lock) nor the documented grades/; a new or empty folder is taken, its mode kept."""
    (tmp_path / "subs").mkdir()
    shared = tmp_path / "shared"  # as /tmp: 1777, others' files in it
    shared.mkdir()
    (shared / "someone_elses.txt").write_text("x")
    os.chmod(shared, 0o1777)
    repo = tmp_path / "repo"  # as the repository root
    repo.mkdir()
    (repo / "README.md").write_text("x")
    for folder in (shared, repo):
        before = sorted(p.name for p in folder.iterdir())
        with pytest.raises(SystemExit) as stop:
            grade.main([str(tmp_path / "subs"), "--out", str(folder / "grades.csv")])
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and len(err.splitlines()) == 1, err
        assert "holds files the grader did not write" in err and str(folder / "grades" / "grades.csv") in err
        assert sorted(p.name for p in folder.iterdir()) == before
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    # an empty folder of the instructor's is used, its mode kept; a new one is made 0700
    empty = tmp_path / "empty"
    empty.mkdir()
    os.chmod(empty, 0o1777)
    for out in (empty, tmp_path / "new"):
        grade.main([str(tmp_path / "subs"), "--out", str(out / "grades.csv"), "--reference", str(tmp_path)])
        assert (out / "grades.csv").is_file() and (out / ".gitignore").is_file()
    assert stat.S_IMODE(empty.stat().st_mode) == 0o1777
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    # and again into each: the grader's own now (.grade.lock)
    grade.main([str(tmp_path / "subs"), "--out", str(empty / "grades.csv"), "--reference", str(tmp_path)])
    assert stat.S_IMODE(empty.stat().st_mode) == 0o1777


def test_the_printout_counts_in_the_right_number(tmp_path, capsys):
    """A fresh instructor (issue 37, 8/10): "Wrote 1 rows", "1 ignored files", "0 ignored files"."""
    (tmp_path / "subs" / "ada").mkdir(parents=True)
    grade.main([str(tmp_path / "subs"), "--out", str(tmp_path / "a" / "grades.csv"), "--reference", str(tmp_path)])
    out = capsys.readouterr().out
    assert "Wrote 0 rows to" in out and "no ignored files (sandbox" in out, out
    (tmp_path / "subs" / "ada" / "ch03_exercises.ipynb").write_text("not a notebook")
    (tmp_path / "subs" / "ada" / "notes.txt").write_text("x")
    grade.main([str(tmp_path / "subs"), "--out", str(tmp_path / "b" / "grades.csv"), "--reference",
                str(ROOT / "notebooks"), "--secret", "s" * 40])
    out = capsys.readouterr().out
    assert "Wrote 1 row to" in out and ", 1 ignored file to ignored.csv" in out, out
