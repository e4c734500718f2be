"""Chapter 3 assignment: write the masked softmax.

``check_masked_softmax(fn)`` calls ``fn(X, valid_lens)`` with scores ``X`` of
shape (batch, queries, keys) and ``valid_lens`` that is ``None``, 1-D (batch,)
or 2-D (batch, queries), and compares with the book's
:func:`attention_book.masked_softmax`. Besides the values it checks what the
chapter asks of a masked softmax: no in-place writes to ``X``, an all-zero row
(not a uniform row, not NaN) when a valid length is 0, a fill value that works
whatever the scores' scale, and finite results in float16.
"""

from __future__ import annotations

import torch

from ..models.attention import masked_softmax
from . import Case, Report, case_seed, compare, run_checks

__all__ = ["check_masked_softmax"]


def _case(name: str, X: torch.Tensor, valid_lens, hint: str, atol: float = 1e-5) -> Case:
    """A case comparing ``fn(X, valid_lens)`` with the reference, computed on a copy first."""
    expected = masked_softmax(X.clone(), None if valid_lens is None else valid_lens.clone())
    check = compare(expected.float() if X.dtype != torch.float32 else expected, atol=atol, rtol=1e-3)

    def check_with_dtype(got):
        if isinstance(got, torch.Tensor) and got.dtype != X.dtype:
            return f"expected the result in X's dtype {X.dtype}, got dtype {got.dtype}"
        if isinstance(got, torch.Tensor) and X.dtype != torch.float32:
            got = got.float()
            if not torch.isfinite(got).all():
                return f"the result has NaN or infinite values in {X.dtype}"
        return check(got)

    return Case(name, (X, valid_lens), check_with_dtype, hint=hint)


def _empty_row_case(X: torch.Tensor, valid_lens: torch.Tensor, hint: str) -> Case:
    """Like :func:`_case`, but names the two classic wrong answers for a row with valid length 0."""
    base = _case("valid length 0: an all-zero row, not a uniform row and not NaN", X, valid_lens, hint)
    empty = valid_lens == 0  # examples whose every query has nothing to attend to

    def check(got):
        if isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(X.shape):
            rows = got[empty].detach().float()
            if torch.isnan(rows).any():
                return "the rows with valid length 0 are NaN"
            if rows.numel() and torch.allclose(rows, torch.full_like(rows, 1.0 / X.shape[-1]), atol=1e-4):
                return (f"the rows with valid length 0 are uniform (every weight {1.0 / X.shape[-1]:.3g}); "
                        "they should be all zeros")
        return base.check(got)

    return Case(base.name, base.args, check, hint=hint)


def _in_place_case() -> Case:
    g = torch.Generator().manual_seed(case_seed(3))
    X = torch.randn(2, 3, 5, generator=g)
    original = X.clone()
    lens = torch.tensor([2, 4])
    expected = masked_softmax(original, lens)
    value_check = compare(expected)

    def check(got):
        if not torch.equal(X, original):
            changed = int((X != original).sum())
            return (f"your function changed its input X in place ({changed} of {X.numel()} entries differ "
                    "after the call); callers may still need their scores")
        return value_check(got)

    return Case("X is not modified in place", (X, lens), check,
                hint="indexing assignment such as X[~mask] = value writes into the caller's tensor (a reshape "
                     "of X is usually a view of the same memory); use X.masked_fill(~mask, value), which "
                     "returns a new tensor")


def _cases() -> list[Case]:
    # The first case needs valid_lens, so that a scaffold which only handles None scores 0.
    g = torch.Generator().manual_seed(case_seed(0))
    rand = lambda *shape: torch.rand(*shape, generator=g)  # noqa: E731
    big_negative = -1e7 + torch.randn(1, 2, 4, generator=g)  # valid scores far below -1e6
    half = (torch.randn(2, 2, 5, generator=g) * 8).half()
    return [
        _case("1-D valid_lens (one length per example), as in d2l's example", rand(2, 2, 4), torch.tensor([2, 3]),
              hint="key j of example b is kept when j < valid_lens[b], for every query of that example"),
        _case("no valid_lens: an ordinary softmax over the keys", rand(2, 3, 4), None,
              hint="with valid_lens=None return torch.softmax(X, dim=-1)"),
        _case("2-D valid_lens (one length per query)", rand(2, 3, 5), torch.tensor([[1, 3, 5], [2, 4, 1]]),
              hint="with a 2-D valid_lens, key j of query i in example b is kept when j < valid_lens[b, i]; "
                   "do not repeat a 2-D tensor as if it were 1-D, and do not mix up its two axes"),
        _empty_row_case(rand(2, 2, 4), torch.tensor([0, 3]),
              hint="a row with no valid key has nothing to attend to: filling every score with the same large "
                   "negative number makes the softmax uniform (1/num_keys each), and -inf gives NaN (0/0); "
                   "multiply the softmax by the mask so such rows become exactly 0"),
        _case("scores below -1e6 are still ranked correctly", big_negative, torch.tensor([[2, 3]]),
              hint="a fixed fill value such as -1e6 is not 'very negative' when the real scores are even "
                   "lower: fill with torch.finfo(X.dtype).min, the most negative number of X's dtype"),
        _case("float16 scores stay finite (incl. an empty row)", half, torch.tensor([0, 3]), atol=2e-3,
              hint="-1e6 and -1e9 overflow float16 to -inf; torch.finfo(X.dtype).min is the most negative "
                   "finite number of any dtype"),
        _in_place_case(),
    ]


def check_masked_softmax(fn, verbose: bool = True) -> Report:
    """Check the learner's ``fn(X, valid_lens)`` against the book's masked softmax."""
    return run_checks("masked_softmax", fn, _cases(), verbose=verbose)
