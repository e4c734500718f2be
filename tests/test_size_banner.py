"""book/_ext/size_banner.py: each notebook page says, in one line, the size and device it ran with.

Checked on the functions and on a tiny Sphinx build (myst-nb, execution off) of two fake executed
notebooks: one at the ci size on a CPU, one at the full size on a GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import size_banner

CI_LINE = ("Experiment size: ci (small CPU-friendly sizes; set ATTENTION_BOOK_SIZE=ci|full to change) "
           "| seed: 0 (ATTENTION_BOOK_SEED) | device: cpu | torch 2.13.0+cpu\n")
FULL_LINE = CI_LINE.replace("size: ci (small CPU-friendly sizes", "size: full (the original chapter's full sizes"
                            ).replace("device: cpu", "device: cuda")


def executed(title: str, run_line: str | None, code: str = "steps = ab.sized(ci=50, full=2000)") -> dict:
    hidden = {"cell_type": "code", "id": "setup", "metadata": {"tags": ["remove-cell"]},
              "execution_count": 1, "source": "ab.describe_run()",
              "outputs": [{"output_type": "stream", "name": "stdout", "text": run_line}] if run_line else []}
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "cells": [hidden, {"cell_type": "markdown", "id": "t", "metadata": {}, "source": f"# {title}\n\nText."},
                      {"cell_type": "code", "id": "c", "metadata": {}, "execution_count": 2, "source": code,
                       "outputs": []}]}


def test_run_of_reads_the_hidden_describe_run_output(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(executed("A", CI_LINE)), encoding="utf-8")
    assert size_banner.run_of(path) == {"size": "ci", "device": "cpu"}
    path.write_text(json.dumps(executed("A", FULL_LINE)), encoding="utf-8")
    assert size_banner.run_of(path) == {"size": "full", "device": "cuda"}
    path.write_text(json.dumps(executed("A", FULL_LINE.replace("cuda", "cuda (NVIDIA H100 80GB HBM3)"))),
                    encoding="utf-8")
    run = size_banner.run_of(path)
    assert run == {"size": "full", "device": "cuda (NVIDIA H100 80GB HBM3)"}
    assert size_banner.device_words(run["device"]) == "a GPU (NVIDIA H100 80GB HBM3)"
    path.write_text(json.dumps(executed("A", None)), encoding="utf-8")
    assert size_banner.run_of(path) is None


def test_the_published_site_is_the_repositorys_pages_address():
    assert size_banner.site_url("https://github.com/Some-One/attention-book") == (
        "https://some-one.github.io/attention-book/")
    assert size_banner.site_url("https://github.com/a/b", "https://book.example.org") == "https://book.example.org/"
    assert size_banner.site_url("not a url") == ""


def test_the_ci_line_links_the_full_size_results_and_the_full_line_says_only_size_and_device():
    ci = size_banner.banner({"size": "ci", "device": "cpu"}, "https://x.github.io/b/notebooks/ch01.html", "t.html#s")
    assert ci.astext().startswith("This page ran the quick (ci) size on a CPU")
    refs = [r["refuri"] for r in ci.findall(size_banner.nodes.reference)]
    assert refs == ["https://x.github.io/b/notebooks/ch01.html", "t.html#s"]
    full = size_banner.banner({"size": "full", "device": "cuda"}, "", "t.html")
    assert full.astext() == "This page ran the full size (the original chapter's settings) on a GPU (CUDA)."
    assert not list(full.findall(size_banner.nodes.reference))


def test_a_page_whose_code_picks_nothing_by_size_names_only_the_device(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(executed("T", CI_LINE, code="weights = scores.softmax(-1)")), encoding="utf-8")
    assert not size_banner.size_matters(path)
    line = size_banner.banner({"size": "ci", "device": "cpu"}, "https://x/y.html", "t.html", sized=False)
    assert line.astext() == ("This page ran on a CPU. Nothing on it depends on the experiment size: "
                             "a full-size run gives the same results.")
    assert not list(line.findall(size_banner.nodes.reference))
    path.write_text(json.dumps(executed("T", CI_LINE)), encoding="utf-8")
    assert size_banner.size_matters(path)


@pytest.mark.slow
def test_a_tiny_sphinx_build_puts_the_line_under_each_notebook_title(tmp_path):
    sphinx = pytest.importorskip("sphinx.cmd.build")
    pytest.importorskip("myst_nb")
    src = tmp_path / "src"
    (src / "notebooks").mkdir(parents=True)
    (src / "book").mkdir()
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['myst_nb', 'size_banner']\n"
        "nb_execution_mode = 'off'\n"
        "html_theme_options = {'repository_url': 'https://github.com/someone/attention-book'}\n",
        encoding="utf-8")
    (src / "index.md").write_text("# Book\n\n```{toctree}\nnotebooks/quick\nnotebooks/big\nnotebooks/same\n"
                                  "book/instructors\n```\n",
                                  encoding="utf-8")
    (src / "book" / "instructors.md").write_text("# Instructors\n\n## What needs a GPU\n\nTimes.\n", encoding="utf-8")
    (src / "notebooks" / "quick.ipynb").write_text(json.dumps(executed("Quick", CI_LINE)), encoding="utf-8")
    (src / "notebooks" / "big.ipynb").write_text(json.dumps(executed("Big", FULL_LINE)), encoding="utf-8")
    (src / "notebooks" / "same.ipynb").write_text(json.dumps(executed("Same", CI_LINE, code="x = 1")), encoding="utf-8")
    out = tmp_path / "html"
    assert sphinx.build_main(["-q", "-b", "html", str(src), str(out)]) == 0
    quick = (out / "notebooks" / "quick.html").read_text(encoding="utf-8")
    big = (out / "notebooks" / "big.html").read_text(encoding="utf-8")
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "This page ran the quick (ci) size on a CPU" in quick
    assert 'href="https://someone.github.io/attention-book/notebooks/quick.html"' in quick
    assert 'href="../book/instructors.html#what-needs-a-gpu"' in quick
    assert quick.index(">Quick<a class=\"headerlink\"") < quick.index("size-banner")
    assert "This page ran the full size (the original chapter's settings) on a GPU (CUDA)." in big
    same = (out / "notebooks" / "same.html").read_text(encoding="utf-8")
    assert "This page ran on a CPU. Nothing on it depends on the experiment size" in same
    assert "quick (ci) size" not in same
    assert "quick (ci) size" not in big and "Experiment size" not in big and "size-banner" not in index
