"""Chapter 5 assignment: grouped-query attention, returning each query head's output.

The chapter writes multi-head attention with as many key and value heads as query heads.
The assignment varies it: ``fn(queries, keys, values, num_heads, num_kv_heads)`` with
queries (batch, n_q, num_heads * p), keys (batch, n_k, num_kv_heads * p) and values
(batch, n_k, num_kv_heads * p_v) returns (batch, num_heads, n_q, p_v), where query head
``h`` takes feature columns ``h * p`` to ``(h + 1) * p - 1`` of the queries and attends
with key and value head ``h // (num_heads // num_kv_heads)`` (consecutive query heads
share one key/value head), scaled by the square root of the head size ``p``.

The page's two worked exercises have checkers too, not graded (their solutions are public):
:func:`verify_head_weights` (11.5.1, every head's attention weights) and
:func:`verify_gate_importance` (11.5.2, the gradient of the loss with respect to a gate per head).
"""

from __future__ import annotations

import contextlib
import io
import math

import torch

from . import Case, Diagnosis, case_generator, compare, draw, run_checks

__all__ = ["check_per_head_attention", "verify_gate_importance", "verify_head_weights"]

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


def _heads_attention(queries, keys, values, num_heads, num_kv_heads, kv_of, scale, dim=-1):
    """Every query head attending with key/value head ``kv_of(h)``, scores divided by ``scale``, the
    softmax over axis ``dim`` of the scores (-1, the keys, is right)."""
    step, step_v = queries.shape[-1] // num_heads, values.shape[-1] // num_kv_heads
    heads = []
    for h in range(num_heads):
        kv = kv_of(h)
        q = queries[..., h * step:(h + 1) * step].double()
        k = keys[..., kv * step:(kv + 1) * step].double()
        v = values[..., kv * step_v:(kv + 1) * step_v].double()
        heads.append(torch.softmax(q @ k.transpose(-1, -2) / scale, dim=dim) @ v)
    return torch.stack(heads, dim=1)


def _plain_reshape(queries, keys, values, num_heads, num_kv_heads):
    """The answer of a learner who reshapes (batch, n, heads * p) straight to (batch, heads, n, p)."""
    b, n_q, n_k = queries.shape[0], queries.shape[1], keys.shape[1]
    q = queries.double().reshape(b, num_heads, n_q, -1)
    k = keys.double().reshape(b, num_kv_heads, n_k, -1).repeat_interleave(num_heads // num_kv_heads, dim=1)
    v = values.double().reshape(b, num_kv_heads, n_k, -1).repeat_interleave(num_heads // num_kv_heads, dim=1)
    return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v


CONCATENATED = ("the heads are concatenated, (batch, n_q, num_heads * p_v): return them apart, shape (batch, "
                "num_heads, n_q, p_v), query head h's output at index h of axis 1 (no concatenation)")
HEADS_AXIS = ("the heads axis is third, (batch, n_q, num_heads, p_v): move it to axis 1, (batch, num_heads, "
              "n_q, p_v) (transpose(1, 2))")
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
    # only where p_v differs from p (the case of values of another size) is this answer wrong
    ("the scores are divided by sqrt(p_v), the size of one value head: divide by sqrt(p), the size of one "
     "query/key head (the values' size plays no part in the scores)",
     lambda Q, K, V, h, kv: _heads_attention(Q, K, V, h, kv, lambda i: i // (h // kv),
                                             math.sqrt(V.shape[-1] // kv))),
    ("the softmax runs over the queries (dim=-2): each query's weights are a softmax over the keys, the last "
     "axis of the scores (dim=-1)",
     lambda Q, K, V, h, kv: _heads_attention(Q, K, V, h, kv, lambda i: i // (h // kv),
                                             math.sqrt(Q.shape[-1] // h), dim=-2)),
    # told by its shape where n_q differs from num_heads (check), by its values where they are equal
    (HEADS_AXIS, lambda Q, K, V, h, kv: reference(Q, K, V, h, kv).transpose(1, 2)),
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

    b, h, n_q, p_v = want.shape

    def check(got):
        why = base(got)
        if why is None or not isinstance(got, torch.Tensor):
            return why
        # a wrong layout of the heads: one cause for every case, said once by the grader (issue 36)
        if tuple(got.shape) == (b, n_q, h * p_v):
            return Diagnosis(f"{why}; {CONCATENATED}", CONCATENATED)
        if tuple(got.shape) == (b, n_q, h, p_v) != tuple(want.shape):
            return Diagnosis(f"{why}; {HEADS_AXIS}", HEADS_AXIS)
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
             ("split the values' columns into num_kv_heads blocks of p_v = values.shape[-1] // num_kv_heads "
              "columns; the scores are still divided by sqrt(p), the keys' head size"), d_v_head=draw(g, 4, 6)),
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


# --------------------------------------------------------------------------- the exercises' checkers
# Exercises 11.5.1 and 11.5.2 are worked exercises, not graded assignments: their solutions are public
# (folded on the website). Their checkers are called ``verify_*``, not ``check_*``: a ``check_*`` function
# of this module would be registered as a graded assignment (``assignments._collect``).


def _random_layer(g: torch.Generator, num_hiddens: int, num_heads: int, dropout: float = 0.0):
    """A multi-head attention layer whose weights are drawn from ``g`` (variance 1 / fan-in: unit-size
    projections, so the weights are neither uniform nor one-hot and every mistake changes them)."""
    from ..models.attention import MultiHeadAttention

    with torch.random.fork_rng(devices=[]):  # its initialisation leaves the learner's random numbers alone
        layer = MultiHeadAttention(num_hiddens, num_heads, dropout=dropout)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
    return layer


def _split(X: torch.Tensor, num_heads: int, plain: bool = False) -> torch.Tensor:
    """(batch, n, heads * p) -> (batch, heads, n, p): head h gets columns h * p .. (h + 1) * p - 1 of every
    token; ``plain``: the mistake of reshaping straight to (batch, heads, n, p)."""
    b, n = X.shape[0], X.shape[1]
    if plain:
        return X.reshape(b, num_heads, n, -1)
    return X.reshape(b, n, num_heads, -1).transpose(1, 2)


@torch.no_grad()
def _head_weights_by_hand(layer, queries, keys, values, valid_lens, *, plain=False, scale=None, mask=True,
                          softmax=True):
    """The weights of every head, (batch, heads, queries, keys), computed from the layer's matrices (another
    route than the layer's own); the keyword arguments give the mistakes' results."""
    h = layer.num_heads
    q, k = _split(layer.W_q(queries), h, plain), _split(layer.W_k(keys), h, plain)
    scores = q @ k.transpose(-1, -2) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    if valid_lens is not None and mask:
        hidden = torch.arange(keys.shape[1])[None, :] >= valid_lens[:, None]  # (batch, keys)
        scores = scores.masked_fill(hidden[:, None, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1) if softmax else scores


HEAD_WEIGHTS_MISTAKES = [
    ("keys beyond the valid length have weight above 0: pass valid_lens on to the layer",
     lambda *a: _head_weights_by_hand(*a, mask=False)),
    ("the heads are split by reshaping straight to (batch, heads, n, p), which gives a head whole tokens "
     "instead of its own columns of every token: reshape to (batch, n, heads, p), then transpose",
     lambda *a: _head_weights_by_hand(*a, plain=True)),
    ("the scores are not divided by sqrt(p), the square root of one head's size",
     lambda *a: _head_weights_by_hand(*a, scale=1.0)),
    ("the scores are divided by the square root of the whole width: divide by sqrt(p), one head's size",
     lambda layer, *a: _head_weights_by_hand(layer, *a, scale=math.sqrt(layer.num_hiddens))),
    ("these are the scores before the softmax: each row of weights sums to 1 over the valid keys",
     lambda *a: _head_weights_by_hand(*a, softmax=False)),
]


def _head_weights_check(args):
    """The check of one case of :func:`verify_head_weights`: the answer, then the cause of a wrong one."""
    want = _head_weights_by_hand(*args)
    base = compare(want, atol=1e-5, rtol=1e-4)
    b, h, n_q, n_k = want.shape
    layer = args[0]
    mistakes = [(cause, bad) for cause, wrong in HEAD_WEIGHTS_MISTAKES for bad in [wrong(*args)]
                if not torch.allclose(bad, want, atol=1e-5, rtol=1e-4)]
    output_shape = (layer.num_hiddens,)
    training = layer.training  # the caller's mode, which the function must leave as it was

    def check(got):
        if layer.training != training:
            cause = (f"the layer is left in {'training' if layer.training else 'evaluation'} mode, not the "
                     "caller's: the layer records its weights before dropout, so no eval() or train() is "
                     "needed (or restore the mode: was = attention.training, then attention.train(was))")
            layer.train(training)  # a later run of the case sees the layer as it was
            return Diagnosis(cause, cause)
        if got is None:
            cause = ("got None: the layer keeps its weights only when asked; call it with need_weights=True, "
                     "then read its attention_weights")
            return Diagnosis(cause, cause)
        if not isinstance(got, torch.Tensor):
            return base(got)
        shape = tuple(got.shape)
        if shape == (b, n_q) + output_shape:
            cause = (f"shape {shape} is the layer's output (batch, queries, num_hiddens), not its weights: "
                     "read attention.attention_weights after the call")
            return Diagnosis(cause, cause)
        if shape == (b, n_q, n_k):
            cause = (f"shape {shape} has no heads axis: one map per head is wanted, (batch, heads, queries, "
                     f"keys) = {(b, h, n_q, n_k)}, not their average")
            return Diagnosis(cause, cause)
        if shape == (b * h, n_q, n_k):
            cause = (f"shape {shape} is (batch * heads, queries, keys): give every head its own axis, "
                     f"(batch, heads, queries, keys) = {(b, h, n_q, n_k)}")
            return Diagnosis(cause, cause)
        why = base(got)
        if why is None or shape != tuple(want.shape) or got.dtype != want.dtype:
            return why
        got = got.detach().cpu()
        worst = (got - want).abs().max().item()
        why = f"shape {shape} as expected, but other values (largest difference {worst:.3g})"
        for cause, bad in mistakes:
            if torch.allclose(got, bad, atol=1e-5, rtol=1e-4):
                return Diagnosis(f"{why}; {cause}", cause)
        if not torch.allclose(got.sum(-1), torch.ones(()), atol=1e-4):
            cause = "a row of weights does not sum to 1: the weights are a softmax over each query's valid keys"
            return Diagnosis(f"{why}; {cause}", cause)
        return why

    return check


def verify_head_weights(fn, verbose: bool = True):
    """Exercise 11.5.1: check ``fn(attention, queries, keys, values, valid_lens)``, which returns the weights of
    every head of the multi-head attention layer ``attention``, (batch, heads, queries, keys), on layers and
    inputs drawn from the case seed. Prints a line per case (what is wrong, and why where a common mistake
    explains it) and returns the :class:`Report`."""
    g = case_generator(51)

    def case(name, num_heads, head_size, n_q, n_k, lens=True, dropout=0.0, same=False):
        batch = draw(g, 2, 3)
        layer = _random_layer(g, num_heads * head_size, num_heads, dropout)
        width = num_heads * head_size
        queries = torch.randn(batch, n_q, width, generator=g)
        keys = queries if same else torch.randn(batch, n_k, width, generator=g)
        values = queries if same else torch.randn(batch, n_k, width, generator=g)
        # valid lengths of 2 keys or more (one valid key gives the weight 1 whatever the scores), one of
        # them below the number of keys (the mask must show)
        valid_lens = None
        if lens:
            valid_lens = torch.randint(2, n_k + 1, (batch,), generator=g)
            valid_lens[0] = draw(g, 2, n_k - 1)
        args = (layer, queries, keys, values, valid_lens)
        hint = ("call the layer on the inputs with valid_lens and need_weights=True, then return its "
                "attention_weights")
        return Case(name, args, _head_weights_check(args), hint=hint)

    # names of 36 characters at most: a line "  ✔ name" fits a 390 px phone's column (issue 38)
    # widths of 8 or more, above the 7 keys at most, and 2 heads or more but in one case: no wrong shape
    # (the output, the heads flattened into the batch) is the shape of another mistake
    cases = [
        case("5 heads of 20 units each", 5, 20, 4, 6),
        case("every key valid (valid_lens None)", draw(g, 2, 4), draw(g, 4, 6), draw(g, 2, 5), draw(g, 3, 7),
             lens=False),
        case("one head", 1, draw(g, 8, 12), draw(g, 2, 4), draw(g, 4, 7)),
        case("self-attention (q = k = v)", draw(g, 2, 4), draw(g, 4, 6), 5, 5, same=True),
        case("dropout (the weights before it)", draw(g, 2, 4), draw(g, 4, 6), draw(g, 2, 4),
             draw(g, 4, 7), dropout=0.5),
    ]
    with torch.random.fork_rng(devices=[]):  # a layer in training mode draws dropout's random numbers
        return run_checks("head_weights", fn, cases, verbose=verbose)


def _gate_gradient(run, *, plain=False, absolute=True, reduction="mean", at=1.0):
    """|dL / d gate_h| of every head of the offset-task model ``run.model`` on ``run.X_test``, computed by
    writing out its forward pass with the gates between the heads and W_o (another route than a hook on W_o);
    the keyword arguments give the mistakes' results (a gate on every num_heads-th column, the signed gradient,
    a summed loss, the gates at another value)."""
    from torch.nn import functional as F

    model, X, Y = run.model, run.X_test, run.Y_test
    mha = model.attention
    h = mha.num_heads
    gates = torch.full((h,), float(at), requires_grad=True)
    H = model.positions(model.embedding(X)).detach()
    q, k, v = (_split(W(H), h) for W in (mha.W_q, mha.W_k, mha.W_v))
    heads = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1) @ v  # (b, h, n, p)
    if plain:  # gate h on the columns h, h + num_heads, ... of W_o's input
        concat = heads.transpose(1, 2).flatten(2)
        O = mha.W_o(concat * gates.repeat(concat.shape[-1] // h))
    else:
        O = mha.W_o((heads * gates[None, :, None, None]).transpose(1, 2).flatten(2))
    logits = model.readout(O).unflatten(-1, (model.num_offsets, model.vocab_size)).flatten(0, -2)
    loss = F.cross_entropy(logits, Y.flatten(), reduction=reduction)
    (grad,) = torch.autograd.grad(loss, gates)
    return grad.abs() if absolute else grad


GATE_MISTAKES = [
    ("the signed gradient: the importance is its size |dL/d gate| (take .abs()); the sign only says which way "
     "the loss moves", {"absolute": False}),
    ("the loss is summed: average it over every example, position and offset (F.cross_entropy's default), "
     "as offset_task.offset_task_loss does", {"reduction": "sum"}),
    ("gate h multiplies every num_heads-th column of W_o's input (repeat): head h's own columns are "
     "h * d_head .. (h + 1) * d_head - 1 (repeat_interleave)", {"plain": True}),
    ("the gates are at 0 when the gradient is taken: take it at gates of 1, the model as trained",
     {"at": 0.0}),
]


GATE_RECIPE = ("gates = torch.ones(num_heads, requires_grad=True); a forward pre-hook on W_o multiplies "
               "its input by gates.repeat_interleave(d_head); the mean cross-entropy of the model on run.X_test "
               "and run.Y_test; backward; gates.grad.abs(); remove the hook")


def _gate_check(run):
    """The check of one case of :func:`verify_gate_importance`: the answer, then the cause of a wrong one,
    and a model left as it was (no hook, the same output)."""
    from ..experiments.offset_task import head_importance

    want = _gate_gradient(run)
    # float32 through another route: close to the largest gradient's size, not to each one's
    tol = {"atol": 1e-4 * float(want.abs().max()) + 1e-9, "rtol": 1e-3}
    mistakes = [(cause, bad) for cause, kwargs in GATE_MISTAKES for bad in [_gate_gradient(run, **kwargs)]
                if tuple(bad.shape) != tuple(want.shape) or not torch.allclose(bad, want, **tol)]
    mistakes.append(("these are the ablation drops (accuracy lost without each head), not the gradient",
                     head_importance(run.model, run.model.attention, run.X_test, run.Y_test)))
    with torch.no_grad():
        before = run.model(run.X_test)
    h = run.num_heads

    def check(got):
        with torch.no_grad():
            hooks = any(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in run.model.modules())
            changed = not torch.allclose(run.model(run.X_test), before)
        if hooks or changed:
            cause = ("the model is left changed (a hook still on it, or its weights moved): remove every hook "
                     "when you are done (handle.remove(), in a finally block) and do not step an optimiser")
            return Diagnosis(cause, cause)
        if not isinstance(got, torch.Tensor):  # before any .shape of it: no error in the checker's code
            cause = (f"got a {type(got).__name__}, not a tensor: return a tensor of shape (num_heads,), "
                     "one number per head, such as gates.grad.abs() (no .tolist() or .item())")
            return Diagnosis(cause, cause)
        if tuple(got.shape) == (run.model.attention.num_hiddens,) != (h,):
            cause = f"shape {tuple(got.shape)} has one number per column of W_o's input: sum them per head, ({h},)"
            return Diagnosis(cause, cause)
        got = got.detach().cpu()
        why = compare(want, **tol)(got)
        if why is None or tuple(got.shape) != (h,) or got.dtype != want.dtype:
            return why
        if torch.isnan(got).any():
            return why
        # the gradients are small (about 1e-4): three significant digits, not four decimals
        shown = lambda t: "[" + ", ".join(f"{float(x):.3g}" for x in t) + "]"
        why = f"expected {shown(want)}, got {shown(got)}"
        for cause, bad in mistakes:
            if torch.allclose(got, bad.to(got.dtype), **tol):
                return Diagnosis(f"{why}; {cause}", cause)
        if (got < 0).any():  # signed, and another mistake on top: name both
            size = got.abs()
            for cause, bad in mistakes:
                if cause != GATE_MISTAKES[0][0] and torch.allclose(size, bad.to(got.dtype), **tol):
                    both = f"{GATE_MISTAKES[0][0]}; and {cause}"
                    return Diagnosis(f"{why}; {both}", both)
        return why

    return check


def verify_gate_importance(fn, verbose: bool = True):
    """Exercise 11.5.2: check ``fn(run)``, which returns |dL / d gate_h| for each head of ``run.model`` (an
    offset-task model, :class:`~attention_book.experiments.offset_task.OffsetTaskModel`) on ``run.X_test``,
    ``run.Y_test``, every gate at 1, ``L`` the mean cross-entropy. The models are untrained, their weights and
    examples drawn from the case seed. Prints a line per case and returns the :class:`Report`."""
    from ..experiments.offset_task import HeadRun, OffsetTaskModel, make_offset_task

    g = case_generator(52)

    def case(name, num_heads, num_hiddens=32):
        with torch.random.fork_rng(devices=[]):  # its initialisation leaves the learner's random numbers alone
            model = OffsetTaskModel(num_hiddens=num_hiddens, num_heads=num_heads)
        # unit-size embeddings, projections of variance 1 / fan-in, and a read-out 100 times smaller: its
        # scores are small, as a model's early in training, where dL/d gate has either sign (with large
        # random scores shrinking any head lowers the loss: every gradient is positive)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                table = pname.startswith(("embedding", "positions")) or p.dim() == 1
                size = 1.0 if table else 1 / math.sqrt(p.shape[-1])
                p.copy_(torch.randn(p.shape, generator=g) * size * (0.01 if pname.startswith("readout") else 1))
        X, Y = make_offset_task(draw(g, 40, 80), seed=draw(g, 0, 2**31 - 1))
        run = HeadRun(num_heads, model.eval(), None, float("nan"), X, Y)
        # a negative gradient in every case, so the signed gradient never passes: while there is none, turn
        # the most positive head's contribution round (its columns of W_o times -1: with small scores its
        # gradient changes sign)
        d_head = num_hiddens // num_heads
        for _ in range(num_heads):
            signed = _gate_gradient(run, absolute=False)
            if (signed < 0).any():
                break
            h = int(signed.argmax())
            with torch.no_grad():
                model.attention.W_o.weight[:, h * d_head:(h + 1) * d_head] *= -1
        return Case(name, (run,), _gate_check(run), hint=GATE_RECIPE)

    cases = [case("4 heads (the chapter's setting)", 4), case("two heads", 2),
             case("eight heads of 4 units", 8), case("four heads of 16 units", 4, num_hiddens=64)]
    return run_checks("gate_importance", fn, cases, verbose=verbose)
