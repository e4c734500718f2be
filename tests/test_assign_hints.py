"""Checker feedback a learner can act on (issue 36 item 7, issue 37): each failed case names the cause of
ITS failure, never another case's hint.

Fresh learners found hints that pointed the wrong way: chapter 6 gave every failure (a float32 result, a
crash) the hint about the exponent 2j and the base; chapter 9 answered the chapter's own "select each token
independently" with a count error and the hint of the in-place case; chapter 8 told a channels-last patchify
to "use the patch height for the image rows". Each plausible wrong solution below is checked as a student
sees it (the visible cases) and as the grader describes a hidden case (inputs drawn from another seed): its
feedback must name its mistake and must not carry the hint of another one.
"""

from __future__ import annotations

import pytest
import torch

import attention_book as ab
from attention_book.assignments import hidden_cases
from attention_book.assignments.ch09 import COUNT_ELSEWHERE
from attention_book.assignments.grading import (
    case_results,
    dump_data,
    hidden_arguments,
    load_results,
    run_hidden,
)

OFFSETS = (0, 97, 4242)  # 0: the cases a student sees; the others: hidden runs


def failures(checker, fn) -> list[str]:
    """The reason of every failed case, over the visible cases and two hidden runs."""
    out = []
    for offset in OFFSETS:
        with hidden_cases(offset):
            report = checker(fn, verbose=False)
        out += [why for _name, ok, why in report.results if not ok]
    return out


def assert_named(checker, fn, words: str, wrong: tuple[str, ...] = (), elsewhere: str = ""):
    """Every failed case names the mistake in ``words``, or (where the checker explains it under other
    cases only) points there with ``elsewhere``; at least one names it."""
    found = failures(checker, fn)
    assert found, "the wrong solution passed every case"
    assert any(words in why for why in found), (words, found)
    for why in found:
        assert words in why or (elsewhere and elsewhere in why), (words, why)
        for other in wrong:
            assert other not in why, (other, why)


# Chapter 6: sinusoidal encodings of any positions ------------------------------------------------------------

def _encode(positions, num_hiddens, base=10000.0, *, j_not_2j=False, swap=False, dtype=None, own_base=True,
            transpose=False, odd_extra=False):
    """A learner's encode_positions, right by default, with one mistake switched on by each keyword."""
    pairs = (num_hiddens + 1) // 2
    index = torch.arange(pairs, dtype=torch.float64) * (1 if j_not_2j else 2)
    angles = positions.double()[:, None] / (base if own_base else 10000.0) ** (index / num_hiddens)
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    table = torch.stack([first(angles), second(angles)], dim=-1).reshape(len(positions), 2 * pairs)
    table = table if odd_extra else table[:, :num_hiddens]
    table = table.T if transpose else table
    return table.to(dtype or positions.dtype)


def always_float32(positions, num_hiddens, base=10000.0):
    return _encode(positions, num_hiddens, base, dtype=torch.float32)


def crashes(positions, num_hiddens, base=10000.0):
    return torch.zeros(len(positions), num_hiddens) @ torch.zeros(num_hiddens + 1, 1)


EXPONENT = "2j (not j)"  # the old hint, given to every failure whatever its cause


@pytest.mark.parametrize("wrong, words", [
    (always_float32, "the positions' dtype"),
    (lambda p, d, base=1e4: _encode(p, d, base, transpose=True), "transposed"),
    (lambda p, d, base=1e4: _encode(p, d, base, odd_extra=True), "drop the extra cosine column"),
    (lambda p, d, base=1e4: _encode(p, d, base, own_base=False), "the base argument is ignored"),
    (lambda p, d, base=1e4: _encode(p, d, base, j_not_2j=True), "the exponent uses j"),
    (lambda p, d, base=1e4: _encode(p, d, base, swap=True), "sines and cosines are swapped"),
    (lambda p, d, base=1e4: _encode(torch.arange(len(p), dtype=p.dtype), d, base), "positions passed in are ignored"),
])
def test_each_encode_positions_mistake_gets_its_own_cause(wrong, words):
    assert_named(ab.assignments.check_encode_positions, wrong, words, wrong=() if "exponent" in words else (EXPONENT,))


def test_a_crashing_encode_positions_shows_its_error_and_no_unrelated_hint():
    found = failures(ab.assignments.check_encode_positions, crashes)
    assert found and all(why.startswith("raised RuntimeError") and EXPONENT not in why and "hint" not in why
                         for why in found), found


def odd_crash(positions, num_hiddens, base=10000.0):
    """The chapter's interleaving, which breaks on an odd width: one cosine column too many."""
    angles = positions[:, None] / base ** (torch.arange(0, num_hiddens, 2, dtype=positions.dtype) / num_hiddens)
    P = torch.zeros(len(positions), num_hiddens, dtype=positions.dtype)
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles)
    return P


def test_an_odd_width_crash_is_told_the_last_column_is_a_sine(tmp_path):
    """Issue 36: a fresh learner's odd num_hiddens crash came back as a raw RuntimeError ("The expanded
    size of the tensor (2) must match the existing size (3)"). It now says why, still names the
    learner's line, and the grader's hidden case says it too; a function that crashes on every width is
    not told about the width."""
    found = failures(ab.assignments.check_encode_positions, odd_crash)
    assert len(found) == len(OFFSETS), found  # the odd case of each run, nothing else
    for why in found:
        assert why.startswith("raised RuntimeError") and "the last column is a sine" in why, why
        assert "in odd_crash)" in why, why
    assert not any("last column is a sine" in why for why in failures(ab.assignments.check_encode_positions,
                                                                        crashes))
    failed = [c for c in _graded(tmp_path, "encode_positions", odd_crash, 4242) if not c["passed"]]
    assert len(failed) == 1 and "the last column is a sine" in failed[0]["why"], failed


def test_the_right_encoding_passes():
    assert ab.assignments.check_encode_positions(_encode, verbose=False)


# Chapter 8: patchify --------------------------------------------------------------------------------------------

def _patchify(X, patch_size, *, inner=(1, 3, 5), by_column=False, swap_hw=False):
    ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    ph, pw = (pw, ph) if swap_hw else (ph, pw)
    b, c, h, w = X.shape
    blocks = X.reshape(b, c, h // ph, ph, w // pw, pw)
    blocks = blocks.permute(0, *((4, 2) if by_column else (2, 4)), *inner)
    return blocks.reshape(b, -1, c * ph * pw)


PATCH_HINTS = ("use the patch height for the image rows", "flatten each patch channel first", "hint:")


@pytest.mark.parametrize("wrong, words", [
    (lambda X, p: _patchify(X, p, inner=(3, 5, 1)), "the channel comes last within a patch (channels-last)"),
    (lambda X, p: _patchify(X, p, by_column=True), "numbered column by column"),
    (lambda X, p: X.reshape(X.shape[0], -1, X.shape[1] * (p * p if isinstance(p, int) else p[0] * p[1])),
     "without moving any axis"),
])
def test_each_patchify_mistake_gets_its_own_cause(wrong, words):
    assert_named(ab.assignments.check_patchify, wrong, words, wrong=PATCH_HINTS)


def test_the_right_patchify_passes():
    assert ab.assignments.check_patchify(_patchify, verbose=False)


# Chapter 9: exactly k tokens per row ----------------------------------------------------------------------------

IN_PLACE = "instead of writing into tokens"  # the in-place case's hint, once given to every count error


def _masking(tokens, mask_id, vocab_size, special_ids, select_prob=0.15, generator=None, *, floor=False,
             specials=False, independent=False):
    special = torch.tensor(list(special_ids) + [mask_id])
    eligible = (tokens >= 0) if specials else ~torch.isin(tokens, special)
    n = select_prob * eligible.sum(-1, keepdim=True).double()
    k = torch.floor(n) if floor else torch.round(n)
    rank = torch.rand(tokens.shape, generator=generator).masked_fill(~eligible, 2.0).argsort(-1).argsort(-1)
    selected = eligible & (rank < k)
    if independent:  # each token on its own, as the chapter's page does: about k per row
        selected = eligible & (torch.rand(tokens.shape, generator=generator) < select_prob)
    action = torch.rand(tokens.shape, generator=generator)
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in set(special.tolist())])
    random_tokens = ordinary[torch.randint(len(ordinary), tokens.shape, generator=generator)]
    inputs = torch.where(selected & (action < 0.8), mask_id, tokens)
    inputs = torch.where(selected & (action >= 0.8) & (action < 0.9), random_tokens, inputs)
    return inputs, torch.where(selected, tokens, -100)


@pytest.mark.parametrize("wrong, words", [
    (ab.mask_for_mlm, "each token seems to be selected on its own"),  # the chapter's page: about k, not k
    (lambda *a, **k: _masking(*a, **k, independent=True), "each token seems to be selected on its own"),
    (lambda *a, **k: _masking(*a, **k, floor=True), "k is rounded down"),
])
def test_each_mlm_count_mistake_is_named_on_every_case_it_fails(wrong, words):
    # named under the count's own cases; every other case it fails points to them in one line
    assert_named(ab.assignments.check_mlm_masking, wrong, words, wrong=(IN_PLACE, "draw every random number"),
                 elsewhere=COUNT_ELSEWHERE)


def test_selected_special_tokens_are_named_where_the_count_is_off():
    found = failures(ab.assignments.check_mlm_masking, lambda *a, **k: _masking(*a, **k, specials=True))
    assert found and all("special" in why or "padding" in why or COUNT_ELSEWHERE in why for why in found), found
    assert any("special" in why for why in found), found
    assert not any(IN_PLACE in why for why in found), found


def test_the_right_masking_passes():
    assert ab.assignments.check_mlm_masking(_masking, verbose=False)


# As the grader describes them: a hidden case's feedback names the kind of failure and its cause ---------------

def _graded(tmp_path, name: str, fn, seed: int) -> list[dict]:
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments(name, seed, "hints")))
    run_hidden(name, fn, str(tmp_path / "cases.bin"), str(tmp_path / "results.bin"))
    return case_results(name, seed, "hints", load_results((tmp_path / "results.bin").read_bytes()))


@pytest.mark.parametrize("name, wrong, words, other", [
    ("patchify", lambda X, p: _patchify(X, p, inner=(3, 5, 1)), "channel comes last", "patch height"),
    ("mlm_masking", lambda *a, **k: _masking(*a, **k, independent=True), "selected on its own", IN_PLACE),
    ("encode_positions", lambda p, d, base=1e4: _encode(p, d, base, own_base=False), "base argument is ignored",
     EXPONENT),
])
def test_the_graders_feedback_names_the_cause_of_each_failed_case(tmp_path, name, wrong, words, other):
    failed = [c for c in _graded(tmp_path, name, wrong, 4242) if not c["passed"]]
    assert failed, name
    assert any(words in case["why"] for case in failed), failed
    for case in failed:
        if name == "mlm_masking" and COUNT_ELSEWHERE in case["why"]:  # the count is explained under its own cases
            continue
        assert words in case["why"] and other not in case["why"], case
        assert words in case["cause"], case


# Chapter 4 BLEU and chapter 7's schedule: a mistake was told the hint of the case it failed ------------------

def _bleu(pred_seq, label_seq, k, *, penalty=True, weights_1_k=False):
    """A learner's BLEU (clipped n-gram precisions, brevity penalty, p_n ** (1 / 2^n)), one switch per mistake."""
    import collections
    import math

    pred, label = pred_seq.split(), label_seq.split()
    if not pred:
        return 0.0
    score = math.exp(min(0.0, 1.0 - len(label) / len(pred))) if penalty else 1.0
    for n in range(1, min(k, len(pred)) + 1):
        left = collections.Counter(" ".join(label[i:i + n]) for i in range(len(label) - n + 1))
        hits = 0
        for i in range(len(pred) - n + 1):
            gram = " ".join(pred[i:i + n])
            if left[gram] > 0:
                hits, left[gram] = hits + 1, left[gram] - 1
        score *= (hits / (len(pred) - n + 1)) ** (1 / k if weights_1_k else 0.5**n)
    return score


def _warmup_cosine(step, warmup, max_steps, *, ahead=False, replaces=False):
    import math

    t = min(step, max_steps)
    cosine = (1 + math.cos(math.pi * t / max_steps)) / 2
    if warmup == 0:
        return cosine
    ramp = min(1.0, (t + 1 if ahead else t) / warmup)
    return ramp if replaces and t < warmup else ramp * cosine


@pytest.mark.parametrize("checker, wrong, words, other", [
    ("check_bleu", lambda p, q, k: _bleu(p, q, k, weights_1_k=True), "weighted 1 / k", "hint:"),
    ("check_bleu", lambda p, q, k: _bleu(p, q, k, penalty=False), "brevity penalty is missing", "hint:"),
    ("check_warmup_cosine", lambda s, w, n: _warmup_cosine(s, w, n, ahead=True), "one step ahead", "hint:"),
    ("check_warmup_cosine", lambda s, w, n: _warmup_cosine(s, w, n, replaces=True), "ramp replaces", "hint:"),
])
def test_bleu_and_schedule_mistakes_are_named_on_every_case_they_fail(checker, wrong, words, other):
    assert_named(getattr(ab.assignments, checker), wrong, words, wrong=(other,))


def test_the_right_bleu_and_schedule_pass():
    assert ab.assignments.check_bleu(_bleu, verbose=False)
    assert ab.assignments.check_warmup_cosine(_warmup_cosine, verbose=False)


# Chapter 7 (issue 36, a fresh learner): a tensor scored 10/10 though the task asks for a Python float; a
# missing ramp got "the ramp replaces the cosine term: the factor is the product of the two"; a NameError got
# every case's hint beside it.

def _no_ramp(step, warmup, max_steps):
    import math

    return (1 + math.cos(math.pi * min(step, max_steps) / max_steps)) / 2


def _as_tensor(step, warmup, max_steps):
    return torch.tensor(_warmup_cosine(step, warmup, max_steps))


def _name_error(step, warmup, max_steps):
    return ramp * _no_ramp(step, warmup, max_steps)  # noqa: F821 (the learner's slip)


def test_a_schedule_returning_a_tensor_fails_and_says_python_float():
    found = failures(ab.assignments.check_warmup_cosine, _as_tensor)
    assert len(found) == 10 * len(OFFSETS), found
    assert all("Python float" in why for why in found), found


def test_a_missing_ramp_is_named_and_never_told_the_ramp_replaces_the_cosine_alone():
    assert_named(ab.assignments.check_warmup_cosine, _no_ramp, "ramp is missing",
                 wrong=("the factor is the product of the two", "hint:"))


def test_a_crashing_schedule_shows_its_error_where_it_was_raised_and_no_hint():
    found = failures(ab.assignments.check_warmup_cosine, _name_error)
    assert found and all(why.startswith("raised NameError") and "in _name_error" in why and "hint" not in why
                         for why in found), found


def _masked_ce(logits, labels, pad_id, *, by_all=False, no_mask=False):
    per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    mask = (labels != pad_id).to(per_token.dtype)
    count = mask.sum()
    if no_mask:
        return per_token.mean(), count
    return (per_token * mask).sum() / (mask.numel() if by_all else count.clamp(min=1)), count


@pytest.mark.parametrize("wrong, words", [
    (lambda lo, la, p: _masked_ce(lo, la, p, by_all=True), "divided by every position, padding included"),
    (lambda lo, la, p: _masked_ce(lo, la, p, no_mask=True), "padded positions' losses are counted"),
])
def test_masked_cross_entropy_mistakes_are_named_not_the_per_sentence_hint(wrong, words):
    assert_named(ab.assignments.check_masked_cross_entropy, wrong, words, wrong=("not a mean per sentence",))


def test_the_right_masked_cross_entropy_passes():
    assert ab.assignments.check_masked_cross_entropy(_masked_ce, verbose=False)


# Chapter 10: a merge loop that leaves states out was asked whether it rescaled l and acc --------------------

def _merge(states, *, stop=None):
    m, l, acc = states[0]
    for m2, l2, acc2 in states[1:stop]:
        new = torch.maximum(m, m2)
        safe = torch.where(torch.isinf(new), torch.zeros_like(new), new)
        a, b = torch.exp(m - safe), torch.exp(m2 - safe)
        m, l, acc = new, l * a + l2 * b, acc * a[:, None] + acc2 * b[:, None]
    seen = l > 0
    return acc / torch.where(seen, l, torch.ones_like(l))[:, None], m + torch.log(l)


@pytest.mark.parametrize("stop", [2, -1])
def test_a_merge_that_leaves_states_out_is_told_so(stop):
    assert_named(ab.assignments.check_merge_softmax, lambda states: _merge(states, stop=stop),
                 "merge every state of the list",
                 wrong=("did you rescale",))


def test_the_right_merge_passes():
    assert ab.assignments.check_merge_softmax(_merge, verbose=False)


def test_a_merge_of_the_first_and_last_state_is_not_told_it_used_one_state():
    """Issue 36: on the "first block is empty" case, merging states[0] and states[-1] gives the last state's
    answer alone, and the checker said "only one state is used"; the learner had merged two."""
    def first_and_last(states):
        return _merge(states[:1] + states[1:][-1:])  # one state: that state alone

    found = failures(ab.assignments.check_merge_softmax, first_and_last)
    assert found, "the wrong solution passed every case"
    for why in found:
        assert "merge every state of the list" in why, why
        assert "only one state is used" not in why, why
    assert any("between the first and the last" in why for why in found), found


# Round 2 (issue 36 item 7, issue 37): the grader's visible feedback, ch05's dtype and scaling, ch04's empty and
# partly right predictions and package wrappers, and checker lines that fit the page -----------------------------

def test_a_visible_case_with_a_named_cause_gets_no_case_hint_from_the_grader(tmp_path):
    """The student's checker leaves the case hint out where a Diagnosis names the cause; the grader did not
    for a visible case (seed 0 grades the very cases the student sees)."""
    cases = _graded(tmp_path, "bleu", lambda p, q, k: _bleu(p, q, k, weights_1_k=True), 0)
    failed = [c for c in cases if not c["passed"]]
    assert failed and all(c["visible"] for c in failed), failed
    for case in failed:
        assert "weighted 1 / k" in case["cause"] and "(hint:" not in case["why"], case


def _grouped(queries, keys, values, num_heads, num_kv_heads, *, scale=True, dtype=None, value_scale=False,
             softmax_dim=-1, layout=None):
    """A learner's grouped-query attention; ``scale=False`` leaves out 1 / sqrt(p), ``dtype`` casts the inputs,
    ``value_scale`` divides by sqrt(p_v), ``softmax_dim`` is the softmax's axis, ``layout`` "concatenated"
    returns (batch, n_q, num_heads * p_v), "heads third" (batch, n_q, num_heads, p_v)."""
    if dtype is not None:
        queries, keys, values = queries.to(dtype), keys.to(dtype), values.to(dtype)

    def split(X, heads):
        return X.reshape(X.shape[0], X.shape[1], heads, -1).transpose(1, 2)

    group = num_heads // num_kv_heads
    Q = split(queries, num_heads)
    K = split(keys, num_kv_heads).repeat_interleave(group, dim=1)
    V = split(values, num_kv_heads).repeat_interleave(group, dim=1)
    size = V.shape[-1] if value_scale else Q.shape[-1]
    scores = Q @ K.transpose(-1, -2) / (size ** 0.5 if scale else 1.0)
    out = torch.softmax(scores, dim=softmax_dim) @ V
    if layout == "concatenated":
        return out.transpose(1, 2).flatten(2)
    return out.transpose(1, 2) if layout == "heads third" else out


def test_grouped_attention_in_float32_is_told_its_dtype_never_tiled_heads():
    """With one key/value head, or as many as query heads, tiling gives the right answer: a float32 result of
    a right computation was told its heads were tiled there."""
    found = failures(ab.assignments.check_per_head_attention, lambda *a: _grouped(*a, dtype=torch.float32))
    assert len(found) == 3 * 7
    for why in found:
        assert "inputs' dtype" in why and "tiled" not in why and "hint" not in why, why
    assert ab.assignments.check_per_head_attention(_grouped, verbose=False)


def test_grouped_attention_without_the_scaling_is_told_so_on_every_case(tmp_path):
    assert_named(ab.assignments.check_per_head_attention, lambda *a: _grouped(*a, scale=False), "not scaled",
                 wrong=("hint:", "tiled"))
    failed = [c for c in _graded(tmp_path, "per_head_attention", lambda *a: _grouped(*a, scale=False), 4242)
              if not c["passed"]]
    assert len(failed) == 7 and all("not scaled" in c["cause"] for c in failed), failed
    failed = [c for c in _graded(tmp_path, "per_head_attention", lambda *a: _grouped(*a, dtype=torch.float32),
                                 4242) if not c["passed"]]
    assert len(failed) == 7 and all("inputs' dtype" in c["why"] for c in failed), failed


def test_grouped_attention_scaled_by_the_value_heads_size_is_told_so(tmp_path):
    """Dividing by sqrt(p_v) is wrong only where p_v differs from p; the case's hint ("split the values'
    columns into num_kv_heads blocks") sent a reader's right split looking for a wrong one."""
    wrong = lambda *a: _grouped(*a, value_scale=True)  # noqa: E731
    found = failures(ab.assignments.check_per_head_attention, wrong)
    assert len(found) == len(OFFSETS), found  # the case of values of another size, at every seed
    for why in found:
        assert "sqrt(p_v)" in why and "hint" not in why, why
    (case,) = [c for c in _graded(tmp_path, "per_head_attention", wrong, 4242) if not c["passed"]]
    assert "sqrt(p_v)" in case["cause"], case


@pytest.mark.parametrize("layout, words", [("concatenated", "the heads are concatenated"),
                                           ("heads third", "the heads axis is third")])
def test_grouped_attention_with_its_heads_laid_out_wrong_gets_one_cause(tmp_path, layout, words):
    """Heads concatenated: every case printed another case's hint (7 unrelated hints for one mistake). One
    cause now, the same in every case, so the grader says it once ("One mistake explains all ...")."""
    wrong = lambda *a: _grouped(*a, layout=layout)  # noqa: E731
    assert_named(ab.assignments.check_per_head_attention, wrong, words, wrong=("hint:",))
    failed = [c for c in _graded(tmp_path, "per_head_attention", wrong, 4242) if not c["passed"]]
    # heads third has the right shape where n_q == num_heads: those cases are told their values
    assert len(failed) >= (7 if layout == "concatenated" else 2), failed
    causes = {c["cause"] for c in failed if words in c["why"]}
    assert len(causes) == 1 and words in causes.pop(), failed


def test_grouped_attention_with_the_softmax_over_the_queries_is_told_so_on_every_case(tmp_path):
    """The reader's softmax over the queries got the right hint ("the softmax runs over the keys") in 1 of 7
    cases, other cases' hints in the rest."""
    wrong = lambda *a: _grouped(*a, softmax_dim=-2)  # noqa: E731
    assert_named(ab.assignments.check_per_head_attention, wrong, "softmax runs over the queries", wrong=("hint:",))
    failed = [c for c in _graded(tmp_path, "per_head_attention", wrong, 4242) if not c["passed"]]
    assert len(failed) == 7 and all("over the queries" in c["cause"] for c in failed), failed


def test_an_empty_prediction_is_a_case_of_its_own():
    """The assignment says an empty prediction scores 0: a BLEU that divides by its length fails that case only."""
    def divides_by_zero(pred_seq, label_seq, k):
        return _bleu(pred_seq, label_seq, k) if pred_seq.split() else 1 / len(pred_seq.split())

    for offset in OFFSETS:
        with hidden_cases(offset):
            report = ab.assignments.check_bleu(divides_by_zero, verbose=False)
        assert [name for name, ok, _ in report.results if not ok] == ["an empty prediction scores 0"], report


def test_the_partly_right_bleu_cases_score_between_0_and_1_and_test_the_weights():
    """The three pairs that ended the BLEU cases shared no word at most seeds (every one expected 0)."""
    from attention_book.assignments import collect_cases

    for offset in (*OFFSETS, 1, 2, 3, 123457):
        with hidden_cases(offset):
            _, cases = collect_cases("bleu")
        partly = [c for c in cases if c.name.startswith("a partly right prediction")]
        assert [c.args[2] for c in partly] == [2, 3, 4]
        for case in partly:
            assert 0.05 < ab.bleu(*case.args) < 1, case.args
            assert case.check(_bleu(*case.args, weights_1_k=True)) is not None, case.args


def test_a_function_that_wraps_the_package_is_told_the_grader_blocks_it(capsys):
    def my_bleu(pred_seq, label_seq, k=2):
        return ab.bleu(pred_seq, label_seq, k)

    ab.assignments.check_bleu(my_bleu)
    out = capsys.readouterr().out
    assert "calls the package's own bleu, which the grader blocks" in out, out
    ab.assignments.check_bleu(_bleu)
    assert "package" not in capsys.readouterr().out


def test_every_line_a_checker_prints_fits_88_characters(capsys):
    """The "Not done yet" lines were 146-172 characters and wrapped at 1280 px."""
    for name in ab.assignments.assignment_names():
        def stub(*args, **kwargs):
            raise NotImplementedError

        stub.__name__ = name
        getattr(ab.assignments, f"check_{name}")(stub)
        out = capsys.readouterr().out
        assert out.startswith("Not done yet") and "(0 of " in out, out
        assert max(map(len, out.splitlines())) <= 88, out
    ab.assignments.check_bleu(ab.bleu)
    assert max(map(len, capsys.readouterr().out.splitlines()[:2])) <= 88


# Chapter 2: Nadaraya-Watson regression ------------------------------------------------------------------------

def _nw(x, y, q, sigma, *, normalise=True, stable=True):
    """A learner's nadaraya_watson, right by default; normalise=False forgets to divide by the weights' sum,
    stable=False takes exp of the scores as they are (0/0 = NaN once every weight underflows)."""
    scores = -((q[:, None] - x[None, :]) ** 2) / (2 * sigma**2)
    if stable:
        weights = torch.softmax(scores, dim=1) if normalise else scores.exp()
    else:
        weights = scores.exp()
        weights = weights / weights.sum(dim=1, keepdim=True) if normalise else weights
    return weights @ y


def test_the_narrow_kernel_case_names_nan_only_when_the_result_has_nan():
    checker = ab.assignments.check_nadaraya_watson

    def narrow(fn) -> list[str]:  # the narrow case's reasons, visible and hidden
        out = []
        for offset in OFFSETS:
            with hidden_cases(offset):
                report = checker(fn, verbose=False)
            out += [why for name, ok, why in report.results if not ok and name.startswith("a narrow kernel")]
        return out

    assert failures(checker, _nw) == []
    unstable = narrow(lambda *a: _nw(*a, stable=False))
    assert len(unstable) == len(OFFSETS) and all("0/0 is NaN" in w for w in unstable), unstable
    unnormalised = narrow(lambda *a: _nw(*a, normalise=False))
    assert len(unnormalised) == len(OFFSETS), unnormalised
    assert all("0/0 is NaN" not in w and "normalised over the keys" in w for w in unnormalised), unnormalised
