"""Chapter 5's experiment — the offset task: a task where heads specialise, head ablation and
pruning, and the per-head maps.

The *offset task*: a sequence of ``seq_len`` random tokens from ``vocab_size``
symbols; the label at position ``i`` is ``(x[i + a] - x[i + b]) mod vocab_size``
for two fixed offsets ``(a, b)`` (positions wrap around). Every position must
read two *different* places, in order, so a model with two heads can give one
offset to each head. A one-layer model (token + learned position embeddings,
one :class:`~attention_book.attention.MultiHeadAttention`, a small MLP, no
residual) is trained on it with :func:`~attention_book.train.fit`.

A single head is not helpless here: it can spread its weight over both
places *unevenly* (say one third and two thirds), and the MLP can then tell
the blended tokens apart; :func:`offset_attention` measures how much weight
each head puts on each offset, so the notebook can show which strategy a
trained model found.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from .config import device as pick_device, resolve_seed, single_thread
from .attention import MultiHeadAttention, collect_attention
from .checks import check_heads, check_int, check_positive_int, check_same_device
from .positional import LearnedPositionalEmbedding
from .train import History, evaluating, fit

__all__ = [
    "make_offset_task",
    "OffsetTaskModel",
    "HeadRun",
    "train_offset_task",
    "train_head_counts",
    "task_accuracy",
    "ablate_heads",
    "head_importance",
    "pruning_curve",
    "offset_attention",
    "plot_head_maps",
    "head_count_figure",
]


def make_offset_task(num_examples: int, seq_len: int = 8, vocab_size: int = 8, offsets: tuple[int, int] = (-1, 2),
                     seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens ``X`` (num_examples, seq_len) and labels ``Y`` of the same shape.

    ``Y[:, i] = (X[:, (i + a) % seq_len] - X[:, (i + b) % seq_len]) % vocab_size``
    with ``(a, b) = offsets``. ``seed=None`` uses the book's seed
    (``ATTENTION_BOOK_SEED``).
    """
    num_examples = check_positive_int("num_examples", num_examples)
    seq_len = check_int("seq_len", seq_len, minimum=2)
    vocab_size = check_int("vocab_size", vocab_size, minimum=2)
    a, b = offsets
    if a % seq_len == b % seq_len:
        raise ValueError(f"offsets must point to two different positions modulo seq_len={seq_len}, got {offsets}")
    g = torch.Generator().manual_seed(resolve_seed(seed))
    X = torch.randint(0, vocab_size, (num_examples, seq_len), generator=g)
    # X.roll(-a)[:, i] == X[:, (i + a) % seq_len]
    Y = (X.roll(-a, dims=1) - X.roll(-b, dims=1)) % vocab_size
    return X, Y


class OffsetTaskModel(nn.Module):
    """Embeddings (token + learned position) -> multi-head self-attention -> MLP -> logits.

    No residual connection: the prediction at a position can only use what
    the heads fetched, so the attention maps show what the model relies on.
    """

    def __init__(self, vocab_size: int = 8, seq_len: int = 8, num_hiddens: int = 32, num_heads: int = 2):
        super().__init__()
        for name, size in (("vocab_size", vocab_size), ("seq_len", seq_len)):
            check_positive_int(name, size)
        check_heads(num_hiddens, num_heads)
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.positions = LearnedPositionalEmbedding(num_hiddens, max_len=seq_len, init_std=1.0)
        self.attention = MultiHeadAttention(num_hiddens, num_heads)
        self.mlp = nn.Sequential(nn.Linear(num_hiddens, 4 * num_hiddens), nn.ReLU(),
                                 nn.Linear(4 * num_hiddens, vocab_size))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        check_same_device("X", X, self)
        H = self.positions(self.embedding(X))  # (batch, seq_len, num_hiddens)
        return self.mlp(self.attention(H, H, H))  # (batch, seq_len, vocab_size)


@torch.no_grad()
def task_accuracy(model: nn.Module, X: torch.Tensor, Y: torch.Tensor) -> float:
    """Fraction of positions whose label the model predicts."""
    with evaluating(model):
        acc = (model(X).argmax(-1) == Y).float().mean().item()
    return acc


@dataclass
class HeadRun:
    """One trained model of the offset task."""

    num_heads: int
    model: OffsetTaskModel
    history: History
    accuracy: float  # on the held-out examples
    X_test: torch.Tensor
    Y_test: torch.Tensor
    offsets: tuple[int, int] = (-1, 2)
    seed: int = 0


def train_offset_task(num_heads: int, *, num_hiddens: int = 32, seq_len: int = 8, vocab_size: int = 8,
                      offsets: tuple[int, int] = (-1, 2), num_train: int = 2000, num_test: int = 1000,
                      epochs: int = 6, batch_size: int = 64, lr: float = 3e-3, seed: int | None = None,
                      device: torch.device | str | None = None, progress: bool = True) -> HeadRun:
    """Train an :class:`OffsetTaskModel` with ``num_heads`` heads; returns a :class:`HeadRun`.

    ``seed`` fixes both the data and the model's initialisation (``None``: the
    book's seed). ``device`` defaults to :func:`attention_book.device`; on the
    CPU training runs with one thread, because this model is so small that
    splitting its operations over threads only adds waiting. The test accuracy
    is recorded after every epoch in ``history.metrics['test accuracy']``.
    """
    for name, size in (("num_train", num_train), ("num_test", num_test), ("batch_size", batch_size)):
        check_positive_int(name, size)
    seed = resolve_seed(seed)
    dev = torch.device(device) if device is not None else pick_device(verbose=False)
    X, Y = make_offset_task(num_train + num_test, seq_len, vocab_size, offsets, seed=seed)
    X_train, Y_train, X_test, Y_test = X[:num_train], Y[:num_train], X[num_train:], Y[num_train:]
    torch.manual_seed(seed)
    model = OffsetTaskModel(vocab_size, seq_len, num_hiddens, num_heads)
    batches = [(X_train[i:i + batch_size], Y_train[i:i + batch_size]) for i in range(0, num_train, batch_size)]

    def loss_fn(m, batch):
        tokens, labels = batch
        return F.cross_entropy(m(tokens).flatten(0, 1), labels.flatten())

    X_test, Y_test = X_test.to(dev), Y_test.to(dev)
    with single_thread() if dev.type == "cpu" else contextlib.nullcontext():
        history = fit(model, batches, loss_fn, epochs=epochs, lr=lr, device=dev, progress=progress,
                      desc=f"{num_heads} head{'s' if num_heads > 1 else ''}",
                      evaluate=lambda m: {"test accuracy": task_accuracy(m, X_test, Y_test)})
        accuracy = task_accuracy(model, X_test, Y_test)
    return HeadRun(num_heads, model, history, accuracy, X_test, Y_test, tuple(offsets), seed)


def train_head_counts(head_counts: Sequence[int] = (1, 2, 4, 8), **kwargs) -> dict[int, HeadRun]:
    """:func:`train_offset_task` for every head count (same data, random seed and budget)."""
    return {h: train_offset_task(h, **kwargs) for h in head_counts}


def _output_layer(attention: MultiHeadAttention) -> nn.Linear:
    if not isinstance(attention, MultiHeadAttention):
        raise ValueError(f"expected a MultiHeadAttention layer, got {type(attention).__name__}")
    return attention.W_o


@contextlib.contextmanager
def ablate_heads(attention: MultiHeadAttention, heads: Sequence[int]) -> Iterator[None]:
    """Within the block, the given heads of ``attention`` contribute nothing.

    The concatenated head outputs entering ``W_o`` have head ``h`` in columns
    ``h * d_head .. (h + 1) * d_head - 1``; a forward pre-hook zeroes those
    columns, which is exactly removing the head from the sum ``W_o [h_1; ...; h_H]``.
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
    full = task_accuracy(model, X, Y)
    drops = []
    for h in range(attention.num_heads):
        with ablate_heads(attention, [h]):
            drops.append(full - task_accuracy(model, X, Y))
    return torch.tensor(drops)


@torch.no_grad()
def pruning_curve(model: nn.Module, attention: MultiHeadAttention, X: torch.Tensor,
                  Y: torch.Tensor) -> tuple[list[int], list[float]]:
    """Remove heads one by one, least important first; accuracy after each removal.

    Importance is measured once, by :func:`head_importance`. Returns
    ``(order, accuracies)``: ``order`` lists the heads in the order removed and
    ``accuracies[k]`` is the accuracy with the first ``k`` of them removed
    (``accuracies[0]`` is the full model, the last entry has no head left).
    """
    importance = head_importance(model, attention, X, Y)
    order = [int(h) for h in torch.argsort(importance, stable=True)]
    accuracies = [task_accuracy(model, X, Y)]
    for k in range(1, len(order) + 1):
        with ablate_heads(attention, order[:k]):
            accuracies.append(task_accuracy(model, X, Y))
    return order, accuracies


@torch.no_grad()
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


def plot_head_maps(run: HeadRun, num_examples: int = 200, importance: torch.Tensor | None = None):
    """Each head's attention map averaged over held-out sequences (queries down, keys across)."""
    from .plot import show_heatmaps

    (weights,) = collect_attention(run.model, run.X_test[:num_examples])
    mean = weights.mean(0).cpu()  # (heads, queries, keys)
    titles = [f"head {h}" for h in range(run.num_heads)]
    if importance is not None:
        titles = [f"{t}\n(-{100 * float(d):.0f} pts)" for t, d in zip(titles, importance)]
    n = mean.shape[-1]
    # More than four heads wrap onto rows of four, so each map stays readable on a narrow page.
    cols = 4 if run.num_heads > 4 and run.num_heads % 4 == 0 else run.num_heads
    rows = run.num_heads // cols
    height = (2.6 if importance is None else 2.9) * rows
    fig = show_heatmaps(mean.reshape(rows, cols, n, n), xlabel="key position", ylabel="query position",
                        titles=titles, figsize=(min(2.1 * cols + 1.2, 14.0), height), vmin=0.0, vmax=1.0)
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
    return plot_head_maps(runs[num_heads])
