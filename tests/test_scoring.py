"""Tests of chapter 3's extras: distance and bilinear scores, the 1/√d figure, costs, the assignment."""

import matplotlib.figure
import matplotlib.pyplot
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import attention_book as ab
from attention_book.models import scoring
from test_attention import SETTINGS, gradcheck_inputs

pytestmark = pytest.mark.usefixtures("one_thread")


@st.composite
def problems(draw):
    b, n_q, n_k = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 6))
    d_q, d_k, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    lens = torch.tensor(draw(st.lists(st.integers(0, n_k), min_size=b, max_size=b)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    q = torch.randn(b, n_q, d_q, generator=g)
    k = torch.randn(b, n_k, d_k, generator=g)
    v = torch.randn(b, n_k, d_v, generator=g)
    return q, k, v, lens


def bilinear_reference(module, q, k, v, lens):
    scores = torch.einsum("bnq,qk,bmk->bnm", q, module.M, k) / module.key_size**0.5
    return ab.masked_softmax(scores, lens) @ v


# --- distance-based attention (exercise 11.3.1) -------------------------------------------------


@SETTINGS
@given(problems())
def test_distance_attention_equals_the_literal_gaussian_kernel(problem):
    q, _, v, lens = problem
    k = torch.randn(q.shape[0], v.shape[1], q.shape[-1])
    expected = ab.masked_softmax(ab.distance_scores(q, k), lens) @ v
    for need in (True, False):
        module = ab.DistanceAttention(need_weights=need)
        torch.testing.assert_close(module(q, k, v, lens), expected, atol=1e-5, rtol=1e-5)
    module = ab.DistanceAttention().eval()
    with ab.keep_attention_weights():
        torch.testing.assert_close(module(q, k, v, lens), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(module.attention_weights, ab.masked_softmax(ab.distance_scores(q, k), lens),
                               atol=1e-5, rtol=1e-5)


def test_distance_attention_ignores_the_query_norm_and_prefers_near_keys():
    keys = torch.tensor([[[0.0, 0.0], [3.0, 0.0], [0.0, 5.0]]])
    values = torch.eye(3)[None]
    module = ab.DistanceAttention(scale=1.0, need_weights=True).eval()
    module(torch.tensor([[[2.9, 0.1]]]), keys, values)
    assert module.attention_weights.argmax().item() == 1  # the nearest key
    # A plain dot product prefers the long key 2 for this query; the distance score does not.
    q = torch.tensor([[[1.0, 1.0]]])
    dot = ab.DotProductAttention(need_weights=True).eval()
    dot(q, keys, values)
    module(q, keys, values)
    assert dot.attention_weights.argmax().item() == 2 and module.attention_weights.argmax().item() == 0
    # ‖q‖² is a per-query constant: the softmax removes it exactly.
    manual = torch.softmax(-0.5 * ((q[:, :, None] - keys[:, None]) ** 2).sum(-1), dim=-1)
    torch.testing.assert_close(module.attention_weights, manual)


# --- bilinear attention (exercise 11.3.2) --------------------------------------------------------


@SETTINGS
@given(problems())
def test_bilinear_attention_equals_qMk_for_different_sizes(problem):
    q, k, v, lens = problem
    torch.manual_seed(0)
    for need in (True, False):
        module = ab.BilinearAttention(q.shape[-1], k.shape[-1], need_weights=need)
        torch.testing.assert_close(module(q, k, v, lens), bilinear_reference(module, q, k, v, lens),
                                   atol=1e-5, rtol=1e-5)


@SETTINGS
@given(problems())
def test_padding_and_batching_do_not_change_the_new_scores(problem):
    q, k, v, lens = problem
    torch.manual_seed(0)
    kq = torch.randn(k.shape[0], k.shape[1], q.shape[-1])
    for module, keys in ((ab.DistanceAttention().eval(), kq), (ab.BilinearAttention(q.shape[-1], k.shape[-1]).eval(), k)):
        out = module(q, keys, v, lens)
        n = int(lens.max())
        k2, v2 = keys.clone(), v.clone()
        k2[:, n:] += 100.0
        v2[:, n:] -= 100.0
        torch.testing.assert_close(module(q, k2, v2, lens), out)
        for b in range(q.shape[0]):
            torch.testing.assert_close(module(q[b:b + 1], keys[b:b + 1], v[b:b + 1], lens[b:b + 1]), out[b:b + 1])
        assert torch.all(out[lens == 0] == 0) and torch.isfinite(out).all()


def test_gradcheck_float64():
    q, k, v, lens = gradcheck_inputs()
    torch.manual_seed(0)
    for module in (ab.DistanceAttention(need_weights=True), ab.DistanceAttention(),
                   ab.BilinearAttention(4, 4).double(), ab.BilinearAttention(4, 4, need_weights=True).double()):
        assert torch.autograd.gradcheck(lambda q, k, v: module(q, k, v, lens), (q, k, v))


def test_new_scores_run_on_the_meta_device():
    q, k, v = (torch.empty(2, n, d, device="meta") for n, d in ((3, 4), (5, 4), (5, 6)))
    with torch.device("meta"):
        modules = (ab.DistanceAttention(0.1), ab.BilinearAttention(4, 4, dropout=0.1))
    for module in modules:
        for mode in (module.train, module.eval):
            mode()
            out = module(q, k, v, torch.tensor([2, 5]))
            assert out.shape == (2, 3, 6) and out.device.type == "meta"


@pytest.mark.parametrize("call, match", [
    (lambda: ab.DistanceAttention()(torch.randn(2, 3, 4), torch.randn(2, 5, 3), torch.randn(2, 5, 2)),
     r"same feature size.*queries \(2, 3, 4\).*keys \(2, 5, 3\)"),
    (lambda: ab.DistanceAttention()(torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 2),
                                    torch.tensor([1, 6])), r"valid_lens must lie in \[0, 5\]"),
    (lambda: ab.DistanceAttention(scale=0.0), r"scale must be positive"),
    (lambda: ab.BilinearAttention(4, 3)(torch.randn(2, 3, 4), torch.randn(2, 5, 2), torch.randn(2, 5, 2)),
     r"keys have shape \(2, 5, 2\).*needs \(batch, length, 3\)"),
    (lambda: ab.BilinearAttention(4, 3)(torch.randn(2, 3, 4), torch.randn(1, 5, 3), torch.randn(2, 5, 2)),
     r"batch sizes differ"),
    (lambda: ab.BilinearAttention(0, 3), r"query_size must be at least 1, got 0"),
    (lambda: ab.BilinearAttention(2, 3, dropout=-0.1), r"dropout must lie in \[0, 1\)"),
    (lambda: ab.scaling_statistics([0, 4]), r"dims must be positive"),
    (lambda: ab.score_scale_figure(d=2048, max_dim=1024), r"d must lie in \[1, max_dim=1024\], got 2048"),
    (lambda: ab.models.scoring.make_scorer("cosine", 4), r"kind must be one of"),
    (lambda: ab.scoring_flops("cosine", 1, 2, 3), r"kind must be one of"),
    (lambda: ab.scoring_cost("dot", 8, 4, repeats=0), r"repeats must be at least 1"),
    (lambda: ab.scoring_costs_figure([]), r"needs the rows"),
])
def test_bad_input_is_explained(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- why 1/√d ------------------------------------------------------------------------------------


def test_scaling_statistics_follow_the_theory():
    stats = ab.scaling_statistics([1, 16, 256], num_keys=8, num_samples=400)
    ratio = stats["var_raw"] / stats["dims"]
    assert ratio.min() > 0.8 and ratio.max() < 1.2  # Var(qᵀk) = d
    assert abs(stats["var_scaled"] - 1).max() < 0.2  # Var(qᵀk/√d) = 1
    assert stats["max_weight_raw"][-1] > 0.9 > 0.5 > stats["max_weight_scaled"][-1]  # raw saturates
    assert stats["grad_raw"][-1] < 0.5 * stats["grad_scaled"][-1]  # ...and its gradient vanishes
    assert (stats["max_weight_raw"][1:] >= stats["max_weight_scaled"][1:]).all()


def test_plot_scaling_draws_four_panels_and_follows_d():
    fig = ab.score_scale_figure(d=32, max_dim=256, num_samples=100)
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 4
    assert "d = 32" in fig.axes[1].get_title()
    bars = [p.get_height() for p in fig.axes[1].patches]
    assert abs(sum(bars) - 2.0) < 1e-6  # two softmax rows of bars, raw and scaled


@pytest.mark.parametrize("d, max_dim", [(1, 1024), (64, 1024), (1024, 1024), (32, 256), (8, 8)])
def test_score_scale_legends_cover_no_data(d, max_dim):
    """Issue 36: no legend of the scaling figure lies over a curve's points (its markers and the
    segments between them, sampled every few pixels) or a bar; the old bottom-left legend sat on
    the raw curve. The dashed marker of the chosen d (a vertical line) is not data."""
    import numpy as np

    fig = ab.score_scale_figure(d=d, max_dim=max_dim, num_samples=100)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    covered = []
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend is not None, ax.get_title()
        box = legend.get_window_extent(renderer)
        for line in ax.get_lines():
            if line.get_label().startswith("_"):  # the chosen d's dashed marker
                continue
            xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
            t = np.linspace(0, 1, 41)[:, None, None]
            xy = (xy[:-1] * (1 - t) + xy[1:] * t).reshape(-1, 2)
            if any(box.contains(x, y) for x, y in xy):
                covered.append(f"{ax.get_title()!r}: {line.get_label()}")
        covered += [f"{ax.get_title()!r}: a bar" for bar in ax.patches
                    if bar.get_height() > 0 and bar.get_window_extent(renderer).overlaps(box)]
    matplotlib.pyplot.close(fig)
    assert not covered, covered


# --- costs (exercise 11.3.3) -----------------------------------------------------------------------


def test_counted_costs_scale_as_explained():
    dot = ab.scoring_flops("dot", 100, 200, 32)
    dot2 = ab.scoring_flops("dot", 100, 400, 32)
    assert 1.9 < dot2["flops"] / dot["flops"] < 2.1  # linear in the number of keys
    add = ab.scoring_flops("additive", 100, 200, 32, num_hiddens=64)
    assert add["bytes"] > 30 * dot["bytes"]  # the (n, m, h) intermediate dominates memory traffic
    assert ab.scoring_flops("distance", 100, 200, 32)["flops"] > dot["flops"]
    assert ab.scoring_flops("bilinear", 100, 200, 32)["flops"] - dot["flops"] == 2 * 100 * 32 * 32


def test_measured_costs_table_and_plot():
    rows = ab.measure_scoring_costs(key_counts=(8, 16), dims=(4, 8), fixed_dim=4, fixed_keys=8, repeats=1, batch=1)
    assert len(rows) == 2 * 4 * 2
    assert {r["kind"] for r in rows} == set(ab.SCORING_KINDS) and all(r["seconds"] > 0 for r in rows)
    fig = ab.scoring_costs_figure(rows)
    assert len(fig.axes) == 2 and len(fig.axes[0].get_lines()) == 4
    assert ab.scoring_cost("dot", 8, 4, backward=True, fused=True, repeats=1) > 0


def test_make_scorer_builds_every_kind():
    q, k, v = torch.randn(1, 3, 6), torch.randn(1, 4, 6), torch.randn(1, 4, 6)
    for kind in ab.SCORING_KINDS:
        module = ab.models.scoring.make_scorer(kind, 6).eval()
        assert isinstance(module, nn.Module) and module(q, k, v).shape == (1, 3, 6)


# The chapter 3 assignment's checker (a masked softmax with a mask and a temperature) is tested in
# tests/test_assignments.py.


def test_best_time_runs_once_under_the_smoke_switch(monkeypatch):
    calls = []
    monkeypatch.delenv("ATTENTION_BOOK_MAX_STEPS", raising=False)
    scoring.best_time(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 5
    calls.clear()
    monkeypatch.setenv("ATTENTION_BOOK_MAX_STEPS", "2")
    scoring.best_time(lambda: calls.append(1), repeats=3, warmup=2)
    assert len(calls) == 1
