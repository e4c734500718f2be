"""Chapter 8's live view in the built site: a digit the test draws, classified in Chromium,
against the package's answer for the same pixels.

The page turns the strokes into the model's input (the data set's 8x8 grey levels) and runs
the graph the notebook exported into ``_static/live/models/``. The test reads those input
pixels and the page's outputs from the view's data attributes and runs the very same file
with onnxruntime (PyPI) on the pixels: probabilities and both ``<cls>`` maps must agree to
1e-4 (tests/test_live_ch08.py checks that the graph equals the PyTorch model). Run it after
``make book``; it serves ``_build/html`` on 127.0.0.1 and blocks every other request.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from live_site import HEARD, HTML, MODELS, SHOWN, LivePage, browser, built_manifest, open_from_file, site  # noqa: F401 (fixtures)

from attention_book.book.live import run_onnx

pytestmark = pytest.mark.browser

DOCNAME = "notebooks/ch08_vision_transformer"
NAME = "ch08.draw"
# The test's own drawing, a "4" in two strokes, as fractions of the drawing box.
STROKES = [
    [(0.35, 0.12), (0.22, 0.55), (0.78, 0.55)],
    [(0.62, 0.3), (0.62, 0.9)],
]
LEVELS = {
    round(255 * k / 16) for k in range(17)
}  # ink counts 0..16 of a 4x4 block, as 0..255
TOL = 1e-4


@pytest.fixture(scope="module")
def manifest():
    return built_manifest(DOCNAME, "ch08.draw")


def python_answer(manifest, pixels) -> dict[str, np.ndarray]:
    h, w = manifest["data"]["native"]
    feeds = {"pixels": np.asarray(pixels, dtype=np.float32).reshape(1, 1, h, w)}
    out = run_onnx(MODELS / manifest["models"]["vit"]["file"], feeds)
    return {
        key: value.ravel()
        for key, value in zip(("probs", "clsAttention", "rollout"), out)
    }


def shown(live) -> dict:
    """What the view computed last: its input pixels and outputs (data attributes, JSON)."""
    data = live.dataset()
    keys = ("pixels", "probs", "clsAttention", "rollout")
    return {k: json.loads(data[k]) for k in keys if k in data}


def check_against_python(manifest, got: dict) -> None:
    want = python_answer(manifest, got["pixels"])
    for key, value in want.items():
        assert np.isfinite(got[key]).all(), key
        np.testing.assert_allclose(
            np.array(got[key]), value, atol=TOL, rtol=0, err_msg=key
        )


def draw(live, strokes) -> None:
    """Draw with the mouse, stroke by stroke, waiting for the answer to each stroke."""
    box = live.page.locator(f"{live.root} canvas.ab-live-pad").bounding_box()
    for stroke in strokes:
        points = [
            (box["x"] + fx * box["width"], box["y"] + fy * box["height"])
            for fx, fy in stroke
        ]
        before = live.results()
        live.page.mouse.move(*points[0])
        live.page.mouse.down()
        for point in points[1:]:
            live.page.mouse.move(*point, steps=8)
        live.page.mouse.up()
        live.wait_for_result(before)


def message(live) -> str:
    return live.page.inner_text(f"{live.root} .ab-live-message")


def test_chapter8_live_view_matches_the_package(site, browser, manifest):  # noqa: F811
    with LivePage(browser, site, DOCNAME, NAME) as live:
        state = live.start()
        print(
            f"time to first result: {state['firstResultMs']} ms (scrolled into view -> first answer)"
        )

        # The introduction says where the model's input image is in either layout, and what
        # the model learnt from, so that a misread drawing does not come as a surprise.
        intro = live.page.inner_text(f"{live.root} .ab-live-intro")
        assert "next to the box (below it on a narrow screen)" in intro
        assert f"learnt from {manifest['data']['train_size']:,} scanned digits" in intro
        # The first answer says <cls> as "class token" (issue 38: read "less than cls greater
        # than"); the page shows <cls> as the chapter writes it.
        live.page.wait_for_function(
            "(root) => document.querySelector(root + ' .ab-live-message').textContent.includes('Now draw')",
            arg=live.root,
        )
        heard = live.page.eval_on_selector(f"{live.root} .ab-live-message", HEARD)
        assert "Its class token looks" in heard and "<cls>" not in heard, heard
        assert "Its <cls> token looks" in live.page.eval_on_selector(f"{live.root} .ab-live-message", SHOWN)
        # The map's caption is read too (a fresh reader, issue 38: "<cls> attention" read raw).
        caption = live.page.locator(f"{live.root} .ab-live-caption").first
        assert caption.evaluate(HEARD) == "class token attention over the patches"
        assert caption.evaluate(SHOWN) == "<cls> attention over the patches"

        # The view opens on the first of the page's examples: the notebook's numbers for it.
        first = shown(live)
        assert first["pixels"] == manifest["data"]["examples"][0]["pixels"]
        check_against_python(manifest, first)

        # The test's drawing: input pixels on the data set's levels, outputs as in Python.
        draw(live, STROKES)
        assert message(live).startswith("Your drawing")
        drawn = shown(live)
        print(f"per-step latency: {live.dataset()['lastStepMs']} ms (one forward pass)")
        h, w = manifest["data"]["native"]
        assert len(drawn["pixels"]) == h * w and set(drawn["pixels"]) <= LEVELS
        assert drawn["pixels"] not in [
            ex["pixels"] for ex in manifest["data"]["examples"]
        ]
        ink = np.array(drawn["pixels"]).reshape(h, w) > 0
        assert ink.any(axis=1).all(), (
            "the drawing fills the height, as the data set's digits do"
        )
        check_against_python(manifest, drawn)
        best = int(np.argmax(drawn["probs"]))
        assert f"the model says {manifest['data']['classes'][best]}" in message(live)
        # Where <cls> looks, in words (a screen reader hears no map): its largest patch first.
        rows, cols = manifest["data"]["grid"]
        top = int(np.argmax(drawn["clsAttention"]))
        assert f"looks most on the patches at row {top // cols + 1}, column {top % cols + 1} (" in message(live)

        # The rollout map is a second view of the same result, said in words too.
        live.page.check(f"{live.root} input[value='rollout']")
        assert shown(live) == drawn
        top = int(np.argmax(drawn["rollout"]))
        said = live.page.inner_text(f"{live.root} .ab-live-pen")
        assert f"rollout: most on the patches at row {top // cols + 1}, column {top % cols + 1} (" in said, said

        # An empty box: a message, no numbers (so no NaN).
        live.page.click(f"{live.root} button.ab-live-clear")
        assert "draw a digit" in message(live)
        assert shown(live) == {}

        # Another of the page's examples, after the drawing.
        before = live.results()
        live.page.click(f"{live.root} button.ab-live-example >> nth=1")
        live.wait_for_result(before)
        second = shown(live)
        assert second["pixels"] == manifest["data"]["examples"][1]["pixels"]
        check_against_python(manifest, second)
        assert live.events == [], "\n".join(live.events)


def test_chapter8_from_file_keeps_its_frames_and_says_how_to_serve(browser, manifest):  # noqa: F811
    seen = open_from_file(browser, DOCNAME, NAME)
    assert seen["state"] == "file" and "python -m http.server" in seen["note"]
    assert seen["fallback_shown"] and seen["fallback_images"] == len(
        manifest["data"]["examples"]
    )
