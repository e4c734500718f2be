"""Chapter 3 assignment: a masked softmax for causal sliding-window attention over padded sequences.

The chapter writes the masked softmax that takes valid lengths: the first ``valid_lens``
keys of each row count. The assignment asks for a mask the learner builds from positions:
``fn(scores, valid_lens, window)`` with self-attention scores of shape (batch, n, n) (query i
and key j are both positions of one sequence of n tokens), ``valid_lens`` (batch,) the number
of real tokens of each sequence (the rest is padding) and a window size ``w >= 1``. Query i
may attend key j when ``i - w < j <= i`` (itself and the w - 1 tokens before it) and
``j < valid_lens[b]``. It returns the softmax over the allowed keys of each row, 0 at every
other key, and an all-zero row (not uniform, not NaN) where no key is allowed; in the
scores' dtype, finite in float16, whatever the scores' scale, without writing into
``scores``.
"""

from __future__ import annotations

import torch

from . import IN_PLACE, Case, Diagnosis, Report, case_generator, compare, draw, run_checks

__all__ = ["check_masked_softmax"]


def reference(scores, valid_lens, window):
    """The answer, computed in float64 and returned in the scores' dtype."""
    n = scores.shape[-1]
    i = torch.arange(n, device=scores.device)[:, None]  # query positions, a column
    j = torch.arange(n, device=scores.device)[None, :]  # key positions, a row
    lens = valid_lens.to(scores.device).reshape(-1, 1, 1)
    keep = (j <= i) & (j > i - window) & (j < lens)  # (batch, n, n)
    x = scores.double().masked_fill(~keep, torch.finfo(torch.float64).min)
    return (torch.softmax(x, dim=-1) * keep).to(scores.dtype)


IN_PLACE = (f"{IN_PLACE} (scores[~keep] = ..., or masked_fill_ with its trailing underscore): use masked_fill "
            "(no underscore) or torch.where, which return new tensors")
FLOAT16 = ("the result is infinite or NaN in float16: -1e6 and -1e9 overflow float16 to -inf; fill with "
           "torch.finfo(scores.dtype).min, the most negative finite number of any dtype")
EMPTY_NAN = ("a row with no allowed key is NaN: filling with -inf gives 0/0; multiply the softmax by the mask so "
             "such rows become exactly 0")
EMPTY_UNIFORM = ("a row with no allowed key is uniform; it should be all zeros: multiply the softmax by the mask")


def _keep(n, valid_lens, behind, ahead=0, pad=True):
    """Allowed where -behind < j - i <= ahead (and j < valid_lens when ``pad``): (batch, n, n)."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = (j - i <= ahead) & (j - i > -behind)
    lens = valid_lens.reshape(-1, 1, 1) if pad else torch.full((len(valid_lens), 1, 1), n)
    return keep & (j < lens)


def _softmax_where(scores, keep, fill=None):
    fill = torch.finfo(torch.float64).min if fill is None else fill
    return (torch.softmax(scores.double().masked_fill(~keep, fill), dim=-1) * keep).to(scores.dtype)


# Common mistakes: (cause, the answer a function with that mistake gives). Tried in this order.
MISTAKES = [
    (("only the padding is masked, as in the chapter's masked softmax: also hide the keys after the query "
     "(j > i) and those w or more places before it (j <= i - w)"),
     lambda s, lens, w: _softmax_where(s, _keep(s.shape[-1], lens, s.shape[-1] + 1, ahead=s.shape[-1]))),
    (("the window is one key too wide: query i sees w keys, itself and the w - 1 before it, so keep "
     "j > i - w, not j >= i - w"),
     lambda s, lens, w: _softmax_where(s, _keep(s.shape[-1], lens, w + 1))),
    (("the window is one key too narrow: query i sees w keys, itself and the w - 1 before it (j > i - w "
     "and j <= i)"),
     lambda s, lens, w: _softmax_where(s, _keep(s.shape[-1], lens, w - 1))),
    (("the window also reaches ahead of the query: attention here is causal, so a key after the query "
     "(j > i) gets weight 0"),
     lambda s, lens, w: _softmax_where(s, _keep(s.shape[-1], lens, w, ahead=w - 1))),
    (("the window is ignored: the mask is causal and hides the padding, but a query must not see keys w or "
     "more places before it"),
     lambda s, lens, w: _softmax_where(s, _keep(s.shape[-1], lens, s.shape[-1] + 1))),
    (("the padding is ignored: keys at positions j >= valid_lens[b] are padding and get weight 0"),
     lambda s, lens, w: _softmax_where(s, _keep(s.shape[-1], lens, w, pad=False))),
    (("the mask is transposed: rows are queries and columns keys, so query i (row i) sees keys j <= i"),
     lambda s, lens, w: _softmax_where(s, _keep(s.shape[-1], lens, w).transpose(-1, -2))),
    (("masked keys still get weight where the scores are very negative: a fixed fill value such as -1e6 is not "
     "'very negative' when the real scores are lower; fill with torch.finfo(scores.dtype).min"),
     lambda s, lens, w: _softmax_where(s, _keep(s.shape[-1], lens, w), fill=-1e6)),
]


def _case(name: str, scores, valid_lens, window, focus: str, atol: float = 1e-5, label: str = "") -> Case:
    """A case whose failure is explained by its cause when a common mistake matches the result exactly;
    otherwise by ``focus``, what this case tests, given as a possible cause."""
    expected = reference(scores, valid_lens, window)
    check = compare(expected, atol=atol, rtol=1e-3)
    empty = ~_keep(scores.shape[-1], valid_lens, window).any(dim=-1)  # rows with no allowed key

    def full_check(got):
        why = check(got)
        if why is None or not (isinstance(got, torch.Tensor) and got.shape == expected.shape
                               and got.dtype == expected.dtype):
            return why
        rows = got.detach().double().cpu()
        if not torch.isfinite(rows).all():
            if empty.any() and torch.isnan(rows[empty]).any():
                return Diagnosis(f"{why} — {EMPTY_NAN}", EMPTY_NAN)
            if scores.dtype == torch.float16:
                return Diagnosis(f"{why} — {FLOAT16}", FLOAT16)
        if empty.any() and torch.allclose(rows[empty], torch.full_like(rows[empty], 1.0 / scores.shape[-1]),
                                          atol=1e-3):
            return Diagnosis(f"{why} — {EMPTY_UNIFORM}", EMPTY_UNIFORM)
        for cause, wrong in MISTAKES:
            answer = wrong(scores, valid_lens, window).double()
            if not torch.allclose(answer, expected.double(), atol=atol, rtol=1e-3) \
                    and torch.allclose(rows, answer, atol=atol, rtol=1e-3):
                return Diagnosis(f"{why} — {cause}", cause)
        possible = f"a possible cause (what this case tests): {focus}"
        return Diagnosis(f"{why} — {possible}", possible)

    # every case also fails if the function writes into scores (compared apart from the answer)
    return Case(name, (scores, valid_lens, window), full_check, label=label, unchanged=IN_PLACE)


def check_masked_softmax(fn, verbose: bool = True) -> Report:
    """Check the learner's ``fn(scores, valid_lens, window)``; every input is drawn from the case seed."""
    g = case_generator(0)

    def sizes(low=4, high=8):
        return draw(g, 2, 3), draw(g, low, high)

    def scores(b, n, scale=1.0, shift=0.0):
        return torch.randn(b, n, n, generator=g) * scale + shift

    def lengths(b, n, low=1):
        lens = torch.randint(low, n + 1, (b,), generator=g)
        lens[draw(g, 0, b - 1)] = n  # one sequence without padding
        return lens

    def no_empty_rows(b, n):
        """A window w and lengths with which every query still has a key (lengths >= n - w + 1), one
        sequence without padding and one with: such a case tests the window and the padding, at every
        seed, and never the rows with no allowed key (the cases after it test those at every seed)."""
        w = draw(g, 2, n - 2)
        low = n - w + 1
        lens = torch.randint(low, n + 1, (b,), generator=g)
        full = draw(g, 0, b - 1)
        lens[full] = n
        lens[(full + 1) % b] = draw(g, low, n - 1)
        return lens, w

    b1, n1 = sizes()
    b2, n2 = sizes()
    b3, n3 = sizes()
    lens3 = lengths(b3, n3)
    lens3[(int(lens3.argmax()) + 1) % b3] = draw(g, 1, n3 - 1)  # a padded sequence: its padding sees nothing
    b4, n4 = sizes()
    b5, n5 = sizes(5, 8)
    lens5 = torch.randint(1, 3, (b5,), generator=g)  # short sequences, long padding
    lens5[draw(g, 0, b5 - 1)] = n5  # and one without padding
    b6, n6 = sizes()
    lens6 = lengths(b6, n6)
    lens6[draw(g, 0, b6 - 1)] = 0  # a sequence with no real token
    b7, n7 = sizes()
    b8, n8 = sizes()
    lens8 = torch.randint(1, 3, (b8,), generator=g)  # short sequences, long padding: empty rows
    lens8[draw(g, 0, b8 - 1)] = n8  # and one without padding
    b9, n9 = sizes()
    # windows of at most n - 2 keys: one key too many is then not the whole causal mask (told apart)
    window_focus = "query i sees the keys j with i - w < j <= i: itself and the w - 1 tokens before it"
    cases = [
        _case("a window and padding", scores(b1, n1), *no_empty_rows(b1, n1), focus=window_focus),
        _case("a window as long as the sequence: causal attention over the real tokens", scores(b2, n2),
              lengths(b2, n2), n2 + draw(g, 0, 2),
              focus="with w >= n only the causal rule (j <= i) and the padding hide keys"),
        _case("a window of one: each token sees only itself", scores(b3, n3), lens3, 1,
              focus="with w = 1 a real token's weight on itself is 1, and a padding token sees nothing"),
        _case("no padding", scores(b4, n4, scale=3.0), torch.full((b4,), n4), draw(g, 2, n4 - 2),
              focus=window_focus),
        _case("padding queries far past the end see no key", scores(b5, n5), lens5, draw(g, 1, 2),
              label="rows with no allowed key",
              focus="a row with no allowed key has nothing to attend to: filling its scores with one large "
                    "negative number makes the softmax uniform, and -inf gives NaN (0/0); multiply the softmax "
                    "by the mask so such rows become exactly 0"),
        _case("a sequence with no real token", scores(b6, n6), lens6, draw(g, 2, n6 - 2),
              focus="valid_lens 0 means every key is padding: every row of that sequence is 0"),
        _case("scores far below -1e6", scores(b7, n7, shift=-1e7), *no_empty_rows(b7, n7),
              focus="a fixed fill value such as -1e6 is not 'very negative' when the real scores are even "
                    "lower: fill with torch.finfo(scores.dtype).min, the most negative number of the dtype"),
        _case("float16 scores stay finite, with empty rows", scores(b8, n8, scale=8.0).half(),
              lens8, draw(g, 1, 2), atol=2e-3,
              focus="-1e6 and -1e9 overflow float16 to -inf; torch.finfo(scores.dtype).min is the most negative "
                    "finite number of any dtype; return the scores' dtype"),
        # a name that reads as the case it is, not as a verdict: "Hidden case 9: the scores are not modified
        # in place" over "the result is wrong" read as an in-place complaint (a fresh instructor, issue 37);
        # the label, which course files' weights name, stays
        _case("a check for writes in place (the caller's scores after the call)", scores(b9, n9),
              *no_empty_rows(b9, n9), label="the scores are not modified in place",
              focus="scores[~keep] = value and scores.masked_fill_(...) write into the caller's tensor; use "
                    "masked_fill (no trailing underscore) or torch.where, which return new tensors"),
    ]
    return run_checks("masked_softmax", fn, cases, verbose=verbose)
