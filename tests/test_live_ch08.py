"""Chapter 8's live view (issue 31): the exported graph gives the notebook's numbers.

The graph takes an image as the data set stores it (0..255 at its own size), so
the page and the notebook share one path: the batches' transform, the ViT, the
softmax, the chapter's ``<cls>`` maps. A small untrained ViT is enough to check
that the ONNX graph (run by onnxruntime from PyPI) and PyTorch agree.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import attention_book as ab
from attention_book.book import live_ch08
from attention_book.book.live import export_onnx, run_onnx

# Its module fixtures train and export a model (tens of seconds): every test of this file runs on one
# xdist worker, so the fixtures are built once, not once per worker (tests/xdist_group_ids.py).
pytestmark = pytest.mark.xdist_group("live_ch08")

pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

TOL = 1e-4


@pytest.fixture(scope="module")
def data():
    return ab.load_image_data("digits", 24, 64, device="cpu")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return ab.ViT(24, 4, 32, 64, 4, 2, 0.1, 0.1).eval()


@pytest.fixture(scope="module")
def view(model, data):
    return live_ch08.ch08_live_view(model, data)


@pytest.fixture(scope="module")
def graph(view, tmp_path_factory):
    ((module, args, dynamic, names),) = view.models().values()
    path = tmp_path_factory.mktemp("ch08") / "vit.onnx"
    with ab.single_thread():
        size = export_onnx(module, args, path, dynamic, names)
    assert 0 < size <= 2_000_000
    return path


def chapter_answer(model, data, pixels: np.ndarray) -> dict[str, np.ndarray]:
    """What the chapter computes for one image: the test batches' transform, then the model."""
    X = data.test.transform(torch.from_numpy(pixels)[None, None])
    with torch.no_grad():
        probs = F.softmax(model(X), dim=-1)
    maps = model.attention_maps(X)
    rollout = ab.models.vit.attention_rollout(maps)[:, 0, 1:].reshape(
        -1, *model.grid_size
    )
    return {
        "probs": probs[0].numpy(),
        "cls_attention": ab.models.vit.cls_attention(maps, model.grid_size)[0].numpy(),
        "rollout": rollout[0].numpy(),
    }


def inputs(data) -> list[np.ndarray]:
    """Two different images: a test image as stored, and a noisy one with fractional values."""
    stored = data.test.images[5, 0].numpy().astype(np.float32)
    noisy = (
        np.random.default_rng(3).uniform(0, 255, size=stored.shape).astype(np.float32)
    )
    return [stored, noisy]


@pytest.mark.parametrize("which", [0, 1])
def test_onnx_graph_matches_pytorch_and_the_chapter(
    which, view, graph, model, data, one_thread
):
    pixels = inputs(data)[which]
    probs, cls, rollout = run_onnx(graph, {"pixels": pixels[None, None]})
    torch_out = view.probe.answer(pixels)
    chapter = chapter_answer(model, data, pixels)
    for name, got in zip(live_ch08.OUTPUTS, (probs[0], cls[0], rollout[0])):
        np.testing.assert_allclose(got, torch_out[name], atol=TOL, err_msg=name)
        np.testing.assert_allclose(got, chapter[name], atol=TOL, err_msg=name)
    assert cls.shape == rollout.shape == (1, *model.grid_size)
    assert abs(float(probs.sum()) - 1) < TOL
    # the patches get a share of the attention; the rest went to <cls> itself
    assert 0 < float(cls.sum()) <= 1 + TOL


def test_the_graph_inputs_and_outputs_are_named(graph):
    import onnxruntime

    session = onnxruntime.InferenceSession(
        str(graph), providers=["CPUExecutionProvider"]
    )
    assert [i.name for i in session.get_inputs()] == ["pixels"]
    assert session.get_inputs()[0].shape == [1, 1, 8, 8]
    assert [o.name for o in session.get_outputs()] == list(live_ch08.OUTPUTS)


def test_the_page_data_describes_the_input(view, data, model):
    payload = json.loads(json.dumps(view.data(), allow_nan=False))
    assert payload["native"] == [8, 8] and payload["block"] == 4
    assert payload["grid"] == list(model.grid_size) and payload["img_size"] == [24, 24]
    assert payload["classes"] == [str(k) for k in range(10)]
    # the page tells the reader what the model learnt from
    assert payload["dataset"] == "digits"
    assert payload["train_size"] == len(data.train.labels) > 0
    for example in payload["examples"]:
        pixels = np.array(example["pixels"]).reshape(8, 8)
        # an example is a test image of its class, as the data set stores it
        matches = (data.test.images[:, 0].numpy() == pixels).all(axis=(1, 2))
        assert (
            matches.any()
            and str(int(data.test.labels[int(np.argmax(matches))])) == example["label"]
        )


def test_the_digits_levels_are_what_the_page_makes(data):
    """The page counts ink in 4x4 blocks of a bitmap (0..16) and rescales to 0..255 with rounding:
    every stored digit pixel is one of those 17 levels."""
    levels = {round(255 * k / 16) for k in range(17)}
    assert set(np.unique(data.train.images.numpy()).tolist()) <= levels


def test_bad_inputs_are_refused_clearly(view, data):
    with pytest.raises(ValueError, match="shape"):
        view.probe.answer(np.zeros((24, 24)))
    mean_pooled = ab.ViT(24, 4, 32, 64, 4, 1, 0.0, 0.0, pool="mean")
    with pytest.raises(ValueError, match="<cls>"):
        live_ch08.ch08_live_view(mean_pooled, data)


def test_the_notebook_gets_a_form_and_the_website_a_page(view, monkeypatch, tmp_path):
    pytest.importorskip("ipywidgets")
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "live")
    form = ab.live(view)
    assert "draw" in form.children[0].value
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "static")
    monkeypatch.setenv("ATTENTION_BOOK_LIVE", str(tmp_path))
    with ab.single_thread():
        page = ab.live(view)
    html = page._repr_html_()
    assert 'data-live="ch08.draw"' in html and 'data-module="ch08.mjs"' in html
    assert html.count("<img ") == len(
        view.examples
    )  # the frames shown before the model runs
    manifest = json.loads((tmp_path / "ch08.draw.json").read_text())
    assert manifest["models"]["vit"]["file"] == "ch08.draw.vit.onnx"
    assert (tmp_path / "ch08.draw.vit.onnx").stat().st_size <= 2_000_000


def test_shifting_moves_the_image_and_fills_black():
    image = torch.arange(16.0).reshape(4, 4) + 1
    moved = live_ch08._shifted(image, 1, -1)
    assert torch.equal(moved[1:, :3], image[:3, 1:])
    assert moved[0].eq(0).all() and moved[:, 3].eq(0).all()


def test_a_model_too_big_for_a_page_is_not_exported(data):
    """The full-size ViT (millions of weights) stays in the notebook: the page keeps its frames."""
    big = live_ch08.ch08_live_view(
        ab.ViT(24, 4, 256, 1024, 4, 2, 0.1, 0.1), data, num_examples=1
    )
    assert big.weight_bytes() > 2_000_000
    assert big.models() == {}
    assert "MB" in big.data()["too_large"]


def test_the_small_model_is_exported(view):
    assert set(view.models()) == {"vit"} and view.data()["too_large"] == ""
