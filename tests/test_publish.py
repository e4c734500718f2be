"""`make publish`'s execution cache: scripts/stage.py's key decides which notebooks run again.

Tested on tiny fake notebooks in a fake repository (never the real book): the publish
sequence is stage -> nbmake --skip-executed -> stage -> build. A notebook is executed when the
first staging leaves it unmarked (kernel_poll.marked_executed False); here "execution" writes an
output into the staged copy, as nbmake --overwrite does.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def load(name: str, path: Path):
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def notebook(text: str) -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": None,
                       "outputs": [], "source": f"print({text!r})"}]}


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository with two notebooks and a one-module package; stage.py pointed at it."""
    stage = load("stage", ROOT / "scripts" / "stage.py")
    kernel_poll = load("kernel_poll", ROOT / "book" / "_ext" / "kernel_poll.py")
    fake = tmp_path / "repo"
    (fake / "notebooks").mkdir(parents=True)
    (fake / "src" / "pkg").mkdir(parents=True)
    (fake / "book").mkdir()
    (fake / "src" / "pkg" / "mod.py").write_text("X = 1\n", encoding="utf-8")
    (fake / "pyproject.toml").write_text("[project]\nname = 'pkg'\n", encoding="utf-8")
    for name in ("_config.yml", "_toc.yml"):
        (fake / name).write_text("", encoding="utf-8")
    for name in ("ch01_a", "ch02_b"):
        (fake / "notebooks" / f"{name}.ipynb").write_text(json.dumps(notebook(name)), encoding="utf-8")
    monkeypatch.setattr(stage, "ROOT", fake)
    monkeypatch.setattr(stage.vendor_js, "vendor", lambda dest: [])  # no JavaScript to fetch here
    monkeypatch.setenv("ATTENTION_BOOK_SIZE", "full")
    monkeypatch.delenv("ATTENTION_BOOK_MAX_STEPS", raising=False)
    monkeypatch.delenv("EDITION", raising=False)

    def publish() -> list[str]:
        """One `make publish` up to the build; returns the notebooks it executed."""
        dest = tmp_path / "_stage_publish"
        stage.main(str(dest))
        staged = sorted((dest / "notebooks").glob("*.ipynb"))
        run = [p for p in staged if not kernel_poll.marked_executed(p)]
        for path in run:
            nb = json.loads(path.read_text(encoding="utf-8"))
            nb["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\n"}]
            path.write_text(json.dumps(nb), encoding="utf-8")
        stage.main(str(dest))
        assert all(kernel_poll.marked_executed(p) for p in staged), "the build would execute again"
        return [p.stem for p in run]

    return fake, publish


def test_a_second_publish_with_nothing_changed_executes_nothing(repo):
    _, publish = repo
    assert publish() == ["ch01_a", "ch02_b"]
    assert publish() == []


def test_changing_one_notebook_re_executes_that_notebook_only(repo):
    fake, publish = repo
    publish()
    path = fake / "notebooks" / "ch02_b.ipynb"
    path.write_text(json.dumps(notebook("ch02_b, edited")), encoding="utf-8")
    assert publish() == ["ch02_b"]
    assert publish() == []


def test_changing_the_package_or_the_size_re_executes_every_notebook(repo, monkeypatch):
    fake, publish = repo
    publish()
    (fake / "src" / "pkg" / "mod.py").write_text("X = 2\n", encoding="utf-8")
    assert publish() == ["ch01_a", "ch02_b"]
    monkeypatch.setenv("ATTENTION_BOOK_SIZE", "ci")  # a ci-size result is never kept as full size
    assert publish() == ["ch01_a", "ch02_b"]
    monkeypatch.setenv("ATTENTION_BOOK_SIZE", "full")
    assert publish() == ["ch01_a", "ch02_b"]


def test_run_settings_leave_the_ci_key_unchanged():
    stage = load("stage", ROOT / "scripts" / "stage.py")
    assert stage.run_settings({}) == "" and stage.run_settings({"ATTENTION_BOOK_SIZE": "ci"}) == ""
    assert stage.run_settings({"ATTENTION_BOOK_SIZE": "full"}) == "size=full"
    assert stage.run_settings({"ATTENTION_BOOK_SIZE": "full", "ATTENTION_BOOK_MAX_STEPS": "2"}) == (
        "size=full,max_steps=2")


def test_make_publish_stages_runs_skips_executed_restages_and_builds_at_full_size():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\npublish: venv\n", 1)[1].split("\n\n", 1)[0]
    steps = [line.strip() for line in recipe.replace("\\\n", " ").splitlines() if line.strip()]
    assert "scripts/stage.py $(PUBLISH_STAGE)" in steps[0]
    assert "--skip-executed" in steps[1] and "$(PUBLISH_STAGE)/notebooks" in steps[1]
    assert "scripts/stage.py $(PUBLISH_STAGE)" in steps[2]
    assert "jupyter-book build $(PUBLISH_STAGE)" in steps[3]
    assert all(step.startswith("$(PUBLISH_ENV)") for step in steps[:4])
    assert re.search(r"^PUBLISH_SIZE \?= full$", makefile, re.MULTILINE)


def test_readme_publishing_a_fork_starts_with_the_one_repository_setting():
    """README "Publishing your fork" step 1 names _config.yml's repository.url, which the notebooks'
    Colab install cells use too (tests/test_launch.py checks every notebook against it)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Publishing your fork", 1)[1].split("\n## ", 1)[0]
    first = re.search(r"^1\. (.*?)(?=^2\. )", section, re.MULTILINE | re.DOTALL)
    assert first and "repository.url" in first[1] and "_config.yml" in first[1]
    url = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["repository"]["url"]
    assert url in section, "the README shows another URL than _config.yml's"
    setup = next(p for p in sorted((ROOT / "notebooks").glob("ch*.ipynb")))
    assert f"git+{url.rstrip('/')}@" in setup.read_text(encoding="utf-8")


def test_set_repository_moves_every_copy_of_the_address_to_the_configured_one(tmp_path):
    """A fork edits _config.yml and runs `make repository`: the install cells, CONTRIBUTING's setup
    cell and ab.show_source's links follow; `--check` then finds nothing to change."""
    import shutil

    tool = load("set_repository", ROOT / "scripts" / "set_repository.py")
    fake = tmp_path / "fork"
    (fake / "notebooks").mkdir(parents=True)
    (fake / "src" / "attention_book" / "book").mkdir(parents=True)
    for nb in sorted((ROOT / "notebooks").glob("ch0[12]_*.ipynb")):
        shutil.copy2(nb, fake / "notebooks" / nb.name)
    shutil.copy2(ROOT / "CONTRIBUTING.md", fake / "CONTRIBUTING.md")
    source = Path("src/attention_book/book/source.py")
    shutil.copy2(ROOT / source, fake / source)
    old, branch = tool.configured(ROOT)
    config = (ROOT / "_config.yml").read_text(encoding="utf-8").replace(old, "https://github.com/me/my-book")
    (fake / "_config.yml").write_text(config, encoding="utf-8")
    assert tool.main(["--check"], root=fake) == 1
    assert tool.main([], root=fake) == 0
    assert tool.main(["--check"], root=fake) == 0
    for path in tool.targets(fake):
        text = path.read_text(encoding="utf-8")
        assert old not in text, f"{path.name} still names {old}"
        assert "https://github.com/me/my-book" in text, f"{path.name} lost its address"
    assert f'git+https://github.com/me/my-book@{branch}"' in (fake / "CONTRIBUTING.md").read_text(encoding="utf-8")
