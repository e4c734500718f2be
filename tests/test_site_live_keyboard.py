"""Every live view by keyboard alone (issue 38), in the built site.

For each live view the test starts it, then moves through its controls with Tab only (in page
order, radio groups once), and at each control checks what a keyboard user meets: a name, a
visible focus outline, a target at least 24 px in both directions (WCAG 2.2, 2.5.8). Then it
operates the control from the keyboard the way a person would (arrow keys on a slider, a menu,
a radio group or a number, typing in a text field, Enter on a button, and on chapter 8's
drawing box the keyboard pen: Space, arrows, Space) and reads the update in words from the
view's live regions (``aria-live`` or ``role="status"``): the text must change. A few controls
only set what a later button uses (chapter 9's seed and length): they must say so.

Same built site and server as tests/test_site_live_chNN.py; run it after ``make book``.
"""

from __future__ import annotations

import contextlib

import pytest
from live_site import LivePage, browser, site  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

VIEWS = [
    ("notebooks/ch01_queries_keys_values", "ch01.soft_lookup"),
    ("notebooks/ch02_attention_pooling", "ch02.pooling"),
    ("notebooks/ch04_bahdanau", "ch04.translate"),
    ("notebooks/ch07_transformer", "ch07.translate"),
    ("notebooks/ch08_vision_transformer", "ch08.draw"),
    ("notebooks/ch09_pretraining", "ch09.generate"),
]

CONTROLS = ("button, select, textarea, input:not([type=hidden]), canvas[tabindex], "
            "[tabindex]:not([tabindex='-1']):not(.ab-scrolls)")

# The view's controls in page order, a radio group as one stop, each named by its kind and place.
LIST_CONTROLS = """(r, selector) => {
  const seen = new Set(), stops = [];
  for (const el of r.querySelectorAll(selector)) {
    if (el.disabled || el.getBoundingClientRect().width === 0 || el.closest('[hidden], .ab-live-fallback')) continue;
    if (el.type === 'radio') {
      if (!seen.has(el.name)) { seen.add(el.name); stops.push({key: 'radio:' + el.name, els: []}); }
      stops.find(s => s.key === 'radio:' + el.name).els.push(el);
    } else {
      stops.push({key: (el.id || el.name || el.className || el.tagName) + '#' + stops.length, els: [el]});
    }
  }
  return stops;
}"""

JS_CONTROLS = """([root, selector, list]) => eval(list)(document.querySelector(root), selector).map(s => s.key)"""

JS_FOCUSED = """([root, selector, list]) => {
  const el = document.activeElement, r = document.querySelector(root);
  if (!el || !r.contains(el) || el === r) return null;
  const stop = eval(list)(r, selector).find(s => s.els.includes(el));
  const box = el.getBoundingClientRect(), style = getComputedStyle(el);
  const labels = el.labels ? Array.from(el.labels).map(l => l.textContent).join(' ') : '';
  const name = (el.getAttribute('aria-label') || labels || (el.tagName === 'BUTTON' ? el.textContent : '')).trim();
  return {key: stop ? stop.key : 'not a listed control: ' + el.outerHTML.slice(0, 80),
          tag: el.tagName.toLowerCase(), type: el.type || '', name, width: box.width, height: box.height,
          outline: style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0};
}"""

JS_SAID = """(root) => Array.from(document.querySelector(root).querySelectorAll('[aria-live], [role=status], [role=alert]'))
  .map(e => e.textContent.trim()).join(' | ')"""

# Controls that only set what a later button uses: they say so, and the button's result is read.
DEFERRED = {"ch09.generate": {"seed", "num_tokens"}}


def operate(page, state: dict) -> None:
    """What a keyboard user does with the focused control."""
    kind = state["tag"] if state["tag"] != "input" else state["type"]
    if kind == "canvas":  # chapter 8's drawing box: pen down, a stroke cell by cell, pen up
        for key in ["Space", "ArrowDown", "ArrowDown", "ArrowDown", "ArrowRight", "ArrowRight", "Space"]:
            page.keyboard.press(key)
    elif kind in ("range", "radio"):
        page.keyboard.press("ArrowRight")
    elif kind in ("select", "number"):
        page.keyboard.press("ArrowDown" if kind == "select" else "ArrowUp")
    elif kind in ("text", "search", "textarea"):
        page.keyboard.press("End")
        page.keyboard.type(" the")
        page.keyboard.press("Enter")
    else:  # a button
        page.keyboard.press("Enter")


def said_changed(page, root: str, before: str, timeout_ms: int = 15_000) -> str:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with contextlib.suppress(PlaywrightTimeout):  # nothing said: the caller reports it
        page.wait_for_function("([root, before, js]) => eval(js)(root) !== before",
                               arg=[root, before, JS_SAID], timeout=timeout_ms)
    return page.evaluate(JS_SAID, root)


@pytest.mark.parametrize("docname, name", VIEWS)
def test_live_view_works_from_the_keyboard(browser, site, docname, name):  # noqa: F811
    with LivePage(browser, site, docname, name) as live:
        live.start()
        page = live.page
        args = [live.root, CONTROLS, LIST_CONTROLS]
        wanted = page.evaluate(JS_CONTROLS, args)
        assert wanted, f"{name}: no controls"
        # Reach the view from the control before it, with Tab (keyboard focus shows its outline).
        page.evaluate("([root, selector]) => document.querySelector(root).querySelector(selector).focus()",
                      [live.root, CONTROLS])
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Tab")
        reached = []
        for _ in wanted:
            state = page.evaluate(JS_FOCUSED, args)
            assert state, f"{name}: Tab left the view after {reached} (wanted {wanted})"
            where = f"{name} control {state['key']!r} ({state['tag']} {state['type']})"
            assert state["name"], f"{where}: no accessible name"
            assert state["outline"], f"{where}: no visible focus outline"
            assert state["width"] >= 24 and state["height"] >= 24, (
                f"{where}: target {state['width']:.0f}x{state['height']:.0f} px, under 24 px")
            before = page.evaluate(JS_SAID, live.root)
            operate(page, state)
            after = said_changed(page, live.root, before)
            if after == before and state["type"] in ("range", "radio"):  # at the last value: back one
                page.keyboard.press("ArrowLeft")
                after = said_changed(page, live.root, before)
            assert after != before, f"{where}: nothing said in words after the keyboard moved it ({before!r})"
            if any(key in state["key"] for key in DEFERRED.get(name, ())):
                assert "press" in after.lower(), f"{where}: does not say which button uses it: {after!r}"
            reached.append(state["key"])
            for _ in range(5):  # on to the next control (a radio group is one stop)
                page.keyboard.press("Tab")
                now = page.evaluate(JS_FOCUSED, args)
                if now is None or now["key"] != state["key"]:
                    break
        assert reached == wanted, f"{name}: Tab order {reached}, page order {wanted}"
        assert live.events == [], "\n".join(live.events)
