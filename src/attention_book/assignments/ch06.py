"""Chapter 6 assignment: sinusoidal encodings of arbitrary positions.

The chapter builds the table of positions 0, 1, …, n - 1. The assignment asks for
the encoding of any positions, integer or not, in any order, with any base:
``fn(positions, num_hiddens, base=10000.0)`` with positions (n,) a float tensor
returns (n, num_hiddens) in the positions' dtype, with
``P[i, 2j] = sin(p_i / base^(2j / d))`` and ``P[i, 2j + 1] = cos(p_i / base^(2j / d))``.

A failed case names its own cause: a wrong type, shape or dtype says so, and wrong values
are compared with what each common mistake gives (the base ignored, the exponent j / d,
sines and cosines swapped or in two halves, …) so the feedback names the mistake made.

Exercise 11.6.3 (a worked exercise, its solution public) has its own checker,
:func:`verify_relative_attention`: it loads weights drawn from the case seed into the learner's
relative self-attention layer and names the common slips (the offset i - j for j - i, the table
read without its shift, one head's biases for all, no clipping, ...). Exercise 11.6.2's,
:func:`verify_learned_positions`, compares the learner's learned position table with the package's
and checks that a fresh table starts at the token embeddings' scale (std 1).
"""

from __future__ import annotations

import functools
import math

import torch

from . import Case, Diagnosis, case_generator, compare, draw, run_checks

__all__ = ["check_encode_positions", "verify_learned_positions", "verify_relative_attention"]


def _table(positions, num_hiddens: int, base: float, exponent=lambda columns: columns - columns % 2,
           cosine_first: bool = False, halves: bool = False, scale=None) -> torch.Tensor:
    """The table in float64; the keyword arguments make the common mistakes (the right table by default).

    ``exponent(columns)`` is the number k in base^(k / d) for each column; ``scale`` (a function of the
    positions and base^(k / d)) replaces the division; ``halves`` puts all sines before all cosines."""
    p = positions.double()[:, None]
    columns = torch.arange(num_hiddens, dtype=torch.float64)
    if halves:  # column c < ceil(d / 2) is the sine of frequency c, the rest the cosines in the same order
        first = (num_hiddens + 1) // 2
        pair = torch.where(columns < first, columns, columns - first)
        power = base ** (exponent(2 * pair) / num_hiddens)
        angles = p / power if scale is None else scale(p, power)
        is_sine = columns < first
    else:
        power = base ** (exponent(columns) / num_hiddens)
        angles = p / power if scale is None else scale(p, power)
        is_sine = columns % 2 == 0
    if cosine_first:
        is_sine = ~is_sine
    return torch.where(is_sine, torch.sin(angles), torch.cos(angles))


def reference(positions: torch.Tensor, num_hiddens: int, base: float = 10000.0) -> torch.Tensor:
    """The answer computed in float64, returned in the positions' dtype."""
    return _table(positions, num_hiddens, base).to(positions.dtype)  # columns 2j and 2j + 1 share a frequency


# Common mistakes: (cause in words that hold no value of a case, the table a function with that mistake gives).
MISTAKES = [
    ("the base argument is ignored (10000 is used whatever base is passed): divide by base ** (2j / d)",
     lambda p, d, b: _table(p, d, 10000.0)),
    (("the exponent uses j, the index of the sine/cosine pair, instead of the even column index 2j: the "
     "frequency of columns 2j and 2j + 1 is 1 / base^(2j / d)"),
     lambda p, d, b: _table(p, d, b, exponent=lambda c: (c - c % 2) / 2)),
    (("each column uses its own index in the exponent: the cosine column 2j + 1 must share the frequency "
     "1 / base^(2j / d) of the sine column 2j before it"),
     lambda p, d, b: _table(p, d, b, exponent=lambda c: c)),
    ("sines and cosines are swapped: sines go to the even columns 0, 2, 4, … and cosines to the odd ones",
     lambda p, d, b: _table(p, d, b, cosine_first=True)),
    (("all sines come first and all cosines after them: interleave them, the sine of frequency j in column "
     "2j and its cosine in column 2j + 1"),
     lambda p, d, b: _table(p, d, b, halves=True)),
    ("the positions are multiplied by base^(2j / d) instead of divided by it",
     lambda p, d, b: _table(p, d, b, scale=lambda pos, power: pos * power)),
    (("the positions passed in are ignored (the table of 0, 1, …, n - 1 is returned): use positions itself "
     "as p in sin(p / base^(2j / d)), whatever its values and their order"),
     lambda p, d, b: _table(torch.arange(len(p)), d, b)),
]

VALUES = ("columns 2j and 2j + 1 share the frequency 1 / base^(2j / d): the exponent uses the even column index "
          "2j (not j), sines go to even columns and cosines to odd ones; use the positions and the base passed in")
DTYPE = ("the result must come back in the positions' dtype (float32 in, float32 out; float64 in, float64 out): "
         "build the table in that dtype, or compute it in float64 and return table.to(positions.dtype)")
TRANSPOSED = ("the table is transposed: one row per position and one column per dimension, shape "
              "(len(positions), num_hiddens)")
ODD_WIDTH = ("with an odd num_hiddens the table has num_hiddens columns, the last one a sine with no cosine "
             "after it: drop the extra cosine column (e.g. fill P[:, 1::2] with the first num_hiddens // 2 "
             "cosine columns only)")
ODD_SHORT = ("with an odd num_hiddens the last column is a sine with no cosine after it: the table has "
             "num_hiddens columns, not num_hiddens - 1, so use (num_hiddens + 1) // 2 frequencies and keep the "
             "last sine (e.g. P[:, 0::2] = sin of all of them, P[:, 1::2] = cos of the first num_hiddens // 2)")
SHAPE = "the result must have shape (len(positions), num_hiddens): one row per position, one column per dimension"
NOT_TENSOR = "return a torch tensor of shape (len(positions), num_hiddens)"
ODD_RAISED = ("with an odd num_hiddens the last column is a sine with no cosine after it, so there are "
              "num_hiddens // 2 cosine columns but (num_hiddens + 1) // 2 sine columns: fill P[:, 1::2] with "
              "the cosines of the first num_hiddens // 2 frequencies only")
NAN = "the table holds NaN: every entry is the sine or cosine of a finite angle p / base^(2j / d)"


def _diagnosing(positions, num_hiddens: int, base: float):
    """The case's check: ``compare`` with the reference, then the cause of a failure in words."""
    want = reference(positions, num_hiddens, base)
    positions = positions.clone()  # what the mistakes are computed from, whatever a call writes into the input
    base_check = compare(want, atol=1e-5, rtol=1e-4)

    def check(got):
        why = base_check(got)
        if why is None:
            return None
        if not isinstance(got, torch.Tensor):
            cause = NOT_TENSOR
        elif tuple(got.shape) != tuple(want.shape):
            n = len(positions)
            cause = (TRANSPOSED if tuple(got.shape) == (num_hiddens, n) else
                     ODD_WIDTH if num_hiddens % 2 and tuple(got.shape) == (n, num_hiddens + 1) else
                     ODD_SHORT if num_hiddens % 2 and tuple(got.shape) == (n, num_hiddens - 1) else SHAPE)
        elif got.dtype != want.dtype:
            cause = DTYPE
        elif got.is_floating_point() and bool(torch.isnan(got).any()):
            cause = NAN
        else:
            got64 = got.detach().double().cpu()
            right = want.double()
            cause = next((text for text, wrong in MISTAKES
                          for bad in [wrong(positions, num_hiddens, base)]
                          if not torch.allclose(bad, right, atol=1e-5, rtol=1e-4)
                          and torch.allclose(got64, bad, atol=1e-5, rtol=1e-4)), VALUES)
        return Diagnosis(f"{why} — {cause}", cause)

    return check


def call_encode(fn, positions, num_hiddens, base=10000.0):
    """How the checker calls a learner's ``fn`` on one case. An error on an odd ``num_hiddens`` that
    the even width above it does not raise (the sine and cosine columns differ by one) gets the reason
    added to its message; the traceback still ends in the learner's line. A raw "The expanded size of
    the tensor (2) must match the existing size (3)" was all a learner saw (issue 36)."""
    try:
        return fn(positions, num_hiddens, base=base)
    except (RuntimeError, IndexError) as err:
        if num_hiddens % 2 and len(err.args) == 1 and isinstance(err.args[0], str) and _works(
                fn, positions, num_hiddens + 1, base):
            err.args = (f"{err.args[0].rstrip()} — {ODD_RAISED}",)
        raise


def _works(fn, positions, num_hiddens: int, base: float) -> bool:
    try:
        fn(positions.clone(), num_hiddens, base=base)
    except Exception:  # whatever it raises, the width was not the cause
        return False
    return True


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
    # No general hint on the cases: each failure's own cause is named by the check (a crash shows its error).
    # An odd width's case carries the reason as its hint: the grader shows a hidden case that raised
    # only its kind and hint.
    cases = [Case(name, (p, d), _diagnosing(p, d, b), {"base": b}, hint=ODD_RAISED if d % 2 else "")
             for name, p, d, b in cases_in]
    return run_checks("encode_positions", functools.partial(call_encode, fn), cases, verbose=verbose)


# --------------------------------------------------------------------------- exercise 11.6.3's checker
# A worked exercise, not a graded assignment (its solution is public, folded on the website): its checker
# is called ``verify_*``, not ``check_*``, which would register it as a graded assignment
# (``assignments._collect``). A fresh learner found that a layer reading b[j - i] as b[i - j] trained as
# well and passed unnoticed (issue 36).

WEIGHT_NAMES = ("W_q", "W_k", "W_v", "W_o")


def _relative_by_hand(X, weights, bias, num_heads: int, max_distance: int, *, flip=False, shift=True,
                      scale=True, one_head=False, dim=-1, after=False):
    """(output, weights) of the relative self-attention layer with these ``weights`` (W_q, W_k, W_v, W_o)
    and ``bias`` (heads, 2 * max_distance + 1), in float64; the keyword arguments make the mistakes."""
    b, n, d = X.shape
    X = X.double()
    q, k, v = (
        (X @ W.double().T).reshape(b, n, num_heads, -1).transpose(1, 2) for W in weights[:3]
    )
    positions = torch.arange(n)
    offsets = positions[None, :] - positions[:, None]  # row: query i, column: key j -> j - i
    if flip:
        offsets = -offsets
    offsets = offsets.clamp(-max_distance, max_distance)  # beyond the range: the end values
    table = bias.double()[:1].expand_as(bias) if one_head else bias.double()
    # without the shift, a negative offset counts from the table's end, as Python's indexing does
    index = offsets + max_distance if shift else offsets % table.shape[1]
    scores = q @ k.transpose(-1, -2) / (math.sqrt(q.shape[-1]) if scale else 1.0)
    if not after:
        scores = scores + table[:, index]
    weights_ = torch.softmax(scores, dim=dim)
    if after:
        weights_ = weights_ + table[:, index]
    out = (weights_ @ v).transpose(1, 2).reshape(b, n, d) @ weights[3].double().T
    return out, weights_


RELATIVE_MISTAKES = [
    (("the bias is read at i - j instead of j - i: the score of query i (the row) and key j (the column) "
      "gets b[h, clip(j - i)], so offsets = positions[None, :] - positions[:, None]"),
     {"flip": True}),
    (("the table is indexed by the offset itself: column 0 holds offset -max_distance, so read "
      "self.bias[:, offsets + self.max_distance]"),
     {"shift": False}),
    ("every head reads head 0's biases: head h adds its own row, self.bias[h, ...]", {"one_head": True}),
    ("the scores q k / sqrt(d_head) are not divided by sqrt(d_head), one head's width", {"scale": False}),
    (("the softmax runs over the queries (dim=-2): each query's weights are a softmax over the keys, "
      "the last axis"), {"dim": -2}),
    (("the bias is added to the weights after the softmax: add it to the scores, before the softmax"),
     {"after": True}),
]

RELATIVE_CLIP = ("offsets beyond max_distance must share the end values: clamp j - i to "
                 "[-max_distance, max_distance] before reading the table")
RELATIVE_NO_WEIGHTS = ("self.attention_weights is None after the call: set it to the softmax weights, "
                       "(batch, heads, n, n), before multiplying them by v")


def _relative_check(args):
    """The check of one case of :func:`verify_relative_attention`: the weights, then the output."""
    want_out, want_w = _relative_by_hand(*args)
    mistakes = [(cause, bad) for cause, kw in RELATIVE_MISTAKES
                for bad in [_relative_by_hand(*args, **kw)[1]]
                if bad.shape != want_w.shape or not torch.allclose(bad, want_w, atol=1e-5, rtol=1e-4)]
    check_w = compare(want_w.float(), atol=1e-5, rtol=1e-4)
    check_out = compare(want_out.float(), atol=1e-5, rtol=1e-4)

    def check(got):
        out, got_w = got
        if got_w is None:
            return Diagnosis(RELATIVE_NO_WEIGHTS, RELATIVE_NO_WEIGHTS)
        why = check_w(got_w)
        if why is not None:
            if isinstance(got_w, torch.Tensor) and tuple(got_w.shape) == tuple(want_w.shape):
                got64 = got_w.detach().double().cpu()
                for cause, bad in mistakes:
                    if torch.allclose(got64, bad, atol=1e-5, rtol=1e-4):
                        return Diagnosis(f"the attention weights differ; {cause}", cause)
            return Diagnosis(f"the attention weights: {why}", "the attention weights differ")
        why = check_out(out)
        if why is not None:
            cause = ("the weights are right but the output is not: out = weights @ v, (batch, heads, n, "
                     "d_head), which the given last line turns back into (batch, n, num_hiddens)")
            return Diagnosis(f"the output: {why} — {cause}", cause)
        return None

    return check


def _run_layer(layer_class, X, weights, bias, num_heads, max_distance):
    """Build the learner's layer, load the case's weights into it and run it on X: (output, weights)."""
    num_hiddens = X.shape[-1]
    with torch.random.fork_rng(devices=[]):  # its initialisation leaves the learner's random numbers alone
        layer = layer_class(num_hiddens, num_heads, max_distance)
    with torch.no_grad():
        for name, W in zip(WEIGHT_NAMES, weights):
            getattr(layer, name).weight.copy_(W)
        if tuple(layer.bias.shape) != tuple(bias.shape):
            raise ValueError(f"self.bias has shape {tuple(layer.bias.shape)}; it should be (num_heads, "
                             f"2 * max_distance + 1) = {tuple(bias.shape)}, one column per offset")
        layer.bias.copy_(bias)
    try:
        out = layer(X)
    except IndexError as err:  # the traceback still ends in the learner's line
        if X.shape[1] - 1 > max_distance and len(err.args) == 1 and isinstance(err.args[0], str):
            err.args = (f"{err.args[0].rstrip()} — {RELATIVE_CLIP}",)
        raise
    return out, layer.attention_weights


def verify_relative_attention(layer_class, verbose: bool = True):
    """Exercise 11.6.3: check the class ``layer_class(num_hiddens, num_heads, max_distance)``, a
    self-attention layer whose score of query i and key j gets the bias b[h, clip(j - i)] (its weights
    W_q, W_k, W_v, W_o and its table ``bias``, as the page's scaffold names them), on weights and
    inputs drawn from the case seed. Prints a line per case (what is wrong, and which common mistake
    explains it) and returns the :class:`Report`."""
    g = case_generator(63)

    def case(name, num_heads, head_size, n, max_distance):
        width = num_heads * head_size
        X = torch.randn(draw(g, 2, 3), n, width, generator=g)
        weights = tuple(torch.randn(width, width, generator=g) / math.sqrt(width) for _ in WEIGHT_NAMES)
        bias = torch.randn(num_heads, 2 * max_distance + 1, generator=g)
        args = (X, weights, bias, num_heads, max_distance)
        return Case(name, args, _relative_check(args))

    # names of 36 characters at most: a line "  ✔ name" fits a 390 px phone's column (issue 38)
    cases = [
        case("4 heads, offsets up to 7 (the page)", 4, 8, 8, 7),
        case("offsets beyond max_distance", draw(g, 2, 3), draw(g, 2, 4), draw(g, 6, 9), draw(g, 1, 2)),
        case("one head", 1, draw(g, 4, 8), draw(g, 4, 6), draw(g, 2, 4)),
        case("a sequence shorter than the range", draw(g, 2, 4), draw(g, 2, 4), draw(g, 2, 4), draw(g, 5, 8)),
    ]
    name = getattr(layer_class, "__name__", "")
    return run_checks(name if name.isidentifier() else "relative_attention",
                      functools.partial(_run_layer, layer_class), cases, verbose=verbose)


# --------------------------------------------------------------------------- exercise 11.6.2's checker
# A worked exercise too (``verify_*``). A fresh learner's LearnedPositions started its table at
# std 0.02 (the package's default): it matched the package exactly, yet the offset-task model
# trained to 0.272, the score without positions (std 0.1: 0.316, std 1: 1.000), and the check
# printed only "largest difference from the package: 0.0e+00", no verdict (issue 36).

POSITIONS_SCALE = (0.5, 2.0)  # a fresh table's std: about 1, the token embeddings' (nn.Embedding: N(0, 1))
POSITIONS_SMALL = (
    "a fresh module's table has std {std:.3g}: start it at std 1, as nn.Embedding starts the token "
    "vectors, nn.Parameter(torch.randn(max_len, num_hiddens)); the attention scores depend on two "
    "positions through the product of their vectors, so a small table is barely felt and grows slowly "
    "(at std 0.02 the offset-task model stays at the score of a model without positions)")
POSITIONS_LARGE = ("a fresh module's table has std {std:.3g}: start it at std 1, "
                   "nn.Parameter(torch.randn(max_len, num_hiddens)), the scale of the token embeddings")
POSITIONS_NOT_ADDED = ("the output is not X plus one vector per position: forward(X) returns X + "
                       "table[:length], the table's first X.shape[1] rows, broadcast over the batch")
POSITIONS_SAME_ROWS = ("every position gets the same vector: the table needs one row per position, "
                       "(max_len, num_hiddens), each drawn on its own")
POSITIONS_NOT_TRAINED = ("the table is not trained: wrap it in nn.Parameter (a plain tensor attribute is "
                         "not among module.parameters(), so the optimiser never changes it)")
POSITIONS_SIZE = ("the module should train max_len * num_hiddens numbers, one vector per position, and "
                  "no others")


def _run_positions(module_class, X, max_len):
    """Build the learner's module (its own random numbers left alone), read its table off what it
    adds to zeros, run it on X: (output, table, trainable numbers, grad of the table's sum)."""
    num_hiddens = X.shape[-1]
    with torch.random.fork_rng(devices=[]):
        module = module_class(num_hiddens, max_len=max_len)
    table = module(torch.zeros(1, max_len, num_hiddens))[0]
    trained = [p for p in module.parameters() if p.requires_grad]
    reaches = table.requires_grad and bool(trained)
    if reaches:
        grads = torch.autograd.grad(table.sum(), trained, allow_unused=True)
        reaches = any(g is not None and bool(g.abs().sum() > 0) for g in grads)
    return module(X), table.detach(), sum(p.numel() for p in trained), reaches


def _positions_check(X, max_len, what):
    """The check of one case of :func:`verify_learned_positions`: ``what`` says which."""

    def check(got):
        out, table, numbers, reaches = got
        if what == "scale":
            std = float(table.double().std())
            low, high = POSITIONS_SCALE
            if not low <= std <= high:
                text = (POSITIONS_SMALL if std < low else POSITIONS_LARGE).format(std=std)
                return Diagnosis(text, text)
            return None
        if what == "trained":
            if not reaches:
                return Diagnosis(POSITIONS_NOT_TRAINED, POSITIONS_NOT_TRAINED)
            if numbers != table.numel():
                why = f"{numbers} trainable numbers, not {table.numel()}: {POSITIONS_SIZE}"
                return Diagnosis(why, POSITIONS_SIZE)
            return None
        if what == "rows" and torch.allclose(table, table[:1].expand_as(table)):
            return Diagnosis(POSITIONS_SAME_ROWS, POSITIONS_SAME_ROWS)
        # the package's layer given the learner's table must add the same vectors
        from ..models.positional import LearnedPositionalEmbedding

        package = LearnedPositionalEmbedding(X.shape[-1], max_len=max_len)
        with torch.no_grad():
            package.P.weight.copy_(table)
            want = package(X)
        why = compare(want, atol=1e-5, rtol=1e-4)(out)
        return None if why is None else Diagnosis(f"{why} — {POSITIONS_NOT_ADDED}", POSITIONS_NOT_ADDED)

    return check


def verify_learned_positions(module_class, verbose: bool = True):
    """Exercise 11.6.2: check the class ``module_class(num_hiddens, max_len)``, whose
    ``forward(X)`` adds one trained vector per position to X (batch, length, num_hiddens), against
    ``ab.LearnedPositionalEmbedding`` given the same table (read off what the module adds to
    zeros): shorter and full-length sequences, one row per position, a trained table of
    max_len * num_hiddens numbers, and a fresh table's scale (std about 1, the token embeddings').
    Prints a line per case and returns the :class:`Report`."""
    g = case_generator(62)

    def case(name, what, num_hiddens, max_len, n):
        X = torch.randn(draw(g, 2, 3), n, num_hiddens, generator=g)
        return Case(name, (X, max_len), _positions_check(X, max_len, what))

    width, max_len = 2 * draw(g, 4, 10), draw(g, 8, 12)
    # names of 36 characters at most: a line "  ✔ name" fits a 390 px phone's column (issue 38)
    cases = [
        case("adds its table to a short sequence", "adds", width, max_len, draw(g, 2, max_len - 1)),
        case("a sequence of max_len positions", "adds", width, max_len, max_len),
        case("one vector per position", "rows", width, max_len, max_len),
        case("the table is trained", "trained", width, max_len, 4),
        case("a fresh table's std is about 1", "scale", width, 100, 4),
    ]
    name = getattr(module_class, "__name__", "")
    return run_checks(name if name.isidentifier() else "learned_positions",
                      functools.partial(_run_positions, module_class), cases, verbose=verbose)
