"""The package gives d2l's numbers: same weights in, same outputs out (eval mode, dropout 0).

d2l (``d2l.torch``, imported through ``tests/d2l_shim.py``) is the reference the book's readers
come from. Each test copies the weights of d2l's module into the package's and compares. Where
the package differs on purpose, a test named ``test_differs_*`` shows the difference and asserts
it; ``book/from_d2l.md`` lists them and names these tests.

d2l absent: every parity test skips and says how to install it; under CI (``make test``, which
installs it) a missing d2l fails.
"""

from __future__ import annotations

import inspect
import math
import os
import re
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attention_book as ab

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import d2l_shim  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
d2l = d2l_shim.load_d2l()
needs_d2l = pytest.mark.skipif(d2l is None, reason=d2l_shim.why_missing())
SETTINGS = settings(max_examples=25, deadline=None)

pytestmark = pytest.mark.usefixtures("one_thread")


# --- d2l is there when it must be ------------------------------------------------------------------

def test_d2l_is_installed_under_ci():
    if d2l is None:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but the parity tests would skip: {d2l_shim.why_missing()}")
        pytest.skip(d2l_shim.why_missing())
    assert d2l.__name__ == "d2l.torch"


def test_makefile_installs_the_release_the_shim_names():
    pins = re.findall(r'"d2l==([0-9.]+)"', (ROOT / "Makefile").read_text())
    assert pins == [d2l_shim.D2L_VERSION], pins


@needs_d2l
def test_the_torchvision_stand_in_is_gone_after_the_import():
    assert "torchvision" not in sys.modules or not getattr(sys.modules["torchvision"], "is_stand_in", False)
    assert d2l.torchvision.is_stand_in  # what d2l holds
    with pytest.raises(AttributeError, match="stand-in"):
        d2l.torchvision.datasets


# --- helpers ---------------------------------------------------------------------------------------

def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@st.composite
def problems(draw, zero=False):
    """Shapes, a seed and valid lengths: None, (batch,) or (batch, queries); lengths from 1 (0 if ``zero``)."""
    b, n_q, n_k = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["none", "1d", "2d"]))
    lens = None
    if kind != "none":
        shape = (b,) if kind == "1d" else (b, n_q)
        values = draw(st.lists(st.integers(0 if zero else 1, n_k), min_size=math.prod(shape), max_size=math.prod(shape)))
        lens = torch.tensor(values).reshape(shape)
    return dict(b=b, n_q=n_q, n_k=n_k, lens=lens, seed=draw(st.integers(0, 2**16)))


def qkv(p, d_q, d_k, d_v, dtype=torch.float32):
    g = gen(p["seed"])
    return (torch.randn(p["b"], p["n_q"], d_q, generator=g, dtype=dtype),
            torch.randn(p["b"], p["n_k"], d_k, generator=g, dtype=dtype),
            torch.randn(p["b"], p["n_k"], d_v, generator=g, dtype=dtype))


def per_head(weights: torch.Tensor, num_heads: int) -> torch.Tensor:
    """d2l's (batch * heads, queries, keys) weights as (batch, heads, queries, keys)."""
    return weights.reshape(-1, num_heads, *weights.shape[1:])


# --- masked softmax --------------------------------------------------------------------------------

@needs_d2l
@SETTINGS
@given(problems())
def test_masked_softmax_matches_d2l(p):
    X = torch.randn(p["b"], p["n_q"], p["n_k"], generator=gen(p["seed"])) * 5
    torch.testing.assert_close(ab.masked_softmax(X, p["lens"]), d2l.masked_softmax(X.clone(), p["lens"]))


@needs_d2l
def test_differs_masked_softmax_valid_length_zero():
    X = torch.randn(2, 3, 4, generator=gen(0))
    lens = torch.tensor([0, 2])
    theirs, ours = d2l.masked_softmax(X.clone(), lens), ab.masked_softmax(X, lens)
    torch.testing.assert_close(theirs[0], torch.full((3, 4), 0.25))  # uniform over padding
    assert torch.all(ours[0] == 0)  # nothing to attend to: no weight at all
    torch.testing.assert_close(ours[1], theirs[1])  # rows with keys agree


@needs_d2l
def test_differs_masked_softmax_leaves_its_input_alone():
    X = torch.randn(2, 3, 4, generator=gen(1))
    before, lens = X.clone(), torch.tensor([1, 3])
    ab.masked_softmax(X, lens)
    assert torch.equal(X, before)
    d2l.masked_softmax(X, lens)
    assert (X == -1e6).any()  # d2l wrote its fill value into the caller's scores


@needs_d2l
def test_differs_masked_softmax_scores_below_the_fill_value():
    X = torch.full((1, 1, 3), -1e7)  # legitimate scores, all far below d2l's -1e6 fill
    lens = torch.tensor([1])
    torch.testing.assert_close(ab.masked_softmax(X, lens), torch.tensor([[[1.0, 0.0, 0.0]]]))
    theirs = d2l.masked_softmax(X.clone(), lens)
    assert theirs[0, 0, 0] < 1e-6  # the padded keys took all the weight


@needs_d2l
def test_differs_masked_softmax_half_precision_empty_row():
    X = torch.randn(2, 2, 3, generator=gen(2)).half()
    lens = torch.tensor([0, 2])
    theirs, ours = d2l.masked_softmax(X.clone(), lens), ab.masked_softmax(X, lens)
    assert torch.isnan(theirs[0]).all()  # -1e6 is -inf in float16: softmax of all -inf
    assert torch.all(ours[0] == 0) and torch.isfinite(ours).all()
    torch.testing.assert_close(ours[1], theirs[1])


# --- dot-product and additive attention ------------------------------------------------------------

@needs_d2l
@SETTINGS
@given(problems(), st.integers(1, 5), st.integers(1, 4))
def test_dot_product_attention_matches_d2l_on_both_paths(p, d, d_v):
    q, k, v = qkv(p, d, d, d_v)
    theirs = d2l.DotProductAttention(dropout=0.0).eval()
    expected = theirs(q, k, v, p["lens"])
    fast = ab.DotProductAttention().eval()
    torch.testing.assert_close(fast(q, k, v, p["lens"]), expected)
    explicit = ab.DotProductAttention(need_weights=True).eval()
    torch.testing.assert_close(explicit(q, k, v, p["lens"]), expected)
    torch.testing.assert_close(explicit.attention_weights, theirs.attention_weights)


@needs_d2l
def test_differs_weights_only_on_demand():
    p = dict(b=2, n_q=3, n_k=4, seed=3)
    q, k, v = qkv(p, 4, 4, 2)
    theirs, ours = d2l.DotProductAttention(0.0).eval(), ab.DotProductAttention().eval()
    torch.testing.assert_close(ours(q, k, v), theirs(q, k, v))
    assert theirs.attention_weights is not None and ours.attention_weights is None  # the fused kernel ran
    with ab.keep_attention_weights():
        ours(q, k, v)
    torch.testing.assert_close(ours.attention_weights, theirs.attention_weights)


@needs_d2l
@SETTINGS
@given(problems(), st.integers(1, 5), st.integers(1, 5), st.integers(1, 6))
def test_additive_attention_matches_d2l(p, d_q, d_k, num_hiddens):
    torch.manual_seed(p["seed"])
    q, k, v = qkv(p, d_q, d_k, 3)
    theirs = d2l_shim.materialise(d2l.AdditiveAttention(num_hiddens, 0.0).eval(), q, k, v, p["lens"])
    ours = ab.AdditiveAttention(num_hiddens, query_size=d_q, key_size=d_k).eval()
    d2l_shim.copy_additive(theirs, ours)
    torch.testing.assert_close(ours(q, k, v, p["lens"]), theirs(q, k, v, p["lens"]))
    torch.testing.assert_close(ours.attention_weights, theirs.attention_weights)


# --- multi-head attention --------------------------------------------------------------------------

def multihead_pair(num_hiddens, num_heads, bias, q, k, v, lens, query_size=None, key_size=None):
    theirs = d2l.MultiHeadAttention(num_hiddens, num_heads, 0.0, bias=bias).eval()
    d2l_shim.materialise(theirs, q, k, v, lens)
    ours = ab.MultiHeadAttention(num_hiddens, num_heads, bias=bias, query_size=query_size or q.shape[-1],
                                 key_size=key_size or k.shape[-1], value_size=v.shape[-1]).eval()
    d2l_shim.copy_multihead(theirs, ours)
    return theirs, ours


@needs_d2l
@SETTINGS
@given(problems(), st.sampled_from([1, 2, 4]), st.integers(1, 3), st.booleans(), st.booleans())
def test_multihead_attention_matches_d2l(p, num_heads, head_size, bias, want_weights):
    torch.manual_seed(p["seed"])
    num_hiddens = num_heads * head_size
    q, k, v = qkv(p, 3, 5, 2)
    theirs, ours = multihead_pair(num_hiddens, num_heads, bias, q, k, v, p["lens"])
    expected = theirs(q, k, v, p["lens"])
    torch.testing.assert_close(ours(q, k, v, p["lens"], need_weights=want_weights), expected)
    if want_weights:
        torch.testing.assert_close(ours.attention_weights, per_head(theirs.attention.attention_weights, num_heads))
    else:
        assert ours.attention_weights is None


@needs_d2l
def test_multihead_self_attention_matches_d2l():
    """One tensor as queries, keys and values: the package then projects with one stacked product."""
    X = torch.randn(2, 5, 8, generator=gen(4))
    lens = torch.tensor([5, 2])
    theirs, ours = multihead_pair(8, 2, True, X, X, X, lens)
    torch.testing.assert_close(ours(X, X, X, lens), theirs(X, X, X, lens))


@needs_d2l
def test_differs_multihead_valid_length_zero():
    q, k, v = qkv(dict(b=2, n_q=2, n_k=3, seed=5), 4, 4, 4)
    lens = torch.tensor([0, 3])
    theirs, ours = multihead_pair(4, 2, False, q, k, v, lens)
    got, d2l_out = ours(q, k, v, lens), theirs(q, k, v, lens)
    assert torch.all(got[0] == 0)  # no key to look at: the zero vector (W_o has no bias here)
    with torch.no_grad():  # d2l: uniform weights, so every query gets the mean of the projected padding
        mean_of_padding = theirs.W_o(theirs.W_v(v[0]).mean(0))
    torch.testing.assert_close(d2l_out[0], mean_of_padding.expand(2, 4))
    torch.testing.assert_close(got[1], d2l_out[1])


@needs_d2l
def test_differs_layers_exist_before_the_first_call():
    theirs, ours = d2l.MultiHeadAttention(8, 2, 0.0), ab.MultiHeadAttention(8, 2)
    assert any(isinstance(w, torch.nn.parameter.UninitializedParameter) for w in theirs.parameters())
    assert ab.count_parameters(ours) == 4 * 8 * 8  # ready for an optimizer, a device move or a count


@needs_d2l
def test_same_head_split_as_d2l():
    X = torch.randn(2, 3, 8, generator=gen(6))
    theirs = d2l.MultiHeadAttention(8, 4, 0.0)
    flat = theirs.transpose_qkv(X)  # (batch * heads, length, 2)
    torch.testing.assert_close(ab.transpose_qkv(X, 4).reshape(flat.shape), flat)
    torch.testing.assert_close(ab.transpose_output(ab.transpose_qkv(X, 4)), theirs.transpose_output(flat))


# --- positional encoding ---------------------------------------------------------------------------

@needs_d2l
@pytest.mark.parametrize("num_hiddens", [2, 8, 32, 256])
def test_positional_encoding_matches_d2l(num_hiddens):
    theirs, ours = d2l.PositionalEncoding(num_hiddens, 0.0).eval(), ab.PositionalEncoding(num_hiddens).eval()
    X = torch.randn(2, 60, num_hiddens, generator=gen(num_hiddens))
    torch.testing.assert_close(ours(X), theirs(X))
    # the whole table of 1000 positions: d2l computes the angles in float32, so it drifts at large
    # positions; the package computes them in float64 and rounds once
    exact = ab.sinusoidal_table(1000, num_hiddens, dtype=torch.float64)
    torch.testing.assert_close(ours.P[0], theirs.P[0], rtol=0, atol=1e-4)
    assert (ours.P[0].double() - exact).abs().max() <= (theirs.P[0].double() - exact).abs().max()
    assert (ours.P[0].double() - exact).abs().max() < 1e-7


@needs_d2l
def test_differs_positional_table_is_a_buffer_and_takes_an_offset():
    theirs, ours = d2l.PositionalEncoding(8, 0.0).eval(), ab.PositionalEncoding(8).eval()
    assert "P" in dict(ours.named_buffers()) and "P" not in dict(theirs.named_buffers())  # .to(device) moves ours
    X = torch.randn(1, 6, 8, generator=gen(7))
    torch.testing.assert_close(ours(X[:, 4:], offset=4), theirs(X)[:, 4:])  # positions 4 and 5
    ab.PositionalEncoding(7)  # an odd width: the last column is a sine
    with pytest.raises(RuntimeError):
        d2l.PositionalEncoding(7, 0.0)


# --- Transformer blocks ----------------------------------------------------------------------------

@needs_d2l
@SETTINGS
@given(st.integers(1, 3), st.integers(1, 6), st.sampled_from([1, 2, 4]), st.booleans(),
       st.sampled_from(["none", "1d", "2d"]), st.integers(0, 2**16))
def test_encoder_block_matches_d2l(b, n, num_heads, use_bias, kind, seed):
    torch.manual_seed(seed)
    num_hiddens = 4 * num_heads
    X = torch.randn(b, n, num_hiddens, generator=gen(seed))
    lens = {"none": None, "1d": torch.randint(1, n + 1, (b,), generator=gen(seed)),
            "2d": torch.randint(1, n + 1, (b, n), generator=gen(seed))}[kind]
    theirs = d2l_shim.materialise(d2l.TransformerEncoderBlock(num_hiddens, 12, num_heads, 0.0, use_bias).eval(),
                                  X, lens)
    ours = ab.TransformerEncoderBlock(num_hiddens, 12, num_heads, 0.0, use_bias).eval()
    d2l_shim.copy_encoder_block(theirs, ours)
    torch.testing.assert_close(ours(X, lens), theirs(X, lens))


@needs_d2l
def test_encoder_matches_d2l_and_records_the_same_maps():
    torch.manual_seed(8)
    tokens, lens = torch.randint(0, 20, (3, 7), generator=gen(8)), torch.tensor([7, 4, 1])
    theirs = d2l_shim.materialise(d2l.TransformerEncoder(20, 16, 32, 4, 2, 0.0).eval(), tokens, lens)
    ours = ab.TransformerEncoder(20, 16, 32, 4, 2, 0.0).eval()
    d2l_shim.copy_encoder(theirs, ours)
    expected = theirs(tokens, lens)
    torch.testing.assert_close(ours(tokens, lens), expected)
    assert ours.attention_weights == [None, None]  # fused kernel: no maps unless asked
    with ab.record_attention(ours) as maps:
        torch.testing.assert_close(ours(tokens, lens), expected)
    for got, want in zip(maps.tensors("self"), theirs.attention_weights):
        torch.testing.assert_close(got, per_head(want, 4))


def decoder_pair(num_hiddens=8, ffn=16, num_heads=2, seed=9):
    torch.manual_seed(seed)
    X, enc = torch.randn(2, 5, num_hiddens, generator=gen(seed)), torch.randn(2, 4, num_hiddens, generator=gen(seed + 1))
    enc_lens = torch.tensor([4, 2])
    theirs = d2l_shim.D2LDecoderBlock(d2l, num_hiddens, ffn, num_heads, 0.0, 0).eval()
    d2l_shim.materialise(theirs, X, [enc, enc_lens, [None]])
    ours = ab.TransformerDecoderBlock(num_hiddens, ffn, num_heads, 0.0, 0).eval()
    d2l_shim.copy_decoder_block(theirs, ours)
    return theirs, ours, X, enc, enc_lens


@needs_d2l
def test_decoder_block_matches_d2l_teacher_forced():
    theirs, ours, X, enc, enc_lens = decoder_pair()
    theirs.train()  # d2l masks the future only in training mode (dropout is 0: still deterministic)
    expected, _ = theirs(X, [enc, enc_lens, [None]])
    torch.testing.assert_close(ours(X, enc, None, enc_lens), expected)
    torch.testing.assert_close(ours.train()(X, enc, None, enc_lens), expected)


@needs_d2l
def test_decoder_block_matches_d2l_one_token_at_a_time():
    theirs, ours, X, enc, enc_lens = decoder_pair()
    state, cache = [enc, enc_lens, [None]], [None]
    for t in range(X.shape[1]):
        step = X[:, t:t + 1]
        expected, state = theirs(step, state)
        torch.testing.assert_close(ours(step, enc, None, enc_lens, cache=cache), expected)
    assert cache[0].shape[1] == state[2][0].shape[1] == X.shape[1]  # both caches cover every position so far


@needs_d2l
def test_differs_decoder_block_is_causal_in_eval_mode_too():
    theirs, ours, X, enc, enc_lens = decoder_pair()
    changed = X.clone()
    changed[:, -1] += 1.0  # only the last position differs
    first = lambda block, Y: block(Y, [enc, enc_lens, [None]])[0][:, 0]  # noqa: E731
    assert not torch.allclose(first(theirs, X), first(theirs, changed))  # d2l, whole sequence in eval: sees ahead
    torch.testing.assert_close(ours(X, enc, None, enc_lens)[:, 0], ours(changed, enc, None, enc_lens)[:, 0])


# --- sequence to sequence --------------------------------------------------------------------------

@needs_d2l
def test_differs_seq2seq_encoder_is_batch_first():
    torch.manual_seed(10)
    tokens = torch.randint(0, 12, (3, 6), generator=gen(10))
    theirs, ours = d2l.Seq2SeqEncoder(12, 5, 7, 2).eval(), ab.Seq2SeqEncoder(12, 5, 7, 2).eval()
    with torch.no_grad():
        ours.embedding.weight.copy_(theirs.embedding.weight)
        for name, param in ours.rnn.named_parameters():
            param.copy_(getattr(theirs.rnn.rnn, name))
    outputs, state = theirs(tokens)  # time first: (steps, batch, hiddens), (layers, batch, hiddens)
    got_outputs, got_state = ours(tokens)  # batch first: (batch, steps, hiddens), (batch, layers, hiddens)
    torch.testing.assert_close(got_outputs, outputs.transpose(0, 1))
    torch.testing.assert_close(got_state, state.transpose(0, 1))


# --- BLEU ------------------------------------------------------------------------------------------

sentences = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=8).map(" ".join)


@needs_d2l
@settings(max_examples=200, deadline=None)
@given(sentences, sentences, st.integers(1, 4))
def test_bleu_matches_d2l(pred, label, k):
    assert math.isclose(ab.bleu(pred, label, k), d2l.bleu(pred, label, k), rel_tol=1e-12, abs_tol=1e-15)


@needs_d2l
def test_differs_bleu_splits_on_any_whitespace_and_needs_a_label():
    assert ab.bleu("il  fait beau", "il fait beau", 2) == 1.0  # a doubled space is not a token
    assert d2l.bleu("il  fait beau", "il fait beau", 2) < 1.0  # d2l counts an empty token there
    with pytest.raises(ValueError, match="label"):
        ab.bleu("il fait beau", "", 2)
    assert d2l.bleu("il fait beau", "", 2) == 0.0


@needs_d2l
def test_same_call_signatures_as_d2l():
    for ours_name, name in (("bleu", "bleu"), ("heatmaps_figure", "show_heatmaps"), ("masked_softmax", "masked_softmax")):
        ours, theirs = inspect.signature(getattr(ab, ours_name)), inspect.signature(getattr(d2l, name))
        assert list(theirs.parameters)[:3] == list(ours.parameters)[:3], name


# --- attention pooling (chapter 2): d2l's chapter code, since d2l.torch does not ship it ------------

def d2l_chapter_kernels():
    """The four kernels as d2l's attention-pooling section writes them, for a key at 0."""
    return {"gaussian": lambda x: torch.exp(-x ** 2 / 2), "boxcar": lambda x: (x.abs() < 1).float(),
            "constant": lambda x: torch.ones_like(x), "epanechnikov": lambda x: (1 - x.abs()).clamp_min(0)}


def test_gaussian_and_constant_kernels_match_d2l():
    x = torch.linspace(-3, 3, 121)
    theirs = d2l_chapter_kernels()
    torch.testing.assert_close(ab.gaussian_kernel(x), theirs["gaussian"](x))
    torch.testing.assert_close(ab.constant_kernel(x), theirs["constant"](x))
    off_edge = x.abs() != 1
    torch.testing.assert_close(ab.boxcar_kernel(x)[off_edge], theirs["boxcar"](x)[off_edge])


def test_differs_epanechnikov_is_the_parabola_not_the_triangle():
    x = torch.arange(-40, 41) / 20  # -2, -1.95, ..., 2 with 0 and ±1 exactly on the grid
    ours, theirs = ab.epanechnikov_kernel(x), d2l_chapter_kernels()["epanechnikov"](x)
    torch.testing.assert_close(ours, (1 - x ** 2).clamp_min(0))  # Epanechnikov's kernel, up to its constant 3/4
    inside = (x.abs() > 0) & (x.abs() < 1)
    assert torch.all(ours[inside] > theirs[inside])  # d2l's max(0, 1 - |x|) is the triangular kernel
    assert torch.all(ours[~inside] == theirs[~inside])  # same at 0 and from |x| = 1 on
    assert float(ab.epanechnikov_kernel(torch.tensor(0.5))) == 0.75 and float(theirs[x == 0.5]) == 0.5


def test_differs_boxcar_includes_its_edge():
    edge = torch.tensor([-1.0, 1.0])
    assert torch.all(ab.boxcar_kernel(edge) == 1) and torch.all(d2l_chapter_kernels()["boxcar"](edge) == 0)


def d2l_chapter_nadaraya_watson(x_train, y_train, x_val, kernel):
    """d2l's estimator: kernel values normalised over the keys (one column per query)."""
    k = kernel(x_train.reshape(-1, 1) - x_val.reshape(1, -1))
    weights = k / k.sum(0)
    return y_train @ weights, weights


def test_nadaraya_watson_matches_d2l():
    data = ab.make_kernel_data(seed=11)
    y_hat, weights = ab.nadaraya_watson(data.x_train, data.y_train, data.x_val, "gaussian", 1.0)
    theirs, their_weights = d2l_chapter_nadaraya_watson(data.x_train, data.y_train, data.x_val,
                                                        d2l_chapter_kernels()["gaussian"])
    torch.testing.assert_close(y_hat, theirs)
    torch.testing.assert_close(weights, their_weights.T)


def test_differs_nadaraya_watson_query_out_of_reach():
    x_train, y_train, x_val = torch.tensor([0.0, 0.5]), torch.tensor([1.0, 2.0]), torch.tensor([0.2, 3.0])
    y_hat, weights = ab.nadaraya_watson(x_train, y_train, x_val, "boxcar", 1.0)
    theirs, their_weights = d2l_chapter_nadaraya_watson(x_train, y_train, x_val, d2l_chapter_kernels()["boxcar"])
    torch.testing.assert_close(y_hat[0], theirs[0])
    assert torch.all(weights[1] == 0) and torch.isnan(y_hat[1])  # no key within reach: no weight, no estimate
    assert torch.isnan(their_weights[:, 1]).all()  # d2l divides 0 by 0 in the weights themselves


# --- the page that maps d2l's names to the package's -----------------------------------------------

def test_from_d2l_page_names_real_objects_and_tests():
    page = (ROOT / "book" / "from_d2l.md").read_text()
    names = set(re.findall(r"`ab\.([A-Za-z_][A-Za-z0-9_]*)", page))
    assert names and not [n for n in names if not hasattr(ab, n)], sorted(n for n in names if not hasattr(ab, n))
    here = {name for name, obj in globals().items() if name.startswith("test_") and callable(obj)}
    cited = set(re.findall(r"`(test_[a-z0-9_]*[a-z0-9])`", page))
    assert cited and not cited - here, sorted(cited - here)
    differs = {name for name in here if name.startswith("test_differs_")}
    assert differs <= cited, f"the page does not explain {sorted(differs - cited)}"
