"""A chapter page by keyboard and screen reader, outside the explorers and live views (issue 38).

Formulas: a keyboard reader met every formula as a Tab stop: 63 of them before chapter 2's explorer,
81 before chapter 8's drawing box. MathJax's menu setting ``inTabOrder: false`` (_config.yml's
``mathjax3_config``) takes them out of the Tab order; a screen reader still reads each one from
the MathML that MathJax adds beside it (``mjx-assistive-mml``).

The theme's buttons above the article (sidebar toggle, launch, source, download) showed no focus
(outline and box-shadow none); book.css gives them an outline.
"""

from __future__ import annotations

import pytest
from test_site import DESKTOP, HTML, browser, site  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

JS_MATH = """() => Array.from(document.querySelectorAll('mjx-container')).map(m => ({
  tab: m.getAttribute('tabindex'), mml: !!m.querySelector('mjx-assistive-mml math')}))"""


@pytest.mark.parametrize("docname", ["notebooks/ch01_queries_keys_values", "notebooks/ch02_attention_pooling"])
def test_formulas_are_read_but_are_not_tab_stops(browser, site, docname):  # noqa: F811
    if not (HTML / f"{docname}.html").is_file():
        pytest.skip(f"{docname}.html is not built in {HTML}: run `make book` first")
    page = browser.new_page(viewport=DESKTOP)
    try:
        page.goto(f"{site}{docname}.html")
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.evaluate("() => MathJax.startup.promise")
        formulas = page.evaluate(JS_MATH)
    finally:
        page.close()
    assert len(formulas) >= 10, f"{docname}: {len(formulas)} formulas typeset"
    in_tab_order = sum(f["tab"] not in (None, "-1") for f in formulas)
    assert in_tab_order == 0, f"{docname}: {in_tab_order} of {len(formulas)} formulas are Tab stops"
    unread = sum(not f["mml"] for f in formulas)
    assert unread == 0, f"{docname}: {unread} of {len(formulas)} formulas carry no MathML for a screen reader"


JS_FOCUSED = """() => { const el = document.activeElement, s = getComputedStyle(el);
  return {name: el.getAttribute('aria-label') || el.title || el.textContent.trim().slice(0, 40),
          header: !!el.closest('.bd-header-article'),
          seen: (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0) || s.boxShadow !== 'none'}; }"""


def test_the_buttons_above_the_article_show_keyboard_focus(browser, site):  # noqa: F811
    docname = "notebooks/ch01_queries_keys_values"
    if not (HTML / f"{docname}.html").is_file():
        pytest.skip(f"{docname}.html is not built in {HTML}: run `make book` first")
    page = browser.new_page(viewport=DESKTOP)
    try:
        page.goto(f"{site}{docname}.html")
        met = []
        for _ in range(80):  # past the skip link and the left sidebar, into the article's header
            page.keyboard.press("Tab")
            state = page.evaluate(JS_FOCUSED)
            if state["header"]:
                met.append(state)
            elif met:
                break
    finally:
        page.close()
    assert len(met) >= 4, f"only {len(met)} header buttons reached by Tab: {met}"
    unseen = [m["name"] for m in met if not m["seen"]]
    assert not unseen, f"header buttons with no visible focus: {unseen}"
