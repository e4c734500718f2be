"""Live views (issue 31): export to ONNX, the size limit, and ab.live in both of its forms."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book.book import live as live_mod

pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")


class TinyAttention(nn.Module):
    """Self-attention over a sequence of length L; returns the output and the weights."""

    def __init__(self, width: int = 8):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(width, 3 * width)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        weights = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        return weights @ v, weights


def _dynamic_length():
    return ({0: torch.export.Dim("length", min=2, max=64)},)


def test_export_matches_pytorch_at_two_lengths(tmp_path):
    model = TinyAttention()
    path = tmp_path / "tiny.onnx"
    size = live_mod.export_onnx(
        model, (torch.randn(5, 8),), path, _dynamic_length(), ["out", "weights"]
    )
    assert size == path.stat().st_size and 0 < size < live_mod.MAX_MODEL_BYTES
    for length in (3, 17):
        x = torch.randn(length, 8)
        out, weights = live_mod.run_onnx(path, {"x": x.numpy()})
        with torch.no_grad():
            ref_out, ref_weights = model(x)
        assert out.shape == (length, 8) and weights.shape == (length, length)
        np.testing.assert_allclose(out, ref_out.numpy(), atol=1e-4)
        np.testing.assert_allclose(weights, ref_weights.numpy(), atol=1e-4)
    assert model.training, "the export leaves the module's training mode as it was"


def test_a_model_over_2_mb_is_refused_and_not_left_behind(tmp_path):
    big = nn.Linear(800, 800)  # 2.56 MB of float32 weights
    path = tmp_path / "big.onnx"
    with pytest.raises(ValueError, match="at most 2 MB"):
        live_mod.export_onnx(big, (torch.randn(1, 800),), path)
    assert not path.exists()


class TinyView(ab.LiveView):
    name = "ch99.tiny"
    module = "ch99.mjs"

    def __init__(self):
        self.model = TinyAttention()
        self.widgets_made = 0

    def models(self):
        return {
            "attend": (
                self.model,
                (torch.randn(4, 8),),
                _dynamic_length(),
                ["out", "weights"],
            )
        }

    def data(self):
        return {"example": [[0.5] * 8] * 3}

    def widget(self):
        self.widgets_made += 1
        return "the ipywidgets form"

    def fallback_html(self):
        return "<p>frames</p>"


def test_live_returns_the_widget_in_a_notebook(monkeypatch):
    monkeypatch.setenv(ab.core.config.EXPLORERS_ENV, "live")
    view = TinyView()
    assert ab.live(view) == "the ipywidgets form" and view.widgets_made == 1


def test_live_exports_once_and_returns_the_page_block_on_the_website(
    monkeypatch, tmp_path
):
    monkeypatch.setenv(ab.core.config.EXPLORERS_ENV, "static")
    monkeypatch.setenv(live_mod.LIVE_ENV, str(tmp_path))
    view = TinyView()
    page = ab.live(view)
    assert view.widgets_made == 0
    block = page._repr_html_()
    assert (
        'class="ab-live"' in block
        and 'data-live="ch99.tiny"' in block
        and 'data-module="ch99.mjs"' in block
    )
    assert (
        "<p>frames</p>" in block and "live/live.mjs" in block and "http.server" in block
    )
    # built when the reader comes to it, unless it asks to be built on load (chapter 2's)
    assert "data-build" not in block
    view.build_on_load = True
    assert 'data-build="load"' in page._repr_html_()
    assert ab.ch02_live_view(ab.make_kernel_data(40)).build_on_load
    manifest = json.loads((tmp_path / "ch99.tiny.json").read_text(encoding="utf-8"))
    assert manifest["module"] == "ch99.mjs" and manifest["data"] == view.data()
    onnx_file = tmp_path / manifest["models"]["attend"]["file"]
    assert (
        onnx_file.stat().st_size
        == manifest["models"]["attend"]["bytes"]
        == page.sizes["attend"]
    )
    stamp = onnx_file.stat().st_mtime_ns
    ab.live(view)  # the same notebook shows it again: the graph is not exported twice
    assert onnx_file.stat().st_mtime_ns == stamp
    assert "ch99.tiny" in repr(page) and "kB" in repr(page)


def test_live_without_a_live_folder_writes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv(ab.core.config.EXPLORERS_ENV, "static")
    monkeypatch.delenv(live_mod.LIVE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    page = ab.live(TinyView())
    assert page.sizes == {"attend": None} and not list(tmp_path.iterdir())


def test_live_refuses_what_is_not_a_view_and_bad_names():
    with pytest.raises(TypeError, match="LiveView"):
        ab.live(object())
    view = TinyView()
    view.name = "tiny"
    with pytest.raises(ValueError, match="ch02.pooling"):
        ab.live(view)
    view = TinyView()
    view.module = "tiny.js"
    with pytest.raises(ValueError, match=".mjs"):
        ab.live(view)


def _pngs(block: str) -> list:
    import base64
    import io

    from PIL import Image

    return [Image.open(io.BytesIO(base64.b64decode(b))) for b in re.findall(r"base64,([A-Za-z0-9+/=]+)", block)]


def test_a_wide_fallback_figure_carries_a_legible_phone_copy():
    """Issue 36: a fallback figure whose text a 390 px phone would shrink below 9 px (three plots
    side by side, 9.5 inches) comes with its phone copy, shown below 600 px: at most 350 px wide,
    its smallest text at least 9 px at that width."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(9.5, 3))
    for i, ax in enumerate(axes):
        ax.plot(np.arange(10), np.arange(10) ** (i + 1), label=f"power {i + 1}")
        ax.set(xlabel="step", ylabel="value", title=f"curve {i + 1}")
        ax.legend()
    block = live_mod.figure_img(fig, "three curves", dpi=100, style="max-width:100%")
    assert block.startswith('<picture class="ab-phone-picture"><source media="(max-width: 600px)"')
    phone, page = _pngs(block)
    assert page.width > 700 and phone.width <= 350
    assert float(phone.text[ab.core.plot.TEXT_SIZE_KEY]) >= ab.core.plot.MIN_TEXT_PX
    assert 'style="max-width:100%; --ab-phone-width: ' in block and 'alt="three curves"' in block
    assert not plt.get_fignums()  # closed after drawing


def test_a_small_fallback_figure_is_a_plain_image():
    """A figure already legible in a phone's column needs no phone copy; the width it is never
    shown below (its text 9 px high) fits the column."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3.2, 2.4))
    ax.plot([0, 1], [1, 0])
    block = live_mod.figure_img(fig, "a line")
    assert block.startswith("<img ") and "<picture" not in block
    (page,) = _pngs(block)
    assert page.width <= 350 and float(page.text[ab.core.plot.TEXT_SIZE_KEY]) >= ab.core.plot.MIN_TEXT_PX
    least = int(re.search(r"--ab-phone-width: (\d+)px", block).group(1))
    assert least <= page.width
