"""Chapter 5 helpers: the offset task, head ablation, collect_attention (offset_task.py); the chapter 5 assignment is tested in test_assignments.py."""

from collections import Counter

import pytest
import torch
from torch import nn

import attention_book as ab


def train_run(num_heads, *, num_train=2000, epochs=6, seed=0, offsets=ab.experiments.offset_task.OFFSETS):
    """One model trained as chapter 5's sweep trains each of its models."""
    batches, X_test, Y_test = ab.experiments.offset_task.offset_task_data(num_train, 1000 if num_train >= 1000 else 32, seed=seed,
                                                  offsets=offsets, device="cpu")
    torch.manual_seed(seed)
    model = ab.experiments.offset_task.OffsetTaskModel(num_heads=num_heads, num_offsets=len(offsets))
    history = ab.fit(model, batches, ab.experiments.offset_task.offset_task_loss, epochs=epochs, lr=3e-3, device="cpu", progress=False)
    return ab.experiments.offset_task.HeadRun(num_heads, model, history, ab.accuracy(model, [(X_test, Y_test)]), X_test, Y_test,
                      tuple(offsets), seed)


def test_offset_task_data_splits_one_draw_into_batches_and_held_out_examples():
    batches, X_test, Y_test = ab.experiments.offset_task.offset_task_data(130, 20, batch_size=64, seed=2, device="cpu")
    X, Y = ab.experiments.offset_task.make_offset_task(150, seed=2)
    assert [len(b[0]) for b in batches] == [64, 64, 2]
    torch.testing.assert_close(torch.cat([b[0] for b in batches]), X[:130])
    torch.testing.assert_close(torch.cat([b[1] for b in batches]), Y[:130])
    assert torch.equal(X_test, X[130:]) and torch.equal(Y_test, Y[130:])
    model = ab.experiments.offset_task.OffsetTaskModel()
    loss = ab.experiments.offset_task.offset_task_loss(model, batches[0])
    assert loss.dim() == 0 and abs(loss.item() - torch.log(torch.tensor(16.0)).item()) < 1.0  # near chance at start
    with pytest.raises(ValueError, match="batch_size"):
        ab.experiments.offset_task.offset_task_data(10, 5, batch_size=0)


def test_offset_task_labels():
    X, Y = ab.experiments.offset_task.make_offset_task(50, seq_len=6, vocab_size=5, offsets=(-1, 2), seed=3)
    assert X.shape == (50, 6) and Y.shape == (50, 6, 2) and int(X.max()) < 5
    for i in range(6):
        torch.testing.assert_close(Y[:, i, 0], X[:, (i - 1) % 6])
        torch.testing.assert_close(Y[:, i, 1], X[:, (i + 2) % 6])
    X2, _ = ab.experiments.offset_task.make_offset_task(50, seq_len=6, vocab_size=5, offsets=(-1, 2), seed=3)
    assert torch.equal(X, X2)
    X, Y = ab.experiments.offset_task.make_offset_task(4, seed=0)  # the chapter's defaults: 8 tokens of 16 symbols, four offsets
    assert X.shape == (4, 8) and Y.shape == (4, 8, len(ab.experiments.offset_task.OFFSETS)) and ab.experiments.offset_task.OFFSETS == (-2, -1, 1, 3)


def test_one_offset_per_head_yardstick():
    assert ab.experiments.offset_task.one_offset_per_head_accuracy(4) == 1.0 == ab.experiments.offset_task.one_offset_per_head_accuracy(8)
    assert ab.experiments.offset_task.one_offset_per_head_accuracy(1) == pytest.approx(0.25 + 0.75 / 16)
    assert ab.experiments.offset_task.one_offset_per_head_accuracy(2, num_offsets=2, vocab_size=8) == 1.0


def test_ablating_a_head_equals_zeroing_its_output_columns():
    torch.manual_seed(0)
    mha = ab.MultiHeadAttention(8, 4, bias=True).eval()
    X = torch.randn(2, 5, 8)
    with torch.no_grad():
        q, k, v = (ab.transpose_qkv(W(X), 4) for W in (mha.W_q, mha.W_k, mha.W_v))
        w = torch.softmax(q @ k.transpose(-1, -2) / 2 ** 0.5, dim=-1)
        per_head = w @ v  # (batch, heads, n, 2)
        per_head[:, 1] = 0
        per_head[:, 3] = 0
        want = mha.W_o(ab.transpose_output(per_head))
        with ab.experiments.offset_task.ablate_heads(mha, [1, 3]):
            got = mha(X, X, X)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
        # all heads gone: only the output bias is left; the hook is removed afterwards
        with ab.experiments.offset_task.ablate_heads(mha, range(4)):
            torch.testing.assert_close(mha(X, X, X), mha.W_o.bias.expand(2, 5, 8))
        assert not mha.W_o._forward_pre_hooks


def test_pruning_curve_reuses_the_drops_it_is_given():
    # the exercises' page measures the drops once and hands them on (issue 36)
    ot = ab.experiments.offset_task
    torch.manual_seed(0)
    model = ot.OffsetTaskModel(num_heads=4).eval()
    X, Y = ot.make_offset_task(64, seed=1)
    drops = ot.head_importance(model, model.attention, X, Y)
    assert ot.pruning_curve(model, model.attention, X, Y, importance=drops) == ot.pruning_curve(
        model, model.attention, X, Y)
    # a given order is followed, whatever the model would measure
    order, _ = ot.pruning_curve(model, model.attention, X, Y, importance=torch.tensor([3.0, 2.0, 1.0, 0.0]))
    assert order == [3, 2, 1, 0]
    with pytest.raises(ValueError, match=r"one number per head, shape \(4,\); got shape \(3,\)"):
        ot.pruning_curve(model, model.attention, X, Y, importance=torch.zeros(3))


def test_collect_attention_returns_one_four_d_tensor_per_call():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = ab.MultiHeadAttention(8, 2), ab.MultiHeadAttention(8, 4)
            self.dot = ab.DotProductAttention()

        def forward(self, X, valid_lens=None):
            X = self.a(X, X, X, valid_lens)
            X = self.b(X, X, X, valid_lens)
            return self.dot(X, X, X, valid_lens)

    model = Two().train()
    maps = ab.collect_attention(model, torch.randn(3, 5, 8), valid_lens=torch.tensor([5, 2, 3]))
    assert [tuple(m.shape) for m in maps] == [(3, 2, 5, 5), (3, 4, 5, 5), (3, 1, 5, 5)]  # one per module
    assert torch.all(maps[1][1, :, :, 2:] == 0)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(3, 2, 5))
    assert model.training  # mode restored
    with pytest.raises(ValueError, match="no attention module"):
        ab.collect_attention(nn.Linear(3, 3), torch.randn(2, 3))


@pytest.mark.slow
def test_heads_are_needed_one_per_lookup_and_four_heads_split_them():
    # the chapter's setting, a pinned seed: one head cannot deliver four lookups, four heads can
    runs = {h: [train_run(h)] for h in (1, 4)}
    one, four = runs[1][0], runs[4][0]
    assert one.accuracy < 0.5 and four.accuracy > 0.95, (one.accuracy, four.accuracy)
    mass = ab.experiments.offset_task.offset_attention(four)  # each head looks mostly at its own offset
    assert sorted(mass.argmax(-1).tolist()) == [0, 1, 2, 3], mass
    importance = ab.experiments.offset_task.head_importance(four.model, four.model.attention, four.X_test, four.Y_test)
    assert importance.shape == (4,) and torch.all(importance > 0.1), importance
    (w,) = ab.collect_attention(four.model, four.X_test[:100])
    mean = w.mean(0)  # (heads, q, k): every head has one preferred offset
    n = mean.shape[-1]
    offsets = []
    for h in range(4):
        best = [int(mean[h, i].argmax()) for i in range(n)]
        offset, count = Counter((b - i) % n for i, b in enumerate(best)).most_common(1)[0]
        assert count >= n - 2, f"head {h} has no preferred offset: it looks at {best}"
        offsets.append(offset)
    assert sorted(offsets) == sorted(o % n for o in ab.experiments.offset_task.OFFSETS), offsets
    order, accs = ab.experiments.offset_task.pruning_curve(four.model, four.model.attention, four.X_test, four.Y_test)
    assert sorted(order) == [0, 1, 2, 3] and len(accs) == 5 and accs[0] == pytest.approx(four.accuracy)
    assert accs[-1] < 0.2  # no head left: the model cannot see its inputs
    fig = ab.experiments.offset_task.head_count_figure(4, {4: four})
    assert len(fig.axes) == 5  # four heads + colour bar
    fig = ab.experiments.offset_task.head_count_accuracy_figure(runs)
    assert len(fig.axes) == 1


def test_meta_device_forward():
    model = ab.experiments.offset_task.OffsetTaskModel(vocab_size=5, seq_len=6, num_hiddens=8, num_heads=2, num_offsets=3).to("meta")
    X = torch.randint(0, 5, (3, 6)).to("meta")
    assert model(X).shape == (3, 6, 3, 5)


def test_bad_inputs():
    with pytest.raises(ValueError, match="different positions modulo seq_len=4"):
        ab.experiments.offset_task.make_offset_task(10, seq_len=4, offsets=(1, 5))
    with pytest.raises(ValueError, match="offsets must be a non-empty sequence of ints"):
        ab.experiments.offset_task.make_offset_task(10, offsets=())
    with pytest.raises(ValueError, match="seq_len must be at least 2"):
        ab.experiments.offset_task.make_offset_task(10, seq_len=1)
    mha = ab.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"heads must lie in \[0, 1\], got 2"):
        with ab.experiments.offset_task.ablate_heads(mha, [2]):
            pass
    with pytest.raises(ValueError, match="expected a MultiHeadAttention"):
        with ab.experiments.offset_task.ablate_heads(nn.Linear(2, 2), [0]):
            pass
    with pytest.raises(ValueError, match=r"trained head counts: \[1, 2\]"):
        ab.experiments.offset_task.head_count_figure(4, {1: None, 2: None})


def test_eight_head_maps_wrap_onto_rows_of_four():
    run = train_run(8, num_train=64, epochs=1)
    fig = ab.experiments.offset_task.head_maps_figure(run, importance=torch.arange(8) / 100)
    maps = fig.axes[:-1]
    assert len(maps) == 8
    assert [ax.get_title().splitlines()[0] for ax in maps] == [f"head {h}" for h in range(8)]
    assert len({round(ax.get_position().y0, 3) for ax in maps}) == 2  # two rows


def test_offset_attention_sums_each_heads_weight_on_the_task_offsets():
    run = train_run(2, num_train=64, epochs=1, seed=1, offsets=(-1, 2))
    assert run.offsets == (-1, 2) and run.seed == 1
    mass = ab.experiments.offset_task.offset_attention(run, num_examples=16)
    assert mass.shape == (2, 2) and torch.all(mass >= 0) and torch.all(mass.sum(-1) <= 1 + 1e-5)
    (w,) = ab.collect_attention(run.model, run.X_test[:16])
    n = w.shape[-1]
    want = torch.stack([w[:, 0, i, (i - 1) % n] for i in range(n)]).mean()
    torch.testing.assert_close(mass[0, 0], want)


def test_offset_task_follows_the_book_seed(monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_SEED", "4")
    X, _ = ab.experiments.offset_task.make_offset_task(10)
    X4, _ = ab.experiments.offset_task.make_offset_task(10, seed=4)
    assert torch.equal(X, X4)
