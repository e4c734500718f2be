"""Hidden cases an instructor adds to the book's own (course.example.toml: extra_cases).

The grader calls ``cases(name, seed)`` for every assignment it grades; return a list of
``Case`` for the assignments you add to (an empty list for the others). Draw every input
from ``seed``: each student gets their own seed, and a regrade gets the same one. ``label``
is what the student's feedback shows for a failed hidden case, so it must not give the
inputs away.
"""

import torch

from attention_book.assignments import Case, compare


def _softmax_over_allowed(scores, mask, temperature):
    weights = torch.softmax((scores.double() / temperature).masked_fill(~mask, float("-inf")), dim=-1)
    return weights.nan_to_num(0.0).to(scores.dtype)


def cases(name: str, seed: int) -> list[Case]:
    if name != "masked_softmax":
        return []
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, 4, 7, generator=g) * 4
    mask = torch.rand(3, 1, 7, generator=g) < 0.5
    mask[..., 0] = True  # at least one allowed key in every row
    temperature = 0.5 + float(torch.rand(1, generator=g))
    expected = _softmax_over_allowed(scores, mask.expand(scores.shape), temperature)
    return [Case("a batch of three with a low temperature", (scores, mask, temperature), compare(expected),
                 label="a low temperature and a shared mask",
                 hint="divide by the temperature, mask, then take the softmax over the keys")]
