"""Chapter 5's experiment — the offset task: a task that needs one head per lookup, head ablation
and pruning, and the per-head maps.

The *offset task*: a sequence of ``seq_len`` random tokens from ``vocab_size``
symbols; at every position ``t`` the model must report the tokens found at each
of ``K`` fixed offsets ``delta_1, ..., delta_K`` (positions wrap around): the
label is the ``K``-tuple ``(x[t + delta_1], ..., x[t + delta_K])``. A one-layer
model (token + learned position embeddings, one
:class:`~attention_book.models.attention.MultiHeadAttention`, a *linear* read-out, no
residual) is trained on it with :func:`~attention_book.core.train.fit`.

Why one head is not enough: a head hands the read-out one weighted average
of value vectors. A linear read-out turns a weighted average of tokens into the
same weighted average of their scores, so for each answer it sees a mixture in
which the heaviest token wins: one head can deliver about one offset, and the
other answers are guesses. With ``K`` heads (same total width), each head can
take one offset. :func:`offset_attention` measures how much weight each head
puts on each offset, so the chapter can show the split.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ..core.config import device as pick_device, resolve_seed
from ..models.attention import MultiHeadAttention, collect_attention
from ..core.checks import check_heads, check_int, check_positive_int, check_same_device
from ..models.positional import LearnedPositionalEmbedding
from ..core.train import History, accuracy

__all__ = [
    "OFFSETS",
    "make_offset_task",
    "OffsetTaskModel",
    "HeadRun",
    "offset_task_data",
    "offset_task_loss",
    "one_offset_per_head_accuracy",
    "head_count_accuracy_figure",
    "ablate_heads",
    "head_importance",
    "pruning_curve",
    "pruning_figure",
    "offset_attention",
    "head_maps_figure",
    "head_count_figure",
]

OFFSETS = (-2, -1, 1, 3)  # the chapter's four lookups: two and one to the left, one and three to the right


def _check_offsets(offsets: Sequence[int], seq_len: int) -> tuple[int, ...]:
    offsets = tuple(offsets)
    if not offsets or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets):
        raise ValueError(f"offsets must be a non-empty sequence of ints, got {offsets!r}")
    if len({o % seq_len for o in offsets}) != len(offsets):
        raise ValueError(f"offsets must point to different positions modulo seq_len={seq_len}, got {offsets}")
    return offsets


def make_offset_task(num_examples: int, seq_len: int = 8, vocab_size: int = 16, offsets: Sequence[int] = OFFSETS,
                     seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens ``X`` (num_examples, seq_len) and labels ``Y`` (num_examples, seq_len, len(offsets)).

    ``Y[:, t, j] = X[:, (t + offsets[j]) % seq_len]``: at every position, the
    tokens found at each offset. ``seed=None`` uses the book's seed
    (``ATTENTION_BOOK_SEED``).
    """
    num_examples = check_positive_int("num_examples", num_examples)
    seq_len = check_int("seq_len", seq_len, minimum=2)
    vocab_size = check_int("vocab_size", vocab_size, minimum=2)
    offsets = _check_offsets(offsets, seq_len)
    g = torch.Generator().manual_seed(resolve_seed(seed))
    X = torch.randint(0, vocab_size, (num_examples, seq_len), generator=g)
    Y = torch.stack([X.roll(-o, dims=1) for o in offsets], dim=-1)  # y_{t,j} = x_{t + delta_j}, wrapping around
    return X, Y


class OffsetTaskModel(nn.Module):
    """Embeddings (token + learned position) -> multi-head self-attention -> linear read-out.

    No residual connection and no hidden layer after the attention: the scores
    for the answers at a position are a linear function of what the heads
    fetched there, so the attention maps are the whole story. ``forward(X)``
    returns scores of shape (batch, seq_len, num_offsets, vocab_size).
    """

    def __init__(self, vocab_size: int = 16, seq_len: int = 8, num_hiddens: int = 32, num_heads: int = 4,
                 num_offsets: int = len(OFFSETS)):
        super().__init__()
        for name, size in (("vocab_size", vocab_size), ("seq_len", seq_len), ("num_offsets", num_offsets)):
            check_positive_int(name, size)
        check_heads(num_hiddens, num_heads)
        self.vocab_size, self.num_offsets = vocab_size, num_offsets
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.positions = LearnedPositionalEmbedding(num_hiddens, max_len=seq_len, init_std=1.0)
        self.attention = MultiHeadAttention(num_hiddens, num_heads)
        self.readout = nn.Linear(num_hiddens, num_offsets * vocab_size)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        check_same_device("X", X, self)
        H = self.positions(self.embedding(X))  # token embedding + position embedding: (batch, n, p_o)
        O = self.attention(H, H, H)  # W_o [o_1; ...; o_h] at every position t
        return self.readout(O).unflatten(-1, (self.num_offsets, self.vocab_size))  # linear scores for each y_{t,j}


def one_offset_per_head_accuracy(num_heads: int, num_offsets: int = len(OFFSETS), vocab_size: int = 16) -> float:
    """The accuracy of a model whose heads each deliver one offset and which guesses the other answers.

    ``min(num_heads, num_offsets)`` of the ``num_offsets`` answers are right and the rest
    are right by chance (``1 / vocab_size``): the yardstick the chapter's figure draws.
    """
    num_heads, num_offsets = check_positive_int("num_heads", num_heads), check_positive_int("num_offsets", num_offsets)
    vocab_size = check_int("vocab_size", vocab_size, minimum=2)
    covered = min(num_heads, num_offsets) / num_offsets
    return covered + (1 - covered) / vocab_size


@dataclass
class HeadRun:
    """One trained model of the offset task."""

    num_heads: int
    model: OffsetTaskModel
    history: History
    accuracy: float  # on the held-out examples
    X_test: torch.Tensor
    Y_test: torch.Tensor
    offsets: tuple[int, ...] = OFFSETS
    seed: int = 0
    vocab_size: int = 16


def offset_task_data(num_train: int = 2000, num_test: int = 1000, batch_size: int = 64, *, seq_len: int = 8,
                     vocab_size: int = 16, offsets: Sequence[int] = OFFSETS, seed: int | None = None,
                     device: torch.device | str | None = None):
    """Training batches and held-out examples of the offset task: ``(batches, X_test, Y_test)``.

    ``num_train + num_test`` sequences drawn from ``seed`` (``None``: the book's
    seed), moved once to ``device`` (default :func:`attention_book.device`, a GPU
    when there is one); the first ``num_train`` cut into a list of ``(tokens,
    answers)`` batches of ``batch_size`` for :func:`attention_book.fit`.
    """
    for name, size in (("num_train", num_train), ("num_test", num_test), ("batch_size", batch_size)):
        check_positive_int(name, size)
    dev = torch.device(device) if device is not None else pick_device(verbose=False)
    X, Y = make_offset_task(num_train + num_test, seq_len, vocab_size, _check_offsets(offsets, seq_len),
                            seed=resolve_seed(seed))
    X, Y = X.to(dev), Y.to(dev)
    batches = [(X[i:min(i + batch_size, num_train)], Y[i:min(i + batch_size, num_train)])
               for i in range(0, num_train, batch_size)]
    return batches, X[num_train:], Y[num_train:]


def offset_task_loss(model: nn.Module, batch) -> torch.Tensor:
    """Cross-entropy over every position and offset of a ``(tokens, answers)`` batch (a ``loss_fn`` for fit)."""
    tokens, answers = batch
    return F.cross_entropy(model(tokens).flatten(0, -2), answers.flatten())


def head_count_accuracy_figure(spread: dict[int, list[HeadRun]]):
    """Test accuracy against the number of heads: one dot per seed, the mean, and two yardsticks.

    The yardsticks are :func:`one_offset_per_head_accuracy` (each head delivers one
    offset, the other answers are guesses) and chance. Returns the figure.
    """
    import matplotlib.pyplot as plt

    from ..core.plot import ensure_style, chance_line

    ensure_style()
    heads = sorted(spread)
    if not heads or any(not spread[h] for h in heads):
        counts = {h: len(r) for h, r in spread.items()}
        raise ValueError(f"spread needs at least one run for every head count, got {counts}")
    first = spread[heads[0]][0]
    num_offsets, vocab_size = len(first.offsets), first.vocab_size
    fig, ax = plt.subplots(figsize=(5.6, 3.6), layout="constrained")
    for h in heads:
        accs = [100 * r.accuracy for r in spread[h]]
        jitter = [2 ** (0.06 * (k - (len(accs) - 1) / 2)) for k in range(len(accs))]
        ax.scatter([h * j for j in jitter], accs, color="C0", alpha=0.55, s=22,
                   label="one run (seed)" if h == heads[0] else None, zorder=3)
    means = [100 * sum(r.accuracy for r in spread[h]) / len(spread[h]) for h in heads]
    ax.plot(heads, means, color="C1", marker="o", label="mean over seeds", zorder=2)
    ax.plot(heads, [100 * one_offset_per_head_accuracy(h, num_offsets, vocab_size) for h in heads], color="0.4",
            ls="--", label="one offset per head, guesses for the rest", zorder=1)
    chance_line(ax, 100 / vocab_size)
    ax.set_xscale("log", base=2)
    ax.set_xticks(heads, [str(h) for h in heads])
    ax.minorticks_off()
    ax.set_ylim(0, 105)
    width = first.model.attention.num_hiddens
    ax.set_xlabel(f"number of heads ({width} hidden units in total)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"Offset task with {num_offsets} lookups ({len(spread[heads[0]])} seeds)")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _output_layer(attention: MultiHeadAttention) -> nn.Linear:
    if not isinstance(attention, MultiHeadAttention):
        raise ValueError(f"expected a MultiHeadAttention layer, got {type(attention).__name__}")
    return attention.W_o


@contextlib.contextmanager
def ablate_heads(attention: MultiHeadAttention, heads: Sequence[int]) -> Iterator[None]:
    """Within the block, the given heads of ``attention`` contribute nothing.

    The concatenated head outputs entering ``W_o`` have head ``h`` in columns
    ``h * d_head .. (h + 1) * d_head - 1``; a forward pre-hook zeroes those
    columns, which is exactly removing the head from the sum ``W_o [o_1; ...; o_h]``.
    """
    W_o = _output_layer(attention)
    heads = list(heads)
    for h in heads:
        if not 0 <= h < attention.num_heads:
            raise ValueError(f"heads must lie in [0, {attention.num_heads - 1}], got {h}")
    d_head = attention.num_hiddens // attention.num_heads
    keep = torch.ones(attention.num_hiddens, dtype=torch.bool)
    for h in heads:
        keep[h * d_head:(h + 1) * d_head] = False

    def hook(_module, args):
        (X,) = args
        return (X * keep.to(device=X.device, dtype=X.dtype),)

    handle = W_o.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def head_importance(model: nn.Module, attention: MultiHeadAttention, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Importance of each head of ``attention``: accuracy lost when that head alone is removed.

    Returns a tensor (num_heads,) of ``accuracy(all heads) - accuracy(without head h)``
    on ``(X, Y)`` — the ablation experiment of Michel et al. (2019), measured on a
    held-out set.
    """
    full = accuracy(model, [(X, Y)])
    drops = []
    for h in range(attention.num_heads):
        with ablate_heads(attention, [h]):
            drops.append(full - accuracy(model, [(X, Y)]))
    return torch.tensor(drops)


@torch.no_grad()
def pruning_curve(model: nn.Module, attention: MultiHeadAttention, X: torch.Tensor,
                  Y: torch.Tensor, importance: torch.Tensor | None = None) -> tuple[list[int], list[float]]:
    """Remove heads one by one, least important first; accuracy after each removal.

    Importance is measured once, by :func:`head_importance`, unless the caller
    passes the drops it already measured on ``(X, Y)`` (``importance``, one per
    head). Returns ``(order, accuracies)``: ``order`` lists the heads in the order
    removed and ``accuracies[k]`` is the accuracy with the first ``k`` of them
    removed (``accuracies[0]`` is the full model, the last entry has no head left).
    """
    if importance is None:
        importance = head_importance(model, attention, X, Y)
    elif tuple(importance.shape) != (attention.num_heads,):
        raise ValueError(f"importance must hold one number per head, shape ({attention.num_heads},); "
                         f"got shape {tuple(importance.shape)}")
    order = [int(h) for h in torch.argsort(importance, stable=True)]
    accuracies = [accuracy(model, [(X, Y)])]
    for k in range(1, len(order) + 1):
        with ablate_heads(attention, order[:k]):
            accuracies.append(accuracy(model, [(X, Y)]))
    return order, accuracies


def pruning_figure(curves: dict[str, Sequence[float]], title: str | None = None):
    """Test accuracy against the number of heads removed (:func:`pruning_curve`), one curve per
    name; the x axis counts heads, so its ticks are whole numbers (0, 2, 4, ...) at any width."""
    from matplotlib.ticker import MaxNLocator

    from ..core.plot import curves_figure

    if not curves:
        raise ValueError("pruning_figure needs at least one named curve")
    longest = max(len(c) for c in curves.values())
    fig = curves_figure(curves, x=list(range(longest)), xlabel="heads removed (least important first)",
                        ylabel="test accuracy", title=title)
    fig.axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


@torch.no_grad()
def offset_attention(run: HeadRun, num_examples: int = 200) -> torch.Tensor:
    """How much attention each head puts on each of the task's offsets.

    Returns a tensor (num_heads, len(run.offsets)): entry ``[h, k]`` is head
    ``h``'s weight on the key at offset ``run.offsets[k]`` from the query (with
    wrap-around), averaged over queries and the first ``num_examples``
    held-out sequences. A row summing to nearly 1 means the head looks only
    at the places the task needs.
    """
    (weights,) = collect_attention(run.model, run.X_test[:num_examples])
    mean = weights.mean(0).cpu()  # (heads, queries, keys)
    n = mean.shape[-1]
    queries = torch.arange(n)
    return torch.stack([mean[:, queries, (queries + o) % n].mean(-1) for o in run.offsets], dim=-1)


def _drop_label(drop: float) -> str:
    """A head's title line: the accuracy lost when it is removed, in percentage points, one decimal
    ("-3.2 pts"; a removal that helps reads "+0.4 pts"; one that changes nothing "0.0 pts", never "-0.0")."""
    change = round(-100 * drop, 1)
    return "(0.0 pts)" if change == 0 else f"({change:+.1f} pts)"


def head_maps_figure(run: HeadRun, num_examples: int = 200, importance: torch.Tensor | None = None):
    """Each head's attention map averaged over held-out sequences (queries down, keys across)."""
    from ..core.plot import PAGE_COLUMN_PX, heatmaps_figure

    (weights,) = collect_attention(run.model, run.X_test[:num_examples])
    mean = weights.mean(0).cpu()  # (heads, queries, keys)
    titles = [f"head {h}" for h in range(run.num_heads)]
    if importance is not None:
        titles = [f"{t}\n{_drop_label(float(d))}" for t, d in zip(titles, importance)]
    n = mean.shape[-1]
    # More than four heads wrap onto rows of four, so each map stays readable on a narrow page;
    # one or two heads get larger maps. A row is at most the page's column wide at 100 dpi
    # (the dpi of the page's figures and of the chapter's explorer frames), so the page never
    # shrinks the figure and its 9-pt labels show 12.5 px high.
    cols = 4 if run.num_heads > 4 and run.num_heads % 4 == 0 else run.num_heads
    rows = run.num_heads // cols
    column = PAGE_COLUMN_PX / 100 - 0.1  # inches, with a margin for the tight bounding box
    cell = min(max(2.1, 3.4 / cols), (column - 1.2) / cols)
    height = (cell + (0.6 if importance is None else 0.9)) * rows + 0.3  # square maps + labels
    fig = heatmaps_figure(mean.reshape(rows, cols, n, n), xlabel="key position", ylabel="query position",
                        titles=titles, figsize=(cell * cols + 1.2, height), vmin=0.0, vmax=1.0)
    for ax in fig.axes[:-1]:
        ax.set_xticks(range(0, n, 2))
        ax.set_yticks(range(0, n, 2))
    fig.suptitle(f"{run.num_heads} head{'s' if run.num_heads > 1 else ''}: "
                 f"test accuracy {100 * run.accuracy:.1f}%", fontsize=11)
    return fig


def head_count_figure(num_heads: int, runs: dict[int, HeadRun]):
    """Widget callback: the attention maps and accuracy of the model with ``num_heads`` heads."""
    if num_heads not in runs:
        raise ValueError(f"num_heads={num_heads} was not trained; trained head counts: {sorted(runs)}")
    return head_maps_figure(runs[num_heads])
