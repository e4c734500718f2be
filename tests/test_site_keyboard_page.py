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


def _open(browser, site, docname: str):  # noqa: F811
    """A new page at ``docname`` (skips the test when the site lacks it); the caller closes it."""
    if not (HTML / f"{docname}.html").is_file():
        pytest.skip(f"{docname}.html is not built in {HTML}: run `make book` first")
    page = browser.new_page(viewport=DESKTOP)
    page.goto(f"{site}{docname}.html")
    return page


def _tab_through(browser, site, docname: str, js: str, where: str) -> list[dict]:  # noqa: F811
    """Press Tab from the page's top until the focus has been in, then left, the part of the page
    that ``js``'s ``where`` flag marks; the states of ``js`` met there."""
    page = _open(browser, site, docname)
    met = []
    try:
        for _ in range(80):
            page.keyboard.press("Tab")
            state = page.evaluate(js)
            if state[where]:
                met.append(state)
            elif met:
                break
    finally:
        page.close()
    return met


def test_the_buttons_above_the_article_show_keyboard_focus(browser, site):  # noqa: F811
    # past the skip link and the left sidebar, into the article's header
    met = _tab_through(browser, site, "notebooks/ch01_queries_keys_values", JS_FOCUSED, "header")
    assert len(met) >= 4, f"only {len(met)} header buttons reached by Tab: {met}"
    unseen = [m["name"] for m in met if not m["seen"]]
    assert not unseen, f"header buttons with no visible focus: {unseen}"


JS_STOP = """() => { const el = document.activeElement, s = getComputedStyle(el), r = el.getBoundingClientRect();
  const shadow = s.boxShadow !== 'none' && !/^rgba\\(0, 0, 0, 0\\)/.test(s.boxShadow);
  return {name: el.getAttribute('aria-label') || el.textContent.trim().slice(0, 50), tag: el.tagName,
          side: !!el.closest('.bd-sidebar-primary'), width: r.width, height: r.height,
          seen: (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0) || shadow}; }"""


def test_every_sidebar_stop_is_seen_when_focused(browser, site):  # noqa: F811
    """A keyboard reader (issue 38) met ten Tab stops in chapter 2's sidebar that showed nothing:
    the folding controls ("Sections of 1. Queries, Keys, and Values"), 239 x 0 px with no outline
    (the theme draws its ring on the chevron inside). Every stop of the sidebar has a size and
    shows its focus."""
    stops = _tab_through(browser, site, "notebooks/ch02_attention_pooling", JS_STOP, "side")
    folds = [s for s in stops if s["tag"] == "SUMMARY"]
    assert len(folds) >= 5, f"only {len(folds)} folding controls met: {stops}"
    flat = [f"{s['name']} ({s['width']:.0f}x{s['height']:.0f})" for s in stops
            if s["width"] < 24 or s["height"] < 24]
    assert not flat, f"sidebar stops under 24 px: {flat}"
    unseen = [s["name"] for s in stops if not s["seen"]]
    assert not unseen, f"sidebar stops with no visible focus: {unseen}"


# The focused link's ring (outline, else the theme's box-shadow ring) and the background under it.
JS_RING = """() => { const el = document.activeElement, s = getComputedStyle(el), r = el.getBoundingClientRect();
  const outline = s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0;
  const ring = outline ? s.outlineColor : (s.boxShadow.match(/rgba?\\([^)]*\\)/) || [''])[0];
  let bg = 'rgb(255, 255, 255)';
  for (let e = el; e; e = e.parentElement) {
    const c = getComputedStyle(e).backgroundColor;
    if (c && !/^rgba\\(.*, 0\\)$/.test(c) && c !== 'transparent') { bg = c; break; }
  }
  const width = outline ? parseFloat(s.outlineWidth) : parseFloat((s.boxShadow.match(/(\\d+(\\.\\d+)?)px$/) || [0, 0])[1]);
  return {name: el.textContent.trim().slice(0, 50), tag: el.tagName, ring, bg, width,
          side: !!el.closest('.bd-sidebar-primary'), toc: !!el.closest('.bd-sidebar-secondary'),
          shown: r.width > 0 && r.height > 0 && r.top - width >= 0 && r.bottom + width <= innerHeight}; }"""


def _contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two CSS rgb()/rgba() colours (alpha ignored)."""
    def lum(css: str) -> float:
        rgb = [float(v) / 255 for v in css[css.index("(") + 1:css.index(")")].split(",")[:3]]
        lin = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_sidebar_links_show_a_clear_ring_when_focused(browser, site):  # noqa: F811
    """A fresh reader (issue 38) measured the outline of the left sidebar's chapter links and of
    the "On this page" links as none when Tabbed to: the theme rings them with a box-shadow
    instead (screenshots at 1280 px: a 3 px magenta ring). Each such link shows a ring at least
    2 px wide, wholly on screen (Tab scrolled ch07's "9. Pretraining modes" to the window's
    bottom edge, its ring's bottom cut off: book.css's scroll margin), at 3:1 or more against
    its sidebar."""
    page = _open(browser, site, "notebooks/ch07_transformer")
    met = []
    try:
        for _ in range(400):
            page.keyboard.press("Tab")
            state = page.evaluate(JS_RING)
            if (state["side"] or state["toc"]) and state["tag"] == "A":
                met.append(state)
            elif met and met[-1]["toc"]:
                break
    finally:
        page.close()
    assert sum(m["side"] for m in met) >= 10, f"only {len(met)} sidebar links reached by Tab: {met}"
    assert sum(m["toc"] for m in met) >= 5, f"only {len(met)} 'On this page' links reached by Tab"
    weak = [(m["name"], m["ring"], m["bg"], m["width"]) for m in met
            if not m["ring"] or m["width"] < 2 or not m["shown"] or _contrast(m["ring"], m["bg"]) < 3]
    assert not weak, f"sidebar links whose focus is not clearly seen: {weak}"


def test_copy_buttons_say_what_they_copy(browser, site):  # noqa: F811
    """A keyboard reader (issue 38) met every code cell's copy button as a Tab stop with no name
    (sphinx-copybutton's "Copy" is a CSS tooltip): each says "Copy code: <its first line>"."""
    page = _open(browser, site, "notebooks/ch02_attention_pooling")
    try:
        page.wait_for_function("() => document.querySelector('button.copybtn[aria-label]')")
        names = page.evaluate(
            """() => Array.from(document.querySelectorAll('button.copybtn')).map(b => {
              const code = document.querySelector(b.getAttribute('data-clipboard-target'));
              return [b.getAttribute('aria-label'), code.textContent.trim().split('\\n')[0].trim()]; })"""
        )
    finally:
        page.close()
    assert len(names) >= 5, names
    for name, first in names:
        assert name and name.startswith("Copy code: "), (name, first)
        assert first.startswith(name.removeprefix("Copy code: ").rstrip("…")), (name, first)


JS_SKIP_SHOWN = """() => { const el = document.activeElement, r = el.getBoundingClientRect();
  return {name: el.textContent, box: [r.x, r.y, r.width, r.height],
          shown: r.width > 0 && r.height > 0 && r.top >= 0 && r.bottom <= innerHeight}; }"""


def test_skip_link_to_the_live_view(browser, site):  # noqa: F811
    """A keyboard reader (issue 38) pressed Tab 70 to 238 times to reach a live view. A chapter with
    one has "Skip to the live view" after "Skip to main content": Enter moves the focus to the view,
    and the next Tab lands on its first control. A page without a live view has no such link."""
    page = _open(browser, site, "notebooks/ch07_transformer")
    try:
        page.wait_for_function("() => document.getElementById('ab-skip-live')")
        # Each skip link is on screen once focused (a fresh reader measured them above the page:
        # the theme slides the bar in over 0.15 s; screenshots after one and two Tabs show both)
        for name in ("Skip to main content", "Skip to the live view"):
            page.keyboard.press("Tab")
            page.wait_for_timeout(400)
            focused = page.evaluate(JS_SKIP_SHOWN)
            assert focused["name"] == name and focused["shown"], focused
        page.keyboard.press("Enter")
        assert page.evaluate("() => document.activeElement.classList.contains('ab-live')")
        page.wait_for_function("() => document.querySelector('.ab-live input[type=text]')", timeout=60_000)
        page.keyboard.press("Tab")
        assert page.evaluate("() => !!document.activeElement.closest('.ab-live')")
        page.goto(f"{site}notebooks/ch03_scoring_functions.html")
        page.wait_for_function("() => document.readyState === 'complete'")
        page.wait_for_timeout(200)
        assert page.evaluate("() => document.getElementById('ab-skip-live')") is None
    finally:
        page.close()
