"""Chapter 1 assignment: attention pooling with softmax over scores.

The learner writes ``softmax_pool(scores, values)``: scores (..., num_queries, m)
and values (..., m, value_size) -> (..., num_queries, value_size), the values
pooled with the weights ``softmax(scores)`` taken over the m keys.
"""

from __future__ import annotations

import torch

from . import Case, case_seed, compare, run_checks

__all__ = ["check_softmax_pool"]


def _reference(scores: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    from ..experiments.lookup import attention_pool

    return attention_pool(torch.softmax(scores, dim=-1), values)


def _inside_hull(values: torch.Tensor):
    """A check: each output coordinate lies between the smallest and largest value of that coordinate."""
    low, high = values.min(dim=-2).values, values.max(dim=-2).values  # (value_size,)

    def check(got):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {type(got).__name__}"
        if got.shape[-1] != values.shape[-1]:
            return f"expected outputs with {values.shape[-1]} features, got shape {tuple(got.shape)}"
        if torch.isnan(got).any():
            return "the result contains NaN"
        tol = 1e-5
        if ((got < low - tol) | (got > high + tol)).any():
            return ("an output lies outside the range of the values: softmax weights are nonnegative and sum "
                    "to one, so every output must be a convex combination of the values")
        return None

    return check


def check_softmax_pool(fn, verbose: bool = True):
    """Check ``fn(scores, values)`` against softmax attention pooling on six cases."""
    gen = torch.Generator().manual_seed(case_seed(11))
    s1 = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    v1 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, -1.0]])
    s2 = torch.randn(2, 4, 5, generator=gen)
    v2 = torch.randn(2, 5, 3, generator=gen)
    s3 = 8 * torch.randn(6, 7, generator=gen)
    v3 = torch.randn(7, 4, generator=gen)
    s4 = torch.tensor([[0.0, 1000.0, 0.0], [-1000.0, -1000.0, 0.0]])
    v4 = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    s5 = torch.full((3, 4), 2.5)
    v5 = torch.arange(8.0).reshape(4, 2)
    s6 = torch.tensor([[-3.0], [7.0]])
    v6 = torch.tensor([[0.5, -1.5, 2.0]])
    cases = [
        Case("small example (2 queries, 3 keys)", (s1, v1), compare(_reference(s1, v1)),
             hint="weights = softmax of the scores over the keys (last axis), then a weighted sum of the values"),
        Case("batched: scores (2, 4, 5), values (2, 5, 3)", (s2, v2), compare(_reference(s2, v2)),
             hint="torch.matmul (or @) pools every batch at once; take the softmax over dim=-1"),
        Case("outputs stay inside the values' range (convexity)", (s3, v3), _inside_hull(v3),
             hint="the weights must be nonnegative and sum to one over the keys"),
        Case("one huge score picks one value (database lookup)", (s4, v4),
             compare(torch.tensor([[3.0, 4.0], [5.0, 6.0]])),
             hint="exp(1000) overflows; subtract each row's maximum score first, or use torch.softmax"),
        Case("equal scores give the average of the values", (s5, v5), compare(v5.mean(0).expand(3, 2)),
             hint="equal scores mean uniform weights 1/m"),
        Case("a single key returns its value", (s6, v6), compare(v6.expand(2, 3)),
             hint="with one key its weight is 1 whatever the score"),
    ]
    return run_checks("softmax_pool", fn, cases, verbose=verbose)
