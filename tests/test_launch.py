"""Notebooks as committed: ready to launch in Colab and to be built into the site.

One source for the repository: `_config.yml` (`repository.url` and `.branch`)
drives the site's launch and repository buttons; every notebook's setup cell must
install the package from exactly that URL and branch, in the form CONTRIBUTING.md
gives. The table of contents and the `notebooks/` folder must list the same
notebooks, and notebooks are committed clean (no outputs, no execution counts,
no saved widget state).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
REPO_URL = CONFIG["repository"]["url"].rstrip("/")
BRANCH = CONFIG["repository"].get("branch", "main")
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def toc_files(toc_file: Path = ROOT / "_toc.yml") -> list[str]:
    """Document names listed in a Jupyter Book `_toc.yml`, in reading order (root first)."""
    toc = yaml.safe_load(toc_file.read_text(encoding="utf-8"))
    files = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []) or []:
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return [re.sub(r"\.(md|ipynb)$", "", f) for f in files]


def setup_template() -> str:
    """The setup cell exactly as CONTRIBUTING.md gives it."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    match = re.search(r"setup cell.*?```python\n(.*?)```", text, re.S | re.I)
    assert match, "CONTRIBUTING.md no longer shows the setup cell in a ```python block"
    return "\n".join(line[3:] if line.startswith("   ") else line
                     for line in match.group(1).rstrip().splitlines())


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def test_repository_is_configured_once():
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", REPO_URL), (
        f"_config.yml repository.url must be a GitHub repository URL (for the Colab links), got {REPO_URL!r}")
    assert CONFIG["launch_buttons"].get("colab_url"), "_config.yml launch_buttons.colab_url is not set"
    assert CONFIG["html"].get("use_repository_button"), "the repository button is switched off"


def test_contributing_setup_cell_uses_the_configured_repository():
    template = setup_template()
    assert f'"attention-book @ git+{REPO_URL}@{BRANCH}"' in template, (
        f"CONTRIBUTING.md's setup cell does not install from {REPO_URL}@{BRANCH} (_config.yml)")


def test_every_notebook_is_in_the_toc_and_back():
    listed = {f for f in toc_files() if f.startswith("notebooks/")}
    present = {f"notebooks/{p.stem}" for p in NOTEBOOKS}
    assert not present - listed, f"notebooks missing from _toc.yml: {sorted(present - listed)}"
    # Pages listed but not written yet are reported here (and fail the site build).
    assert not listed - present, f"_toc.yml lists notebooks that do not exist: {sorted(listed - present)}"


def test_toc_prose_pages_exist():
    missing = [f for f in toc_files() if not f.startswith("notebooks/")
               and not (ROOT / f"{f}.md").exists() and not (ROOT / f"{f}.ipynb").exists()]
    assert not missing, f"_toc.yml lists pages that do not exist: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_launches_from_the_configured_repository(path):
    nb = load(path)
    cells = nb["cells"]
    assert len(cells) >= 2, f"{path.name}: needs a title cell and the setup cell"
    setup = cells[1]
    assert setup["cell_type"] == "code" and "remove-cell" in setup.get("metadata", {}).get("tags", []), (
        f"{path.name}: the second cell must be the setup cell, a code cell tagged remove-cell")
    assert source(setup).strip() == setup_template().strip(), (
        f"{path.name}: the setup cell differs from CONTRIBUTING.md's:\n{source(setup)}")
    installs = re.findall(r"git\+(https?://[^\s\"'@]+)(?:@([\w./-]+))?", "\n".join(
        source(c) for c in cells if c["cell_type"] == "code"))
    assert installs and all(url.rstrip("/") == REPO_URL and ref == BRANCH for url, ref in installs), (
        f"{path.name}: installs from {installs}; _config.yml says {REPO_URL}@{BRANCH}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_clean(path):
    nb = load(path)
    dirty = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs or execution counts; clear them"
    assert "widgets" not in nb.get("metadata", {}), f"{path.name}: saved widget state in the metadata"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_title_and_kernel(path):
    nb = load(path)
    first = nb["cells"][0]
    assert first["cell_type"] == "markdown" and re.match(r"# \S", source(first)), (
        f"{path.name}: the first cell must be a markdown '# Title'")
    assert nb.get("metadata", {}).get("kernelspec", {}).get("name") == "python3", (
        f"{path.name}: kernelspec name must be python3")


def test_every_notebook_cell_has_an_id():
    """nbformat 4.5 notebooks need cell ids (a cell inserted by a script often lacks one: nbformat
    then warns, and will refuse such notebooks in a future version)."""
    import json

    missing = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        if (nb["nbformat"], nb.get("nbformat_minor", 0)) >= (4, 5):
            missing += [f"{path.name} cell {i}" for i, c in enumerate(nb["cells"]) if not c.get("id")]
    assert not missing, f"cells without an id: {missing}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_asks_colab_for_a_gpu(path):
    """Opened from the launch button, Colab starts the runtime the notebook's metadata asks for."""
    meta = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    assert meta.get("accelerator") == "GPU", f"{path.name}: metadata.accelerator should be 'GPU'"
    assert meta.get("colab", {}).get("gpuType"), f"{path.name}: metadata.colab.gpuType is missing"


def test_colab_install_keeps_colab_torch_and_widgets():
    """The setup cell installs the package without upgrading what Colab brings: its requirements are
    lower bounds that Colab's torch and ipywidgets (7.7.1 there) already meet."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    deps = re.search(r"^dependencies = \[(.*?)\]", pyproject, re.S | re.M).group(1)
    torch_req = re.search(r'"torch([^"]*)"', deps).group(1)
    widgets_req = re.search(r'"ipywidgets([^"]*)"', deps).group(1)
    assert torch_req.startswith(">=") and "," not in torch_req, torch_req
    assert widgets_req.startswith(">=") and tuple(map(int, widgets_req[2:].split("."))) <= (7, 7, 1), widgets_req
    for path in NOTEBOOKS:
        setup = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][1]["source"])
        assert "--upgrade" not in setup and " -U " not in setup, f"{path.name}: the install cell must not upgrade"


def test_the_formatter_leaves_the_setup_cell_as_it_is(tmp_path):
    """`ruff format` (how notebooks are kept within the column) must not reflow the setup cell."""
    pytest.importorskip("ruff")
    nb = {"cells": [{"cell_type": "code", "id": "setup", "metadata": {"tags": ["remove-cell"]},
                     "execution_count": None, "outputs": [], "source": setup_template()}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                       "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "setup.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "ruff", "format", "--check", "--diff", "--line-length", "88",
                          str(path)], capture_output=True, text=True)
    assert run.returncode == 0, f"ruff would reformat the setup cell:\n{run.stdout}{run.stderr}"
