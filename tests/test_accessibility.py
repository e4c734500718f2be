"""Accessibility of the built site (issue 38): axe-core on every page, text for every image.

Same built site, server and Chromium as tests/test_site.py (its ``site`` and ``browser``
fixtures). axe-core is the pinned copy that scripts/vendor_js.py puts in the site's
``_static/axe-core/axe.min.js.txt`` (a ``.txt``, so no page loads it): the test reads it
from the built site and injects it into each page, offline.

Each page of ``_toc.yml`` is opened at desktop width, its explorers' first control is moved
once (so the checked page shows a frame a reader chose), and axe runs with the WCAG 2.0 and
2.1 level A and AA rules. Any violation that axe rates serious or critical fails the test,
listed by rule with its node count and one sample node.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from test_site import DESKTOP, HTML, PAGES, browser, site  # noqa: F401 (fixtures)

AXE = HTML / "_static" / "axe-core" / "axe.min.js.txt"
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
FAILING = ("serious", "critical")

JS_RUN_AXE = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: tags},
                                          resultTypes: ['violations']});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
    sample: v.nodes.length ? String(v.nodes[0].target) + ' ' + v.nodes[0].html.slice(0, 160) : '',
  }));
}"""

JS_MOVE_EXPLORERS = """() => {
  for (const control of document.querySelectorAll('.ab-explorer [data-ab-control]')) {
    const last = control.tagName === 'SELECT' ? control.options.length - 1 : Number(control.max);
    if (last > 0) {
      control.value = String(last);
      control.dispatchEvent(new Event('input', {bubbles: true}));
      control.dispatchEvent(new Event('change', {bubbles: true}));
    }
  }
}"""


@pytest.fixture(scope="module")
def axe_page(browser, site):  # noqa: F811 (fixture)
    if not AXE.is_file():
        pytest.fail(f"axe-core is missing from the built site ({AXE}): stage the book with "
                    "scripts/stage.py (it vendors axe-core) and build it again", pytrace=False)
    context = browser.new_context(viewport=DESKTOP)
    origin = site.rstrip("/")
    context.route(re.compile(r"^(?!" + re.escape(origin) + r"[/?#]|data:|blob:|about:).*"),
                  lambda route: route.abort())
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def format_violations(violations: list[dict]) -> str:
    return "\n".join(f"  {v['impact']:8} {v['id']} ({v['count']} nodes): {v['help']}\n"
                     f"           e.g. {v['sample']}" for v in violations)


def axe_violations(page, url: str) -> list[dict]:
    page.goto(url, wait_until="load")
    page.evaluate("""() => (window.MathJax && MathJax.startup && MathJax.startup.promise)
        ? MathJax.startup.promise.then(() => true) : true""")
    page.evaluate(JS_MOVE_EXPLORERS)
    page.wait_for_timeout(150)
    page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    return page.evaluate(JS_RUN_AXE, WCAG_AA)


@pytest.mark.browser
@pytest.mark.parametrize("docname", PAGES)
def test_page_has_no_serious_accessibility_violation(axe_page, site, docname):  # noqa: F811
    if not (HTML / f"{docname}.html").is_file():
        pytest.fail(f"page not built: {docname}.html is missing from {HTML}", pytrace=False)
    url = f"{site}{docname}.html"
    violations = axe_violations(axe_page, url)
    failing = [v for v in violations if v["impact"] in FAILING]
    assert not failing, f"{url}: axe-core (WCAG 2.1 A/AA) finds\n{format_violations(failing)}"


# --------------------------------------------------------------------------- the fixes (no browser)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))


def test_navigation_folds_and_buttons_get_names(tmp_path):
    import book_site

    page = (
        '<li class="toctree-l1 current active has-children"><a class="current reference internal" '
        'href="#">2. Attention <em>Pooling</em></a><details open="open"><summary><span '
        'class="toctree-toggle" role="presentation"><i class="fa-solid fa-chevron-down"></i></span>'
        '</summary><ul></ul></details></li>\n'
        '<details class="hide above-input"><summary aria-label="Toggle hidden content">\n'
        '<p class="collapsed admonition-title">Show code</p></summary></details>\n'
        '<details><summary><i class="x"></i></summary></details>\n'
        '<button class="btn search-button-field search-button__button pst-js-only" title="Search" '
        'aria-label="Search" data-bs-toggle="tooltip">\n <i class="fa-solid fa-magnifying-glass"></i>\n'
        ' <span class="search-button__default-text">Search</span></button>\n'
        '<i class="theme-switch fa-solid fa-sun fa-lg" data-mode="light" title="Light"></i>\n'
        '<div class="citation" id="id3" role="doc-biblioentry">'
    )
    fixed = book_site.accessible_html(page, tmp_path / "page.html")
    assert '<summary aria-label="Sections of 2. Attention Pooling">' in fixed
    assert '<summary>\n<p class="collapsed admonition-title">Show code' in fixed
    assert '<summary aria-label="Show or hide more"><i class="x"></i></summary>' in fixed
    assert 'aria-label="Search"' not in fixed and 'title="Search"' in fixed
    assert 'title="Light"' not in fixed
    assert 'role="listitem"' in fixed and "doc-biblioentry" not in fixed
    assert book_site.accessible_html(fixed, tmp_path / "page.html") == fixed  # idempotent
