"""The practice notebook of each exercises page (book/_ext/book_site.py; issues 36, 37).

A fresh learner on chapter 10's exercises page had no notebook to work in: the page's .ipynb
download holds the solutions as runnable cells and the Colab button opens the repository's
notebook. Every exercises page now says, right under its title, "Practice notebook: download
chNN_exercises.ipynb", a link to the student edition the site's build writes to
_static/practice/ (no solution, no hidden check; tests/test_editions.py checks its content).
Chapter pages carry no such line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_site import CHAPTER, DESKTOP, EXERCISES, HTML, PAGES, PHONE, browser, site  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

PRACTICE = re.compile(r'<p class="ab-practice">Practice notebook: <a class="ab-practice-link" '
                      r'href="(?P<href>[^"]+)" download="(?P<name>ch\d\d_exercises\.ipynb)">')
DOCNAME = "notebooks/ch10_exercises"

JS_LINE = """() => {
  const p = document.querySelector('#main-content p.ab-practice');
  if (!p) return null;
  const a = p.querySelector('a'), r = p.getBoundingClientRect();
  return {text: p.textContent.trim(), href: a.getAttribute('href'), download: a.hasAttribute('download'),
          under_title: !!p.previousElementSibling && p.previousElementSibling.matches('h1'),
          right: r.right, viewport: window.innerWidth,
          overflow: p.scrollWidth > p.clientWidth + 1, font_px: parseFloat(getComputedStyle(a).fontSize)};
}"""


def _pages(pattern) -> list[str]:
    return [d for d in PAGES if pattern.match(d) and (HTML / f"{d}.html").is_file()]


def test_every_exercises_page_and_no_chapter_page_links_a_practice_notebook():
    exercises, chapters = _pages(EXERCISES), _pages(CHAPTER)
    if not exercises:
        pytest.skip(f"no exercises page built in {HTML}: run `make book` first")
    for docname in exercises:
        found = PRACTICE.findall((HTML / f"{docname}.html").read_text(encoding="utf-8"))
        assert len(found) == 1, f"{docname}: {len(found)} practice lines"
        href, name = found[0]
        assert name == docname.split("/")[-1] + ".ipynb" and href == f"../_static/practice/{name}", found
        practice = json.loads((HTML / "_static" / "practice" / name).read_text(encoding="utf-8"))
        text = json.dumps(practice)
        assert "BEGIN SOLUTION" not in text and "# YOUR CODE HERE" in text, name
    for docname in chapters:
        assert "ab-practice" not in (HTML / f"{docname}.html").read_text(encoding="utf-8"), docname


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_practice_line_sits_under_the_title_and_downloads(browser, site, viewport):  # noqa: F811
    if not (HTML / f"{DOCNAME}.html").is_file():
        pytest.skip(f"{DOCNAME}.html is not built in {HTML}: run `make book` first")
    page = browser.new_page(viewport=viewport, accept_downloads=True)
    try:
        page.goto(f"{site}{DOCNAME}.html")
        line = page.evaluate(JS_LINE)
        assert line is not None, "no practice line on the page"
        assert line["text"].startswith("Practice notebook: download ch10_exercises.ipynb"), line["text"]
        assert "without answers" in line["text"] and "File › Upload notebook" in line["text"]
        assert line["download"] and line["under_title"], line
        assert not line["overflow"] and line["right"] <= line["viewport"] + 1, line
        assert line["font_px"] >= 14, line
        # keyboard: Tab reaches the link and Enter downloads the notebook
        for _ in range(120):
            page.keyboard.press("Tab")
            if page.evaluate("() => document.activeElement.classList.contains('ab-practice-link')"):
                break
        else:
            pytest.fail("Tab never reached the practice notebook's link")
        with page.expect_download() as download:
            page.keyboard.press("Enter")
        got = download.value
        assert got.suggested_filename == "ch10_exercises.ipynb"
        nb = json.loads(Path(got.path()).read_text(encoding="utf-8"))
        assert nb["cells"] and "BEGIN SOLUTION" not in json.dumps(nb)
        assert not any(c.get("outputs") for c in nb["cells"])
    finally:
        page.close()
