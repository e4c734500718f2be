"""Formulas in the built site, read by keyboard and screen reader (issue 38).

A keyboard reader met every formula as a Tab stop: 63 of them before chapter 2's explorer,
81 before chapter 8's drawing box. MathJax's menu setting ``inTabOrder: false`` (_config.yml's
``mathjax3_config``) takes them out of the Tab order; a screen reader still reads each one from
the MathML that MathJax adds beside it (``mjx-assistive-mml``).
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
