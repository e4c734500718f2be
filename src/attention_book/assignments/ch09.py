"""Chapter 9 checker: BERT's masked-language-model corruption, with an exact count per sequence.

The learner writes ``fn(tokens, mask_id, vocab_size, special_ids, select_prob=0.15,
generator=None) -> (inputs, labels)``. It varies what the chapter's page writes
(:func:`attention_book.mask_for_mlm` selects each token independently, so a sequence
gets about 15 % of its tokens): here each sequence (a row of ``tokens``) gets EXACTLY
``k = round(select_prob * n)`` of its ``n`` ordinary tokens, drawn without replacement.
Every case checks that count and the (inputs, labels) contract; the cases on a large
batch are statistical too: the selected positions spread over the whole row, and the
80 / 10 / 10 split of the selected tokens lies within a few standard deviations.
Special tokens (``<pad>``, ``<cls>``, …) must never be selected.

A failed case names its own cause: a wrong count says which mistake gives it (each token
selected independently, k rounded down, special tokens selected, …), and each other
property failed gets the hint of that property, never another case's.
"""

from __future__ import annotations

import functools
import math

import torch

from . import Case, Diagnosis, case_generator, draw, run_checks

__all__ = ["check_mlm_masking"]

IGNORE = -100
VOCAB = 500
PAD, CLS, MASK = 1, 5, 4
SPECIALS = (0, 1, 2, 3, 5)  # <unk> <pad> <bos> <eos> <cls>; the mask id is passed separately


def _batch(g: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """Token ids with a <cls> column, ordinary words and trailing <pad> runs of random lengths."""
    tokens = torch.randint(14, VOCAB, (rows, cols), generator=g)
    tokens[:, 0] = CLS
    lengths = torch.randint(cols // 3, cols + 1, (rows,), generator=g)
    tokens[torch.arange(cols)[None, :] >= lengths[:, None]] = PAD
    tokens[::7, 3] = 0  # some <unk>s too
    return tokens


def _call(fn, tokens, select_prob=0.15, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = fn(tokens.clone(), MASK, VOCAB, SPECIALS, select_prob=select_prob, generator=g)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"expected a pair (inputs, labels), got {type(out).__name__}")
    return out


def call_masking(fn, tokens, select_prob=0.15, probe=None):
    """How the checker calls a learner's masking ``fn`` on one case (``probe`` asks for two calls
    with one seed, or for the tokens before and after a call)."""
    if probe == "twice":
        return _call(fn, tokens, select_prob, seed=7), _call(fn, tokens, select_prob, seed=7)
    if probe == "in place":
        before = tokens.clone()
        out = fn(tokens, MASK, VOCAB, SPECIALS, select_prob=0.5, generator=torch.Generator().manual_seed(0))
        return before, tokens, out
    return _call(fn, tokens, select_prob)


SHAPE = ("inputs and labels must both be tensors with the shape and dtype of tokens (torch.where(selected, ..., "
         "tokens) keeps both)")
INDEPENDENT = ("the number selected in a row is not k = round(select_prob * n) of its n ordinary tokens, and misses "
               "it by different amounts in different rows: each token seems to be selected on its own "
               "(torch.rand(...) < select_prob, as chapter 9's page does), which gives about k per row, not "
               "exactly k; draw one uniform score per ordinary token, rank the scores within each row "
               "(argsort of argsort) and select the k lowest ranks")
ROUNDED_DOWN = ("every row selects floor(select_prob * n) tokens: k is rounded down (int() or floor), but it is "
                "round(select_prob * n), the nearest whole number")
ROUNDED_UP = "every row selects ceil(select_prob * n) tokens: k is rounded up, but it is round(select_prob * n)"
SPECIALS_COUNTED = ("special tokens (<pad>, <cls>, <unk>) were selected, so the count of ordinary tokens selected "
                    "is off: select only among the ordinary tokens of a row (give the special ones a score that "
                    "sorts last) and take k = round(select_prob * n), n the number of ordinary tokens")
PROB_IGNORED = ("every row selects round(0.15 * n) tokens whatever select_prob is passed: use the select_prob "
                "argument")
NONE_SELECTED = ("no token was selected in any row: labels must hold the original token at the k = round(select_prob * "
                 "n) selected positions of each row (n its ordinary tokens), -100 elsewhere")
SAME_COUNT = ("every row selects the same number of tokens: k depends on each row's own number n of ordinary "
              "tokens (padding and special tokens not counted), k = round(select_prob * n) row by row")


def _because(why, cause: str):
    """``why`` (a reason, or None when the property holds) with ``cause`` named, for the grader's hidden cases too."""
    if why is None or isinstance(why, Diagnosis):
        return why
    return Diagnosis(f"{why} — {cause}", cause)


def _shape_problem(tokens, inputs, labels) -> str | None:
    for name, t in (("inputs", inputs), ("labels", labels)):
        if not isinstance(t, torch.Tensor):
            return f"{name} should be a tensor, got {type(t).__name__}"
        if tuple(t.shape) != tuple(tokens.shape):
            return f"{name} should have the shape of tokens {tuple(tokens.shape)}, got {tuple(t.shape)}"
        if t.dtype != tokens.dtype:
            return f"{name} should have the dtype of tokens {tokens.dtype}, got {t.dtype}"
    return None


def _count_cause(tokens, labels, p, got, n) -> str:
    """Why the rows' counts ``got`` of selected ordinary tokens differ from round(p * n): the mistake that gives them."""
    if bool(((labels != IGNORE) & ~_eligible(tokens)).any()):
        return SPECIALS_COUNTED
    pn = p * n.double()
    if torch.equal(got.double(), torch.floor(pn)):
        return ROUNDED_DOWN
    if torch.equal(got.double(), torch.ceil(pn)):
        return ROUNDED_UP
    if p != 0.15 and torch.equal(got.double(), torch.round(0.15 * n.double())):
        return PROB_IGNORED
    if bool((got == 0).all()) and bool((torch.round(pn) > 0).any()):
        return NONE_SELECTED
    if len(got) > 1 and bool((got == got[0]).all()) and bool((n != n[0]).any()):
        return SAME_COUNT
    return INDEPENDENT


def _sigma_ok(observed: float, p: float, n: int, name: str, k: float = 5.0) -> str | None:
    sd = math.sqrt(p * (1 - p) / max(n, 1))
    if abs(observed - p) > k * sd + 1e-9:
        return (f"{name} should be about {p:.0%}, got {observed:.2%} over {n} tokens "
                f"(allowed: {p:.1%} ± {k * sd:.1%})")
    return None


def _eligible(tokens):
    return ~torch.isin(tokens, torch.tensor(SPECIALS + (MASK,)))


def _row_counts(tokens, labels, p):
    """Per row: its number n of ordinary tokens, how many of them were selected, and whether that count is
    off round(p * n) (either side of an exact tie is right)."""
    eligible = _eligible(tokens)
    n = eligible.sum(-1)
    got = ((labels != IGNORE) & eligible).sum(-1)
    return n, got, (got.double() - p * n.double()).abs() > 0.5 + 1e-6


def _count_problem(tokens, labels, p) -> str | None:
    """Each row must select exactly round(p * n) of its n ordinary tokens."""
    n, got, off = _row_counts(tokens, labels, p)
    if not off.any():
        return None
    r = int(off.nonzero()[0, 0])
    why = (f"a row with {int(n[r])} ordinary tokens should have exactly {round(p * int(n[r]))} selected "
           f"(select_prob={p}), got {int(got[r])}; {int(off.sum())} of {len(n)} rows have the wrong count")
    return _because(why, _count_cause(tokens, labels, p, got, n))


# the case that explains a wrong count, by the name the checker prints (and the grader's feedback shows)
COUNT_CASE = "the selected positions spread over the whole row"
COUNT_ELSEWHERE = f"see the case “{COUNT_CASE}”"


def _short_count_problem(tokens, labels, p) -> str | None:
    """The count per row, in one line that points to the case explaining it (so that one mistake does not
    print the same long explanation under every case). The case fails: its property is not judged on a
    wrong count (a function selecting nothing would otherwise pass "specials are never selected" and the
    like, and score for doing nothing); the line says so, so that "the tokens passed in are not modified"
    does not send a learner looking for a write that is not there."""
    n, got, off = _row_counts(tokens, labels, p)
    if not off.any():
        return None
    r = int(off.nonzero()[0, 0])  # the first wrong row: what it should select against what it did, on one line
    return _because(f"not judged while the count is wrong: a row with {int(n[r])} ordinary tokens should have "
                    f"{round(p * int(n[r]))} selected, got {int(got[r])} ({int(off.sum())} of {len(n)} rows are off)",
                    COUNT_ELSEWHERE)


def _unpacked(tokens, p, hint: str, explain_count: bool = False):
    """Turn ``check(inputs, labels)`` into a Case check on the pair: shape, then the exact count per row, then
    the case's own property, whose failure is named with ``hint`` (the shape and the count name their own).
    Only the cases about the count (``explain_count``) say why a count is wrong; the others say in one line
    that it is."""
    count = _count_problem if explain_count else _short_count_problem

    def wrap(check):
        def on_pair(out):
            inputs, labels = out
            return (_because(_shape_problem(tokens, inputs, labels), SHAPE) or count(tokens, labels, p)
                    or _because(check(inputs, labels), hint))
        return on_pair
    return wrap


CONTRACT = "labels = torch.where(selected, tokens, -100); change inputs only where selected"


def _check_contract(tokens, p=0.15):
    @_unpacked(tokens, p, CONTRACT)
    def check(inputs, labels):
        selected = labels != IGNORE
        if not torch.equal(labels[selected], tokens[selected]):
            return "labels should hold the ORIGINAL token at every selected position"
        if not torch.equal(inputs[~selected], tokens[~selected]):
            n = int((inputs[~selected] != tokens[~selected]).sum())
            return f"{n} tokens changed although their label is -100 (not selected); only selected tokens may change"
        return None
    return check


def _check_specials(tokens):
    special = ~_eligible(tokens)

    @_unpacked(tokens, 0.15, "rank only the ordinary tokens of a row: give the special ones a score that sorts last")
    def check(inputs, labels):
        bad = special & (labels != IGNORE)
        if bad.any():
            which = sorted(set(tokens[bad].tolist()))
            return f"{int(bad.sum())} special tokens (ids {which}, e.g. <pad>={PAD}, <cls>={CLS}) were selected; they never should be"
        if not torch.equal(inputs[special], tokens[special]):
            return "special tokens were changed in the inputs; leave <pad>, <cls>, … untouched"
        return None
    return check


SPREAD = ("the selected tokens crowd one part of the row: draw one uniform score per token, rank the scores "
          "within each row (argsort of argsort gives ranks) and select the ranks below k, not the first k tokens")


def _check_spread(tokens, p):
    """Drawn uniformly without replacement: the first half of each row's ordinary tokens gets its share."""
    eligible = _eligible(tokens)
    rank = eligible.long().cumsum(-1) - 1
    first = eligible & (2 * rank < eligible.sum(-1, keepdim=True))

    @_unpacked(tokens, p, SPREAD, explain_count=True)
    def check(inputs, labels):
        selected = (labels != IGNORE) & eligible
        overall = int(selected.sum()) / max(int(eligible.sum()), 1)
        n = int(first.sum())
        return _sigma_ok(int((selected & first).sum()) / n, overall, n,
                         "the fraction selected among the first half of each row's ordinary tokens")
    return check


def _check_split(tokens):
    @_unpacked(tokens, 0.15, "draw a second uniform number per token: < 0.8 → <mask>, 0.8–0.9 → random ordinary "
                             "id, else keep")
    def check(inputs, labels):
        selected = labels != IGNORE
        n = int(selected.sum())
        if n == 0:
            return "no token was selected"
        got = inputs[selected]
        masked = got == MASK
        kept = got == tokens[selected]
        rand = ~masked & ~kept
        if torch.isin(got[rand], torch.tensor(SPECIALS)).any():
            return "some random replacements are special tokens; draw them from the ordinary tokens only"
        if (got < 0).any() or (got >= VOCAB).any():
            return f"some replacements lie outside [0, vocab_size={VOCAB})"
        # a random draw equals the original with probability ~1/(ordinary tokens); allow for it
        for frac, p, name in ((masked, 0.8, "replaced by <mask>"), (rand, 0.1, "replaced by a random token"),
                              (kept, 0.1, "left unchanged")):
            why = _sigma_ok(float(frac.float().mean()), p, n, f"the share of selected tokens {name}")
            if why:
                return why
        return None
    return check


def _check_extreme(tokens, p, hint=""):
    eligible = _eligible(tokens)
    hint = hint or ("select_prob = 0 selects no token and changes none" if p == 0 else
                    "select_prob = 1 selects every ordinary token of every row and no special one")

    @_unpacked(tokens, p, hint)
    def check(inputs, labels):
        selected = labels != IGNORE
        if p == 0 and (selected.any() or not torch.equal(inputs, tokens)):
            return f"{int(selected.sum())} tokens were selected and {int((inputs != tokens).sum())} changed; expected none"
        if p == 1 and not torch.equal(selected, eligible):
            return "with select_prob=1 every ordinary token (and no special one) should be selected"
        return None
    return check


def _same_twice(tokens):
    contract = _check_contract(tokens)

    def check(out):
        first, second = out
        problem = contract(first) or contract(second)
        if problem:
            return problem
        if torch.equal(first[0], second[0]) and torch.equal(first[1], second[1]):
            return None
        return _because("two calls with generators seeded alike gave different results",
                        "draw every random number with generator=generator")

    return check


def _unchanged(tokens):
    contract = _check_contract(tokens, 0.5)

    def check(out):
        _, after, pair = out
        if not (isinstance(pair, tuple) and len(pair) == 2):
            return _because(f"expected a pair (inputs, labels), got {type(pair).__name__}", "return (inputs, labels)")
        problem = contract(pair)
        if problem:
            return problem
        # against the checker's own copy of the tokens: ``before`` came back from the student's side
        return None if isinstance(after, torch.Tensor) and torch.equal(tokens, after) else _because(
            "the tokens tensor passed in was modified in place",
            "build new tensors (torch.where, clone) instead of writing into tokens")

    return check


def check_mlm_masking(fn, verbose: bool = True):
    """Check a learner's BERT masking function ``fn(tokens, mask_id, vocab_size, special_ids, select_prob, generator)``.

    Every case checks the shapes and that each row selects exactly ``round(select_prob * n)``
    of its ``n`` ordinary tokens. Then: the (inputs, labels) contract; special tokens
    (``<pad>``, ``<cls>``, ``<unk>``) never selected; the selected positions spread over
    the whole row (drawn uniformly, not the first ``k``), at 0.15 and at another
    ``select_prob``; of the selected tokens about 80 % ``<mask>``, 10 % random ordinary
    tokens, 10 % unchanged; the edge cases ``select_prob`` = 0 and 1 and an all-padding
    batch; the same generator seed gives the same answer; the input tensor is not modified.
    """
    g = case_generator(9)
    big = _batch(g, draw(g, 200, 300), draw(g, 80, 110))
    small = _batch(g, draw(g, 6, 10), draw(g, 10, 14))
    all_pad = torch.full((draw(g, 2, 5), draw(g, 6, 12)), PAD)
    other_p = round(0.2 + 0.3 * float(torch.rand(1, generator=g)), 3)
    # No general hint on the cases: each property failed is named by its own check (a crash shows its error).
    cases = [
        Case("returns (inputs, labels): labels = original token where selected, -100 elsewhere",
             (small,), _check_contract(small), label="the (inputs, labels) contract"),
        Case("special tokens (<pad>, <cls>, <unk>) are never selected", (big,), _check_specials(big)),
        Case(COUNT_CASE, (big,), _check_spread(big, 0.15), label="exactly k per row, drawn uniformly"),
        Case("selected tokens: 80% <mask>, 10% random ordinary token, 10% unchanged", (big,), _check_split(big),
             label="the 80/10/10 split of the selected tokens"),
        Case("another select_prob", (big,), _check_spread(big, other_p), {"select_prob": other_p}),
        Case("select_prob=0 changes nothing", (small,), _check_extreme(small, 0), {"select_prob": 0.0}),
        Case("select_prob=1 selects every ordinary token", (small,), _check_extreme(small, 1), {"select_prob": 1.0}),
        Case("a batch of padding only: nothing selected", (all_pad,), _check_extreme(
            all_pad, 0, "padding is never selected: a row of padding only has no ordinary token, so k = 0")),
        Case("the same generator seed gives the same masking", (small,), _same_twice(small), {"probe": "twice"}),
        Case("the tokens passed in are not modified", (small.clone(),), _unchanged(small), {"probe": "in place"}),
    ]
    # A module-level adapter (not a closure): the grader's sandbox calls the student's function
    # through it by name, without the cases' checks ever entering the student's kernel.
    return run_checks("mlm_masking", functools.partial(call_masking, fn), cases, verbose=verbose)
