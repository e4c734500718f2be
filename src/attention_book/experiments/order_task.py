"""Chapter 6's experiment: a task that self-attention cannot learn without positions.

Every input is a random ordering of the tokens ``0 .. seq_len - 1`` (each token once),
and the label at position ``i >= 1`` is the token one place to its left (position 0 has
no label). All inputs hold the same *set* of tokens, so a permutation-equivariant model
computes its output at a token from that token alone; the token to its left is any of
the other ``seq_len - 1`` with equal chance, which caps such a model at
``1 / (seq_len - 1)`` accuracy. With positional encoding added, one attention layer can
learn to look one place back.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..core.checks import check_int, check_positive_int
from ..core.config import capped_count, single_thread
from ..core.train import IGNORE, accuracy
from ..models.attention import MultiHeadAttention
from ..models.positional import PositionalEncoding

__all__ = [
    "PreviousTokenModel",
    "accuracy_curves_figure",
    "previous_token_batch",
    "train_previous_token",
]


def previous_token_batch(
    batch_size: int, seq_len: int = 10, generator: torch.Generator | None = None
):
    """(inputs, labels), both (batch_size, seq_len): random orderings of ``0 .. seq_len - 1``
    and, at every position but the first, the token one place to the left (``IGNORE`` at 0)."""
    X = torch.rand(batch_size, seq_len, generator=generator).argsort(dim=1)
    Y = torch.full_like(X, IGNORE)
    Y[:, 1:] = X[:, :-1]
    return X, Y


class PreviousTokenModel(nn.Module):
    """Token embedding (plus sinusoidal positions if ``positions``), one self-attention
    layer with a residual connection and layer norm, and a linear layer to token scores.

    ``forward(X)``: (batch, length) token ids -> (batch, length, num_tokens).
    """

    def __init__(
        self,
        num_tokens: int,
        num_hiddens: int = 32,
        num_heads: int = 2,
        positions: bool = True,
    ):
        super().__init__()
        self.embedding = nn.Embedding(num_tokens, num_hiddens)
        self.pos_encoding = PositionalEncoding(num_hiddens) if positions else None
        self.attention = MultiHeadAttention(num_hiddens, num_heads)
        self.norm = nn.LayerNorm(num_hiddens)
        self.output = nn.Linear(num_hiddens, num_tokens)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        H = self.embedding(X)
        if self.pos_encoding is not None:
            H = self.pos_encoding(H)
        H = self.norm(H + self.attention(H, H, H))
        return self.output(H)


def train_previous_token(
    positions: bool,
    *,
    seq_len: int = 10,
    num_hiddens: int = 32,
    num_heads: int = 2,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 1e-2,
    eval_every: int = 25,
    num_val: int = 1000,
    seed: int | None = None,
) -> dict:
    """Train a :class:`PreviousTokenModel` with Adam on fresh batches, one per step, on one thread.

    ``seed`` (``None``: the book's seed) fixes the initial weights, the batches and the
    validation set (``num_val`` sequences, drawn with ``seed + 1``), so a run with and a
    run without positions from one seed see the same data. Returns a dict with
    ``positions``, ``seed``, ``steps`` (where the model was evaluated), ``val_accuracy``
    (the share of labelled positions right at those steps) and the trained ``model``.
    Under ``ATTENTION_BOOK_MAX_STEPS`` (the full-size smoke run) it trains at most that many
    steps (see :func:`~attention_book.core.config.capped_count`).
    """
    from ..core.config import resolve_seed, seed_everything

    seq_len = check_int("seq_len", seq_len, minimum=3)
    steps, eval_every = (
        capped_count(check_positive_int("steps", steps)),  # ATTENTION_BOOK_MAX_STEPS
        check_positive_int("eval_every", eval_every),
    )
    with single_thread():  # a tiny model: more threads would only wait for each other
        seed = resolve_seed(seed)
        val = [
            previous_token_batch(
                num_val, seq_len, torch.Generator().manual_seed(seed + 1)
            )
        ]
        seed_everything(seed)
        model = PreviousTokenModel(seq_len, num_hiddens, num_heads, positions)
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        batches = torch.Generator().manual_seed(seed)
        run = {
            "positions": bool(positions),
            "seed": seed,
            "steps": [0],
            "val_accuracy": [accuracy(model, val)],
        }
        for step in range(1, steps + 1):
            X, Y = previous_token_batch(batch_size, seq_len, batches)
            model.train()
            loss = F.cross_entropy(
                model(X).flatten(0, 1), Y.flatten(), ignore_index=IGNORE
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % eval_every == 0 or step == steps:
                run["steps"].append(step)
                run["val_accuracy"].append(accuracy(model, val))
    run["model"] = model
    return run


def accuracy_curves_figure(runs: list[dict], seq_len: int = 10, figsize=(5.5, 3.4)):
    """Validation accuracy against training step: one thin line per run of
    :func:`train_previous_token`, coloured by whether the model had positions, and a thick
    line of each group's mean over its runs (the labelled lines, and so the values the page
    lists as a table); the dashed line is the ceiling ``1 / (seq_len - 1)`` of a model
    without them."""
    import matplotlib.pyplot as plt

    from ..core.plot import ensure_style

    if not runs:
        raise ValueError(
            "runs is empty: pass the dicts that train_previous_token returns"
        )
    ensure_style()
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    colours = {True: "C0", False: "C3"}
    names = {True: "with positional encoding", False: "without positions"}
    for key in (True, False):
        group = [run for run in runs if run["positions"] == key]
        if not group:
            continue
        for run in group:  # every run, thin and unlabelled
            ax.plot(
                run["steps"],
                run["val_accuracy"],
                color=colours[key],
                alpha=0.35,
                linewidth=0.8,
            )
        length = min(len(run["val_accuracy"]) for run in group)
        mean = torch.tensor([run["val_accuracy"][:length] for run in group]).mean(0)
        ax.plot(
            group[0]["steps"][:length],
            mean.tolist(),
            color=colours[key],
            linewidth=2,
            label=f"{names[key]} (mean of {len(group)})",
        )
    ax.axhline(
        1 / (seq_len - 1),
        color="grey",
        linestyle="--",
        linewidth=1,
        label="best possible without positions",
    )
    ax.set_xlabel("training step")
    ax.set_ylabel("validation accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title("Thin lines: single runs; thick: their mean")
    ax.legend(loc="center right")
    return fig
