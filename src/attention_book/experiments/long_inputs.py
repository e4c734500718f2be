"""Chapter 4's long-input experiment: where one fixed context vector fails and attention holds.

The *copy task*: the source is a sequence of ``length`` random symbols (drawn
with repetition from ``vocab_size`` symbols, written ``a``, ``b``, ``c``, …),
and the target is the same sequence. Nothing about the task is hard except
remembering: the decoder must write back every symbol in order, so the model
must carry all of them from the encoder to the decoder. The plain
encoder–decoder carries them in one vector of ``num_hiddens`` numbers; the
Bahdanau decoder can look back at the encoder state of every position.

Both models are :func:`~attention_book.models.seq2seq.make_seq2seq` models trained by
the chapter's recipe (:func:`~attention_book.core.train.fit` with the masked loss of
:func:`~attention_book.models.seq2seq.translation_loss`, Adam, gradients clipped),
on sources of every length from ``min_len`` to ``max_len``, and scored by
greedy decoding, one source length at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import nn

from ..core.checks import check_int, check_positive_int
from ..core.config import capped_count, resolve_seed
from ..core.train import model_device
from ..models.seq2seq import greedy_search, make_seq2seq, translation_loss
from ..core.train import History, fit

__all__ = [
    "COPY_PAD",
    "COPY_BOS",
    "COPY_EOS",
    "copy_symbols",
    "make_copy_sequences",
    "copy_batches",
    "train_copy_model",
    "copy_accuracy_by_length",
    "CopyRun",
    "long_input_experiment",
    "long_input_figure",
    "copy_alignment_figure",
    "print_copy_summary",
]

COPY_PAD, COPY_BOS, COPY_EOS = 0, 1, 2  # the symbols of the copy task come after these three ids
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def copy_symbols(ids: Sequence[int] | torch.Tensor) -> list[str]:
    """Token ids of the copy task as text: ``<pad>``, ``<bos>``, ``<eos>``, then ``a``, ``b``, …"""
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    special = {COPY_PAD: "<pad>", COPY_BOS: "<bos>", COPY_EOS: "<eos>"}
    out = []
    for i in ids:
        i = check_int("ids", i, minimum=0)
        k = i - 3
        out.append(special.get(i) or (_LETTERS[k] if k < len(_LETTERS) else f"s{k}"))
    return out


def _check_lengths(min_len: int, max_len: int) -> tuple[int, int]:
    min_len = check_positive_int("min_len", min_len)
    max_len = check_positive_int("max_len", max_len)
    if max_len < min_len:
        raise ValueError(f"max_len must be at least min_len={min_len}, got max_len={max_len}")
    return min_len, max_len


def make_copy_sequences(lengths: Sequence[int], vocab_size: int = 8, seed: int | None = None) -> list[torch.Tensor]:
    """One random symbol sequence (ids ``3 .. vocab_size + 2``) for each entry of ``lengths``.

    ``seed=None`` uses the book's seed. The target of each sequence is itself.
    """
    vocab_size = check_int("vocab_size", vocab_size, minimum=2)
    g = torch.Generator().manual_seed(resolve_seed(seed))
    return [torch.randint(3, 3 + vocab_size, (check_positive_int("lengths", n),), generator=g) for n in lengths]


def _batch(sequences: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """(src, tgt_input, src_valid_len, label): each sequence then ``<eos>``, padded to the longest."""
    steps = max(len(x) for x in sequences) + 1
    src = torch.full((len(sequences), steps), COPY_PAD)
    for row, x in zip(src, sequences):
        row[: len(x)] = x
        row[len(x)] = COPY_EOS
    label = src.clone()  # the target is the source
    # teacher forcing: the decoder reads <bos> and the true target, shifted right by one
    tgt_input = torch.cat((torch.full((len(sequences), 1), COPY_BOS), label[:, :-1]), dim=1)
    valid_len = torch.tensor([len(x) + 1 for x in sequences])
    return src, tgt_input, valid_len, label


def copy_batches(num_batches: int, batch_size: int = 64, min_len: int = 2, max_len: int = 30,
                 vocab_size: int = 8, seed: int | None = None) -> list[tuple[torch.Tensor, ...]]:
    """Training batches of the copy task, source lengths uniform in ``[min_len, max_len]``.

    Each batch holds sources of (nearly) one length, so there is hardly any
    padding: the plain model's context is the state after the last real token,
    not after a run of ``<pad>``. The batches come in a random order.
    Each is ``(src, tgt_input, src_valid_len, label)``, as in translation.
    """
    num_batches = check_positive_int("num_batches", num_batches)
    batch_size = check_positive_int("batch_size", batch_size)
    min_len, max_len = _check_lengths(min_len, max_len)
    seed = resolve_seed(seed)
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (num_batches * batch_size,), generator=g).sort().values
    sequences = make_copy_sequences(lengths.tolist(), vocab_size, seed=seed + 1)
    batches = [_batch(sequences[i:i + batch_size]) for i in range(0, len(sequences), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]


def train_copy_model(attention: str | None, *, vocab_size: int = 8, min_len: int = 2, max_len: int = 30,
                     embed_size: int = 32, num_hiddens: int = 64, num_layers: int = 1, dropout: float = 0.0,
                     steps: int = 300, batch_size: int = 64, lr: float = 0.005, clip_grad: float = 1.0,
                     seed: int | None = None, progress: bool = True, desc: str | None = None,
                     train_steps: int | None = None):
    """Train a copy-task model (``attention=None``: the plain one) for ``steps`` batches.

    The recipe of :func:`~attention_book.experiments.translation.train_translator`: Adam at
    ``lr``, gradient norm clipped at ``clip_grad``, the masked cross-entropy
    with teacher forcing. ``seed`` (``None``: the book's seed) fixes the
    batches and the initial weights, so the two models of one seed see the same
    data in the same order. ``train_steps`` (``None``: all ``steps``) trains on only
    the first ``train_steps`` of those batches. Returns ``(model, history)``.
    Under ``ATTENTION_BOOK_MAX_STEPS`` only the batches the capped run uses are drawn.
    """
    seed = resolve_seed(seed)
    batches = copy_batches(capped_count(steps), batch_size, min_len, max_len, vocab_size, seed=seed)
    if train_steps is not None:
        batches = batches[:check_positive_int("train_steps", train_steps)]
    torch.manual_seed(seed)
    model = make_seq2seq(vocab_size + 3, vocab_size + 3, embed_size, num_hiddens, num_layers, dropout,
                         attention=attention)
    name = desc or ("no attention" if attention is None else "attention")
    history = fit(model, batches, translation_loss(COPY_PAD), epochs=1, lr=lr, clip_grad=clip_grad,
                  progress=progress, desc=name)
    return model, history


@torch.no_grad()
def copy_accuracy_by_length(model: nn.Module, lengths: Sequence[int], per_length: int = 50, vocab_size: int = 8,
                            seed: int | None = None) -> dict[int, float]:
    """Token accuracy of greedy copies, for each source length in ``lengths``.

    For each length, ``per_length`` new random sequences (drawn from ``seed``,
    by default the book's seed; offset by 1000 from the training batches) are
    decoded greedily in one batch with no padding. Position ``k`` of a copy is
    right when the ``k``-th output token is the ``k``-th source token (an
    output that stops early is wrong at the positions it missed). Chance is
    ``1 / vocab_size``. Under ``ATTENTION_BOOK_MAX_STEPS`` each length decodes at most
    that many sequences (every length is still scored).
    """
    per_length = capped_count(check_positive_int("per_length", per_length))
    base = resolve_seed(seed) + 1000  # away from the training batches' seeds
    dev = model_device(model)
    scores = {}
    for n in lengths:
        n = check_positive_int("lengths", n)
        sequences = make_copy_sequences([n] * per_length, vocab_size, seed=base + n)
        src, _, valid_len, _ = _batch(sequences)
        out, _ = greedy_search(model, src.to(dev), valid_len.to(dev), COPY_BOS, COPY_EOS, n + 1)
        right = sum(sum(1 for k, t in enumerate(pred[:n]) if t == int(x[k])) for pred, x in zip(out, sequences))
        scores[n] = right / (n * per_length)
    return scores


@dataclass
class CopyRun:
    """The two models of one seed and their accuracy by source length."""

    seed: int
    models: dict[str, nn.Module]
    histories: dict[str, History]
    accuracy: dict[str, dict[int, float]] = field(default_factory=dict)
    seconds: float = 0.0


_VARIANTS = {"no attention": None, "attention": "additive"}


def long_input_experiment(num_seeds: int = 3, seed: int | None = None, per_length: int = 50,
                          progress: bool = True, attention_steps: int | None = None,
                          **config) -> list[CopyRun]:
    """Train both models (no attention, additive attention) for ``num_seeds`` seeds and score them.

    The seeds are ``seed, seed + 1, …`` (``None``: the book's seed). ``config``
    goes to :func:`train_copy_model` for both models alike. ``attention_steps``
    (``None``: all ``steps``) trains the attention model on only the first
    ``attention_steps`` of the plain model's batches: its loss flattens long
    before the plain model's, and each of its steps costs a loop over the output
    positions, so a shorter run saves most of the experiment's time while it can
    only favour the plain model. Each model is scored
    at every source length from ``min_len`` to ``max_len`` by
    :func:`copy_accuracy_by_length` on the same held-out sequences. Only the
    first seed shows progress bars. Returns one :class:`CopyRun` per seed: at most
    ``ATTENTION_BOOK_MAX_STEPS`` of them when that cap is set (the full-size smoke run).
    """
    num_seeds = capped_count(check_positive_int("num_seeds", num_seeds))
    first = resolve_seed(seed)
    min_len, max_len = _check_lengths(config.get("min_len", 2), config.get("max_len", 30))
    vocab_size = config.get("vocab_size", 8)
    if attention_steps is not None:
        attention_steps = check_positive_int("attention_steps", attention_steps)
    runs = []
    for k in range(num_seeds):
        run = CopyRun(first + k, {}, {})
        for name, attention in _VARIANTS.items():
            model, history = train_copy_model(attention, seed=first + k, progress=progress and k == 0, desc=name,
                                              train_steps=attention_steps if attention else None, **config)
            run.models[name], run.histories[name] = model, history
            run.seconds += history.seconds
            run.accuracy[name] = copy_accuracy_by_length(model, range(min_len, max_len + 1), per_length,
                                                         vocab_size, seed=first)
        runs.append(run)
    return runs


def long_input_figure(runs: Sequence[CopyRun], vocab_size: int = 8):
    """Token accuracy against source length: one thin line per seed and model, the mean in bold, chance dotted."""
    import matplotlib.pyplot as plt

    from ..core.plot import ensure_style, chance_line

    ensure_style()
    if not runs:
        raise ValueError("runs must hold at least one CopyRun, got none")
    fig, ax = plt.subplots(figsize=(5.6, 3.6), layout="constrained")
    for colour, name in zip(("C0", "C3"), _VARIANTS):
        lengths = sorted(runs[0].accuracy[name])
        for run in runs:
            ax.plot(lengths, [100 * run.accuracy[name][n] for n in lengths], color=colour, lw=0.8, alpha=0.45)
        mean = [100 * sum(r.accuracy[name][n] for r in runs) / len(runs) for n in lengths]
        ax.plot(lengths, mean, color=colour, lw=2.2, label=f"{name} (mean of {len(runs)} seeds)")
    chance_line(ax, 100 / vocab_size)
    ax.set_ylim(0, 102)
    ax.set_xlabel("source length (symbols)")
    ax.set_ylabel("tokens copied right (%)")
    ax.set_title("Copying a sequence: one vector vs attention")
    ax.legend(fontsize=8, loc="lower left")
    return fig


def copy_alignment_figure(model: nn.Module, length: int = 16, vocab_size: int = 8, seed: int | None = None,
                       figsize=(4.6, 4.2)):
    """The attention weights of the model while it copies one random held-out sequence of ``length``.

    Rows are the output steps (the last one produced ``<eos>``, if it did),
    columns the source symbols and ``<eos>``. A model that copies by looking
    back puts its weight near the diagonal. Returns the figure.
    """
    from ..core.plot import heatmaps_figure

    length = check_positive_int("length", length)
    (x,) = make_copy_sequences([length], vocab_size, seed=resolve_seed(seed) + 2000 + length)
    src, _, valid_len, _ = _batch([x])
    dev = model_device(model)
    out, steps = greedy_search(model, src.to(dev), valid_len.to(dev), COPY_BOS, COPY_EOS, length + 1,
                               save_attention=True)
    rows = [step[-1][0, 0] for step in steps[: len(out[0]) + 1] if step and step[-1] is not None]
    if not rows:
        raise ValueError("the model's decoder exposed no attention weights (is it the plain model?)")
    weights = torch.stack(rows).cpu()
    source = copy_symbols(src[0])
    output = copy_symbols(out[0]) + (["<eos>"] if weights.shape[0] > len(out[0]) else [])
    right = sum(1 for k, t in enumerate(out[0][:length]) if t == int(x[k]))
    fig = heatmaps_figure(weights.reshape(1, 1, *weights.shape), xlabel="keys: source symbols",
                        ylabel="queries: output symbols", xticklabels=source, yticklabels=output, figsize=figsize)
    fig.suptitle(f"copying {length} symbols: {right} of {length} right", fontsize=10)
    return fig


def print_copy_summary(spans: dict[str, dict[str, list[float]]]) -> None:
    """Print per-seed copy accuracies, one group of lines per model, about 40 characters wide.

    ``spans`` maps a label of source lengths (``"2-6"``) to ``{model name: [accuracy per
    seed]}``; each line reads ``lengths 2-6:  98% 97% 99%``.
    """
    names = list(next(iter(spans.values())))
    width = max(len(label) for label in spans)
    for name in names:
        print(name)
        for label, acc in spans.items():
            print(f"  lengths {label + ':':<{width + 1}} " + " ".join(f"{a:.0%}" for a in acc[name]))
