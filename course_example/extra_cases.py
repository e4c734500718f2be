"""Hidden cases an instructor adds to the book's own (course.example.toml: extra_cases).

The grader calls ``cases(name, seed)`` for every assignment it grades; return a list of
``Case`` for the assignments you add to (an empty list for the others). Draw every input
from ``seed``: each student gets their own seed, and a regrade gets the same one. ``label``
is what the student's feedback shows for a failed hidden case, so it must not give the
inputs away.
"""

import torch

from attention_book.assignments import Case, compare


def _window_softmax(scores, valid_lens, window):
    """Causal sliding-window attention weights over padded sequences, written another way: -inf, then 0/0 -> 0."""
    n = scores.shape[-1]
    distance = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # query position - key position
    keep = (distance >= 0) & (distance < window) & (torch.arange(n) < valid_lens[:, None, None])
    weights = torch.softmax(scores.double().masked_fill(~keep, float("-inf")), dim=-1)
    return weights.nan_to_num(0.0).to(scores.dtype)


def cases(name: str, seed: int) -> list[Case]:
    if name != "masked_softmax":
        return []
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, 7, 7, generator=g) * 40
    valid_lens = torch.randint(2, 8, (3,), generator=g)
    window = int(torch.randint(2, 5, (1,), generator=g))
    expected = _window_softmax(scores, valid_lens, window)
    return [Case("a batch of three with large scores", (scores, valid_lens, window), compare(expected),
                 label="large scores and a short window",
                 hint="build the mask from the positions (causal, the window, the padding), then the softmax")]
