"""Writing into the inputs, judged per case: the instructor's extra cases get the assignment's own in-place
rule, and a function that writes into its inputs fails the cases where it did, saying so, and no others."""

from __future__ import annotations

import torch
from test_grade_engine import SEED, function, grading_cases, results

# The instructor's clone (8/10): gus's masked_softmax is right, but writes its fill into the scores with
# masked_fill_; it passed the course file's extra case, the one case of ten that did not check the inputs.
CORRECT = '''
def my_masked_softmax(scores, valid_lens, window):
    n = scores.shape[-1]
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    keep = (j <= i) & (j > i - window) & (j < valid_lens[:, None, None])
    filled = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
    return torch.softmax(filled, dim=-1) * keep
'''
WRITES_ALWAYS = CORRECT.replace("scores.masked_fill(", "scores.masked_fill_(")
# writes into its scores only where they are float16 (one case)
WRITES_ONCE = CORRECT.replace("filled = scores.masked_fill(", "filled = (scores.masked_fill_ if scores.dtype "
                              "== torch.float16 else scores.masked_fill)(")

EXTRA = '''
import torch
from attention_book.assignments import Case, compare

def cases(name, seed):
    if name != "masked_softmax":
        return []
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(1, 3, 3, generator=g)
    keep = torch.ones(3, 3, dtype=torch.bool).tril()
    expected = torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)
    return [Case("instructor: causal, no padding", (s, torch.tensor([3]), 3), compare(expected),
                 label="causal, no padding"),
            Case("instructor: its own rule", (s.clone(), torch.tensor([3]), 3), compare(expected),
                 label="its own rule", unchanged="you wrote into the scores")]
'''


def test_an_extra_case_checks_the_inputs_as_the_assignments_own_cases_do(tmp_path):
    """An extra case without ``unchanged`` passed gus's in-place writer (1/10, that case alone); it now
    gets the rule every case of masked_softmax has, and one that sets ``unchanged`` keeps its own."""
    extra = tmp_path / "extra.py"
    extra.write_text(EXTRA)
    _, cases = grading_cases("masked_softmax", SEED, str(extra))
    assert cases[-2].unchanged == cases[0].unchanged != "" and cases[-1].unchanged == "you wrote into the scores"
    got = results(tmp_path, function(WRITES_ALWAYS), extra=str(extra))
    assert not any(c["passed"] for c in got), [(c["label"], c["why"]) for c in got if c["passed"]]
    assert "you wrote into the scores" in got[-1]["why"]
    right = results(tmp_path, function(CORRECT), extra=str(extra))
    assert all(c["passed"] for c in right), [c["why"] for c in right if not c["passed"]]


def test_an_extra_case_of_an_assignment_without_the_rule_gets_none(tmp_path):
    """mlm_masking tests in-place writes in one case of its own: its extra cases are not given a rule."""
    extra = tmp_path / "extra.py"
    extra.write_text("from attention_book.assignments import Case\n"
                     "def cases(name, seed):\n    return [Case('mine', ())] if name == 'mlm_masking' else []\n")
    _, cases = grading_cases("mlm_masking", SEED, str(extra))
    assert cases[-1].unchanged == ""


def test_a_write_into_the_inputs_fails_that_case_alone_and_says_so(tmp_path):
    """A function that writes into its scores on one case fails that case, with the reason 'changed its
    input in place' (it said 'the result is wrong'), and is judged on its results everywhere else."""
    got = results(tmp_path, function(WRITES_ONCE))
    failed = [c for c in got if not c["passed"]]
    assert [c["label"] for c in failed] == ["float16 scores stay finite, with empty rows"], failed
    assert failed[0]["why"].startswith("your function changed its input in place"), failed[0]["why"]
    assert "the result is wrong" not in failed[0]["why"]


def test_a_write_into_the_inputs_on_every_case_fails_every_case(tmp_path):
    got = results(tmp_path, function(WRITES_ALWAYS))
    written = [c for c in got if c["why"].startswith("your function changed its input in place")]
    # a case where every key is allowed leaves nothing to fill: there the scores stay as they were
    assert len(written) >= len(got) - 2 and not any(c["passed"] for c in written), [c["why"] for c in got]
    assert all(torch.is_tensor(a) for a in grading_cases("masked_softmax", SEED)[1][0].args[:2])


# the scores by keyword: EXTRA's inputs, one case that passes them as keyword arguments
KEYWORD_EXTRA = EXTRA.rsplit("    return [", 1)[0] + (
    '    return [Case("instructor: the scores by keyword", (), compare(expected), label="scores by keyword",\n'
    '                 kwargs={"scores": s, "valid_lens": torch.tensor([3]), "window": 3})]\n')


def test_a_write_into_a_keyword_tensor_argument_is_caught(tmp_path):
    """A fresh attacker (issue 37, 7/10): the in-place check compared the positional arguments only
    (run_hidden sent back args, not kwargs), so an extra case that passes its scores by keyword let a
    function that writes into them pass. The keyword tensors are compared as the positional ones."""
    extra = tmp_path / "extra.py"
    extra.write_text(KEYWORD_EXTRA)
    _, cases = grading_cases("masked_softmax", SEED, str(extra))
    assert cases[-1].unchanged != "" and not cases[-1].args and torch.is_tensor(cases[-1].kwargs["scores"])
    got = results(tmp_path, function(WRITES_ALWAYS), extra=str(extra))
    assert not got[-1]["passed"] and got[-1]["why"].startswith("your function changed its input in place"), got[-1]
    right = results(tmp_path, function(CORRECT), extra=str(extra))
    assert right[-1]["passed"], right[-1]["why"]


def test_a_write_in_place_is_judged_anyway_unscored(tmp_path):
    """A fresh instructor (issue 37, 8/10): smithjohn wrote into his scores and had a window off by one; the
    feedback named the write alone, and after he fixed it 8 of 9 cases still failed. A case that fails for a
    write still fails, but its result is judged on the grader's copy (``result_right``), unscored."""
    got = results(tmp_path, function(WRITES_ALWAYS))
    written = [c for c in got if c["why"].startswith("your function changed its input in place")]
    assert written and all(c["result_right"] is True for c in written), written
    off = results(tmp_path, function(WRITES_ALWAYS.replace("j > i - window", "j >= i - window")))
    written = [c for c in off if c["why"].startswith("your function changed its input in place")]
    assert written and not all(c["result_right"] for c in written) and not any(c["passed"] for c in written)
