"""Chapter 3's training experiment: learning a lookup with and without the 1/√d scaling.

The *retrieval task*: every example holds ``num_keys`` random keys in
``R^dim`` and a random value in ``R^value_size`` for each key. The query is one
of the keys, chosen at random, and the target is that key's value. A model that
scores queries against keys through two learned projections (``W_q`` and
``W_k``, started at random, so the query and its own key do not match at first)
must learn that a key equal to the query deserves all the weight. The chapter
writes that model and its training loop on the page; this module draws the
batches and reads the learning curves.

Nothing here trains: :func:`retrieval_batch` makes data, :func:`smoothed` and
:func:`first_step_below` summarise a curve of per-step losses, and
:func:`statistics_table` prints the random-vector statistics of the 1/√d argument
(:func:`attention_book.scaling_statistics`) that come before the experiment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..core.checks import check_positive_int

__all__ = [
    "RetrievalBatch",
    "first_step_below",
    "retrieval_batch",
    "smoothed",
    "statistics_table",
]


@dataclass
class RetrievalBatch:
    """One batch of the retrieval task.

    ``queries`` (batch, 1, dim), ``keys`` (batch, num_keys, dim), ``values``
    (batch, num_keys, value_size), ``index`` (batch,): which key the query
    equals, and ``targets`` (batch, value_size): that key's value.
    """

    queries: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    index: torch.Tensor
    targets: torch.Tensor


def retrieval_batch(
    batch_size: int,
    num_keys: int,
    dim: int,
    value_size: int,
    generator: torch.Generator | None = None,
    device=None,
) -> RetrievalBatch:
    """A batch of the retrieval task: keys and values with independent N(0, 1) entries;
    each query is a copy of one of its example's keys, drawn uniformly.

    Draws from ``generator`` (the global random state when it is None), so a seeded
    run sees the same batches; ``device`` places every tensor.
    """
    b = check_positive_int("batch_size", batch_size)
    m = check_positive_int("num_keys", num_keys)
    d = check_positive_int("dim", dim)
    d_v = check_positive_int("value_size", value_size)
    keys = torch.randn(b, m, d, generator=generator, device=device)
    values = torch.randn(b, m, d_v, generator=generator, device=device)
    index = torch.randint(m, (b,), generator=generator, device=device)
    rows = torch.arange(b, device=keys.device)
    return RetrievalBatch(
        keys[rows, index][:, None], keys, values, index, values[rows, index]
    )


def smoothed(losses: Sequence[float], window: int = 10) -> list[float]:
    """The running mean of ``losses`` over the last ``window`` steps (fewer at the start)."""
    w = check_positive_int("window", window)
    out, total = [], 0.0
    for i, loss in enumerate(losses):
        total += float(loss)
        if i >= w:
            total -= float(losses[i - w])
        out.append(total / min(i + 1, w))
    return out


def first_step_below(
    losses: Sequence[float], level: float, window: int = 10
) -> int | None:
    """The first step (counting from 1) at which the running mean of the last ``window``
    losses is below ``level``; ``None`` if it never gets there."""
    for step, value in enumerate(smoothed(losses, window), start=1):
        if value < level:
            return step
    return None


_STATISTICS = (
    ("var", "variance"),
    ("max_weight", "max weight"),
    ("grad", "|Jacobian|"),
)


def _short(key: str, x: float) -> str:
    """A variance to three digits, with no exponent (3.84, 65.1, 1033); a weight or a
    Jacobian's norm (below 1) to two decimals."""
    if key != "var":
        return f"{x:.2f}"
    return f"{x:.{2 if abs(x) < 10 else 1 if abs(x) < 100 else 0}f}"


def statistics_table(stats: dict, dims: Sequence[int] = (4, 64, 1024)) -> str:
    """The rows ``dims`` of :func:`attention_book.scaling_statistics`'s ``stats`` as a table
    43 characters wide (it fits a phone's column): one row per feature size d, and for the
    variance of the scores, the mean largest softmax weight and the mean norm of the softmax's
    Jacobian, the raw and the scaled value side by side."""
    listed = [int(d) for d in stats["dims"]]
    missing = [d for d in dims if d not in listed]
    if missing:
        raise ValueError(f"stats has no row for d = {missing}; it has d = {listed}")
    lines = [" " * 4 + "".join(f" {title:>12}" for _, title in _STATISTICS)]
    lines.append(f"{'d':>4}" + f" {'raw':>5}{'scaled':>7}" * len(_STATISTICS))
    for d in dims:
        i = listed.index(d)
        row = f"{d:>4}"
        for key, _ in _STATISTICS:
            raw, scaled = (
                _short(key, float(stats[f"{key}_{tag}"][i]))
                for tag in ("raw", "scaled")
            )
            row += f" {raw:>5}{scaled:>7}"
        lines.append(row)
    return "\n".join(lines)
