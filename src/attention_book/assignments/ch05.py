"""Chapter 5 assignment: grouped-query attention, returning each query head's output.

The chapter writes multi-head attention with as many key and value heads as query heads.
The assignment varies it: ``fn(queries, keys, values, num_heads, num_kv_heads)`` with
queries (batch, n_q, num_heads * p), keys (batch, n_k, num_kv_heads * p) and values
(batch, n_k, num_kv_heads * p_v) returns (batch, num_heads, n_q, p_v), where query head
``h`` takes feature columns ``h * p`` to ``(h + 1) * p - 1`` of the queries and attends
with key and value head ``h // (num_heads // num_kv_heads)`` (consecutive query heads
share one key/value head), scaled by the square root of the head size ``p``.
"""

from __future__ import annotations

import contextlib
import io
import math

import torch

from . import Case, Diagnosis, case_generator, compare, draw, run_checks

__all__ = ["check_per_head_attention"]

ASSIGNMENT = "per_head_attention"  # the grader's name for it (its blocked package functions, its report)


def reference(queries, keys, values, num_heads: int, num_kv_heads: int) -> torch.Tensor:
    """The answer, query head by query head with a loop (a different route from the reshapes a learner writes)."""
    step = queries.shape[-1] // num_heads
    step_v = values.shape[-1] // num_kv_heads
    group = num_heads // num_kv_heads
    heads = []
    for h in range(num_heads):
        kv = h // group
        q = queries[..., h * step:(h + 1) * step].double()
        k = keys[..., kv * step:(kv + 1) * step].double()
        v = values[..., kv * step_v:(kv + 1) * step_v].double()
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(step), dim=-1)
        heads.append(weights @ v)
    return torch.stack(heads, dim=1).to(queries.dtype)


def _heads_attention(queries, keys, values, num_heads, num_kv_heads, kv_of, scale):
    """Every query head attending with key/value head ``kv_of(h)``, scores divided by ``scale``."""
    step, step_v = queries.shape[-1] // num_heads, values.shape[-1] // num_kv_heads
    heads = []
    for h in range(num_heads):
        kv = kv_of(h)
        q = queries[..., h * step:(h + 1) * step].double()
        k = keys[..., kv * step:(kv + 1) * step].double()
        v = values[..., kv * step_v:(kv + 1) * step_v].double()
        heads.append(torch.softmax(q @ k.transpose(-1, -2) / scale, dim=-1) @ v)
    return torch.stack(heads, dim=1)


def _plain_reshape(queries, keys, values, num_heads, num_kv_heads):
    """The answer of a learner who reshapes (batch, n, heads * p) straight to (batch, heads, n, p)."""
    b, n_q, n_k = queries.shape[0], queries.shape[1], keys.shape[1]
    q = queries.double().reshape(b, num_heads, n_q, -1)
    k = keys.double().reshape(b, num_kv_heads, n_k, -1).repeat_interleave(num_heads // num_kv_heads, dim=1)
    v = values.double().reshape(b, num_kv_heads, n_k, -1).repeat_interleave(num_heads // num_kv_heads, dim=1)
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v


# Common mistakes: (cause in words that hold no value of a case, the output a function with that mistake gives).
MISTAKES = [
    ("the key/value heads are tiled (torch.repeat or .expand then reshape) instead of repeated in place: query "
     "heads 0 and 1 must share key/value head 0 (h // group, torch.repeat_interleave), not heads 0 and num_kv_heads",
     lambda Q, K, V, h, kv: _heads_attention(Q, K, V, h, kv, lambda i: i % kv, math.sqrt(Q.shape[-1] // h))),
    ("the tensors are reshaped straight to (batch, heads, n, p): that gives one head whole tokens instead of its "
     "slice of every token; reshape to (batch, n, heads, p) first, then move the heads axis forward (transpose)",
     _plain_reshape),
    ("the scores are divided by the square root of the whole width: divide by sqrt(p), the size of one head",
     lambda Q, K, V, h, kv: _heads_attention(Q, K, V, h, kv, lambda i: i // (h // kv), math.sqrt(Q.shape[-1]))),
    (("the scores are not scaled: divide each query-key dot product by sqrt(p), the square root of the size "
      "of one head, before the softmax"),
     lambda Q, K, V, h, kv: _heads_attention(Q, K, V, h, kv, lambda i: i // (h // kv), 1.0)),
]
DTYPE = ("the result must come back in the inputs' dtype (float64 in, float64 out): compute in that dtype, "
         "without .float() or a float32 tensor of your own")


def _diagnosing(want, args):
    """``compare`` with the answer ``want``, then the cause of a failure in words: a wrong dtype, or a common
    mistake whose output the answer is. A mistake that gives the right answer on this case (tiled heads
    with one key/value head, or with as many as query heads) is never named for it."""
    base = compare(want, atol=1e-9, rtol=1e-7)
    right = want.double()
    mistakes = [(cause, bad) for cause, wrong in MISTAKES for bad in [wrong(*args)]
                if tuple(bad.shape) != tuple(right.shape) or not torch.allclose(bad, right, atol=1e-7, rtol=1e-6)]

    def check(got):
        why = base(got)
        if why is None or not isinstance(got, torch.Tensor):
            return why
        if tuple(got.shape) == tuple(want.shape) and got.dtype != want.dtype:
            return Diagnosis(f"{why}; {DTYPE}", DTYPE)
        if tuple(got.shape) == tuple(want.shape) and not torch.isnan(got).any():
            # the shape is right: say so once, and how far the values are off
            worst = (got.detach().double().cpu() - right.cpu()).abs().max().item()
            why = f"shape {tuple(want.shape)} as expected, but other values (largest difference {worst:.3g})"
        for cause, bad in mistakes:
            if tuple(got.shape) == tuple(bad.shape) and torch.allclose(got.detach().double().cpu(), bad,
                                                                       atol=1e-7, rtol=1e-6):
                return Diagnosis(f"{why}; {cause}", cause)
        return why

    return check


def check_per_head_attention(fn, verbose: bool = True):
    """Check ``fn(queries, keys, values, num_heads, num_kv_heads)`` on cases whose every input is drawn from the case seed."""
    g = case_generator(5)

    def case(name, kv_heads, group, d_head, hint, n_q=None, n_k=None, d_v_head=None, shift=0.0):
        heads = kv_heads * group
        batch = draw(g, 1, 3)
        n_q = draw(g, 2, 5) if n_q is None else n_q
        n_k = draw(g, 2, 6) if n_k is None else n_k
        d_v_head = d_head if d_v_head is None else d_v_head
        Q = torch.randn(batch, n_q, heads * d_head, generator=g, dtype=torch.float64)
        K = torch.randn(batch, n_k, kv_heads * d_head, generator=g, dtype=torch.float64)
        # ``shift`` as the first column of every head of the queries and keys: each score gains shift² / sqrt(p)
        # (exp of it overflows), the same for every key of a row, so the softmax is that of the other columns'
        # scores (not one-hot): a wrong scale, no scale or a wrong head still changes the answer. (Adding shift
        # to random columns instead gave a term shift * k_0 that differs between keys and made the softmax
        # nearly one-hot, where leaving the scale out went unseen at some seeds.)
        if shift:
            Q[..., ::d_head] = shift
            K[..., ::d_head] = shift
        V = torch.randn(batch, n_k, kv_heads * d_v_head, generator=g, dtype=torch.float64)
        args = (Q, K, V, heads, kv_heads)
        return Case(name, args, _diagnosing(reference(*args), args), hint=hint)

    share = ("query head h uses key/value head h // (num_heads // num_kv_heads): split each tensor into its own "
             "number of heads, then repeat every key/value head for its group (torch.repeat_interleave)")
    cases = [
        case("query heads sharing key/value heads", 2, draw(g, 2, 3), draw(g, 2, 3), share),
        # two key/value heads or more wherever query heads share them (but the case of one): a tiled or
        # interleaved sharing fails the same cases at every seed
        case("scaled by each head's own size", 2, 2, draw(g, 3, 5),
             "divide the scores by sqrt(p), the size of one head, not by sqrt of the whole width"),
        case("one key/value head for every query head", 1, draw(g, 2, 4), draw(g, 2, 4),
             "with num_kv_heads = 1 every query head attends with the same keys and values"),
        case("as many key/value heads as query heads", draw(g, 2, 3), 1, draw(g, 2, 3),
             "with num_kv_heads = num_heads this is the chapter's multi-head attention, heads kept apart"),
        case("more keys than queries", 2, 2, draw(g, 2, 4), "the softmax runs over the keys (last axis)",
             n_q=draw(g, 1, 2), n_k=draw(g, 5, 8)),
        case("values of another size than the keys", 2, draw(g, 2, 3), draw(g, 2, 3),
             "split the values' columns into num_kv_heads blocks of their own size", d_v_head=draw(g, 4, 6)),
        case("large scores (stable softmax)", 2, draw(g, 2, 3), draw(g, 2, 4),
             "use torch.softmax (or subtract each row's maximum) so that large scores do not overflow", shift=60.0),
    ]
    if not verbose:
        return run_checks(ASSIGNMENT, fn, cases, verbose=False)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        report = run_checks(ASSIGNMENT, fn, cases)
    print(_in_learners_words(printed.getvalue(), getattr(fn, "__name__", "")), end="")
    return report


def _in_learners_words(text: str, name: str) -> str:
    """The checker's printout with the learner's name for the function (the assignment's page asks for
    ``grouped_head_attention``) instead of the assignment's name, which the page never uses."""
    if not name.isidentifier() or name == ASSIGNMENT:
        return text
    return text.replace(f"{name} ({ASSIGNMENT})", name).replace(f"{ASSIGNMENT}: ", f"{name}: ")
