"""The graded assignments' checkers (attention_book.assignments), against their reference solutions.

The reference solutions are the graded cells of the instructor edition: ``solutions/<notebook>.json``
merged into ``notebooks/<notebook>.ipynb`` (scripts/editions.py). The grading engine itself is
tested in tests/test_grade.py.

What is checked here:

- every reference solution passes every case, visible and hidden;
- every hidden case draws its inputs from the hidden seed: a lookup table of the visible answers
  (the answer of the visible case with the same inputs) passes no hidden case;
- every case checks the whole shape and the dtype of a tensor answer;
- case names and labels carry no parameter of the seed (they are the same for every seed);
- every case counts: a case that raises is a failed case, and the report says "k of n cases passed";
- the assignments that vary what their chapter writes (ch01 pooling with a temperature per query down
  to T = 0, ch03 masked softmax for a causal sliding window over padded sequences, ch05 grouped-query attention per head, ch06 encodings of any positions, ch09 masking with exactly k
  tokens per sequence) reject plausible wrong answers.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import attention_book as ab
from attention_book.assignments import Case, collect_cases, hidden_cases, run_checks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import editions  # noqa: E402

EXERCISES = sorted((ROOT / "notebooks").glob("ch*_exercises.ipynb"))
HIDDEN = (1, 97, 4242, 123457)  # grading offsets (the grader draws a secret one)
# Assignments whose answer is a tensor (the others answer numbers or pairs).
TENSORS = {"softmax_pool", "nadaraya_watson", "masked_softmax", "per_head_attention", "encode_positions",
           "patchify"}


def _references() -> dict[str, tuple[str, object]]:
    """``{assignment: (checker name, reference function)}`` from the instructor edition's graded cells."""
    found = {}
    for path in EXERCISES:
        nb = json.loads(path.read_text(encoding="utf-8"))
        solutions = editions.load_solutions(path.name)
        if not solutions:
            continue
        instructor = editions.make_edition(nb, "instructor", solutions)
        namespace = {"torch": torch, "ab": ab, "math": math, "nn": nn, "F": F}
        for cell in instructor["cells"]:
            if editions.is_graded(cell):
                exec(editions.source(cell), namespace)
        for cell in instructor["cells"]:
            if "checker" in editions.tags(cell):
                # ab.assignments.check_x(fn) or check_x(fn) imported from attention_book.assignments
                checker, argument = re.search(r"\b(check_\w+)\((\w+)\)", editions.source(cell)).groups()
                found[checker[len("check_"):]] = (checker, namespace[argument])
    return found


REFERENCES = _references()
NAMES = sorted(REFERENCES)
needs_solutions = pytest.mark.skipif(not REFERENCES, reason="solutions/ is absent (a public copy without them)")


def run(name: str, fn, offset: int = 0):
    checker = getattr(ab.assignments, REFERENCES[name][0])
    if offset == 0:
        return checker(fn, verbose=False)
    with hidden_cases(offset):
        return checker(fn, verbose=False)


@needs_solutions
def test_every_exercises_page_has_its_reference_solutions():
    assert len(REFERENCES) == 11, sorted(REFERENCES)
    assert set(NAMES) == set(ab.assignments.assignment_names())


@needs_solutions
@pytest.mark.parametrize("name", NAMES)
def test_the_reference_solution_passes_every_case(name):
    fn = REFERENCES[name][1]
    for offset in (0, *HIDDEN):
        report = run(name, fn, offset)
        assert report and report.passed == report.total >= 5, (offset, report.results)


def _snapshot(x):
    """``x`` with tensors copied and generators replaced by their state (compared by value)."""
    if isinstance(x, torch.Generator):
        return ("generator", x.get_state())
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (tuple, list)):
        return tuple(_snapshot(v) for v in x)
    if isinstance(x, dict):
        return {k: _snapshot(v) for k, v in x.items()}
    return x


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and torch.equal(a, b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def lookup_table(name: str):
    """A submission that answers from a table of the visible cases: the reference's answer when its
    inputs equal those of a visible case, and no answer otherwise."""
    table = []
    reference = REFERENCES[name][1]

    def recording(*args, **kwargs):
        inputs = _snapshot((args, kwargs))
        got = reference(*args, **kwargs)
        table.append((inputs, got))
        return got

    run(name, recording)

    def lookup(*args, **kwargs):
        for known, answer in table:
            if _equal(known, _snapshot((args, kwargs))):
                return answer
        raise KeyError("not in the table of visible answers")

    assert run(name, lookup).passed == run(name, lookup).total  # the table answers the visible cases
    return lookup


@needs_solutions
@pytest.mark.parametrize("name", NAMES)
def test_a_lookup_table_of_the_visible_answers_fails_every_hidden_case(name):
    lookup = lookup_table(name)
    for offset in HIDDEN:
        report = run(name, lookup, offset)
        assert report.passed == 0, (offset, [n for n, ok, _ in report.results if ok])


@needs_solutions
@pytest.mark.parametrize("name", NAMES)
def test_no_hidden_case_repeats_a_visible_input(name):
    _, visible = collect_cases(name, None)
    for offset in HIDDEN:
        with hidden_cases(offset):
            _, hidden = collect_cases(name, None)
        assert len(hidden) == len(visible)
        for shown, secret in zip(visible, hidden):
            assert not _equal((shown.args, shown.kwargs), (secret.args, secret.kwargs)), (offset, secret.name)


@pytest.mark.parametrize("name", sorted(ab.assignments.assignment_names()))
def test_names_and_labels_carry_no_parameter_of_the_seed(name):
    """A hidden case is named in feedback by its label alone; the names and labels are the same for every
    seed, so they cannot reveal what a hidden case's inputs are."""
    _, visible = collect_cases(name, None)
    assert all(isinstance(c, Case) and c.label and len(c.label) <= 80 for c in visible)
    for offset in HIDDEN:
        with hidden_cases(offset):
            _, hidden = collect_cases(name, None)
        assert [(c.name, c.label) for c in hidden] == [(c.name, c.label) for c in visible]


def _reshaped(fn, how):
    def wrong(*args, **kwargs):
        got = fn(*args, **kwargs)  # a pair (softmax_pool's): each of its tensors reshaped
        return tuple(how(t) for t in got) if isinstance(got, tuple) else how(got)
    return wrong


@needs_solutions
@pytest.mark.parametrize("name", sorted(TENSORS))
def test_every_case_checks_the_whole_shape_and_the_dtype(name):
    fn = REFERENCES[name][1]
    def other_dtype(t):
        return t.to(torch.float32 if t.dtype == torch.float64 else torch.float64)

    def flat(t):
        return t.reshape(-1) if t.dim() > 1 else t[:, None]

    for how in (lambda t: t[None], flat, other_dtype, lambda t: t[..., :0]):
        for offset in (0, HIDDEN[0]):
            report = run(name, _reshaped(fn, how), offset)
            assert report.passed == 0, [n for n, ok, _ in report.results if ok]


@needs_solutions
def test_the_pairs_and_numbers_are_checked_whole():
    ce = REFERENCES["masked_cross_entropy"][1]
    assert run("masked_cross_entropy", lambda *a: (ce(*a)[0][None], ce(*a)[1])).passed == 0
    assert run("masked_cross_entropy", lambda *a: (ce(*a)[0].double(), ce(*a)[1])).passed == 0
    masking = REFERENCES["mlm_masking"][1]

    def flat(*args, **kwargs):
        inputs, labels = masking(*args, **kwargs)
        return inputs.reshape(-1), labels.reshape(-1)

    assert run("mlm_masking", flat).passed == 0

    def int32(*args, **kwargs):
        inputs, labels = masking(*args, **kwargs)
        return inputs.int(), labels.int()

    assert run("mlm_masking", int32).passed == 0
    merge = REFERENCES["merge_softmax"][1]
    assert run("merge_softmax", lambda states: tuple(t.float() for t in merge(states))).passed == 0
    assert run("merge_softmax", lambda states: merge(states)[::-1]).passed == 0


# --- every case counts ------------------------------------------------------------------------


def test_a_case_that_raises_is_a_failed_case_and_every_case_runs(capsys):
    calls = []

    def half(x):
        calls.append(x)
        if x % 2:
            raise NotImplementedError
        return x

    cases = [Case(f"case {i}", (i,), lambda got: None) for i in range(6)]
    report = run_checks("demo", half, cases)
    assert calls == list(range(6)) and report.total == 6 and report.passed == 3 and report.score == 0.5
    assert report.not_implemented and not report
    out = capsys.readouterr().out
    assert "demo: 3 of 6 cases passed." in out and "all cases passed" not in out
    assert repr(report) == "demo: not done yet (3 of 6 cases passed)"


@needs_solutions
@pytest.mark.parametrize("name", NAMES)
def test_answering_some_cases_and_raising_on_the_rest_never_beats_answering_all(name):
    """A function that answers the cases it can and raises on the rest scores what it answered, out of
    every case; a stub scores 0 of n and says "Not done yet"."""
    fn, seen = REFERENCES[name][1], []

    def partial(*args, **kwargs):
        seen.append(1)
        if len(seen) % 2 == 0:
            raise NotImplementedError
        return fn(*args, **kwargs)

    report = run(name, partial)
    total = run(name, fn).total
    assert report.total == total and report.passed < total

    def stub(*args, **kwargs):
        raise NotImplementedError

    checker = getattr(ab.assignments, REFERENCES[name][0])
    pending = checker(stub)
    assert pending.passed == 0 and pending.total == total and pending.not_implemented


def test_the_checker_prints_not_done_yet_for_a_stub(capsys):
    def stub(*args):
        raise NotImplementedError

    report = ab.assignments.check_softmax_pool(stub)
    out = capsys.readouterr().out
    assert out.startswith("Not done yet") and f"0 of {report.total} cases passed" in out


# --- the variations of what the chapters write --------------------------------------------------


def _masked(scores, valid_lens, window):
    return REFERENCES["masked_softmax"][1](scores, valid_lens, window)


def _window_keep(scores, valid_lens, window):
    i, j = torch.arange(scores.shape[-1])[:, None], torch.arange(scores.shape[-1])[None, :]
    return (j <= i) & (j > i - window) & (j < valid_lens[:, None, None])


def fills_minus_1e6(scores, valid_lens, window):
    return torch.softmax(scores.masked_fill(~_window_keep(scores, valid_lens, window), -1e6), dim=-1)


def minus_inf(scores, valid_lens, window):
    return torch.softmax(scores.masked_fill(~_window_keep(scores, valid_lens, window), float("-inf")), dim=-1)


def in_place(scores, valid_lens, window):
    scores[~_window_keep(scores, valid_lens, window)] = torch.finfo(scores.dtype).min
    return _masked(scores, valid_lens, window)


def the_pages_masked_softmax(X, valid_lens=None, *rest):
    """The chapter's masked softmax (valid lengths only), pasted as the answer: the window is ignored."""
    positions = torch.arange(X.shape[-1])
    keep = positions < valid_lens[:, None, None]
    return torch.softmax(X.masked_fill(~keep, torch.finfo(X.dtype).min), dim=-1) * keep


def window_one_too_wide(scores, valid_lens, window):
    return _masked(scores, valid_lens, window + 1)


@needs_solutions
@pytest.mark.parametrize("wrong, failing", [
    (fills_minus_1e6, {"far past the end", "below -1e6", "float16"}),
    (minus_inf, {"far past the end", "no real token", "float16"}),
    (in_place, {"in place"}),
])
def test_the_masked_softmax_checker_rejects_plausible_wrong_answers(wrong, failing):
    for offset in (0, HIDDEN[1]):
        report = run("masked_softmax", wrong, offset)
        failed = [name for name, ok, _ in report.results if not ok]
        for part in failing:
            assert any(part in name for name in failed), (part, failed)


@needs_solutions
def test_the_masked_softmax_checker_explains_uniform_and_nan_rows():
    why = " ".join(w for _, ok, w in run("masked_softmax", fills_minus_1e6).results)
    assert "uniform" in why
    why = " ".join(w for _, ok, w in run("masked_softmax", minus_inf).results)
    assert "NaN" in why


@needs_solutions
@pytest.mark.parametrize("wrong, cause", [(the_pages_masked_softmax, "as in the chapter's masked softmax"),
                                          (window_one_too_wide, "one key too wide")])
def test_copying_the_chapters_masked_softmax_earns_nothing_and_a_wrong_window_is_named(wrong, cause):
    """The chapter's page writes the masked softmax of valid lengths; the assignment asks for a causal
    sliding window over padded sequences, so the page's code passes no case (and is told what it misses);
    a window one key too wide passes only the cases where the window covers the sequence."""
    for offset in (0, HIDDEN[1]):
        report = run("masked_softmax", wrong, offset)
        failed = [why for _, ok, why in report.results if not ok]
        assert report.passed <= (0 if wrong is the_pages_masked_softmax else 1), report.results
        assert sum(cause in why for why in failed) >= len(failed) - 2, failed


def _pool(scores, values, temperature):
    return REFERENCES["softmax_pool"][1](scores, values, temperature)


def the_pages_soft_lookup(scores, values, temperature):
    """The chapter's softmax(scores / temperature) pooled with attention_pool, pasted as the answer."""
    exp = torch.exp((scores / temperature) - (scores / temperature).max(-1, keepdim=True).values)
    weights = exp / exp.sum(-1, keepdim=True)
    return weights @ values


def first_best_at_zero(scores, values, temperature):
    """Right for T > 0; at T = 0 a one-hot on the first best key (argmax), also where keys tie."""
    t = temperature[..., None]
    hard = F.one_hot(scores.argmax(-1), scores.shape[-1]).to(scores.dtype)
    weights = torch.where(t > 0, torch.softmax(scores / torch.where(t > 0, t, 1.0), dim=-1), hard)
    return weights @ values, weights


def divides_by_zero(scores, values, temperature):
    weights = torch.softmax(scores / temperature[..., None], dim=-1)
    return weights @ values, weights


@needs_solutions
@pytest.mark.parametrize("wrong, passes, cause", [
    (the_pages_soft_lookup, 0, ""), (lambda s, v, t: _pool(s, v, t)[::-1], 0, "wrong order"),
    (first_best_at_zero, 6, "tie for the highest score"), (divides_by_zero, 3, "scores / 0"),
])
def test_the_softmax_pool_checker_rejects_the_chapters_code_and_names_the_misconceptions(wrong, passes, cause):
    """The chapter's page pools with softmax(scores / T) for one T; the assignment asks for one T per query,
    T = 0 included, and the weights too: the page's code passes no case, and a T = 0 handled by argmax
    (ignoring ties) or by dividing by zero is named in the feedback."""
    for offset in (0, HIDDEN[1]):
        report = run("softmax_pool", wrong, offset)
        failed = [why for _, ok, why in report.results if not ok]
        assert not report and report.passed <= passes, report.results
        assert all(cause in why for why in failed), failed


def _grouped(split, scale_by_width=False):
    """Grouped-query attention with ``split`` cutting (batch, n, width) into heads: the shape of an answer."""
    def attention(queries, keys, values, num_heads, num_kv_heads):
        group = num_heads // num_kv_heads
        Q = split(queries, num_heads)
        K = split(keys, num_kv_heads).repeat_interleave(group, dim=1)
        V = split(values, num_kv_heads).repeat_interleave(group, dim=1)
        size = queries.shape[-1] if scale_by_width else Q.shape[-1]
        return torch.softmax(Q @ K.transpose(-1, -2) / size ** 0.5, dim=-1) @ V
    return attention


def _blocks(X, heads):
    b, n, d = X.shape
    return X.reshape(b, n, heads, d // heads).transpose(1, 2)


def _every_heads_th(X, heads):
    b, n, d = X.shape
    return X.reshape(b, n, d // heads, heads).permute(0, 3, 1, 2)


interleaved_heads = _grouped(_every_heads_th)  # head h takes every heads-th column instead of a block
scaled_by_full_size = _grouped(_blocks, scale_by_width=True)


def _tiled(queries, keys, values, num_heads, num_kv_heads):
    group = num_heads // num_kv_heads
    Q = _blocks(queries, num_heads)
    K, V = (_blocks(X, num_kv_heads).repeat(1, group, 1, 1) for X in (keys, values))
    return torch.softmax(Q @ K.transpose(-1, -2) / Q.shape[-1] ** 0.5, dim=-1) @ V


def _page_per_head(queries, keys, values, num_heads):
    """The chapter's attention per head (transpose_qkv, then scaled dot products), renamed."""
    Q, K, V = (_blocks(X, num_heads) for X in (queries, keys, values))
    return torch.softmax(Q @ K.transpose(-1, -2) / Q.shape[-1] ** 0.5, dim=-1) @ V


def _page_ignoring_kv_heads(queries, keys, values, num_heads, num_kv_heads):
    return _page_per_head(queries, keys, values, num_heads)


@pytest.mark.parametrize("wrong, passes", [(interleaved_heads, 4), (scaled_by_full_size, 4), (_tiled, 4),
                                           (_page_per_head, 0), (_page_ignoring_kv_heads, 1)])
def test_the_per_head_attention_checker_rejects_plausible_wrong_answers(wrong, passes):
    for offset in (0, HIDDEN[1]):
        report = run("per_head_attention", wrong, offset)
        assert not report and report.passed <= passes, report.results


def integer_table(positions, num_hiddens, base=10000.0):
    """Ignores the positions it is given: the chapter's table of 0, 1, ..., n - 1."""
    return ab.sinusoidal_table(len(positions), num_hiddens).to(positions.dtype)


def ignores_base(positions, num_hiddens, base=10000.0):
    return REFERENCES["encode_positions"][1](positions, num_hiddens)


def uses_j_not_2j(positions, num_hiddens, base=10000.0):
    j = torch.arange((num_hiddens + 1) // 2, dtype=torch.float64)
    angles = positions.double()[:, None] / base ** (j / num_hiddens)
    P = torch.zeros(len(positions), num_hiddens, dtype=torch.float64)
    P[:, 0::2], P[:, 1::2] = torch.sin(angles), torch.cos(angles[:, : num_hiddens // 2])
    return P.to(positions.dtype)


@needs_solutions
@pytest.mark.parametrize("wrong, passes", [(integer_table, 1), (ignores_base, 6), (uses_j_not_2j, 0)])
def test_the_encode_positions_checker_rejects_plausible_wrong_answers(wrong, passes):
    report = ab.assignments.check_encode_positions(wrong, verbose=False)
    assert not report and report.passed <= passes, report.results


def first_k_masked(tokens, mask_id, vocab_size, special_ids, select_prob=0.15, generator=None):
    """The exact count per row, but always the first k ordinary tokens, and always <mask>."""
    eligible = ~torch.isin(tokens, torch.tensor([*special_ids, mask_id]))
    k = torch.round(select_prob * eligible.sum(-1, keepdim=True).double())
    selected = eligible & (eligible.long().cumsum(-1) <= k)
    return torch.where(selected, mask_id, tokens), torch.where(selected, tokens, -100)


@pytest.mark.parametrize("wrong, passes", [(ab.mask_for_mlm, 3), (first_k_masked, 7)])
def test_the_mlm_masking_checker_rejects_the_chapters_masking_and_the_first_k(wrong, passes):
    """The chapter's page selects each token independently (``ab.mask_for_mlm``): the assignment asks for
    exactly round(select_prob * n) per row, so the page's code passes only the cases where the two agree
    (select_prob 0 or 1, padding only); selecting the first k of a row fails the spread cases."""
    for offset in (0, HIDDEN[1]):
        report = run("mlm_masking", wrong, offset)
        failed = [name for name, ok, _ in report.results if not ok]
        assert not report and report.passed <= passes, report.results
        if wrong is first_k_masked:
            assert sum("spread" in name or "another select_prob" in name for name in failed) == 2, failed


def fold_with_the_package(states):
    """A fold of the chapter's pairwise merge: right except for rows that saw no key (0 / 0)."""
    m, l, acc = states[0]
    for other in states[1:]:
        m, l, acc = ab.merge_softmax((m, l, acc), other)
    return acc / l[:, None], m + torch.log(l)


@pytest.mark.parametrize("wrong, passes", [(ab.merge_softmax, 0), (fold_with_the_package, 8)])
def test_the_merge_checker_rejects_the_chapters_pairwise_merge_and_a_fold_without_empty_rows(wrong, passes):
    """The chapter's page writes merge_softmax(a, b); the assignment takes a list of states and returns the
    output and the log-sum-exp, so the page's code renamed passes no case."""
    for offset in (0, HIDDEN[1]):
        report = run("merge_softmax", wrong, offset)
        assert not report and report.passed <= passes, report.results
        if wrong is fold_with_the_package:
            failed = [name for name, ok, _ in report.results if not ok]
            assert any("empty" in name for name in failed), failed


def _reshaped_straight(queries, keys, values, num_heads, num_kv_heads):
    """Reshapes (batch, n, heads * p) straight to (batch, heads, n, p), without the transpose."""
    group = num_heads // num_kv_heads
    b, n_q, n_k = queries.shape[0], queries.shape[1], keys.shape[1]
    Q = queries.reshape(b, num_heads, n_q, -1)
    K, V = (X.reshape(b, num_kv_heads, n_k, -1).repeat_interleave(group, dim=1) for X in (keys, values))
    return torch.softmax(Q @ K.transpose(-1, -2) / Q.shape[-1] ** 0.5, dim=-1) @ V


@pytest.mark.parametrize("wrong, words", [(_tiled, "tiled"), (scaled_by_full_size, "whole width"),
                                          (_reshaped_straight, "reshaped straight")])
def test_the_per_head_attention_checker_names_the_common_mistakes(wrong, words):
    """A fresh reader's tiled key/value heads were told 'the softmax runs over the keys': each common
    mistake is now named on every case it fails, for the visible and the hidden cases (its cause
    holds no value of a case), without the case's general hint beside it."""
    for offset in (0, HIDDEN[1]):
        report = run("per_head_attention", wrong, offset)
        failed = [why for _name, ok, why in report.results if not ok]
        assert failed and all(words in why and "hint:" not in why for why in failed), failed


def test_not_done_names_the_students_function_and_the_assignment(capsys):
    """Chapter 10's exercise writes merge_states, checked as merge_softmax: the line names both."""
    def merge_states(states):
        raise NotImplementedError

    ab.assignments.check_merge_softmax(merge_states)
    assert capsys.readouterr().out.startswith("Not done yet: merge_states (merge_softmax) is not implemented yet")

    def merge_softmax(states):
        raise NotImplementedError

    ab.assignments.check_merge_softmax(merge_softmax)
    assert capsys.readouterr().out.startswith("Not done yet: merge_softmax is not implemented yet")
