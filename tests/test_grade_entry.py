"""Grading from a fresh clone, without the venv step (issue 37, a fresh instructor's read).

`make grade` depended on `make venv`: an instructor whose environment already had the book's
dependencies met a full reinstall check first (and a reinstall when the lock's stamp differed). Now
`make grade` and `make gradescope-bundle` install nothing: they run on .venv's Python when there is one,
else on python3, or on GRADE_PYTHON; and `python scripts/grade.py` works from a clone whose Python has the
dependencies but not the package installed (it grades with the clone's own src/).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _dry_run(target: str, *args: str) -> str:
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", "-C", str(ROOT), target, *args], capture_output=True, text=True,
                          check=True, timeout=60)
    return done.stdout


@pytest.mark.parametrize("target", ["grade", "gradescope-bundle"])
def test_make_grade_installs_nothing_and_picks_an_existing_python(tmp_path, target):
    missing = _dry_run(target, f"VENV={tmp_path}/no-venv", "SUBMISSIONS=subs")  # no .venv at all
    assert "pip" not in missing and " -m venv" not in missing, missing
    assert "\npython3 scripts/" in "\n" + missing, missing
    venv = tmp_path / "venv"  # a .venv without make venv's stamp: used as it is, never reinstalled
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    there = _dry_run(target, f"VENV={venv}", "SUBMISSIONS=subs")
    assert "pip" not in there and f"{venv}/bin/python scripts/" in there, there
    own = _dry_run(target, f"VENV={venv}", "GRADE_PYTHON=/opt/mine/bin/python")
    assert "/opt/mine/bin/python scripts/" in own, own


# Runs the clone's grade.py with the package hidden from the import system (as in a Python that has the
# dependencies but where the book was never pip-installed), and says where attention_book came from.
HIDDEN = """
import importlib.abc, runpy, sys
clone = sys.argv.pop(1)
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "attention_book" and not any(p.startswith(clone) for p in sys.path):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
sys.argv = [clone + "/scripts/grade.py", "--help"]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as end:
    import attention_book, os
    print("EXIT", end.code, "FROM", attention_book.__file__, "PYTHONPATH", os.environ.get("PYTHONPATH"))
"""


def test_grade_py_runs_from_a_fresh_clone_without_the_package_installed(tmp_path):
    clone = tmp_path / "a clone"  # what grading reads of a clone: the scripts, the package, the kernel's poller
    for part in ("scripts", "src", "book/_ext"):
        shutil.copytree(ROOT / part, clone / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", HIDDEN, str(clone)], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: grade.py" in done.stdout, done.stdout[-2000:]
    assert f"EXIT 0 FROM {clone}/src/attention_book/__init__.py PYTHONPATH {clone}/src" in done.stdout, done.stdout


def test_every_output_folder_the_grader_makes_is_out_of_git(tmp_path):
    """A fresh instructor (8/10): the guide says OUT=... picks another output folder, but only grades/ is in
    the repository's .gitignore, so `git add .` in a clone took another folder's grades, feedback and
    .grade-secret. A folder the grader makes (or made on an earlier run) gets a .gitignore of '*'; a folder
    of the instructor's that holds files is refused, nothing written there (issue 37, a fresh attacker)."""
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    sys.path.insert(0, str(ROOT / "scripts"))
    import grade

    subs = tmp_path / "subs"
    subs.mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    grade.grade(subs, tmp_path / "grades-2027" / "grades.csv", 60, ROOT / "notebooks")
    assert (tmp_path / "grades-2027" / ".grade-secret").is_file()
    shown = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout.split("\n")
    assert not any("grades-2027" in line for line in shown), shown
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("mine")
    with pytest.raises(grade.GradeError, match="holds files the grader did not write"):
        grade.grade(subs, mine / "grades.csv", 60, ROOT / "notebooks")
    assert [p.name for p in mine.iterdir()] == ["todo.txt"]
