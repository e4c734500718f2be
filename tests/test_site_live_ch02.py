"""Chapter 2's live view in Chromium over the built site (issue 31).

Settings the test chooses (none of them the page's defaults) are set on the page; the
estimate and the weights the page computed with onnxruntime-web must equal the package's
``ab.nadaraya_watson`` on the same points, to 1e-4. From file:// the frames stay with a note.
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

DOC = "notebooks/ch02_attention_pooling"
NAME = "ch02.pooling"

JS_SETTLED = """([root, want]) => {
  const v = document.querySelector(root).querySelector('.ab-live-view');
  return v && v.dataset.kernel === want.kernel && v.dataset.n === String(want.n)
    && Math.abs(Number(v.dataset.query) - want.query) < 1e-9
    && Math.abs(Math.log10(Number(v.dataset.sigma)) - Math.log10(want.sigma)) < 1e-9;
}"""


@pytest.fixture(scope="module")
def view():
    """The package's side: the notebook's data (the book's seed) and the same point order."""
    return ab.ch02_live_view(ab.make_kernel_data(n_train=40, noise=1.0))


@pytest.mark.parametrize(
    ("kernel", "sigma", "n", "query"),
    [
        ("gaussian", 0.37, 57, 3.21),
        ("epanechnikov", 0.83, 23, 1.07),
        ("boxcar", 1.4, 131, 4.62),
    ],
)
def test_the_page_pools_as_the_package_does(
    browser,
    site,
    view,
    kernel,
    sigma,
    n,
    query,
):
    with LivePage(browser, site, DOC, NAME) as live:
        first = live.start()
        print(
            f"\n{NAME}: first result {first['firstResultMs']} ms after the view came into sight"
        )
        want = {"kernel": kernel, "sigma": sigma, "n": n, "query": query}
        live.set_value("[name=kernel]", kernel)
        live.set_value("[name=sigma]", math.log10(sigma))
        live.set_value("[name=n]", n)
        live.set_value("[name=query]", query)
        live.page.wait_for_function(JS_SETTLED, arg=[live.root, want])
        shown = live.dataset(".ab-live-view")
        expected, weights = view.estimate(
            n=n, sigma=float(shown["sigma"]), query=float(shown["query"]), kernel=kernel
        )
        assert math.isfinite(expected), (
            "the test's settings must give the query an estimate"
        )
        assert abs(float(shown["estimate"]) - expected) <= 1e-4, (
            shown["estimate"],
            expected,
        )
        np.testing.assert_allclose(
            json.loads(shown["weights"]), weights.numpy(), atol=1e-4
        )
        readout = live.page.locator(f"{live.root} .ab-live-readout").text_content()
        assert f"{expected:.3f}" in readout, readout
        print(f"{NAME}: last step {live.dataset()['lastStepMs']} ms")
        assert live.events == [], "\n".join(live.events)


def test_a_query_out_of_reach_says_so_instead_of_a_number(browser, site):
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        live.set_value("[name=kernel]", "boxcar")
        live.set_value("[name=sigma]", math.log10(0.011))
        live.set_value("[name=n]", 3)
        want = {
            "kernel": "boxcar",
            "sigma": 0.011,
            "n": 3,
            "query": float(live.set_value("[name=query]", 0.5)),
        }
        live.page.wait_for_function(JS_SETTLED, arg=[live.root, want])
        readout = live.page.locator(f"{live.root} .ab-live-readout").text_content()
        assert "undefined" in readout and "NaN" not in readout, readout
        # no largest weight to put on the weight axis: its top tick says nothing (was "–")
        assert live.page.locator(f"{live.root} .ab-live-wmax").text_content() == ""
        assert live.events == [], "\n".join(live.events)


def test_tied_largest_weights_are_counted_not_given_to_one_point(browser, site, view):
    """The boxcar gives every point in reach the same weight: the readout says how many tie."""
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        want = {"kernel": "boxcar", "sigma": 0.3, "n": 40, "query": 1.0}
        live.set_value("[name=kernel]", "boxcar")
        live.set_value("[name=sigma]", math.log10(0.3))
        live.set_value("[name=n]", 40)
        live.set_value("[name=query]", 1.0)
        live.page.wait_for_function(JS_SETTLED, arg=[live.root, want])
        shown = live.dataset(".ab-live-view")
        _, weights = view.estimate(
            n=40, sigma=float(shown["sigma"]), query=1.0, kernel="boxcar"
        )
        tied = int((weights >= weights.max() * (1 - 1e-5)).sum())
        assert tied > 1, "the test's settings must give a tie"
        readout = live.page.locator(f"{live.root} .ab-live-readout").text_content()
        assert f"shared by {tied} points that tie" in readout, readout
        assert f"{float(weights.max()):.3f}" in readout, readout
        assert live.events == [], "\n".join(live.events)


JS_POINTS = """(root) => {
  const v = document.querySelector(root).querySelector('.ab-live-view');
  const zero = Array.from(v.querySelectorAll('circle.ab-live-zero')).map((c) => {
    const s = getComputedStyle(c);
    return {r: Number(c.getAttribute('r')), stroke: s.stroke, width: parseFloat(s.strokeWidth),
            opacity: Number(s.strokeOpacity) * Number(s.opacity)};
  });
  const legend = Array.from(v.querySelectorAll('svg text')).map((t) => t.textContent);
  return {zero, legend, ring: !!v.querySelector('.ab-live-key-ring')};
}"""


def test_points_of_weight_zero_are_outlined_and_the_legend_says_so(browser, site):
    """A training point out of the kernel's reach is a hollow ring drawn in full (a phone reader
    could not find the faint dots, issue 38), and the legend says what a ring means."""
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        want = {"kernel": "boxcar", "sigma": 0.3, "n": 40, "query": 1.0}
        for key in ("kernel", "sigma", "n", "query"):
            value = math.log10(want[key]) if key == "sigma" else want[key]
            live.set_value(f"[name={key}]", value)
        live.page.wait_for_function(JS_SETTLED, arg=[live.root, want])
        weights = json.loads(live.dataset(".ab-live-view")["weights"])
        shown = live.page.evaluate(JS_POINTS, live.root)
        assert 0 < len(shown["zero"]) == sum(w == 0 for w in weights) < len(weights)
        for ring in shown["zero"]:
            assert ring["r"] >= 3 and ring["width"] >= 1 and ring["opacity"] == 1, ring
            assert ring["stroke"] not in ("none", ""), ring
        assert shown["ring"] and any("weight 0" in t for t in shown["legend"]), shown["legend"]
        assert live.events == [], "\n".join(live.events)


JS_WATCH = """() => {
  window.__abViews = [];
  new MutationObserver((records) => {
    for (const r of records) for (const node of r.addedNodes) {
      if (!node.classList || !node.classList.contains('ab-live-view')) continue;
      const root = node.closest('.ab-live');
      const f = root.querySelector('.ab-live-fallback');
      window.__abViews.push({frames_shown: !!f && !f.hidden,
                             height: root.getBoundingClientRect().height});
    }
  }).observe(document, {childList: true, subtree: true});
}"""


def test_the_view_takes_the_frames_place_before_its_first_result(browser, site):
    """While the first run loads its graph (seconds on a slow machine) the frames and the view
    are never shown together, and the first result does not make the page jump."""
    live = LivePage(browser, site, DOC, NAME)
    live.context.add_init_script(f"({JS_WATCH})()")
    with live:
        live.start()
        seen = live.page.evaluate("() => window.__abViews")
        assert len(seen) == 1, seen
        assert not seen[0]["frames_shown"], seen
        after = live.page.evaluate(
            "(root) => document.querySelector(root).getBoundingClientRect().height",
            live.root,
        )
        print(
            f"\n{NAME}: height {seen[0]['height']:.0f} px when mounted, {after:.0f} px at the first result"
        )
        assert abs(after - seen[0]["height"]) <= 2, (seen, after)
        assert live.events == [], "\n".join(live.events)


def test_from_file_the_frames_stay_with_a_note(browser):
    shown = open_from_file(browser, DOC, NAME)
    assert shown["state"] == "file", shown
    assert "python -m http.server -d _build/html" in shown["note"], shown["note"]
    assert shown["fallback_shown"] and shown["fallback_images"] >= 1, shown


def test_each_move_is_said_first(browser, site):
    """Moving "points n" read the same sentence each time (accessibility reader, issue 38): the
    readout, a live region, starts with what was moved ("31 points: at x = ..."); the query
    alone starts "At x = "."""
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        readout = f"{live.root} .ab-live-readout"
        for n in (30, 31):
            live.set_value("[name=n]", n)
            live.page.wait_for_function(
                "([sel, n]) => document.querySelector(sel).textContent.startsWith(`${n} points: at x = `)",
                arg=[readout, n],
            )
        live.set_value("[name=sigma]", math.log10(0.5))
        live.page.wait_for_function(
            "(sel) => document.querySelector(sel).textContent.startsWith('σ = 0.500: at x = ')", arg=readout
        )
        live.set_value("[name=query]", 2.5)
        live.page.wait_for_function(
            "(sel) => document.querySelector(sel).textContent.startsWith('At x = 2.50 ')", arg=readout
        )
        # the query slider says its value as σ's does (it had no aria-valuetext: 17 digits read)
        slider = live.page.locator(f"{live.root} [name=query]")
        assert slider.get_attribute("aria-valuetext") == "x = 2.50"
        assert live.page.locator(f"{live.root} [name=sigma]").get_attribute("aria-valuetext") == "σ = 0.500"
        assert live.events == [], "\n".join(live.events)


JS_TAB_STOP = """(root) => {
  const el = document.activeElement, r = document.querySelector(root);
  return {inView: !!(el && r.contains(el)), tag: el ? el.tagName.toLowerCase() : '',
          id: el ? el.id : '', past: !!(el && el !== document.body && !r.contains(el)
            && (r.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING))};
}"""


def test_tab_from_the_heading_before_it_lands_on_its_first_control(browser, site):
    """Issue 38: the view was built only once scrolled into sight, so a keyboard user who Tabs
    on from the page's top went past it (nothing focusable was there yet). It is built as the
    page loads (live.py's build_on_load; live.mjs loads its manifest and module, the model runtime
    waits): from the heading before it, with nothing scrolled, Tab reaches its first control
    (the kernel menu) before anything after the view, and no model has loaded before that."""
    with LivePage(browser, site, DOC, NAME) as live:
        page = live.page
        page.wait_for_function(
            "(root) => document.querySelector(root).querySelector('.ab-live-controls select')",
            arg=live.root, timeout=10_000)
        assert page.evaluate("() => window.scrollY") == 0
        assert live.results() == 0  # nothing computed (nor the runtime fetched) before the reader comes
        heading = page.evaluate("""(root) => {
          const r = document.querySelector(root);
          const hs = Array.from(document.querySelectorAll('#main-content h2, #main-content h3'))
            .filter(h => h.compareDocumentPosition(r) & Node.DOCUMENT_POSITION_FOLLOWING);
          const h = hs[hs.length - 1];
          h.setAttribute('tabindex', '-1'); h.focus({preventScroll: true});
          return h.textContent.trim();
        }""", live.root)
        stops = []
        for _ in range(20):  # the cells between the heading and the view may hold a few stops
            page.keyboard.press("Tab")
            stop = page.evaluate(JS_TAB_STOP, live.root)
            stops.append(stop)
            if stop["inView"] or stop["past"]:
                break
        assert stops[-1]["inView"] and stops[-1]["tag"] == "select" and stops[-1]["id"].endswith("-kernel"), (
            f"Tab from {heading!r}: {stops}")
        state = live.wait_for_result(0)  # focus brought the reader: the first result follows
        assert state.get("state") == "ready", state
        assert live.events == [], "\n".join(live.events)
