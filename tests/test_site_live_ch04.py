"""Chapter 4's live translator on the built site, in headless Chromium.

The test types sentences of its own (unknown words, capitals, a sentence longer
than the model reads) into the page, waits for the page's translation, and
compares the tokens and every attention weight with ``ab.translate`` run in Python
on the same weights: the notebook saved its model for this test when the site
was built (``<ATTENTION_BOOK_FRAMES>/live/ch04.translate.pt``). No page error and
no request leaving 127.0.0.1 are allowed (tests/live_site.py records them); from
``file://`` the precomputed translations stay and the page says how to serve the site.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from live_site import HEARD, HTML, SHOWN, LivePage, browser, open_from_file, site  # noqa: F401 (fixtures)
from test_site import FRAMES

from attention_book.book.live_ch04 import reference_translation

pytestmark = pytest.mark.browser

DOC, NAME = "notebooks/ch04_bahdanau", "ch04.translate"
TOL = 1e-4
# Not among the page's examples: unknown words, capitals and no space before "!", a sentence
# longer than the model's num_steps (the page trims it as the package does), accented capitals.
TYPED = [
    "My cat is VERY tired!",
    "i am happy , but she is not home today , sadly .",
    "ÉLODIE   is RICH?",
]


@pytest.fixture(scope="module")
def reference():
    path = FRAMES / "live" / f"{NAME}.pt"
    if not path.is_file():
        pytest.skip(
            f"no {path}: `make book` builds chapter 4, which saves its translator there"
        )
    saved = torch.load(path, weights_only=False)
    return saved["model"], saved["data"]


def _translate(live: LivePage, sentence: str) -> dict:
    """Type ``sentence`` into the view, press Enter, and wait for the page's translation of it."""
    box = live.page.locator(f"{live.root} input[type=text]")
    box.fill(sentence)
    box.press("Enter")
    live.page.wait_for_function(
        """([root, s]) => { const r = document.querySelector(root).dataset.result;
             return r && JSON.parse(r).sentence === s; }""",
        arg=[live.root, sentence],
    )
    return json.loads(live.dataset()["result"])


def test_typed_sentences_translate_as_in_python(browser, site, reference):  # noqa: F811
    model, data = reference
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        view = live.page.locator(live.root)
        for sentence in TYPED:
            got = _translate(live, sentence)
            want = reference_translation(model, data, sentence)
            for key in ("source", "reads", "tokens", "rows"):
                assert got[key] == want[key], f"{sentence!r}: {key}"
            np.testing.assert_allclose(
                np.array(got["attention"]), np.array(want["attention"]), atol=TOL
            )
            # what the reader sees: the French, what the model read, one cell per weight
            # (the shown text: a screen reader hears <unk> as "unknown word", kept out of sight)
            shown = view.locator(".ab-live-output").evaluate(SHOWN)
            assert " ".join(want["tokens"]) in " ".join(shown.split())
            assert "<unk>" in view.locator(".ab-live-reads").inner_text()
            cells = view.locator("svg.ab-live-heatmap rect").count()
            assert cells == len(want["rows"]) * len(want["source"])
        # the heatmap fits the column at 1280 px
        heatmap = view.locator("svg.ab-live-heatmap")
        heatmap.wait_for(state="visible")  # laid out (a loaded machine may lag a frame)
        svg = heatmap.bounding_box()
        column = view.bounding_box()
        assert svg["x"] + svg["width"] <= column["x"] + column["width"] + 1
        # an empty sentence gets a message, not an error or a stale map
        box = view.locator("input[type=text]")
        box.fill("   ")
        box.press("Enter")
        live.page.wait_for_function(
            "(root) => document.querySelector(root).dataset.result === ''",
            arg=live.root,
        )
        assert (
            "Type an English sentence" in view.locator(".ab-live-output").inner_text()
        )
        assert view.locator("svg.ab-live-heatmap").count() == 0
        assert "Translated in your browser" not in view.locator(".ab-live-status").inner_text()
        assert live.events == []


def test_special_tokens_are_said_by_name(browser, site):  # noqa: F811
    """A fresh reader (issue 38) typed "the cat sat on" and Enter: the live region said "French:
    nous <unk> .", read "less than unk greater than". It says the tokens as chapter 7's does
    (live.mjs's say: "unknown word"); the page shows them as written."""
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        got = _translate(live, "the cat sat on")
        french = live.page.locator(f"{live.root} .ab-live-output")
        shown, heard = french.evaluate(SHOWN), french.evaluate(HEARD)
        assert shown == "French: " + " ".join(got["tokens"]), shown
        assert "<" not in heard and ">" not in heard, heard
        if "<unk>" in got["tokens"]:
            assert "unknown word" in heard, heard
        # nothing typed the model knows: it still says the sentence's unknown words by name
        got = _translate(live, "zzz qqq")
        heard = french.evaluate(HEARD)
        assert "<" not in heard, heard
        assert live.events == []


def test_file_url_keeps_the_translations_and_says_how_to_serve(browser):  # noqa: F811
    if not (HTML / f"{DOC}.html").is_file():
        pytest.skip(f"{DOC}.html is not built in {HTML}: run `make book` first")
    shown = open_from_file(browser, DOC, NAME)
    assert shown["state"] == "file"
    assert shown["fallback_shown"]
    assert "python -m http.server" in shown["note"]
