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
from test_site import HTML, Crawler, browser, site  # noqa: F401  (fixtures: the served site, Chromium)

from attention_book.book.live import run_onnx

pytestmark = pytest.mark.browser

PAGE = "notebooks/ch08_vision_transformer.html"
MODELS = HTML / "_static" / "live" / "models"
VIEW = '.ab-live[data-live="ch08.draw"]'
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
    path = MODELS / "ch08.draw.json"
    if not (HTML / PAGE).is_file() or not path.is_file():
        pytest.skip(
            f"no chapter 8 live view in {HTML}: build the site first with `make book`"
        )
    pytest.importorskip("onnxruntime")
    return json.loads(path.read_text(encoding="utf-8"))


def python_answer(manifest, pixels) -> dict[str, np.ndarray]:
    h, w = manifest["data"]["native"]
    feeds = {"pixels": np.asarray(pixels, dtype=np.float32).reshape(1, 1, h, w)}
    out = run_onnx(MODELS / manifest["models"]["vit"]["file"], feeds)
    return {
        key: value.ravel()
        for key, value in zip(("probs", "clsAttention", "rollout"), out)
    }


def shown(page) -> dict:
    data = page.eval_on_selector(VIEW, "root => Object.assign({}, root.dataset)")
    return {
        k: json.loads(data[k])
        for k in ("pixels", "probs", "clsAttention", "rollout")
        if k in data
    }


def check_against_python(manifest, got: dict) -> None:
    want = python_answer(manifest, got["pixels"])
    for key, value in want.items():
        assert np.isfinite(got[key]).all(), key
        np.testing.assert_allclose(
            np.array(got[key]), value, atol=TOL, rtol=0, err_msg=key
        )


def draw(page, strokes) -> None:
    box = page.locator(f"{VIEW} canvas.ab-live-pad").bounding_box()
    for stroke in strokes:
        points = [
            (box["x"] + fx * box["width"], box["y"] + fy * box["height"])
            for fx, fy in stroke
        ]
        page.mouse.move(*points[0])
        page.mouse.down()
        for point in points[1:]:
            page.mouse.move(*point, steps=8)
        page.mouse.up()


def open_when_ready(page, url: str) -> str:
    """Open the page, bring the view into sight (which starts it) and wait until it has answered."""
    page.goto(url)
    page.locator(VIEW).scroll_into_view_if_needed()
    page.wait_for_function(
        f"document.querySelector('{VIEW}').dataset.state === 'ready'"
    )
    return page.get_attribute(VIEW, "data-first-result-ms")


def message(page) -> str:
    return page.inner_text(f"{VIEW} .ab-live-message")


def test_chapter8_live_view_matches_the_package(site, browser, manifest):  # noqa: F811
    # The crawler's page: requests leaving the site blocked, page errors and failed requests noted.
    crawl = Crawler(browser, site)
    page = crawl.page
    page.set_default_timeout(60_000)
    try:
        ms = open_when_ready(page, site + PAGE)
        print(
            f"time to first result: {ms} ms (scrolled into view -> first answer shown)"
        )

        # The view opens on the first of the page's examples: the notebook's numbers for it.
        first = shown(page)
        example = manifest["data"]["examples"][0]
        assert first["pixels"] == example["pixels"]
        check_against_python(manifest, first)

        # The test's drawing: input pixels on the data set's levels, outputs as in Python.
        draw(page, STROKES)
        page.wait_for_function(
            f"document.querySelector('{VIEW} .ab-live-message').textContent.startsWith('Your drawing')"
        )
        drawn = shown(page)
        print(
            f"per-step latency: {page.get_attribute(VIEW, 'data-last-step-ms')} ms (one forward pass)"
        )
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
        assert f"the model says {manifest['data']['classes'][best]}" in message(page)

        # The rollout map is a second view of the same result.
        page.check(f"{VIEW} input[value='rollout']")
        assert shown(page) == drawn

        # An empty box: a message, no numbers (so no NaN).
        page.click(f"{VIEW} button.ab-live-clear")
        assert "draw a digit" in message(page)
        assert shown(page) == {}

        # Another of the page's examples, after the drawing.
        page.click(f"{VIEW} button.ab-live-example >> nth=1")
        page.wait_for_function(
            f"document.querySelector('{VIEW} .ab-live-message').textContent.startsWith('Test image')"
        )
        second = shown(page)
        assert second["pixels"] == manifest["data"]["examples"][1]["pixels"]
        check_against_python(manifest, second)
    finally:
        crawl.context.close()
    assert not crawl.events, "\n".join(crawl.events)


def test_chapter8_from_file_keeps_its_frames_and_says_how_to_serve(browser, manifest):  # noqa: F811
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto((HTML / PAGE).resolve().as_uri())
        root = page.locator(VIEW)
        root.scroll_into_view_if_needed()
        assert root.get_attribute("data-state") == "file"
        assert "python -m http.server" in page.inner_text(f"{VIEW} .ab-live-status")
        frames = page.locator(f"{VIEW} .ab-live-fallback img")
        assert frames.count() == len(manifest["data"]["examples"])
        assert page.locator(f"{VIEW} .ab-live-fallback").is_visible()
    finally:
        context.close()
