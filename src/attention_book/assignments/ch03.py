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


class Diagnosis(str):
    """A check's reason (with values) that carries ``cause``: what went wrong, in words that hold no value
    of the case, so the grader's feedback may show it for a hidden case too."""

    def __new__(cls, text: str, cause: str):
        obj = super().__new__(cls, text)
        obj.cause = cause
        return obj


IN_PLACE = ("your function changed its input scores in place (scores[~mask] = ... or scores /= T): use "
            "scores / T and masked_fill, which return new tensors")
FLOAT16 = ("the result is infinite or NaN in float16: -1e6 and -1e9 overflow float16 to -inf; fill with "
           "torch.finfo(scores.dtype).min, the most negative finite number of any dtype")
EMPTY_NAN = ("a row with no allowed key is NaN: filling with -inf gives 0/0; multiply the softmax by the mask so "
             "such rows become exactly 0")
EMPTY_UNIFORM = ("a row with no allowed key is uniform; it should be all zeros: multiply the softmax by the mask")
# Common mistakes: (cause, the answer a function with that mistake gives). Tried in this order.
MISTAKES = [
    ("the temperature is left out: the result is softmax(scores) over the allowed keys; divide the scores by T "
     "before the softmax", lambda s, m, t: reference(s, m, 1.0) if t != 1.0 else None),
    ("the scores are multiplied by T instead of divided: use scores / T",
     lambda s, m, t: reference(s, m, 1.0 / t) if t != 1.0 else None),
    ("the mask is ignored: masked keys get weight; fill the scores where mask is False before the softmax",
     lambda s, m, t: torch.softmax(s.double() / t, dim=-1).to(s.dtype) if not bool(m.all()) else None),
    ("the mask is used the wrong way round: True means the key may be attended to",
     lambda s, m, t: reference(s, ~m, t) if not bool(m.all()) else None),
    ("masked keys still get weight where the scores are very negative: a fixed fill value such as -1e6 is not "
     "'very negative' when the real scores are lower; fill with torch.finfo(scores.dtype).min",
     lambda s, m, t: _filled(s, m, t, -1e6)),
]


def _filled(scores, mask, temperature, value):
    x = (scores.double() / temperature).masked_fill(~mask.expand(scores.shape), value)
    return (torch.softmax(x, dim=-1) * mask.expand(scores.shape)).to(scores.dtype)


def _case(name: str, scores, mask, temperature, focus: str, atol: float = 1e-5) -> Case:
    """A case whose failure is explained by its cause when a common mistake matches the result exactly;
    otherwise by ``focus``, what this case tests, given as a possible cause."""
    expected = reference(scores, mask, temperature)
    check = compare(expected, atol=atol, rtol=1e-3)
    empty = ~mask.expand(scores.shape).any(dim=-1)  # rows with no allowed key
    original = scores.clone()

    def full_check(got):
        if not torch.equal(scores, original):
            return Diagnosis(IN_PLACE, IN_PLACE)
        why = check(got)
        if why is None or not (isinstance(got, torch.Tensor) and got.shape == expected.shape
                               and got.dtype == expected.dtype):
            return why
        rows = got.detach().double()
        if not torch.isfinite(rows).all():
            if empty.any() and torch.isnan(rows[empty]).any():
                return Diagnosis(f"{why} — {EMPTY_NAN}", EMPTY_NAN)
            if scores.dtype == torch.float16:
                return Diagnosis(f"{why} — {FLOAT16}", FLOAT16)
        if empty.any() and torch.allclose(rows[empty], torch.full_like(rows[empty], 1.0 / scores.shape[-1]),
                                          atol=1e-3):
            return Diagnosis(f"{why} — {EMPTY_UNIFORM}", EMPTY_UNIFORM)
        for cause, wrong in MISTAKES:
            answer = wrong(scores, mask, temperature)
            if answer is not None and not torch.allclose(answer.double(), expected.double(), atol=atol, rtol=1e-3) \
                    and torch.allclose(rows, answer.double(), atol=atol, rtol=1e-3):
                return Diagnosis(f"{why} — {cause}", cause)
        possible = f"a possible cause (what this case tests): {focus}"
        return Diagnosis(f"{why} — {possible}", possible)

    return Case(name, (scores, mask, temperature), full_check)


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
              focus="the mask broadcasts to the scores' shape: use masked_fill (or torch.where), which broadcasts"),
        _case("one mask per query", scores(b2, q2, k2), per_query, 1.0,
              focus="key j of query i in example b is allowed where mask[b, i, j] is True"),
        _case("every key allowed, a temperature: softmax(scores / T)", s3, torch.ones(b3, q3, k3, dtype=torch.bool),
              temperature(), focus="divide the scores by the temperature before the softmax (T > 1 flattens)"),
        _case("a temperature and a mask", scores(b3, q3, k3, scale=2.0), bools(b3, q3, k3), temperature(),
              focus="divide by T first, then mask, then softmax over the last axis"),
        _case("rows with no allowed key", scores(b4, q4, k4), with_empty, temperature(),
              focus="a row with no allowed key has nothing to attend to: filling its scores with one large "
                   "negative number makes the softmax uniform, and -inf gives NaN (0/0); multiply the softmax "
                   "by the mask so such rows become exactly 0"),
        _case("scores far below -1e6", scores(b5, q5, k5, shift=-1e7), bools(b5, q5, k5), 1.0,
              focus="a fixed fill value such as -1e6 is not 'very negative' when the real scores are even "
                   "lower: fill with torch.finfo(scores.dtype).min, the most negative number of the dtype"),
        _case("float16 scores stay finite, with an empty row", scores(b6, q6, k6, scale=8.0).half(), half_mask,
              temperature(), atol=2e-3,
              focus="-1e6 and -1e9 overflow float16 to -inf; torch.finfo(scores.dtype).min is the most negative "
                   "finite number of any dtype; return the scores' dtype"),
        _case("the scores are not modified in place", scores(b7, q7, k7), bools(b7, q7, k7), temperature(),
              focus="scores[~mask] = value or scores /= T write into the caller's tensor; "
                   "use scores / T and masked_fill, which return new tensors"),
    ]
    return run_checks("masked_softmax", fn, cases, verbose=verbose)
