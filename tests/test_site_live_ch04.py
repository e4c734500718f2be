"""Chapter 4's live translator on the built site, in headless Chromium.

The test types sentences of its own (unknown words, capitals, a sentence longer
than the model reads) into the page, waits for the page's translation, and
compares the tokens and every attention weight with ``ab.translate`` run in Python
on the same weights: the notebook saved its model for this test when the site
was built (``<ATTENTION_BOOK_FRAMES>/live/ch04.translate.pt``). No page error and
no request leaving 127.0.0.1 are allowed; from ``file://`` the precomputed
translations stay and the page says how to serve the site.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from test_site import CHROMIUM_ARGS, DESKTOP, FRAMES, HTML, browser, site  # noqa: F401

from attention_book.book.live_ch04 import reference_translation

pytestmark = pytest.mark.browser

PAGE = "notebooks/ch04_bahdanau.html"
VIEW = '.ab-live[data-live="ch04.translate"]'
TOL = 1e-4
# Not among the page's examples: unknown words, capitals and no space before "!", a sentence
# longer than the model's num_steps (the page trims it as the package does).
TYPED = ["My cat is VERY tired!", "i am happy , but she is not home today , sadly ."]


@pytest.fixture(scope="module")
def reference():
    path = FRAMES / "live" / "ch04.translate.pt"
    if not path.is_file():
        pytest.skip(
            f"no {path}: build the site with `make book`, whose chapter 4 saves its translator there"
        )
    saved = torch.load(path, weights_only=False)
    return saved["model"], saved["data"]


@pytest.fixture
def page(browser, site):  # noqa: F811 - the fixtures imported from test_site
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.problems = []
    origin = site.rstrip("/")

    def block_external(route):
        page.problems.append(f"request outside the site (blocked): {route.request.url}")
        route.abort()

    context.route(
        re.compile(r"^(?!" + re.escape(origin) + r"[/?#]|data:|blob:|about:).*"),
        block_external,
    )
    page.on("pageerror", lambda exc: page.problems.append(f"JavaScript error: {exc}"))
    page.on(
        "console",
        lambda m: (
            m.type == "error" and page.problems.append(f"console error: {m.text}")
        ),
    )
    page.on(
        "response",
        lambda r: r.status >= 400 and page.problems.append(f"HTTP {r.status}: {r.url}"),
    )
    yield page
    context.close()


def _result(page, sentence: str) -> dict:
    """Type ``sentence`` into the view, submit it, and wait for the page's translation of it."""
    view = page.locator(VIEW)
    box = view.locator("input[type=text]")
    box.fill(sentence)
    box.press("Enter")
    page.wait_for_function(
        """([sel, s]) => { const r = document.querySelector(sel).dataset.result;
             return r && JSON.parse(r).sentence === s; }""",
        arg=[VIEW, sentence],
    )
    return json.loads(view.get_attribute("data-result"))


def test_typed_sentences_translate_as_in_python(page, site, reference):  # noqa: F811
    model, data = reference
    page.goto(site + PAGE, wait_until="load")
    view = page.locator(VIEW)
    view.scroll_into_view_if_needed()
    page.wait_for_function(
        f"document.querySelector('{VIEW}').dataset.state === 'ready'"
    )
    for sentence in TYPED:
        got = _result(page, sentence)
        want = reference_translation(model, data, sentence)
        for key in ("source", "reads", "tokens", "rows"):
            assert got[key] == want[key], f"{sentence!r}: {key}"
        np.testing.assert_allclose(
            np.array(got["attention"]), np.array(want["attention"]), atol=TOL
        )
        # what the reader sees: the French, what the model read, one cell per weight
        assert " ".join(want["tokens"]) in view.locator(".ab-live-output").inner_text()
        assert "<unk>" in view.locator(".ab-live-reads").inner_text()
        cells = view.locator("svg.ab-live-heatmap rect").count()
        assert cells == len(want["rows"]) * len(want["source"])
    # the heatmap fits the column at 1280 px
    svg, column = (
        view.locator("svg.ab-live-heatmap").bounding_box(),
        view.bounding_box(),
    )
    assert svg["x"] + svg["width"] <= column["x"] + column["width"] + 1
    # an empty sentence gets a message, not an error or a stale map
    box = view.locator("input[type=text]")
    box.fill("   ")
    box.press("Enter")
    page.wait_for_function(f"document.querySelector('{VIEW}').dataset.result === ''")
    assert "Type an English sentence" in view.locator(".ab-live-output").inner_text()
    assert view.locator("svg.ab-live-heatmap").count() == 0
    assert page.problems == []


def test_file_url_keeps_the_translations_and_says_how_to_serve(browser):  # noqa: F811
    path = HTML / PAGE
    if not path.is_file():
        pytest.skip(f"no {path}: build the site with `make book`")
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.goto(path.as_uri(), wait_until="load")
    view = page.locator(VIEW)
    assert view.get_attribute("data-state") == "file"
    assert view.locator(".ab-live-fallback table").is_visible()
    assert "python -m http.server" in view.locator(".ab-live-status").inner_text()
    context.close()
