"""Chapter 1's live view in Chromium over the built site (issue 36).

The reader types a name, presses Enter and moves the temperature: the scores, weights and the
sentence the page says must equal the package's (lookup.similarity_scores, lookup_weights,
soft_lookup) to 1e-5, at a phone's width (390 px) and the desktop's (1280 px), without a
sideways scroll. From file:// the precomputed table stays with a note.
"""

# ruff: noqa: F811 (the browser and site fixtures come from live_site)
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from live_site import LivePage, browser, open_from_file, site  # noqa: F401 (fixtures)

import attention_book as ab

pytestmark = pytest.mark.browser

DOC = "notebooks/ch01_queries_keys_values"
NAME = "ch01.soft_lookup"

JS_SETTLED = """([root, query, t]) => {
  const v = document.querySelector(root).querySelector('.ab-live-view');
  return v && v.dataset.query === query && Math.abs(Math.log10(Number(v.dataset.temperature)) - Math.log10(t)) < 1e-9;
}"""

JS_WIDTHS = """(root) => {
  const r = document.querySelector(root);
  return {page: document.documentElement.scrollWidth, viewport: window.innerWidth,
          view: r.querySelector('.ab-live-view').getBoundingClientRect().right};
}"""


@pytest.fixture(scope="module")
def view():
    return ab.ch01_live_view()


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize(("query", "temperature"), [("Smolar", 0.3), ("hue", 0.05), ("Wernez", 2.0)])
def test_the_page_looks_up_as_the_package_does(browser, site, view, width, query, temperature):
    with LivePage(browser, site, DOC, NAME) as live:
        live.page.set_viewport_size({"width": width, "height": 900})
        live.start()
        box = live.page.locator(f"{live.root} input[name=query]")
        box.fill(query)
        live.set_value("[name=temperature]", math.log10(temperature))
        box.press("Enter")  # Enter looks the name up at once
        live.page.wait_for_function(JS_SETTLED, arg=[live.root, query, temperature])
        shown = live.dataset(".ab-live-view")
        t = float(shown["temperature"])
        want = view.lookup(query, t)
        np.testing.assert_allclose(json.loads(shown["scores"]), want["scores"], atol=1e-6)
        np.testing.assert_allclose(json.loads(shown["weights"]), want["weights"], atol=1e-5)
        said = live.page.locator(f"{live.root} .ab-live-readout").text_content()
        assert said == view.said(query, t), said
        rows = live.page.locator(f"{live.root} .ab-live-view tbody tr").all_text_contents()
        assert len(rows) == len(view.keys) and all(k in r for k, r in zip(view.keys, rows))
        # the slider moves log10 T: a screen reader says the temperature, in words (issue 38)
        valuetext = live.page.locator(f"{live.root} input[name=temperature]").get_attribute("aria-valuetext")
        assert valuetext.startswith("temperature ") and math.isclose(float(valuetext.split()[1]), t, rel_tol=0.05), (
            valuetext, t)
        for label in ("name", "temperature T"):  # labelled controls
            assert live.page.get_by_label(label, exact=False).count() >= 1
        widths = live.page.evaluate(JS_WIDTHS, live.root)
        assert widths["page"] <= widths["viewport"] and widths["view"] <= widths["viewport"], widths
        assert live.events == [], "\n".join(live.events)


def test_an_empty_name_asks_for_one(browser, site):
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        box = live.page.locator(f"{live.root} input[name=query]")
        box.fill("   ")
        box.press("Enter")
        live.page.wait_for_function(JS_SETTLED, arg=[live.root, "", 0.3])
        said = live.page.locator(f"{live.root} .ab-live-readout").text_content()
        assert said.startswith("Type a name"), said
        assert live.events == [], "\n".join(live.events)
        # the view computes in JavaScript alone: the page fetches no model runtime (live.mjs)
        fetched = live.page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name)")
        assert not [f for f in fetched if "onnxruntime" in f], [f for f in fetched if "onnxruntime" in f]


def test_from_a_file_the_table_stays(browser):
    state = open_from_file(browser, DOC, NAME)
    assert state["state"] == "file" and state["fallback_shown"], state
