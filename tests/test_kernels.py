"""Chapter 2: kernels, the Nadaraya–Watson estimator as attention, width learning, checker."""

import math

import matplotlib.figure
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attention_book as ab

kernels = st.sampled_from(ab.KERNEL_NAMES)
widths = st.floats(min_value=0.05, max_value=5.0)
seeds = st.integers(0, 10_000)


def _points(seed, n, n_q=7, d=None):
    gen = torch.Generator().manual_seed(seed)
    shape = (n,) if d is None else (n, d)
    q_shape = (n_q,) if d is None else (n_q, d)
    return (4 * torch.rand(shape, generator=gen, dtype=torch.float64),
            torch.randn(n, generator=gen, dtype=torch.float64),
            4 * torch.rand(q_shape, generator=gen, dtype=torch.float64))


# --- kernels ----------------------------------------------------------------------------

def test_kernel_shapes_match_their_formulas():
    d = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0])
    torch.testing.assert_close(ab.gaussian_kernel(d, 2.0), torch.exp(-d**2 / 8))
    torch.testing.assert_close(ab.boxcar_kernel(d), torch.tensor([0.0, 1, 1, 1, 1, 1, 0]))
    torch.testing.assert_close(ab.constant_kernel(d, 0.3), torch.ones(7))
    torch.testing.assert_close(ab.epanechnikov_kernel(d), torch.tensor([0.0, 0, 0.75, 1, 0.75, 0, 0]))


@pytest.mark.parametrize("bad", [0.0, -0.5, float("nan"), float("inf"), "wide", True])
def test_bad_width_is_rejected(bad):
    with pytest.raises(ValueError, match="sigma"):
        ab.gaussian_kernel(torch.zeros(3), bad)
    x, y, q = _points(0, 5)
    with pytest.raises(ValueError, match="sigma"):
        ab.nadaraya_watson(x, y, q, "epanechnikov", bad)


def test_other_bad_inputs_raise_clear_errors():
    x, y, q = _points(0, 5)
    with pytest.raises(ValueError, match="empty"):
        ab.nadaraya_watson(x[:0], y[:0], q)
    with pytest.raises(ValueError, match=r"y_train must have shape \(5,\)"):
        ab.nadaraya_watson(x, y[:4], q)
    with pytest.raises(ValueError, match="features"):
        ab.nadaraya_watson(x[:, None].expand(5, 2), y, q)
    with pytest.raises(ValueError, match="kernel must be one of"):
        ab.nadaraya_watson(x, y, q, "triangle")
    with pytest.raises(ValueError, match=r"exclude must be a boolean mask of shape \(7, 5\)"):
        ab.nadaraya_watson(x, y, q, exclude=torch.zeros(5, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="at least 2"):
        ab.models.kernels.loo_predictions(x[:1], y[:1])
    with pytest.raises(ValueError, match="n_train"):
        ab.make_kernel_data(n_train=0)
    with pytest.raises(ValueError, match="gradient descent"):
        ab.learn_width(ab.make_kernel_data(n_train=5), kernel="boxcar", epochs=1, progress=False)
    with pytest.raises(ValueError, match="sigma"):
        ab.models.kernels.NadarayaWatson(x, y, sigma=-1.0)


# --- the estimator as attention --------------------------------------------------------------

@settings(max_examples=40, deadline=None)
@given(kernels, widths, seeds, st.integers(1, 12))
def test_weights_nonnegative_and_rows_sum_to_one(kernel, sigma, seed, n):
    x, y, q = _points(seed, n)
    y_hat, w = ab.nadaraya_watson(x, y, q, kernel, sigma)
    assert w.shape == (7, n) and y_hat.shape == (7,)
    assert (w >= 0).all()
    reached = ~torch.isnan(y_hat)
    torch.testing.assert_close(w.sum(-1)[reached], torch.ones(int(reached.sum()), dtype=w.dtype))
    assert (w[~reached] == 0).all()  # a query that reaches no key has no weight and no estimate
    if kernel in ("gaussian", "constant"):
        assert reached.all()


@settings(max_examples=40, deadline=None)
@given(kernels, widths, seeds, st.floats(-50, 50))
def test_translation_invariance(kernel, sigma, seed, shift):
    x, y, q = _points(seed, 9)
    y1, w1 = ab.nadaraya_watson(x, y, q, kernel, sigma)
    y2, w2 = ab.nadaraya_watson(x + shift, y, q + shift, kernel, sigma)
    # squared distances change by rounding only; compare away from the boxcar's edge
    edge = ((q[:, None] - x[None]).abs() - sigma).abs().min()
    if kernel != "boxcar" or edge > 1e-6:
        torch.testing.assert_close(w1, w2, atol=1e-6, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["gaussian", "epanechnikov", "constant"]), widths, seeds, st.floats(0, 2 * math.pi))
def test_rotation_invariance_in_two_dimensions(kernel, sigma, seed, angle):
    x, y, q = _points(seed, 8, d=2)
    c, s = math.cos(angle), math.sin(angle)
    rot = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    _, w1 = ab.nadaraya_watson(x, y, q, kernel, sigma)
    _, w2 = ab.nadaraya_watson(x @ rot, y, q @ rot, kernel, sigma)
    torch.testing.assert_close(w1, w2, atol=1e-6, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(widths, seeds, st.integers(1, 15))
def test_gaussian_weights_are_a_softmax(sigma, seed, n):
    x, y, q = _points(seed, n)
    _, w = ab.nadaraya_watson(x, y, q, "gaussian", sigma)
    expected = torch.softmax(-(q[:, None] - x[None, :]) ** 2 / (2 * sigma**2), dim=-1)
    torch.testing.assert_close(w, expected)
    # and, where nothing underflows, it is "kernel divided by its sum"
    k = ab.gaussian_kernel(q[:, None] - x[None, :], sigma)
    ok = k.sum(-1) > 1e-200
    torch.testing.assert_close(w[ok], (k / k.sum(-1, keepdim=True))[ok])


@settings(max_examples=30, deadline=None)
@given(kernels, widths, seeds, st.floats(-10, 10))
def test_constant_functions_are_reproduced(kernel, sigma, seed, c):
    x, _, q = _points(seed, 10)
    y_hat, _ = ab.nadaraya_watson(x, torch.full((10,), c, dtype=torch.float64), q, kernel, sigma)
    reached = ~torch.isnan(y_hat)
    torch.testing.assert_close(y_hat[reached], torch.full((int(reached.sum()),), c, dtype=torch.float64))


def test_vector_values_and_nearest_neighbour_limit():
    x = torch.tensor([0.0, 1.0, 2.0])
    y = torch.tensor([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]])
    y_hat, w = ab.nadaraya_watson(x, y, torch.tensor([0.1, 1.9, 50.0]), "gaussian", 1e-3)
    torch.testing.assert_close(y_hat, torch.tensor([[1.0, 10.0], [3.0, 30.0], [3.0, 30.0]]))  # no 0/0
    assert torch.isfinite(w).all()


def test_leave_one_out_excludes_the_point_itself():
    data = ab.make_kernel_data(n_train=12, seed=1)
    y_hat, w = ab.models.kernels.loo_predictions(data.x_train, data.y_train, "gaussian", 0.4)
    assert (w.diagonal() == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(12))
    changed = data.y_train.clone()
    changed[5] += 100.0
    y_hat2, _ = ab.models.kernels.loo_predictions(data.x_train, changed, "gaussian", 0.4)
    assert y_hat2[5] == y_hat[5]  # point 5's own label never enters its estimate
    assert (y_hat2 - y_hat).abs().max() > 1.0  # but it does enter its neighbours'


def test_in_sample_error_vanishes_with_width_but_loo_does_not():
    data = ab.make_kernel_data(seed=0)
    ins = [float(ab.width_objective(data.x_train, data.y_train, s, leave_one_out=False)) for s in (1e-3, 0.1, 1.0)]
    loo = [float(ab.width_objective(data.x_train, data.y_train, s)) for s in (1e-3, 0.1, 1.0)]
    assert ins == sorted(ins) and ins[0] < 1e-3
    assert loo[0] > 0.5


def test_module_matches_function_and_runs_on_meta():
    data = ab.make_kernel_data(n_train=10)
    model = ab.models.kernels.NadarayaWatson(data.x_train, data.y_train, "gaussian", 0.3)
    idx = torch.arange(10)
    torch.testing.assert_close(model(data.x_train, leave_out=idx),
                               ab.models.kernels.loo_predictions(data.x_train, data.y_train, "gaussian", 0.3)[0])
    assert model.attention_weights.shape == (10, 10)
    meta = ab.models.kernels.NadarayaWatson(data.x_train, data.y_train, "epanechnikov", 0.3).to("meta")
    out = meta(torch.rand(4, device="meta"))
    assert out.device.type == "meta" and out.shape == (4,)
    out = meta(torch.rand(3, device="meta"), leave_out=torch.tensor([0, 1, 2], device="meta"))
    assert out.device.type == "meta" and meta.attention_weights.shape == (3, 10)


def test_width_learning_improves_loo_and_in_sample_collapses():
    data = ab.make_kernel_data(seed=0)
    _, loo = ab.learn_width(data, sigma=1.5, objective="loo", epochs=25, lr=0.5, progress=False)
    assert loo.metrics["LOO mse"][-1] < loo.metrics["LOO mse"][0] - 0.1
    start = float(ab.width_objective(data.x_train, data.y_train, 1.5))
    assert loo.metrics["LOO mse"][-1] < start
    _, ins = ab.learn_width(data, sigma=1.5, objective="in_sample", epochs=25, lr=0.5, progress=False)
    sig = ins.metrics["sigma"]
    assert all(b < a for a, b in zip(sig, sig[1:])) and sig[-1] < 0.1  # the width keeps shrinking
    assert ins.metrics["LOO mse"][-1] > loo.metrics["LOO mse"][-1]


def test_sgd_minibatches_also_learn():
    data = ab.make_kernel_data(seed=2)
    _, h = ab.learn_width(data, sigma=1.5, epochs=8, lr=0.3, batch_size=10, progress=False)
    assert h.steps == 32 and h.metrics["LOO mse"][-1] < h.metrics["LOO mse"][0]


def test_data_is_reproducible_and_sorted():
    a, b = ab.make_kernel_data(seed=4), ab.make_kernel_data(seed=4)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert (a.x_train.diff() >= 0).all() and a.x_train.shape == (40,) and a.x_val.shape == (50,)
    torch.testing.assert_close(a.y_val, 2 * torch.sin(a.x_val) + a.x_val)


def test_data_follows_the_book_seed_when_seed_is_none(monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_SEED", "7")
    assert torch.equal(ab.make_kernel_data().y_train, ab.make_kernel_data(seed=7).y_train)
    monkeypatch.setenv("ATTENTION_BOOK_SEED", "8")
    assert not torch.equal(ab.make_kernel_data().y_train, ab.make_kernel_data(seed=7).y_train)


def test_figures_draw():
    data = ab.make_kernel_data()
    for fig in (ab.kernels_figure(), ab.estimates_figure(data, [("gaussian", 0.5), ("boxcar", 1.0)]),
                ab.kernel_explorer_figure("boxcar", 0.05, 8), ab.width_objectives_figure(data, [0.1, 1.0])):
        assert isinstance(fig, matplotlib.figure.Figure)
    _, stack = ab.estimate_weights(data, [(k, 1.0) for k in ab.KERNEL_NAMES])
    assert stack.shape == (1, 4, 50, 40)


def test_explorer_leaves_unreached_queries_blank():
    """A query no training point reaches has all-zero weights: its row is masked (drawn blank over
    hatching), not coloured as zero weight, and the colours run from 0 to the largest weight."""
    import matplotlib.pyplot as plt

    data = ab.make_kernel_data(n_train=10)
    y_hat, weights = ab.nadaraya_watson(data.x_train, data.y_train, data.x_val, "boxcar", 0.1)
    unreached = torch.isnan(y_hat)
    assert 0 < int(unreached.sum()) < len(y_hat)
    fig = ab.kernel_explorer_figure("boxcar", 0.1, 10)
    image = fig.axes[1].images[0]
    assert image.get_array().mask[:, 0].tolist() == unreached.tolist()
    assert image.get_clim() == (0.0, pytest.approx(float(weights.max())))
    assert f"over the {int((~unreached).sum())}" in fig.axes[0].get_title()
    assert len(fig.axes) == 3  # fit, map, colour bar
    plt.close(fig)
    nothing = ab.kernel_explorer_figure("boxcar", 0.01, 10)  # no query reached: no scale to show
    assert nothing.axes[1].images[0].get_array().mask.all()
    assert len(nothing.axes) == 2 and "none of the 50 queries" in nothing.axes[0].get_title()
    plt.close(nothing)


def test_explorer_draws_a_lone_reached_query_as_a_dot():
    """A reached query whose neighbours on the grid are not has an estimate but no line to draw:
    the fit shows it as a dot (the ch02s7 reader saw no estimate at all at boxcar, 0.0219, n=10)."""
    import matplotlib.pyplot as plt
    import numpy as np

    data = ab.make_kernel_data(n_train=10)
    y_hat, _ = ab.nadaraya_watson(data.x_train, data.y_train, data.x_val, "boxcar", 0.0219)
    reached = ~torch.isnan(y_hat)
    assert 0 < int(reached.sum()) < 5  # a few isolated queries
    fig = ab.kernel_explorer_figure("boxcar", 0.0219, 10)
    dots = [line for line in fig.axes[0].lines if line.get_marker() == "o" and line.get_color() == "tab:red"]
    assert len(dots) == 1
    np.testing.assert_allclose(dots[0].get_xdata(), data.x_val[reached].numpy())
    np.testing.assert_allclose(dots[0].get_ydata(), y_hat[reached].numpy())
    plt.close(fig)
    whole = ab.kernel_explorer_figure("gaussian", 0.5, 40)  # every query reached: no dots
    assert not [line for line in whole.axes[0].lines if line.get_color() == "tab:red" and line.get_marker() == "o"]
    plt.close(whole)


def test_chapter_states_learn_widths_defaults_as_they_are():
    """Section 2.7 lists ab.learn_width's keyword settings with their defaults: all of them, as in
    its signature (the ch02s7 reader found four missing from an earlier "those are its defaults")."""
    import inspect
    import json
    import re
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "notebooks" / "ch02_attention_pooling.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    text = next("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
                and "ab.learn_width(data, ...)" in "".join(c["source"]))
    stated = dict(re.findall(r"`(\w+)=([^`]+)`", text))
    params = inspect.signature(ab.learn_width).parameters
    real = {name: repr(p.default).replace("'", '"') for name, p in params.items() if name != "data"}
    assert stated == real


def test_width_maps_have_one_scale_each():
    import matplotlib.pyplot as plt

    from attention_book.models import kernels

    _, stack = ab.estimate_weights(ab.make_kernel_data(), [("gaussian", s) for s in (0.1, 1.0)])
    fig = kernels.width_maps_figure(stack[0], ["narrow", "wide"])
    maps = [ax for ax in fig.axes if ax.images]
    assert [m.images[0].get_clim()[1] for m in maps] == pytest.approx([float(w.max()) for w in stack[0]])
    plt.close(fig)


# --- the assignment checker -------------------------------------------------------------------

def _good(x_train, y_train, x_query, sigma):
    scores = -((x_query[:, None] - x_train[None, :]) ** 2) / (2 * sigma**2)
    return torch.softmax(scores, dim=1) @ y_train


def _naive(x_train, y_train, x_query, sigma):
    k = torch.exp(-((x_query[:, None] - x_train[None, :]) ** 2) / (2 * sigma**2))
    return (k / k.sum(1, keepdim=True)) @ y_train


def _no_two(x_train, y_train, x_query, sigma):
    scores = -((x_query[:, None] - x_train[None, :]) ** 2) / sigma**2
    return torch.softmax(scores, dim=1) @ y_train


def _wrong_axis(x_train, y_train, x_query, sigma):
    k = torch.exp(-((x_train[:, None] - x_query[None, :]) ** 2) / (2 * sigma**2))
    return (k / k.sum(1, keepdim=True)).T @ y_train


def test_checker_accepts_reference_and_rejects_wrong_solutions(capsys):
    assert ab.assignments.check_nadaraya_watson(_good)
    naive = ab.assignments.check_nadaraya_watson(_naive, verbose=False)
    assert not naive and [ok for _, ok, _ in naive.results] == [True] * 5 + [False]  # only the degenerate case
    for wrong in (_no_two, _wrong_axis):
        assert ab.assignments.check_nadaraya_watson(wrong, verbose=False).score < 0.8, wrong.__name__


def test_checker_reports_not_implemented(capsys):
    def todo(*args):
        raise NotImplementedError

    report = ab.assignments.check_nadaraya_watson(todo)
    assert report.not_implemented and not report
    assert "not implemented" in capsys.readouterr().out
