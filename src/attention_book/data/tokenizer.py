"""Text to token ids and back, by words or by characters, with the special tokens of pretraining.

:class:`Tokenizer` builds a :class:`attention_book.data.text.Vocab` with the reserved
tokens ``<pad> <bos> <eos> <mask> <cls>`` (``MASK``, ``CLS``), the span sentinels
``<s0> <s1> …`` (:func:`sentinel_token`) and any task prefixes. Chapter 9 uses it
for all three pretraining objectives.
"""

from __future__ import annotations

import collections
import functools
import re
import unicodedata
from typing import Sequence

import torch

from ..core.checks import check_index
from .text import BOS, EOS, PAD, UNK, Vocab

__all__ = ["MASK", "CLS", "sentinel_token", "Tokenizer"]

MASK, CLS = "<mask>", "<cls>"


def sentinel_token(i: int) -> str:
    """Name of the ``i``-th span sentinel: ``<s0>``, ``<s1>``, … (T5 calls them ``<extra_id_i>``)."""
    if not isinstance(i, int) or i < 0:
        raise ValueError(f"sentinel index must be a non-negative int, got {i!r}")
    return f"<s{i}>"


_SPECIAL = r"<[a-z0-9_]+>"
_PUNCTUATION = ".,;:!?"  # the punctuation that makes tokens of its own


def _ranges(code_points: list[int]) -> str:
    """A regular-expression character class body listing ``code_points`` (ascending) as ranges."""
    parts, start = [], None
    for i, cp in enumerate(code_points):
        if start is None:
            start = cp
        if i + 1 == len(code_points) or code_points[i + 1] != cp + 1:
            parts.append(re.escape(chr(start)) + ("" if cp == start else "-" + re.escape(chr(cp))))
            start = None
    return "".join(parts)


def _token_patterns(letter: str, mark: str | None) -> tuple[re.Pattern, re.Pattern]:
    """The word and character patterns, given what a letter is and what a combining mark is."""
    letter_or_mark = letter if mark is None else f"(?:{letter}|{mark})"
    run = f"{letter}{letter_or_mark}*"
    word = re.compile(f"{_SPECIAL}|{run}(?:'{run})?|[{re.escape(_PUNCTUATION)}]")
    char = re.compile(f"{_SPECIAL}|{letter}{'' if mark is None else mark + '*'}|[ {re.escape(_PUNCTUATION)}']")
    return word, char


@functools.cache
def _patterns(ascii_only: bool) -> tuple[re.Pattern, re.Pattern]:
    """The word and character patterns, built once from this Python's Unicode database.

    A *letter* is a character of a Unicode letter category (L*), followed by any combining
    marks (M*: accents that did not compose, vowel signs, the dot of a lower-case ``İ``).
    Python's ``[^\\W\\d_]`` is letters plus the numerals of categories Nl and No, so those
    are left out. Marks and those numerals live only in planes 0, 1 and 14. ``re`` looks a
    character below U+10000 up in a bitmap but tries ranges above it one by one, so those
    are tried only for a character up there. ``ascii_only``: the same rule for ASCII text
    (after case folding, ``[a-z]``), about five times faster on *The Time Machine*.
    """
    if ascii_only:
        return _token_patterns("[a-z]", None)
    marks, numerals = [], []
    for cp in (*range(0x20000), *range(0xE0000, 0xE1000)):
        category = unicodedata.category(chr(cp))
        if category[0] == "M":
            marks.append(cp)
        elif category in ("Nl", "No"):
            numerals.append(cp)
    astral = "\U00010000-\U0010ffff"

    def low(cps: list[int]) -> str:
        return _ranges([cp for cp in cps if cp < 0x10000])

    def high(cps: list[int]) -> str:
        return _ranges([cp for cp in cps if cp >= 0x10000])

    astral_letter = f"(?![{high(numerals)}])[^\\W\\d_]"
    letter = f"(?:[^\\W\\d_{low(numerals)}{astral}]|(?=[{astral}]){astral_letter})"
    mark = f"(?:[{low(marks)}]|(?=[{astral}])[{high(marks)}])"
    return _token_patterns(letter, mark)


class Tokenizer:
    """Text ↔ token ids, by words or by characters, with special tokens.

    Before splitting, text is normalised (:meth:`normalize`): Unicode NFKC (so ``ﬁ`` is
    ``fi``, full-width ``Ａ`` is ``A``, ``é`` written as ``e`` plus an accent is one
    character), then lower-cased with ``str.casefold`` (``Straße`` → ``strasse``,
    ``İ`` → ``i̇``), then NFKC again; a typographic apostrophe ``’`` becomes ``'``.

    A *letter* is any Unicode letter (``é``, ``ï``, ``ß``, Greek, Cyrillic, Chinese…)
    together with the combining marks that follow it. At ``level='word'`` a token is
    a run of letters (one inner apostrophe allowed: ``didn't``) or one of
    ``. , ; : ! ?``; scripts written without spaces, such as Chinese, give one token per
    run. At ``level='char'`` a token is a letter, a space (every run of white space
    becomes one) or one of those marks or ``'``. A special token written in the text,
    such as ``<mask>``, stays one token at both levels.

    Everything else is **dropped**: digits, other punctuation and symbols (``—``, ``"``,
    ``(``, ``#``, emoji), an apostrophe that is not inside a word. :meth:`dropped` counts
    what a text loses, so nothing goes missing unseen. On ASCII text this gives exactly
    the tokens of an ``[a-z]`` rule (*The Time Machine* is ASCII).

    The vocabulary is :class:`attention_book.data.text.Vocab` (``<unk>`` has index 0) with
    the reserved tokens ``<pad> <bos> <eos> <mask> <cls>``, the sentinels
    ``<s0> … <s{num_sentinels-1}>``, any ``extra_tokens`` (task prefixes such as
    ``<reverse>``), then every token seen at least ``min_freq`` times in ``text``.
    """

    def __init__(self, text: str, level: str = "word", min_freq: int = 1, num_sentinels: int = 8,
                 extra_tokens: Sequence[str] = ()):
        if level not in ("word", "char"):
            raise ValueError(f"level must be 'word' or 'char', got {level!r}")
        if not isinstance(num_sentinels, int) or num_sentinels < 1:
            raise ValueError(f"num_sentinels must be a positive int, got {num_sentinels!r}")
        for t in extra_tokens:
            if not re.fullmatch(r"<[a-z0-9_]+>", t):
                raise ValueError(f"extra tokens must look like '<name>' (lower-case letters, digits, _), got {t!r}")
        self.level = level
        self.sentinels = tuple(sentinel_token(i) for i in range(num_sentinels))
        self.extra_tokens = tuple(extra_tokens)
        reserved = (PAD, BOS, EOS, MASK, CLS) + self.sentinels + self.extra_tokens
        self.vocab = Vocab(self.split(text), min_freq=min_freq, reserved_tokens=reserved)
        self.special_tokens = (UNK,) + reserved
        self.special_ids = tuple(self.vocab[t] for t in self.special_tokens)
        ids = dict(zip(self.special_tokens, self.special_ids))
        self.pad_id, self.unk_id, self.bos_id, self.eos_id = ids[PAD], ids[UNK], ids[BOS], ids[EOS]
        self.mask_id, self.cls_id = ids[MASK], ids[CLS]

    # -- splitting, encoding, decoding -------------------------------------------------
    @staticmethod
    def normalize(text: str) -> str:
        """``text`` as the tokenizer reads it: NFKC, ``str.casefold``, NFKC again, ``’`` as ``'``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        folded = unicodedata.normalize("NFKC", text).casefold()
        return unicodedata.normalize("NFKC", folded).replace("\u2019", "'")

    def _pattern(self, text: str) -> tuple[str, re.Pattern]:
        """``text`` normalised (white space runs made one space at ``level='char'``) and the pattern for it."""
        text = self.normalize(text)
        word, char = _patterns(text.isascii())
        if self.level == "word":
            return text, word
        return re.sub(r"\s+", " ", text), char

    def split(self, text: str) -> list[str]:
        """The tokens of ``text`` (before mapping them to ids)."""
        text, pattern = self._pattern(text)
        return pattern.findall(text)

    def dropped(self, text: str) -> collections.Counter:
        """What splitting ``text`` leaves out: each dropped character (after :meth:`normalize`)
        with how often, white space apart (it separates words; at ``level='char'`` it is a
        space token). Empty when the tokens keep everything::

            Tokenizer("a").dropped("Room 101 — café!")  # Counter({'1': 2, '0': 1, '—': 1})
        """
        text, pattern = self._pattern(text)
        return collections.Counter(c for c in pattern.sub(" ", text) if not c.isspace())

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; tokens outside the vocabulary become ``<unk>``."""
        return self.vocab[self.split(text)]

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of token ids (a list or a 1-D tensor); ``skip_special`` drops ``<pad>``, ``<bos>``, …

        Every id must lie in ``[0, vocab_size)``; another one (a negative id included) raises
        ``ValueError`` naming it and the vocabulary size.
        """
        if isinstance(ids, torch.Tensor):
            if ids.dim() > 1:
                raise ValueError(f"decode takes one sequence (1-D), got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        size = len(self.vocab)
        ids = [check_index("token id", i, size, within="the vocabulary") for i in ids]
        special = set(self.special_ids) - {self.unk_id}
        tokens = [self.vocab.to_tokens(i) for i in ids if not (skip_special and i in special)]
        if self.level == "char":
            return "".join(t if len(t) == 1 else f"{t}" for t in tokens)
        text = " ".join(tokens)
        return re.sub(r" ([.,;:!?])", r"\1", text)

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def id(self, token: str) -> int:
        """Id of one token; raises ``ValueError`` for a special token that does not exist."""
        if token.startswith("<") and token not in self.vocab.token_to_idx:
            raise ValueError(f"{token!r} is not a token of this tokenizer; specials are {self.special_tokens}")
        return self.vocab[token]

    @property
    def sentinel_ids(self) -> tuple[int, ...]:
        return tuple(self.vocab[t] for t in self.sentinels)

    @property
    def ordinary_ids(self) -> torch.Tensor:
        """Ids of the ordinary tokens (everything except the special ones), ascending."""
        special = set(self.special_ids)
        return torch.tensor([i for i in range(len(self.vocab)) if i not in special], dtype=torch.long)

    def __repr__(self) -> str:
        return (f"Tokenizer(level={self.level!r}, vocab_size={self.vocab_size}, "
                f"specials={len(self.special_tokens)}, sentinels={len(self.sentinels)})")

