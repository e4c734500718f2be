"""A small class graded end to end (issue 37): the same grades again after a regrade, and from a
parallel run interrupted and resumed; a kernel that dies explained; the LMS files from the run.

Slow (a dozen notebooks run in the sandbox); tests/test_grade.py grades the hostile class.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
from test_grade import GOOD, SCAFFOLD, STOPS, WRONG, notebook  # noqa: E402

# Every test here reads the class graded once by the module's fixtures: one xdist group keeps them on
# one worker under make test-unit (--dist loadgroup), which grades it once instead of once per worker.
pytestmark = pytest.mark.xdist_group("small_class")

SECRET = "a course secret for the tests, 32+ characters long"
CLASS = {"bob": GOOD, "carl": WRONG, "kit": STOPS,
         "dora": GOOD + "\nimport ctypes\nctypes.string_at(0)  # the kernel dies here"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    sandbox = __import__("grade").Sandbox.detect()
    if sandbox.kind == "none":
        pytest.skip("the grader's sandbox (bubblewrap) is not available here")
    base = tmp_path_factory.mktemp("small-class")
    (base / "ref").mkdir()
    (base / "ref" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    for who, source in CLASS.items():
        (base / "subs" / who).mkdir(parents=True)
        (base / "subs" / who / "ch03_exercises.ipynb").write_text(json.dumps(notebook(source)))
    (base / "subs" / ".backup").mkdir()
    (base / "subs" / ".backup" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(GOOD)))
    (base / "roster.csv").write_text("folder,name,id,sis_user_id,login,section\n"
                                     "bob,Bob B,1,S1,bobb,A\ncarl,Carl C,2,S2,carlc,A\nkit,Kit K,3,S3,kitk,B\n"
                                     "dora,Dora D,4,S4,dorad,B\neve,Eve E,5,S5,evee,B\n")
    (base / "course.toml").write_text('[roster]\nfile = "roster.csv"\n[assignments.masked_softmax]\n'
                                      'canvas_id = "77"\ntitle = "Masked softmax"\n')
    return base


def run(base: Path, out: str, *extra: str, wait: bool = True, tmp: Path | None = None):
    argv = [sys.executable, str(ROOT / "scripts" / "grade.py"), str(base / "subs"), "--out",
            str(base / out / "grades.csv"), "--reference", str(base / "ref"), "--timeout", "120", "--memory-gb", "3",
            "--course", str(base / "course.toml"), "--secret", SECRET, *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", **({"TMPDIR": str(tmp)} if tmp else {}))
    if not wait:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return subprocess.run(argv, capture_output=True, text=True, env=env)


def table(path: Path, drop=("seconds",)) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def serial(setup):
    done = run(setup, "one")
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_scores_statuses_and_exports(setup, serial):
    rows = {r["student"]: r for r in table(setup / "one" / "grades.csv")}
    total = rows["bob"]["total"]
    assert (rows["bob"]["status"], rows["bob"]["passed"], rows["bob"]["points"]) == ("graded", total, "10.0")
    assert rows["kit"]["total"] == total and int(rows["kit"]["passed"]) <= 2
    assert rows["dora"]["status"] == "kernel died" and rows["dora"]["total"] == total
    assert rows["eve"]["status"] == "not submitted" and rows["eve"]["points"] == "" and rows["eve"]["total"] == total
    assert all(r["seed"] and r["secret_id"] for who, r in rows.items() if who != "eve")
    feedback = next((setup / "one" / "feedback").glob("dora-*.md")).read_text()
    assert "kernel" in feedback and "died" in feedback and "DeadKernelError" in feedback
    canvas = list(csv.reader((setup / "one" / "canvas.csv").open()))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Masked softmax (77)"]
    by_login = {r[3]: r for r in canvas[1:]}
    assert by_login["bobb"][-1] == "10.0" and by_login["evee"][-1] == "" and by_login["dorad"][-1] == "0.0"
    assert json.loads(next((setup / "one" / "gradescope").glob("bob-*/results.json")).read_text())["score"] == 10.0
    ignored = (setup / "one" / "ignored.csv").read_text()
    assert ".backup" in ignored


@pytest.mark.slow
def test_a_regrade_gives_the_same_score(setup, serial):
    before = table(setup / "one" / "grades.csv")
    again = run(setup, "one", "--regrade", "carl")
    assert again.returncode == 0, again.stderr[-3000:]
    lines = [line for line in again.stdout.splitlines() if line.startswith("regrade carl")]
    assert lines and all(line.endswith(": the same") for line in lines), again.stdout[-2000:]
    assert table(setup / "one" / "grades.csv") == before
    assert sum("/ch03_exercises.ipynb" in line for line in again.stdout.splitlines()) == 1, "only carl ran again"


@pytest.mark.slow
def test_a_parallel_run_interrupted_and_resumed_gives_the_same_gradebook(setup, serial):
    """Two notebooks at a time (--jobs 2), stopped by SIGTERM once one is graded, then resumed: the
    partial run is marked and leaves nothing behind, and the resumed class has the serial run's
    grades and LMS files. (One run checks both parallel grading and resuming: a class graded once
    more for each took about 130 s of CI's unit stage under load.)"""
    scratch = Path(tempfile.mkdtemp(prefix="grade-scratch-", dir="/tmp"))  # the grader's TMPDIR: what it leaves
    scratch.chmod(0o755)
    proc = run(setup, "three", "--jobs", "2", wait=False, tmp=scratch)
    journal = setup / "three" / "grades.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (journal.exists() and journal.read_text().strip()):
        time.sleep(0.5)
    assert journal.exists() and journal.read_text().strip(), "no notebook was graded in 300 s"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out[-2000:], err[-2000:])
    assert (setup / "three" / "PARTIAL.txt").exists() and (setup / "three" / "gradebook.partial.csv").exists()
    assert not (setup / "three" / "canvas.csv").exists(), "a partial run must not write an LMS upload"
    left = list(scratch.glob("grade-run-*"))
    shutil.rmtree(scratch, ignore_errors=True)
    assert not left, f"run folders left behind: {left}"
    graded_before = len(journal.read_text().splitlines())
    resumed = run(setup, "three", "--resume", "--jobs", "2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    graded_lines = [line for line in resumed.stdout.splitlines() if "/ch03_exercises.ipynb" in line]
    assert len(graded_lines) == len(CLASS) - graded_before, resumed.stdout[-2000:]
    assert not (setup / "three" / "PARTIAL.txt").exists()
    for name in ("gradebook.csv", "canvas.csv", "moodle.csv"):
        assert (setup / "one" / name).read_text() == (setup / "three" / name).read_text(), name
    assert table(setup / "one" / "grades.csv") == table(setup / "three" / "grades.csv")
