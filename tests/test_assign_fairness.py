"""Fairness audit of the checkers (issue 37): a grade depends on the code handed in, not on the seed.

Chapter 3's hidden cases were made to test what their labels say at every seed
(tests/test_grade_engine.py); this file audits the other nine chapters' checkers the same way. For
each assignment the reference solution (``solutions/``, the instructor edition's graded cell) and two
or three plausible wrong solutions (the reference with one mistake a learner makes) are graded as the
grader grades them (:func:`run_hidden` on the hidden cases' arguments, :func:`case_results` on what
comes back) at twelve grading seeds, small and large, and:

(a) the reference passes every case at every seed;
(b) each wrong solution fails the same cases at every seed, so two students who hand in the same
    mistake get the same grade whatever their secret seeds (one exception, explained at its entry);
(c) the cases it fails are the ones whose labels name the property its mistake breaks, and each
    failed hidden case's feedback says what kind of failure it was.

The audit found seven places where a grade was seed luck, each fixed in its checker (ch02's one-point
case underflowed for a narrow kernel; ch04's k = 4 BLEU case could lose every 4-gram; ch05 shared one
key/value head in cases that test sharing, and its large scores were so large that every softmax was
one-hot; ch06 drew d = 2, where the base and the exponent do not matter; ch08 drew one channel or a
one-row grid, where the patch order does not matter).
"""

from __future__ import annotations

import collections
import json
import math
import random
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import attention_book as ab
from attention_book.assignments.grading import case_results, dump_data, hidden_arguments, load_results, run_hidden

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("ch*_exercises.json"))
_random = random.Random(37)
SEEDS = (1, 2, 3, 97, 4242, 123457, *(_random.randrange(2**31) for _ in range(6)))  # 2**31: course.py's range


def _solution_source(function: str) -> str:
    for path in SOLUTIONS:
        for lines in json.loads(path.read_text(encoding="utf-8"))["cells"].values():
            text = "".join(lines)
            if f"def {function}(" in text:
                return text
    raise LookupError(function)


def _solution(function: str, *edits: tuple[str, str]):
    """The graded cell defining ``function``, with each ``(old, new)`` edit made: a learner's mistake."""
    text = _solution_source(function)
    for old, new in edits:
        assert text.count(old) >= 1, (function, old)
        text = text.replace(old, new)
    namespace = {"torch": torch, "math": math, "F": F, "collections": collections, "ab": ab}
    exec(text, namespace)
    return namespace[function]


# assignment: (the graded function's name, {mistake: (edits, fragments of the labels of the cases it fails)})
MISTAKES = {
    "softmax_pool": ("softmax_pool", {
        "T = 0 by argmax (ties ignored)": ([("ties / ties.sum(dim=-1, keepdim=True)",
                                             "F.one_hot(scores.argmax(-1), scores.shape[-1]).to(scores.dtype)")],
                                           ["tied best scores"]),
        "an exp that overflows": ([("torch.softmax((scores - best) / torch.where(T > 0, T, 1.0), dim=-1)",
                                    ("(lambda z: z.exp() / z.exp().sum(-1, keepdim=True))"
                                     "(scores / torch.where(T > 0, T, 1.0))"))], ["tiny temperatures"]),
        "one temperature for every query": ([("T = temperature[..., None]", "T = temperature[..., :1, None]")],
                                            ["one temperature per query", "a batch", "large T for the others"]),
    }),
    "nadaraya_watson": ("nw_gaussian", {
        "sigma² instead of 2 sigma²": ([("(2 * sigma**2)", "(sigma**2)")],
                                       ["validation grid", "a few training points"]),
        "an exp that underflows": ([("torch.softmax(scores, dim=1)",
                                     "scores.exp() / scores.exp().sum(1, keepdim=True)")], ["far from the data"]),
    }),
    "masked_cross_entropy": ("masked_cross_entropy", {
        "divided by every token": ([("(per_token * mask).sum() / count.clamp(min=1)",
                                     "(per_token * mask).sum() / mask.numel()")],
                                   ["different lengths", "padding index is not 0", "large logits at padded"]),
        "0 / 0 for padding only": ([("count.clamp(min=1)", "count")], ["padding only"]),
        "no mask": ([("(per_token * mask).sum() / count.clamp(min=1)", "per_token.mean()")],
                    ["different lengths", "padding index is not 0", "padding only", "large logits at padded"]),
    }),
    "bleu": ("my_bleu", {
        "unclipped counts": ([("unused[gram] -= 1", "pass")], ["clipping"]),
        "no brevity penalty": ([("score = math.exp(min(0.0, 1.0 - len(label) / len(pred)))", "score = 1.0")],
                               ["brevity penalty", "one-word prediction"]),
        # and the three partly right predictions, whose p_n lie strictly between 0 and 1 at every seed
        "weights 1/k": ([("(0.5**n)", "(1 / k)")], ["clipping", "long prediction", "4-grams", "right prediction, k = 2",
                                                    "right prediction, k = 3", "right prediction, k = 4"]),
        "an empty prediction divides by zero": ([("    if not pred:\n        return 0.0\n", "")], ["empty prediction"]),
    }),
    "per_head_attention": ("grouped_head_attention", {
        "key/value heads tiled": ([(".repeat_interleave(group, dim=1)", ".repeat(1, group, 1, 1)")],
                                  ["sharing key/value", "own size", "more keys", "another size", "large scores"]),
        "scaled by the whole width": ([("/ Q.shape[-1] ** 0.5", "/ queries.shape[-1] ** 0.5")],
                                      ["sharing", "own size", "one key/value head", "as many", "more keys",
                                       "another size", "large scores"]),
        "no scaling": ([(" / Q.shape[-1] ** 0.5", "")], ["sharing", "own size", "one key/value head", "as many",
                                                          "more keys", "another size", "large scores"]),
    }),
    "encode_positions": ("encode_positions", {
        "the base ignored": ([("/ base ** (even", "/ 10000.0 ** (even")], ["another base"]),
        "exponent j / d, not 2j / d": ([("torch.arange(0, num_hiddens, 2, dtype=torch.float64)",
                                         "torch.arange(0, (num_hiddens + 1) // 2, dtype=torch.float64)")],
                                       ["chapter's table", "any order", "fractional", "negative", "odd number",
                                        "another base", "far positions"]),
        "an odd width not handled": ([("angles[:, : num_hiddens // 2]", "angles")], ["odd number"]),
    }),
    "warmup_cosine": ("warmup_cosine", {
        "no clamp past the end": ([("t = min(step, max_steps)", "t = step")], ["after the end"]),
        "no warm-up divides by zero": ([("1.0 if warmup == 0 else min(1.0, t / warmup)", "min(1.0, t / warmup)")],
                                       ["no warm-up, first step", "no warm-up, a later step"]),
        "the ramp one step ahead": ([("min(1.0, t / warmup)", "min(1.0, (t + 1) / warmup)")],
                                    ["very first step", "inside the warm-up", "whole run"]),
    }),
    "patchify": ("patchify", {
        "channels last inside a patch": ([("blocks.permute(0, 2, 4, 1, 3, 5)", "blocks.permute(0, 2, 4, 3, 5, 1)")],
                                         ["several channels", "non-square", "one patch covering"]),
        "patches column by column": ([("blocks.permute(0, 2, 4, 1, 3, 5)", "blocks.permute(0, 4, 2, 1, 3, 5)")],
                                     ["one channel", "several channels", "non-square", "1x1"]),
        "no permute": ([("blocks = blocks.permute(0, 2, 4, 1, 3, 5)", "pass")],
                       ["one channel", "several channels", "non-square", "1x1"]),
    }),
    "mlm_masking": ("my_mask_for_mlm", {
        "k rounded down": ([("torch.round(", "torch.floor(")],
                           ["contract", "special tokens", "exactly k", "80/10/10", "another select_prob",
                            "same generator seed"]),
        "always <mask>": ([("selected & (action < 0.8)", "selected")], ["80/10/10"]),
        # Special tokens eligible: every case with special tokens fails at every seed but the contract case,
        # which checks the count of ordinary tokens selected: on its small batch (about ten tokens a row, one
        # or two selected) the student's own random draw sometimes picks no special token in any row, and the
        # count is then right. Which tokens a student's code picks is the student's randomness, not the
        # grader's; the spread over seeds is at most that one case.
        "special tokens eligible": ([("eligible = ~torch.isin(tokens, special)", "eligible = tokens >= 0")],
                                    ["special tokens", "exactly k", "80/10/10", "another select_prob",
                                     "select_prob=1", "padding only", "same generator seed", "not modified"]),
    }),
    "merge_softmax": ("merge_states", {
        "exp(-inf - -inf)": ([("reference = torch.where(torch.isinf(new_m), torch.zeros_like(new_m), new_m)",
                               "reference = new_m")], ["every block empty"]),
        "only the first two states": ([("states[1:]", "states[1:2]")],
                                      ["three blocks", "last block holds", "shuffled", "around 1000",
                                       "one row saw no key", "first block is empty", "many blocks"]),
        "0 / 0 for a row that saw nothing": ([("acc / torch.where(seen, l, torch.ones_like(l))[:, None]",
                                               "acc / l[:, None]")], ["every block empty"]),
    }),
}
VARIES = {("mlm_masking", "special tokens eligible"): ["contract"]}  # the one exception, explained above

needs_solutions = pytest.mark.skipif(not SOLUTIONS, reason="solutions/ is absent (a public copy without them)")


def _graded(tmp_path, name: str, fn, seed: int) -> list[dict]:
    """The cases of ``name`` at grading seed ``seed`` as the grader judges ``fn``'s answers."""
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments(name, seed, "audit")))
    run_hidden(name, fn, str(tmp_path / "cases.bin"), str(tmp_path / "results.bin"))
    return case_results(name, seed, "audit", load_results((tmp_path / "results.bin").read_bytes()))


def test_the_audit_covers_every_checker_but_chapter_3s():
    assert set(MISTAKES) == set(ab.assignments.assignment_names()) - {"masked_softmax"}


@needs_solutions
@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_the_reference_scores_full_marks_and_each_mistake_the_same_at_every_seed(tmp_path, name):
    function, mistakes = MISTAKES[name]
    reference = _solution(function)
    for seed in SEEDS:  # (a)
        failed = [(c["label"], c["why"]) for c in _graded(tmp_path, name, reference, seed) if not c["passed"]]
        assert not failed, (name, seed, failed)
    for mistake, (edits, fragments) in mistakes.items():
        wrong = _solution(function, *edits)
        outcomes = collections.defaultdict(list)
        for seed in SEEDS:
            cases = _graded(tmp_path, name, wrong, seed)
            failed = [c for c in cases if not c["passed"]]
            # (c) every failed hidden case says what kind of failure it was
            assert all(c["why"] and (c["visible"] or c["label"]) for c in failed), (mistake, seed, failed)
            outcomes[tuple(c["label"] for c in failed)].append(seed)
        varies = VARIES.get((name, mistake), [])
        steady = {tuple(label for label in labels if not any(f in label for f in varies)) for labels in outcomes}
        # (b) the same failed cases at every seed (but for an explained exception)
        assert len(steady) == 1, (mistake, dict(outcomes))
        labels = steady.pop()
        # (c) and they are the cases whose labels name what the mistake breaks, every one of them
        assert len(labels) == len(fragments), (mistake, labels, fragments)
        for fragment in fragments:
            assert sum(fragment in label for label in labels) >= 1, (mistake, fragment, labels)
