"""Pretraining in miniature: encoder-only (BERT), encoder–decoder (T5), decoder-only (GPT).

Everything the chapter on large-scale pretraining needs, at a size that trains in
seconds on a CPU:

* text: a :class:`Tokenizer` (words or characters) with the special tokens
  ``<pad> <unk> <bos> <eos> <mask> <cls>`` and span sentinels ``<s0> <s1> …``;
  :func:`load_corpus` reads *The Time Machine* through the data registry and falls
  back, visibly, to a corpus the code writes itself;
* the three self-supervised objectives: :func:`mask_for_mlm` (BERT's 15 % /
  80-10-10 masking), :func:`corrupt_spans` (T5's span corruption, undone by
  :func:`restore_spans`) and causal language modelling (:func:`clm_batch`);
* the three models, built from the Transformer blocks of chapter 7:
  :class:`EncoderOnlyLM`, :class:`EncoderDecoderLM`, :class:`DecoderOnlyLM`. Each
  exposes the boolean attention masks it really uses (``attention_masks``), which
  :func:`attention_pattern_figure` draws;
* sampling (:func:`generate`, temperature and top-k, reproducible under a seed),
  the unigram baseline every loss is compared with, and a small scaling study
  (:func:`scaling_experiment`, :func:`fit_power_law`, :func:`scaling_figure`).

Masks follow the book's convention: boolean, ``True`` = may attend. Label tensors
use ``IGNORE = -100`` (PyTorch's ``ignore_index``) for positions without a target.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .attention import MultiHeadAttention, causal_mask, record_attention
from .config import resolve_seed
from .data import DataUnavailableError, fetch
from .transformer import TransformerDecoder, TransformerEncoder, _check_ids
from .text import BOS, EOS, PAD, UNK, Vocab

__all__ = [
    "MASK", "CLS", "IGNORE", "sentinel_token",
    "Tokenizer", "Corpus", "synthetic_corpus", "load_corpus",
    "mask_for_mlm", "corrupt_spans", "restore_spans", "span_lengths",
    "random_windows", "mlm_batch", "span_batch", "clm_batch", "Batches",
    "unigram_cross_entropy", "unigram_baseline",
    "mlm_loss", "seq2seq_loss", "clm_loss", "classification_loss", "evaluate_loss", "classification_accuracy",
    "masked_accuracy", "fill_masks", "span_loss_parts",
    "order_task_batch", "replaced_task_batch", "TEXT_TASKS", "text_to_text_batch", "greedy_decode", "exact_match",
    "next_word_accuracy", "few_shot_prompts",
    "next_token_distribution", "generate", "sampling_figure",
    "EncoderOnlyLM", "EncoderDecoderLM", "DecoderOnlyLM",
    "attention_pattern_figure",
    "PowerLaw", "fit_power_law", "non_embedding_parameters", "ScalingRun", "scaling_experiment", "scaling_figure",
]

MASK, CLS = "<mask>", "<cls>"
IGNORE = -100  # label of positions that carry no target (PyTorch's default ignore_index)


def sentinel_token(i: int) -> str:
    """Name of the ``i``-th span sentinel: ``<s0>``, ``<s1>``, … (T5 calls them ``<extra_id_i>``)."""
    if not isinstance(i, int) or i < 0:
        raise ValueError(f"sentinel index must be a non-negative int, got {i!r}")
    return f"<s{i}>"


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------

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
        """Text of token ids (a list or a 1-D tensor); ``skip_special`` drops ``<pad>``, ``<bos>``, …"""
        if isinstance(ids, torch.Tensor):
            if ids.dim() > 1:
                raise ValueError(f"decode takes one sequence (1-D), got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        special = set(self.special_ids) - {self.unk_id}
        tokens = [self.vocab.to_tokens(int(i)) for i in ids if not (skip_special and int(i) in special)]
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


# --------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------

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

    The text comes through the data registry (``ab.fetch('time-machine')``, a
    SHA-1-verified copy in the data directory or a download). When it cannot be
    had, a message says so and :func:`synthetic_corpus` is used. ``text`` overrides
    both. The tokenizer's vocabulary is built from the training part only (the
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
            text = _strip_title(path.read_text(encoding="utf-8"))
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
              f"({level}s), vocabulary {tok.vocab_size:,} (min_freq={min_freq}; {unk:.1%} of training "
              f"tokens are <unk>)")
    return corpus


# --------------------------------------------------------------------------------------
# The three objectives
# --------------------------------------------------------------------------------------

def _as_long_tensor(tokens, name: str = "tokens") -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor):
        tokens = torch.as_tensor(tokens)
    if tokens.dtype in (torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.bool):
        raise ValueError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
    return tokens.long()


def mask_for_mlm(tokens, mask_id: int, vocab_size: int, special_ids: Sequence[int] = (), select_prob: float = 0.15,
                 generator: torch.Generator | None = None, replace_ids: torch.Tensor | None = None):
    """BERT's masked-language-model corruption of a batch of token ids.

    Each token that is not special (``special_ids``: ``<pad>``, ``<cls>``, …) is
    *selected* independently with probability ``select_prob``. A selected token is
    replaced by ``mask_id`` with probability 0.8, by a random ordinary token with
    probability 0.1 (drawn uniformly from ``replace_ids``, by default every id in
    ``[0, vocab_size)`` that is not special), and left as it is with probability
    0.1. Returns ``(inputs, labels)``, both shaped like ``tokens``; ``labels`` holds
    the original id at selected positions and ``IGNORE`` (-100) elsewhere, so the
    loss is computed on the selected tokens only.
    """
    tokens = _as_long_tensor(tokens)
    if not 0.0 <= select_prob <= 1.0:
        raise ValueError(f"select_prob must lie in [0, 1], got {select_prob}")
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"mask_id must lie in [0, vocab_size={vocab_size}), got {mask_id}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"tokens must lie in [0, vocab_size={vocab_size}), got values from "
                         f"{int(tokens.min())} to {int(tokens.max())}")
    special = torch.as_tensor(list(special_ids) + [mask_id], dtype=torch.long, device=tokens.device)
    if replace_ids is None:
        keep = torch.ones(vocab_size, dtype=torch.bool, device=tokens.device)
        keep[special] = False
        replace_ids = torch.arange(vocab_size, device=tokens.device)[keep]
    if len(replace_ids) == 0:
        raise ValueError("there are no ordinary tokens to draw random replacements from")
    dev = tokens.device
    eligible = ~torch.isin(tokens, special)
    u = torch.rand(tokens.shape, generator=generator, device=dev)
    selected = eligible & (u < select_prob)
    action = torch.rand(tokens.shape, generator=generator, device=dev)
    random_pick = replace_ids[torch.randint(len(replace_ids), tokens.shape, generator=generator, device=dev)]
    inputs = torch.where(selected & (action < 0.8), torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(selected & (action >= 0.8) & (action < 0.9), random_pick, inputs)
    labels = torch.where(selected, tokens, torch.full_like(tokens, IGNORE))
    return inputs, labels


def span_lengths(length: int, noise_density: float = 0.15, mean_span_length: float = 3.0) -> tuple[int, int]:
    """How many tokens of a ``length``-token sequence span corruption hides, and in how many spans.

    As in T5: ``round(length * noise_density)`` noise tokens (at least 1, and at
    least one token kept), split into ``round(noise / mean_span_length)`` spans (at
    least 1). Because both numbers depend only on ``length``, every sequence of a
    batch has inputs and targets of the same lengths.
    """
    if length < 2:
        raise ValueError(f"span corruption needs sequences of at least 2 tokens, got length {length}")
    if not 0.0 < noise_density < 1.0:
        raise ValueError(f"noise_density must lie in (0, 1), got {noise_density}")
    if mean_span_length < 1:
        raise ValueError(f"mean_span_length must be at least 1, got {mean_span_length}")
    num_noise = min(max(int(round(length * noise_density)), 1), length - 1)
    num_spans = max(int(round(num_noise / mean_span_length)), 1)
    num_spans = min(num_spans, num_noise, length - num_noise)
    return num_noise, num_spans


def _random_partition(total: int, parts: int, rng: torch.Generator | None) -> list[int]:
    """``total`` split into ``parts`` positive integers, uniformly over all such splits."""
    cuts = torch.randperm(total - 1, generator=rng)[: parts - 1].sort().values + 1
    edges = [0] + cuts.tolist() + [total]
    return [b - a for a, b in zip(edges[:-1], edges[1:])]


def corrupt_spans(tokens, sentinel_ids: Sequence[int], noise_density: float = 0.15, mean_span_length: float = 3.0,
                  generator: torch.Generator | None = None) -> tuple[list[int], list[int]]:
    """T5's span corruption of one sequence of token ids.

    Hides ``num_noise`` tokens in ``num_spans`` runs (see :func:`span_lengths`),
    never two runs back to back. The input keeps the other tokens and replaces the
    ``i``-th hidden run by sentinel ``i``; the target lists each sentinel followed by
    the run it hides, and ends with one more sentinel marking the end. For
    ``I love this red car`` with ``love`` and ``red car`` hidden: input
    ``I <s0> this <s1>``, target ``<s0> love <s1> red car <s2>``.
    Returns ``(inputs, targets)`` as lists of ids; :func:`restore_spans` undoes it.
    """
    ids = _as_long_tensor(tokens).tolist()
    if isinstance(ids, int) or (ids and isinstance(ids[0], list)):
        raise ValueError("corrupt_spans takes one sequence (a 1-D list or tensor of ids); map it over a batch")
    num_noise, num_spans = span_lengths(len(ids), noise_density, mean_span_length)
    if num_spans + 1 > len(sentinel_ids):
        raise ValueError(f"{num_spans} spans need {num_spans + 1} sentinels, but only {len(sentinel_ids)} were given; "
                         "build the tokenizer with more num_sentinels or use shorter sequences")
    noise_lens = _random_partition(num_noise, num_spans, generator)
    # kept runs: one before each span and one after the last; the inner ones are non-empty
    # (so two spans never touch), the outer two may be empty.
    keep_lens = _random_partition(len(ids) - num_noise + 2, num_spans + 1, generator)
    keep_lens[0] -= 1
    keep_lens[-1] -= 1
    inputs, targets, pos = [], [], 0
    for i in range(num_spans):
        inputs += ids[pos:pos + keep_lens[i]]
        pos += keep_lens[i]
        inputs.append(int(sentinel_ids[i]))
        targets.append(int(sentinel_ids[i]))
        targets += ids[pos:pos + noise_lens[i]]
        pos += noise_lens[i]
    inputs += ids[pos:]
    targets.append(int(sentinel_ids[num_spans]))
    return inputs, targets


def restore_spans(inputs: Sequence[int], targets: Sequence[int], sentinel_ids: Sequence[int]) -> list[int]:
    """Undo :func:`corrupt_spans`: put each hidden run back in place of its sentinel.

    Works on a model's prediction too: a sentinel the target never mentions is
    dropped, and text after the target's last sentinel is ignored.
    """
    inputs = _as_long_tensor(inputs).tolist()
    targets = _as_long_tensor(targets).tolist()
    sentinels = {int(s): k for k, s in enumerate(sentinel_ids)}
    runs: dict[int, list[int]] = {}
    current = None
    for t in targets:
        if t in sentinels:
            current = sentinels[t]
            runs.setdefault(current, [])
        elif current is not None:
            runs[current].append(t)
    out: list[int] = []
    for t in inputs:
        out += runs.get(sentinels[t], []) if t in sentinels else [t]
    return out


# --------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------

def random_windows(ids: torch.Tensor, batch_size: int, length: int, generator: torch.Generator | None = None
                   ) -> torch.Tensor:
    """``batch_size`` windows of ``length`` consecutive ids from a token stream, at random offsets."""
    ids = _as_long_tensor(ids, "ids")
    if ids.dim() != 1:
        raise ValueError(f"ids must be a 1-D token stream, got shape {tuple(ids.shape)}")
    if length < 1 or batch_size < 1:
        raise ValueError(f"batch_size and length must be positive, got {batch_size} and {length}")
    if len(ids) < length:
        raise ValueError(f"the stream has {len(ids)} tokens, fewer than the window length {length}")
    starts = torch.randint(0, len(ids) - length + 1, (batch_size,), generator=generator)
    return ids[starts[:, None] + torch.arange(length)]


def mlm_batch(ids: torch.Tensor, tok: Tokenizer, batch_size: int, seq_len: int,
              generator: torch.Generator | None = None, select_prob: float = 0.15):
    """A masked-LM batch: ``<cls>`` + ``seq_len - 1`` tokens, corrupted by :func:`mask_for_mlm`.

    Returns ``(inputs, labels)`` of shape (batch_size, seq_len).
    """
    windows = random_windows(ids, batch_size, seq_len - 1, generator)
    seqs = torch.cat([torch.full((batch_size, 1), tok.cls_id), windows], dim=1)
    return mask_for_mlm(seqs, tok.mask_id, tok.vocab_size, tok.special_ids, select_prob, generator,
                        replace_ids=tok.ordinary_ids)


def span_batch(ids: torch.Tensor, tok: Tokenizer, batch_size: int, seq_len: int,
               generator: torch.Generator | None = None, noise_density: float = 0.15,
               mean_span_length: float = 3.0, prefix: Sequence[int] = ()):
    """A span-corruption batch for an encoder–decoder.

    Each window of ``seq_len`` tokens is corrupted by :func:`corrupt_spans`.
    Returns ``(enc_inputs, dec_inputs, labels)``: the corrupted text (after the
    optional task ``prefix`` ids), ``<bos>`` + target, and target + ``<eos>``.
    """
    windows = random_windows(ids, batch_size, seq_len, generator)
    enc, dec, lab = [], [], []
    for w in windows:
        x, y = corrupt_spans(w, tok.sentinel_ids, noise_density, mean_span_length, generator)
        enc.append(list(prefix) + x)
        dec.append([tok.bos_id] + y)
        lab.append(y + [tok.eos_id])
    return torch.tensor(enc), torch.tensor(dec), torch.tensor(lab)


def clm_batch(ids: torch.Tensor, tok: Tokenizer, batch_size: int, seq_len: int,
              generator: torch.Generator | None = None):
    """A causal-LM batch: inputs ``<bos> w1 … w_{n-1}``, labels ``w1 … w_n`` (the inputs shifted by one)."""
    windows = random_windows(ids, batch_size, seq_len, generator)
    inputs = torch.cat([torch.full((batch_size, 1), tok.bos_id), windows[:, :-1]], dim=1)
    return inputs, windows


class Batches:
    """``steps`` fresh batches per pass, made by ``make_batch(generator)``.

    Training sees new random windows (and new masks) every epoch; the generator is
    seeded once from ``seed`` (``None``: the book's seed), so a run repeats exactly.
    ``fixed=True`` makes the same batches on every pass (for validation).
    """

    def __init__(self, make_batch: Callable[[torch.Generator], object], steps: int, seed: int | None = None,
                 fixed: bool = False):
        if steps < 1:
            raise ValueError(f"steps must be positive, got {steps}")
        seed = resolve_seed(seed)
        self.make_batch, self.steps, self.seed, self.fixed = make_batch, steps, seed, fixed
        self._gen = torch.Generator().manual_seed(seed)
        self._cache = None

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator:
        if self.fixed:
            if self._cache is None:
                g = torch.Generator().manual_seed(self.seed)
                self._cache = [self.make_batch(g) for _ in range(self.steps)]
            return iter(self._cache)
        return (self.make_batch(self._gen) for _ in range(self.steps))

    def __getitem__(self, i: int):
        """The ``i``-th batch of a ``fixed`` set (validation batches)."""
        if not self.fixed:
            raise TypeError("only fixed Batches can be indexed; training batches are drawn afresh")
        return list(iter(self))[i]


# --------------------------------------------------------------------------------------
# The baseline every loss is compared with
# --------------------------------------------------------------------------------------

def unigram_cross_entropy(train_targets, eval_targets, vocab_size: int, smoothing: float = 1.0) -> float:
    """Cross-entropy (nats per token) of a unigram model on ``eval_targets``.

    The unigram model predicts every target with the same distribution, the
    token frequencies of ``train_targets`` (add-``smoothing`` counts so no token
    has probability zero). Positions equal to ``IGNORE`` are skipped in both.
    A model that has learnt anything about context must beat this number.
    """
    tr = _as_long_tensor(train_targets, "train_targets").flatten()
    ev = _as_long_tensor(eval_targets, "eval_targets").flatten()
    tr, ev = tr[tr != IGNORE], ev[ev != IGNORE]
    if len(ev) == 0:
        raise ValueError("eval_targets holds no targets (all are IGNORE or it is empty)")
    if smoothing < 0 or (smoothing == 0 and len(tr) == 0):
        raise ValueError(f"smoothing must be positive (or zero with training targets), got {smoothing}")
    counts = torch.bincount(tr, minlength=vocab_size).double() + smoothing
    if len(counts) > vocab_size:
        raise ValueError(f"train_targets has ids up to {len(counts) - 1}, outside vocab_size={vocab_size}")
    log_p = torch.log(counts / counts.sum())
    return float(-log_p[ev].mean())


# --------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------

def next_token_distribution(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None
                            ) -> torch.Tensor:
    """Probabilities to sample the next token from, given the last position's ``logits`` (..., vocab).

    ``temperature`` divides the logits (below 1 sharpens, above 1 flattens; 0
    means greedy: all mass on the arg-max). ``top_k`` keeps only the ``k`` most
    likely tokens and renormalises (``None`` or 0 keeps all).
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point tensor of shape (..., vocab)")
    if temperature < 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    vocab = logits.shape[-1]
    if top_k is not None and (not isinstance(top_k, int) or top_k < 0):
        raise ValueError(f"top_k must be None or an int >= 0, got {top_k!r}")
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), vocab).to(logits.dtype)
    scaled = logits / temperature
    if top_k and top_k < vocab:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return F.softmax(scaled, dim=-1)


def _ban_specials(logits: torch.Tensor, tok: Tokenizer) -> torch.Tensor:
    banned = [i for i in tok.special_ids if i != tok.eos_id]
    out = logits.clone()
    out[..., banned] = float("-inf")
    return out


@torch.no_grad()
def generate(model: nn.Module, tok: Tokenizer, prompt: str = "", num_tokens: int = 20, temperature: float = 1.0,
             top_k: int | None = None, seed: int | None = None, stop_at_eos: bool = True) -> str:
    """Continue ``prompt`` with a decoder-only model, sampling ``num_tokens`` tokens.

    The model reads ``<bos>`` + the prompt (keeping the last ``model.max_len``
    tokens when it grows longer) and each new token is drawn from
    :func:`next_token_distribution`. With the same ``seed`` the same text comes
    back (``None``: the book's seed, so a chapter's samples repeat under one
    ``ATTENTION_BOOK_SEED``). Special tokens other than ``<eos>`` (``<unk>``,
    ``<pad>``, sentinels, …) are never sampled. Returns the continuation only.
    """
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    model.eval()
    dev = next(model.parameters()).device
    gen = torch.Generator(device=dev)
    gen.manual_seed(resolve_seed(seed))
    ids = torch.tensor([[tok.bos_id] + tok.encode(prompt)], device=dev)
    out: list[int] = []
    for _ in range(num_tokens):
        logits = _ban_specials(model(ids[:, -model.max_len:])[:, -1], tok)
        probs = next_token_distribution(logits.float(), temperature, top_k)
        nxt = torch.multinomial(probs, 1, generator=gen)
        if stop_at_eos and int(nxt) == tok.eos_id:
            break
        out.append(int(nxt))
        ids = torch.cat([ids, nxt], dim=1)
    return tok.decode(out)


def sampling_figure(model: nn.Module, tok: Tokenizer, prompt: str = "the time traveller", temperature: float = 1.0,
                    top_k: int = 0, seed: int | None = None, num_tokens: int = 25, show: int = 12):
    """The widget behind "try it": what temperature and top-k do to the next-token distribution.

    Left: the model's probabilities for the token after ``prompt`` at temperature
    1 (grey) and after applying ``temperature`` and ``top_k`` (red), for the
    ``show`` most likely tokens (special tokens other than ``<eos>`` are never
    sampled, so they are left out). Below: a ``num_tokens``-token continuation sampled
    with these settings under ``seed`` (``None``: the book's seed). Returns the figure
    (the sampled text is also in ``fig.generated_text``).
    """
    import matplotlib.pyplot as plt

    from .plot import _ensure_style

    _ensure_style()
    seed = resolve_seed(seed)
    model.eval()
    dev = next(model.parameters()).device
    with torch.no_grad():
        ids = torch.tensor([[tok.bos_id] + tok.encode(prompt)], device=dev)
        logits = _ban_specials(model(ids[:, -model.max_len:])[0, -1].float(), tok).cpu()
    raw = next_token_distribution(logits, 1.0)
    adjusted = next_token_distribution(logits, temperature, top_k or None)
    order = torch.argsort(raw, descending=True)[:show]
    labels = [tok.vocab.to_tokens(int(i)) for i in order]
    text = generate(model, tok, prompt, num_tokens, temperature, top_k or None, seed)
    fig, ax = plt.subplots(figsize=(7.5, 3.6), layout="constrained")
    xs = np.arange(len(order))
    ax.bar(xs - 0.2, raw[order].numpy(), width=0.4, color="0.7", label="temperature 1, all tokens")
    ax.bar(xs + 0.2, adjusted[order].numpy(), width=0.4, color="tab:red",
           label=f"temperature {temperature:g}, top-k {top_k or 'all'}")
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=45, ha="right")
    ax.set_ylabel("probability of the next token")
    ax.set_title(f"next token after “{prompt}”", fontsize=10)
    ax.legend(loc="upper right")
    wrapped = _wrap(f"{prompt} ▸ {text}", 95)
    fig.text(0.01, -0.02, f"sample (seed {seed}):\n{wrapped}", ha="left", va="top", fontsize=9, family="monospace")
    fig.generated_text = text
    return fig


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


# --------------------------------------------------------------------------------------
# Losses and evaluation (one batch -> (mean loss, number of targets), as ab.fit wants)
# --------------------------------------------------------------------------------------

def _token_ce(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    count = int((labels != IGNORE).sum())
    if count == 0:  # nothing to predict in this batch: a zero loss that still has a graph
        return logits.sum() * 0.0, 0
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE)
    return loss, count


def mlm_loss(model: nn.Module, batch) -> tuple[torch.Tensor, int]:
    """Masked-LM loss: cross-entropy on the selected tokens only (``labels != IGNORE``).

    As in BERT, the vocabulary projection runs at the selected positions only
    (about 15% of them), which saves most of its cost.
    """
    inputs, labels = batch
    selected = labels != IGNORE
    return _token_ce(model.lm_head(model.encode(inputs)[selected]), labels[selected])


def seq2seq_loss(model: nn.Module, batch) -> tuple[torch.Tensor, int]:
    """Encoder–decoder loss (span corruption or text-to-text): cross-entropy on every target token."""
    enc, dec, labels = batch
    return _token_ce(model(enc, dec), labels)


def clm_loss(model: nn.Module, batch) -> tuple[torch.Tensor, int]:
    """Causal-LM loss: cross-entropy of each next token."""
    inputs, labels = batch
    return _token_ce(model(inputs), labels)


def classification_loss(model: nn.Module, batch) -> tuple[torch.Tensor, int]:
    """Fine-tuning loss of the ``<cls>`` classifier."""
    inputs, labels = batch
    return F.cross_entropy(model.classify(inputs).float(), labels), len(labels)


@torch.no_grad()
def evaluate_loss(model: nn.Module, loss_fn: Callable, batches) -> float:
    """Average of ``loss_fn`` over ``batches``, weighted by the number of targets (model in eval mode)."""
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    from .train import move_to

    total, count = 0.0, 0
    for batch in batches:
        loss, n = loss_fn(model, move_to(batch, dev))
        total += float(loss) * n
        count += n
    model.train(was_training)
    if count == 0:
        raise ValueError("the batches hold no targets")
    return total / count


@torch.no_grad()
def classification_accuracy(model: nn.Module, batches) -> float:
    """Fraction of examples whose ``<cls>`` prediction equals the label."""
    model.eval()
    dev = next(model.parameters()).device
    right = total = 0
    for inputs, labels in batches:
        pred = model.classify(inputs.to(dev)).argmax(dim=-1).cpu()
        right += int((pred == labels).sum())
        total += len(labels)
    return right / total


@torch.no_grad()
def masked_accuracy(model: nn.Module | None, batches, constant: int | None = None) -> float:
    """Share of masked-LM targets predicted exactly (arg-max); ``model=None`` with ``constant`` scores
    the guess "always token ``constant``" instead."""
    right = total = 0
    for inputs, labels in batches:
        sel = labels != IGNORE
        if model is None:
            if constant is None:
                raise ValueError("pass a model, or model=None with constant=<token id>")
            pred = torch.full_like(labels, constant)
        else:
            model.eval()
            pred = model(inputs.to(next(model.parameters()).device)).argmax(dim=-1).cpu()
        right += int((pred[sel] == labels[sel]).sum())
        total += int(sel.sum())
    return right / max(total, 1)


@torch.no_grad()
def fill_masks(model: nn.Module, tok: Tokenizer, text: str, top: int = 3) -> list[list[tuple[str, float]]]:
    """An encoder-only model's ``top`` guesses (word, probability) for every ``<mask>`` in ``text``."""
    ids = [tok.cls_id] + tok.encode(text)
    where = [i for i, t in enumerate(ids) if t == tok.mask_id]
    if not where:
        raise ValueError(f"text must contain at least one <mask>, got {text!r}")
    model.eval()
    x = torch.tensor([ids], device=next(model.parameters()).device)
    probs = F.softmax(model(x)[0].float(), dim=-1).cpu()
    out = []
    for i in where:
        p = probs[i].clone()
        p[list(tok.special_ids)] = 0  # a word, please
        vals, idx = torch.topk(p, top)
        out.append([(tok.vocab.to_tokens(int(j)), float(v)) for v, j in zip(vals, idx)])
    return out


@torch.no_grad()
def span_loss_parts(model: nn.Module, batches, tok: Tokenizer) -> dict[str, float]:
    """Span-corruption loss split into the structure (sentinels and ``<eos>``) and the hidden words."""
    model.eval()
    dev = next(model.parameters()).device
    structure = torch.tensor(tok.sentinel_ids + (tok.eos_id,))
    sums = {"structure": [0.0, 0], "words": [0.0, 0]}
    for enc, dec, labels in batches:
        logits = model(enc.to(dev), dec.to(dev)).float().cpu()
        nll = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE, reduction="none")
        is_structure = torch.isin(labels, structure)
        valid = labels != IGNORE
        for key, sel in (("structure", is_structure & valid), ("words", ~is_structure & valid)):
            sums[key][0] += float(nll[sel].sum())
            sums[key][1] += int(sel.sum())
    return {k: total / max(n, 1) for k, (total, n) in sums.items()}


def unigram_baseline(train_batches, val_batches, vocab_size: int) -> float:
    """The unigram cross-entropy on the validation targets of an objective.

    The targets are the last tensor of each batch (labels; ``IGNORE`` skipped), so
    the same function serves masked LM, span corruption and causal LM: the unigram
    model is fit on the training batches' targets and scored on the validation ones.
    """
    train = torch.cat([b[-1].flatten() for b in train_batches])
    val = torch.cat([b[-1].flatten() for b in val_batches])
    return unigram_cross_entropy(train, val, vocab_size)


# --------------------------------------------------------------------------------------
# Tasks built from the corpus, for fine-tuning and prompting
# --------------------------------------------------------------------------------------

def order_task_batch(ids: torch.Tensor, tok: Tokenizer, batch_size: int, seq_len: int,
                     generator: torch.Generator | None = None, span: int = 4):
    """A labelled task made from unlabelled text: is this passage in its original word order?

    Each example is ``<cls>`` + ``seq_len - 1`` consecutive tokens. Half of them
    (label 0) have ``span`` consecutive tokens at a random place shuffled
    (re-drawn until the order really changed); the other half (label 1) are
    untouched. The words are the same either way, so only word order tells.
    Returns ``(inputs, labels)``.
    """
    if not 2 <= span <= seq_len - 1:
        raise ValueError(f"span must lie in [2, seq_len - 1 = {seq_len - 1}], got {span}")
    windows = random_windows(ids, batch_size, seq_len - 1, generator)
    labels = torch.randint(0, 2, (batch_size,), generator=generator)
    for i in range(batch_size):
        if labels[i] == 0:
            start = int(torch.randint(0, seq_len - span, (1,), generator=generator))
            piece = windows[i, start:start + span].clone()
            if len(set(piece.tolist())) == 1:  # nothing to shuffle: it stays a real passage
                labels[i] = 1
                continue
            while True:
                perm = piece[torch.randperm(span, generator=generator)]
                if not torch.equal(perm, piece):
                    break
            windows[i, start:start + span] = perm
    inputs = torch.cat([torch.full((batch_size, 1), tok.cls_id), windows], dim=1)
    return inputs, labels


def replaced_task_batch(ids: torch.Tensor, tok: Tokenizer, batch_size: int, seq_len: int,
                        generator: torch.Generator | None = None, replace_prob: float = 0.2):
    """A labelled task made from unlabelled text: has this passage been tampered with?

    Each example is ``<cls>`` + ``seq_len - 1`` consecutive tokens. Half of them
    (label 0) have each token replaced, with probability ``replace_prob``, by a
    random ordinary token (at least one is replaced); the other half (label 1)
    are untouched. Spotting the intruders needs a sense of which words fit their
    context — what masked-LM pretraining, with its 10% random replacements,
    practises. Returns ``(inputs, labels)``.
    """
    if not 0.0 < replace_prob <= 1.0:
        raise ValueError(f"replace_prob must lie in (0, 1], got {replace_prob}")
    windows = random_windows(ids, batch_size, seq_len - 1, generator)
    labels = torch.randint(0, 2, (batch_size,), generator=generator)
    ordinary = tok.ordinary_ids
    hit = torch.rand(windows.shape, generator=generator) < replace_prob
    hit[torch.arange(batch_size), torch.randint(0, seq_len - 1, (batch_size,), generator=generator)] = True
    hit &= (labels == 0)[:, None]
    random_words = ordinary[torch.randint(len(ordinary), windows.shape, generator=generator)]
    windows = torch.where(hit, random_words, windows)
    inputs = torch.cat([torch.full((batch_size, 1), tok.cls_id), windows], dim=1)
    return inputs, labels


TEXT_TASKS = {"<copy>": lambda words: list(words), "<reverse>": lambda words: list(words)[::-1]}


def text_to_text_batch(ids: torch.Tensor, tok: Tokenizer, batch_size: int, num_words: int,
                       generator: torch.Generator | None = None, tasks: Sequence[str] = ("<copy>", "<reverse>")):
    """Text-to-text examples of several tasks in one minibatch, told apart by a task prefix.

    Each example takes ``num_words`` consecutive tokens of the corpus and a task
    drawn at random from ``tasks`` (keys of ``TEXT_TASKS``): the encoder reads the
    task token then the words; the decoder must write the task's answer (the words
    as they are for ``<copy>``, backwards for ``<reverse>``). Returns
    ``(enc_inputs, dec_inputs, labels)`` as :func:`span_batch` does.
    """
    for t in tasks:
        if t not in TEXT_TASKS:
            raise ValueError(f"unknown task {t!r}; known tasks: {list(TEXT_TASKS)}")
    windows = random_windows(ids, batch_size, num_words, generator)
    which = torch.randint(0, len(tasks), (batch_size,), generator=generator)
    enc, dec, lab = [], [], []
    for w, k in zip(windows.tolist(), which.tolist()):
        target = TEXT_TASKS[tasks[k]](w)
        enc.append([tok.id(tasks[k])] + w)
        dec.append([tok.bos_id] + target)
        lab.append(target + [tok.eos_id])
    return torch.tensor(enc), torch.tensor(dec), torch.tensor(lab)


@torch.no_grad()
def greedy_decode(model: nn.Module, enc_inputs: torch.Tensor, bos_id: int, eos_id: int, max_len: int) -> list[list[int]]:
    """Greedy decoding with an encoder–decoder: the most likely token at each step, up to ``<eos>``.

    The encoder runs once; the decoder takes one new token per step and keeps
    the earlier ones in its key/value cache. Returns one list of ids per example
    (``<bos>`` and ``<eos>`` removed).
    """
    model.eval()
    dev = next(model.parameters()).device
    enc_inputs = enc_inputs.to(dev)
    state = model.decoder_state(enc_inputs)
    nxt = torch.full((len(enc_inputs), 1), bos_id, device=dev)
    done = torch.zeros(len(enc_inputs), dtype=torch.bool, device=dev)
    steps = []
    for _ in range(min(max_len, model.max_len)):
        logits, state = model.decoder(nxt, state)
        nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
        nxt = torch.where(done[:, None], torch.full_like(nxt, eos_id), nxt)
        steps.append(nxt)
        done |= nxt[:, 0] == eos_id
        if bool(done.all()):
            break
    out = []
    for row in torch.cat(steps, dim=1).tolist():
        out.append(row[:row.index(eos_id)] if eos_id in row else row)
    return out


def exact_match(model: nn.Module, batch, tok: Tokenizer) -> float:
    """Share of examples an encoder–decoder answers exactly (greedy decoding)."""
    enc, _, labels = batch
    preds = greedy_decode(model, enc, tok.bos_id, tok.eos_id, labels.shape[1] + 2)
    want = [[t for t in row if t not in (tok.eos_id, IGNORE)] for row in labels.tolist()]
    return sum(p == w for p, w in zip(preds, want)) / len(want)


@torch.no_grad()
def next_word_accuracy(model: nn.Module, tok: Tokenizer, prompts: Sequence[str], answers: Sequence[str]) -> float:
    """Share of prompts after which a decoder-only model's most likely next token is the answer."""
    if len(prompts) != len(answers) or not prompts:
        raise ValueError(f"need as many answers as prompts (and at least one), got {len(prompts)} and {len(answers)}")
    model.eval()
    dev = next(model.parameters()).device
    right = 0
    for prompt, answer in zip(prompts, answers):
        ids = torch.tensor([[tok.bos_id] + tok.encode(prompt)], device=dev)[:, -model.max_len:]
        right += int(model(ids)[0, -1].argmax()) == tok.id(answer)
    return right / len(prompts)


def few_shot_prompts(words: Sequence[str], shots: int, n: int, task: str = "copy", seed: int | None = None
                     ) -> tuple[list[str], list[str]]:
    """Prompts for in-context learning without updates, and their answers.

    ``task='copy'``: ``shots`` demonstrations ``a : a .`` then ``q :``; the answer
    is ``q``. ``task='swap'``: demonstrations ``a b : b a .`` then ``p q : q``;
    the answer is ``p``. Words are drawn from ``words`` (all distinct within a
    prompt), so the answer always appears in the prompt and a model that picked up
    the pattern could copy it. ``seed`` (``None``: the book's seed) draws the words.
    """
    if task not in ("copy", "swap"):
        raise ValueError(f"task must be 'copy' or 'swap', got {task!r}")
    if shots < 0 or n < 1:
        raise ValueError(f"shots must be >= 0 and n >= 1, got {shots} and {n}")
    rng = random.Random(resolve_seed(seed))
    prompts, answers = [], []
    need = 2 * (shots + 1)
    if len(set(words)) < need:
        raise ValueError(f"need at least {need} distinct words, got {len(set(words))}")
    for _ in range(n):
        picks = rng.sample(sorted(set(words)), need)
        parts = []
        for j in range(shots):
            a, b = picks[2 * j], picks[2 * j + 1]
            parts.append(f"{a} : {a} ." if task == "copy" else f"{a} {b} : {b} {a} .")
        p, q = picks[-2], picks[-1]
        parts.append(f"{p} :" if task == "copy" else f"{p} {q} : {q}")
        prompts.append(" ".join(parts))
        answers.append(p)
    return prompts, answers


# --------------------------------------------------------------------------------------
# Scaling in miniature
# --------------------------------------------------------------------------------------

@dataclass
class PowerLaw:
    """``y = coef * x ** (-exponent)``, fitted by least squares on log–log axes."""

    coef: float
    exponent: float

    def __call__(self, x):
        return self.coef * np.asarray(x, dtype=float) ** (-self.exponent)

    def __str__(self) -> str:
        return f"L ≈ {self.coef:.3g} · x^(-{self.exponent:.3f})"


def fit_power_law(x, y) -> PowerLaw:
    """Fit ``y = c · x^(-α)``: a straight line ``log y = log c - α log x``."""
    x, y = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"need at least two (x, y) points of equal count, got {len(x)} x and {len(y)} y")
    if (x <= 0).any() or (y <= 0).any():
        raise ValueError("a power law needs positive x and y (they are logged)")
    if np.ptp(np.log(x)) == 0:
        raise ValueError("all x are equal: the exponent is undetermined")
    slope, intercept = np.polyfit(np.log(x), np.log(y), 1)
    return PowerLaw(float(np.exp(intercept)), float(-slope))


def non_embedding_parameters(model: nn.Module) -> int:
    """Parameters outside the token/position embeddings and the output projection (Kaplan et al.'s N)."""
    skip = set()
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            skip |= {id(p) for p in module.parameters()}
    for head in ("lm_head", "cls_head"):
        part = getattr(model, head, None)
        if isinstance(part, nn.Module):
            skip |= {id(p) for p in part.parameters()}
    decoder = getattr(model, "decoder", None)
    if isinstance(decoder, TransformerDecoder):
        skip |= {id(p) for p in decoder.dense.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in skip)


@dataclass
class ScalingRun:
    """One decoder-only model of the scaling study: its size and its validation loss over compute."""

    num_hiddens: int
    num_blks: int
    params: int  # non-embedding parameters N
    total_params: int
    compute: list[float]  # training FLOPs ≈ 6 N D at each checkpoint
    val_loss: list[float]
    seconds: float = 0.0
    history: object = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return f"d={self.num_hiddens}, {self.num_blks} block{'s' if self.num_blks > 1 else ''}"


def scaling_experiment(corpus: Corpus, sizes: Sequence[tuple[int, int]], steps: int, batch_size: int = 32,
                       seq_len: int = 32, checkpoints: int = 4, lr: float = 3e-3, num_heads: int = 4,
                       val_batches: int = 4, seed: int | None = None, device=None, progress: bool = True
                       ) -> list[ScalingRun]:
    """Train one decoder-only model per ``(num_hiddens, num_blks)`` in ``sizes`` for the same ``steps``.

    All runs start from ``seed`` (``None``: the book's seed), see the same batches
    and are evaluated on the same validation batches at ``checkpoints`` evenly
    spaced moments. Compute is counted as Kaplan et al. do, ``C ≈ 6 · N · D`` with ``N`` the non-embedding
    parameters and ``D`` the training tokens seen so far.
    """
    from .config import seed_everything
    from .train import fit

    if steps % checkpoints:
        raise ValueError(f"steps={steps} must be a multiple of checkpoints={checkpoints}")
    tok = corpus.tokenizer
    seed = resolve_seed(seed)
    val = Batches(lambda g: clm_batch(corpus.val_ids, tok, batch_size, seq_len, g), val_batches, seed=seed + 1,
                  fixed=True)
    runs = []
    for num_hiddens, num_blks in sizes:
        seed_everything(seed)
        model = DecoderOnlyLM(tok.vocab_size, num_hiddens, num_heads=num_heads, num_blks=num_blks, max_len=seq_len)
        train = Batches(lambda g: clm_batch(corpus.train_ids, tok, batch_size, seq_len, g), steps // checkpoints,
                        seed=seed)
        history = fit(model, train, clm_loss, epochs=checkpoints, lr=lr, clip_grad=1.0, device=device,
                      evaluate=lambda m: {"val loss": evaluate_loss(m, clm_loss, val)}, progress=progress,
                      desc=f"d={num_hiddens} x{num_blks}")
        n = non_embedding_parameters(model)
        tokens = [batch_size * seq_len * steps // checkpoints * (e + 1) for e in range(checkpoints)]
        runs.append(ScalingRun(num_hiddens, num_blks, n, sum(p.numel() for p in model.parameters()),
                               [6.0 * n * d for d in tokens], history.metrics["val loss"], history.seconds, history))
    return runs


def _frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no cheaper point beats: the lowest loss reached at each compute so far."""
    best, out = math.inf, []
    for c, loss in sorted(points):
        if loss < best:
            out.append((c, loss))
            best = loss
    return out


def scaling_figure(runs: Sequence[ScalingRun], baseline: float | None = None):
    """Loss against parameters (final checkpoint) and against compute (every checkpoint), log–log,
    each with a fitted power law. Returns the figure; the fits are in ``fig.fits``."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter

    from .plot import _ensure_style

    if len(runs) < 2:
        raise ValueError(f"a scaling figure needs at least two runs, got {len(runs)}")
    _ensure_style()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    params = [r.params for r in runs]
    final = [r.val_loss[-1] for r in runs]
    law_n = fit_power_law(params, final)
    xs = np.geomspace(min(params) * 0.8, max(params) * 1.25, 50)
    ax1.plot(params, final, "o", color="tab:blue", label="trained models")
    ax1.plot(xs, law_n(xs), "--", color="tab:blue", label=f"fit: exponent {law_n.exponent:.3f}")
    colours = plt.cm.viridis(np.linspace(0.1, 0.85, len(runs)))
    points = []
    for r, col in zip(runs, colours):
        ax2.plot(r.compute, r.val_loss, "-o", color=col, markersize=3, label=r.label)
        points += list(zip(r.compute, r.val_loss))
    front = _frontier(points)
    law_c = fit_power_law(*zip(*front)) if len(front) >= 2 else None
    if law_c is not None:
        cs = np.geomspace(front[0][0] * 0.8, front[-1][0] * 1.25, 50)
        ax2.plot(cs, law_c(cs), "k--", label=f"frontier fit: exponent {law_c.exponent:.3f}")
    for ax in (ax1, ax2):
        if baseline is not None:
            ax.axhline(baseline, color="0.5", ls=":", label="unigram baseline")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.1f"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%.1f"))
        ax.set_ylabel("validation loss (nats / token)")
        ax.legend(fontsize=8)
    ax1.set_xlabel("non-embedding parameters N")
    ax1.set_title("same steps, different sizes")
    ax2.set_xlabel("training compute C ≈ 6·N·D (FLOPs)")
    ax2.set_title("loss along training")
    fig.fits = {"params": law_n, "compute": law_c}
    return fig


# --------------------------------------------------------------------------------------
# The three attention patterns, drawn from the masks the models use
# --------------------------------------------------------------------------------------

def attention_pattern_figure(bert: nn.Module, t5: nn.Module, gpt: nn.Module, tok: Tokenizer,
                             text: str = "the time traveller smiled round at us", num_pad: int = 2,
                             seed: int | None = None):
    """Which positions each token may attend to, in the three pretraining modes.

    Every panel is a mask a model really passes to its attention layers, taken
    from its ``attention_masks`` method for one example built from ``text``:
    BERT's input (``<cls>`` + text + ``num_pad`` paddings), T5's span-corrupted
    input and target (encoder self-attention, decoder self-attention,
    decoder→encoder cross-attention) and GPT's input (``<bos>`` + text). A filled
    cell (row = query, column = key) means "may attend". ``seed`` (``None``: the book's
    seed plus 3) picks T5's corrupted spans. Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    from .plot import _ensure_style

    _ensure_style()
    ids = tok.encode(text)
    if len(ids) < 3:
        raise ValueError(f"text needs at least 3 tokens to draw a pattern, got {len(ids)}: {text!r}")
    names = lambda seq: [tok.vocab.to_tokens(int(i)) for i in seq]  # noqa: E731
    x_bert = torch.tensor([[tok.cls_id] + ids + [tok.pad_id] * num_pad])
    g = torch.Generator().manual_seed(resolve_seed(seed, 3))
    enc, tgt = corrupt_spans(ids, tok.sentinel_ids, noise_density=0.3, mean_span_length=2.0, generator=g)
    x_enc, x_dec = torch.tensor([enc]), torch.tensor([[tok.bos_id] + tgt])
    x_gpt = torch.tensor([[tok.bos_id] + ids])
    dev = lambda m: next(m.parameters()).device  # noqa: E731
    with torch.no_grad():
        m_bert = bert.attention_masks(x_bert.to(dev(bert)))
        m_t5 = t5.attention_masks(x_enc.to(dev(t5)), x_dec.to(dev(t5)))
        m_gpt = gpt.attention_masks(x_gpt.to(dev(gpt)))
    panels = [
        ("BERT encoder\n(self-attention)", m_bert["encoder self-attention"][0], x_bert[0], x_bert[0]),
        ("T5 encoder\n(self-attention)", m_t5["encoder self-attention"][0], x_enc[0], x_enc[0]),
        ("T5 decoder → encoder\n(cross-attention)", m_t5["cross-attention"][0], x_dec[0], x_enc[0]),
        ("T5 decoder\n(self-attention)", m_t5["decoder self-attention"][0], x_dec[0], x_dec[0]),
        ("GPT decoder\n(self-attention)", m_gpt["decoder self-attention"][0], x_gpt[0], x_gpt[0]),
    ]
    widths = [len(p[3]) for p in panels]
    fig, axes = plt.subplots(1, 5, figsize=(15, 4.2), layout="constrained", gridspec_kw={"width_ratios": widths})
    cmap = ListedColormap(["white", "tab:red"])
    for ax, (title, mask, q_ids, k_ids) in zip(axes, panels):
        m = mask.detach().cpu()
        if m.dim() == 3:  # (heads or 1, q, k): all heads share it
            m = m[0]
        ax.imshow(m.float().numpy(), cmap=cmap, vmin=0, vmax=1, aspect="equal")
        ax.set_xticks(range(len(k_ids)))
        ax.set_xticklabels(names(k_ids), rotation=90, fontsize=8)
        ax.set_yticks(range(len(q_ids)))
        ax.set_yticklabels(names(q_ids), fontsize=8)
        ax.set_xticks(np.arange(-0.5, len(k_ids)), minor=True)
        ax.set_yticks(np.arange(-0.5, len(q_ids)), minor=True)
        ax.grid(False)
        ax.grid(which="minor", color="0.85", linewidth=0.6)
        ax.tick_params(which="minor", length=0)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("keys (attended to)", fontsize=9)
    axes[0].set_ylabel("queries (attending)")
    return fig


# --------------------------------------------------------------------------------------
# The three models, built from chapter 7's Transformer blocks
# --------------------------------------------------------------------------------------

class EncoderOnlyLM(nn.Module):
    """BERT in miniature: chapter 7's :class:`TransformerEncoder` with a masked-LM head.

    ``forward(ids)`` returns vocabulary scores (batch, length, vocab) at every
    position (the masked-LM loss reads the selected ones). ``add_classifier(n)``
    puts a fresh head on the ``<cls>`` position (BERT's pooler: dense + tanh, then
    a linear layer to ``n`` classes) and ``classify(ids)`` returns its scores.
    Self-attention is bidirectional; only ``<pad>`` keys are masked out.
    ``norm_first=True`` (default) uses pre-normalisation, as GPT-2 and ViT do;
    at this size it trains faster than the original post-norm placement.
    """

    def __init__(self, vocab_size: int, num_hiddens: int = 64, num_heads: int = 4, num_blks: int = 2,
                 ffn_num_hiddens: int | None = None, dropout: float = 0.1, max_len: int = 128, pad_id: int = 1,
                 norm_first: bool = True):
        super().__init__()
        self.vocab_size, self.num_hiddens, self.max_len, self.pad_id = vocab_size, num_hiddens, max_len, pad_id
        self.encoder = TransformerEncoder(vocab_size, num_hiddens, ffn_num_hiddens or 4 * num_hiddens, num_heads,
                                          num_blks, dropout, max_len=max_len, norm_first=norm_first)
        self.lm_head = nn.Linear(num_hiddens, vocab_size)
        self.cls_head: nn.Module | None = None
        _small_embeddings(self)

    @property
    def embedding(self) -> nn.Embedding:
        return self.encoder.embedding

    def attention_masks(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{'encoder self-attention': (batch, length, length)}``, True = may attend (every non-pad key)."""
        _check_ids("ids", ids, self.vocab_size, self.max_len)
        n = ids.shape[1]
        return {"encoder self-attention": _real_keys(ids, self.pad_id).expand(-1, n, -1)}

    def encode(self, ids: torch.Tensor) -> torch.Tensor:
        """Output vectors of the last block, (batch, length, num_hiddens)."""
        return self.encoder(ids, self.attention_masks(ids)["encoder self-attention"])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.encode(ids))

    def add_classifier(self, num_classes: int) -> None:
        """A new, randomly initialised classification head on the ``<cls>`` position."""
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes must be an int >= 2, got {num_classes!r}")
        dev = self.lm_head.weight.device
        self.cls_head = nn.Sequential(nn.Linear(self.num_hiddens, self.num_hiddens), nn.Tanh(),
                                      nn.Linear(self.num_hiddens, num_classes)).to(dev)

    def classify(self, ids: torch.Tensor) -> torch.Tensor:
        """Class scores (batch, num_classes) from the output at position 0 (``<cls>``)."""
        if self.cls_head is None:
            raise ValueError("this model has no classifier yet; call add_classifier(num_classes) first")
        return self.cls_head(self.encode(ids)[:, 0])

    def attention_maps(self, ids: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """Attention weights of every layer, (batch, heads, length, length), labelled by mask name."""
        return _collect_maps(self, lambda: self.encode(ids), ["encoder self-attention"] * len(self.encoder.blks))


class DecoderOnlyLM(nn.Module):
    """GPT in miniature: chapter 7's :class:`TransformerEncoder` built with ``causal=True`` and a next-token head.

    A causal encoder block is a decoder block without cross-attention, i.e. a
    GPT block. ``forward(ids)`` returns scores (batch, length, vocab); position
    ``t`` depends on ``ids[:, :t+1]`` only. ``<pad>`` keys are masked as well.
    """

    def __init__(self, vocab_size: int, num_hiddens: int = 64, num_heads: int = 4, num_blks: int = 2,
                 ffn_num_hiddens: int | None = None, dropout: float = 0.1, max_len: int = 128, pad_id: int = 1,
                 norm_first: bool = True):
        super().__init__()
        self.vocab_size, self.num_hiddens, self.max_len, self.pad_id = vocab_size, num_hiddens, max_len, pad_id
        self.body = TransformerEncoder(vocab_size, num_hiddens, ffn_num_hiddens or 4 * num_hiddens, num_heads,
                                       num_blks, dropout, max_len=max_len, causal=True, norm_first=norm_first)
        self.lm_head = nn.Linear(num_hiddens, vocab_size)
        _small_embeddings(self)

    @property
    def embedding(self) -> nn.Embedding:
        return self.body.embedding

    def attention_masks(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{'decoder self-attention': (batch, length, length)}``: causal, and never a ``<pad>`` key.

        The blocks receive the ``<pad>`` part as ``valid_lens`` and add the causal
        part themselves (``causal=True``); this is the combination they apply.
        """
        _check_ids("ids", ids, self.vocab_size, self.max_len)
        n = ids.shape[1]
        return {"decoder self-attention": causal_mask(n, n, device=ids.device)[None] & _real_keys(ids, self.pad_id)}

    def encode(self, ids: torch.Tensor) -> torch.Tensor:
        """Output vectors of the last block, (batch, length, num_hiddens)."""
        _check_ids("ids", ids, self.vocab_size, self.max_len)
        return self.body(ids, _real_keys(ids, self.pad_id))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.encode(ids))

    def attention_maps(self, ids: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        return _collect_maps(self, lambda: self.encode(ids), ["decoder self-attention"] * len(self.body.blks))


class EncoderDecoderLM(nn.Module):
    """T5 in miniature: chapter 7's :class:`TransformerEncoder` and :class:`TransformerDecoder`.

    ``forward(enc_ids, dec_ids)`` returns scores (batch, target length, vocab)
    (teacher forcing); ``encode`` and ``decoder_state`` prepare step-by-step
    decoding with the decoder's key/value cache (see :func:`greedy_decode`). The
    encoder is bidirectional over non-pad tokens, the decoder's self-attention is
    causal and its cross-attention sees every non-pad input token.
    """

    def __init__(self, vocab_size: int, num_hiddens: int = 64, num_heads: int = 4, num_blks: int = 2,
                 ffn_num_hiddens: int | None = None, dropout: float = 0.1, max_len: int = 128, pad_id: int = 1,
                 norm_first: bool = True):
        super().__init__()
        self.vocab_size, self.num_hiddens, self.max_len, self.pad_id = vocab_size, num_hiddens, max_len, pad_id
        ffn = ffn_num_hiddens or 4 * num_hiddens
        self.encoder = TransformerEncoder(vocab_size, num_hiddens, ffn, num_heads, num_blks, dropout, max_len=max_len,
                                          norm_first=norm_first)
        self.decoder = TransformerDecoder(vocab_size, num_hiddens, ffn, num_heads, num_blks, dropout, max_len=max_len,
                                          norm_first=norm_first)
        _small_embeddings(self)

    def attention_masks(self, enc_ids: torch.Tensor, dec_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The three masks (True = may attend): encoder self (batch, S, S), decoder self (batch, T, T; causal)
        and cross (batch, T, S).

        Decoder inputs are never padded on the left, so the causal mask alone
        already keeps every real target position away from ``<pad>``.
        """
        _check_ids("enc_ids", enc_ids, self.vocab_size, self.max_len)
        _check_ids("dec_ids", dec_ids, self.vocab_size, self.max_len)
        if enc_ids.shape[0] != dec_ids.shape[0]:
            raise ValueError(f"enc_ids {tuple(enc_ids.shape)} and dec_ids {tuple(dec_ids.shape)} need the same "
                             "batch size")
        s, t = enc_ids.shape[1], dec_ids.shape[1]
        enc_keys = _real_keys(enc_ids, self.pad_id)
        return {
            "encoder self-attention": enc_keys.expand(-1, s, -1),
            "decoder self-attention": causal_mask(t, t, device=dec_ids.device)[None].expand(len(dec_ids), -1, -1),
            "cross-attention": enc_keys.expand(-1, t, -1),
        }

    def encode(self, enc_ids: torch.Tensor) -> torch.Tensor:
        """Encoder outputs (batch, S, num_hiddens)."""
        _check_ids("enc_ids", enc_ids, self.vocab_size, self.max_len)
        s = enc_ids.shape[1]
        return self.encoder(enc_ids, _real_keys(enc_ids, self.pad_id).expand(-1, s, -1))

    def decoder_state(self, enc_ids: torch.Tensor, memory: torch.Tensor | None = None) -> dict:
        """A fresh decoder state (empty cache) for the inputs ``enc_ids``."""
        memory = self.encode(enc_ids) if memory is None else memory
        return self.decoder.init_state(memory, _real_keys(enc_ids, self.pad_id))

    def forward(self, enc_ids: torch.Tensor, dec_ids: torch.Tensor) -> torch.Tensor:
        _check_ids("dec_ids", dec_ids, self.vocab_size, self.max_len)
        if enc_ids.shape[0] != dec_ids.shape[0]:
            raise ValueError(f"enc_ids {tuple(enc_ids.shape)} and dec_ids {tuple(dec_ids.shape)} need the same "
                             "batch size")
        logits, _ = self.decoder(dec_ids, self.decoder_state(enc_ids))
        return logits

    def attention_maps(self, enc_ids: torch.Tensor, dec_ids: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        names = (["encoder self-attention"] * len(self.encoder.blks)
                 + ["decoder self-attention", "cross-attention"] * len(self.decoder.blks))
        return _collect_maps(self, lambda: self(enc_ids, dec_ids), names)


def _small_embeddings(model: nn.Module) -> None:
    """Token embeddings drawn with standard deviation 1/√d instead of 1.

    The stacks multiply embeddings by √d before adding the positional encoding
    (entries in [-1, 1]); with PyTorch's default N(0, 1) embeddings the positions
    would be 8 times weaker than the words at d = 64 and short training would
    barely see word order. With 1/√d both start at the same scale.
    """
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=module.embedding_dim ** -0.5)


def _real_keys(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(batch, 1, length): True at real tokens, False at ``<pad>``."""
    return (ids != pad_id)[:, None, :]


def _collect_maps(model: nn.Module, run: Callable, names: Sequence[str]) -> list[tuple[str, torch.Tensor]]:
    """Run ``model`` recording its attention; return ``(mask name, weights)`` for every attention
    module in the order they were first called."""
    with torch.no_grad(), record_attention(model) as maps:
        run()
    if len(maps) != len(names):
        raise RuntimeError(f"expected {len(names)} attention modules, recorded {len(maps)}")
    return [(name, m.weights) for name, m in zip(names, maps)]
