"""Chapter 5 helpers: the offset task, head ablation, collect_attention, the split_heads checker (offset_task.py)."""

from collections import Counter

import pytest
import torch
from torch import nn

import attention_book as ab


def test_offset_task_labels():
    X, Y = ab.make_offset_task(50, seq_len=6, vocab_size=5, offsets=(-1, 2), seed=3)
    assert X.shape == Y.shape == (50, 6) and int(X.max()) < 5
    for i in range(6):
        torch.testing.assert_close(Y[:, i], (X[:, (i - 1) % 6] - X[:, (i + 2) % 6]) % 5)
    X2, _ = ab.make_offset_task(50, seq_len=6, vocab_size=5, offsets=(-1, 2), seed=3)
    assert torch.equal(X, X2)


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
        with ab.ablate_heads(mha, [1, 3]):
            got = mha(X, X, X)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
        # all heads gone: only the output bias is left; the hook is removed afterwards
        with ab.ablate_heads(mha, range(4)):
            torch.testing.assert_close(mha(X, X, X), mha.W_o.bias.expand(2, 5, 8))
        assert not mha.W_o._forward_pre_hooks


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
def test_two_heads_learn_the_offset_task_and_specialise():
    run = ab.train_offset_task(2, seed=0, progress=False)  # the chapter's setting, a pinned seed
    assert run.accuracy > 0.9, f"two heads reached only {run.accuracy:.2f} test accuracy"
    importance = ab.head_importance(run.model, run.model.attention, run.X_test, run.Y_test)
    assert importance.shape == (2,) and torch.all(importance > 0.3), importance
    (w,) = ab.collect_attention(run.model, run.X_test[:100])
    mean = w.mean(0)  # (heads, q, k): each head looks mostly at one fixed offset
    n = mean.shape[-1]
    offsets = []
    for h in range(2):
        best = [int(mean[h, i].argmax()) for i in range(n)]
        offset, count = Counter((b - i) % n for i, b in enumerate(best)).most_common(1)[0]
        assert count >= n - 2, f"head {h} has no preferred offset: it looks at {best}"
        offsets.append(offset)
    assert sorted(offsets) == sorted([(-1) % n, 2]), offsets
    order, accs = ab.pruning_curve(run.model, run.model.attention, run.X_test, run.Y_test)
    assert sorted(order) == [0, 1] and len(accs) == 3 and accs[0] == pytest.approx(run.accuracy)
    assert accs[-1] < 0.3  # no head left: the model cannot see its inputs
    fig = ab.head_count_figure(2, {2: run})
    assert len(fig.axes) == 3  # two heads + colour bar


def test_meta_device_forward():
    model = ab.OffsetTaskModel(vocab_size=5, seq_len=6, num_hiddens=8, num_heads=2).to("meta")
    X = torch.randint(0, 5, (3, 6)).to("meta")
    assert model(X).shape == (3, 6, 5)


def test_bad_inputs():
    with pytest.raises(ValueError, match="two different positions"):
        ab.make_offset_task(10, seq_len=4, offsets=(1, 5))
    with pytest.raises(ValueError, match="seq_len must be at least 2"):
        ab.make_offset_task(10, seq_len=1)
    mha = ab.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"heads must lie in \[0, 1\], got 2"):
        with ab.ablate_heads(mha, [2]):
            pass
    with pytest.raises(ValueError, match="expected a MultiHeadAttention"):
        with ab.ablate_heads(nn.Linear(2, 2), [0]):
            pass
    with pytest.raises(ValueError, match=r"trained head counts: \[1, 2\]"):
        ab.head_count_figure(4, {1: None, 2: None})


def test_split_heads_checker():
    report = ab.assignments.check_split_heads(ab.transpose_qkv, verbose=False)
    assert report and report.score == 1.0

    def wrong(X, num_heads):  # right shape, heads take interleaved rows instead of column blocks
        b, n, d = X.shape
        return X.reshape(b, num_heads, n, d // num_heads)

    bad = ab.assignments.check_split_heads(wrong, verbose=False)
    assert not bad and bad.score < 1.0

    def todo(X, num_heads):
        raise NotImplementedError

    pending = ab.assignments.check_split_heads(todo, verbose=False)
    assert pending.not_implemented and pending.score == 0.0


def test_eight_head_maps_wrap_onto_rows_of_four():
    run = ab.train_offset_task(8, num_train=64, num_test=32, epochs=1, progress=False)
    fig = ab.plot_head_maps(run, importance=torch.arange(8) / 100)
    maps = fig.axes[:-1]
    assert len(maps) == 8
    assert [ax.get_title().splitlines()[0] for ax in maps] == [f"head {h}" for h in range(8)]
    assert len({round(ax.get_position().y0, 3) for ax in maps}) == 2  # two rows


def test_offset_attention_sums_each_heads_weight_on_the_task_offsets():
    run = ab.train_offset_task(2, num_train=64, num_test=32, epochs=1, seed=1, device="cpu", progress=False)
    assert run.offsets == (-1, 2) and run.seed == 1
    mass = ab.offset_attention(run, num_examples=16)
    assert mass.shape == (2, 2) and torch.all(mass >= 0) and torch.all(mass.sum(-1) <= 1 + 1e-5)
    (w,) = ab.collect_attention(run.model, run.X_test[:16])
    n = w.shape[-1]
    want = torch.stack([w[:, 0, i, (i - 1) % n] for i in range(n)]).mean()
    torch.testing.assert_close(mass[0, 0], want)


def test_offset_task_follows_the_book_seed(monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_SEED", "4")
    X, _ = ab.make_offset_task(10)
    X4, _ = ab.make_offset_task(10, seed=4)
    assert torch.equal(X, X4)
