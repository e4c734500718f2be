"""Chapter 10: the online softmax, tiled attention against PyTorch's kernel, tile plans, peak memory, the checker."""

import math
import os
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch.nn import functional as F

import attention_book as ab
from attention_book.assignments import ch10


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


# --- online softmax and the state merge ---------------------------------------------------------

@given(rows=st.integers(1, 4), n=st.integers(1, 30), block=st.integers(1, 12), shift=st.floats(-50, 50))
@settings(max_examples=40, deadline=None)
def test_online_softmax_equals_softmax(rows, n, block, shift):
    x = torch.randn(rows, n, dtype=torch.float64) * 4 + shift
    torch.testing.assert_close(ab.online_softmax(x, block), torch.softmax(x, dim=-1))


def test_online_softmax_masked_scores_and_empty_rows():
    x = torch.randn(3, 7)
    x[0, 2:] = float("-inf")
    x[1] = float("-inf")  # nothing to attend to: zeros, not NaN
    got = ab.online_softmax(x, 3)
    torch.testing.assert_close(got[0], torch.softmax(x[0], -1))
    assert torch.equal(got[1], torch.zeros(7)) and torch.isfinite(got).all()
    with pytest.raises(ValueError, match="block_size"):
        ab.online_softmax(x, 0)
    with pytest.raises(ValueError, match="floating"):
        ab.online_softmax(torch.ones(3, dtype=torch.long), 2)


@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=5), big=st.booleans())
@settings(max_examples=30, deadline=None)
def test_merging_block_states_gives_attention_in_any_order(sizes, big):
    scores = torch.randn(3, sum(sizes), dtype=torch.float64) * (300 if big else 2)
    values = torch.randn(sum(sizes), 4, dtype=torch.float64)
    want = torch.softmax(scores, -1) @ values
    states, start = [], 0
    for n in sizes:
        states.append(ab.softmax_block(scores[:, start:start + n], values[start:start + n]))
        start += n
    for order in (states, states[::-1]):
        state = order[0]
        for other in order[1:]:
            state = ab.merge_softmax(state, other)
        torch.testing.assert_close(ab.finish_softmax(state), want)
        torch.testing.assert_close(state[0] + torch.log(state[1]), torch.logsumexp(scores, -1))


def test_an_empty_state_changes_nothing_and_two_give_no_nan():
    empty = ab.softmax_block(torch.full((2, 3), float("-inf")), torch.randn(3, 5))
    assert torch.isneginf(empty[0]).all() and (empty[1] == 0).all() and (empty[2] == 0).all()
    full = ab.softmax_block(torch.randn(2, 4), torch.randn(4, 5))
    for a, b in zip(ab.merge_softmax(empty, full), full):
        torch.testing.assert_close(a, b)
    both = ab.merge_softmax(empty, empty)
    assert all(not torch.isnan(t).any() for t in both)
    assert torch.equal(ab.finish_softmax(both), torch.zeros(2, 5))


# --- tiled attention against scaled_dot_product_attention ---------------------------------------

@st.composite
def attention_cases(draw):
    batch, heads = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    n_k = draw(st.integers(1, 20))
    kind = draw(st.sampled_from(["none", "causal", "padding", "random", "window", "padding+causal"]))
    n_q = draw(st.integers(1, n_k)) if "causal" in kind or kind == "window" else draw(st.integers(1, 20))
    d, d_v = draw(st.integers(1, 8)), draw(st.integers(1, 6))
    block_q, block_k = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    seed = draw(st.integers(0, 2**16))
    return batch, heads, n_q, n_k, d, d_v, block_q, block_k, kind, seed, draw(st.integers(1, 6))


@given(case=attention_cases())
@settings(max_examples=80, deadline=None)
def test_tiled_attention_matches_sdpa_in_values_and_gradients(case):
    batch, heads, n_q, n_k, d, d_v, block_q, block_k, kind, seed, window = case
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(batch, heads, n, d, generator=g, dtype=torch.float64, requires_grad=True) for n in (n_q, n_k))
    v = torch.randn(batch, heads, n_k, d_v, generator=g, dtype=torch.float64, requires_grad=True)
    mask, causal, win, ref_mask = None, "causal" in kind, None, None
    if "padding" in kind:  # lengths >= 1, so that every query has a key (SDPA gives NaN otherwise)
        lens = torch.randint(1, n_k + 1, (batch,), generator=g)
        mask = (torch.arange(n_k)[None, :] < lens[:, None])[:, None, None, :]  # (batch, 1, 1, keys)
        ref_mask = mask
    elif kind == "random":
        mask = torch.rand(batch, heads, n_q, n_k, generator=g) < 0.6
        mask[..., 0] = True
        ref_mask = mask
    elif kind == "window":
        win = window
    if causal or win is not None:
        rows = torch.arange(n_q)[:, None] + n_k - n_q
        cols = torch.arange(n_k)[None, :]
        band = (cols <= rows) & ((cols > rows - win) if win is not None else True)
        ref_mask = band if ref_mask is None else (ref_mask & band)
    got = ab.tiled_attention(q, k, v, mask, causal=causal, window=win, block_q=block_q, block_k=block_k)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=ref_mask)
    torch.testing.assert_close(got, want)
    d_out = torch.randn(got.shape, generator=g, dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(got, (q, k, v), d_out), torch.autograd.grad(want, (q, k, v), d_out)):
        torch.testing.assert_close(a, b)


def test_queries_with_nothing_to_see_give_zeros_like_attend():
    q = torch.randn(2, 1, 5, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, 6, 4, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([0, 4])[:, None] > torch.arange(6)[None, :]  # example 0 has no key at all
    mask = mask[:, None, None, :]
    got = ab.tiled_attention(q, k, k, mask, block_q=2, block_k=4)
    want, _ = ab.attend(q, k, k, mask)
    torch.testing.assert_close(got, want)
    assert torch.equal(got[0], torch.zeros_like(got[0]))
    assert torch.autograd.gradcheck(lambda q, k: ab.tiled_attention(q, k, k, mask, block_q=2, block_k=4), (q, k))


def test_tiled_attention_in_float32_and_custom_scale():
    q, k, v = (torch.randn(1, 2, 33, 16) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    torch.testing.assert_close(ab.tiled_attention(q, k, v, causal=True, scale=0.3, block_q=8, block_k=16), want,
                               atol=1e-5, rtol=1e-4)


def test_bad_arguments_are_named():
    q = torch.randn(1, 4, 8)
    with pytest.raises(ValueError, match="block_q"):
        ab.tiled_attention(q, q, q, block_q=0)
    with pytest.raises(ValueError, match="window"):
        ab.tiled_attention(q, q, q, window=2.5)
    with pytest.raises(ValueError, match="num_queries <= num_keys"):
        ab.tiled_attention(torch.randn(1, 5, 8), q, q, causal=True)
    with pytest.raises(ValueError, match="mask"):
        ab.tiled_attention(q, q, q, torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="feature size"):
        ab.tiled_attention(q, torch.randn(1, 4, 7), q)
    with pytest.raises(ValueError, match="one dtype"):
        ab.tiled_attention(q, q.double(), q)


# --- which tiles are computed -------------------------------------------------------------------

def test_tile_plan_counts():
    # no mask: every tile whole
    assert (ab.models.tiled.tile_plan(10, 12, 4, 5) == ab.models.tiled.FULL).all()
    # causal with blocks of one: each pair is its own tile; the strict upper triangle is skipped
    plan = ab.models.tiled.tile_plan(6, 6, 1, 1, causal=True)
    assert torch.equal(plan == ab.models.tiled.SKIPPED, torch.ones(6, 6, dtype=torch.bool).triu(1))
    assert (plan.diagonal() == ab.models.tiled.FULL).all()
    counts = ab.tile_counts(256, 256, 32, 32, causal=True)
    assert counts["skipped"] == 28 and counts["masked"] == 8 and counts["full"] == 28
    assert counts["needed"] == 256 * 257 // 2 and counts["scores"] == 36 * 32 * 32
    # a window of w computes about n * w scores, whatever the length
    for n in (128, 512):
        c = ab.tile_counts(n, n, 16, 16, window=16)
        assert c["needed"] == 16 * n - 16 * 15 // 2 and c["scores"] <= 3 * 16 * n
    # fewer queries than keys: the queries are the last positions
    assert torch.equal(ab.models.tiled.tile_plan(2, 8, 1, 4, causal=True), torch.tensor([[ab.models.tiled.FULL, ab.models.tiled.MASKED], [ab.models.tiled.FULL, ab.models.tiled.FULL]]))


def test_tile_figure_draws_and_prints(capsys):
    fig = ab.tile_figure(64, 16, causal=True)
    assert "of 16 tiles computed" in fig.axes[0].get_title()
    assert "scores computed" in capsys.readouterr().out
    ab.tile_figure(64, 8, causal=True, window=16)


# --- peak memory --------------------------------------------------------------------------------

def test_peak_memory_counts_tensors_and_their_release():
    with ab.PeakMemory() as memory:
        a = torch.empty(1000)            # 4000 bytes
        b = a.view(10, 100)               # a view: nothing new
        del a, b
        c = torch.empty(500)              # the first is gone: 2000 now
    assert memory.peak == 4000 and memory.current == 2000
    x = torch.randn(256)  # made before: not counted
    assert ab.peak_memory(lambda: x.mul_(2)) == 0
    with pytest.raises(ValueError, match="function"):
        ab.peak_memory(3)
    del c


def _fwd_bwd(fn, n):
    q = torch.randn(1, 2, n, 16, requires_grad=True)
    return ab.peak_memory(lambda: fn(q).sum().backward())


def test_tiled_memory_grows_linearly_explicit_quadratically():
    tiled = [_fwd_bwd(lambda q: ab.tiled_attention(q, q, q, causal=True, block_q=64, block_k=64), n)
             for n in (512, 1024)]
    explicit = [_fwd_bwd(lambda q: ab.attend(q, q, q, causal=True, need_weights=True)[0], n) for n in (512, 1024)]
    assert tiled[1] / tiled[0] < 2.2           # linear (outputs and gradients), no n x n matrix
    assert explicit[1] / explicit[0] > 3.5     # the (n x n) weights dominate
    assert tiled[1] * 8 < explicit[1]
    assert explicit[1] > 2 * 1024 * 1024 * 4   # at least the weights of 2 heads, float32


# --- the assignment's checker ------------------------------------------------------------------

def _package_fold(states):
    """The assignment's answer built from the package: fold the pairwise merge, then finish."""
    state = states[0]
    for other in states[1:]:
        state = ab.merge_softmax(state, other)
    m, l, _ = state
    return ab.finish_softmax(state), torch.where(l > 0, m + torch.log(l), torch.full_like(m, float("-inf")))


def test_checker_accepts_the_package_fold_and_rejects_wrong_merges(capsys):
    assert ch10.check_merge_softmax(_package_fold)

    def no_rescaling(states):
        l, acc = sum(s[1] for s in states), sum(s[2] for s in states)
        return acc / l[:, None], torch.log(l)

    def nan_when_all_empty(states):
        m, l, acc = states[0]
        for m_b, l_b, acc_b in states[1:]:
            new = torch.maximum(m, m_b)
            x, y = torch.exp(m - new), torch.exp(m_b - new)
            m, l, acc = new, l * x + l_b * y, acc * x[..., None] + acc_b * y[..., None]
        return acc / l[:, None], m + torch.log(l)

    def forgets_lse(states):
        return _package_fold(states)[0]

    def todo(states):
        raise NotImplementedError

    assert ch10.check_merge_softmax(no_rescaling, verbose=False).score < 0.5
    report = ch10.check_merge_softmax(nan_when_all_empty, verbose=False)
    assert not report and any("NaN" in why for _, ok, why in report.results if not ok)
    assert ch10.check_merge_softmax(forgets_lse, verbose=False).score == 0
    assert ch10.check_merge_softmax(todo, verbose=False).not_implemented
    with ab.assignments.hidden_cases(7):
        assert ch10.check_merge_softmax(_package_fold, verbose=False)
    assert math.isclose(ch10.check_merge_softmax(_package_fold, verbose=False).score, 1.0)


def test_hidden_grading_round_trip_and_the_package_merge_is_blocked(tmp_path):
    from attention_book.assignments import grading

    def student(states):
        m, l, acc = states[0]
        for m_b, l_b, acc_b in states[1:]:
            new = torch.maximum(m, m_b)
            ref = torch.where(torch.isinf(new), torch.zeros_like(new), new)
            x, y = torch.exp(m - ref), torch.exp(m_b - ref)
            m, l, acc = new, l * x + l_b * y, acc * x[:, None] + acc_b * y[:, None]
        seen = l > 0
        out = acc / torch.where(seen, l, torch.ones_like(l))[:, None]
        return out, torch.where(seen, m + torch.log(l), torch.full_like(m, float("-inf")))

    def graded(fn, offset):
        """The grader's round trip: arguments in, the student's outputs out, judged outside."""
        cases, results = tmp_path / "cases.bin", tmp_path / "results.bin"
        cases.write_bytes(grading.dump_data(grading.hidden_arguments("merge_softmax", offset, "nonce")))
        grading.run_hidden("merge_softmax", fn, str(cases), str(results))
        data = grading.load_results(results.read_bytes())
        return grading.judge("merge_softmax", offset, "nonce", data).score

    assert graded(student, 12345) == 1.0
    assert graded(ab.merge_softmax, 7) == 0.0  # the chapter's pairwise merge answers another question
    # In the sandbox's copy of the package the answer does not exist, so wrapping it fails too.
    grading.package_without(["merge_softmax"], tmp_path / "copy")
    run = subprocess.run([sys.executable, "-c", "import torch, attention_book as ab\n"
                          "try:\n    ab.merge_softmax(None, None)\nexcept RuntimeError as e:\n"
                          "    print('not available' in str(e))"],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(tmp_path / "copy")))
    assert run.stdout.strip() == "True", run.stderr[-2000:]
    assert ab.assignments.check_merge_softmax(_package_fold, verbose=False)  # unblocked again afterwards
