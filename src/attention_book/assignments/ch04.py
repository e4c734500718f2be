"""Chapter 4 checkers: the masked cross-entropy of sequence-to-sequence training, and BLEU."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from ..models.seq2seq import masked_cross_entropy as reference_masked_cross_entropy
from ..data.text import bleu as reference_bleu, bleu_parts
from . import Case, Diagnosis, case_generator, compare, draw, run_checks

__all__ = ["check_masked_cross_entropy", "reference_masked_cross_entropy", "check_bleu"]


PER_SENTENCE = ("this is a mean per sentence, then over sentences, so a short sentence weighs as much as a "
                "long one; take one average over the whole batch: the losses of all real tokens summed, "
                "divided by their number")


def _means_per_sentence(logits, labels, pad_id) -> list[torch.Tensor]:
    """The mistaken average: each sentence's mean over its real tokens, then the mean over sentences
    (a sentence of padding only counted as 0, or left out)."""
    per_token = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    real = (labels != pad_id).to(per_token.dtype)
    lengths = real.sum(1)
    means = (per_token * real).sum(1) / lengths.clamp(min=1)
    return [means.mean()] + ([means[lengths > 0].mean()] if bool((lengths > 0).any()) else [])


DIVIDED_BY_ALL = ("the masked losses are divided by every position, padding included: divide their sum by the "
                  "number of real tokens (labels != pad_id)")
NO_MASK = ("the padded positions' losses are counted: multiply each position's loss by the mask "
           "(labels != pad_id) before summing")
PAD_ZERO = "the mask compares the labels with 0, not with pad_id: use labels != pad_id"


def _other_means(logits, labels, pad_id) -> list[tuple[str, torch.Tensor]]:
    """(cause, the mean a function with that mistake gives) for the common mistakes but the per-sentence mean."""
    per_token = F.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    real = (labels != pad_id).to(per_token.dtype)
    out = [(DIVIDED_BY_ALL, (per_token * real).sum() / real.numel()), (NO_MASK, per_token.mean())]
    if pad_id != 0:
        zero = (labels != 0).to(per_token.dtype)
        out.append((PAD_ZERO, (per_token * zero).sum() / zero.sum().clamp(min=1)))
    return out


def _expect(logits, labels, pad_id):
    want_mean, want_count = reference_masked_cross_entropy(logits, labels, pad_id)
    mistaken = [m for m in _means_per_sentence(logits, labels, pad_id)
                if not torch.allclose(m.float(), want_mean.float(), atol=1e-5, rtol=1e-4)]
    others = [(cause, m) for cause, m in _other_means(logits, labels, pad_id)
              if not torch.allclose(m.float(), want_mean.float(), atol=1e-5, rtol=1e-4)]

    def check(got):
        if not isinstance(got, tuple) or len(got) != 2:
            return f"expected a pair (mean, count), got {type(got).__name__}"
        mean, count = got
        if not isinstance(mean, torch.Tensor) or mean.dim() != 0:
            shape = tuple(mean.shape) if isinstance(mean, torch.Tensor) else type(mean).__name__
            return f"the mean must be a 0-dimensional tensor (so it can be back-propagated), got {shape}"
        if mean.dtype != logits.dtype:
            return f"the mean must have the logits' dtype {logits.dtype}, got {mean.dtype}"
        if not torch.isfinite(mean):
            return f"the mean is {mean.item()}; a batch with no real tokens should give 0, not NaN"
        if int(count) != int(want_count):
            return f"expected count {int(want_count)} real tokens, got {count}"
        if not torch.allclose(mean.detach().float(), want_mean.float(), atol=1e-5, rtol=1e-4):
            why = f"expected mean {want_mean.item():.5f}, got {mean.item():.5f}"
            if any(torch.allclose(mean.detach().float(), m.float(), atol=1e-5, rtol=1e-4) for m in mistaken):
                return Diagnosis(f"{why} — {PER_SENTENCE}", PER_SENTENCE)
            cause = next((cause for cause, m in others
                          if torch.allclose(mean.detach().float(), m.float(), atol=1e-5, rtol=1e-4)), None)
            return Diagnosis(f"{why} — {cause}", cause) if cause else why
        return None

    return check


def _case(name, logits, labels, pad_id, hint):
    return Case(name, (logits, labels, pad_id), _expect(logits, labels, pad_id), hint=hint)


def check_masked_cross_entropy(fn, verbose: bool = True):
    """Check ``fn(logits, labels, pad_id) -> (mean, count)``.

    ``logits`` (batch, steps, vocab), ``labels`` (batch, steps); the mean is over
    the label positions that are not ``pad_id``; ``count`` is their number. Every
    input (sizes and padding id included) is drawn from the case seed.
    """
    g = case_generator(4)
    batch, steps, vocab = draw(g, 2, 4), draw(g, 4, 7), draw(g, 5, 9)
    logits = torch.randn(batch, steps, vocab, generator=g)

    def padded(pad_id, empty_rows=False):
        """Labels with trailing padding of random lengths (a row may be all padding)."""
        labels = torch.randint(0, vocab - 1, (batch, steps), generator=g)
        labels[labels >= pad_id] += 1  # ordinary tokens never equal pad_id
        lengths = torch.randint(0 if empty_rows else 1, steps, (batch,), generator=g)
        labels[torch.arange(steps)[None, :] >= lengths[:, None]] = pad_id
        return labels

    def different_lengths(pad_id):
        """One sentence of a single token, the model's worst guess, and one filling every step with
        its best guesses: the mean over tokens and the mean of sentence means differ clearly."""
        labels = padded(pad_id)
        labels[0, 1:] = pad_id
        scores = logits.clone()
        scores[..., pad_id] = float("nan")  # never a label
        labels[0, 0] = scores[0, 0].nan_to_num(float("inf")).argmin()
        labels[-1] = scores[-1].nan_to_num(float("-inf")).argmax(-1)
        return labels

    no_pad = torch.randint(1, vocab, (batch, steps), generator=g)
    other_pad = draw(g, 1, vocab - 1)
    big = torch.randn(batch, steps, vocab, generator=g) * 50
    cases = [
        _case("no padding: plain cross-entropy", logits, no_pad, 0,
              "compared with F.cross_entropy averaged over all batch × steps positions; count is batch × steps"),
        _case("sentences of different lengths", logits, different_lengths(0), 0,
              "one average over the whole batch is wanted, not a mean per sentence, then over sentences "
              "(they differ here, where the lengths differ): the cross-entropy summed over the positions "
              "whose label is not pad_id, divided by their number"),
        _case("the padding index is not 0", logits, padded(other_pad), other_pad,
              "pad_id is not 0 here; compared with the cross-entropy summed over the positions whose "
              "label is not pad_id, divided by their number (one average over the whole batch, not per "
              "sentence)"),
        _case("a batch of padding only", logits, torch.full((batch, steps), other_pad), other_pad,
              "with no real token, return a mean of 0 (divide by max(count, 1))"),
        _case("large logits at padded positions", big, padded(0, empty_rows=True), 0,
              "compared with the cross-entropy summed over the positions whose label is not pad_id, "
              "divided by their number (one average over the whole batch, not per sentence); padded "
              "positions must add nothing, however large their logits"),
    ]
    return run_checks("masked_cross_entropy", fn, cases, verbose=verbose)


WORDS = ["je", "tu", "il", "elle", "suis", "es", "est", "chez", "moi", "toi", "lui", "calme", "grand",
         "petit", "ici", "là", ".", "!", "?"]


def _bleu_rows(g: torch.Generator) -> list[tuple[str, tuple, str]]:
    """The BLEU cases, every sentence drawn from ``g``: (name, (pred, label, k), hint)."""

    def words(n, vocab=WORDS):
        return [vocab[int(i)] for i in torch.randint(0, len(vocab), (n,), generator=g)]

    def text(ws):
        return " ".join(ws)

    label = [WORDS[int(i)] for i in torch.randperm(len(WORDS), generator=g)[:draw(g, 4, 7)]]  # distinct
    repeated = list(label)
    at = draw(g, 0, len(label) - 2)
    repeated[at + 1] = label[at]  # one word said twice in place of the next: same length, so no penalty
    short_label = words(draw(g, 5, 8))
    cut = draw(g, 2, len(short_label) - 2)
    long_label = words(draw(g, 3, 5))
    # the long prediction's extra words are not in its label: only the penalty matters there, not clipping
    long_tail = words(draw(g, 1, 3), [w for w in WORDS if w not in long_label])
    half = len(WORDS) // 2
    first, second = WORDS[:half], WORDS[half:]
    four_label = words(draw(g, 7, 9))
    four_pred = list(four_label)
    # one word changed, with at least four words after it: some 4-gram always matches, so p_4 > 0 and the
    # weights 1/2^n decide the score at every seed (a changed word in the middle of five words made p_4 = 0,
    # and any weights scored 0)
    four_pred[draw(g, 1, len(four_pred) - 5)] = "nous"
    one_label = words(draw(g, 2, 4))
    rows = [
        ("a perfect translation scores 1", (text(label), text(label), draw(g, 2, 4)),
         "every n-gram matches and the lengths agree"),
        ("a repeated word counts once (clipping)", (text(repeated), text(label), 2),
         "a reference n-gram can be matched only as often as it occurs there: count what is left"),
        ("a short prediction pays the brevity penalty", (text(short_label[:cut]), text(short_label), 2),
         "multiply by exp(min(0, 1 - len_label / len_pred))"),
        ("a long prediction pays no penalty", (text(long_label + long_tail), text(long_label), 2),
         "the penalty only lowers scores of predictions shorter than the label"),
        ("no common word scores 0", (text(words(draw(g, 2, 5), first)), text(words(draw(g, 2, 5), second)), 2),
         "p_1 = 0 makes the product 0"),
        ("k = 4 uses up to 4-grams, weighted 1/2^n", (text(four_pred), text(four_label), 4),
         "the exponent of p_n is 1 / 2**n"),
        ("a one-word prediction uses only unigrams", (one_label[0], text(one_label), 2),
         "n runs up to min(k, len(pred)): there is no bigram in a one-word prediction"),
    ]
    rows.append(("an empty prediction scores 0", ("", text(words(draw(g, 2, 5))), draw(g, 2, 4)),
                 "a prediction with no words has no n-grams: return 0 before dividing by its length"))
    for k in (2, 3, 4):
        rows.append((f"a partly right prediction, k = {k}", (*_partial_pair(g, WORDS, k), k),
                     "0 < p_n < 1 here: count each order's matches by hand and compare"))
    return rows


def _partial_pair(g: torch.Generator, words: list[str], k: int) -> tuple[str, str]:
    """A prediction and its label (distinct words, as long as each other): the prediction is the label with
    one word replaced by a word not in the label, outside a run of k words it keeps. So every p_n with
    n <= k is above 0 (that run matches) and below 1 (the new word matches nothing): the score lies between
    0 and 1 and depends on every order's count and weight, at every seed. With no repeated word and no
    change of length, clipping and the brevity penalty play no part."""
    order = [words[int(i)] for i in torch.randperm(len(words), generator=g)]
    size = draw(g, k + 1, min(9, len(words) - 1))
    label, spare = order[:size], order[size]
    start = draw(g, 0, size - k)  # label[start:start + k] stays as it is
    outside = [i for i in range(size) if not start <= i < start + k]
    pred = list(label)
    pred[outside[draw(g, 0, len(outside) - 1)]] = spare
    return " ".join(pred), " ".join(label)


NO_CLIPPING = ("every predicted n-gram found in the label was counted; clip the counts: an n-gram matches "
               "at most as often as the label has it, min(count in prediction, count in label)")


def _mistaken_bleu(pred_seq: str, label_seq: str, k: int, clip: bool = True, penalty: str = "min",
                   weights: str = "1/2^n", match_all: bool = False) -> float:
    """BLEU with one mistake switched on: ``clip=False`` counts every predicted n-gram found in the label,
    however often; ``match_all`` counts every predicted n-gram, found in the label or not (every p_n is 1);
    ``penalty`` "none" leaves the brevity penalty out, "always" drops its min(0, ·); ``weights`` "1/k" weighs
    every p_n alike."""
    parts, label = bleu_parts(pred_seq, label_seq, k), label_seq.split()
    ratio = 1.0 - len(label) / max(len(pred_seq.split()), 1)
    score = {"min": parts["penalty"], "none": 1.0, "always": math.exp(ratio)}[penalty]
    for order in parts["orders"]:
        n = order["n"]
        if match_all:
            precision = 1.0
        elif clip:
            precision = order["precision"]
        else:
            found = {" ".join(label[i:i + n]) for i in range(len(label) - n + 1)}
            precision = sum(gram in found for gram in order["grams"]) / len(order["grams"])
        score *= precision ** (order["weight"] if weights == "1/2^n" else 1.0 / k)
    return score


def _unclipped_bleu(pred_seq: str, label_seq: str, k: int) -> float:
    """The mistaken BLEU that counts every predicted n-gram found in the label, however often."""
    return _mistaken_bleu(pred_seq, label_seq, k, clip=False)


NO_PENALTY = ("the brevity penalty is missing: multiply by exp(min(0, 1 - len_label / len_pred)), which lowers "
              "the score of a prediction shorter than its label")
PENALTY_ALWAYS = ("the brevity penalty also changes a prediction longer than its label: exp(min(0, 1 - len_label "
                  "/ len_pred)) is 1 when the prediction is at least as long as the label")
WEIGHTS_1_K = "every p_n is weighted 1 / k: the exponent of p_n is 1 / 2^n"
# a fresh instructor's student (i15) counted a match wherever a label count was above -99: seven failed cases,
# each with its own hint, and no cause named
MATCH_ALL = ("every predicted n-gram was counted as a match, those the label does not have too, so every p_n is "
             "1 and only the brevity penalty is left: count an n-gram only while the label has it left to match")
# Common mistakes: (cause, keyword arguments of _mistaken_bleu that make it).
BLEU_MISTAKES = [(NO_CLIPPING, {"clip": False}), (MATCH_ALL, {"match_all": True}), (NO_PENALTY, {"penalty": "none"}),
                 (PENALTY_ALWAYS, {"penalty": "always"}), (WEIGHTS_1_K, {"weights": "1/k"})]


def check_bleu(fn, verbose: bool = True):
    """Check ``fn(pred_seq, label_seq, k) -> float``, BLEU as chapter 4 defines it; every sentence
    is drawn from the case seed."""
    rows = _bleu_rows(case_generator(8))

    def number(expected: float, args: tuple):
        inner = compare(expected, atol=1e-9, rtol=1e-6)
        # what each common mistake scores where it changes the score: the feedback names the mistake it matches
        mistaken = [(cause, score) for cause, switch in BLEU_MISTAKES
                    for score in [_mistaken_bleu(*args, **switch)]
                    if not math.isclose(score, expected, rel_tol=1e-6, abs_tol=1e-9)]

        def check(got):
            if isinstance(got, torch.Tensor) and got.numel() == 1:
                got = float(got)
            if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isfinite(got):
                return f"expected a finite number, got {got!r}"
            why = inner(float(got))
            cause = next((cause for cause, score in mistaken
                          if math.isclose(float(got), score, rel_tol=1e-6, abs_tol=1e-9)), None) if why else None
            return Diagnosis(f"{why} — {cause}", cause) if cause else why

        return check

    cases = [Case(name, args, number(reference_bleu(*args), args), hint=hint)
             for name, args, hint in rows]
    return run_checks("bleu", fn, cases, verbose=verbose)
