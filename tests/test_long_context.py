"""Chapter 10: the latest-marker task, the length model, local and linear attention, kernel features, the KV cache."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

import attention_book as ab


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


# --- the task -----------------------------------------------------------------------------------

def test_latest_marker_labels_by_brute_force():
    X, Y = ab.experiments.long_context.latest_marker_task(50, 20, vocab_size=12, num_markers=3, marker_rate=0.3, seed=1)
    assert X.shape == Y.shape == (50, 20) and X.max() < 12
    for x, y in zip(X.tolist(), Y.tolist()):
        latest = -100
        for token, label in zip(x, y):
            latest = token if token < 3 else latest
            assert label == latest
    again, _ = ab.experiments.long_context.latest_marker_task(50, 20, vocab_size=12, num_markers=3, marker_rate=0.3, seed=1)
    assert torch.equal(X, again)
    with pytest.raises(ValueError, match="vocab_size"):
        ab.experiments.long_context.latest_marker_task(5, 5, vocab_size=3, num_markers=3)
    with pytest.raises(ValueError, match="marker_rate"):
        ab.experiments.long_context.latest_marker_task(5, 5, marker_rate=0)


# --- local and linear attention -----------------------------------------------------------------

@given(n=st.integers(1, 40), window=st.integers(1, 45), d=st.integers(1, 6), seed=st.integers(0, 999))
@settings(max_examples=40, deadline=None)
def test_sliding_window_equals_softmax_under_the_band_mask(n, window, d, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, n, d, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    pos = torch.arange(n)
    band = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - window)
    got = ab.experiments.long_context.sliding_window_attention(q, k, v, window)
    want, _ = ab.attend(q, k, v, band)
    torch.testing.assert_close(got, want)
    for a, b in zip(torch.autograd.grad(got.sum(), (q, k, v)), torch.autograd.grad(want.sum(), (q, k, v))):
        torch.testing.assert_close(a, b)


@given(n=st.integers(1, 40), chunk=st.integers(1, 16), seed=st.integers(0, 999))
@settings(max_examples=30, deadline=None)
def test_linear_attention_equals_its_quadratic_form(n, chunk, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, n, 4, generator=g, dtype=torch.float64) for _ in range(3))
    fq, fk = ab.experiments.long_context.elu_feature_map(q), ab.experiments.long_context.elu_feature_map(k)
    scores = fq @ fk.transpose(-2, -1)
    causal = scores.tril()
    torch.testing.assert_close(ab.experiments.long_context.linear_attention(q, k, v, causal=True, chunk=chunk),
                               (causal @ v) / causal.sum(-1, keepdim=True))
    torch.testing.assert_close(ab.experiments.long_context.linear_attention(q, k, v, causal=False), (scores @ v) / scores.sum(-1, keepdim=True))


def test_local_and_linear_reject_bad_input():
    q = torch.randn(1, 5, 4)
    with pytest.raises(ValueError, match="window"):
        ab.experiments.long_context.sliding_window_attention(q, q, q, 0)
    with pytest.raises(ValueError, match="same leading"):
        ab.experiments.long_context.linear_attention(q, torch.randn(1, 6, 4), q)
    with pytest.raises(ValueError, match="chunk"):
        ab.experiments.long_context.linear_attention(q, q, q, chunk=0)


# --- the model ----------------------------------------------------------------------------------

@pytest.mark.parametrize("positions", ab.experiments.long_context.POSITION_SCHEMES)
def test_length_model_shapes_causality_and_meta(positions):
    torch.manual_seed(0)
    model = ab.experiments.long_context.LengthModel(positions, max_len=64).eval()
    X = torch.randint(0, 24, (2, 12))
    out = model(X)
    assert out.shape == (2, 12, 24)
    changed = X.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 24
    assert torch.equal(model(changed)[:, :7], out[:, :7])  # causal: earlier positions do not move
    with torch.device("meta"):
        meta = ab.experiments.long_context.LengthModel(positions, max_len=64)
    assert meta(torch.zeros(2, 12, dtype=torch.long, device="meta")).device.type == "meta"


def test_window_and_linear_models():
    torch.manual_seed(0)
    model = ab.experiments.long_context.LengthModel("rotary", window=3).eval()
    X = torch.randint(0, 24, (1, 10))
    out = model(X)
    changed = X.clone()
    changed[0, 2] = (changed[0, 2] + 1) % 24
    moved = (model(changed) - out).abs().amax(-1)[0]
    assert moved[:2].max() == 0 and moved[2:5].min() > 0 and moved[5:].max() == 0  # position 2 reaches 2..4 only
    linear = ab.experiments.long_context.LengthModel("sinusoidal", attention="linear").eval()
    assert linear(X).shape == (1, 10, 24)
    with pytest.raises(ValueError, match="linear attention"):
        ab.experiments.long_context.LengthModel("rotary", attention="linear")
    with pytest.raises(ValueError, match="positions"):
        ab.experiments.long_context.LengthModel("relative")
    with pytest.raises(ValueError, match="num_kv_heads"):
        ab.experiments.long_context.LengthModel("alibi", num_kv_heads=3)


def test_learned_table_has_no_rows_beyond_max_len():
    model = ab.experiments.long_context.LengthModel("learned", max_len=16)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_training_and_length_accuracy_run_and_restore_the_window():
    model, history = ab.experiments.long_context.train_length_model("alibi", num_train=64, epochs=2, batch_size=16, seed=3, progress=False,
                                           num_kv_heads=2)
    assert len(history.train_loss) == 2 and len(history.metrics["accuracy"]) == 2
    model.train()
    acc = ab.experiments.long_context.length_accuracy(model, [8, 16], num_examples=8, seed=1, window=4)
    assert set(acc) == {8, 16} and all(0 <= a <= 1 for a in acc.values())
    assert model.window is None and model.training
    fig = ab.experiments.long_context.length_curves_figure({"alibi": acc}, train_len=8, chance=1 / 8)
    assert fig.axes[0].get_xlabel() == "test sequence length"
    ab.experiments.long_context.length_attention_figure({"alibi": model}, seq_len=24, train_len=8)
    ab.experiments.long_context.window_figure(4, model, lengths=(8, 16), full=acc, train_len=8, show_len=12)



def test_length_curves_tell_coinciding_lines_apart():
    # the chapter's last figure: ALiBi and the windowed model, sinusoidal and linear attention run on
    # top of each other (fresh re-read, issue 36); every line needs its own dash and marker
    names = (*ab.experiments.long_context.POSITION_SCHEMES, "rotary, window 16", "linear attention")
    same = {n: 0.9 for n in (32, 64)}
    fig = ab.experiments.long_context.length_curves_figure(dict.fromkeys(names, same), train_len=32)
    lines = [line for line in fig.axes[0].get_lines() if line.get_label() in names]
    assert [line.get_label() for line in lines] == list(names)
    looks = {(str(line.get_linestyle()), line.get_marker()) for line in lines}
    assert len(looks) == len(names)
    # a model keeps its look from one figure to the next
    alone = ab.experiments.long_context.length_curves_figure({"alibi": same}, train_len=32)
    alibi = [line for line in alone.axes[0].get_lines() if line.get_label() == "alibi"][0]
    assert (alibi.get_linestyle(), alibi.get_marker()) == (lines[3].get_linestyle(), lines[3].get_marker())

def test_forward_reads_no_tensor_value_on_the_host():
    model = ab.experiments.long_context.LengthModel("alibi", window=4, num_kv_heads=2).eval()
    X = torch.randint(0, 24, (2, 9))
    with pytest.MonkeyPatch.context() as patch:
        def refuse(self, *args, **kwargs):
            raise AssertionError("a tensor value was read on the host")

        for method in ("item", "tolist", "__bool__", "__int__", "__float__"):
            patch.setattr(torch.Tensor, method, refuse)
        with torch.no_grad():
            model(X)


# --- chapter 2's kernel through features ----------------------------------------------------------

def test_random_features_approach_the_gaussian_kernel():
    x = torch.linspace(-2, 2, 9, dtype=torch.float64)
    phi = ab.experiments.long_context.random_fourier_features(x, 20000, sigma=0.7, seed=0)
    exact = torch.exp(-(x[:, None] - x[None, :]) ** 2 / (2 * 0.7 ** 2))
    assert (phi @ phi.T - exact).abs().max() < 0.05
    data = ab.make_kernel_data(40, seed=0)
    exact_fit, _ = ab.nadaraya_watson(data.x_train.double(), data.y_train.double(), data.x_val.double(),
                                      "gaussian", 0.5)
    errors = [(ab.experiments.long_context.feature_nadaraya_watson(data.x_train.double(), data.y_train.double(), data.x_val.double(), 0.5,
                                          r, seed=0) - exact_fit).abs().max() for r in (64, 16384)]
    assert errors[1] < errors[0] and errors[1] < 0.2
    with pytest.raises(ValueError, match="sigma"):
        ab.experiments.long_context.random_fourier_features(x, 4, sigma=0)


def test_attention_costs_memory_orders():
    costs = ab.experiments.long_context.attention_costs((64, 256), heads=1, head_dim=8, window=16, repeats=1, seed=0)
    explicit, window = costs["softmax, explicit"]["memory"], costs["sliding window (16)"]["memory"]
    assert explicit[1] / explicit[0] > 8 and window[1] / window[0] < 5  # quadratic vs linear
    assert all(len(c["seconds"]) == 2 and min(c["seconds"]) > 0 for c in costs.values())
    ab.experiments.long_context.cost_figure(costs, (64, 256))


# --- the key/value cache -------------------------------------------------------------------------

@pytest.mark.parametrize("kv", [4, 2, 1])
def test_cache_holds_exactly_what_the_formula_says(kv):
    torch.manual_seed(0)
    decoder = ab.TransformerDecoder(20, 32, 64, 4, 2, max_len=64, norm_first=True, cross_attention=False,
                                    num_kv_heads=kv)
    prompt = torch.randint(0, 20, (3, 7))
    tokens, state = ab.greedy_generate(decoder, prompt, 5)
    assert tokens.shape == (3, 5)
    # the last generated token was never fed back: the cache holds the prompt and 4 new positions
    assert ab.cache_bytes(state) == ab.kv_cache_bytes(2, 3, 7 + 4, kv, 8) == 2 * 2 * 3 * 11 * kv * 8 * 4
    assert state["cache"][0].shape == (3, 11, 2 * kv * 8)
    uncached, none = ab.greedy_generate(decoder, prompt, 5, use_cache=False)
    assert torch.equal(tokens, uncached) and none is None
    assert ab.seconds_per_token(decoder, prompt, 2, repeats=1) > 0


def test_cache_formula_and_errors():
    assert ab.kv_cache_bytes(32, 1, 4096, 32, 128, torch.float16) == 2 * 32 * 4096 * 32 * 128 * 2
    with pytest.raises(ValueError, match="dtype"):
        ab.kv_cache_bytes(1, 1, 1, 1, 1, "float16")
    with pytest.raises(ValueError, match="length"):
        ab.kv_cache_bytes(1, 1, -1, 1, 1)
    with pytest.raises(ValueError, match="decoder-only"):
        ab.greedy_generate(ab.TransformerDecoder(5, 8, 8, 2, 1), torch.zeros(1, 2, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="cache"):
        ab.cache_bytes({})


def test_latest_marker_focus_counts_the_queries_whose_heaviest_key_is_their_latest_marker():
    lc = ab.experiments.long_context
    model = lc.LengthModel("alibi")
    attention = model.blks[0].attention
    with torch.no_grad():  # no content in the scores: only ALiBi's penalty, largest at distance 0
        attention.W_q.weight.zero_()
        attention.W_k.weight.zero_()
    # every query's heaviest key is itself, which is its latest marker exactly when it is a marker
    X, _ = lc.latest_marker_task(16, 40, seed=ab.resolve_seed(5, 2) + 40)
    positions = torch.arange(40).expand_as(X)
    seen = torch.cummax(torch.where(X < 8, positions, torch.full_like(positions, -1)), dim=1).values >= 0
    asked = seen & (positions >= 10)
    want = int(((X < 8) & asked).sum()) / int(asked.sum())
    got = lc.latest_marker_focus(model, seq_len=40, train_len=10, num_examples=16, seed=5)
    assert got == pytest.approx(want) and 0 < got < 0.5
    with pytest.raises(ValueError, match="num_examples"):
        lc.latest_marker_focus(model, num_examples=0)
