"""The Gradescope bundle refuses a course that will not load on Gradescope, and a grader error on
Gradescope is never a silent 0.0 (issue 37: a fresh attacker, 7/10)."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
import gradescope_bundle  # noqa: E402
from test_grade_engine import FakeGrader  # noqa: E402
from test_grade_gradescope import _run_fake  # noqa: E402


def test_an_extra_cases_file_that_imports_a_sibling_module_stops_the_build(tmp_path):
    """``from _helpers import LABEL`` in the extra-cases file: the bundle (which carries the file alone)
    was written, and every submission scored 0.0 as a grader error. The build loads the bundled course
    as run_autograder will and refuses to write the zip, in one line."""
    here = tmp_path / "course"
    here.mkdir()
    extra = (ROOT / "course_example" / "extra_cases.py").read_text(encoding="utf-8")
    (here / "extra.py").write_text("from _helpers import LABEL\n" + extra, encoding="utf-8")
    (here / "_helpers.py").write_text('LABEL = "a helper\'s case"\n')
    (here / "course.toml").write_text('[course]\nname = "t"\n[assignments.masked_softmax]\nextra_cases = "extra.py"\n')
    out = tmp_path / "b" / "a.zip"
    with pytest.raises(SystemExit, match="ModuleNotFoundError: No module named '_helpers'") as err:
        gradescope_bundle.build(out, ["ch03_exercises"], here / "course.toml")
    assert "\n" not in str(err.value) and not out.exists()
    (here / "extra.py").write_text(extra, encoding="utf-8")  # the same file without the import: built
    with zipfile.ZipFile(gradescope_bundle.build(out, ["ch03_exercises"], here / "course.toml")) as z:
        assert "course/extra_cases/masked_softmax.py" in z.namelist()


def test_each_build_draws_a_new_secret(tmp_path):
    """Rebuilding the bundle makes a new secret, so new hidden draws for every student (the guide: rebuild
    after the due date and regrade all submissions)."""
    secrets = set()
    for n in range(2):
        with zipfile.ZipFile(gradescope_bundle.build(tmp_path / f"{n}.zip", ["ch03_exercises"], None)) as z:
            secrets.add(json.loads(z.read("gradescope.json"))["secret"])
    assert len(secrets) == 2


def _fail(self, who, path, reference, seeds):
    raise RuntimeError("the instructor's extra cases broke")


def test_a_grader_error_on_gradescope_is_a_visible_failure_not_a_silent_zero(tmp_path, monkeypatch):
    """A grader-error row went out as score 0.0 with the visible test "your notebook was received and run"
    passed, and run_autograder exited 0: nobody heard until the due date. Now a visible failed test
    "grader error: tell your instructor" comes first, no visible test passes, and the status is
    grader error (main exits 1)."""
    monkeypatch.setattr(FakeGrader, "grade_notebook", _fail)
    monkeypatch.setattr(FakeGrader, "extras", {}, raising=False)
    _, data = _run_fake(tmp_path, monkeypatch, ["ch03_exercises.ipynb"])
    assert data["tests"][0]["name"] == "grader error: tell your instructor"
    assert data["tests"][0]["visibility"] == "visible" and data["tests"][0]["status"] == "failed"
    assert not [t for t in data["tests"] if t.get("visibility") == "visible" and t["status"] == "passed"]
    assert data["extra_data"]["status"] == "grader error" and data["output"].startswith("**GRADER ERROR.**")
    assert "extra cases broke" not in json.dumps([t for t in data["tests"] if t.get("visibility") == "visible"])
    written = json.loads((tmp_path / "autograder" / "results" / "results.json").read_text())
    assert written == data
    monkeypatch.setattr(gradescope_bundle, "run", lambda root: data)
    with pytest.raises(SystemExit) as exit_:
        gradescope_bundle.main(["run"])
    assert exit_.value.code == 1
