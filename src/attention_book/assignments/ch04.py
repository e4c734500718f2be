"""Chapter 4 checkers: the masked cross-entropy of sequence-to-sequence training, and BLEU."""

from __future__ import annotations

import math

import torch

from ..models.seq2seq import masked_cross_entropy as reference_masked_cross_entropy
from ..data.text import bleu as reference_bleu
from . import Case, case_seed, compare, run_checks

__all__ = ["check_masked_cross_entropy", "reference_masked_cross_entropy", "check_bleu"]


def _expect(logits, labels, pad_id):
    want_mean, want_count = reference_masked_cross_entropy(logits, labels, pad_id)

    def check(got):
        if not isinstance(got, tuple) or len(got) != 2:
            return f"expected a pair (mean, count), got {type(got).__name__}"
        mean, count = got
        if not isinstance(mean, torch.Tensor) or mean.dim() != 0:
            shape = tuple(mean.shape) if isinstance(mean, torch.Tensor) else type(mean).__name__
            return f"the mean must be a 0-dimensional tensor (so it can be back-propagated), got {shape}"
        if not torch.isfinite(mean):
            return f"the mean is {mean.item()}; a batch with no real tokens should give 0, not NaN"
        if int(count) != int(want_count):
            return f"expected count {int(want_count)} real tokens, got {count}"
        if not torch.allclose(mean.detach().float(), want_mean.float(), atol=1e-5, rtol=1e-4):
            return f"expected mean {want_mean.item():.5f}, got {mean.item():.5f}"
        return None

    return check


def _case(name, logits, labels, pad_id, hint):
    return Case(name, (logits, labels, pad_id), _expect(logits, labels, pad_id), hint=hint)


def check_masked_cross_entropy(fn, verbose: bool = True):
    """Check ``fn(logits, labels, pad_id) -> (mean, count)``.

    ``logits`` (batch, steps, vocab), ``labels`` (batch, steps); the mean is over
    the label positions that are not ``pad_id``; ``count`` is their number.
    """
    g = torch.Generator().manual_seed(case_seed(4))
    logits = torch.randn(3, 5, 7, generator=g)
    no_pad = torch.randint(1, 7, (3, 5), generator=g)
    ragged = torch.tensor([[3, 2, 0, 0, 0], [4, 4, 5, 6, 2], [2, 0, 0, 0, 0]])
    pad_is_4 = torch.tensor([[3, 2, 4, 4, 4], [1, 1, 5, 6, 2], [2, 4, 4, 4, 4]])
    all_pad = torch.zeros(3, 5, dtype=torch.long)
    big = torch.randn(2, 4, 7, generator=g) * 50
    big_labels = torch.tensor([[1, 2, 0, 0], [3, 0, 0, 0]])
    cases = [
        _case("no padding: plain cross-entropy", logits, no_pad, 0,
              "without padding the answer is F.cross_entropy over all positions"),
        _case("sentences of different lengths", logits, ragged, 0,
              "average over real tokens of the whole batch (7 here), not over all 15 positions "
              "and not sentence by sentence"),
        _case("the padding index is not 0", logits, pad_is_4, 4, "use pad_id, not a hard-coded 0"),
        _case("a batch of padding only", logits, all_pad, 0,
              "with no real token, return a mean of 0 (divide by max(count, 1))"),
        _case("large logits at padded positions", big, big_labels, 0,
              "padded positions must not contribute, however large their logits"),
    ]
    return run_checks("masked_cross_entropy", fn, cases, verbose=verbose)


def _random_pair(g: torch.Generator, words: list[str]) -> tuple[str, str]:
    """A reference and a prediction sharing some words, both 2-9 tokens long."""
    def sentence():
        n = int(torch.randint(2, 10, (1,), generator=g))
        return " ".join(words[int(i)] for i in torch.randint(0, len(words), (n,), generator=g))
    return sentence(), sentence()


def check_bleu(fn, verbose: bool = True):
    """Check ``fn(pred_seq, label_seq, k) -> float``, BLEU as chapter 4 defines it."""
    g = torch.Generator().manual_seed(case_seed(8))
    words = ["je", "suis", "chez", "moi", "il", "est", "calme", ".", "!"]
    rows = [
        ("a perfect translation scores 1", ("je suis chez moi .", "je suis chez moi .", 2),
         "every n-gram matches and the lengths agree"),
        ("a repeated word counts once (clipping)", ("je suis chez chez moi .", "je suis chez moi .", 2),
         "a reference n-gram can be matched only as often as it occurs there: count what is left"),
        ("a short prediction pays the brevity penalty", ("je suis .", "je suis chez moi .", 2),
         "multiply by exp(min(0, 1 - len_label / len_pred))"),
        ("a long prediction pays no penalty", ("je suis chez moi . !", "je suis .", 2),
         "the penalty only lowers scores of predictions shorter than the label"),
        ("no common word scores 0", ("il est calme", "je suis chez moi", 2), "p_1 = 0 makes the product 0"),
        ("k = 4 uses up to 4-grams, weighted 1/2^n", ("je suis chez moi .", "je suis chez nous .", 4),
         "the exponent of p_n is 1 / 2**n"),
        ("a one-word prediction uses only unigrams", ("je", "je suis", 2),
         "n runs up to min(k, len(pred)): there is no bigram in a one-word prediction"),
    ]
    rows += [(f"random pair {i + 1} (k = {k})", (*_random_pair(g, words), k),
              "compare your n-gram counts with a hand count for this pair") for i, k in enumerate((2, 3, 4))]

    def number(expected: float):
        inner = compare(expected, atol=1e-9, rtol=1e-6)

        def check(got):
            if isinstance(got, torch.Tensor) and got.numel() == 1:
                got = float(got)
            if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
                return f"expected a finite number, got {got!r}"
            return inner(float(got))

        return check

    cases = [Case(name, args, number(reference_bleu(*args)), hint=hint) for name, args, hint in rows]
    return run_checks("bleu", fn, cases, verbose=verbose)
