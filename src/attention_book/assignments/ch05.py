"""Chapter 5 assignment: attention in every head at once, returning each head's output.

The chapter writes multi-head attention with its projections and the final
concatenation. The assignment asks for the middle part as a function that keeps
the heads apart: ``fn(queries, keys, values, num_heads)`` with queries
(batch, n_q, d), keys (batch, n_k, d) and values (batch, n_k, d_v) returns
(batch, num_heads, n_q, d_v / num_heads), where head ``h`` runs scaled
dot-product attention on feature columns ``h * d / num_heads`` to
``(h + 1) * d / num_heads - 1`` of the queries and keys (and the matching block of
the values' columns), scaled by the square root of its own size ``d / num_heads``.
"""

from __future__ import annotations

import math

import torch

from . import Case, case_generator, compare, draw, run_checks

__all__ = ["check_per_head_attention"]


def reference(queries, keys, values, num_heads: int) -> torch.Tensor:
    """The answer, head by head with a loop (a different route from the reshapes a learner writes)."""
    d, d_v = queries.shape[-1], values.shape[-1]
    step, step_v = d // num_heads, d_v // num_heads
    heads = []
    for h in range(num_heads):
        q = queries[..., h * step:(h + 1) * step].double()
        k = keys[..., h * step:(h + 1) * step].double()
        v = values[..., h * step_v:(h + 1) * step_v].double()
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(step), dim=-1)
        heads.append(weights @ v)
    return torch.stack(heads, dim=1).to(queries.dtype)


def check_per_head_attention(fn, verbose: bool = True):
    """Check ``fn(queries, keys, values, num_heads)`` on cases whose every input is drawn from the case seed."""
    g = case_generator(5)

    def case(name, heads, d_head, hint, n_q=None, n_k=None, d_v_head=None, scale=1.0):
        batch = draw(g, 1, 3)
        n_q = draw(g, 2, 5) if n_q is None else n_q
        n_k = draw(g, 2, 6) if n_k is None else n_k
        d_v_head = d_head if d_v_head is None else d_v_head
        Q = torch.randn(batch, n_q, heads * d_head, generator=g, dtype=torch.float64) * scale
        K = torch.randn(batch, n_k, heads * d_head, generator=g, dtype=torch.float64) * scale
        V = torch.randn(batch, n_k, heads * d_v_head, generator=g, dtype=torch.float64)
        return Case(name, (Q, K, V, heads), compare(reference(Q, K, V, heads), atol=1e-9, rtol=1e-7), hint=hint)

    split = ("head h owns a contiguous block of feature columns: reshape (batch, n, d) to "
             "(batch, n, num_heads, d / num_heads) first, and only then move the head axis forward")
    cases = [
        case("a few heads", draw(g, 2, 3), draw(g, 2, 3), split),
        case("scaled by each head's own size", draw(g, 2, 4), draw(g, 3, 5),
             "divide the scores by sqrt(d / num_heads), the size of one head, not by sqrt(d)"),
        case("one head: ordinary scaled dot-product attention", 1, draw(g, 3, 6),
             "with one head the answer is softmax(Q K^T / sqrt(d)) V, with a head axis of size 1"),
        case("heads of size 1", draw(g, 3, 5), 1, split),
        case("more keys than queries", draw(g, 2, 3), draw(g, 2, 4), "the softmax runs over the keys (last axis)",
             n_q=draw(g, 1, 2), n_k=draw(g, 5, 8)),
        case("values of another size than the keys", draw(g, 2, 3), draw(g, 2, 3),
             "split the values' columns into num_heads blocks of their own size d_v / num_heads",
             d_v_head=draw(g, 4, 6)),
        case("large scores (stable softmax)", draw(g, 2, 3), draw(g, 2, 4),
             "use torch.softmax (or subtract each row's maximum) so that large scores do not overflow", scale=30.0),
    ]
    return run_checks("per_head_attention", fn, cases, verbose=verbose)
