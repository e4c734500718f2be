"""Chapter 10 assignment: merge the softmax states of two blocks of keys (the step FlashAttention repeats)."""

from __future__ import annotations

import torch

from ..models.tiled import softmax_block
from . import Case, case_generator, draw, run_checks

__all__ = ["check_merge_softmax"]


def _describe_state(got) -> str | None:
    """None when ``got`` looks like a state (m, l, acc) of tensors, else what is wrong with it."""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return f"expected a tuple (m, l, acc) of three tensors, got {type(got).__name__}"
    if not all(isinstance(t, torch.Tensor) for t in got):
        return "expected (m, l, acc) to be tensors, got " + ", ".join(type(t).__name__ for t in got)
    return None


def _expect(a, b, scores, values):
    """A check: ``got`` must be the state of both blocks — same output acc / l, same log-sum-exp m + log l."""
    lse = torch.logsumexp(scores, dim=-1)  # -inf for a row whose every score is -inf
    empty = torch.isneginf(lse)
    weights = torch.softmax(scores.masked_fill(empty[..., None], 0.0), dim=-1).masked_fill(empty[..., None], 0.0)
    want_out = weights @ values
    shapes = (tuple(a[0].shape), tuple(a[1].shape), tuple(a[2].shape))

    def check(got):
        problem = _describe_state(got)
        if problem:
            return problem
        if any(t.dtype != torch.float64 for t in got):
            return "expected m, l and acc in the inputs' dtype torch.float64, got " + ", ".join(str(t.dtype) for t in got)
        m, l, acc = (t.detach().cpu() for t in got)
        if (tuple(m.shape), tuple(l.shape), tuple(acc.shape)) != shapes:
            return (f"expected shapes m {shapes[0]}, l {shapes[1]}, acc {shapes[2]} (those of the inputs), got "
                    f"m {tuple(m.shape)}, l {tuple(l.shape)}, acc {tuple(acc.shape)}")
        if torch.isnan(m).any() or torch.isnan(l).any() or torch.isnan(acc).any():
            rows = (torch.isnan(l) | torch.isnan(acc).any(-1)).nonzero().flatten().tolist()[:3]
            return (f"the merged state contains NaN (rows {rows}): it comes from -inf - (-inf) (two empty states) "
                    "or from an exponential that overflowed to inf")
        if torch.isinf(l).any() or torch.isinf(acc).any():
            return "l or acc is infinite: rescale by exp(m_old - m_new), never exp(m) itself, which overflows"
        if (l[empty] != 0).any() or (acc[empty] != 0).any():
            return "a row that saw no key at all must keep l = 0 and acc = 0"
        seen = ~empty
        out = acc[seen] / l[seen][..., None]
        if not torch.allclose(out, want_out[seen], atol=1e-6, rtol=1e-5):
            worst = (out - want_out[seen]).abs().max().item()
            return (f"acc / l is not the attention output over both blocks (largest difference {worst:.3g}); "
                    "did you rescale both l and acc of each state to the new maximum?")
        got_lse = m[seen] + torch.log(l[seen])
        if not torch.allclose(got_lse, lse[seen], atol=1e-6, rtol=1e-6):
            worst = (got_lse - lse[seen]).abs().max().item()
            return (f"m + log(l) is not the log-sum-exp of all the scores (largest difference {worst:.3g}); "
                    "m must be the running maximum that l and acc are measured against")
        return None

    return check


def _state(scores, values):
    return tuple(t.to(torch.float64) for t in softmax_block(scores, values))


def check_merge_softmax(fn, verbose: bool = True):
    """Check ``fn(a, b) -> (m, l, acc)``, the softmax state of two blocks of keys from the states of each.

    A state of a block, for each query row: ``m`` (...,) the largest score,
    ``l`` (...,) the sum of ``exp(score - m)``, ``acc`` (..., d_v) the sum of
    ``exp(score - m) * value``; a row that saw no key has ``m = -inf``, ``l = 0``,
    ``acc = 0``. The merged state must give the attention output over both blocks
    (``acc / l``) and their log-sum-exp (``m + log l``), with no NaN or infinity.
    Every input (sizes included) is drawn from the case seed.
    """
    g = case_generator(10)
    rows, d_v = draw(g, 2, 6), draw(g, 1, 5)

    def block(n, shift=0.0, scale=1.0):
        return torch.randn(rows, n, generator=g, dtype=torch.float64) * scale + shift, \
            torch.randn(n, d_v, generator=g, dtype=torch.float64)

    def case(name, first, second, hint, swap=False):
        (s_a, v_a), (s_b, v_b) = first, second
        a, b = _state(s_a, v_a), _state(s_b, v_b)
        scores, values = torch.cat((s_a, s_b), dim=-1), torch.cat((v_a, v_b), dim=0)
        args = (b, a) if swap else (a, b)
        return Case(name, args, _expect(*args, scores, values), hint=hint)

    lens = [2 + int(x) for x in torch.randint(0, 5, (2,), generator=g)]
    masked = block(4)
    masked[0][draw(g, 0, rows - 1)] = float("-inf")  # one row sees none of this block's keys
    all_masked = (torch.full((rows, 3), float("-inf"), dtype=torch.float64), block(3)[1])
    cases = [
        case("two blocks of random scores", block(lens[0]), block(lens[1]),
             "m = max(m_a, m_b); rescale each state by exp(m_its - m) before adding"),
        case("the second block holds the largest scores", block(3), block(3, shift=8.0),
             "when the maximum grows, the earlier l and acc must shrink by exp(m_a - m)"),
        case("the same blocks in the other order", block(3), block(4, shift=3.0),
             "merging is symmetric: the result must not depend on which state comes first", swap=True),
        case("scores around 1000 (exp would overflow)", block(3, shift=1000.0), block(2, shift=1001.0),
             "only ever exponentiate differences such as m_a - m, which are <= 0"),
        case("one row saw no key of the first block", masked, block(3),
             "an empty row of a has m_a = -inf, l_a = 0: its factor exp(-inf - m) = 0, which torch gives you"),
        case("the first block is empty for every row", all_masked, block(3),
             "merging with an empty state must return the other state's numbers"),
        case("both blocks empty", all_masked, (torch.full((rows, 2), float("-inf"), dtype=torch.float64),
                                                block(2)[1]),
             "m = -inf everywhere: use 0 instead of m inside exp(m_a - m) so that -inf - (-inf) never happens"),
        case("a block of one key", block(1, scale=3.0), block(5, scale=3.0),
             "a single key is a block like any other"),
    ]
    return run_checks("merge_softmax", fn, cases, verbose=verbose)
