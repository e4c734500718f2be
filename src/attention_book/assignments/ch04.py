"""Chapter 4 checkers: the masked cross-entropy of sequence-to-sequence training."""

from __future__ import annotations

import torch

from ..seq2seq import masked_cross_entropy as reference_masked_cross_entropy
from . import Case, case_seed, run_checks

__all__ = ["check_masked_cross_entropy", "reference_masked_cross_entropy"]


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
