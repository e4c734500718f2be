"""Chapter 6 assignment: sinusoidal encodings of arbitrary positions.

The chapter builds the table of positions 0, 1, …, n - 1. The assignment asks for
the encoding of any positions, integer or not, in any order, with any base:
``fn(positions, num_hiddens, base=10000.0)`` with positions (n,) a float tensor
returns (n, num_hiddens) in the positions' dtype, with
``P[i, 2j] = sin(p_i / base^(2j / d))`` and ``P[i, 2j + 1] = cos(p_i / base^(2j / d))``.
"""

from __future__ import annotations

import torch

from . import Case, case_generator, compare, draw, run_checks

__all__ = ["check_encode_positions"]


def reference(positions: torch.Tensor, num_hiddens: int, base: float = 10000.0) -> torch.Tensor:
    """The answer computed in float64, returned in the positions' dtype."""
    p = positions.double()[:, None]
    columns = torch.arange(num_hiddens, dtype=torch.float64)
    angles = p / base ** ((columns - columns % 2) / num_hiddens)  # columns 2j and 2j + 1 share a frequency
    table = torch.where(columns % 2 == 0, torch.sin(angles), torch.cos(angles))
    return table.to(positions.dtype)


def check_encode_positions(fn, verbose: bool = True):
    """Check ``fn(positions, num_hiddens, base)`` on cases whose every input is drawn from the case seed."""
    g = case_generator(6)

    def even():  # at least 4: with d = 2 the only frequency is 1, whatever the base or the exponent
        return 2 * draw(g, 2, 8)

    n = draw(g, 3, 12)
    cases_in = [
        ("positions 0, 1, 2, ...: the chapter's table", torch.arange(n, dtype=torch.float32), even(), 10000.0),
        ("positions in any order", torch.randperm(draw(g, 4, 10), generator=g).float() * draw(g, 1, 5), even(),
         10000.0),
        ("fractional positions", torch.rand(draw(g, 3, 8), generator=g) * 20, even(), 10000.0),
        ("negative positions", -torch.rand(draw(g, 3, 8), generator=g) * 20, even(), 10000.0),
        ("an odd number of dimensions (the last column is a sine)", torch.rand(draw(g, 3, 6), generator=g) * 9,
         2 * draw(g, 1, 5) + 1, 10000.0),
        ("another base", torch.rand(draw(g, 3, 8), generator=g) * 50, even(), float(draw(g, 50, 5000))),
        ("far positions in float64", torch.rand(draw(g, 3, 8), generator=g, dtype=torch.float64) * 1e5, even(),
         10000.0),
    ]
    hint = ("columns 2j and 2j + 1 share the frequency 1 / base^(2j / d): the exponent uses the even column "
            "index 2j (not j), sines go to even columns and cosines to odd ones; use the base argument")
    cases = [Case(name, (p, d), compare(reference(p, d, b), atol=1e-5, rtol=1e-4), {"base": b}, hint=hint)
             for name, p, d, b in cases_in]
    return run_checks("encode_positions", fn, cases, verbose=verbose)
