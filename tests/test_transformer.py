"""Chapter 7: the Transformer blocks, stacks, cache, schedule, reversal predictor and checker."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import attention_book as ab
from attention_book.models import transformer as tf
from attention_book.assignments import ch07


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_matches_torch_layer(norm_first):
    torch.manual_seed(0)
    d, ffn, heads = 16, 24, 4
    blk = ab.TransformerEncoderBlock(d, ffn, heads, 0.0, use_bias=True, norm_first=norm_first).eval()
    ref = nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    assert ab.copy_to_torch_layer(blk, ref) is ref
    X = torch.randn(3, 7, d)
    torch.testing.assert_close(blk(X), ref(X), atol=1e-5, rtol=1e-5)
    # padding: torch masks keys with True = "ignore"; compare the real positions only
    lens = torch.tensor([3, 7, 5])
    pad = torch.arange(7)[None] >= lens[:, None]
    ours, theirs = blk(X, lens), ref(X, src_key_padding_mask=pad)
    torch.testing.assert_close(ours[~pad], theirs[~pad], atol=1e-5, rtol=1e-5)
    # causal: the same as torch's causal mask
    causal = nn.Transformer.generate_square_subsequent_mask(7)
    torch.testing.assert_close(blk(X, causal=True), ref(X, src_mask=causal, is_causal=True), atol=1e-5, rtol=1e-5)


def test_copy_to_torch_layer_without_bias_and_wrong_sizes():
    torch.manual_seed(0)
    blk = ab.TransformerEncoderBlock(16, 24, 4, 0.0).eval()  # no attention biases
    ref = nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, batch_first=True).eval()
    ab.copy_to_torch_layer(blk, ref)
    assert ref.self_attn.in_proj_bias.abs().max() == 0
    X = torch.randn(2, 5, 16)
    torch.testing.assert_close(blk(X), ref(X), atol=1e-5, rtol=1e-5)
    for args, name in (((16, 2, 24), "num_heads"), ((16, 4, 32), "ffn_num_hiddens"),
                       ((32, 4, 24), "num_hiddens")):
        wrong = nn.TransformerEncoderLayer(*args, dropout=0.0, batch_first=True)
        with pytest.raises(ValueError, match=name):
            ab.copy_to_torch_layer(blk, wrong)


def test_addnorm_post_and_pre():
    torch.manual_seed(0)
    X, Y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    post = ab.AddNorm(4, 0.0)
    torch.testing.assert_close(post(X, Y), nn.functional.layer_norm(X + Y, (4,)))
    f = nn.Linear(4, 4)
    torch.testing.assert_close(post(X, f), post(X, f(X)))
    pre = ab.AddNorm(4, 0.0, norm_first=True)
    torch.testing.assert_close(pre(X, f), X + f(nn.functional.layer_norm(X, (4,))))
    with pytest.raises(ValueError, match="callable"):
        pre(X, Y)
    with pytest.raises(ValueError, match="shape"):
        post(X, torch.ones(2, 3, 5))


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 8))
def test_ffn_is_position_wise(batch, length, width):
    torch.manual_seed(0)
    ffn = ab.PositionWiseFFN(width * 2, 5, num_inputs=width)
    row = torch.randn(width)
    out = ffn(row.expand(batch, length, width))
    assert out.shape == (batch, length, 5)
    torch.testing.assert_close(out, ffn(row[None, None]).expand(batch, length, 5))
    # and permuting positions permutes the outputs
    X = torch.randn(batch, length, width)
    perm = torch.randperm(length)
    torch.testing.assert_close(ffn(X[:, perm]), ffn(X)[:, perm])


def test_layer_norm_vs_batch_norm_seed_example():
    X = torch.tensor([[1.0, 2.0], [2.0, 3.0]])
    ln, bn = nn.LayerNorm(2), nn.BatchNorm1d(2)
    torch.testing.assert_close(ln(X), torch.tensor([[-1.0, 1.0], [-1.0, 1.0]]), atol=1e-3, rtol=0)
    torch.testing.assert_close(bn(X), torch.tensor([[-1.0, -1.0], [1.0, 1.0]]), atol=1e-3, rtol=0)


def _small_model(seed=0, dropout=0.0, **kw):
    torch.manual_seed(seed)
    return ab.make_transformer(13, 11, num_hiddens=16, ffn_num_hiddens=8, num_heads=2, num_blks=2,
                               dropout=dropout, max_len=32, **kw)


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_full_prefix(norm_first):
    model = _small_model(norm_first=norm_first).eval()
    src = torch.randint(0, 13, (3, 6))
    lens = torch.tensor([6, 2, 4])
    tgt = torch.randint(0, 11, (3, 7))
    enc = model.encoder(src, lens)
    full, _ = model.decoder(tgt, model.decoder.init_state(enc, lens))
    state, steps = model.decoder.init_state(enc, lens), []
    for t in range(tgt.shape[1]):
        logits, state = model.decoder(tgt[:, t:t + 1], state)
        steps.append(logits)
        # the step's logits equal those of re-running the whole prefix
        prefix, _ = model.decoder(tgt[:, :t + 1], model.decoder.init_state(enc, lens))
        torch.testing.assert_close(logits[:, 0], prefix[:, -1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert tf.TransformerDecoder.cached_steps(state) == tgt.shape[1]
    # greedy decoding with the cache (seq2seq's greedy_search) = without it
    cached, _ = ab.greedy_search(model, src, lens, bos_id=1, eos_id=2, max_steps=9)
    assert cached == tf.greedy_without_cache(model, src, lens, bos_id=1, eos_id=2, max_steps=9)


def test_cache_with_chunks_and_beam_reordering():
    model = _small_model(1).eval()
    src, lens = torch.randint(0, 13, (2, 5)), torch.tensor([5, 3])
    tgt = torch.randint(0, 11, (2, 6))
    enc = model.encoder(src, lens)
    full, _ = model.decoder(tgt, model.decoder.init_state(enc, lens))
    a, state = model.decoder(tgt[:, :4], model.decoder.init_state(enc, lens))
    b, state = model.decoder(tgt[:, 4:], state)
    torch.testing.assert_close(torch.cat([a, b], 1), full, atol=1e-5, rtol=1e-5)
    # reorder_state picks rows of the cache along the batch axis (beam search relies on it)
    flipped = ab.models.seq2seq.reorder_state(model.decoder, state, torch.tensor([1, 0]))
    assert torch.equal(flipped["cache"][0], state["cache"][0].flip(0))


def test_decoder_self_attention_sees_no_future():
    """Changing a later target token never changes the outputs at earlier positions."""
    model = _small_model(2).eval()
    src, lens = torch.randint(0, 13, (2, 5)), torch.tensor([5, 4])
    tgt = torch.randint(0, 11, (2, 6))
    enc = model.encoder(src, lens)
    base, _ = model.decoder(tgt, model.decoder.init_state(enc, lens))
    for t in range(6):
        changed = tgt.clone()
        changed[:, t] = (changed[:, t] + 1) % 11
        out, _ = model.decoder(changed, model.decoder.init_state(enc, lens))
        torch.testing.assert_close(out[:, :t], base[:, :t])
        assert not torch.allclose(out[:, t:], base[:, t:])
    with ab.record_attention(model) as maps:
        model.decoder(tgt, model.decoder.init_state(enc, lens))
    weights = maps.stacked("self", under="decoder")[0]  # (batch, heads, T, T)
    assert torch.all(weights.triu(1) == 0)
    # the encoder block with causal=True is a decoder-only block: the same property
    blk = ab.TransformerEncoderBlock(8, 16, 2, causal=True).eval()
    X = torch.randn(1, 5, 8)
    Y = X.clone()
    Y[:, 3:] += 1.0
    torch.testing.assert_close(blk(X)[:, :3], blk(Y)[:, :3])


def test_decoder_only_stack_without_cross_attention():
    torch.manual_seed(0)
    dec = ab.TransformerDecoder(9, 8, 16, 2, 2, cross_attention=False).eval()
    ids = torch.randint(0, 9, (2, 5))
    full, _ = dec(ids, dec.init_state(None))
    state, outs = dec.init_state(None), []
    for t in range(5):
        o, state = dec(ids[:, t:t + 1], state)
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-5, rtol=1e-5)
    assert dec.attention_weights[1] == [None, None]
    with pytest.raises(ValueError, match="cross_attention=False"):
        dec.blks[0](torch.randn(2, 5, 8), torch.randn(2, 3, 8))


def test_attention_weights_collected_per_layer():
    model = _small_model(3).eval()
    src, lens = torch.randint(0, 13, (2, 6)), torch.tensor([6, 3])
    tgt = torch.randint(0, 11, (2, 4))
    model(src, tgt, lens)
    assert model.encoder.attention_weights[0] is None  # eval mode runs the fused kernel ...
    with ab.keep_attention_weights():  # ... unless asked
        model(src, tgt, lens)
    enc_w = model.encoder.attention_weights
    assert len(enc_w) == 2 and enc_w[0].shape == (2, 2, 6, 6)
    assert torch.all(enc_w[1][1, :, :, 3:] == 0)  # padding keys get no weight
    self_w, cross_w = model.decoder.attention_weights
    assert self_w[1].shape == (2, 2, 4, 4) and cross_w[1].shape == (2, 2, 4, 6)
    torch.testing.assert_close(cross_w[0].sum(-1), torch.ones(2, 2, 4))
    model.train()
    model(src, tgt, lens)  # training runs the fused kernel: no weights kept ...
    assert model.encoder.attention_weights[0] is None
    with ab.keep_attention_weights():  # ... unless asked
        model(src, tgt, lens)
    assert model.encoder.attention_weights[0] is not None


def test_meta_device_forward():
    with torch.device("meta"):
        model = _small_model(dropout=0.1)
        src = torch.zeros(2, 6, dtype=torch.long)
        tgt = torch.zeros(2, 5, dtype=torch.long)
        lens = torch.tensor([6, 3])
        assert model(src, tgt, lens).shape == (2, 5, 11)
        state = model.decoder.init_state(model.encoder(src, lens), lens)
        for _ in range(2):
            logits, state = model.decoder(tgt[:, :1], state)
        assert logits.shape == (2, 1, 11) and logits.device.type == "meta"
        pred = ab.experiments.reversal.SequencePredictor(10, 16, 2, 1)
        assert pred(torch.zeros(3, 16, dtype=torch.long)).shape == (3, 16, 10)
        add = ab.experiments.reversal.SequencePredictor(10, 16, 1, 1, scoring="additive")
        assert add(torch.zeros(3, 16, dtype=torch.long)).shape == (3, 16, 10)
        blk = ab.TransformerEncoderBlock(8, 16, 2, norm_first=True, causal=True)
        assert blk(torch.zeros(2, 4, 8)).device.type == "meta"
        ffn = ab.PositionWiseFFN(8, 4)
        assert ffn(torch.zeros(2, 3, 4)).shape == (2, 3, 4)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="num_hiddens=30 is not divisible by num_heads=4"):
        ab.TransformerEncoderBlock(30, 16, 4)
    with pytest.raises(ValueError, match="num_hiddens=30 is not divisible by num_heads=4"):
        ab.make_transformer(10, 10, num_hiddens=30, num_heads=4)
    model = _small_model()
    with pytest.raises(ValueError, match=r"max_len=32"):  # source longer than the positional table
        model.encoder(torch.zeros(1, 40, dtype=torch.long))
    with pytest.raises(ValueError, match=r"vocab_size=13"):  # data from a bigger vocabulary
        model.encoder(torch.tensor([[1, 2, 20]]))
    state = model.decoder.init_state(model.encoder(torch.zeros(1, 3, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"vocab_size=11"):
        model.decoder(torch.tensor([[11]]), state)
    with pytest.raises(ValueError, match="integer token ids"):
        model.encoder(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="num_hiddens=8"):
        ab.TransformerEncoderBlock(8, 16, 2)(torch.zeros(1, 3, 6))
    with pytest.raises(ValueError, match="needs enc_outputs"):
        ab.TransformerDecoderBlock(8, 16, 2)(torch.zeros(1, 3, 8))
    with pytest.raises(ValueError, match="activation"):
        ab.PositionWiseFFN(8, 4, activation="tanh")
    with pytest.raises(ValueError, match="dropout"):
        ab.TransformerEncoderBlock(8, 16, 2, dropout=1.5)


def test_decoder_positions_beyond_table_raise_while_decoding():
    model = _small_model()
    model.eval()
    enc = model.encoder(torch.zeros(1, 3, dtype=torch.long))
    state = model.decoder.init_state(enc)
    _, state = model.decoder(torch.zeros(1, 31, dtype=torch.long), state)
    _, state = model.decoder(torch.zeros(1, 1, dtype=torch.long), state)  # position 31: the last row
    with pytest.raises(ValueError, match="position 32"):
        model.decoder(torch.zeros(1, 1, dtype=torch.long), state)


def test_warmup_cosine_schedule_values():
    f = ab.core.train.warmup_cosine_factor
    assert f(0, 10, 100) == 0.0
    assert f(5, 10, 100) == pytest.approx(0.5 * 0.5 * (1 + math.cos(math.pi * 5 / 100)))
    assert f(10, 10, 100) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.1)))
    assert f(50, 10, 100) == pytest.approx(0.5)
    assert f(100, 10, 100) == pytest.approx(0.0, abs=1e-12)
    assert f(150, 10, 100) == pytest.approx(0.0, abs=1e-12)  # stays at 0 after the end
    assert f(0, 0, 100) == 1.0  # no warm-up
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = ab.warmup_cosine_schedule(opt, 10, 100)
    seen = []
    for _ in range(101):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([2.0 * f(t, 10, 100) for t in range(101)])
    assert max(range(101), key=seen.__getitem__) == 10
    with pytest.raises(ValueError, match="warmup"):
        ab.warmup_cosine_schedule(opt, 200, 100)


def test_reverse_data_and_predictor_shapes():
    ds = ab.experiments.reversal.reverse_dataset(5, seq_len=16, num_classes=10, seed=0)
    X, Y = ds.tensors
    assert X.shape == (5, 16) and torch.equal(Y, X.flip(1)) and int(X.max()) < 10
    model = ab.experiments.reversal.SequencePredictor(10, 16, 1, 1)
    maps = model.attention_maps(X)
    assert len(maps) == 1 and maps[0].shape == (5, 1, 16, 16)
    assert model.training  # attention_maps restores the mode
    add = ab.experiments.reversal.SequencePredictor(10, 16, 1, 1, scoring="additive")
    assert add.attention_maps(X)[0].shape == (5, 1, 16, 16)


def test_reverse_data_follows_the_book_seed(monkeypatch):
    monkeypatch.delenv("ATTENTION_BOOK_SEED", raising=False)
    default = ab.experiments.reversal.reverse_dataset(4).tensors[0]
    assert torch.equal(default, ab.experiments.reversal.reverse_dataset(4, seed=0).tensors[0])
    monkeypatch.setenv("ATTENTION_BOOK_SEED", "3")
    assert torch.equal(ab.experiments.reversal.reverse_dataset(4).tensors[0], ab.experiments.reversal.reverse_dataset(4, seed=3).tensors[0])
    train, val, test = ab.experiments.reversal.reverse_loaders(2, num_train=4, num_val=3, num_test=2)
    assert torch.equal(train.dataset.tensors[0], ab.experiments.reversal.reverse_dataset(4, seed=3).tensors[0])
    assert torch.equal(val.dataset.tensors[0], ab.experiments.reversal.reverse_dataset(3, seed=4).tensors[0])
    assert torch.equal(test.dataset.tensors[0], ab.experiments.reversal.reverse_dataset(2, seed=5).tensors[0])
    assert not torch.equal(ab.experiments.reversal.reverse_dataset(4).tensors[0], default)


def test_encoder_embedding_starts_as_in_d2l_and_the_reverser_small():
    """TransformerEncoder keeps nn.Embedding's N(0, 1) start (×√d makes tokens dominate positions);
    SequencePredictor starts at std 1/√d so that embedding × √d and positions have one scale."""
    torch.manual_seed(0)
    d = 64
    enc = ab.TransformerEncoder(500, d, 32, 4, 1)
    assert 0.9 < enc.embedding.weight.std().item() < 1.1
    rev = ab.experiments.reversal.SequencePredictor(500, d, 1, 1)
    assert 0.9 < (rev.encoder.embedding.weight * d ** 0.5).std().item() < 1.1


@pytest.mark.slow
def test_reversal_learns_quickly():
    """A short run already reverses most positions (the chapter trains to 100%)."""
    ab.seed_everything(0)
    train, val, _ = ab.experiments.reversal.reverse_loaders(128, num_train=12800, num_val=256, num_test=1)
    model = ab.experiments.reversal.SequencePredictor(10, 32, 1, 1)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    sched = ab.warmup_cosine_schedule(opt, 50, 5 * len(train))
    with ab.single_thread():
        ab.fit(model, train, ab.experiments.reversal.token_loss, epochs=5, optimizer=opt, scheduler=sched, clip_grad=5.0,
               progress=False, device="cpu")
    assert ab.accuracy(model, val) > 0.95


def test_reversal_attention_profile_on_a_hand_made_map(monkeypatch):
    model = ab.experiments.reversal.SequencePredictor(10, 8, 2, 1)
    n = 4
    anti = torch.eye(n).flip(1)                      # all weight on key n-1-i
    blur = 0.5 * anti + 0.25 * (anti.roll(1, 1) + anti.roll(-1, 1))
    fake = torch.stack([anti, blur])[None].expand(3, 2, n, n)  # head 1 sharp, head 2 blurred
    monkeypatch.setattr(model, "attention_maps", lambda X: [fake])
    profile = ab.experiments.reversal.reversal_attention_profile(model, torch.zeros(3, n, dtype=torch.long))
    assert profile["argmax_on_target"] == 1.0
    assert profile["on_target"] == pytest.approx(0.75)
    # rows 1 and 2 have both neighbours inside the map; rows 0 and 3 lose the one that wrapped around
    assert profile["on_neighbours"] == pytest.approx((0.25 * 2 + 0.125 * 2) / 4)


def test_schedule_figure_reads_a_real_scheduler():
    import matplotlib.pyplot as plt

    fig = ab.schedule_figure(warmup=20, max_steps=100, base_lr=1e-3)
    ys = fig.axes[0].lines[0].get_ydata()
    assert ys[0] == 0 and ys[20] == pytest.approx(1e-3 * ab.core.train.warmup_cosine_factor(20, 20, 100))
    plt.close(fig)


def test_reversal_attention_figure_labels_positions_and_digits():
    model = ab.experiments.reversal.SequencePredictor(10, 16, 1, 1)
    X = torch.tensor([[3, 1, 4, 1], [5, 9, 2, 6]])
    fig = ab.experiments.reversal.reversal_attention_figure(model, X, index=1)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0:5", "1:9", "2:2", "3:6"]
    with pytest.raises(ValueError, match="index"):
        ab.experiments.reversal.reversal_attention_figure(model, X, index=2)


def _tiny_translation_data():
    pairs = [("go .", "va !"), ("i lost .", "j'ai perdu ."), ("i'm home .", "je suis chez moi ."),
             ("he's calm .", "il est calme .")] * 8
    return ab.load_translation(batch_size=8, num_steps=6, num_train=24, num_val=8, min_freq=1, pairs=pairs,
                               verbose=False)


def test_train_transformer_and_translation_maps(one_thread):
    data = _tiny_translation_data()
    model, history = ab.experiments.translation.train_transformer(data, num_hiddens=16, ffn_num_hiddens=8, num_heads=2, num_blks=2,
                                          dropout=0.0, lr=0.01, epochs=2, progress=False)
    assert len(history.train_loss) == 2 and len(history.metrics["val loss"]) == 2
    _, again = ab.experiments.translation.train_transformer(data, num_hiddens=16, ffn_num_hiddens=8, num_heads=2, num_blks=2,
                                    dropout=0.0, lr=0.01, epochs=2, progress=False, seed=ab.book_seed())
    assert again.train_loss == history.train_loss  # seed=None means the book's seed
    maps = ab.experiments.translation.translation_attention(model, data, "i'm home .")
    S, T = len(maps["source"]), len(maps["queries"])
    assert maps["source"][-1] == "<eos>" and maps["queries"][0] == "<bos>"
    assert maps["encoder"].shape == (2, 2, S, S)
    assert maps["decoder_self"].shape == (2, 2, T, T) and maps["cross"].shape == (2, 2, T, S)
    assert torch.all(maps["decoder_self"].triu(1) == 0)
    fig = ab.experiments.translation.translation_attention_figure(maps, "cross", layer=2)
    assert len(fig.axes) == 2 + 1  # two heads and the colour bar
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == maps["queries"]
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == maps["source"]
    with pytest.raises(ValueError, match="kind"):
        ab.experiments.translation.translation_attention_figure(maps, "self")
    with pytest.raises(ValueError, match="layer"):
        ab.experiments.translation.translation_attention_figure(maps, "encoder", layer=3)


def test_translation_attention_figure_stacks_heads_readably(one_thread):
    data = _tiny_translation_data()
    ab.seed_everything(0)
    model = ab.make_transformer(len(data.src_vocab), len(data.tgt_vocab), num_hiddens=16, ffn_num_hiddens=8,
                                num_heads=2, num_blks=2, dropout=0.0)
    maps = ab.experiments.translation.translation_attention(model, data, "go .")
    fig = ab.experiments.translation.translation_attention_figure(maps, "encoder", heads_per_row=1)
    panels = fig.axes[:-1]  # the last axes is the colour bar
    assert [ax.get_title() for ax in panels] == [f"layer {i}, head {h}" for i in (1, 2) for h in (1, 2)]
    assert fig.get_figwidth() < 5  # one plot per row: a narrow figure, not shrunk in the page column
    # every plot keeps its token labels, at the style's tick size (9 pt)
    assert all(t.get_fontsize() >= 9 for ax in panels for t in ax.get_yticklabels())
    with pytest.raises(ValueError, match="heads_per_row"):
        ab.experiments.translation.translation_attention_figure(maps, "encoder", heads_per_row=3)
    with pytest.raises(ValueError, match="heads_per_row"):
        ab.experiments.translation.translation_attention_figure(maps, "encoder", heads_per_row=0)


def test_schedule_figure_keeps_its_vertical_axis_for_every_warmup():
    import matplotlib.pyplot as plt

    limits = []
    for warmup in (0, 30, 100):
        fig = ab.schedule_figure(warmup=warmup, max_steps=200, base_lr=2e-3)
        limits.append(fig.axes[0].get_ylim())
        plt.close(fig)
    assert limits[0] == limits[1] == limits[2] and limits[0][1] >= 2e-3


def test_warmup_experiment_runs_the_grid_from_shared_seeds(one_thread):
    import matplotlib.pyplot as plt

    kwargs = dict(lrs=(1e-3, 1e-2), warmups=(0, 2), num_seeds=2, epochs=1, num_train=256, seed=5)
    rows = ab.experiments.reversal.warmup_experiment(**kwargs)
    assert [(r["lr"], r["warmup"], r["seed"]) for r in rows] == [
        (lr, w, s) for s in (5, 6) for lr in (1e-3, 1e-2) for w in (0, 2)]
    assert all(len(r["val_accuracy"]) == 1 and 0 <= r["val_accuracy"][0] <= 1 for r in rows)
    # same seed, same schedule: the same run; another schedule: another run
    again = ab.experiments.reversal.warmup_experiment(**{**kwargs, "num_seeds": 1})
    assert [r["train_loss"] for r in again] == [r["train_loss"] for r in rows[:4]]
    assert rows[0]["train_loss"] != rows[1]["train_loss"]
    fig = ab.experiments.reversal.warmup_experiment_figure(rows)
    assert len(fig.axes[0].collections) == 4  # one column of dots per setting
    plt.close(fig)
    with pytest.raises(ValueError, match="lrs"):
        ab.experiments.reversal.warmup_experiment(lrs=(0.0,), num_seeds=1, epochs=1, num_train=128)
    with pytest.raises(ValueError, match="warmups"):
        ab.experiments.reversal.warmup_experiment(warmups=(-1,), num_seeds=1, epochs=1, num_train=128)
    with pytest.raises(ValueError, match="num_seeds"):
        ab.experiments.reversal.warmup_experiment(num_seeds=0)
    with pytest.raises(ValueError, match="rows"):
        ab.experiments.reversal.warmup_experiment_figure([])


# --- the chapter's assignment checker ---------------------------------------------------------------

def test_warmup_cosine_checker_accepts_reference_and_rejects_wrong_ones(capsys):
    assert ch07.check_warmup_cosine(ab.core.train.warmup_cosine_factor)

    def ramp_replaces_cosine(step, warmup, max_steps):  # warm-up ramp alone, cosine only afterwards
        if step < warmup:
            return step / warmup
        return 0.5 * (1 + math.cos(math.pi * min(step, max_steps) / max_steps))

    assert not ch07.check_warmup_cosine(ramp_replaces_cosine)

    def unclipped(step, warmup, max_steps):  # the cosine climbs back up after max_steps
        ramp = min(1.0, step / warmup) if warmup else 1.0
        return ramp * 0.5 * (1 + math.cos(math.pi * step / max_steps))

    report = ch07.check_warmup_cosine(unclipped)
    assert not report and report.score >= 0.8

    def divides_by_warmup(step, warmup, max_steps):  # fails with warmup = 0
        t = min(step, max_steps)
        return min(1.0, t / warmup) * 0.5 * (1 + math.cos(math.pi * t / max_steps))

    report = ch07.check_warmup_cosine(divides_by_warmup)
    assert not report
    assert "ZeroDivisionError" in capsys.readouterr().out

    def todo(step, warmup, max_steps):
        raise NotImplementedError

    report = ch07.check_warmup_cosine(todo)
    assert report.not_implemented and report.score == 0


@pytest.mark.parametrize("warmup, max_steps", [(10, 1000), (50, 1000), (250, 1000), (500, 1000), (50, 200)])
def test_schedule_figure_keeps_its_label_off_the_curve(warmup, max_steps):
    """At the page's default (warm-up 50 of 1000 steps) "end of warm-up" sat on the curve (issue 36)."""
    import matplotlib.pyplot as plt

    fig = ab.schedule_figure(warmup=warmup, max_steps=max_steps, base_lr=3e-3)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    label = next(t for t in ax.texts if t.get_text() == "end of warm-up")
    box = label.get_window_extent(renderer)
    assert box.y0 > ax.transData.transform((0, max(ax.lines[0].get_ydata())))[1]  # above the peak
    assert ax.get_window_extent(renderer).contains(box.x1, box.y1)  # inside the plot
    plt.close(fig)


def test_reversal_attention_figure_draws_a_phone_copy_at_full_size():
    """A 390 px phone showed the 16 x 16 map at 76%, its position:digit ticks about 9 px (issue 36)."""
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    from attention_book.core.plot import MIN_TEXT_PX, PHONE_MAX_PX, phone_png

    ab.seed_everything()
    model = ab.experiments.reversal.SequencePredictor(10, 16, 1, 1)
    fig = ab.experiments.reversal.reversal_attention_figure(model, torch.randint(0, 10, (1, 16)))
    png = Image.open(io.BytesIO(phone_png(fig)))
    assert png.width <= PHONE_MAX_PX and float(png.text["ab-min-text-px"]) >= max(MIN_TEXT_PX, 12)
    plt.close(fig)
