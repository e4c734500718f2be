"""Chapter 1 assignment: attention pooling with softmax over scores.

The learner writes ``softmax_pool(scores, values)``: scores (..., num_queries, m)
and values (..., m, value_size) -> (..., num_queries, value_size), the values
pooled with the weights ``softmax(scores)`` taken over the m keys.
"""

from __future__ import annotations

import torch

from . import Case, case_generator, compare, draw, run_checks

__all__ = ["check_softmax_pool"]


def _reference(scores: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    weights = torch.softmax(scores.double(), dim=-1)
    return (weights @ values.double()).to(values.dtype)


def _convex(scores: torch.Tensor, values: torch.Tensor):
    """A check: the reference's shape and values, with a sentence on convexity when an output
    lies outside the range of the values."""
    expected = _reference(scores, values)
    inner = compare(expected)
    low, high = values.min(dim=-2, keepdim=True).values, values.max(dim=-2, keepdim=True).values

    def check(got):
        problem = inner(got)
        if problem and isinstance(got, torch.Tensor) and got.shape == expected.shape:
            if ((got < low - 1e-5) | (got > high + 1e-5)).any():
                return ("an output lies outside the range of the values: softmax weights are nonnegative and "
                        "sum to one, so every output must be a convex combination of the values")
        return problem

    return check


def check_softmax_pool(fn, verbose: bool = True):
    """Check ``fn(scores, values)`` against softmax attention pooling on six cases, every input
    (shapes included) drawn from the case seed."""
    g = case_generator(11)

    def randn(*shape, scale=1.0):
        return scale * torch.randn(*shape, generator=g)

    q, m, d = draw(g, 2, 4), draw(g, 3, 6), draw(g, 2, 3)
    s1, v1 = randn(q, m, scale=2.0), randn(m, d)
    b, q, m, d = draw(g, 2, 3), draw(g, 2, 5), draw(g, 3, 6), draw(g, 2, 4)
    s2, v2 = randn(b, q, m), randn(b, m, d)
    q, m, d = draw(g, 4, 7), draw(g, 5, 8), draw(g, 2, 4)
    s3, v3 = randn(q, m, scale=8.0), randn(m, d)
    q, m, d = draw(g, 2, 4), draw(g, 3, 6), draw(g, 2, 3)
    pick = torch.randint(0, m, (q,), generator=g)
    s4 = randn(q, m)
    s4[torch.arange(q), pick] += 1000.0
    v4 = randn(m, d)
    q, m, d = draw(g, 2, 4), draw(g, 3, 6), draw(g, 2, 3)
    s5, v5 = torch.full((q, m), float(randn(1, scale=3.0))), randn(m, d)
    q, d = draw(g, 2, 4), draw(g, 2, 4)
    s6, v6 = randn(q, 1, scale=5.0), randn(1, d)
    cases = [
        Case("a small example", (s1, v1), compare(_reference(s1, v1)),
             hint="weights = softmax of the scores over the keys (last axis), then a weighted sum of the values"),
        Case("a batch of examples", (s2, v2), compare(_reference(s2, v2)),
             hint="torch.matmul (or @) pools every batch at once; take the softmax over dim=-1"),
        Case("outputs stay inside the values' range (convexity)", (s3, v3), _convex(s3, v3),
             hint="the weights must be nonnegative and sum to one over the keys"),
        Case("one huge score picks one value (database lookup)", (s4, v4), compare(v4[pick]),
             hint="exp(1000) overflows; subtract each row's maximum score first, or use torch.softmax"),
        Case("equal scores give the average of the values", (s5, v5), compare(v5.mean(0).expand(s5.shape[0], -1)),
             hint="equal scores mean uniform weights 1/m"),
        Case("a single key returns its value", (s6, v6), compare(v6.expand(s6.shape[0], -1)),
             hint="with one key its weight is 1 whatever the score"),
    ]
    return run_checks("softmax_pool", fn, cases, verbose=verbose)
