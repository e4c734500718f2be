"""Text for the translation chapters: English–French pairs, vocabularies, BLEU.

The format and preprocessing follow d2l's ``MTFraEng`` so results compare:
lower-case, non-breaking spaces become spaces, a space goes before ``, . ! ?``,
tokens are split on spaces, each sentence ends with ``<eos>``, target inputs
start with ``<bos>``, and every sequence is padded or trimmed to ``num_steps``.
"""

from __future__ import annotations

import collections
import math
import random
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from ..core.checks import check_index, check_int, check_positive_int
from ..core.config import resolve_seed
from .registry import DataUnavailableError, extract_member, fetch, find_local, read_utf8

__all__ = [
    "PAD", "BOS", "EOS", "UNK",
    "preprocess_nmt",
    "tokenize_nmt",
    "parse_pairs",
    "synthetic_pairs",
    "load_fra_eng_text",
    "Vocab",
    "TranslationData",
    "load_translation",
    "bleu",
    "bleu_parts",
]

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"


def preprocess_nmt(text: str) -> str:
    """Lower-case, turn non-breaking spaces into spaces, and set punctuation apart."""
    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    out = []
    for i, ch in enumerate(text):
        if ch in ",.!?" and i > 0 and text[i - 1] != " ":
            out.append(" ")
        out.append(ch)
    return "".join(out)


def tokenize_nmt(sentence: str) -> list[str]:
    """Split a preprocessed sentence into tokens and append ``<eos>``."""
    return [t for t in sentence.split(" ") if t] + [EOS]


def parse_pairs(text: str, max_pairs: int | None = None, source: str = "text") -> list[tuple[str, str]]:
    """Tab-separated ``english<TAB>french[<TAB>attribution]`` lines -> raw pairs.

    Blank lines are skipped. A non-blank line without a tab, or with an empty
    side, raises ``ValueError`` naming the line number (1-based) and ``source``.
    """
    if max_pairs is not None:
        max_pairs = check_int("max_pairs", max_pairs, minimum=0)
    pairs = []
    for number, line in enumerate(text.split("\n"), start=1):
        if max_pairs is not None and len(pairs) >= max_pairs:
            break
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
            raise ValueError(
                f"{source}, line {number}: expected 'english<TAB>french', got {line[:80]!r}"
            )
        pairs.append((parts[0], parts[1]))
    return pairs


# The fallback corpus: a small, regular slice of English -> French written for this
# book (subject pronouns, "to be" + adjective with agreement, present-tense verbs,
# a few verbs in the passé composé, and imperatives). Its style follows the real
# data (short sentences, "." or "!", contractions such as "he's"), so the chapters'
# sentences "go .", "i lost .", "he's calm ." and "i'm home ." all occur in it.
_SUBJECTS = [  # english, french, french "to be", english "to be", contracted english
    ("i", "je", "suis", "am", "i'm"), ("you", "tu", "es", "are", "you're"),
    ("he", "il", "est", "is", "he's"), ("she", "elle", "est", "is", "she's"),
    ("we", "nous", "sommes", "are", "we're"), ("they", "ils", "sont", "are", "they're"),
]
_ADJECTIVES = [  # english, french masculine, french feminine
    ("calm", "calme", "calme"), ("tired", "fatigué", "fatiguée"), ("happy", "content", "contente"),
    ("ready", "prêt", "prête"), ("sick", "malade", "malade"), ("busy", "occupé", "occupée"),
    ("late", "en retard", "en retard"), ("home", "chez moi", "chez moi"), ("rich", "riche", "riche"),
    ("lazy", "paresseux", "paresseuse"),
]
_HOME = {"i": "chez moi", "you": "chez toi", "he": "chez lui", "she": "chez elle", "we": "chez nous",
         "they": "chez eux"}
_VERBS = [  # english, french for je/tu, il/elle, nous, ils
    ("run", "cours", "court", "courons", "courent"), ("eat", "mange", "mange", "mangeons", "mangent"),
    ("sing", "chante", "chante", "chantons", "chantent"), ("wait", "attends", "attend", "attendons", "attendent"),
    ("swim", "nage", "nage", "nageons", "nagent"), ("work", "travaille", "travaille", "travaillons", "travaillent"),
]
_PAST = [("lost", "perdu"), ("won", "gagné"), ("paid", "payé"), ("tried", "essayé"), ("slept", "dormi")]
_HAVE = {"i": "j'ai", "you": "tu as", "he": "il a", "she": "elle a", "we": "nous avons", "they": "ils ont"}
_IMPERATIVES = [("go", "va"), ("run", "cours"), ("wait", "attends"), ("stop", "arrête"), ("listen", "écoute"),
                ("come", "viens"), ("sing", "chante"), ("eat", "mange")]


def _plural(word: str) -> str:
    return word if word.endswith(("s", "x")) or " " in word else word + "s"


def synthetic_pairs(num_pairs: int = 640, seed: int = 0) -> list[tuple[str, str]]:
    """A small English→French corpus generated from templates (the offline fallback).

    Four kinds of sentence, drawn at random (with repeats, like the real data):

    * "to be" + adjective, with French agreement: ``she's tired .`` →
      ``elle est fatiguée .``, ``we are ready .`` → ``nous sommes prêts .``,
      ``i'm home .`` → ``je suis chez moi .``;
    * present tense: ``we sing !`` → ``nous chantons !``;
    * passé composé with *avoir*: ``i lost .`` → ``j'ai perdu .``;
    * imperatives: ``go .`` → ``va !``.

    640 draws give about 220 distinct pairs over ~50 English and ~75 French
    words (after the minimum-frequency cut), so a model learns it in a
    few epochs. It is written for this book (not taken from a data set) and is
    *not* real usage data: the chapters say so when they fall back to it.
    Returned as (english, french) pairs, already lower-case with a space before
    the punctuation, in an order fixed by ``seed``.
    """
    num_pairs = check_int("num_pairs", num_pairs, minimum=0)
    rng = random.Random(seed)
    pairs = []
    for _ in range(num_pairs):
        en_s, fr_s, fr_be, en_be, en_short = rng.choice(_SUBJECTS)
        kind = rng.random()
        if kind < 0.45:
            en_a, fr_m, fr_f = rng.choice(_ADJECTIVES)
            if en_a == "home":
                fr_a = _HOME[en_s]
            else:
                fr_a = fr_f if en_s == "she" else fr_m
                if en_s in ("we", "they"):
                    fr_a = _plural(fr_a)
            en_subject = en_short if (en_s == "i" or rng.random() < 0.5) else f"{en_s} {en_be}"
            pairs.append((f"{en_subject} {en_a} .", f"{fr_s} {fr_be} {fr_a} ."))
        elif kind < 0.75:
            verb = rng.choice(_VERBS)
            form = {"i": 1, "you": 1, "he": 2, "she": 2, "we": 3, "they": 4}[en_s]
            en_v = verb[0] + ("s" if en_s in ("he", "she") else "")
            end = rng.choice([" .", " !"])
            pairs.append((f"{en_s} {en_v}{end}", f"{fr_s} {verb[form]}{end}"))
        elif kind < 0.9:
            en_v, fr_v = rng.choice(_PAST)
            pairs.append((f"{en_s} {en_v} .", f"{_HAVE[en_s]} {fr_v} ."))
        else:
            en_v, fr_v = rng.choice(_IMPERATIVES)
            pairs.append((f"{en_v} {rng.choice(['.', '!'])}", f"{fr_v} !"))
    return pairs


def load_fra_eng_text() -> tuple[str, str]:
    """The raw English–French file and a note on where it came from.

    Looks for ``fra-eng/fra.txt`` in the data directory first (used as is), then
    for the verified d2l archive (downloading it when needed). A byte-order mark
    at the start is dropped; a file that is not UTF-8 raises ``ValueError``
    naming it.
    """
    local = find_local("fra-eng")
    if local is not None:
        # name the file, not the machine's path to it (the note is printed on the page)
        return read_utf8(local), "local copy of fra-eng/fra.txt in the data directory"
    archive = fetch("fra-eng")
    member = extract_member(archive, "fra-eng/fra.txt", archive.parent / "fra-eng" / "fra.txt")
    return read_utf8(member), f"d2l archive {archive.name} (sha1 verified)"


class Vocab:
    """Token ↔ index map. Index 0 is ``<unk>``; reserved tokens come next; then
    tokens seen at least ``min_freq`` times, most frequent first (ties broken
    alphabetically, so the order is reproducible)."""

    def __init__(self, tokens: Iterable = (), min_freq: int = 1, reserved_tokens: Sequence[str] = ()):
        min_freq = check_positive_int("min_freq", min_freq)
        flat = [t for item in tokens for t in (item if isinstance(item, (list, tuple)) else [item])]
        self.token_freqs = sorted(collections.Counter(flat).items(), key=lambda kv: (-kv[1], kv[0]))
        self.idx_to_token = [UNK] + [t for t in reserved_tokens if t != UNK]
        seen = set(self.idx_to_token)
        for token, freq in self.token_freqs:
            if freq >= min_freq and token not in seen:
                self.idx_to_token.append(token)
                seen.add(token)
        self.token_to_idx = {t: i for i, t in enumerate(self.idx_to_token)}

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __getitem__(self, tokens):
        """Index of a token (``<unk>``'s index 0 for unknown ones), or a list of indices."""
        if isinstance(tokens, (list, tuple)):
            return [self.__getitem__(t) for t in tokens]
        return self.token_to_idx.get(tokens, 0)

    def to_tokens(self, indices):
        """Token of an id, or a list of tokens for a list, tuple or 1-d tensor of ids.

        Ids must be integers in ``[0, len(self))``: a negative or too large id
        raises ``ValueError`` naming the id and the vocabulary size (instead of
        Python's negative indexing quietly giving a token from the end).
        """
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        if isinstance(indices, (list, tuple)):
            return [self._token(i) for i in indices]
        return self._token(indices)

    def _token(self, index) -> str:
        return self.idx_to_token[check_index("token id", index, len(self.idx_to_token), within="the vocabulary")]

    @property
    def unk(self) -> int:
        return 0


@dataclass
class TranslationData:
    """Padded index arrays for a train/validation split, plus the vocabularies.

    ``arrays`` holds (src, tgt_input, src_valid_len, tgt_label) with shapes
    (n, num_steps), (n, num_steps), (n,), (n, num_steps). ``tgt_input`` is
    ``<bos>`` followed by the target shifted right.
    """

    src_vocab: Vocab
    tgt_vocab: Vocab
    arrays: tuple[torch.Tensor, ...]
    num_train: int
    num_val: int
    num_steps: int
    batch_size: int
    source_note: str
    raw_pairs: list

    def _loader(self, start: int, stop: int, shuffle: bool, seed: int | None = None):
        from torch.utils.data import DataLoader, TensorDataset

        dataset = TensorDataset(*(a[start:stop] for a in self.arrays))
        gen = torch.Generator().manual_seed(resolve_seed(seed))
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, generator=gen)

    def train_loader(self, seed: int | None = None):
        """Shuffled training batches, in an order fixed by ``seed`` (default: the book's seed)."""
        return self._loader(0, self.num_train, shuffle=True, seed=seed)

    def val_loader(self):
        return self._loader(self.num_train, self.num_train + self.num_val, shuffle=False)

    def build(self, src_sentences: Sequence[str], tgt_sentences: Sequence[str] | None = None):
        """Arrays for new raw sentences with the *existing* vocabularies.

        Unknown words map to ``<unk>``. Sentences longer than ``num_steps``
        tokens (``<eos>`` included) are trimmed; an empty sentence becomes just
        ``<eos>``.
        """
        if tgt_sentences is None:
            tgt_sentences = [""] * len(src_sentences)
        if len(src_sentences) != len(tgt_sentences):
            raise ValueError(f"got {len(src_sentences)} source but {len(tgt_sentences)} target sentences")
        src = [tokenize_nmt(preprocess_nmt(s)) for s in src_sentences]
        tgt = [tokenize_nmt(preprocess_nmt(t)) for t in tgt_sentences]
        return _arrays(src, tgt, self.src_vocab, self.tgt_vocab, self.num_steps)


def _pad(tokens: list[str], num_steps: int) -> list[str]:
    return tokens[:num_steps] + [PAD] * max(0, num_steps - len(tokens))


def _arrays(src_tokens, tgt_tokens, src_vocab: Vocab, tgt_vocab: Vocab, num_steps: int):
    src = torch.tensor([src_vocab[_pad(s, num_steps)] for s in src_tokens], dtype=torch.long).reshape(-1, num_steps)
    tgt_full = torch.tensor([tgt_vocab[_pad([BOS] + t, num_steps + 1)] for t in tgt_tokens],
                            dtype=torch.long).reshape(-1, num_steps + 1)
    valid = (src != src_vocab[PAD]).sum(dim=1)
    return src, tgt_full[:, :-1], valid, tgt_full[:, 1:]


def load_translation(batch_size: int = 128, num_steps: int = 9, num_train: int = 512, num_val: int = 128,
                     min_freq: int = 2, pairs: Sequence[tuple[str, str]] | None = None,
                     verbose: bool = True, vocab_from: str = "train") -> TranslationData:
    """English→French data in d2l's format: the first ``num_train`` pairs train,
    the next ``num_val`` validate.

    The vocabularies keep the tokens seen at least ``min_freq`` times (rarer ones
    become ``<unk>``) in the training pairs (``vocab_from="train"``) or, as d2l
    does, in the training *and* validation pairs (``vocab_from="all"``): then a
    word seen once in training and again in validation keeps its own index, but
    the model still learns only from the training pairs.

    ``pairs`` overrides the corpus. Otherwise the real file is used (local copy
    or verified download); if it cannot be had, a visible message says so and the
    code-generated :func:`synthetic_pairs` corpus is used instead.
    """
    batch_size = check_positive_int("batch_size", batch_size)
    num_steps = check_int("num_steps", num_steps, minimum=2)
    num_train = check_positive_int("num_train", num_train)
    num_val = check_int("num_val", num_val, minimum=0)
    min_freq = check_positive_int("min_freq", min_freq)
    if vocab_from not in ("train", "all"):
        raise ValueError(f"vocab_from must be 'train' or 'all', got {vocab_from!r}")
    need = num_train + num_val
    if pairs is not None:
        note = "pairs given by the caller"
    else:
        try:
            text, note = load_fra_eng_text()
            pairs = parse_pairs(text, max_pairs=need, source=note)
        except (DataUnavailableError, OSError) as err:
            pairs = synthetic_pairs(max(need, 640))
            note = f"generated fallback corpus (real data unavailable: {str(err).splitlines()[0]})"
    if len(pairs) < need:
        raise ValueError(f"the corpus has {len(pairs)} pairs but num_train + num_val = {need}")
    pairs = list(pairs[:need])
    src_tokens = [tokenize_nmt(preprocess_nmt(en)) for en, _ in pairs]
    tgt_tokens = [tokenize_nmt(preprocess_nmt(fr)) for _, fr in pairs]
    reserved = (PAD, BOS, EOS)
    counted = num_train if vocab_from == "train" else need
    src_vocab = Vocab([_pad(s, num_steps) for s in src_tokens[:counted]], min_freq, reserved)
    tgt_vocab = Vocab([_pad([BOS] + t, num_steps + 1) for t in tgt_tokens[:counted]], min_freq, reserved)
    arrays = _arrays(src_tokens, tgt_tokens, src_vocab, tgt_vocab, num_steps)
    if verbose:
        print(f"Translation data: {note}\n  {num_train} train + {num_val} validation pairs, "
              f"vocab sizes {len(src_vocab)} (en) / {len(tgt_vocab)} (fr)")
    return TranslationData(src_vocab, tgt_vocab, arrays, num_train, num_val, num_steps, batch_size, note, pairs)


def bleu_parts(pred_seq: str, label_seq: str, k: int = 2) -> dict:
    """Every piece of :func:`bleu`, for a worked example.

    Returns ``{"penalty": exp(min(0, 1 - len_label / len_pred)), "orders": [...]}`` with one
    entry per n = 1..min(k, len_pred): ``{"n", "grams", "matched", "precision", "weight"}``,
    where ``grams`` lists the prediction's n-grams in order, ``matched`` says for each whether
    it used up one occurrence in the label, and ``weight`` is 1 / 2ⁿ.
    """
    k = check_positive_int("k", k)
    for name, seq in (("pred_seq", pred_seq), ("label_seq", label_seq)):
        if not isinstance(seq, str):
            raise TypeError(f"{name} must be a str of space-separated tokens, got {type(seq).__name__}"
                            + (" (join a list of tokens with ' '.join(...))" if isinstance(seq, (list, tuple)) else ""))
    pred, label = pred_seq.split(), label_seq.split()
    if not label:
        raise ValueError("bleu needs a non-empty label sequence")
    if not pred:
        return {"penalty": 0.0, "orders": []}
    parts = {"penalty": math.exp(min(0.0, 1.0 - len(label) / len(pred))), "orders": []}
    for n in range(1, min(k, len(pred)) + 1):
        available = collections.Counter(tuple(label[i:i + n]) for i in range(len(label) - n + 1))
        grams, matched = [], []
        for i in range(len(pred) - n + 1):
            gram = tuple(pred[i:i + n])
            grams.append(" ".join(gram))
            matched.append(available[gram] > 0)
            if matched[-1]:
                available[gram] -= 1
        parts["orders"].append({"n": n, "grams": grams, "matched": matched,
                                "precision": sum(matched) / len(grams), "weight": 0.5 ** n})
    return parts


def bleu(pred_seq: str, label_seq: str, k: int = 2) -> float:
    """BLEU as defined in the chapter: a brevity penalty times n-gram precisions.

        BLEU = exp(min(0, 1 - len_label / len_pred)) · Π_{n=1}^{k} p_n^(1 / 2^n)

    where ``p_n`` is the fraction of the prediction's n-grams that also occur in
    the label (each label n-gram matched at most as often as it occurs). Tokens
    are separated by spaces. n runs up to ``min(k, len_pred)``; an empty
    prediction scores 0. :func:`bleu_parts` returns the pieces. ``pred_seq`` or
    ``label_seq`` that is not a ``str`` (``None``, a list of tokens) raises ``TypeError``
    naming it; an empty label raises ``ValueError``.
    """
    parts = bleu_parts(pred_seq, label_seq, k)
    score = parts["penalty"]
    for order in parts["orders"]:
        score *= order["precision"] ** order["weight"]
    return score
