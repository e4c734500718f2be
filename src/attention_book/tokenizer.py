"""Text to token ids and back, by words or by characters, with the special tokens of pretraining.

:class:`Tokenizer` builds a :class:`attention_book.Vocab` with the reserved tokens
``<pad> <bos> <eos> <mask> <cls>`` (``MASK``, ``CLS``), the span sentinels
``<s0> <s1> …`` (:func:`sentinel_token`) and any task prefixes. Chapter 9 uses it
for all three pretraining objectives.
"""

from __future__ import annotations

import re
from typing import Sequence

import torch

from .checks import check_index
from .text import BOS, EOS, PAD, UNK, Vocab

__all__ = ["MASK", "CLS", "sentinel_token", "Tokenizer"]

MASK, CLS = "<mask>", "<cls>"


def sentinel_token(i: int) -> str:
    """Name of the ``i``-th span sentinel: ``<s0>``, ``<s1>``, … (T5 calls them ``<extra_id_i>``)."""
    if not isinstance(i, int) or i < 0:
        raise ValueError(f"sentinel index must be a non-negative int, got {i!r}")
    return f"<s{i}>"

_WORD_RE = re.compile(r"<[a-z0-9_]+>|[a-z]+(?:'[a-z]+)?|[.,;:!?]")
_CHAR_RE = re.compile(r"<[a-z0-9_]+>|[a-z .,;:!?']")


class Tokenizer:
    """Text ↔ token ids, by words or by characters, with special tokens.

    Text is lower-cased. At ``level='word'`` a token is a word (letters, one inner
    apostrophe allowed) or one of ``. , ; : ! ?``; at ``level='char'`` it is a
    letter, a space or one of those marks (runs of white space become one space).
    Anything else is dropped. A special token written in the text, such as
    ``<mask>``, stays one token at both levels.

    The vocabulary is :class:`attention_book.Vocab` (``<unk>`` has index 0) with the
    reserved tokens ``<pad> <bos> <eos> <mask> <cls>``, the sentinels
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
    def split(self, text: str) -> list[str]:
        """The tokens of ``text`` (before mapping them to ids)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        text = text.lower()
        if self.level == "word":
            return _WORD_RE.findall(text)
        return _CHAR_RE.findall(re.sub(r"\s+", " ", text))

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

