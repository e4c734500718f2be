"""Tests of the attention core: masked softmax, masks, attend, dot-product and additive attention.

(The multi-head attention class is tested with chapter 5.)
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F

import attention_book as ab

SETTINGS = settings(max_examples=20, deadline=None)


pytestmark = pytest.mark.usefixtures("one_thread")


@st.composite
def problems(draw, two_d=None):
    """Shapes, a seed and valid lengths (1-D or 2-D, 0 allowed) for one attention problem."""
    b, n_q, n_k = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 6))
    d, d_v = draw(st.integers(1, 5)), draw(st.integers(1, 4))
    use_2d = draw(st.booleans()) if two_d is None else two_d
    shape = (b, n_q) if use_2d else (b,)
    lens = torch.tensor(draw(st.lists(st.integers(0, n_k), min_size=math.prod(shape), max_size=math.prod(shape))))
    return dict(b=b, n_q=n_q, n_k=n_k, d=d, d_v=d_v, lens=lens.reshape(shape), seed=draw(st.integers(0, 2**16)))


def tensors(p, dtype=torch.float32):
    g = torch.Generator().manual_seed(p["seed"])
    q = torch.randn(p["b"], p["n_q"], p["d"], generator=g, dtype=dtype)
    k = torch.randn(p["b"], p["n_k"], p["d"], generator=g, dtype=dtype)
    v = torch.randn(p["b"], p["n_k"], p["d_v"], generator=g, dtype=dtype)
    return q, k, v


def per_query_lens(p):
    lens = p["lens"]
    return lens[:, None].expand(p["b"], p["n_q"]) if lens.dim() == 1 else lens


def modules():
    """Every attention module of this file, in the path that keeps weights and in the fast one."""
    torch.manual_seed(0)
    return {
        "dot/weights": ab.DotProductAttention(need_weights=True),
        "dot/fast": ab.DotProductAttention(need_weights=False),
        "additive": ab.AdditiveAttention(num_hiddens=6),
    }


# --- masked softmax ------------------------------------------------------------------------


@SETTINGS
@given(problems())
def test_rows_sum_to_one_over_valid_keys_and_masked_keys_get_exactly_zero(p):
    X = torch.randn(p["b"], p["n_q"], p["n_k"], generator=torch.Generator().manual_seed(p["seed"])) * 5
    W = ab.masked_softmax(X, p["lens"])
    lens = per_query_lens(p)
    keep = torch.arange(p["n_k"])[None, None, :] < lens[:, :, None]
    assert torch.all(W[~keep] == 0)
    sums = W.sum(-1)
    torch.testing.assert_close(sums, (lens > 0).float())  # 1 over valid keys; an empty row sums to 0
    assert torch.isfinite(W).all()


@SETTINGS
@given(problems())
def test_masked_softmax_does_not_modify_its_input(p):
    X = torch.randn(p["b"], p["n_q"], p["n_k"])
    before, lens_before = X.clone(), p["lens"].clone()
    ab.masked_softmax(X, p["lens"])
    assert torch.equal(X, before) and torch.equal(p["lens"], lens_before)


def test_seed_examples_of_masked_softmax():
    W = ab.masked_softmax(torch.rand(2, 2, 4), torch.tensor([2, 3]))
    assert torch.all(W[0, :, 2:] == 0) and torch.all(W[1, :, 3:] == 0) and torch.all(W[1, :, :3] > 0)
    W = ab.masked_softmax(torch.rand(2, 2, 4), torch.tensor([[1, 3], [2, 4]]))
    assert torch.equal(W[0, 0], torch.tensor([1.0, 0, 0, 0]))
    assert torch.all(W[1, 1] > 0) and torch.all(W[0, 1, 3:] == 0)


def test_valid_length_zero_gives_zero_row_zero_gradient_and_no_nan():
    X = torch.randn(2, 3, 4, requires_grad=True)
    W = ab.masked_softmax(X, torch.tensor([0, 2]))
    assert torch.equal(W[0], torch.zeros(3, 4))  # not uniform, not NaN
    (W * torch.randn_like(W)).sum().backward()
    assert torch.isfinite(X.grad).all() and torch.all(X.grad[0] == 0) and torch.all(X.grad[1, :, 2:] == 0)


def test_no_valid_lens_is_plain_softmax_and_lists_and_whole_floats_are_accepted():
    X = torch.randn(2, 3, 4)
    torch.testing.assert_close(ab.masked_softmax(X), F.softmax(X, dim=-1))
    expected = ab.masked_softmax(X, torch.tensor([1, 3]))
    torch.testing.assert_close(ab.masked_softmax(X, [1, 3]), expected)
    torch.testing.assert_close(ab.masked_softmax(X, torch.tensor([1.0, 3.0])), expected)  # d2l passes floats


def test_boolean_mask_is_accepted_and_means_true_keeps():
    X = torch.randn(2, 3, 4)
    mask = torch.tensor([True, False, True, True])
    W = ab.masked_softmax(X, mask)
    assert torch.all(W[..., 1] == 0)
    torch.testing.assert_close(W[..., [0, 2, 3]], F.softmax(X[..., [0, 2, 3]], dim=-1))
    lens = torch.tensor([[1, 2, 3], [4, 0, 2]])
    torch.testing.assert_close(ab.masked_softmax(X, ab.key_mask(lens, 2, 3, 4)), ab.masked_softmax(X, lens))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_stays_finite(dtype):
    X = (torch.randn(3, 2, 5) * 1e3).to(dtype)  # large scores: a fixed -1e6/-1e9 fill would overflow
    W = ab.masked_softmax(X, torch.tensor([[0, 5], [2, 1], [3, 4]]))
    assert W.dtype == dtype and torch.isfinite(W).all()
    assert torch.all(W[0, 0] == 0) and torch.all(W[1, 0, 2:] == 0)
    torch.testing.assert_close(W.float().sum(-1), torch.tensor([[0.0, 1], [1, 1], [1, 1]]), atol=2e-2, rtol=0)
    q, k, v = (torch.randn(2, 3, 4).to(dtype) for _ in range(3))
    for module in modules().values():
        if isinstance(module, ab.AdditiveAttention):
            module = module.to(dtype)
        out = module.eval()(q, k, v, torch.tensor([0, 2]))
        assert out.dtype == dtype and torch.isfinite(out).all() and torch.all(out[0] == 0)


def test_scores_far_below_any_fixed_fill_value_are_still_ranked():
    X = torch.tensor([[[-1e7, -1e7 - 1.0, 0.0]]])
    W = ab.masked_softmax(X, torch.tensor([2]))
    torch.testing.assert_close(W[0, 0, :2], F.softmax(torch.tensor([0.0, -1.0]), 0))


# --- attention modules: properties -----------------------------------------------------------


@SETTINGS
@given(problems())
def test_changing_padded_keys_and_values_does_not_change_the_output(p):
    q, k, v = tensors(p)
    n_valid = int(p["lens"].max())  # keys past every query's length are padding
    k2, v2 = k.clone(), v.clone()
    k2[:, n_valid:] = 1e3 * torch.randn_like(k2[:, n_valid:])
    v2[:, n_valid:] = -1e3 * torch.randn_like(v2[:, n_valid:])
    for name, module in modules().items():
        module.eval()
        a, b = module(q, k, v, p["lens"]), module(q, k2, v2, p["lens"])
        torch.testing.assert_close(a, b, msg=name)
        assert torch.isfinite(b).all(), name


@SETTINGS
@given(problems())
def test_padding_never_leaks_into_each_query(p):
    """Per query: replacing the keys and values beyond its own valid length changes nothing."""
    q, k, v = tensors(p)
    lens = per_query_lens(p)
    for name, module in modules().items():
        module.eval()
        out = module(q, k, v, p["lens"])
        for b in range(p["b"]):
            for i in range(p["n_q"]):
                n = int(lens[b, i])
                k2, v2 = k.clone(), v.clone()
                k2[b, n:] += 10.0
                v2[b, n:] -= 10.0
                torch.testing.assert_close(module(q, k2, v2, p["lens"])[b, i], out[b, i], msg=name)


@SETTINGS
@given(problems())
def test_batching_does_not_change_results(p):
    q, k, v = tensors(p)
    for name, module in modules().items():
        module.eval()
        together = module(q, k, v, p["lens"])
        for b in range(p["b"]):
            alone = module(q[b:b + 1], k[b:b + 1], v[b:b + 1], p["lens"][b:b + 1])
            torch.testing.assert_close(alone, together[b:b + 1], msg=name)


@SETTINGS
@given(problems())
def test_valid_length_zero_gives_zero_output_on_every_path(p):
    q, k, v = tensors(p)
    lens = torch.zeros_like(p["lens"])
    for name, module in modules().items():
        for mode in (module.train, module.eval):
            mode()
            q_ = q.clone().requires_grad_()
            out = module(q_, k, v, lens)
            assert torch.equal(out, torch.zeros_like(out)), name
            out.sum().backward()
            assert torch.isfinite(q_.grad).all(), name


@SETTINGS
@given(problems())
def test_fast_path_equals_weights_path(p):
    q, k, v = tensors(p)
    attention = ab.DotProductAttention()
    fast = attention.train()(q, k, v, p["lens"])
    assert attention.attention_weights is None
    assert attention.eval()(q, k, v, p["lens"]) is not None and attention.attention_weights is None, (
        "eval mode takes the fused path too")
    slow = attention(q, k, v, p["lens"], need_weights=True)
    torch.testing.assert_close(fast, slow, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(attention.attention_weights @ v, slow)


@SETTINGS
@given(problems())
def test_dot_product_parity_with_torch_scaled_dot_product_attention(p):
    q, k, v = tensors(p)
    lens = per_query_lens(p)
    mask = torch.arange(p["n_k"])[None, None, :] < lens[:, :, None]
    has_key = lens > 0
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~has_key[..., None])
    reference = reference * has_key[..., None]  # torch gives NaN for an empty row; the book gives 0
    no_mask = F.scaled_dot_product_attention(q, k, v)
    for need in (False, True):
        attention = ab.DotProductAttention(need_weights=need)
        torch.testing.assert_close(attention(q, k, v, p["lens"]), reference, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(attention(q, k, v), no_mask, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(attention(q, k, v, mask), reference, atol=1e-6, rtol=1e-6)


def test_attention_weights_shape_and_rows_on_the_seed_toy_example():
    torch.manual_seed(0)
    queries, keys, values = torch.randn(2, 1, 2), torch.randn(2, 10, 2), torch.randn(2, 10, 4)
    valid_lens = torch.tensor([2, 6])
    attention = ab.DotProductAttention(dropout=0.5, need_weights=True).eval()
    assert attention(queries, keys, values, valid_lens).shape == (2, 1, 4)
    w = attention.attention_weights
    assert w.shape == (2, 1, 10) and torch.all(w[0, :, 2:] == 0) and torch.all(w[1, :, 6:] == 0)
    additive = ab.AdditiveAttention(num_hiddens=8, dropout=0.1).eval()
    assert additive(torch.randn(2, 1, 20), keys, values, valid_lens).shape == (2, 1, 4)
    assert additive.attention_weights.shape == (2, 1, 10) and torch.all(additive.attention_weights[1, :, 6:] == 0)


def test_when_weights_are_kept():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    attention = ab.DotProductAttention()
    attention.train()(q, k, v)
    assert attention.attention_weights is None  # training: fused kernel
    attention(q, k, v, need_weights=True)
    assert attention.attention_weights.shape == (2, 3, 5)
    with ab.keep_attention_weights():
        attention(q, k, v)
        assert attention.attention_weights is not None
    attention.eval()(q, k, v)
    assert attention.attention_weights is None  # eval mode: the fused kernel too
    with ab.keep_attention_weights(False):
        attention(q, k, v)
        assert attention.attention_weights is None


def test_dropout_acts_in_training_only():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    for module in (ab.DotProductAttention(dropout=0.5), ab.DotProductAttention(dropout=0.5, need_weights=True),
                   ab.AdditiveAttention(4, dropout=0.5)):
        module.eval()
        torch.testing.assert_close(module(q, k, v), module(q, k, v))
        module.train()
        torch.manual_seed(0)
        a = module(q, k, v)
        torch.manual_seed(1)
        assert not torch.allclose(a, module(q, k, v))


def test_no_keys_at_all_gives_zero_output():
    q, k, v = torch.randn(2, 3, 4, requires_grad=True), torch.randn(2, 0, 4), torch.randn(2, 0, 5)
    for module in modules().values():
        out = module(q, k, v)
        assert out.shape == (2, 3, 5) and torch.equal(out, torch.zeros_like(out))


def gradcheck_inputs():
    """float64 queries (2, 3, 4), keys (2, 5, 4), values (2, 5, 3) and 2-D lengths including 0."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, n, d, dtype=torch.float64, generator=g, requires_grad=True)
               for n, d in ((3, 4), (5, 4), (5, 3)))
    return q, k, v, torch.tensor([[0, 2, 5], [1, 3, 4]])


def test_gradcheck_float64():
    q, k, v, lens = gradcheck_inputs()
    X = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda X: ab.masked_softmax(X, lens), (X,))
    for need in (True, False):
        attention = ab.DotProductAttention(need_weights=need)
        assert torch.autograd.gradcheck(lambda q, k, v: attention(q, k, v, lens), (q, k, v))
    torch.manual_seed(0)
    additive = ab.AdditiveAttention(5, query_size=4, key_size=4).double()
    assert torch.autograd.gradcheck(lambda q, k, v: additive(q, k, v, lens), (q, k, v))


# --- attend and the masks ----------------------------------------------------------------------


def test_attend_causal_matches_torch_and_a_kv_cache_sees_the_past():
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 3)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    for need in (False, True):
        out, _ = ab.attend(q, k, v, causal=True, need_weights=need)
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
    # Decoding the last two positions with all five keys in the cache = rows 3 and 4 of the full result.
    out, w = ab.attend(q[..., 3:, :], k, v, causal=True, need_weights=True)
    torch.testing.assert_close(out, expected[..., 3:, :], atol=1e-6, rtol=1e-6)
    assert torch.all(w[..., 0, 4] == 0) and torch.all(w[..., 1, :] > 0)
    assert ab.causal_mask(2, 3).tolist() == [[True, True, False], [True, True, True]]


def test_key_mask_shapes_and_device():
    m = ab.key_mask(torch.tensor([1, 3]), 2, 2, 4)
    assert m.shape == (2, 2, 4) and m[0].sum() == 2 and m[1].sum() == 6
    assert ab.key_mask(None, 2, 2, 4) is None
    assert ab.key_mask(torch.tensor([1, 3]), 2, 2, 4, device="meta").device.type == "meta"


# --- meta device ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lens_device", ["cpu", "meta"])
def test_modules_run_on_the_meta_device(lens_device):
    q, k, v = (torch.empty(2, n, d, device="meta") for n, d in ((3, 4), (5, 4), (5, 6)))
    lens = torch.tensor([2, 5], device=lens_device)
    with torch.device("meta"):
        additive = ab.AdditiveAttention(7)
        additive_sized = ab.AdditiveAttention(7, query_size=4, key_size=4)
    for module in (ab.DotProductAttention(0.1), ab.DotProductAttention(need_weights=True), additive, additive_sized):
        for mode in (module.train, module.eval):
            mode()
            out = module(q, k, v, lens)
            assert out.shape == (2, 3, 6) and out.device.type == "meta"
            out.sum().backward() if out.requires_grad else None
    X = torch.empty(2, 3, 5, device="meta")
    assert ab.masked_softmax(X, lens).device.type == "meta"
    assert ab.masked_softmax(X, torch.tensor([[1, 2, 3], [0, 1, 5]])).device.type == "meta"


# --- bad input -----------------------------------------------------------------------------------


def _qkv(b=(2, 2, 2), n=(3, 5, 5), d=(4, 4, 6)):
    return tuple(torch.randn(b[i], n[i], d[i]) for i in range(3))


@pytest.mark.parametrize("call, match", [
    (lambda: ab.masked_softmax(torch.randn(2, 3, 4), torch.tensor([1, 2, 3])), r"valid_lens has shape \(3,\).*\(2,\) or \(2, 3\)"),
    (lambda: ab.masked_softmax(torch.randn(2, 3, 4), torch.ones(3, 2, dtype=torch.long)), r"valid_lens has shape \(3, 2\)"),
    (lambda: ab.masked_softmax(torch.randn(2, 3, 4), torch.ones(2, 3, 1, dtype=torch.long)), r"valid_lens has shape \(2, 3, 1\)"),
    (lambda: ab.masked_softmax(torch.randn(2, 3, 4), torch.tensor([-1, 2])), r"\[0, 4\].*from -1 to 2"),
    (lambda: ab.masked_softmax(torch.randn(2, 3, 4), torch.tensor([2, 5])), r"\[0, 4\].*from 2 to 5"),
    (lambda: ab.masked_softmax(torch.randn(2, 3, 4), torch.tensor([1.5, 2.0])), r"whole numbers.*1.5"),
    (lambda: ab.masked_softmax(torch.randn(2, 3, 4), torch.ones(4, 3, dtype=torch.bool)), r"mask.*shape \(4, 3\).*\(2, 3, 4\)"),
    (lambda: ab.masked_softmax(torch.randn(3, 4), None), r"X must have shape \(batch, queries, keys\), got shape \(3, 4\)"),
    (lambda: ab.masked_softmax(torch.ones(2, 3, 4, dtype=torch.long), None), r"floating-point"),
    (lambda: ab.DotProductAttention()(*_qkv(b=(2, 3, 2))), r"batch sizes differ.*keys \(3, 5, 4\)"),
    (lambda: ab.DotProductAttention()(*_qkv(d=(4, 3, 6))), r"same feature size.*queries \(2, 3, 4\).*keys \(2, 5, 3\)"),
    (lambda: ab.DotProductAttention()(*_qkv(n=(3, 5, 6))), r"keys \(2, 5, 4\) and values \(2, 6, 6\)"),
    (lambda: ab.DotProductAttention()(torch.randn(2, 4), *_qkv()[1:]), r"queries must have shape .*got shape \(2, 4\)"),
    (lambda: ab.DotProductAttention()(*_qkv(), torch.tensor([6, 1])), r"valid_lens must lie in \[0, 5\]"),
    (lambda: ab.DotProductAttention()(*_qkv(), torch.ones(2, 3, 4, dtype=torch.bool)), r"mask.*\(2, 3, 4\).*\(2, 3, 5\)"),
    (lambda: ab.DotProductAttention()(*[t.double() if i == 1 else t for i, t in enumerate(_qkv())]), r"one dtype"),
    (lambda: ab.AdditiveAttention(4, query_size=3, key_size=4)(*_qkv()), r"queries have shape \(2, 3, 4\).*needs 3 features"),
    (lambda: ab.AdditiveAttention(4)(*_qkv(b=(1, 2, 2))), r"batch sizes differ"),
    (lambda: ab.AdditiveAttention(0), r"num_hiddens must be at least 1, got 0"),
    (lambda: ab.DotProductAttention(dropout=1.0), r"dropout must lie in \[0, 1\), got 1.0"),
    (lambda: ab.attend(*_qkv(), mask=torch.ones(2, 3, 5)), r"mask must be a boolean tensor.*float32"),
    (lambda: ab.attend(*_qkv(), mask=torch.ones(2, 4, 5, dtype=torch.bool)), r"mask has shape \(2, 4, 5\).*\(2, 3, 5\)"),
])
def test_bad_input_names_argument_and_shapes(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_additive_attention_checks_sizes_after_lazy_initialisation():
    additive = ab.AdditiveAttention(4)
    additive(*_qkv())
    with pytest.raises(ValueError, match=r"needs 4 features"):
        additive(*_qkv(d=(5, 4, 6)))


def test_nan_at_padded_keys_never_reaches_the_output():
    """Padding may hold anything (NaN, inf): weights of 0 must not turn it into NaN outputs."""
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    lens = torch.tensor([2, 5])
    v_bad, k_bad = v.clone(), k.clone()
    v_bad[0, 2:] = float("nan")
    k_bad[0, 2:] = float("inf")
    mha = ab.MultiHeadAttention(8, 2)
    X, X_bad = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    X_bad[0, 2:] = float("nan")
    X_bad[1], X_bad[0, :2] = X[1], X[0, :2]
    for module, args, bad in ((ab.DotProductAttention(), (q, k, v, lens), (q, k_bad, v_bad, lens)),
                              (mha, (X[:, :3], X, X, lens), (X[:, :3], X_bad, X_bad, lens))):
        for record in (False, True):
            with ab.keep_attention_weights(record):
                module.eval()
                clean = module(*args)
                out = module(*bad)
            assert torch.isfinite(out).all(), (type(module).__name__, record)
            torch.testing.assert_close(out, clean)


# --- edge cases both paths agree on (issue 28): NaN in, NaN out; a row of -inf scores is empty ----

def _both_paths(q, k, v, mask=None, **kwargs):
    fast, none = ab.attend(q, k, v, mask, **kwargs)
    slow, weights = ab.attend(q, k, v, mask, need_weights=True, **kwargs)
    assert none is None and weights is not None
    return fast, slow


@pytest.mark.parametrize("n", [5, 40])  # PyTorch's CPU kernel hid a NaN query as zeros below 16 positions
@pytest.mark.parametrize("masking", ["none", "causal", "lengths"])
def test_nan_in_a_query_gives_nan_in_its_row_on_both_paths(n, masking):
    g = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for _ in range(3))
    q[0, 1, 2, 5] = float("nan")
    mask = torch.arange(n)[None, None, None, :] < torch.tensor([n, 3]).reshape(2, 1, 1, 1) \
        if masking == "lengths" else None
    fast, slow = _both_paths(q, k, v, mask, causal=masking == "causal")
    expected = torch.zeros(2, 3, n, dtype=torch.bool)
    expected[0, 1, 2] = True
    for out in (fast, slow):
        assert torch.equal(out.isnan().any(-1), expected)
    torch.testing.assert_close(fast, slow, equal_nan=True)


def test_nan_in_a_key_reaches_exactly_the_queries_that_see_it():
    q, k, v = (torch.randn(1, 1, 6, 4, generator=torch.Generator().manual_seed(s)) for s in range(3))
    k[0, 0, 3, 0] = float("nan")  # causal: queries 3, 4 and 5 see key 3
    for kwargs in ({"causal": True}, {}):
        fast, slow = _both_paths(q, k, v, **kwargs)
        rows = [3, 4, 5] if kwargs else list(range(6))
        for out in (fast, slow):
            assert out[0, 0].isnan().any(-1).nonzero().flatten().tolist() == rows
    k[0, 0, :, 1] = float("nan")  # every score NaN: the case the kernel returned as zeros
    for out in _both_paths(q, k, v):
        assert out.isnan().all()


def test_modules_agree_on_a_nan_query_with_and_without_kept_weights():
    torch.manual_seed(0)
    queries, keys = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    queries[1, 3, 0] = float("nan")
    for module in (ab.DotProductAttention(), ab.MultiHeadAttention(8, 2).eval()):
        for causal in (False, True):
            kwargs = {"causal": causal} if isinstance(module, ab.MultiHeadAttention) else {}
            if causal and not kwargs:
                continue
            fast = module(queries, keys, keys, **kwargs)
            with ab.keep_attention_weights():
                slow = module(queries, keys, keys, **kwargs)
            assert module.attention_weights is not None
            assert fast.isnan().any(-1).nonzero().tolist() == [[1, 3]]
            torch.testing.assert_close(fast, slow, equal_nan=True)


def test_a_row_of_minus_inf_scores_is_empty_zeros_everywhere():
    X = torch.randn(2, 3, 4)
    X[0, 1] = float("-inf")  # the whole row
    X[1, 2, :2] = float("-inf")  # part of a row: those keys get weight 0
    out = ab.masked_softmax(X)
    assert torch.equal(out[0, 1], torch.zeros(4))
    keep = torch.ones(2, 3, 4, dtype=torch.bool)
    keep[0, 1] = False
    keep[1, 2, :2] = False
    torch.testing.assert_close(out, ab.masked_softmax(X, keep))
    torch.testing.assert_close(out[1, 2], torch.softmax(X[1, 2], -1))
    torch.testing.assert_close(ab.masked_softmax(X, torch.tensor([4, 3])),
                               ab.masked_softmax(X, keep & (torch.arange(4) < torch.tensor([4, 3])[:, None, None])))
    # A bias of -inf rules keys out in attend: the same zeros on both paths, and finite gradients.
    q, k, v = (torch.randn(2, 3, 4, requires_grad=True) for _ in range(3))
    bias = torch.zeros(3, 3)
    bias[1] = float("-inf")
    bias[2, 0] = float("-inf")
    for lengths in (None, torch.tensor([3, 2])):
        mask = None if lengths is None else (torch.arange(3) < lengths[:, None, None])
        fast, slow = _both_paths(q, k, v, mask, bias=bias)
        torch.testing.assert_close(fast, slow)
        assert torch.equal(fast[:, 1], torch.zeros(2, 4))
        (fast.sum() + slow.sum()).backward()
        assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
        q.grad = k.grad = v.grad = None


def test_input_in_another_dtype_than_the_layer_names_both():
    layer = ab.MultiHeadAttention(8, 2)
    X = torch.randn(2, 3, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"queries is in torch\.bfloat16 but MultiHeadAttention's parameters are "
                                         r"in torch\.float32"):
        layer(X, X, X)
    additive = ab.AdditiveAttention(4, query_size=8, key_size=8)
    with pytest.raises(ValueError, match=r"queries is in torch\.float64 but AdditiveAttention's .* torch\.float32"):
        additive(X.double(), X.double(), X.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # what autocast is for: no error
        assert layer(X, X, X).shape == (2, 3, 8)
    assert layer.to(torch.bfloat16)(X, X, X).dtype == torch.bfloat16


def test_lengths_on_the_meta_device():
    X = torch.randn(2, 3, 4)
    lens = torch.tensor([1, 3], device="meta")
    with pytest.raises(ValueError, match="valid_lens is on the meta device .* scores are on cpu"):
        ab.masked_softmax(X, lens)
    with pytest.raises(ValueError, match="valid_lens is on the meta device"):
        ab.masked_softmax(X, torch.ones(2, 3, 4, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match="valid_lens is on the meta device"):
        ab.MultiHeadAttention(4, 2)(X, X, X, lens)
    # All on meta: shapes in, shapes out.
    out = ab.masked_softmax(X.to("meta"), lens)
    assert out.device.type == "meta" and out.shape == (2, 3, 4)
    layer = ab.MultiHeadAttention(4, 2).to("meta")
    Xm = X.to("meta")
    assert layer(Xm, Xm, Xm, lens).device.type == "meta"
    with ab.keep_attention_weights():
        assert layer(Xm, Xm, Xm, lens).shape == (2, 3, 4)


def test_grouped_query_causal_nan_row_agrees_on_both_paths():
    """A NaN query under causal self-attention gives NaN in its own row on the fused path too."""
    layer = ab.GroupedQueryAttention(num_hiddens=16, num_heads=4, num_kv_heads=2).eval()
    x = torch.randn(1, 5, 16)
    x[0, 2, 0] = float("nan")
    fast = layer(x, x, x, causal=True)
    with ab.keep_attention_weights():
        slow = layer(x, x, x, causal=True)
    assert torch.isnan(fast[0, 2]).all() and torch.isnan(slow[0, 2]).all()
    torch.testing.assert_close(fast[0, :2], slow[0, :2])
