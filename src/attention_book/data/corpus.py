"""The pretraining corpus: *The Time Machine*, tokenised and split, or a corpus the code writes itself.

:func:`load_corpus` reads the text through the data registry and falls back,
visibly, to :func:`synthetic_corpus` when it cannot be had; the result is a
:class:`Corpus` (text, :class:`~attention_book.data.tokenizer.Tokenizer`, training
and validation token streams).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

import torch

from ..core.config import resolve_seed
from .registry import DataUnavailableError, fetch, read_utf8
from .tokenizer import Tokenizer

__all__ = ["Corpus", "synthetic_corpus", "load_corpus"]


_NAMES = ["the traveller", "the doctor", "the editor", "weena", "the psychologist", "the young man",
          "the medical man", "filby"]
_VERBS = ["saw", "watched", "followed", "feared", "found", "remembered", "touched", "heard"]
_THINGS = ["the machine", "the sphinx", "the morlocks", "the little people", "the white flowers",
           "the green porcelain", "the dark well", "the great hall", "the bronze doors", "the red sun"]
_PLACES = ["in the garden", "under the moon", "near the river", "inside the museum", "at the lamp",
           "by the fire", "on the hill", "in the laboratory"]
_WHEN = ["at night", "in the morning", "after dinner", "before the dawn", "for a time", "again"]


def synthetic_corpus(num_sentences: int = 4000, seed: int | None = None) -> str:
    """A corpus the code writes itself, used when *The Time Machine* cannot be had.

    Sentences such as ``the doctor watched the dark well in the garden at night .``
    come from a small grammar with a few dozen words, so the three models learn it
    quickly; it is not natural text and the chapter says so when it uses it.
    ``seed`` (``None``: the book's seed) picks the sentences.
    """
    if num_sentences < 1:
        raise ValueError(f"num_sentences must be positive, got {num_sentences}")
    rng = random.Random(resolve_seed(seed))
    lines = []
    for _ in range(num_sentences):
        who, verb, what = rng.choice(_NAMES), rng.choice(_VERBS), rng.choice(_THINGS)
        parts = [who, verb, what]
        if rng.random() < 0.6:
            parts.append(rng.choice(_PLACES))
        if rng.random() < 0.4:
            parts.append(rng.choice(_WHEN))
        if rng.random() < 0.3:
            parts += ["and", rng.choice(["was afraid", "laughed", "said nothing", "went on"])]
        lines.append(" ".join(parts) + " .")
    return "\n".join(lines)


@dataclass
class Corpus:
    """A tokenised corpus split into training and validation token streams."""

    text: str
    source: str
    tokenizer: Tokenizer
    train_ids: torch.Tensor
    val_ids: torch.Tensor
    is_fallback: bool = False

    def __repr__(self) -> str:
        return (f"Corpus({self.source}; {len(self.train_ids)} training + {len(self.val_ids)} validation "
                f"tokens, {self.tokenizer!r})")


def _strip_title(text: str) -> str:
    # d2l's file starts with the title line; the story starts at chapter "I".
    marker = re.search(r"\n\s*I\s*\n", text)
    return text[marker.end():] if marker and marker.start() < 500 else text


def load_corpus(level: str = "word", min_freq: int = 3, val_fraction: float = 0.1, num_sentinels: int = 8,
                extra_tokens: Sequence[str] = (), text: str | None = None, verbose: bool = True) -> Corpus:
    """*The Time Machine*, tokenised, split into a training and a validation stream.

    The text comes through the data registry
    (``attention_book.data.registry.fetch('time-machine')``, a SHA-1-verified copy in
    the data directory or a download). When it cannot be had, a message says so and
    :func:`synthetic_corpus` is used (a file that is there but not UTF-8 raises
    ``ValueError`` naming it; a byte-order mark is dropped). ``text`` overrides both.
    The tokenizer's vocabulary is built from the training part only (the
    first ``1 - val_fraction`` of the text); the validation part is the rest.
    """
    if not 0.0 < val_fraction < 0.5:
        raise ValueError(f"val_fraction must lie in (0, 0.5), got {val_fraction}")
    fallback = False
    if text is not None:
        source = "text given by the caller"
    else:
        try:
            path = fetch("time-machine", progress=verbose)
            text = _strip_title(read_utf8(path))
            source = f"The Time Machine ({path.name}, sha1 verified)"
        except (DataUnavailableError, OSError) as err:
            text = synthetic_corpus()
            fallback = True
            reason = str(err).splitlines()[0]
            source = f"GENERATED fallback corpus (The Time Machine unavailable: {reason})"
    cut = int(len(text) * (1 - val_fraction))
    cut = text.rfind(" ", 0, cut) if text.rfind(" ", 0, cut) > 0 else cut
    train_text, val_text = text[:cut], text[cut:]
    tok = Tokenizer(train_text, level=level, min_freq=min_freq, num_sentinels=num_sentinels,
                    extra_tokens=extra_tokens)
    train_ids = torch.tensor(tok.encode(train_text), dtype=torch.long)
    val_ids = torch.tensor(tok.encode(val_text), dtype=torch.long)
    corpus = Corpus(text, source, tok, train_ids, val_ids, fallback)
    if verbose:
        unk = float((train_ids == tok.unk_id).float().mean())
        print(f"Corpus: {source}\n  {len(train_ids):,} training and {len(val_ids):,} validation tokens "
              f"({level}s)\n  vocabulary {tok.vocab_size:,} (min_freq={min_freq}; {unk:.1%} of training "
              f"tokens are <unk>)")
    return corpus

