"""Tests of chapter 4's long-input experiment: the copy task, its batches, scores and figures."""

import matplotlib.pyplot as plt
import pytest
import torch

import attention_book as ab

pytestmark = pytest.mark.usefixtures("one_thread")


def test_copy_batches_teacher_force_the_source_itself():
    batches = ab.experiments.long_inputs.copy_batches(6, batch_size=4, min_len=2, max_len=9, vocab_size=5, seed=1)
    assert len(batches) == 6
    lengths = set()
    for src, tgt_input, valid_len, label in batches:
        assert src.shape == tgt_input.shape == label.shape and valid_len.shape == (4,)
        assert torch.equal(label, src)  # the target is the source
        assert torch.all(tgt_input[:, 0] == ab.experiments.long_inputs.COPY_BOS)
        assert torch.equal(tgt_input[:, 1:], label[:, :-1])  # shifted right behind <bos>
        for row, n in zip(src, valid_len.tolist()):
            assert row[n - 1] == ab.experiments.long_inputs.COPY_EOS and torch.all(row[n:] == ab.experiments.long_inputs.COPY_PAD)
            assert torch.all((row[: n - 1] >= 3) & (row[: n - 1] < 3 + 5))
            lengths.add(n - 1)
        # sorted into batches by length: little padding
        assert int(valid_len.max() - valid_len.min()) <= 3
    assert min(lengths) >= 2 and max(lengths) <= 9 and len(lengths) > 3
    again = ab.experiments.long_inputs.copy_batches(6, batch_size=4, min_len=2, max_len=9, vocab_size=5, seed=1)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))


def test_copy_symbols_and_sequences():
    assert ab.experiments.long_inputs.copy_symbols([0, 1, 2, 3, 4, 10]) == ["<pad>", "<bos>", "<eos>", "a", "b", "h"]
    seqs = ab.experiments.long_inputs.make_copy_sequences([3, 5], vocab_size=4, seed=0)
    assert [len(s) for s in seqs] == [3, 5] and all(int(t) in range(3, 7) for s in seqs for t in s)


class _CopyDecoder(torch.nn.Module):
    """Writes the source back (or a constant symbol): a yardstick for the scorer."""

    def __init__(self, perfect: bool):
        super().__init__()
        self.perfect = perfect
        self.w = torch.nn.Parameter(torch.zeros(()))

    def init_state(self, src, valid_len):
        return (src, torch.zeros(src.shape[0], dtype=torch.long))

    def forward(self, Y, state):
        src, step = state
        token = src[torch.arange(src.shape[0]), step] if self.perfect else torch.full_like(step, 3)
        logits = torch.nn.functional.one_hot(token, 11).float().unsqueeze(1) + self.w
        return logits, (src, torch.clamp(step + 1, max=src.shape[1] - 1))


class _Identity(torch.nn.Module):
    def forward(self, src, valid_len=None):
        return src


def _Copier(perfect: bool):
    return ab.EncoderDecoder(_Identity(), _CopyDecoder(perfect))


def test_copy_accuracy_counts_symbols_in_place():
    perfect = ab.experiments.long_inputs.copy_accuracy_by_length(_Copier(True), [1, 4, 9], per_length=20, vocab_size=8, seed=0)
    assert perfect == {1: 1.0, 4: 1.0, 9: 1.0}
    constant = ab.experiments.long_inputs.copy_accuracy_by_length(_Copier(False), [30], per_length=50, vocab_size=8, seed=0)
    assert constant[30] == pytest.approx(1 / 8, abs=0.04)  # one symbol of eight: chance


def test_long_input_experiment_trains_both_models_on_the_same_batches():
    config = dict(vocab_size=4, min_len=2, max_len=6, embed_size=8, num_hiddens=16, steps=40, batch_size=16)
    runs = ab.experiments.long_inputs.long_input_experiment(num_seeds=2, seed=5, per_length=10, progress=False, **config)
    assert [r.seed for r in runs] == [5, 6]
    for run in runs:
        assert set(run.accuracy) == {"no attention", "attention"}
        assert isinstance(run.models["no attention"].decoder, ab.Seq2SeqDecoder)
        assert isinstance(run.models["attention"].decoder, ab.Seq2SeqAttentionDecoder)
        for acc in run.accuracy.values():
            assert sorted(acc) == [2, 3, 4, 5, 6] and all(0.0 <= a <= 1.0 for a in acc.values())
    # the same seed gives the same model
    model, _ = ab.experiments.long_inputs.train_copy_model("additive", seed=5, progress=False, **config)
    for p, q in zip(model.parameters(), runs[0].models["attention"].parameters()):
        torch.testing.assert_close(p, q)
    fig = ab.experiments.long_inputs.long_input_figure(runs, vocab_size=4)
    assert len(fig.axes[0].lines) == 2 * 2 + 2 + 1  # a line per seed and model, two means, chance
    plt.close(fig)
    fig = ab.experiments.long_inputs.copy_alignment_figure(runs[0].models["attention"], length=5, vocab_size=4)
    assert "copying 5 symbols" in fig._suptitle.get_text()
    plt.close(fig)
    with pytest.raises(ValueError, match="no attention weights"):
        ab.experiments.long_inputs.copy_alignment_figure(runs[0].models["no attention"], length=5, vocab_size=4)


def test_attention_steps_train_the_attention_model_on_the_first_batches_only():
    config = dict(vocab_size=4, min_len=2, max_len=6, embed_size=8, num_hiddens=16, steps=30, batch_size=8)
    (run,) = ab.experiments.long_inputs.long_input_experiment(num_seeds=1, seed=3, per_length=5, progress=False,
                                                              attention_steps=10, **config)
    assert run.histories["no attention"].steps == 30 and run.histories["attention"].steps == 10
    # the attention model of the run is the one trained on the first 10 of the 30 batches
    model, _ = ab.experiments.long_inputs.train_copy_model("additive", seed=3, progress=False, train_steps=10, **config)
    for p, q in zip(model.parameters(), run.models["attention"].parameters()):
        torch.testing.assert_close(p, q)
    with pytest.raises(ValueError, match="attention_steps"):
        ab.experiments.long_inputs.long_input_experiment(num_seeds=1, attention_steps=0, **config)


@pytest.mark.slow
def test_attention_copies_long_sources_the_plain_model_cannot():
    config = dict(vocab_size=8, min_len=2, max_len=30, embed_size=32, num_hiddens=64, steps=450)
    runs = ab.experiments.long_inputs.long_input_experiment(num_seeds=1, seed=0, per_length=30, progress=False, **config)
    acc = runs[0].accuracy
    long = {name: sum(a[n] for n in range(25, 31)) / 6 for name, a in acc.items()}
    assert long["attention"] > long["no attention"] + 0.15


@pytest.mark.parametrize("call, match", [
    (lambda: ab.experiments.long_inputs.copy_batches(0), "num_batches"),
    (lambda: ab.experiments.long_inputs.copy_batches(2, min_len=5, max_len=3), "max_len"),
    (lambda: ab.experiments.long_inputs.make_copy_sequences([3], vocab_size=1), "vocab_size"),
    (lambda: ab.experiments.long_inputs.make_copy_sequences([0]), "lengths"),
    (lambda: ab.experiments.long_inputs.copy_symbols([-1]), "ids"),
    (lambda: ab.experiments.long_inputs.long_input_experiment(num_seeds=0), "num_seeds"),
    (lambda: ab.experiments.long_inputs.long_input_figure([]), "runs"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()
