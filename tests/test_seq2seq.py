"""Tests of the RNN encoder–decoders, the masked loss, decoding and the chapter-4 checker."""

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import attention_book as ab
from attention_book.assignments import ch04, collect_cases, hidden_cases

V_SRC, V_TGT, EMBED, HIDDEN, LAYERS = 11, 13, 8, 16, 2


pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(batch=3, steps=5, vocab=V_SRC, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, steps), generator=g)


# --- shapes ------------------------------------------------------------------------------------

@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_encoder_shapes(cell):
    enc = ab.Seq2SeqEncoder(V_SRC, EMBED, HIDDEN, LAYERS, cell=cell)
    outputs, hidden = enc(_tokens(3, 5))
    assert outputs.shape == (3, 5, HIDDEN)
    states = hidden if cell == "lstm" else (hidden,)
    assert len(states) == (2 if cell == "lstm" else 1)
    for h in states:
        assert h.shape == (3, LAYERS, HIDDEN)  # batch-first
    # the last layer's final state is the last output
    torch.testing.assert_close(states[0][:, -1], outputs[:, -1])


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("attention", ["additive", "dot"])
def test_attention_decoder_shapes_state_and_weights(cell, attention):
    enc = ab.Seq2SeqEncoder(V_SRC, EMBED, HIDDEN, LAYERS, cell=cell)
    dec = ab.Seq2SeqAttentionDecoder(V_TGT, EMBED, HIDDEN, LAYERS, cell=cell, attention=attention)
    enc.eval(), dec.eval()
    src, valid = _tokens(3, 6), torch.tensor([6, 4, 1])
    state = dec.init_state(enc(src, valid), valid)
    with ab.keep_attention_weights():
        logits, (enc_outputs, hidden, lens) = dec(_tokens(3, 4, V_TGT), state)
    assert logits.shape == (3, 4, V_TGT)
    assert enc_outputs.shape == (3, 6, HIDDEN) and torch.equal(lens, valid)
    for h in (hidden if cell == "lstm" else (hidden,)):
        assert h.shape == (3, LAYERS, HIDDEN)
    weights = dec.attention_weights
    assert len(weights) == 4  # one map per target step
    for w in weights:
        assert w.shape == (3, 1, 6)
        torch.testing.assert_close(w.sum(-1), torch.ones(3, 1))
        assert torch.all(w[1, :, 4:] == 0) and torch.all(w[2, :, 1:] == 0)  # padding gets no attention


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("attention", ["additive", None])
def test_decoding_one_step_at_a_time_equals_teacher_forcing(cell, attention):
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS, cell=cell, attention=attention).eval()
    src, valid, tgt = _tokens(2, 5), torch.tensor([5, 2]), _tokens(2, 4, V_TGT, seed=1)
    full = model(src, tgt, valid)
    state = model.decoder.init_state(model.encoder(src, valid), valid)
    steps = []
    for t in range(4):
        logits, state = model.decoder(tgt[:, t:t + 1], state)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full)


def test_plain_decoder_uses_one_fixed_context():
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS, attention=None).eval()
    src = _tokens(2, 5)
    outputs, hidden = model.encoder(src)
    context, h = model.decoder.init_state((outputs, hidden))
    torch.testing.assert_close(context, hidden[:, -1])
    logits, (context2, h2) = model.decoder(_tokens(2, 3, V_TGT), (context, h))
    assert logits.shape == (2, 3, V_TGT) and torch.equal(context, context2) and h2.shape == h.shape
    # the same context at every step: the GRU input is [e(y); c] with c repeated
    emb = model.decoder.embedding(_tokens(2, 3, V_TGT))
    rnn_in = torch.cat((emb, context.unsqueeze(1).expand(-1, 3, -1)), dim=-1)
    out, _ = model.decoder.rnn(rnn_in, h.transpose(0, 1).contiguous())
    torch.testing.assert_close(model.decoder.dense(out), logits)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_plain_decoder_starts_from_the_encoders_final_states(cell):
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS, cell=cell, attention=None).eval()
    outputs, hidden = model.encoder(_tokens(3, 6))
    context, start = model.decoder.init_state((outputs, hidden), torch.tensor([6, 4, 1]))
    assert start is hidden  # s_0: every layer's h_T (and memory cell, for an LSTM)
    torch.testing.assert_close(context, outputs[:, -1])  # c: the last layer's h_T


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("attention", ["additive", "dot", None])
def test_meta_device_forward(cell, attention):
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS, 0.1, cell=cell, attention=attention).to("meta")
    src = torch.zeros(3, 5, dtype=torch.long, device="meta")
    valid = torch.tensor([5, 3, 1], device="meta")
    for training in (True, False):
        model.train(training)
        out = model(src, src[:, :4], valid)
        assert out.shape == (3, 4, V_TGT) and out.device.type == "meta"


def test_bad_arguments():
    with pytest.raises(ValueError, match="cell must be one of \\['gru', 'lstm'\\], got 'rnn'"):
        ab.Seq2SeqEncoder(V_SRC, EMBED, HIDDEN, LAYERS, cell="rnn")
    with pytest.raises(ValueError, match="attention must be 'additive' or 'dot', got 'cosine'"):
        ab.Seq2SeqAttentionDecoder(V_TGT, EMBED, HIDDEN, LAYERS, attention="cosine")
    with pytest.raises(ValueError, match="num_layers must be at least 1, got 0"):
        ab.Seq2SeqEncoder(V_SRC, EMBED, HIDDEN, 0)
    enc = ab.Seq2SeqEncoder(V_SRC, EMBED, HIDDEN, LAYERS)
    with pytest.raises(ValueError, match="X must be a \\(batch, num_steps\\) tensor of token ids, got \\(5,\\)"):
        enc(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="integer token ids, got dtype torch.float32"):
        enc(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="attention must be 'additive' or 'dot', got 'cosine'"):
        ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS, attention="cosine")


def test_plain_decoder_rejects_bad_input():
    with pytest.raises(ValueError, match="cell must be one of \\['gru', 'lstm'\\], got 'rnn'"):
        ab.Seq2SeqDecoder(V_TGT, EMBED, HIDDEN, LAYERS, cell="rnn")
    with pytest.raises(ValueError, match="num_hiddens must be at least 1, got 0"):
        ab.Seq2SeqDecoder(V_TGT, EMBED, 0, LAYERS)
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS, attention=None)
    state = model.decoder.init_state(model.encoder(_tokens(2, 5)))
    with pytest.raises(ValueError, match="X must be a \\(batch, num_steps\\) tensor of token ids, got \\(3,\\)"):
        model.decoder(torch.zeros(3, dtype=torch.long), state)
    with pytest.raises(ValueError, match="integer token ids, got dtype torch.float32"):
        model.decoder(torch.zeros(2, 3), state)
    with pytest.raises(ValueError, match="attention must be 'additive' or 'dot', got 'none'"):
        ab.experiments.translation.train_translator(_synthetic_data(), attention="none", epochs=1, progress=False)


# --- loss ---------------------------------------------------------------------------------------

PAD = 0


def test_masked_loss_matches_torch_ignore_index_and_counts_tokens():
    logits = torch.randn(3, 4, 7)
    labels = torch.tensor([[3, 2, PAD, PAD], [4, 4, 5, 2], [2, PAD, PAD, PAD]])
    mean, count = ab.masked_cross_entropy(logits, labels, PAD)
    reference = F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1), ignore_index=PAD)
    torch.testing.assert_close(mean, reference)
    assert count == 7


def test_masked_loss_ignores_padded_positions():
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[3, 2, PAD, PAD, PAD], [4, 4, 5, 6, 2]])
    changed = logits.clone()
    changed[0, 2:] = 100 * torch.randn(3, 7)
    torch.testing.assert_close(ab.masked_cross_entropy(logits, labels, PAD)[0],
                               ab.masked_cross_entropy(changed, labels, PAD)[0])
    only_pad = torch.full((2, 5), PAD)
    mean, count = ab.masked_cross_entropy(logits, only_pad, PAD)
    assert mean == 0 and count == 0
    with pytest.raises(ValueError, match="logits must be \\(batch, steps, vocab\\)"):
        ab.masked_cross_entropy(logits, labels[:, :4], PAD)


def test_translation_loss_unchanged_when_padded_targets_change():
    """Teacher forcing: target inputs after <eos> only influence positions whose label is <pad>."""
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS).eval()
    pad = 1
    src, valid = _tokens(2, 5), torch.tensor([5, 3])
    label = torch.tensor([[4, 5, 2, pad, pad], [6, 2, pad, pad, pad]])
    tgt_in = torch.tensor([[3, 4, 5, 2, pad], [3, 6, 2, pad, pad]])
    loss_fn = ab.translation_loss(pad)
    base, count = loss_fn(model, (src, tgt_in, valid, label))
    scrambled = tgt_in.clone()
    scrambled[0, 3:] = torch.tensor([7, 8])
    scrambled[1, 2:] = torch.tensor([9, 10, 11])
    torch.testing.assert_close(loss_fn(model, (src, scrambled, valid, label))[0], base)
    assert count == 5
    # …but changing a real target input does change it
    real = tgt_in.clone()
    real[0, 1] = 9
    assert not torch.allclose(loss_fn(model, (src, real, valid, label))[0], base)


# --- decoding -----------------------------------------------------------------------------------

BOS, EOS, A, B, C = 1, 2, 3, 4, 5


class TableDecoder(ab.Decoder):
    """Next-token log-probabilities depend only on the input token; counts its calls."""

    def __init__(self, table):
        super().__init__()
        self.table = table  # (vocab, vocab) probabilities, row = input token
        self.calls = 0
        self.dummy = nn.Parameter(torch.zeros(()))

    def init_state(self, enc_all_outputs, valid_len=None):
        return (enc_all_outputs, torch.zeros(enc_all_outputs.shape[0]))

    def forward(self, X, state):
        self.calls += 1
        enc, steps = state
        logits = self.table[X[:, -1]].log().unsqueeze(1)
        return logits, (enc, steps + 1)


class TableModel(nn.Module):
    def __init__(self, table):
        super().__init__()
        self.encoder = lambda src, valid_len: src.float()
        self.decoder = TableDecoder(table)


def _table(rows):
    table = torch.full((6, 6), 1e-6)
    for token, probs in rows.items():
        for nxt, p in probs.items():
            table[token, nxt] = p
    return table / table.sum(1, keepdim=True)


def test_greedy_stops_at_eos_per_example_and_when_all_stopped():
    # bos -> A -> B -> eos; the source's first token picks where each example starts
    table = _table({BOS: {A: 0.9, EOS: 0.1}, A: {B: 0.8, A: 0.2}, B: {EOS: 0.7, C: 0.3}, C: {C: 1.0},
                    EOS: {C: 1.0}})
    model = TableModel(table)
    tokens, attention = ab.greedy_search(model, torch.zeros(2, 3, dtype=torch.long), None, BOS, EOS, max_steps=9)
    assert tokens == [[A, B], [A, B]]  # <eos> not included; nothing after it
    assert model.decoder.calls == 3 and attention == []  # stopped as soon as every example ended
    # without an <eos> in reach, max_steps bounds the output
    loop = TableModel(_table({BOS: {C: 1.0}, C: {C: 1.0}}))
    tokens, _ = ab.greedy_search(loop, torch.zeros(1, 2, dtype=torch.long), None, BOS, EOS, max_steps=4)
    assert tokens == [[C, C, C, C]]
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        ab.greedy_search(loop, torch.zeros(1, 2, dtype=torch.long), None, BOS, EOS, max_steps=0)


def test_greedy_on_a_real_model_keeps_per_step_attention():
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS)
    model.train()
    tokens, attention = ab.greedy_search(model, _tokens(2, 5), torch.tensor([5, 2]), BOS, EOS, 6,
                                         save_attention=True)
    assert model.training  # the mode is restored
    assert 1 <= len(attention) <= 6 and all(len(t) <= 6 for t in tokens)
    for step in attention:
        assert len(step) == 1 and step[0].shape == (2, 1, 5)
        assert torch.all(step[0][1, 0, 2:] == 0)
    assert all(EOS not in t for t in tokens)


def test_beam_search_beats_greedy_on_a_trap():
    # greedy takes A (0.6) then the best is <eos> at 0.3: p = 0.18;
    # beam search finds B (0.4) then <eos> at 0.9: p = 0.36
    table = _table({BOS: {A: 0.6, B: 0.4}, A: {EOS: 0.3, A: 0.25, C: 0.25, B: 0.2}, B: {EOS: 0.9, C: 0.1},
                    C: {EOS: 1.0}})
    model = TableModel(table)
    src = torch.zeros(1, 2, dtype=torch.long)
    assert ab.greedy_search(model, src, None, BOS, EOS, 5)[0] == [[A]]
    assert ab.beam_search(model, src, None, BOS, EOS, 5, beam_size=2) == [[B]]
    assert ab.beam_search(model, src, None, BOS, EOS, 5, beam_size=1) == [[A]]
    with pytest.raises(ValueError, match="beam_size must be at least 1, got 0"):
        ab.beam_search(model, src, None, BOS, EOS, 5, beam_size=0)


def test_beam_size_one_equals_greedy_on_a_real_model():
    torch.manual_seed(0)
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS, attention="additive").eval()
    src, valid = _tokens(4, 5, seed=3), torch.tensor([5, 4, 2, 1])
    greedy, _ = ab.greedy_search(model, src, valid, BOS, EOS, 7)
    assert ab.beam_search(model, src, valid, BOS, EOS, 7, beam_size=1, alpha=0.0) == greedy


def _logp(model, src, valid, seq, max_steps):
    """Log-probability of the output ``seq`` (one example), ``<eos>`` included when it fits, by teacher forcing."""
    full = [BOS] + seq + ([EOS] if len(seq) < max_steps else [])
    logits = model(src, torch.tensor([full[:-1]]), valid)
    return F.log_softmax(logits, -1)[0, torch.arange(len(full) - 1), torch.tensor(full[1:])].sum().item()


def test_plain_model_decodes_greedily_and_with_beams():
    torch.manual_seed(2)
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS, attention=None).eval()
    src, valid = _tokens(3, 5, seed=5), torch.tensor([5, 3, 1])
    greedy, attention = ab.greedy_search(model, src, valid, BOS, EOS, 6, save_attention=True)
    assert len(greedy) == 3 and all(len(t) <= 6 and EOS not in t for t in greedy)
    assert attention and all(step is None for step in attention)  # a plain decoder has no weights to keep
    assert ab.beam_search(model, src, valid, BOS, EOS, 6, beam_size=1, alpha=0.0) == greedy
    # beam search picks rows of the (context, hidden) state: its best hypothesis is at least as
    # probable as the greedy one under a fresh teacher-forced run
    (best,) = ab.beam_search(model, src[:1], valid[:1], BOS, EOS, 6, beam_size=3, alpha=0.0)
    assert _logp(model, src[:1], valid[:1], best, 6) >= _logp(model, src[:1], valid[:1], greedy[0], 6) - 1e-5


def test_reorder_state_picks_rows_of_nested_states():
    state = (torch.arange(6).reshape(3, 2), [torch.arange(3), None], {"k": torch.arange(3) * 10}, 7)
    picked = ab.models.seq2seq.reorder_state(nn.Module(), state, torch.tensor([2, 2, 0]))
    assert picked[0].tolist() == [[4, 5], [4, 5], [0, 1]]
    assert picked[1][0].tolist() == [2, 2, 0] and picked[1][1] is None
    assert picked[2]["k"].tolist() == [20, 20, 0] and picked[3] == 7

    class Custom(nn.Module):
        def reorder_state(self, s, index):
            return "custom"

    assert ab.models.seq2seq.reorder_state(Custom(), state, torch.tensor([0])) == "custom"


def test_beam_search_reorders_rnn_states_correctly():
    """Beam search on the RNN model scores its best hypothesis exactly as a fresh decoder run does."""
    torch.manual_seed(1)
    model = ab.make_seq2seq(V_SRC, V_TGT, EMBED, HIDDEN, LAYERS, cell="lstm").eval()
    src, valid = _tokens(1, 5, seed=4), torch.tensor([5])
    (best,) = ab.beam_search(model, src, valid, BOS, EOS, 6, beam_size=3, alpha=0.0)
    greedy, _ = ab.greedy_search(model, src, valid, BOS, EOS, 6)
    assert _logp(model, src, valid, best, 6) >= _logp(model, src, valid, greedy[0], 6) - 1e-5


# --- translating real sentences ------------------------------------------------------------------

def _synthetic_data(batch_size=64):
    return ab.load_translation(batch_size=batch_size, pairs=ab.data.text.synthetic_pairs(640), verbose=False)


@pytest.mark.slow
def test_the_fallback_corpus_is_learnt_quickly(one_thread):
    torch.manual_seed(0)
    data = _synthetic_data(batch_size=128)
    model = ab.make_seq2seq(len(data.src_vocab), len(data.tgt_vocab), 32, 64, 1, 0.0)
    ab.fit(model, data.train_loader(), ab.translation_loss(data.tgt_vocab[ab.data.text.PAD]), epochs=15, lr=0.01,
           clip_grad=1.0, progress=False)
    scores = ab.experiments.translation.evaluate_translation(model, data, "val")
    assert scores["bleu"] > 0.9, scores
    engs = ["go .", "i lost .", "he's calm .", "i'm home ."]
    fras = ["va !", "j'ai perdu .", "il est calme .", "je suis chez moi ."]
    table = ab.translate(model, data, engs, fras)
    assert [r.bleu for r in table] == [1.0] * 4, [r.text for r in table]


def test_translate_handles_unknown_empty_and_long_sentences(capsys):
    data = _synthetic_data()
    model = ab.make_seq2seq(len(data.src_vocab), len(data.tgt_vocab), 8, 8, 1)
    out = ab.translate(model, data, ["zorglub !", "", "i'm home i'm home i'm home i'm home ."],
                       ["va !", "va !", "je suis chez moi ."], save_attention=True)
    assert len(out) == 3 and all(len(r.tokens) <= data.num_steps for r in out)
    assert all(0.0 <= r.bleu <= 1.0 for r in out)
    for r in out:
        assert r.attention is None or r.attention.shape[1] == data.num_steps
    assert ab.translate(model, data, []) == []
    with pytest.raises(ValueError, match="2 sentences but 1 references"):
        ab.translate(model, data, ["a", "b"], ["c"])
    rows = ab.experiments.translation.translation_table(model, data, ["go ."], ["va !"])
    out = capsys.readouterr().out.splitlines()
    assert len(rows) == 1 and out[0] == "go ." and out[1] == f"  -> {rows[0].text}"
    assert "va !" in out[2] and f"{rows[0].bleu:.3f}" in out[2]
    assert len(out[2]) <= 40  # a phone's column (an untrained model's output may be longer)


def test_narrow_printers_fit_a_phone(capsys):
    translation = ab.experiments.translation
    translation.print_records({"GRU": {"val loss": "4.123", "val BLEU": "0.070"}})
    assert capsys.readouterr().out.splitlines() == ["GRU", "  val loss  4.123", "  val BLEU  0.070"]
    reference = "je suis chez moi ."
    for prediction in ("je suis chez chez moi .", "je suis ."):
        translation.print_bleu_parts(prediction, reference, ab.bleu_parts(prediction, reference))
        out = capsys.readouterr().out
        assert max(len(line) for line in out.splitlines()) <= 40
        grams = [g for order in ab.bleu_parts(prediction, reference)["orders"] for g in order["grams"]]
        assert all(g in out for g in grams) and "BP = exp(" in out


def test_attention_map_labels_tokens():
    data = _synthetic_data()
    model = ab.make_seq2seq(len(data.src_vocab), len(data.tgt_vocab), 8, 8, 1)
    fig = ab.experiments.translation.alignment_figure(model, data, "i'm home .", "je suis chez moi .")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["i'm", "home", ".", ab.data.text.EOS]
    (result,) = ab.translate(model, data, ["i'm home ."], save_attention=True)
    assert len(ax.get_yticklabels()) == result.attention.shape[0]
    assert fig._suptitle.get_text().startswith("i'm home . => ") and "BLEU" in fig._suptitle.get_text()
    fig = ab.experiments.translation.alignment_figure(model, data, "zorglub .")
    assert fig.axes[0].get_xticklabels()[0].get_text() == "zorglub (unk)"


def test_plain_model_translates_without_attention_maps():
    data = _synthetic_data()
    model = ab.make_seq2seq(len(data.src_vocab), len(data.tgt_vocab), 8, 8, 1, attention=None)
    (result,) = ab.translate(model, data, ["i'm home ."], ["je suis chez moi ."], save_attention=True)
    assert result.attention is None and 0.0 <= result.bleu <= 1.0
    (beamed,) = ab.translate(model, data, ["go ."], beam_size=2)
    assert len(beamed.tokens) <= data.num_steps and beamed.attention is None
    with pytest.raises(ValueError, match="exposed no attention weights"):
        ab.experiments.translation.alignment_figure(model, data, "i'm home .")


def test_evaluate_by_length_splits_the_mean_by_source_length():
    data = _synthetic_data()
    model = ab.make_seq2seq(len(data.src_vocab), len(data.tgt_vocab), 8, 8, 1)
    groups = ab.experiments.translation.evaluate_by_length(model, data, "val")
    assert list(groups) == sorted(groups) and sum(g["pairs"] for g in groups.values()) == data.num_val
    val_pairs = data.raw_pairs[data.num_train:data.num_train + data.num_val]
    lengths = sorted({len(ab.data.text.tokenize_nmt(ab.data.text.preprocess_nmt(en))) - 1 for en, _ in val_pairs})
    assert list(groups) == lengths  # tokens before <eos>, punctuation included
    overall = ab.experiments.translation.evaluate_translation(model, data, "val")
    for key in ("bleu", "exact"):
        weighted = sum(g["pairs"] * g[key] for g in groups.values()) / data.num_val
        assert weighted == pytest.approx(overall[key])
        assert all(0.0 <= g[key] <= 1.0 for g in groups.values())
    with pytest.raises(ValueError, match="split must be 'train' or 'val', got 'test'"):
        ab.experiments.translation.evaluate_by_length(model, data, "test")
    no_val = ab.load_translation(batch_size=64, num_val=0, pairs=ab.data.text.synthetic_pairs(640), verbose=False)
    with pytest.raises(ValueError, match="split 'val' of the data has no pairs"):
        ab.experiments.translation.evaluate_by_length(model, no_val, "val")


# --- the chapter's assignment checker ---------------------------------------------------------------

# The seeds of the visible cases (0) and of some hidden runs: a checker's cases must do their job at each.
CASE_OFFSETS = (0, 1, 2, 3, 5, 8, 13, 97, 4242, 123457)


def _mean_of_sentence_means(logits, labels, pad_id):
    """A plausible wrong masked loss: averages per sentence, then over sentences."""
    per = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    mask = (labels != pad_id).float()
    return ((per * mask).sum(1) / mask.sum(1).clamp(min=1)).mean(), int(mask.sum())


def test_checker_accepts_reference_and_rejects_wrong_solutions(capsys):
    assert ch04.check_masked_cross_entropy(ch04.reference_masked_cross_entropy)

    def mean_over_all(logits, labels, pad_id):  # forgets the mask: padding drags the mean
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        return loss, labels.numel()

    report = ch04.check_masked_cross_entropy(mean_over_all)
    assert not report and report.score < 1

    capsys.readouterr()
    assert not ch04.check_masked_cross_entropy(_mean_of_sentence_means)
    hints = [line for line in capsys.readouterr().out.splitlines() if "✘" in line]
    # every failed case's hint says what it compares: one average over the whole batch, not per sentence
    assert hints and all("one average over the whole batch" in line for line in hints), hints

    def todo(logits, labels, pad_id):
        raise NotImplementedError

    report = ch04.check_masked_cross_entropy(todo)
    assert report.not_implemented and report.score == 0
    assert "not implemented" in capsys.readouterr().out


@pytest.mark.parametrize("offset", CASE_OFFSETS)
def test_a_mean_of_sentence_means_fails_the_case_of_different_lengths(offset):
    # the case exists to catch this mistake: it must, at every seed, and its message must name it
    with hidden_cases(offset):
        assert ch04.check_masked_cross_entropy(ch04.reference_masked_cross_entropy, verbose=False)
        report = ch04.check_masked_cross_entropy(_mean_of_sentence_means, verbose=False)
    failed = {name: why for name, ok, why in report.results if not ok}
    assert "sentences of different lengths" in failed, report.results
    why = failed["sentences of different lengths"]
    assert "per sentence" in why and "one average over the whole batch" in why, why
    assert all(_causes("masked_cross_entropy", _mean_of_sentence_means, offset).values())


def _causes(name, fn, offset):
    """``{case name: the cause its check names}`` for the cases ``fn`` fails at seed ``offset``:
    the words the grader may show for a hidden case, where it shows no value."""
    with hidden_cases(offset):
        _, cases = collect_cases(name)
    verdicts = {case.name: case.check(fn(*case.args, **case.kwargs)) for case in cases}
    return {name: getattr(why, "cause", "") for name, why in verdicts.items() if why is not None}


def test_train_and_compare_translators_record_validation_loss(one_thread):
    data = _synthetic_data(batch_size=128)
    tiny = dict(embed_size=8, num_hiddens=8, num_layers=1, epochs=2, progress=False)
    rows = ab.experiments.translation.compare_translators(data, {"additive": dict(attention="additive"), "plain": dict(attention=None)},
                                  **tiny)
    assert [r["variant"] for r in rows] == ["additive", "plain"]
    for row in rows:
        assert len(row["history"].metrics["val loss"]) == 2
        assert row["val loss"] == pytest.approx(ab.experiments.translation.validation_loss(row["model"], data))
        assert 0.0 <= row["val BLEU"] <= 1.0 and math.isfinite(row["train loss"])
    assert isinstance(rows[1]["model"].decoder, ab.Seq2SeqDecoder)  # attention=None: the plain model
    # the same seed gives the same model, with or without attention
    again, _ = ab.experiments.translation.train_translator(data, attention="additive", **tiny)
    for p, q in zip(again.parameters(), rows[0]["model"].parameters()):
        torch.testing.assert_close(p, q)
    plain, _ = ab.experiments.translation.train_translator(data, attention=None, **tiny)
    for p, q in zip(plain.parameters(), rows[1]["model"].parameters()):
        torch.testing.assert_close(p, q)
    with pytest.raises(ValueError, match="split must be 'train' or 'val', got 'test'"):
        ab.experiments.translation.evaluate_translation(again, data, "test")


def test_train_translator_follows_the_book_seed(monkeypatch):
    data = _synthetic_data(batch_size=128)
    tiny = dict(embed_size=8, num_hiddens=8, num_layers=1, epochs=1, progress=False)
    monkeypatch.setenv("ATTENTION_BOOK_SEED", "3")
    by_default, _ = ab.experiments.translation.train_translator(data, **tiny)
    pinned, _ = ab.experiments.translation.train_translator(data, seed=3, **tiny)
    other, _ = ab.experiments.translation.train_translator(data, seed=4, **tiny)
    for p, q in zip(by_default.parameters(), pinned.parameters()):
        torch.testing.assert_close(p, q)
    assert any(not torch.equal(p, q) for p, q in zip(pinned.parameters(), other.parameters()))


def _bleu_without_clipping(pred_seq, label_seq, k=2):
    """A plausible wrong BLEU: every predicted n-gram found in the label counts, however often."""
    pred, label = pred_seq.split(), label_seq.split()
    if not pred:  # an empty prediction scores 0 (the checker's own case); the mistake is elsewhere
        return 0.0
    score = math.exp(min(0.0, 1 - len(label) / len(pred)))
    for n in range(1, min(k, len(pred)) + 1):
        grams = {tuple(label[i:i + n]) for i in range(len(label) - n + 1)}
        hits = sum(tuple(pred[i:i + n]) in grams for i in range(len(pred) - n + 1))
        score *= (hits / (len(pred) - n + 1)) ** (0.5 ** n)
    return score


def _bleu_without_the_min(pred_seq, label_seq, k=2):
    """A plausible wrong BLEU: exp(1 - len_label / len_pred) without the min, a bonus for long predictions."""
    if not pred_seq.split():
        return 0.0
    ratio = len(label_seq.split()) / len(pred_seq.split())
    right, wrong = math.exp(min(0.0, 1 - ratio)), math.exp(1 - ratio)
    return ab.bleu(pred_seq, label_seq, k) / right * wrong


@pytest.mark.parametrize("offset", CASE_OFFSETS)
def test_bleu_checker_accepts_the_reference_and_names_missing_clipping(offset):
    with hidden_cases(offset):
        assert ch04.check_bleu(ab.bleu, verbose=False)
        report = ch04.check_bleu(_bleu_without_clipping, verbose=False)
    failed = [(name, why) for name, ok, why in report.results if not ok]
    assert failed and "clipping" in failed[0][0], failed
    # every failure of an unclipped count says so, and none sends the learner to the brevity penalty
    assert all("clip" in why and "penalty" not in why for _, why in failed), failed
    assert all("clip" in cause for cause in _causes("bleu", _bleu_without_clipping, offset).values())
    # the long prediction's case tests the penalty alone: counting without clipping passes it
    assert "a long prediction pays no penalty" not in dict(failed), failed


@pytest.mark.parametrize("offset", CASE_OFFSETS)
def test_bleu_checker_sends_a_wrong_penalty_to_the_penalty(offset):
    with hidden_cases(offset):
        report = ch04.check_bleu(_bleu_without_the_min, verbose=False)
    failed = {name: why for name, ok, why in report.results if not ok}
    why = failed["a long prediction pays no penalty"]
    assert "penalty" in why and "clip" not in why, why
    # the clipping case has a prediction as long as its label: a wrong penalty passes it
    assert "a repeated word counts once (clipping)" not in failed, failed


def test_teacher_forced_scores_take_the_validation_loss_apart(one_thread):
    data = _synthetic_data(batch_size=128)
    model, _ = ab.experiments.translation.train_translator(data, embed_size=8, num_hiddens=8, num_layers=1, epochs=2, progress=False)
    scores = ab.experiments.translation.teacher_forced_scores(model, data)
    assert scores["loss"] == pytest.approx(ab.experiments.translation.validation_loss(model, data), rel=1e-5)
    assert 0.0 <= scores["accuracy"] <= 1.0
    # a wrong token costs at least log 2 (its right answer has at most half the probability)
    assert scores["loss when wrong"] >= math.log(2) - 1e-6
    # the mean loss is the mix of the losses of right and wrong tokens, so below the wrong ones'
    assert scores["loss"] <= scores["loss when wrong"] + 1e-6


def test_teacher_forced_scores_of_a_model_that_always_knows():
    data = _synthetic_data(batch_size=128)

    class Oracle(nn.Module):
        """Scores the true label far above the rest at every position (it peeks at the labels)."""

        def __init__(self):
            super().__init__()
            self.bias = nn.Parameter(torch.zeros(()))

        def forward(self, src, tgt_input, src_valid_len):
            labels = labels_of[src.data_ptr()]
            return F.one_hot(labels, len(data.tgt_vocab)).float() * 30.0 + self.bias

    batches = list(data.val_loader())
    labels_of = {b[0].data_ptr(): b[3] for b in batches}
    data.val_loader = lambda: batches
    scores = ab.experiments.translation.teacher_forced_scores(Oracle(), data)
    assert scores["accuracy"] == 1.0 and scores["loss"] < 1e-6 and scores["loss when wrong"] == 0.0


@pytest.mark.parametrize("attention", [None, "additive"])
def test_greedy_with_and_without_the_cache_gives_the_same_tokens(attention):
    # issue 29: one greedy decoder; the RNN's hidden state and the Transformer's key/value cache are
    # both "the cache": re-running the whole prefix from the first state must pick the same tokens
    from attention_book.models.seq2seq import greedy

    torch.manual_seed(0)
    models = [ab.make_seq2seq(V_SRC, V_TGT, 8, 16, 2, 0.0, attention=attention),
              ab.make_transformer(V_SRC, V_TGT, 16, 32, 2, 2, 0.0)]
    src, valid = _tokens(3, 5), torch.tensor([5, 3, 1])
    for model in models:
        model.eval()
        state = model.decoder.init_state(model.encoder(src, valid), valid)
        bos = torch.full((3, 1), BOS)
        cached, _ = greedy(model.decoder, state, bos, 7, EOS)
        uncached, first = greedy(model.decoder, state, bos, 7, EOS, use_cache=False)
        assert torch.equal(cached, uncached) and first is state
        assert ab.greedy_search(model, src, valid, BOS, EOS, 7)[0] == ab.greedy_without_cache(
            model, src, valid, BOS, EOS, 7)
