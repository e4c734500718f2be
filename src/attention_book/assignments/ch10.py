"""Chapter 10 assignment: finish attention from the softmax states of any number of blocks of keys.

The chapter's page merges two states (the step FlashAttention repeats); the assignment asks for a
variation: a list of states in any order, reduced to the attention output and the log-sum-exp.
"""

from __future__ import annotations

import torch

from ..models.tiled import softmax_block
from . import Case, Diagnosis, case_generator, draw, run_checks

__all__ = ["check_merge_softmax"]


def _out_of(states) -> torch.Tensor:
    """The attention output of the blocks whose ``states`` are given (rows that saw no key: 0)."""
    m = torch.stack([s[0] for s in states]).amax(0)
    safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    l = sum(s[1] * torch.exp(s[0] - safe) for s in states)
    acc = sum(s[2] * torch.exp(s[0] - safe)[:, None] for s in states)
    return acc / torch.where(l > 0, l, torch.ones_like(l))[:, None]


# Common mistakes in the loop over the states: (cause, the positions of the states such a loop merges).
SUBSETS = [
    ("the loop leaves the last state out: merge every state of the list, the last one too",
     lambda n: range(0, n - 1)),
    (("the loop stops after the first two states and leaves the others out: merge every state of the list, "
     "one after the other"), lambda n: range(0, 2)),
    (("the loop leaves the first state out: start from states[0] and merge every state of the list, "
     "states[1:], into it"), lambda n: range(1, n)),
    ("only the first and the last state are merged: merge every state of the list, those between them too",
     lambda n: [0, n - 1]),
    ("only one state is used: merge every state of the list", lambda n: [n - 1]),
]


def _left_out_cause(missing: tuple[int, ...], n: int) -> str:
    """The cause for a result that several of the loops above give alike: it names the states left out."""
    which = "the first state" if missing == (0,) else (
        "the last state" if missing == (n - 1,) else ("the states between the first and the last"
                                                        if missing == tuple(range(1, n - 1)) else
                                                        "some of the states"))
    return f"the result leaves {which} out (blocks with no key add nothing): merge every state of the list"


def _expect(states, scores, values):
    """A check: ``got`` must be ``(out, lse)`` of all the blocks together (zeros and -inf for a row that saw no key)."""
    lse = torch.logsumexp(scores, dim=-1)  # -inf for a row whose every score is -inf
    empty = torch.isneginf(lse)
    weights = torch.softmax(scores.masked_fill(empty[..., None], 0.0), dim=-1).masked_fill(empty[..., None], 0.0)
    want_out = weights @ values
    shapes = (tuple(want_out.shape), tuple(lse.shape))
    n = len(states)
    holds_keys = [bool((state[1] > 0).any()) for state in states]  # an empty block adds nothing to a merge
    partial = []  # (cause, out, non-empty states left out) for each subset that gives another answer than all
    for cause, part in SUBSETS:
        chosen = sorted(set(part(n)))
        if 0 < len(chosen) < n:
            out = _out_of([states[i] for i in chosen])
            if not torch.allclose(out[~torch.isneginf(lse)], want_out[~torch.isneginf(lse)], atol=1e-6, rtol=1e-5):
                missing = tuple(i for i in range(n) if i not in chosen and holds_keys[i])
                partial.append((cause, out, missing))

    def check(got):
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return f"expected a tuple (out, lse) of two tensors, got {type(got).__name__}"
        if not all(isinstance(t, torch.Tensor) for t in got):
            return "expected (out, lse) to be tensors, got " + ", ".join(type(t).__name__ for t in got)
        if any(t.dtype != torch.float64 for t in got):
            return "expected out and lse in the inputs' dtype torch.float64, got " + ", ".join(str(t.dtype) for t in got)
        out, got_lse = (t.detach().cpu() for t in got)
        if (tuple(out.shape), tuple(got_lse.shape)) != shapes:
            return (f"expected shapes out {shapes[0]} (that of acc), lse {shapes[1]} (that of m), got "
                    f"out {tuple(out.shape)}, lse {tuple(got_lse.shape)}")
        if torch.isnan(out).any() or torch.isnan(got_lse).any():
            rows = (torch.isnan(got_lse) | torch.isnan(out).any(-1)).nonzero().flatten().tolist()[:3]
            return (f"the result contains NaN (rows {rows}): it comes from -inf - (-inf) (empty states), "
                    "from 0 / 0, or from an exponential that overflowed to inf")
        if torch.isinf(out).any():
            return "out is infinite: rescale by exp(m_old - m_new), never exp(m) itself, which overflows"
        if (out[empty] != 0).any() or not torch.isneginf(got_lse[empty]).all():
            return "a row that saw no key in any block must give out = 0 and lse = -inf"
        seen = ~empty
        if not torch.allclose(out[seen], want_out[seen], atol=1e-6, rtol=1e-5):
            worst = (out[seen] - want_out[seen]).abs().max().item()
            why = f"out is not the attention output over all the blocks (largest difference {worst:.3g})"
            alike = [(cause, missing) for cause, other, missing in partial
                     if torch.allclose(out[seen], other[seen], atol=1e-6, rtol=1e-5)]
            if alike:
                # Several loops give this result when a block is empty (merging the first and the last state
                # of [empty, a, b] gives b alone): name the states left out, not one loop's guess.
                cause = alike[0][0] if len({c for c, _ in alike}) == 1 else _left_out_cause(alike[0][1], n)
                return Diagnosis(f"{why} — {cause}", cause)
            return f"{why}; did you rescale both l and acc of every state to the new maximum, then divide acc by l?"
        if not torch.allclose(got_lse[seen], lse[seen], atol=1e-6, rtol=1e-6):
            worst = (got_lse[seen] - lse[seen]).abs().max().item()
            return (f"lse is not the log-sum-exp of all the scores (largest difference {worst:.3g}); "
                    "it is m + log(l) of the merged state, m the maximum that l is measured against")
        return None

    return check


def _state(scores, values):
    return tuple(t.to(torch.float64) for t in softmax_block(scores, values))


def check_merge_softmax(fn, verbose: bool = True):
    """Check ``fn(states) -> (out, lse)``: the attention output and log-sum-exp of several blocks of keys.

    ``states`` is a list of one or more softmax states, one per block of keys, in any
    order. A state, for each query row: ``m`` (rows,) the largest score, ``l`` (rows,)
    the sum of ``exp(score - m)``, ``acc`` (rows, d_v) the sum of
    ``exp(score - m) * value``; a row that saw no key has ``m = -inf``, ``l = 0``,
    ``acc = 0``. ``out`` (rows, d_v) must be the attention output over all the blocks
    (zeros for a row that saw no key) and ``lse`` (rows,) the log-sum-exp of all their
    scores (``-inf`` for such a row), with no NaN. Every input (sizes and the number
    of blocks included) is drawn from the case seed.
    """
    g = case_generator(10)
    rows, d_v = draw(g, 2, 6), draw(g, 1, 5)

    def block(n, shift=0.0, scale=1.0):
        return torch.randn(rows, n, generator=g, dtype=torch.float64) * scale + shift, \
            torch.randn(n, d_v, generator=g, dtype=torch.float64)

    def empty(n):
        return torch.full((rows, n), float("-inf"), dtype=torch.float64), block(n)[1]

    def case(name, blocks, hint, order=None):
        scores = torch.cat([s for s, _ in blocks], dim=-1)
        values = torch.cat([v for _, v in blocks], dim=0)
        states = [_state(s, v) for s, v in blocks]
        if order is not None:
            states = [states[i] for i in order]
        return Case(name, (states,), _expect(states, scores, values), hint=hint)

    masked = block(4)
    masked[0][draw(g, 0, rows - 1)] = float("-inf")  # one row sees none of this block's keys
    many = draw(g, 3, 5)
    cases = [
        case("three blocks of random scores", [block(draw(g, 2, 6)) for _ in range(3)],
             "merge two states at a time: m = max(m_a, m_b), each rescaled by exp(m_its - m); then out = acc / l"),
        case("a single block", [block(draw(g, 2, 6))],
             "with one state there is nothing to merge: out = acc / l, lse = m + log(l)"),
        case("the last block holds the largest scores", [block(3) for _ in range(many - 1)] + [block(3, shift=8.0)],
             "when the maximum grows, the earlier l and acc must shrink by exp(m_old - m)"),
        case("the blocks in a shuffled order", [block(3), block(4, shift=3.0), block(2, shift=-2.0)],
             "merging is symmetric: the result must not depend on the order of the states",
             order=[2, 0, 1]),
        case("scores around 1000 (exp would overflow)", [block(3, shift=1000.0), block(2, shift=1001.0),
                                                         block(2, shift=999.0)],
             "only ever exponentiate differences such as m_a - m, which are <= 0"),
        case("one row saw no key of one block", [block(3), masked, block(2)],
             "an empty row of a state has m = -inf, l = 0: its factor exp(-inf - m) = 0, which torch gives you"),
        case("the first block is empty for every row", [empty(3), block(3), block(draw(g, 1, 4))],
             "merging with an empty state must keep the other states' numbers"),
        case("every block empty", [empty(2) for _ in range(draw(g, 2, 4))],
             "m = -inf everywhere: use 0 instead of m inside exp(m_a - m); such a row gives out = 0, lse = -inf"),
        case("many blocks of one key", [block(1, scale=3.0) for _ in range(draw(g, 6, 10))],
             "a single key is a block like any other"),
    ]
    return run_checks("merge_softmax", fn, cases, verbose=verbose)
