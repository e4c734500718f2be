"""Chapter 5 assignment: split the features into heads."""

from __future__ import annotations

import torch

from . import Case, case_seed, compare, run_checks

__all__ = ["check_split_heads"]


def _reference(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    from ..models.attention import transpose_qkv

    return transpose_qkv(X, num_heads)


def check_split_heads(fn, verbose: bool = True):
    """Check ``fn(X, num_heads)``: (batch, length, num_hiddens) -> (batch, num_heads, length, num_hiddens / num_heads),
    with head ``h`` holding feature columns ``h * d_head .. (h + 1) * d_head - 1``."""
    gen = torch.Generator().manual_seed(case_seed(5))
    inputs = [
        ("1 sequence, 2 tokens, 4 features, 2 heads", torch.arange(8.0).reshape(1, 2, 4), 2),
        ("batch of 2, 3 tokens, 6 features, 3 heads", torch.randn(2, 3, 6, generator=gen), 3),
        ("one head (nothing to split)", torch.randn(2, 4, 6, generator=gen), 1),
        ("as many heads as features (d_head = 1)", torch.randn(3, 2, 4, generator=gen), 4),
        ("a single token", torch.randn(2, 1, 8, generator=gen), 2),
    ]
    hint = ("reshape to (batch, length, num_heads, d_head) first — so each head gets a contiguous block of "
            "feature columns — and only then swap the length and head axes")
    cases = [Case(name, (X.clone(), h), compare(_reference(X, h), atol=0, rtol=0), hint=hint)
             for name, X, h in inputs]
    return run_checks("split_heads", fn, cases, verbose=verbose)
