"""Grading a class safely (scripts/grade.py, attention_book.assignments.grading).

The main test grades a fake class of hostile and ordinary submissions of the chapter 3
assignment (masked softmax) and checks every row.
"""

from __future__ import annotations

import csv
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import attention_book as ab
from attention_book.assignments import hidden_cases
from attention_book.assignments.grading import GradingError, judge, run_hidden

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
grade = importlib.import_module("grade")

SEED = 424242
TIMEOUT = 25

GOOD = '''
def my_masked_softmax(X, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None].expand(X.shape[0], X.shape[1])
    mask = torch.arange(X.shape[-1], device=X.device)[None, None, :] < valid_lens[..., None]
    return torch.softmax(X.masked_fill(~mask, torch.finfo(X.dtype).min), dim=-1) * mask
'''
# Fills with -1e6: right for ordinary scores, wrong for empty rows, scores below -1e6 and float16.
WRONG = '''
def my_masked_softmax(X, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None].expand(X.shape[0], X.shape[1])
    mask = torch.arange(X.shape[-1])[None, None, :] < valid_lens[..., None]
    return torch.softmax(X.masked_fill(~mask, -1e6), dim=-1)
'''
SCAFFOLD = '''
def my_masked_softmax(X, valid_lens=None):
    raise NotImplementedError
'''
CHECK = "report = ab.assignments.check_masked_softmax(my_masked_softmax)"


def notebook(*cells: str, checker: str = CHECK) -> dict:
    code = [{"cell_type": "code", "metadata": {}, "source": "import torch\nimport attention_book as ab",
             "outputs": [], "execution_count": None}]
    code += [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in cells]
    code.append({"cell_type": "code", "metadata": {"tags": ["checker"]}, "source": checker, "outputs": [],
                 "execution_count": None})
    return {"cells": code, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                      "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def earned(source: str) -> tuple[int, int]:
    """What a function's real outputs earn on the grader's hidden cases (judged here, directly)."""
    namespace: dict = {"torch": torch, "ab": ab}
    exec(source, namespace)
    with hidden_cases(SEED):
        report = ab.assignments.check_masked_softmax(namespace["my_masked_softmax"], verbose=False)
    return report.passed, report.total


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    sandbox = grade.Sandbox.detect()
    if sandbox.kind == "none" and "cannot create namespaces" in sandbox.missing[0]:
        pytest.skip(f"this machine refuses the sandbox's namespaces: {sandbox.missing[0]}")
    if sandbox.kind == "none":  # never run these submissions unconfined: they attack the machine
        pytest.fail("the grader's sandbox is not available (" + "; ".join(sandbox.missing[:1]) + "). Install "
                    "bubblewrap: sudo apt-get install bubblewrap (make test does this when run as root)",
                    pytrace=False)
    base = tmp_path_factory.mktemp("class")
    subs, reference, out = base / "submissions", base / "reference", base / "out"
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    victim = subs / "bob" / "ch03_exercises.ipynb"
    package_file = Path(ab.__file__).resolve().parent / "attention.py"
    marker = f"grader-test-orphan-{time.time_ns()}"
    class_ = {
        "bob": notebook(GOOD),
        "carl-wrong": notebook(WRONG),
        "dana-raises": notebook("def my_masked_softmax(X, valid_lens=None):\n    raise ValueError('oops')"),
        "erin-loop": notebook(GOOD, "while True:\n    pass"),
        "finn-gil": notebook(GOOD, "sum(range(10**13))"),
        "gus-forged-log": notebook(SCAFFOLD, "import os\nfor v in ('ATTENTION_BOOK_GRADE_LOG', 'GRADE_LOG'):\n"
                                   "    p = os.environ.get(v)\n    if p: open(p, 'a').write('{\"assignment\": "
                                   "\"masked_softmax\", \"passed\": 7, \"total\": 7, \"score\": 1.0}\\n')\n"
                                   "open('results.pt', 'w').write('forged')"),
        "hal-own-checks": notebook(SCAFFOLD, checker="from attention_book.assignments import Case, run_checks\n"
                                   "report = run_checks('masked_softmax', lambda *a: 0, [Case('x')])"),
        "ivy-extra-name": notebook(GOOD, checker=CHECK + "\nab.assignments.check_softmax_pool(lambda s, v: v)\n"
                                   "check_=ab.assignments.check_masked_softmax\n"
                                   "# check_=HYPERLINK(\"http://x\")(1)"),
        "aaa-rewrites-bob": notebook(WRONG, f"open({str(victim)!r}, 'w').write('[]')"),
        "jo-edits-package": notebook(WRONG, f"open({str(package_file)!r}, 'a').write('\\nraise SystemExit\\n')"),
        "kim-background": notebook(GOOD, "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', "
                                   f"'import time; time.sleep(600)  # {marker}'], start_new_session=True)"),
        "lea-prints-100mb": notebook(GOOD, "print('x' * 100_000_000)"),
        "max-hands-in-package": notebook(checker="report = ab.assignments.check_masked_softmax(ab.masked_softmax)"),
        "ned-wraps-package": notebook("ref = ab.masked_softmax\ndef my_masked_softmax(X, valid_lens=None):\n"
                                      "    return ref(X, valid_lens)"),
        "=cmd|' -C calc'!A0": notebook(GOOD),
    }
    for who, nb in class_.items():
        (subs / who).mkdir(parents=True)
        (subs / who / "ch03_exercises.ipynb").write_text(json.dumps(nb))
    (subs / "oli-invalid-json").mkdir()
    (subs / "oli-invalid-json" / "ch03_exercises.ipynb").write_text("{not json")
    (subs / "pat-empty-list").mkdir()
    (subs / "pat-empty-list" / "ch03_exercises.ipynb").write_text("[]")
    package_before = package_file.read_bytes()
    start = time.monotonic()
    rows = grade.grade(subs, out / "grades.csv", TIMEOUT, reference, memory_gb=8.0, seed=SEED)
    seconds = time.monotonic() - start
    orphans = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return dict(rows=rows, out=out, seconds=seconds, count=len(class_) + 2, victim=victim,
                package_unchanged=package_file.read_bytes() == package_before, orphans=orphans,
                bob_text=victim.read_text())


def row(graded, who: str) -> dict:
    found = [r for r in graded["rows"] if r["student"] == who]
    assert len(found) == 1, f"{who}: {len(found)} rows: {found}"
    return found[0]


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_every_student_gets_what_their_outputs_earn(graded):
    good, wrong = earned(GOOD), earned(WRONG)
    assert good == (7, 7) and 0 < wrong[0] < 7
    for who in ("bob", "ivy-extra-name", "kim-background", "=cmd|' -C calc'!A0"):
        r = row(graded, who)
        assert (r["passed"], r["total"], r["status"]) == (7, 7, "graded"), r
        assert r["points"] == 10.0
    for who in ("carl-wrong", "aaa-rewrites-bob", "jo-edits-package"):
        r = row(graded, who)
        assert (r["passed"], r["total"], r["status"]) == (*wrong, "graded"), r
    r = row(graded, "dana-raises")
    assert (r["passed"], r["total"]) == (0, 7) and "ValueError: oops" in r["reason"]
    for who in ("gus-forged-log", "hal-own-checks"):
        r = row(graded, who)
        assert (r["passed"], r["points"], r["status"]) == (0, 0.0, "not implemented"), r
    for who in ("max-hands-in-package", "ned-wraps-package"):
        r = row(graded, who)
        assert r["passed"] == 0 and r["total"] == 7, r
    assert "package's own function" in row(graded, "max-hands-in-package")["reason"]
    assert "not available while" in row(graded, "ned-wraps-package")["reason"]


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_broken_and_hostile_submissions_are_flagged_not_scored(graded):
    for who in ("erin-loop", "finn-gil"):
        assert row(graded, who)["status"] == "timeout" and row(graded, who)["points"] == 0.0
    for who in ("oli-invalid-json", "pat-empty-list"):
        assert row(graded, who)["status"] == "unreadable" and row(graded, who)["points"] == 0.0
    r = row(graded, "lea-prints-100mb")
    assert r["status"] in ("graded", "no results") and (r["points"] == 10.0 or r["status"] == "no results"), r


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_nobody_else_is_affected_and_nothing_survives(graded):
    assert graded["bob_text"] != "[]", "a submission rewrote another student's notebook"
    assert graded["package_unchanged"], "a submission edited the package"
    assert not graded["orphans"], f"a submission's background process survived grading: {graded['orphans']}"
    assert graded["seconds"] < graded["count"] * TIMEOUT, (
        f"grading took {graded['seconds']:.0f} s, more than the sum of the time limits")
    assignments = {r["assignment"] for r in graded["rows"]}
    assert assignments <= {"masked_softmax"}, f"unexpected assignment rows: {assignments}"


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_files_are_well_formed_and_formula_safe(graded):
    out = graded["out"]
    with (out / "grades.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(graded["rows"]) == graded["count"]
    cells = [v for r in rows for v in r.values()]
    assert not [v for v in cells if v[:1] in ("=", "+", "@")], "a cell a spreadsheet would run as a formula"
    assert any(v.startswith("'=cmd") for v in cells)
    with (out / "gradebook.csv").open(newline="", encoding="utf-8") as f:
        book = list(csv.reader(f))
    assert book[0] == ["Student", "SIS Login ID", "ch03 masked_softmax (10 pts)", "Total"]
    totals = {r[0]: float(r[-1]) for r in book[1:]}
    assert totals["bob"] == 10.0 and totals["erin-loop"] == 0.0 and len(totals) == graded["count"]
    feedback = (out / "feedback" / "carl-wrong.md").read_text()
    assert "hint:" in feedback and "valid length 0" in feedback


def test_judge_rejects_malformed_results(tmp_path):
    path = tmp_path / "r.pt"
    run_hidden("split_heads", lambda X, h: X, 5, str(path))
    data = torch.load(path, weights_only=True)
    with pytest.raises(GradingError, match="another seed"):
        judge("split_heads", 6, data)
    with pytest.raises(GradingError, match="results for"):
        judge("split_heads", 5, dict(data, records=data["records"][:-1]))
    with pytest.raises(GradingError, match="unknown form"):
        judge("split_heads", 5, dict(data, records=[{"status": "passed"}] * len(data["records"])))
    assert judge("split_heads", 5, data).passed == 0


def test_in_place_writes_are_seen_outside(tmp_path):
    namespace: dict = {"torch": torch}
    exec(GOOD, namespace)

    def writes_in_place(X, valid_lens=None):
        out = namespace["my_masked_softmax"](X.clone(), valid_lens)
        X.zero_()
        return out

    path = tmp_path / "r.pt"
    run_hidden("masked_softmax", writes_in_place, 9, str(path))
    report = judge("masked_softmax", 9, torch.load(path, weights_only=True))
    assert ("X is not modified in place", False) in [(n, ok) for n, ok, _ in report.results]


def test_safe_cells():
    assert grade.safe("=1+1") == "'=1+1" and grade.safe("-2") == "'-2" and grade.safe("ok") == "ok"
    assert grade.safe(-2.5) == -2.5 and grade.safe("a\nb\x00") == "a b"
