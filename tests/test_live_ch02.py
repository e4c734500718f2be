"""Chapter 2's live view (issue 31): the exported pooling equals ab.nadaraya_watson."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attention_book as ab
from attention_book.book import live as live_mod

# Its module fixtures train and export a model (tens of seconds): every test of this file runs on one
# xdist worker, so the fixtures are built once, not once per worker (tests/xdist_group_ids.py).
pytestmark = pytest.mark.xdist_group("live_ch02")

pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def view():
    return ab.ch02_live_view(ab.make_kernel_data(n_train=40, noise=1.0, seed=0), seed=0)


@pytest.fixture(scope="module")
def exported(view, tmp_path_factory):
    folder = tmp_path_factory.mktemp("live")
    paths = {}
    for kernel, (module, args, shapes, names) in view.models().items():
        paths[kernel] = folder / f"{kernel}.onnx"
        live_mod.export_onnx(module, args, paths[kernel], shapes, names)
    return paths


def test_forty_points_are_the_chapters_data(view):
    data = ab.make_kernel_data(n_train=40, noise=1.0, seed=0)
    x, y = view.points(40)
    order = torch.argsort(x)
    assert torch.equal(x[order], data.x_train) and torch.equal(y[order], data.y_train)
    assert view.n_max == 200 and torch.equal(view.points(7)[0], view.x[:7])
    with pytest.raises(ValueError, match="from 2 to 200"):
        view.points(1)


@pytest.mark.parametrize("kernel", ab.KERNEL_NAMES)
@pytest.mark.parametrize(("n", "sigma", "queries"), [(9, 0.23, 13), (173, 1.7, 251)])
def test_the_exported_pooling_matches_pytorch(
    view, exported, kernel, n, sigma, queries
):
    x, y = view.points(n)
    q = torch.linspace(0.05, 4.95, queries)
    feeds = {
        "keys": x.numpy(),
        "values": y.numpy(),
        "queries": q.numpy(),
        "sigma": np.array(sigma, dtype=np.float32),
    }
    estimate, weights = live_mod.run_onnx(exported[kernel], feeds)
    ref_estimate, ref_weights = ab.nadaraya_watson(x, y, q, kernel, sigma)
    assert weights.shape == (queries, n)
    np.testing.assert_allclose(
        estimate, ref_estimate.numpy(), atol=1e-4
    )  # NaN where both have none
    np.testing.assert_allclose(weights, ref_weights.numpy(), atol=1e-4)


def test_estimate_is_the_packages_pooling_at_one_query(view):
    at, weights = view.estimate(n=31, sigma=0.4, query=1.3, kernel="gaussian")
    x, y = view.points(31)
    ref, ref_weights = ab.nadaraya_watson(x, y, torch.tensor([1.3]), "gaussian", 0.4)
    assert at == float(ref[0]) and torch.equal(weights, ref_weights[0])


def test_the_page_data_is_json_and_the_notebook_form_is_a_widget(
    view, monkeypatch, tmp_path
):
    data = json.loads(json.dumps(view.data(), allow_nan=False))
    assert len(data["x"]) == len(data["y"]) == 200 and data["defaults"]["n"] == 40
    assert np.array_equal(
        np.float32(data["x"]), view.x.numpy()
    )  # float32 values survive JSON exactly
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "live")
    form = ab.live(view)
    assert [c.description for c in form.children[:4]] == [
        "kernel",
        "width σ",
        "points",
        "query x",
    ]
    assert "data:image/png;base64," in view.fallback_html()
