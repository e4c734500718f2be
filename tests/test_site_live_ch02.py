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
        assert live.events == [], "\n".join(live.events)


def test_from_file_the_frames_stay_with_a_note(browser):
    shown = open_from_file(browser, DOC, NAME)
    assert shown["state"] == "file", shown
    assert "python -m http.server -d _build/html" in shown["note"], shown["note"]
    assert shown["fallback_shown"] and shown["fallback_images"] >= 1, shown
