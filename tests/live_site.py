"""Shared helpers of the live views' browser tests (issue 31): tests/test_site_live_chNN.py.

Same built site, server, Chromium and settings as tests/test_site.py (its ``site`` and
``browser`` fixtures, imported below). A :class:`LivePage` opens one page, starts one
live view (scrolls it into sight) and records every page error, console error, failed
request and request leaving 127.0.0.1 (blocked). Usage in a test module::

    from live_site import LivePage, browser, site  # noqa: F401 (fixtures)

    def test_view(browser, site):
        with LivePage(browser, site, "notebooks/ch02_attention_pooling", "ch02.pooling") as live:
            live.set_value("input[type=range]", 0.3)
            state = live.wait_for_result()
            assert live.events == []
"""

from __future__ import annotations

import re
from typing import Self

import pytest
from test_site import CHROMIUM, CHROMIUM_ARGS, DESKTOP, HTML, browser, site  # noqa: F401 (fixtures)

__all__ = ["HEARD", "HTML", "MODELS", "SHOWN", "LivePage", "browser", "built_manifest", "open_from_file",
           "site"]

JS_SET = """([root, selector, value]) => {
  const input = document.querySelector(root).querySelector(selector);
  input.value = String(value);
  input.dispatchEvent(new Event("input", {bubbles: true}));
  input.dispatchEvent(new Event("change", {bubbles: true}));
  return input.value;
}"""


MODELS = HTML / "_static" / "live" / "models"

# What a screen reader reads of a live region (all but aria-hidden: live.mjs's say shows <unk>
# aria-hidden, "unknown word" beside it out of sight), and what the page shows (all but those names).
HEARD = """(el) => { const copy = el.cloneNode(true);
  copy.querySelectorAll('[aria-hidden=true]').forEach((e) => e.remove());
  return copy.textContent; }"""
SHOWN = """(el) => { const copy = el.cloneNode(true);
  copy.querySelectorAll('.ab-sr-only').forEach((e) => e.remove());
  return copy.textContent; }"""


def built_manifest(docname: str, name: str) -> dict:
    """The built site's manifest of one live view (``<name>.json``), for tests that rerun its
    ONNX files in Python; skips the test when the site or onnxruntime is missing."""
    import json

    path = MODELS / f"{name}.json"
    if not (HTML / f"{docname}.html").is_file() or not path.is_file():
        pytest.skip(f"no {name} live view in {HTML}: build the site first with `make book`")
    pytest.importorskip("onnxruntime")
    return json.loads(path.read_text(encoding="utf-8"))


class LivePage:
    """One page of the built site with one live view started in it."""

    def __init__(
        self, browser, site: str, docname: str, name: str, timeout_ms: int = 60_000
    ):
        if not (HTML / f"{docname}.html").is_file():
            pytest.skip(f"{docname}.html is not built in {HTML}: run `make book` first")
        self.root = f'.ab-live[data-live="{name}"]'
        self.url = f"{site}{docname}.html"
        self.events: list[str] = []
        self.context = browser.new_context(viewport=DESKTOP)
        origin = site.rstrip("/")

        def block(route):
            self.events.append(
                f"request outside the site (blocked): {route.request.url}"
            )
            route.abort()

        self.context.route(
            re.compile(r"^(?!" + re.escape(origin) + r"[/?#]|data:|blob:|about:).*"),
            block,
        )
        self.page = self.context.new_page()
        self.page.set_default_timeout(timeout_ms)
        self.page.on(
            "pageerror", lambda exc: self.events.append(f"JavaScript error: {exc}")
        )
        self.page.on(
            "console",
            lambda msg: (
                msg.type == "error" and self.events.append(f"console error: {msg.text}")
            ),
        )
        self.page.on(
            "response",
            lambda r: (
                r.status >= 400 and self.events.append(f"HTTP {r.status}: {r.url}")
            ),
        )
        self.page.on(
            "requestfailed",
            lambda r: self.events.append(f"request failed: {r.url} ({r.failure})"),
        )

    def __enter__(self) -> Self:
        self.page.goto(self.url, wait_until="load")
        assert self.page.locator(self.root).count() == 1, (
            f"{self.url}: no live view {self.root}"
        )
        return self

    def __exit__(self, *exc) -> None:
        self.context.close()

    def dataset(self, selector: str = "") -> dict:
        """The data-* attributes of the view's root (or of an element inside it)."""
        return self.page.evaluate(
            "([root, sel]) => { const r = document.querySelector(root);"
            " return {...(sel ? r.querySelector(sel) : r).dataset}; }",
            [self.root, selector],
        )

    def start(self) -> dict:
        """Scroll the view into sight and wait until its first result; returns the root's data-*."""
        self.page.locator(self.root).scroll_into_view_if_needed()
        self.page.wait_for_function(
            "(root) => { const r = document.querySelector(root);"
            " return r.dataset.state === 'error' || Number(r.dataset.results || 0) >= 1; }",
            arg=self.root,
        )
        state = self.dataset()
        status = self.page.locator(f"{self.root} .ab-live-status").text_content()
        assert state.get("state") != "error", (
            f"{self.url}: the live view failed: {status}"
        )
        return state

    def results(self) -> int:
        return int(self.dataset().get("results", 0))

    def set_value(self, selector: str, value) -> str:
        """Set an input or select inside the view and fire its input and change events."""
        return self.page.evaluate(JS_SET, [self.root, selector, value])

    def wait_for_result(self, after: int) -> dict:
        """Wait until the view has shown more than ``after`` results and is idle; returns its data-*."""
        self.page.wait_for_function(
            "([root, n]) => Number(document.querySelector(root).dataset.results || 0) > n",
            arg=[self.root, after],
        )
        self.page.wait_for_timeout(50)  # moves fired together finish in one more run
        return self.dataset()


def open_from_file(browser, docname: str, name: str) -> dict:
    """Open the built page from file://: what the view shows there (state, note, fallback)."""
    context = browser.new_context(viewport=DESKTOP)
    try:
        page = context.new_page()
        page.goto((HTML / f"{docname}.html").resolve().as_uri(), wait_until="load")
        return page.evaluate(
            """(name) => { const r = document.querySelector(`.ab-live[data-live="${name}"]`);
              const f = r.querySelector('.ab-live-fallback');
              return {state: r.dataset.state, note: r.querySelector('.ab-live-status').textContent,
                      fallback_shown: !f.hidden && f.getBoundingClientRect().height > 0,
                      fallback_images: f.querySelectorAll('img').length}; }""",
            name,
        )
    finally:
        context.close()
