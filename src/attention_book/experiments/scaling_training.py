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
:func:`first_step_below` summarise a curve of per-step losses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..core.checks import check_positive_int

__all__ = ["RetrievalBatch", "first_step_below", "retrieval_batch", "smoothed"]


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
