"""Training under bfloat16 autocast: the precision the book's full size uses on a CUDA GPU.

On a GPU ``training_precision()`` is ``'auto'``, which means bfloat16 autocast. These
tests force that precision on the CPU (CPU autocast supports bfloat16 too) at tiny
sizes, so that the mixed-precision paths run where the tests run. Each test also runs
on a CUDA GPU when there is one.
"""

import math

import pytest
import torch

import attention_book as ab
import attention_book.core.train as train_module
from attention_book.experiments import long_context, translation

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture
def bf16(monkeypatch):
    """Make every training function of the package train under bfloat16 autocast."""
    monkeypatch.setattr(train_module, "training_precision", lambda: "bf16")


def _trained(history):
    """Every epoch's mean training loss is finite and the last is below the first."""
    assert all(math.isfinite(x) for x in history.train_loss), history.train_loss
    assert history.train_loss[-1] < history.train_loss[0] - 0.05, history.train_loss


# --- chapter 7: the Transformer translator, whose decoder attends over a key/value cache ----------

def test_train_transformer_under_bf16(bf16, one_thread):
    # The decoder's self-attention caches project_kv's output (bfloat16 under autocast) while its
    # queries come from a layer norm in float32: before the fix the cache check refused the mix.
    data = ab.load_translation(batch_size=32, num_train=128, num_val=32, pairs=ab.data.text.synthetic_pairs(160),
                              verbose=False)
    _, history = translation.train_transformer(data, num_hiddens=32, ffn_num_hiddens=32, num_heads=4,
                                               num_blks=1, dropout=0.0, lr=3e-3, epochs=4, progress=False)
    _trained(history)
    assert all(math.isfinite(x) for x in history.metrics["val loss"])


@pytest.mark.parametrize("device", DEVICES)
def test_cached_self_attention_under_autocast_matches_float32(device):
    torch.manual_seed(0)
    attention = ab.GroupedQueryAttention(32, 4).to(device).eval()
    X = torch.randn(2, 6, 32, device=device)
    with torch.no_grad():
        exact = attention(X, None, None, causal=True, kv=attention.project_kv(X, X))
        with torch.autocast(device, dtype=torch.bfloat16):
            mixed = attention(X, None, None, causal=True, kv=attention.project_kv(X, X))
    assert mixed.dtype == torch.bfloat16
    torch.testing.assert_close(mixed.float(), exact, atol=3e-2, rtol=3e-2)
    # outside autocast a float32 query still refuses a bfloat16 cache
    with pytest.raises(ValueError, match="one floating-point dtype"):
        attention(X, None, None, causal=True, kv=attention.project_kv(X, X).bfloat16())


# --- chapter 10: local and linear attention ----------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_linear_attention_stays_finite_where_bf16_features_underflow(device):
    # Queries of -8 in every feature: elu(-8) + 1 is 3e-4 in float32 but exactly 0 in bfloat16, so a
    # bfloat16 normaliser is 0 and the output 0 / 0 = NaN. The module computes in float32 instead.
    layer = long_context.LinearAttention(8, 1).to(device)
    with torch.no_grad():
        layer.inner.W_q.weight.copy_(-8 * torch.eye(8))
    X = torch.ones(2, 5, 8, device=device)
    exact = layer(X, X, X, causal=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        mixed = layer(X, X, X, causal=True)
    assert torch.isfinite(mixed).all()
    torch.testing.assert_close(mixed.float(), exact, atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["window", "linear", "softmax"])
def test_length_model_attention_under_bf16_is_close_to_float32(device, kind):
    torch.manual_seed(0)
    kwargs = {"window": {"positions": "rotary", "window": 4},
              "linear": {"positions": "sinusoidal", "attention": "linear"},
              "softmax": {"positions": "alibi"}}[kind]
    model = long_context.LengthModel(num_hiddens=32, num_heads=4, num_blks=2, **kwargs).to(device).eval()
    X, _ = long_context.latest_marker_task(4, 24, seed=1)
    X = X.to(device)
    with torch.no_grad():
        exact = model(X)
        with torch.autocast(device, dtype=torch.bfloat16):
            mixed = model(X)
    assert torch.isfinite(mixed).all()
    torch.testing.assert_close(mixed.float(), exact, atol=0.1, rtol=0.05)


@pytest.mark.parametrize("kwargs", [{"positions": "rotary", "window": 8},
                                    {"positions": "sinusoidal", "attention": "linear"}], ids=["window", "linear"])
def test_train_length_model_under_bf16(bf16, one_thread, kwargs):
    _, history = long_context.train_length_model(seq_len=16, num_train=256, epochs=3, batch_size=32,
                                                progress=False, **kwargs)
    _trained(history)


# --- chapter 9: BERT's masked language modelling ----------------------------------------------

def test_bert_mlm_trains_under_bf16(bf16, one_thread):
    text = " ".join(f"w{i % 7} w{(i * 3) % 11} the" for i in range(400))
    corpus = ab.load_corpus(level="word", min_freq=1, text=text, verbose=False)
    tok = corpus.tokenizer
    ab.seed_everything(0)
    bert = ab.EncoderOnlyLM(tok.vocab_size, max_len=16, num_hiddens=32, num_heads=4, num_blks=1,
                            ffn_num_hiddens=64, dropout=0.0, pad_id=tok.pad_id)
    batches = ab.Batches(lambda g: ab.mlm_batch(corpus.train_ids, tok, 16, 16, g), 20, seed=0)
    val = ab.Batches(lambda g: ab.mlm_batch(corpus.val_ids, tok, 16, 16, g), 2, seed=1, fixed=True)
    history = ab.fit(bert, batches, ab.mlm_loss, epochs=4, lr=3e-3, clip_grad=1.0, progress=False,
                     evaluate=lambda m: {"val loss": ab.evaluate_loss(m, ab.mlm_loss, val)})
    _trained(history)
    assert history.metrics["val loss"][-1] < history.metrics["val loss"][0]


@pytest.mark.parametrize("device", DEVICES)
def test_bert_forward_under_bf16_is_close_to_float32(device):
    torch.manual_seed(0)
    bert = ab.EncoderOnlyLM(50, max_len=16, num_hiddens=32, num_heads=4, num_blks=2, ffn_num_hiddens=64,
                            dropout=0.0, pad_id=1).to(device).eval()
    ids = torch.randint(5, 50, (3, 12), device=device)
    ids[0, 8:] = 1  # padding
    with torch.no_grad():
        exact = bert(ids)
        with torch.autocast(device, dtype=torch.bfloat16):
            mixed = bert(ids)
    torch.testing.assert_close(mixed.float(), exact, atol=0.1, rtol=0.05)


# --- chapter 7's exercises: the reversal model with additive scores --------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_additive_reversal_model_under_autocast(device):
    # Its queries and keys come from a layer norm (float32 under autocast) and its values from a
    # linear layer (bfloat16): on the H100 the one-dtype check refused the mix (ch07 exercises).
    from attention_book.experiments import reversal

    torch.manual_seed(0)
    model = reversal.SequencePredictor(10, 32, 1, 1, scoring="additive").to(device)
    X = torch.randint(0, 10, (4, 16), device=device)
    with torch.no_grad():
        exact = model(X)
        with torch.autocast(device, dtype=torch.bfloat16):
            mixed = model(X)
    assert torch.isfinite(mixed).all()
    torch.testing.assert_close(mixed.float(), exact, atol=0.1, rtol=0.1)
    # outside autocast a mix of dtypes is still refused
    with pytest.raises(ValueError, match="one dtype"):
        ab.AdditiveAttention(8)(torch.zeros(1, 2, 8), torch.zeros(1, 3, 8), torch.zeros(1, 3, 8).bfloat16())
