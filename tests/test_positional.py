"""Positional information: sinusoidal table, its offset rotation, learned and rotary embeddings."""

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import attention_book as ab


def test_table_values_and_shape():
    P = ab.sinusoidal_table(50, 8, dtype=torch.float64)
    assert P.shape == (50, 8)
    i, j = 7, 1
    w = 1 / 10000 ** (2 * j / 8)
    assert math.isclose(P[i, 2 * j].item(), math.sin(i * w), abs_tol=1e-12)
    assert math.isclose(P[i, 2 * j + 1].item(), math.cos(i * w), abs_tol=1e-12)
    assert torch.all(P[0, 1::2] == 1) and torch.all(P[0, 0::2] == 0)
    odd = ab.sinusoidal_table(5, 7)
    assert odd.shape == (5, 7)


@settings(max_examples=30, deadline=None)
@given(delta=st.integers(-40, 40), d=st.sampled_from([2, 8, 32, 64]))
def test_fixed_rotation_moves_every_position_by_delta(delta, d):
    """One matrix, independent of i, maps row i of the table to row i + delta, for every i at once."""
    P = ab.sinusoidal_table(200, d, dtype=torch.float64)
    M = ab.offset_rotation(delta, d)
    rows = torch.arange(max(0, -delta), min(200, 200 - delta))
    torch.testing.assert_close(P[rows] @ M.T, P[rows + delta], atol=1e-9, rtol=0)
    # each 2x2 block is a rotation: orthogonal with determinant 1
    block = M[:2, :2]
    torch.testing.assert_close(block @ block.T, torch.eye(2, dtype=torch.float64))
    assert math.isclose(torch.linalg.det(block).item(), 1.0, abs_tol=1e-12)


def test_positional_encoding_is_a_buffer_that_follows_the_module():
    pe = ab.PositionalEncoding(16, dropout=0.0, max_len=30)
    assert "P" not in dict(pe.named_parameters())
    assert pe.P.shape == (1, 30, 16)
    X = torch.zeros(2, 10, 16)
    torch.testing.assert_close(pe(X, offset=5)[0], ab.sinusoidal_table(30, 16)[5:15])
    assert pe.to("meta").P.device.type == "meta"


def test_learned_embedding_trains_and_adds_rows():
    torch.manual_seed(0)
    pe = ab.LearnedPositionalEmbedding(8, max_len=12)
    assert dict(pe.named_parameters())["P.weight"].shape == (12, 8)
    X = torch.zeros(3, 5, 8)
    out = pe(X, offset=2)
    torch.testing.assert_close(out[1], pe.P.weight[2:7])
    # a gradient step changes the table: it is learned
    loss = (pe(torch.randn(3, 5, 8)) ** 2).sum()
    loss.backward()
    assert pe.P.weight.grad[:5].abs().sum() > 0 and torch.all(pe.P.weight.grad[5:] == 0)


def test_rotary_preserves_norms_and_scores_depend_on_offset_only():
    torch.manual_seed(0)
    rope = ab.RotaryEmbedding(16)
    x = torch.randn(2, 3, 10, 16)
    torch.testing.assert_close(rope(x).norm(dim=-1), x.norm(dim=-1))
    q, k = torch.randn(16), torch.randn(16)
    Q, K = rope(q.expand(30, 16)), rope(k.expand(30, 16))
    scores = Q @ K.T  # scores[i, j] = <R_i q, R_j k>
    for offset in (-5, 0, 3, 11):
        diag = torch.diagonal(scores, offset=offset)
        torch.testing.assert_close(diag, diag[0].expand_as(diag), atol=1e-4, rtol=1e-4)
    # position 0 is not rotated; offset shifts positions
    torch.testing.assert_close(rope(x)[..., 0, :], x[..., 0, :])
    torch.testing.assert_close(rope(x[..., 4:, :], offset=4), rope(x)[..., 4:, :], atol=1e-5, rtol=1e-5)


def test_rotary_agrees_with_the_sinusoidal_rotation():
    """RoPE rotates the pair (2j, 2j+1) by p * w_j, the same angles as the table (transposed blocks)."""
    rope = ab.RotaryEmbedding(8)
    x = torch.randn(1, 8, dtype=torch.float64)
    p = 6
    pos = torch.zeros(p + 1, 8, dtype=torch.float64)
    pos[p] = x[0]
    got = rope.double()(pos)[p]
    torch.testing.assert_close(got, ab.offset_rotation(p, 8).T @ x[0])


def test_meta_device_forward():
    X = torch.randn(2, 5, 8, device="meta")
    for module in (ab.PositionalEncoding(8, 0.1), ab.LearnedPositionalEmbedding(8, 0.1)):
        out = module.to("meta")(X, offset=3)
        assert out.shape == (2, 5, 8) and out.device.type == "meta"
    rope = ab.RotaryEmbedding(8).to("meta")
    assert rope(torch.randn(2, 4, 5, 8, device="meta")).shape == (2, 4, 5, 8)


def test_bad_inputs():
    with pytest.raises(ValueError, match="even num_hiddens"):
        ab.offset_rotation(1, 7)
    with pytest.raises(ValueError, match="even head_dim"):
        ab.RotaryEmbedding(5)
    with pytest.raises(ValueError, match=r"expects x of shape \(\.\.\., length, 8\), got \(2, 3, 6\)"):
        ab.RotaryEmbedding(8)(torch.randn(2, 3, 6))
    with pytest.raises(ValueError, match="offset must be >= 0"):
        ab.RotaryEmbedding(8)(torch.randn(3, 8), offset=-1)
    for module in (ab.PositionalEncoding(8, max_len=10), ab.LearnedPositionalEmbedding(8, max_len=10)):
        with pytest.raises(ValueError, match=r"\(batch, length, 8\), got \(2, 3, 4\)"):
            module(torch.randn(2, 3, 4))
        with pytest.raises(ValueError, match="max_len=10"):
            module(torch.randn(1, 8, 8), offset=5)
    with pytest.raises(ValueError, match="num_hiddens must be at least 1, got 0"):
        ab.LearnedPositionalEmbedding(0)


# --- ALiBi (chapter 10) --------------------------------------------------------------------------

def test_alibi_slopes_follow_the_papers_recipe():
    torch.testing.assert_close(ab.alibi_slopes(8), torch.tensor([2.0 ** -k for k in range(1, 9)]))
    torch.testing.assert_close(ab.alibi_slopes(4), torch.tensor([2.0 ** -k for k in (2, 4, 6, 8)]))
    # 6 heads: the 4 slopes of 4 heads, then every other slope of 8 heads
    torch.testing.assert_close(ab.alibi_slopes(6), torch.cat([ab.alibi_slopes(4), ab.alibi_slopes(8)[0::2][:2]]))
    assert ab.alibi_slopes(1).tolist() == [2.0 ** -8]


def test_alibi_bias_is_minus_slope_times_distance():
    slopes = torch.tensor([0.5, 0.25])
    bias = ab.alibi_bias(slopes, 3, 5)  # the 3 queries sit at positions 2, 3, 4
    assert bias.shape == (2, 3, 5)
    torch.testing.assert_close(bias[0, 0], torch.tensor([-1.0, -0.5, 0.0, -0.5, -1.0]))
    torch.testing.assert_close(bias[1, 2], -0.25 * torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0]))
    assert ab.models.positional.ALiBi(4)(2, 6).shape == (1, 4, 2, 6)
    with pytest.raises(ValueError, match="slopes"):
        ab.alibi_bias(torch.ones(2, 2), 3, 3)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("masking", ["none", "causal", "lengths"])
def test_attention_with_alibi_adds_the_bias_to_every_heads_scores(need_weights, masking):
    torch.manual_seed(0)
    m = ab.ALiBiAttention(16, 4).eval()
    X = torch.randn(2, 6, 16)
    lens = torch.tensor([6, 3]) if masking == "lengths" else None
    got = m(X, X, X, lens, causal=masking == "causal", need_weights=need_weights)
    q, k, v = (ab.transpose_qkv(layer(X), 4) for layer in (m.W_q, m.W_k, m.W_v))
    scores = q @ k.transpose(-2, -1) / 2.0 + ab.alibi_bias(ab.alibi_slopes(4), 6, 6)
    if masking == "causal":
        scores = scores.masked_fill(~ab.causal_mask(6, 6), float("-inf"))
    if masking == "lengths":
        scores = scores.masked_fill(~(torch.arange(6)[None, :] < lens[:, None])[:, None, None, :], float("-inf"))
    want = m.W_o(ab.transpose_output(scores.softmax(-1) @ v))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_learned_rows_beyond_the_training_length_get_no_gradient():
    """Why a learned table cannot help beyond the lengths it was trained on: those rows never move."""
    pe = ab.LearnedPositionalEmbedding(8, max_len=20)
    pe(torch.randn(3, 12, 8)).square().sum().backward()
    grad = pe.P.weight.grad
    assert grad[:12].abs().sum(-1).min() > 0 and torch.equal(grad[12:], torch.zeros(8, 8))
