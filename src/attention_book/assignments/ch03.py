"""Chapter 3 assignment: a masked softmax with a boolean mask and a temperature.

The chapter writes the masked softmax that takes valid lengths. The assignment
asks for its general form: ``fn(scores, mask, temperature=1.0)`` with scores of
shape (..., queries, keys), a boolean ``mask`` that broadcasts to the scores'
shape (True: the key may be attended to) and a temperature ``T > 0``. It returns
``softmax(scores / T)`` over the allowed keys of each row, 0 at every masked
key, and an all-zero row (not a uniform row, not NaN) where no key is allowed;
in the scores' dtype, finite in float16, whatever the scores' scale, without
writing into ``scores``.
"""

from __future__ import annotations

import torch

from . import Case, Report, case_generator, compare, draw, run_checks

__all__ = ["check_masked_softmax"]


def reference(scores: torch.Tensor, mask: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """The answer, computed in float64 and returned in the scores' dtype."""
    x = scores.double() / temperature
    keep = mask.expand(x.shape)
    weights = torch.softmax(x.masked_fill(~keep, torch.finfo(torch.float64).min), dim=-1) * keep
    return weights.to(scores.dtype)


def _case(name: str, scores, mask, temperature, hint: str, atol: float = 1e-5) -> Case:
    expected = reference(scores, mask, temperature)
    check = compare(expected, atol=atol, rtol=1e-3)
    empty = ~mask.expand(scores.shape).any(dim=-1)  # rows with no allowed key
    original = scores.clone()

    def full_check(got):
        if isinstance(got, torch.Tensor) and got.shape == expected.shape and got.dtype == expected.dtype:
            rows = got.detach().double()
            if not torch.isfinite(rows).all():
                return f"the result has NaN or infinite values (dtype {got.dtype})"
            if empty.any():
                empty_rows = rows[empty]
                uniform = torch.full_like(empty_rows, 1.0 / scores.shape[-1])
                if torch.allclose(empty_rows, uniform, atol=1e-3):
                    return "a row with no allowed key is uniform; it should be all zeros"
        if not torch.equal(scores, original):
            return "your function changed its input scores in place; callers may still need them"
        return check(got)

    return Case(name, (scores, mask, temperature), full_check, hint=hint)


def check_masked_softmax(fn, verbose: bool = True) -> Report:
    """Check the learner's ``fn(scores, mask, temperature)``; every input is drawn from the case seed."""
    g = case_generator(0)

    def shape():
        return draw(g, 2, 3), draw(g, 2, 4), draw(g, 3, 6)

    def scores(*s, scale=1.0, shift=0.0):
        return torch.randn(*s, generator=g) * scale + shift

    def bools(*s, p=0.6):
        m = torch.rand(*s, generator=g) < p
        m[..., 0] |= ~m.any(dim=-1)  # at least one allowed key per row
        return m

    def temperature():
        return round(0.25 + 2.75 * float(torch.rand(1, generator=g)), 3)

    b, q, k = shape()
    per_example = bools(b, 1, k)  # one mask per example, shared by its queries
    b2, q2, k2 = shape()
    per_query = bools(b2, q2, k2)
    b3, q3, k3 = shape()
    s3 = scores(b3, q3, k3, scale=3.0)
    b4, q4, k4 = shape()
    with_empty = bools(b4, q4, k4)
    with_empty[draw(g, 0, b4 - 1), draw(g, 0, q4 - 1)] = False
    b5, q5, k5 = shape()
    b6, q6, k6 = shape()
    half_mask = bools(b6, q6, k6)
    half_mask[0, 0] = False
    b7, q7, k7 = shape()
    cases = [
        _case("one mask per example, shared by its queries", scores(b, q, k), per_example, 1.0,
              hint="the mask broadcasts to the scores' shape: use masked_fill (or torch.where), which broadcasts"),
        _case("one mask per query", scores(b2, q2, k2), per_query, 1.0,
              hint="key j of query i in example b is allowed where mask[b, i, j] is True"),
        _case("every key allowed, a temperature: softmax(scores / T)", s3, torch.ones(b3, q3, k3, dtype=torch.bool),
              temperature(), hint="divide the scores by the temperature before the softmax (T > 1 flattens)"),
        _case("a temperature and a mask", scores(b3, q3, k3, scale=2.0), bools(b3, q3, k3), temperature(),
              hint="divide by T first, then mask, then softmax over the last axis"),
        _case("rows with no allowed key", scores(b4, q4, k4), with_empty, temperature(),
              hint="a row with no allowed key has nothing to attend to: filling its scores with one large "
                   "negative number makes the softmax uniform, and -inf gives NaN (0/0); multiply the softmax "
                   "by the mask so such rows become exactly 0"),
        _case("scores far below -1e6", scores(b5, q5, k5, shift=-1e7), bools(b5, q5, k5), 1.0,
              hint="a fixed fill value such as -1e6 is not 'very negative' when the real scores are even "
                   "lower: fill with torch.finfo(scores.dtype).min, the most negative number of the dtype"),
        _case("float16 scores stay finite, with an empty row", scores(b6, q6, k6, scale=8.0).half(), half_mask,
              temperature(), atol=2e-3,
              hint="-1e6 and -1e9 overflow float16 to -inf; torch.finfo(scores.dtype).min is the most negative "
                   "finite number of any dtype; return the scores' dtype"),
        _case("the scores are not modified in place", scores(b7, q7, k7), bools(b7, q7, k7), temperature(),
              hint="scores[~mask] = value or scores /= T write into the caller's tensor; "
                   "use scores / T and masked_fill, which return new tensors"),
    ]
    return run_checks("masked_softmax", fn, cases, verbose=verbose)
