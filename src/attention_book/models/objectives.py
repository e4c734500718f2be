"""The three self-supervised objectives: masking, batches, losses and their scores.

* corruption: :func:`mask_for_mlm` (BERT's 15 % / 80-10-10 masking),
  :func:`corrupt_spans` (T5's span corruption, undone by :func:`restore_spans`);
  causal language modelling needs none;
* batches of random windows of a token stream: :func:`mlm_batch`,
  :func:`span_batch`, :func:`clm_batch`, drawn afresh each pass by :class:`Batches`;
* losses in the form ``ab.fit`` wants (one batch -> (mean loss, number of
  targets)): :func:`mlm_loss`, :func:`seq2seq_loss`, :func:`clm_loss`,
  :func:`classification_loss`, averaged by :func:`evaluate_loss`;
* the unigram baseline every loss is compared with (:func:`unigram_baseline`) and
  per-objective scores (:func:`masked_accuracy`, :func:`next_token_accuracy`,
  :func:`fill_masks`, :func:`span_loss_parts`).

Label tensors use ``IGNORE = -100`` (PyTorch's ``ignore_index``) for positions
without a target.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ..core.config import resolve_seed
from ..data.tokenizer import Tokenizer
from ..core.train import IGNORE, capped_batches, evaluating, move_to

__all__ = [
    "mask_for_mlm", "span_lengths", "corrupt_spans", "restore_spans",
    "random_windows", "mlm_batch", "span_batch", "clm_batch", "Batches",
    "mlm_loss", "seq2seq_loss", "clm_loss", "classification_loss", "evaluate_loss",
    "unigram_cross_entropy", "unigram_baseline",
    "masked_accuracy", "next_token_accuracy", "fill_masks", "span_loss_parts",
]



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
    selected = eligible & (u < select_prob)  # the selected positions, the set M of L_MLM
    action = torch.rand(tokens.shape, generator=generator, device=dev)
    random_pick = replace_ids[torch.randint(len(replace_ids), tokens.shape, generator=generator, device=dev)]
    inputs = torch.where(selected & (action < 0.8), torch.full_like(tokens, mask_id), tokens)  # x~: 80% <mask>
    inputs = torch.where(selected & (action >= 0.8) & (action < 0.9), random_pick, inputs)  # 10% random, 10% kept
    labels = torch.where(selected, tokens, torch.full_like(tokens, IGNORE))  # targets x_i for i in M only
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
    dev = next(model.parameters()).device
    total, count = 0.0, 0
    with evaluating(model):
        for batch in capped_batches(batches):
            loss, n = loss_fn(model, move_to(batch, dev))
            total += float(loss) * n
            count += n
    if count == 0:
        raise ValueError("the batches hold no targets")
    return total / count


@torch.no_grad()
def masked_accuracy(model: nn.Module | None, batches, constant: int | None = None) -> float:
    """Share of masked-LM targets predicted exactly (arg-max); ``model=None`` with ``constant`` scores
    the guess "always token ``constant``" instead."""
    right = total = 0
    for inputs, labels in capped_batches(batches):
        sel = labels != IGNORE
        if model is None:
            if constant is None:
                raise ValueError("pass a model, or model=None with constant=<token id>")
            pred = torch.full_like(labels, constant)
        else:
            with evaluating(model):
                pred = model(inputs.to(next(model.parameters()).device)).argmax(dim=-1).cpu()
        right += int((pred[sel] == labels[sel]).sum())
        total += int(sel.sum())
    return right / max(total, 1)


def next_token_accuracy(model: nn.Module | None, batches, constant: int | None = None) -> float:
    """Share of causal-LM targets (the next token at every position) predicted exactly (arg-max).

    ``batches`` yields ``(inputs, labels)`` as :func:`clm_batch` makes them; the
    inputs are moved to the model's device. It is :func:`masked_accuracy`'s count,
    on batches where every label is a target; ``model=None`` with ``constant``
    scores the guess "always token ``constant``" instead.
    """
    return masked_accuracy(model, batches, constant)


@torch.no_grad()
def fill_masks(model: nn.Module, tok: Tokenizer, text: str, top: int = 3) -> list[list[tuple[str, float]]]:
    """An encoder-only model's ``top`` guesses (word, probability) for every ``<mask>`` in ``text``."""
    ids = [tok.cls_id] + tok.encode(text)
    where = [i for i, t in enumerate(ids) if t == tok.mask_id]
    if not where:
        raise ValueError(f"text must contain at least one <mask>, got {text!r}")
    x = torch.tensor([ids], device=next(model.parameters()).device)
    with evaluating(model):
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
    with evaluating(model):
        dev = next(model.parameters()).device
        structure = torch.tensor(tok.sentinel_ids + (tok.eos_id,))
        sums = {"structure": [0.0, 0], "words": [0.0, 0]}
        for enc, dec, labels in capped_batches(batches):
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

