"""MultiHeadAttention: parity with torch.nn.MultiheadAttention, both paths, shapes, meta device, errors."""

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import nn

import attention_book as ab


def pair(num_hiddens=16, num_heads=4, bias=False, seed=0):
    """Our layer and torch's, with the same weights."""
    torch.manual_seed(seed)
    ours = ab.MultiHeadAttention(num_hiddens, num_heads, bias=bias).eval()
    ref = nn.MultiheadAttention(num_hiddens, num_heads, bias=bias, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        ref.out_proj.weight.copy_(ours.W_o.weight)
        if bias:
            ref.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
            ref.out_proj.bias.copy_(ours.W_o.bias)
    return ours, ref


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_parity_with_torch_no_mask(bias, need_weights):
    ours, ref = pair(bias=bias)
    q, kv = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    got = ours(q, kv, kv, need_weights=need_weights)
    want, want_w = ref(q, kv, kv, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    if need_weights:
        torch.testing.assert_close(ours.attention_weights, want_w, atol=1e-6, rtol=1e-5)
    else:
        assert ours.attention_weights is None


@pytest.mark.parametrize("need_weights", [False, True])
def test_parity_with_torch_key_padding(need_weights):
    ours, ref = pair()
    X = torch.randn(3, 6, 16)
    valid_lens = torch.tensor([6, 2, 4])
    padding = torch.arange(6)[None, :] >= valid_lens[:, None]  # torch: True = ignore
    got = ours(X, X, X, valid_lens, need_weights=need_weights)
    want, want_w = ref(X, X, X, key_padding_mask=padding, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    if need_weights:
        torch.testing.assert_close(ours.attention_weights, want_w, atol=1e-6, rtol=1e-5)
        assert ours.attention_weights.shape == (3, 4, 6, 6)


@pytest.mark.parametrize("need_weights", [False, True])
def test_parity_with_torch_causal(need_weights):
    ours, ref = pair()
    X = torch.randn(2, 7, 16)
    forbidden = torch.ones(7, 7, dtype=torch.bool).triu(1)  # torch: True = may not attend
    got = ours(X, X, X, causal=True, need_weights=need_weights)
    want = ref(X, X, X, attn_mask=forbidden, need_weights=False)[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    # the same through an explicit boolean mask (True = may attend)
    torch.testing.assert_close(ours(X, X, X, attn_mask=~forbidden), want, atol=1e-5, rtol=1e-4)


def test_parity_causal_and_padding_together():
    ours, ref = pair()
    X = torch.randn(2, 5, 16)
    valid_lens = torch.tensor([5, 3])
    padding = torch.arange(5)[None, :] >= valid_lens[:, None]
    forbidden = torch.ones(5, 5, dtype=torch.bool).triu(1)
    want = ref(X, X, X, key_padding_mask=padding, attn_mask=forbidden, need_weights=False)[0]
    for nw in (False, True):
        torch.testing.assert_close(ours(X, X, X, valid_lens, causal=True, need_weights=nw), want, atol=1e-5, rtol=1e-4)


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3), n_q=st.integers(1, 6), n_k=st.integers(1, 6), heads=st.sampled_from([1, 2, 4]),
    causal=st.booleans(), use_lens=st.booleans(), rotary=st.booleans(), seed=st.integers(0, 10_000),
)
def test_fast_path_equals_weights_path(batch, n_q, n_k, heads, causal, use_lens, rotary, seed):
    torch.manual_seed(seed)
    if causal and n_q > n_k:
        n_q = n_k
    m = (ab.RotaryAttention if rotary else ab.MultiHeadAttention)(8, heads, bias=True)
    q, kv = torch.randn(batch, n_q, 8), torch.randn(batch, n_k, 8)
    lens = torch.randint(0, n_k + 1, (batch,)) if use_lens else None
    fast = m(q, kv, kv, lens, causal=causal, need_weights=False)
    slow = m(q, kv, kv, lens, causal=causal, need_weights=True)
    assert not torch.isnan(fast).any()
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-4)
    assert m.attention_weights.shape == (batch, heads, n_q, n_k)


def test_weights_follow_the_module_mode_and_switch():
    m = ab.MultiHeadAttention(8, 2)
    X = torch.randn(2, 3, 8)
    m.train()
    m(X, X, X)
    assert m.attention_weights is None  # training: fast kernel
    with ab.keep_attention_weights():
        m(X, X, X)
    assert m.attention_weights.shape == (2, 2, 3, 3)
    torch.testing.assert_close(m.attention_weights.sum(-1), torch.ones(2, 2, 3))
    m.eval()
    m(X, X, X)
    assert m.attention_weights is None  # eval mode: the fast kernel too


def test_two_d_valid_lens_and_four_d_mask():
    torch.manual_seed(1)
    m = ab.MultiHeadAttention(8, 2, need_weights=True).eval()
    X = torch.randn(2, 3, 8)
    lens2 = torch.tensor([[1, 2, 3], [3, 3, 1]])
    out = m(X, X, X, lens2)
    w = m.attention_weights
    assert torch.all(w[0, :, 0, 1:] == 0) and torch.all(w[1, :, 2, 1:] == 0)
    mask4 = torch.ones(2, 2, 3, 3, dtype=torch.bool)
    mask4[:, 1, :, 0] = False  # head 1 may not look at key 0
    m(X, X, X, attn_mask=mask4)
    assert torch.all(m.attention_weights[:, 1, :, 0] == 0) and torch.all(m.attention_weights[:, 0, :, 0] > 0)
    torch.testing.assert_close(m(X, X, X, lens2, need_weights=False), out)


def test_transpositions_are_inverse_and_split_heads_by_columns():
    X = torch.arange(2 * 3 * 8.0).reshape(2, 3, 8)
    H = ab.transpose_qkv(X, 4)
    assert H.shape == (2, 4, 3, 2)
    torch.testing.assert_close(H[1, 2, 0], X[1, 0, 4:6])  # head 2 owns columns 4..5
    torch.testing.assert_close(ab.transpose_output(H), X)


def test_heads_are_independent():
    """Changing head 0's projection rows leaves head 1's attention weights unchanged."""
    torch.manual_seed(2)
    m = ab.MultiHeadAttention(8, 2, need_weights=True).eval()
    X = torch.randn(1, 4, 8)
    m(X, X, X)
    before = m.attention_weights.clone()
    with torch.no_grad():
        m.W_q.weight[:4] += 1.0
    m(X, X, X)
    torch.testing.assert_close(m.attention_weights[:, 1], before[:, 1])
    assert not torch.allclose(m.attention_weights[:, 0], before[:, 0])


def test_rotary_scores_see_only_offsets():
    """With rotary positions and no other position signal, shifting a sequence along a longer one keeps outputs."""
    torch.manual_seed(3)
    m = ab.RotaryAttention(8, 2).eval()
    Z = torch.randn(1, 4, 8)
    out_a = m(Z, Z, Z, causal=True)
    padded = torch.cat([torch.randn(1, 3, 8), Z], dim=1)  # the same tokens at positions 3..6
    m(padded, padded, padded, causal=True)
    # queries 3..6 see keys 0..6; restrict to keys 3..6 via the mask: same as the unshifted run
    mask = torch.zeros(7, 7, dtype=torch.bool)
    mask[3:, 3:] = torch.ones(4, 4, dtype=torch.bool).tril()
    mask[:3, :3] = torch.ones(3, 3, dtype=torch.bool).tril()
    out_b = m(padded, padded, padded, attn_mask=mask)[:, 3:]
    torch.testing.assert_close(out_b, out_a, atol=1e-5, rtol=1e-4)


def test_meta_device_forward():
    m = ab.RotaryAttention(16, 4, bias=True).to("meta")
    X = torch.randn(2, 5, 16, device="meta")
    for kwargs in ({}, {"causal": True}, {"need_weights": True}):
        assert m(X, X, X, **kwargs).shape == (2, 5, 16)
    out = m(X, X, X, torch.tensor([3, 5], device="meta"), need_weights=True)
    assert out.device.type == "meta" and m.attention_weights.shape == (2, 4, 5, 5)


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"head counts that work with num_hiddens=12: \[1, 2, 3, 4, 6, 12\]"):
        ab.MultiHeadAttention(12, 5)
    with pytest.raises(ValueError, match="even head size"):
        ab.RotaryAttention(12, 4)
    m = ab.MultiHeadAttention(8, 2)
    X = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match="queries have 4 features"):
        m(torch.randn(2, 3, 4), X, X)
    with pytest.raises(ValueError, match="valid_lens"):
        m(X, X, X, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"valid_lens must lie in \[0, 3\]"):
        m(X, X, X, torch.tensor([1, 4]))
    with pytest.raises(ValueError, match="attn_mask must be a boolean"):
        m(X, X, X, attn_mask=torch.zeros(3, 3))
    with pytest.raises(ValueError, match=r"attn_mask has shape \(4, 3\)"):
        m(X, X, X, attn_mask=torch.ones(4, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="shape"):
        m(X[0], X, X)
    with pytest.raises(ValueError, match="divide"):
        ab.transpose_qkv(X, 3)
    with pytest.raises(ValueError, match="transpose_output expects"):
        ab.transpose_output(X)


def test_fused_self_attention_projection_matches_separate_projections():
    """Self-attention (one tensor passed three times) stacks W_q, W_k, W_v into one product: same result."""
    torch.manual_seed(4)
    m = ab.MultiHeadAttention(16, 4, bias=True)
    X = torch.randn(2, 5, 16, requires_grad=True)
    fused = m(X, X, X, torch.tensor([5, 3]), need_weights=False)
    separate = m(X, X.clone(), X.clone(), torch.tensor([5, 3]), need_weights=False)
    torch.testing.assert_close(fused, separate)
    g_fused = torch.autograd.grad(fused.sum(), [X, m.W_k.weight])
    g_sep = torch.autograd.grad(separate.sum(), [X, m.W_k.weight])
    for a, b in zip(g_fused, g_sep):
        torch.testing.assert_close(a, b)


# --- shared key/value heads: multi-query and grouped-query attention (chapter 10) ----------------

def grouped_and_full(num_heads=4, num_kv_heads=2, seed=0, **kw):
    """A grouped-query layer, and a plain multi-head layer whose W_k and W_v repeat its key/value heads per group."""
    torch.manual_seed(seed)
    gqa = ab.GroupedQueryAttention(16, num_heads, num_kv_heads=num_kv_heads, bias=True, **kw).eval()
    mha = ab.MultiHeadAttention(16, num_heads, bias=True, **kw).eval()
    group, d = num_heads // num_kv_heads, 16 // num_heads
    with torch.no_grad():
        for name in ("W_q", "W_o"):
            getattr(mha, name).load_state_dict(getattr(gqa, name).state_dict())
        for name in ("W_k", "W_v"):
            ours, theirs = getattr(gqa, name), getattr(mha, name)
            theirs.weight.copy_(ours.weight.reshape(num_kv_heads, 1, d, 16).expand(-1, group, -1, -1).reshape(16, 16))
            theirs.bias.copy_(ours.bias.reshape(num_kv_heads, 1, d).expand(-1, group, -1).reshape(16))
    return gqa, mha


def test_num_kv_heads_equal_to_num_heads_is_plain_multi_head_attention():
    torch.manual_seed(0)
    default = ab.MultiHeadAttention(16, 4)
    torch.manual_seed(0)
    explicit = ab.GroupedQueryAttention(16, 4, num_kv_heads=4)
    X = torch.randn(2, 5, 16)
    torch.testing.assert_close(default(X, X, X, causal=True), explicit(X, X, X, causal=True), rtol=0, atol=0)
    assert explicit.W_k.out_features == 16


@pytest.mark.parametrize("num_kv_heads", [1, 2])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("masking", ["none", "lengths", "causal", "mask", "lengths+causal"])
def test_grouped_query_equals_multi_head_with_tied_key_value_heads(num_kv_heads, need_weights, masking):
    gqa, mha = grouped_and_full(num_kv_heads=num_kv_heads)
    q, kv = torch.randn(3, 6, 16, requires_grad=True), torch.randn(3, 6, 16)
    lens = torch.tensor([6, 2, 4]) if "lengths" in masking else None
    mask = torch.rand(3, 6, 6, generator=torch.Generator().manual_seed(1)) < 0.7 if masking == "mask" else None
    causal = "causal" in masking
    got = gqa(q, kv, kv, lens, attn_mask=mask, causal=causal, need_weights=need_weights)
    want = mha(q, kv, kv, lens, attn_mask=mask, causal=causal, need_weights=need_weights)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    if need_weights:
        assert gqa.attention_weights.shape == (3, 4, 6, 6)
        torch.testing.assert_close(gqa.attention_weights, mha.attention_weights, atol=1e-6, rtol=1e-5)
    grad_got, = torch.autograd.grad(got.sum(), q)
    grad_want, = torch.autograd.grad(want.sum(), q)
    torch.testing.assert_close(grad_got, grad_want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("variant", ["GroupedQueryAttention", "RotaryAttention", "ALiBiAttention"])
@pytest.mark.parametrize("num_kv_heads", [1, 2, 4])
def test_decoding_over_cached_keys_and_values_equals_the_full_pass(variant, num_kv_heads):
    torch.manual_seed(2)
    m = getattr(ab, variant)(16, 4, num_kv_heads=num_kv_heads).eval()
    X = torch.randn(2, 7, 16)
    full = m(X, X, X, causal=True)
    cache, steps = None, []
    for t in range(7):
        new = m.project_kv(X[:, t:t + 1], X[:, t:t + 1], offset=t)
        cache = new if cache is None else torch.cat((cache, new), dim=1)
        assert cache.shape == (2, t + 1, 2 * num_kv_heads * 4)  # only num_kv_heads heads are stored
        steps.append(m(X[:, t:t + 1], None, None, causal=True, kv=cache))
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-4)
    with ab.keep_attention_weights():
        m(X[:, -1:], None, None, causal=True, kv=cache)
    assert m.attention_weights.shape == (2, 4, 1, 7)


def test_decoder_cache_stores_only_the_key_value_heads():
    torch.manual_seed(0)
    dec = ab.TransformerDecoder(11, 16, 32, 4, 2, cross_attention=False, num_kv_heads=1).eval()
    X = torch.randint(0, 11, (2, 5))
    full, _ = dec(X, dec.init_state(None))
    state, steps = dec.init_state(None), []
    for t in range(5):
        logits, state = dec(X[:, t:t + 1], state)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-4)
    assert [tuple(c.shape) for c in state["cache"]] == [(2, 5, 2 * 1 * 4)] * 2


def test_grouped_query_on_the_meta_device_and_bad_head_counts():
    with torch.device("meta"):
        m = ab.GroupedQueryAttention(16, 4, num_kv_heads=2)
    X = torch.empty(2, 5, 16, device="meta")
    assert m(X, X, X, causal=True).device.type == "meta"
    with pytest.raises(ValueError, match=r"key/value head counts that work with num_heads=4: \[1, 2, 4\]"):
        ab.GroupedQueryAttention(16, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads must be an integer"):
        ab.GroupedQueryAttention(16, 4, num_kv_heads=2.0)
    with pytest.raises(TypeError, match="num_kv_heads"):
        ab.MultiHeadAttention(16, 4, num_kv_heads=2)  # chapter 5's layer has one key/value head per head
    m = ab.GroupedQueryAttention(16, 4, num_kv_heads=2)
    X = torch.randn(2, 3, 16)
    with pytest.raises(ValueError, match="not both"):
        m(X, X, X, kv=m.project_kv(X, X))
    with pytest.raises(ValueError, match=r"kv has shape \(2, 3, 32\); it needs \(2, keys, 16\)"):
        m(X, None, None, kv=torch.randn(2, 3, 32))
    with pytest.raises(ValueError, match="offset must be at least 0"):
        m.project_kv(X, X, offset=-1)


# --- the variants with their feature off are chapter 5's layer ----------------------------------

@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("masking", ["none", "lengths", "causal", "mask"])
def test_grouped_query_with_every_head_its_own_is_the_plain_layer(training, masking):
    """Same seed, same weights (the variant draws no extra numbers); same outputs, dropout included."""
    torch.manual_seed(5)
    plain = ab.MultiHeadAttention(16, 4, dropout=0.3, bias=True).train(training)
    torch.manual_seed(5)
    variant = ab.GroupedQueryAttention(16, 4, dropout=0.3, bias=True).train(training)
    for name, param in plain.named_parameters():
        torch.testing.assert_close(variant.get_parameter(name), param, rtol=0, atol=0)
    q, kv = torch.randn(3, 6, 16), torch.randn(3, 6, 16)
    lens = torch.tensor([6, 2, 4]) if masking == "lengths" else None
    mask = torch.rand(6, 6, generator=torch.Generator().manual_seed(1)) < 0.7 if masking == "mask" else None
    outs = []
    for m in (plain, variant):
        torch.manual_seed(9)  # the same dropout draws
        outs.append(m(q, kv, kv, lens, attn_mask=mask, causal=masking == "causal"))
    torch.testing.assert_close(outs[1], outs[0], atol=1e-6, rtol=1e-5)
    # and over its own cache: the keys and values projected first, then attended
    variant.eval(), plain.eval()
    want = plain(q, kv, kv, lens, attn_mask=mask, causal=masking == "causal")
    got = variant(q, None, None, lens, attn_mask=mask, causal=masking == "causal", kv=variant.project_kv(kv, kv))
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def test_position_variants_keep_the_plain_layers_weights_and_change_only_the_scores():
    """Rotary and ALiBi layers from the same seed hold the plain layer's weights; with every position at 0
    (one query, one key) there is nothing to rotate or penalise, so they give the plain layer's output."""
    layers = {}
    for cls in (ab.MultiHeadAttention, ab.RotaryAttention, ab.ALiBiAttention):
        torch.manual_seed(6)
        layers[cls.__name__] = cls(16, 4, bias=True).eval()
    q, kv = torch.randn(2, 1, 16), torch.randn(2, 1, 16)
    want = layers["MultiHeadAttention"](q, kv, kv)
    for name in ("RotaryAttention", "ALiBiAttention"):
        torch.testing.assert_close(layers[name](q, kv, kv), want, atol=1e-6, rtol=1e-5)
    X = torch.randn(2, 5, 16)  # at several positions they differ from the plain layer
    plain = layers["MultiHeadAttention"](X, X, X, causal=True)
    for name in ("RotaryAttention", "ALiBiAttention"):
        assert not torch.allclose(layers[name](X, X, X, causal=True), plain, atol=1e-4)


def test_chapter_5_writes_its_layer_on_the_page():
    """Chapter 5 writes MultiHeadAttention itself, one screen without checks or later chapters'
    options, and checks it once against the package's class: a visible cell copies the weights
    into ``ab.MultiHeadAttention`` and prints the largest difference, and a hidden cell asserts
    it (assert_close); the package's class leaves chapter 10's options to its subclasses."""
    import json
    from pathlib import Path

    notebook = Path(__file__).resolve().parents[1] / "notebooks" / "ch05_multihead_attention.ipynb"
    code_cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    cells = ["".join(c["source"]) for c in code_cells]
    hidden = ["".join(c["source"]) for c in code_cells
              if "remove-cell" in c.get("metadata", {}).get("tags", [])]
    (cell,) = [c for c in cells if "class MultiHeadAttention(" in c]
    taught = cell[cell.index("class MultiHeadAttention("):]
    assert len(taught.splitlines()) <= 40
    for word in ("check_", "raise", "rotary", "alibi", "kv_", "cache", "scaled_dot_product_attention", "need_weights"):
        assert word not in taught, word
    assert any("load_state_dict" in c and "ab.MultiHeadAttention(" in c and "largest difference" in c
               and c not in hidden for c in cells)
    assert any("assert_close(package(" in c for c in hidden)
    code = ab.show_source(ab.MultiHeadAttention).parts[0][1]
    for word in ("rotary", "alibi", "num_kv_heads", "project_kv", "kv="):
        assert word not in code, word
