"""The Gradescope autograder bundle (issue 37): what the zip holds, and that its run_autograder step
grades a submission in Gradescope's layout into a results.json of Gradescope's format."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_grade import GOOD, notebook  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gradescope_bundle.py"), "build", "--out", str(out),
                          "--notebooks", "ch03_exercises", "--course", str(ROOT / "course.example.toml")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return out


def test_the_bundle_holds_setup_run_and_the_checkers(bundle):
    with zipfile.ZipFile(bundle) as z:
        names = set(z.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}
        setup = z.read("setup.sh").decode()
        run = z.read("run_autograder").decode()
        settings = json.loads(z.read("gradescope.json"))
    # Gradescope extracts the whole zip into /autograder/source: everything sits at the zip's root, where
    # setup.sh's `pip install /autograder/source` and run_autograder's `cd /autograder/source` expect it
    # (an attacker found the bundle's files one folder too deep, under source/source/).
    assert {"setup.sh", "run_autograder", "scripts/grade.py", "scripts/gradescope_bundle.py",
            "src/attention_book/assignments/ch03.py", "src/attention_book/assignments/grading.py",
            "notebooks/ch03_exercises.ipynb", "book/_ext/kernel_poll.py", "pyproject.toml",
            "course/course.toml", "course/course_example/extra_cases.py"} <= names
    assert not any(n.startswith("source/") for n in names)
    assert modes["setup.sh"] & stat.S_IXUSR and modes["run_autograder"] & stat.S_IXUSR
    assert setup.startswith("#!/usr/bin/env bash") and "bubblewrap" in setup and "pip install /autograder/source" in setup
    assert "gradescope_bundle.py run" in run and len(settings["secret"]) >= 32
    # the installed package (with the checkers' answers) is root's only, after the install
    install = setup.index("pip install /autograder/source")
    assert setup.index('chmod -R go-rwx "$(/autograder/venv/bin/python -c \'import attention_book') > install
    assert not any(n.startswith("notebooks/") and "ch03" not in n for n in names)
    # the tested torch, not whatever is newest; no roster or times of the class in the bundle
    assert 'pip install "torch==2.13.0"' in setup
    assert not any(n.endswith(("roster.csv", "submitted.csv")) for n in names)
    with zipfile.ZipFile(bundle) as z:
        shipped = z.read("course/course.toml").decode()
    assert "[roster]" not in shipped and "times =" not in shipped and "[assignments.masked_softmax]" in shipped


@pytest.mark.slow
def test_run_autograder_grades_a_submission_in_gradescopes_layout(bundle, tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    if __import__("grade").Sandbox.detect().kind == "none":
        pytest.skip("the grader's sandbox (bubblewrap) is not available here")
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as z:
        z.extractall(root / "source")  # as Gradescope does: the whole zip into /autograder/source
    (root / "submission").mkdir()
    (root / "submission" / "ch03_exercises (2).ipynb").write_text(json.dumps(notebook(GOOD)))
    (root / "submission" / "ch03_exercises (3).ipynb").symlink_to(root / "source" / "notebooks" /
                                                                   "ch03_exercises.ipynb")  # a link: ignored
    # handed in two days late (the example course: due 2027-04-30 23:59 Berlin, 10 % a day)
    (root / "submission_metadata.json").write_text(json.dumps({"users": [{"id": 4242, "email": "a@b.c"}],
                                                               "created_at": "2027-05-02T12:00:00.5+02:00"}))
    run = subprocess.run([sys.executable, str(root / "source" / "scripts" / "gradescope_bundle.py"), "run"],
                         capture_output=True, text=True, cwd=root / "source",
                         env=dict(os.environ, AUTOGRADER_ROOT=str(root), OMP_NUM_THREADS="1", GRADE_TIMEOUT="300"))
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads((root / "results" / "results.json").read_text())
    assert data["score"] > 0 and data["tests"] and all(t["status"] in ("passed", "failed") for t in data["tests"])
    # the example course gives masked_softmax 20 points and one extra hidden case of the instructor's
    assert round(sum(t["max_score"] for t in data["tests"]), 6) == 20.0  # the last case takes what rounding left
    assert any("large scores" in t["name"] for t in data["tests"])
    assert "Feedback" in data["output"]
    assert data["score"] == pytest.approx(16.0)  # every case passed, 20 points less 2 late days of 10 %
    assert "2 day(s) late" in data["output"]
    # which hidden cases failed is only in the tests shown after the due date, never in the output
    assert all(t["visibility"] == "after_due_date" for t in data["tests"] if "hidden case" in t["name"])


# A notebook that, when nothing isolates it, rewrites the checkers the judge will import (every case then
# passes), steals the bundle's secret and writes a results.json of its own.
FORGE = '''
import glob, os, pathlib
import attention_book.assignments.ch03 as _ch03
targets = [_ch03.__file__] + glob.glob({src!r} + "/**/assignments/ch03.py", recursive=True)
forged = []
for path in targets:
    try:
        text = pathlib.Path(path).read_text()
        pathlib.Path(path).write_text(text.replace("return check(got)", "return None"))
        forged.append(path)
    except OSError as err:
        forged.append(f"refused: {{err.strerror}}")
for path, what in (({secret!r}, "secret"), ({results!r}, "results")):
    try:
        if what == "secret":
            pathlib.Path({leak!r}, "secret").write_text(pathlib.Path(path).read_text())
        else:
            pathlib.Path(path).write_text('{{"score": 99.0}}')
    except OSError:
        pass
pathlib.Path({leak!r}, "ran").write_text(str(os.getuid()) + " " + repr(forged))
def my_masked_softmax(scores, valid_lens, window):
    return torch.zeros_like(scores)
'''


def _unpack(bundle, root):
    with zipfile.ZipFile(bundle) as z:
        z.extractall(root / "source")  # as Gradescope does: the whole zip into /autograder/source
    (root / "submission").mkdir()


@pytest.mark.slow
def test_where_bubblewrap_cannot_start_the_notebook_cannot_forge_its_grade(bundle, tmp_path):
    """Gradescope's container may refuse bubblewrap's namespaces. The notebook then runs as an unprivileged
    user: it cannot rewrite the checkers, read the secret or write results.json; the judge loaded the
    checkers before it ran. Without such a user nothing runs: results.json says 'NOT GRADED'."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("dropping to an unprivileged user needs root, as in Gradescope's container")
    root = tmp_path / "autograder"
    _unpack(bundle, root)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    leak = Path(tempfile.mkdtemp(prefix="g37-leak-"))
    leak.chmod(0o777)
    try:
        cell = FORGE.format(src=str(root / "source" / "src"), secret=str(root / "source" / "gradescope.json"),
                            results=str(root / "results" / "results.json"), leak=str(leak))
        (root / "submission" / "ch03_exercises.ipynb").write_text(json.dumps(notebook(cell)))
        checker = (root / "source" / "src" / "attention_book" / "assignments" / "ch03.py").read_text()
        env = dict(os.environ, AUTOGRADER_ROOT=str(root), OMP_NUM_THREADS="1", GRADE_TIMEOUT="180",
                   PATH=f"{fake}:{os.environ['PATH']}", PYTHONPATH=str(root / "source" / "src"),
                   GRADE_SANDBOX_USER="nobody")
        command = [sys.executable, str(root / "source" / "scripts" / "gradescope_bundle.py"), "run"]
        run = subprocess.run(command, capture_output=True, text=True, cwd=root / "source", env=env)
        data = json.loads((root / "results" / "results.json").read_text())
        assert (root / "source" / "src" / "attention_book" / "assignments" / "ch03.py").read_text() == checker
        assert data["score"] == 0.0 and not (leak / "secret").exists(), data
        if "cannot run this Python" in data["output"]:
            # here uid 65534 cannot even run the grader's Python (it lies under a private folder): so nothing ran
            assert run.returncode == 1 and data["output"].startswith("NOT GRADED") and not (leak / "ran").exists()
            return
        assert run.returncode == 0, run.stderr[-3000:]
        ran = (leak / "ran").read_text()
        assert ran.startswith("65534 "), ran  # the notebook ran, as nobody
        assert data["score"] == 0.0 and data["tests"], data  # zeros everywhere: no case passes
        assert (root / "source" / "src" / "attention_book" / "assignments" / "ch03.py").read_text() == checker
        assert not (leak / "secret").exists()
        # no bubblewrap and no user to run as: not graded, and the notebook never ran
        (leak / "ran").unlink()
        run = subprocess.run(command, capture_output=True, text=True, cwd=root / "source",
                             env=dict(env, GRADE_SANDBOX_USER="no-such-user-g37"))
        data = json.loads((root / "results" / "results.json").read_text())
        assert run.returncode == 1 and data["output"].startswith("NOT GRADED") and not (leak / "ran").exists()
        assert "no user 'no-such-user-g37'" in data["output"]
    finally:
        shutil.rmtree(leak, ignore_errors=True)
