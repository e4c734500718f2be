"""Chapter 7's live Transformer on the built site, in headless Chromium.

The test types sentences of its own (unknown words, capitals, a sentence longer than the
model reads) into the page, waits for the page's translation, and compares the tokens and
every cross-attention weight with the package run in Python on the same weights (the
notebook saved its model for this test when the site was built:
``<ATTENTION_BOOK_FRAMES>/live/ch07.translate.pt``). It then picks one head in the menu and
compares the drawn map and the sentence said to screen readers. The map fits the column at
1280 and at 390 px, and every text of the view shows at least 9 px high at both. No page error and no request leaving 127.0.0.1 are allowed
(tests/live_site.py records them); from ``file://`` the precomputed translations stay and
the page says how to serve the site.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from live_site import HEARD, HTML, SHOWN, LivePage, browser, open_from_file, site  # noqa: F401 (fixtures)
from test_site import FRAMES, PHONE

from attention_book.book.live_ch07 import pick_map, transformer_reference

pytestmark = pytest.mark.browser

DOC, NAME = "notebooks/ch07_transformer", "ch07.translate"
TOL = 1e-4
# Not among the page's examples: unknown words, capitals and no space before "!", a sentence
# longer than the model's num_steps (the page cuts it as the package does), accented capitals,
# control tokens typed by the reader (unknown words: only the appended <eos> ends a sentence).
TYPED = [
    "My cat is VERY tired!",
    "i am happy , but she is not home today , sadly .",
    "ÉLODIE   is RICH?",
    "i'm <eos> home <bos> .",
]


@pytest.fixture(scope="module")
def reference():
    path = FRAMES / "live" / f"{NAME}.pt"
    if not path.is_file():
        pytest.skip(
            f"no {path}: `make book` builds chapter 7, which saves its Transformer there"
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


def _fits(view) -> bool:
    heatmap = view.locator("svg.ab-live-heatmap")
    heatmap.wait_for(state="visible")  # laid out (a loaded machine may lag a frame)
    svg, column = heatmap.bounding_box(), view.bounding_box()
    return svg["x"] + svg["width"] <= column["x"] + column["width"] + 1


# Every text of the view as drawn, in CSS px: an SVG text's font size times the SVG's scale, an
# HTML text's computed font size (issue 36: the map's numbers showed 6-7 px on a 390 px phone).
SMALLEST_TEXT = """(root) => {
  const view = document.querySelector(root);
  const sizes = [];
  for (const svg of view.querySelectorAll("svg")) {
    const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
    for (const t of svg.querySelectorAll("text")) {
      sizes.push(Number(t.getAttribute("font-size")) * scale);
    }
  }
  const walker = document.createTreeWalker(view, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const parent = walker.currentNode.parentElement;
    if (!walker.currentNode.textContent.trim() || parent.closest("svg")) continue;
    if (parent.getClientRects().length) sizes.push(parseFloat(getComputedStyle(parent).fontSize));
  }
  return Math.min(...sizes);
}"""


def _smallest_text_px(live: LivePage) -> float:
    return live.page.evaluate(SMALLEST_TEXT, live.root)


def test_typed_sentences_translate_as_in_python(browser, site, reference):  # noqa: F811
    model, data = reference
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        view = live.page.locator(live.root)
        for sentence in TYPED:
            got = _translate(live, sentence)
            want = transformer_reference(model, data, sentence)
            for key in ("source", "reads", "cut", "tokens", "rows", "writes"):
                assert got[key] == want[key], f"{sentence!r}: {key}"
            np.testing.assert_allclose(
                np.array(got["cross"]), np.array(want["cross"]), atol=TOL
            )
            # what the reader sees: the French, what the model read, one cell per weight
            said = view.locator(".ab-live-output").evaluate(SHOWN)
            assert " ".join(want["tokens"]) in said
            assert "<unk>" in view.locator(".ab-live-reads").inner_text()
            cells = view.locator("svg.ab-live-heatmap rect").count()
            assert cells == len(want["rows"]) * len(want["source"])
        assert _fits(view)
        # another map from the menu: layer 1, head 2 (drawn and said without translating again)
        results = live.results()
        menu = view.locator("select[name=map]")
        assert menu.get_attribute("id") == view.locator("label").first.get_attribute(
            "for"
        )
        menu.select_option(label="layer 1, head 2")
        shown = json.loads(live.dataset()["map"])
        assert (shown["layer"], shown["head"]) == (1, 2)
        cross = torch.tensor(want["cross"])
        np.testing.assert_allclose(shown["weights"], pick_map(cross, 1, 2), atol=TOL)
        words = view.locator(".ab-live-words").evaluate(SHOWN)
        assert words.startswith(
            "Where each step looks most, layer 1, head 2: after <bos>, "
        )
        assert got["rows"][0] == "<bos>"  # labelled as the static figures label them
        assert live.results() == results
        # on a phone the map still fits the column
        assert _smallest_text_px(live) >= 9
        live.page.set_viewport_size(PHONE)
        assert _fits(view)
        # and every text of it (the longest sentence's map, nine columns) shows at least 9 px
        _translate(live, TYPED[1])
        assert _fits(view)
        assert _smallest_text_px(live) >= 9
        # an empty sentence gets a message, not an error or a stale map
        box = view.locator("input[type=text]")
        box.fill("   ")
        box.press("Enter")
        live.page.wait_for_function(
            "(root) => document.querySelector(root).dataset.result === ''",
            arg=live.root,
        )
        said = view.locator(".ab-live-output").inner_text()
        assert "Type an English sentence" in said
        assert view.locator("svg.ab-live-heatmap").count() == 0
        status = view.locator(".ab-live-status").inner_text()
        assert "Translated in your browser" not in status
        assert live.events == []


def test_file_url_keeps_the_translations_and_says_how_to_serve(browser):  # noqa: F811
    if not (HTML / f"{DOC}.html").is_file():
        pytest.skip(f"{DOC}.html is not built in {HTML}: run `make book` first")
    shown = open_from_file(browser, DOC, NAME)
    assert shown["state"] == "file"
    assert shown["fallback_shown"]
    assert "python -m http.server" in shown["note"]


def _status_has(live: LivePage, text: str) -> str:
    live.page.wait_for_function(
        "([root, t]) => document.querySelector(root).querySelector('.ab-live-status').textContent.includes(t)",
        arg=[live.root, text],
    )
    return live.page.text_content(f"{live.root} .ab-live-status")


def test_again_only_when_asked_again_and_tokens_said_by_name(browser, site):  # noqa: F811
    """An accessibility reader (issue 38) typed "they are happy ." and pressed Enter once: the status
    said "The same sentence again (2 times): the model has no chance in it" (typing had translated
    it). Enter after typing says it is the same translation as before; "again" comes with a second
    Enter; each changes the status line, so a screen reader hears something. The live regions say
    <bos> as "start of sentence" (it was read "less than bos greater than"); the page shows <bos>."""
    sentence = "they are happy ."
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        box = live.page.locator(f"{live.root} input[type=text]")
        box.fill("")
        box.press_sequentially(sentence)
        live.page.wait_for_function(
            """([root, s]) => { const r = document.querySelector(root).dataset.result;
                 return r && JSON.parse(r).sentence === s; }""",
            arg=[live.root, sentence],
        )
        typed = _status_has(live, "decoder steps")
        assert "again" not in typed and "sampling" not in typed, typed
        box.press("Enter")
        first = _status_has(
            live, "The same translation as before: the model does no sampling"
        )
        assert "again" not in first.lower() and "chance" not in first, first
        box.press("Enter")
        second = _status_has(
            live,
            "Asked again (2 times): the model does no sampling, so the same "
            "sentence always gets the same translation.",
        )
        assert second != first
        words = live.page.locator(f"{live.root} .ab-live-words")
        assert "after <bos>, writing" in words.evaluate(SHOWN)
        heard = words.evaluate(HEARD)
        assert "after start of sentence, writing" in heard and "<" not in heard, heard
        assert live.events == []
