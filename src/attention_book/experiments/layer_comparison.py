"""Chapter 6's comparison of layers: self-attention next to CNNs and RNNs (cost, sequential
operations, path length, measured time) and permutation equivariance.

(The pictures of the sinusoidal positional encoding live with it, in ``positional.py``.)
"""

from __future__ import annotations

import time
from typing import Sequence

import matplotlib.pyplot as plt
import torch
from torch import nn

from ..models.attention import MultiHeadAttention
from ..core.checks import check_positive_int
from ..core.config import max_steps, single_thread
from ..core.plot import ensure_style

__all__ = [
    "LAYER_COSTS",
    "layer_cost_table",
    "sequence_layers",
    "time_sequence_layers",
    "layer_times_figure",
    "permutation_error",
]

# (layer, computational cost, sequential operations, maximum path length) for n tokens of
# size d and a convolution kernel of width k — the comparison of the chapter.
LAYER_COSTS = [
    ("CNN (kernel k)", "O(k n d²)", "O(1)", "O(n / k)"),
    ("RNN", "O(n d²)", "O(n)", "O(n)"),
    ("self-attention", "O(n² d)", "O(1)", "O(1)"),
]


def layer_cost_table() -> str:
    """The cost comparison as a Markdown table (display it with ``IPython.display.Markdown``)."""
    head = "| layer | computational cost | sequential operations | maximum path length |\n| --- | --- | --- | --- |\n"
    return head + "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in LAYER_COSTS)


class _ConvLayer(nn.Module):
    def __init__(self, d: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(d, d, kernel_size, padding=kernel_size // 2)

    def forward(self, X):  # (batch, n, d) -> (batch, n, d)
        return self.conv(X.transpose(1, 2)).transpose(1, 2)


class _RNNLayer(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.rnn = nn.RNN(d, d, batch_first=True)

    def forward(self, X):
        return self.rnn(X)[0]


class _SelfAttentionLayer(nn.Module):
    def __init__(self, d: int, num_heads: int):
        super().__init__()
        self.attention = MultiHeadAttention(d, num_heads)

    def forward(self, X):
        return self.attention(X, X, X, need_weights=False)


def sequence_layers(num_hiddens: int = 64, kernel_size: int = 3, num_heads: int = 4) -> dict[str, nn.Module]:
    """One layer of each kind mapping (batch, n, num_hiddens) to the same shape."""
    return {
        "CNN": _ConvLayer(num_hiddens, kernel_size),
        "RNN": _RNNLayer(num_hiddens),
        "self-attention": _SelfAttentionLayer(num_hiddens, num_heads),
    }


@torch.no_grad()
def time_sequence_layers(lengths: Sequence[int], num_hiddens: int = 64, batch_size: int = 8, kernel_size: int = 3,
                         num_heads: int = 4, repeats: int = 3) -> dict[str, list[float]]:
    """Forward time in seconds of each layer of :func:`sequence_layers`, per length.

    Runs on the CPU with one thread, one warm-up call per setting, and measures the
    thread's *CPU time* (``time.thread_time``), not wall-clock time, so that time the
    operating system gives to other programs on a shared machine is not counted; of
    ``repeats`` runs it keeps the fastest, the least disturbed one. Under the smoke
    switch (``ATTENTION_BOOK_MAX_STEPS`` set) each layer runs once per length, untimed
    warm-up left out, as in :func:`~attention_book.models.scoring.best_time`: the run
    shows each length fits, and its times mean nothing.
    """
    if not lengths:
        raise ValueError(f"lengths must be a non-empty list of positive ints, got {list(lengths)}")
    lengths = [check_positive_int(f"lengths[{i}]", n) for i, n in enumerate(lengths)]
    for name, size in (("repeats", repeats), ("batch_size", batch_size), ("num_hiddens", num_hiddens)):
        check_positive_int(name, size)
    smoke = max_steps() is not None
    if smoke:
        repeats = 1
    layers = {name: layer.eval() for name, layer in sequence_layers(num_hiddens, kernel_size, num_heads).items()}
    times: dict[str, list[float]] = {name: [] for name in layers}
    with single_thread():
        for n in lengths:
            X = torch.randn(batch_size, n, num_hiddens)
            for name, layer in layers.items():
                if not smoke:
                    layer(X)
                runs = []
                for _ in range(repeats):
                    start = time.thread_time()
                    layer(X)
                    runs.append(time.thread_time() - start)
                times[name].append(min(runs))
    return times


def layer_times_figure(lengths: Sequence[int], times: dict[str, Sequence[float]]):
    """Log-log plot of forward time against sequence length, one line per layer."""
    ensure_style()
    fig, ax = plt.subplots(figsize=(5.5, 3.6), layout="constrained")
    for name, ts in times.items():
        ax.loglog(lengths, [1e3 * t for t in ts], marker="o", markersize=4, label=name)
    ax.set_xlabel("sequence length n")
    ax.set_ylabel("forward time (ms)")
    ax.set_title("One layer, forward pass, measured on this machine")
    ax.legend()
    return fig


@torch.no_grad()
def permutation_error(layer: nn.Module, X: torch.Tensor, perm: torch.Tensor) -> float:
    """max |f(X[:, perm]) - f(X)[:, perm]| for a layer f acting on (batch, n, d).

    Zero (up to rounding) means the layer is permutation-equivariant: shuffling
    the tokens shuffles the outputs the same way and changes nothing else.
    """
    if X.dim() != 3:
        raise ValueError(f"X must have shape (batch, n, d), got {tuple(X.shape)}")
    if sorted(perm.tolist()) != list(range(X.shape[1])):
        raise ValueError(f"perm must be a permutation of 0..{X.shape[1] - 1}, got {perm.tolist()}")
    return (layer(X[:, perm]) - layer(X)[:, perm]).abs().max().item()
