"""Chapter 2 assignment: the Nadaraya–Watson estimator with a Gaussian kernel.

The learner writes ``nw_gaussian(x_train, y_train, x_query, sigma)`` for scalar
features: x_train (n,), y_train (n,), x_query (n_q,) -> predictions (n_q,), with
weights proportional to exp(-(q - k)^2 / (2 sigma^2)) normalised over the keys.
"""

from __future__ import annotations

import torch

from . import Case, Diagnosis, case_generator, compare, draw, run_checks

__all__ = ["check_nadaraya_watson"]


def _reference(x_train, y_train, x_query, sigma):
    """The estimate computed in float64 as a softmax of -(q - k)^2 / (2 sigma^2), returned in float32."""
    scores = -((x_query.double()[:, None] - x_train.double()[None, :]) ** 2) / (2 * sigma**2)
    return (torch.softmax(scores, dim=-1) @ y_train.double()).to(x_query.dtype)


def _narrow_check(expected: torch.Tensor):
    """The narrow kernel's check: its hint depends on what went wrong (NaN, or a wrong value)."""
    plain = compare(expected, atol=1e-4)

    def check(got):
        why = plain(got)
        if why is None:
            return None
        if isinstance(got, torch.Tensor) and got.is_floating_point() and torch.isnan(got).any():
            cause = ("exp(-(q-k)²/2σ²) underflows to 0 for every key and 0/0 is NaN; compute the weights as "
                     "a softmax of -(q-k)²/(2σ²), which subtracts the largest score first")
        else:
            cause = ("with a narrow kernel each query's weight goes almost all to its nearest key, so the "
                     "estimate is that key's label: check that the weights of each query are normalised over "
                     "the keys (they sum to 1)")
        return Diagnosis(f"{why} — {cause}", cause)

    return check


def check_nadaraya_watson(fn, verbose: bool = True):
    """Check ``fn(x_train, y_train, x_query, sigma)`` against the Gaussian Nadaraya–Watson estimate;
    every input (sizes and widths included) is drawn from the case seed."""
    from ..models.kernels import make_kernel_data

    g = case_generator(3)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=g))
    data = make_kernel_data(n_train=draw(g, 30, 50), seed=seed)
    few = make_kernel_data(n_train=draw(g, 5, 9), seed=seed + 1)

    def width(low, high):
        return round(low + (high - low) * float(torch.rand(1, generator=g)), 3)

    def picks(x, n):
        return x[torch.randperm(len(x), generator=g)[:n]]

    n_far = draw(g, 3, 5)
    x_far = 0.5 * torch.arange(n_far) + 0.1 * torch.rand(n_far, generator=g)  # keys 0.4 or more apart
    y_far = torch.randn(n_far, generator=g)
    q_far = x_far + 0.01 * torch.randn(n_far, generator=g)  # each query next to its own key
    q_far[0] -= 5.0  # and one far below every key
    nearest = (q_far[:, None] - x_far[None, :]).abs().argmin(dim=1)
    one_x, one_y = torch.rand(1, generator=g) * 5, torch.randn(1, generator=g)
    level = float(torch.randn(1, generator=g))

    def case(name, x, y, q, sigma, expected=None, hint=""):
        expected = _reference(x, y, q, sigma) if expected is None else expected
        return Case(name, (x, y, q, sigma), compare(expected, atol=1e-4), hint=hint)

    cases = [
        case("training points and a validation grid", data.x_train, data.y_train, data.x_val, width(0.3, 0.7),
             hint="weights ∝ exp(-(q - k)² / (2σ²)), normalised over the training points (keys) of each query"),
        case("a few training points, a few queries", few.x_train, few.y_train,
             picks(few.x_val, draw(g, 2, 4)), width(0.4, 0.9),
             hint="check the factor 2 in 2σ² and that you normalise over keys, not over queries"),
        # a kernel wide enough that no query's weight underflows (that is the narrow kernel's case): the
        # case tests one point alone, so an unstable exp fails it at no seed
        case("one training point: the estimate is its label everywhere", one_x, one_y, picks(data.x_val, 5),
             width(1.0, 2.0), expected=one_y.expand(5)),
        case("constant labels are reproduced exactly", data.x_train, torch.full_like(data.y_train, level),
             data.x_val, width(0.3, 0.7), expected=torch.full_like(data.x_val, level)),
        case("a very wide kernel averages all labels", few.x_train, few.y_train, picks(few.x_val, 4), 1e4,
             expected=few.y_train.mean().expand(4)),
        Case("a narrow kernel far from the data (no NaN)", (x_far, y_far, q_far, 0.003),
             _narrow_check(y_far[nearest])),
    ]
    return run_checks("nadaraya_watson", fn, cases, verbose=verbose)
