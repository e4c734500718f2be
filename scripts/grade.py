"""Grade a folder of completed student notebooks.

Usage: python scripts/grade.py SUBMISSIONS [--out grades.csv] [--timeout 600] [--reference notebooks]

Every ``*.ipynb`` below SUBMISSIONS (e.g. ``submissions/<student>/ch03_exercises.ipynb``)
is executed in its own process with a time limit. The autograders it calls
(``ab.assignments.check_*``) append their reports to a log; the grader turns them
into one CSV row per (notebook, assignment): passed cases, total cases, score in
[0, 1] and a status. A notebook that errors, loops or never reaches an
assignment still gets a row per expected assignment, with score 0 and the reason;
the remaining notebooks are graded as usual.

Expected assignments are the ``check_*`` calls in the notebook's ``checker`` cells
and in the reference notebook of the same name (so deleting a checker cell does
not delete the assignment).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from editions import source, tags  # noqa: E402

from attention_book.assignments import GRADE_LOG_ENV  # noqa: E402

CHECK_CALL = re.compile(r"check_(\w+)\s*\(")

_WORKER = r"""
import sys, nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
nb = nbformat.read(sys.argv[1], as_version=4)
client = NotebookClient(nb, timeout=int(sys.argv[2]), kernel_name="python3", allow_errors=True,
                        resources={"metadata": {"path": sys.argv[3]}})
client.execute()
errors = []
for cell in nb.cells:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            errors.append(f"{out.get('ename')}: {out.get('evalue')}"[:200])
print("ERRORS:" + " | ".join(errors[:3]))
"""


def expected_assignments(nb: dict) -> list[str]:
    names = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code" and "checker" in tags(cell):
            for name in CHECK_CALL.findall(source(cell)):
                if name not in names:
                    names.append(name)
    return names


def run_notebook(path: Path, timeout: int, log: Path) -> tuple[str, str]:
    """Execute ``path``; return (status, reason). Status: ok, errors, timeout, crashed."""
    env = dict(os.environ, **{GRADE_LOG_ENV: str(log), "MPLBACKEND": "Agg"})
    env.setdefault("ATTENTION_BOOK_SIZE", "ci")
    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(path), str(timeout), str(path.parent)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the kernel too: it is in the same session
        proc.communicate()
        return "timeout", f"did not finish within {timeout} s"
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["no message"])[-1]
        return "crashed", f"could not be executed: {last[:200]}"
    errors = next((line[7:] for line in out.splitlines() if line.startswith("ERRORS:")), "")
    return ("errors", f"cells raised: {errors}") if errors else ("ok", "")


def grade(submissions: Path, out_csv: Path, timeout: int, reference: Path | None) -> list[dict]:
    rows = []
    notebooks = sorted(p for p in submissions.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    for path in notebooks:
        who = str(path.parent.relative_to(submissions)) if path.parent != submissions else ""
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            nb, status, reason = {"cells": []}, "unreadable", f"not a valid notebook: {err}"
        else:
            status, reason = None, ""
        expected = expected_assignments(nb)
        if reference is not None and (reference / path.name).exists():
            ref = json.loads((reference / path.name).read_text(encoding="utf-8"))
            expected += [n for n in expected_assignments(ref) if n not in expected]
        reports = {}
        if status is None:
            with tempfile.TemporaryDirectory() as tmp:
                log = Path(tmp) / "grades.jsonl"
                status, reason = run_notebook(path, timeout, log)
                if log.exists():
                    for line in log.read_text(encoding="utf-8").splitlines():
                        rep = json.loads(line)
                        reports[rep["assignment"]] = rep  # the last run of a checker counts
        for name in expected + [n for n in reports if n not in expected]:
            rep = reports.get(name)
            if rep is None:
                row = dict(passed=0, total=0, score=0.0, status=status if status != "ok" else "not reached",
                           reason=reason or "the checker never ran")
            elif rep["not_implemented"]:
                row = dict(passed=0, total=rep["total"], score=0.0, status="not implemented", reason="")
            else:
                why = "; ".join(f"{f['case']}: {f['why']}" for f in rep["failures"])[:300]
                row = dict(passed=rep["passed"], total=rep["total"], score=round(rep["score"], 4),
                           status="graded", reason=why)
            rows.append(dict(student=who, notebook=path.name, assignment=name, **row))
        if not expected and not reports:
            rows.append(dict(student=who, notebook=path.name, assignment="", passed=0, total=0, score=0.0,
                             status=status, reason=reason or "no assignment in this notebook"))
        print(f"{who + '/' if who else ''}{path.name}: {status}" + (f" ({reason})" if reason else ""))
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    with out_csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["student", "notebook", "assignment", "passed", "total", "score",
                                               "status", "reason"])
        writer.writeheader()
        writer.writerows(rows)
    print(f"Wrote {len(rows)} rows to {out_csv}")
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=Path)
    parser.add_argument("--out", type=Path, default=Path("grades.csv"))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per notebook")
    parser.add_argument("--reference", type=Path, default=Path(__file__).resolve().parent.parent / "notebooks")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a directory of notebooks")
    if args.timeout < 1:
        parser.error("--timeout must be at least 1 second")
    grade(args.submissions, args.out, args.timeout, args.reference if args.reference.is_dir() else None)


if __name__ == "__main__":
    main()
