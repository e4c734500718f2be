"""Chapter 1 assignment: attention pooling with one temperature per query, down to T = 0.

The chapter pools values with the weights ``softmax(scores)`` and shows that a temperature
``T`` moves the weights between the average of the values (large T) and a lookup of the best
key (T -> 0). The learner writes ``softmax_pool(scores, values, temperature)``: scores
(..., num_queries, m), values (..., m, value_size) and temperature (..., num_queries), one
``T >= 0`` per query. It returns ``(pooled, weights)``: weights (..., num_queries, m) equal to
``softmax(scores / T)`` over the m keys of each query's row, and for ``T = 0`` the limit of
that softmax, equal weight on every key tied for the highest score; pooled (..., num_queries,
value_size) the values pooled with those weights.
"""

from __future__ import annotations

import torch

from . import Case, Diagnosis, case_generator, describe, draw, run_checks

__all__ = ["check_softmax_pool"]


def reference(scores, values, temperature):
    """``(pooled, weights)``, computed in float64 and returned in the inputs' dtype."""
    s, t = scores.double(), temperature.double()[..., None]  # one temperature per row
    best = s.max(dim=-1, keepdim=True).values
    ties = (s == best).double()  # the T -> 0 limit: the best keys share the weight
    weights = torch.where(t > 0, torch.softmax(s / torch.where(t > 0, t, 1.0), dim=-1),
                          ties / ties.sum(dim=-1, keepdim=True))
    return (weights @ values.double()).to(values.dtype), weights.to(scores.dtype)


def _weights(scores, temperature, hard):
    """Weights with one temperature per row; rows of T = 0 get ``hard(scores)``."""
    s, t = scores.double(), temperature.double()[..., None]
    return torch.where(t > 0, torch.softmax(s / torch.where(t > 0, t, 1.0), dim=-1), hard(s))


def _first_best(s):
    return torch.nn.functional.one_hot(s.argmax(dim=-1), s.shape[-1]).double()


# Common mistakes: (cause, the weights a function with that mistake gives, or None where it does not apply).
MISTAKES = [
    (("at T = 0 one key gets all the weight although several keys tie for the highest score (argmax keeps "
     "only the first of them): follow softmax(scores / T) of such a row as T shrinks, where tied scores "
     "stay equal for every T"),
     lambda s, t: _weights(s, t, _first_best) if bool((t == 0).any()) else None),
    (("the temperature divides the scores along the keys axis: there is one temperature per query (per row), "
     "so divide by temperature[..., None]"),
     lambda s, t: torch.softmax(s.double() / t.double()[..., None, :], dim=-1)
     if t.shape[-1] == s.shape[-1] and bool((t > 0).all()) else None),
    (("the scores are multiplied by T instead of divided: use scores / T"),
     lambda s, t: torch.softmax(s.double() * t.double()[..., None], dim=-1)),
    (("the temperature is left out: the weights are softmax(scores); divide each row by its temperature"),
     lambda s, t: torch.softmax(s.double(), dim=-1)),
]


ORDER = "the two results come in the wrong order: return (pooled, weights)"


def _values(t: torch.Tensor, shown: int = 8) -> str:
    """The first ``shown`` values of ``t`` (shape and dtype are checked before), e.g. '[0.25, 0.75]'
    or '[0.25, 0.75, ...] (48 values)'."""
    flat = [round(v, 4) for v in t.detach().double().cpu().flatten().tolist()]
    return str(flat) if len(flat) <= shown else f"{str(flat[:shown])[:-1]}, ...] ({len(flat)} values)"


def _case(name: str, scores, values, temperature, hint: str) -> Case:
    pooled, weights = reference(scores, values, temperature)
    values_low = values.double().min(dim=-2, keepdim=True).values
    values_high = values.double().max(dim=-2, keepdim=True).values

    def close(got, want):
        return got.shape == want.shape and torch.allclose(got.detach().double().cpu(), want.double(), atol=1e-5, rtol=1e-4)

    def check(got):
        if isinstance(got, torch.Tensor):  # value-free: the grader names this cause for hidden cases too
            cause = ("expected a tuple (pooled, weights) of two tensors, got one tensor: return the weights "
                     "too, after the pooled values")
            return Diagnosis(cause, cause)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return f"expected a tuple (pooled, weights) of two tensors, got {describe(got)}"
        if not all(isinstance(t, torch.Tensor) for t in got):
            return "expected (pooled, weights) to be tensors, got " + ", ".join(type(t).__name__ for t in got)
        got_pooled, got_weights = got
        if tuple(got_pooled.shape) == tuple(weights.shape) and tuple(got_weights.shape) == tuple(pooled.shape) \
                and tuple(pooled.shape) != tuple(weights.shape):
            return Diagnosis(ORDER, ORDER)
        for what, t, want in (("pooled", got_pooled, pooled), ("weights", got_weights, weights)):
            if tuple(t.shape) != tuple(want.shape):
                return f"expected {what} of shape {tuple(want.shape)}, got shape {tuple(t.shape)}"
            if t.dtype != want.dtype:
                return f"expected {what} in the inputs' dtype {want.dtype}, got dtype {t.dtype}"
        if not torch.isfinite(got_weights).all() or not torch.isfinite(got_pooled).all():
            why = "the result holds NaN or infinity"
            if bool((temperature == 0).any()):
                cause = ("scores / 0 gives infinities and NaN: handle the rows with T = 0 apart, with the "
                         "limit of softmax(scores / T) as T -> 0 (work out what it is when keys tie)")
            else:
                cause = ("exp of a large score / T overflows: subtract each row's maximum before exp (or use "
                         "torch.softmax)")
            return Diagnosis(f"{why} — {cause}", cause)
        if close(got_weights, weights) and close(got_pooled, pooled):
            return None
        if close(got_pooled, weights) and close(got_weights, pooled):
            return Diagnosis(ORDER, ORDER)
        worst = max((got_weights.detach().double().cpu() - weights.double()).abs().max().item(),
                    (got_pooled.detach().double().cpu() - pooled.double()).abs().max().item())
        why = "; ".join(f"{what}: expected {_values(want)}, got {_values(t)}"
                        for what, t, want in (("the weights", got_weights, weights),
                                              ("the pooled values", got_pooled, pooled))
                        if not close(t, want)) + f" (largest difference {worst:.3g})"
        for cause, wrong in MISTAKES:
            answer = wrong(scores, temperature)
            if answer is not None and answer.shape == weights.shape and not torch.allclose(answer, weights.double(), atol=1e-5, rtol=1e-4) \
                    and close(got_weights, answer):
                return Diagnosis(f"{why} — {cause}", cause)
        if close(got_weights, weights):
            cause = "the weights are right but the pooled values are not: pooled = weights @ values"
            return Diagnosis(f"{why} — {cause}", cause)
        outside = (got_pooled.detach().double().cpu() < values_low - 1e-5) | \
            (got_pooled.detach().double().cpu() > values_high + 1e-5)
        if bool(outside.any()):
            cause = ("a pooled value lies outside the range of the values: weights are nonnegative and sum to "
                     "one over the keys, so every output is a convex combination of the values")
            return Diagnosis(f"{why} — {cause}", cause)
        return f"{why} — a possible cause (what this case tests): {hint}"

    return Case(name, (scores, values, temperature), check)


def check_softmax_pool(fn, verbose: bool = True):
    """Check ``fn(scores, values, temperature) -> (pooled, weights)`` on seven cases, every input (shapes
    included) drawn from the case seed."""
    g = case_generator(11)

    def randn(*shape, scale=1.0):
        return scale * torch.randn(*shape, generator=g)

    def temperatures(*shape, low=0.3, high=3.0):
        return low + (high - low) * torch.rand(*shape, generator=g)

    def sizes():
        return draw(g, 2, 4), draw(g, 3, 6), draw(g, 2, 4)

    q, m, d = sizes()
    c1 = randn(q, m, scale=2.0), randn(m, d), temperatures(q)
    b = draw(g, 2, 3)
    q, m, d = sizes()
    c2 = randn(b, q, m), randn(b, m, d), temperatures(b, q)
    q, m, d = sizes()
    s3 = randn(q, m)
    c3 = s3, randn(m, d), torch.zeros(q)
    q, m, d = draw(g, 3, 5), draw(g, 4, 7), draw(g, 2, 4)
    s4 = torch.randint(-2, 2, (q, m), generator=g).float()  # few distinct scores: the best ones tie
    s4[0, :2] = 5.0  # at least one row with a tie at the top
    c4 = s4, randn(m, d), torch.zeros(q)
    q, m, d = sizes()
    c5 = randn(q, m, scale=3.0), randn(m, d), temperatures(q, low=1e-3, high=3e-3)
    b = draw(g, 2, 3)
    q, m, d = draw(g, 3, 5), draw(g, 3, 6), draw(g, 2, 4)
    t6 = temperatures(b, q, low=20.0, high=100.0)
    t6[:, ::2] = 0.0  # every other query looks up, the others average
    c6 = randn(b, q, m), randn(b, m, d), t6
    q, d = draw(g, 2, 4), draw(g, 2, 4)
    t7 = temperatures(q)
    t7[0] = 0.0
    c7 = randn(q, 1, scale=5.0), randn(1, d), t7
    cases = [
        _case("a small example, one temperature per query", *c1,
              "row i of the weights is softmax(scores[i] / T[i]) over the keys (last axis)"),
        _case("a batch of examples", *c2, "leading batch axes: softmax over dim=-1, then weights @ values"),
        _case("T = 0 gives the value of the best key (database lookup)", *c3,
              "at T = 0 all the weight goes to the key with the highest score"),
        _case("T = 0 with tied best scores", *c4,
              "several keys tie for the highest score: work out the limit of softmax(scores / T) of such a "
              "row as T -> 0 (tied scores stay equal for every T)"),
        _case("tiny temperatures do not overflow", *c5,
              "scores / T is huge for a tiny T: subtract each row's maximum before exp, or use torch.softmax"),
        _case("T = 0 for some queries, large T for the others", *c6,
              "a large T flattens the weights towards the average; handle the T = 0 rows apart from the others"),
        _case("a single key returns its value", *c7, "with one key its weight is 1 whatever the score and T"),
    ]
    return run_checks("softmax_pool", fn, cases, verbose=verbose)
