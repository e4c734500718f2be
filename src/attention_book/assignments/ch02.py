"""Chapter 2 assignment: the Nadaraya–Watson estimator with a Gaussian kernel.

The learner writes ``nw_gaussian(x_train, y_train, x_query, sigma)`` for scalar
features: x_train (n,), y_train (n,), x_query (n_q,) -> predictions (n_q,), with
weights proportional to exp(-(q - k)^2 / (2 sigma^2)) normalised over the keys.
"""

from __future__ import annotations

import torch

from . import Case, case_seed, compare, run_checks

__all__ = ["check_nadaraya_watson"]


def _reference(x_train, y_train, x_query, sigma):
    from ..models.kernels import nadaraya_watson

    return nadaraya_watson(x_train, y_train, x_query, "gaussian", sigma)[0]


def check_nadaraya_watson(fn, verbose: bool = True):
    """Check ``fn(x_train, y_train, x_query, sigma)`` against :func:`attention_book.nadaraya_watson`."""
    from ..models.kernels import make_kernel_data

    data = make_kernel_data(n_train=40, seed=case_seed(3))
    few = make_kernel_data(n_train=7, seed=case_seed(5))
    x_far = torch.tensor([0.0, 0.3, 0.9])
    y_far = torch.tensor([1.0, -2.0, 4.0])
    q_far = torch.tensor([-3.0, 0.31, 6.0])

    def case(name, x, y, q, sigma, expected=None, hint=""):
        expected = _reference(x, y, q, sigma) if expected is None else expected
        return Case(name, (x, y, q, sigma), compare(expected, atol=1e-4), hint=hint)

    cases = [
        case("40 training points, validation grid, sigma=0.5", data.x_train, data.y_train, data.x_val, 0.5,
             hint="weights ∝ exp(-(q - k)² / (2σ²)), normalised over the training points (keys) of each query"),
        case("7 training points, 3 queries, sigma=0.2", few.x_train, few.y_train, few.x_val[::17], 0.2,
             hint="check the factor 2 in 2σ² and that you normalise over keys, not over queries"),
        case("one training point: the estimate is its label everywhere", torch.tensor([1.5]), torch.tensor([2.0]),
             data.x_val[:5], 0.3, expected=torch.full((5,), 2.0)),
        case("constant labels are reproduced exactly", data.x_train, torch.full_like(data.y_train, -1.25),
             data.x_val, 0.5, expected=torch.full_like(data.x_val, -1.25)),
        case("a very wide kernel averages all labels", few.x_train, few.y_train, few.x_val[:4], 1e4,
             expected=few.y_train.mean().expand(4)),
        case("degenerate: a narrow kernel far from the data (no NaN)", x_far, y_far, q_far, 0.01,
             expected=torch.tensor([1.0, -2.0, 4.0]),
             hint="exp(-(q-k)²/2σ²) underflows to 0 for every key and 0/0 is NaN; compute the weights as a "
                  "softmax of -(q-k)²/(2σ²), which subtracts the largest score first"),
    ]
    return run_checks("nadaraya_watson", fn, cases, verbose=verbose)
