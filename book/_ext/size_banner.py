"""One line at the top of each notebook page saying what ran: the experiment size and the device.

A chapter's `ab.describe_run()` prints "Experiment size: ci (...) | seed: 0 (...) | device: cpu |
torch ..." in a hidden (``remove-cell``) cell, so the page never shows it. This extension reads
that line from the executed notebook's outputs (the build reuses notebooks that nbmake executed,
see scripts/stage.py) and puts one line under the page's title:

* the quick size: "This page ran the quick (ci) size on a CPU: ..." with links to the same page
  of the published full-size site and to the timings of every chapter at each size;
* the full size: one line naming the size and the device, nothing else;
* a page whose code never calls ``sized(ci=..., full=...)`` (its results are the same at every
  size): one line naming the device only, so a page without training does not open on a note
  about shortened training.

A notebook without that output (it prints no run description, or was not executed before the
build) falls back to ``ATTENTION_BOOK_SIZE`` as the build saw it; a page that is not a notebook
gets no line. The published site's address comes from ``size_banner_site_url`` if set, else
from ``repository.url`` of _config.yml (``https://github.com/OWNER/REPO`` is published by the
workflow at ``https://OWNER.github.io/REPO/``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from docutils import nodes

RUN_LINE = re.compile(r"Experiment size: (?P<size>\w+)\b.*?\| device: (?P<device>[^|\n]+?)\s*(?:\||$)", re.MULTILINE)
# The page that lists every chapter's time at each size (book/_timings.md, included there).
TIMINGS_DOC = "book/instructors"
TIMINGS_ANCHOR = "what-needs-a-gpu"


def run_of(path: Path) -> dict[str, str] | None:
    """{"size", "device"} from the notebook's describe_run output, or None if it has none."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) or []:
            text = output.get("text") or output.get("data", {}).get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else str(text)
            match = RUN_LINE.search(text)
            if match:
                return {"size": match["size"], "device": match["device"].strip()}
    return None


def size_matters(path: Path) -> bool:
    """Whether the notebook's code picks anything by size (calls ``sized(ci=..., full=...)``)."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return True
    return any("sized(" in "".join(cell.get("source", "")) for cell in nb.get("cells", [])
               if cell.get("cell_type") == "code")


def site_url(repository_url: str, configured: str = "") -> str:
    """The published site's root: the configured one, else GitHub Pages' address of the repository."""
    if configured:
        return configured.rstrip("/") + "/"
    match = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?/?", repository_url or "")
    return f"https://{match[1].lower()}.github.io/{match[2]}/" if match else ""


def device_words(device: str) -> str:
    """'cpu' -> 'a CPU'; 'cuda:0 (NVIDIA H100 80GB HBM3)' -> 'a GPU (NVIDIA H100 80GB HBM3)'."""
    kind, _, name = device.partition(" ")
    kind = kind.split(":")[0].lower()
    name = name.strip().strip("()")
    if kind == "cuda":
        return f"a GPU ({name or 'CUDA'})"
    return {"cpu": "a CPU", "mps": "an Apple GPU (MPS)"}.get(kind, device)


def banner(run: dict[str, str], full_page_url: str, timings_url: str,
           sized: bool = True) -> nodes.paragraph:
    """The line itself, as a docutils paragraph (``sized``: the page's code picks by size)."""
    para = nodes.paragraph(classes=["size-banner"])
    on = device_words(run["device"])
    if not sized:
        para += nodes.Text(f"This page ran on {on}. Nothing on it depends on the experiment size: "
                           "a full-size run gives the same results.")
        return para
    if run["size"] == "full":
        para += nodes.Text(f"This page ran the full size (the original chapter's settings) on {on}.")
        return para
    para += nodes.Text(f"This page ran the quick ({run['size']}) size on {on}: less data, fewer "
                       "training steps or smaller models than the original chapter (each "
                       "ab.sized(ci=..., full=...) in the code shows which), so its scores can sit below a "
                       "full run's. Where the text says \"in N of 5 runs\", that result was rerun at this "
                       "size with five seeds; a number without it is this run's alone. Full-size results: ")
    if full_page_url:
        para += nodes.reference("", "this page at full size", refuri=full_page_url)
        para += nodes.Text(", and ")
    para += nodes.reference("", "every chapter's times", refuri=timings_url)
    para += nodes.Text(".")
    return para


def add_banner(app, doctree, docname: str) -> None:
    source = Path(app.env.doc2path(docname))
    if source.suffix != ".ipynb":
        return
    run = run_of(source)
    if run is None:
        size = os.environ.get("ATTENTION_BOOK_SIZE", "") or "ci"
        run = {"size": size, "device": "cpu" if size == "ci" else "the build's device"}
    root = site_url(app.config.size_banner_repository, app.config.size_banner_site_url)
    full_page = root + docname + ".html" if root else ""
    timings = app.builder.get_relative_uri(docname, TIMINGS_DOC) + "#" + TIMINGS_ANCHOR
    sections = list(doctree.findall(nodes.section))
    line = banner(run, full_page, timings, sized=size_matters(source))
    if sections and sections[0].children and isinstance(sections[0][0], nodes.title):
        sections[0].insert(1, line)
    else:
        doctree.insert(0, line)


def repository_from_config(app, config) -> None:
    """Jupyter Book passes _config.yml's repository.url to the theme as html_theme_options."""
    if not config.size_banner_repository:
        options = config.html_theme_options or {}
        config.size_banner_repository = options.get("repository_url", "")


def setup(app):
    app.add_config_value("size_banner_site_url", "", "html")
    app.add_config_value("size_banner_repository", "", "html")
    app.connect("config-inited", repository_from_config)
    app.connect("doctree-resolved", add_banner)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
