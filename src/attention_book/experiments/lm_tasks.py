"""Tasks made from the corpus, for fine-tuning and prompting the pretrained models, and their scores.

Labelled tasks for the encoder (:func:`order_task_batch`, :func:`replaced_task_batch`,
scored by ``ab.accuracy(model, batches, scores=model.classify)``; :func:`label_efficiency` fine-tunes
a pretrained encoder and the same architecture from scratch on growing numbers of labelled
examples and returns a :class:`LabelEfficiency`, drawn by :func:`label_efficiency_figure`),
text-to-text tasks for the
encoder–decoder (:func:`text_to_text_batch`, ``TEXT_TASKS``, scored by
:func:`exact_match`) and few-shot prompts for the decoder
(:func:`few_shot_prompts`, scored by :func:`next_word_accuracy`).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..core.config import capped_count, resolve_seed
from ..core.train import IGNORE, accuracy, evaluating, fit
from ..data.tokenizer import Tokenizer
from ..models.decoding import greedy_decode
from ..models.objectives import classification_loss, random_windows

__all__ = [
    "TEXT_TASKS",
    "LabelEfficiency",
    "exact_match",
    "few_shot_prompts",
    "label_efficiency",
    "label_efficiency_figure",
    "next_word_accuracy",
    "order_task_batch",
    "replaced_task_batch",
    "text_to_text_batch",
]


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


@dataclass
class LabelEfficiency:
    """Held-out accuracies of fine-tuning runs against the number of labelled examples.

    ``accuracy[name][i][k]`` is the accuracy of model ``name`` (``'pretrained'`` or
    ``'from scratch'``) fine-tuned on ``counts[i]`` labelled examples with seed
    ``seeds[k]``; ``steps[i]`` is the number of fine-tuning steps of those runs.
    """

    counts: list[int]
    steps: list[int]
    seeds: list[int]
    accuracy: dict[str, list[list[float]]]

    def mean(self, name: str) -> list[float]:
        """Accuracy of ``name`` averaged over the seeds, one value per count."""
        return [sum(row) / len(row) for row in self.accuracy[name]]

    def gaps(self) -> list[list[float]]:
        """Pretrained minus from-scratch accuracy, per count and seed (same labelled examples)."""
        return [[p - s for p, s in zip(pre, scr)]
                for pre, scr in zip(self.accuracy["pretrained"], self.accuracy["from scratch"])]

    def table(self) -> str:
        """The accuracies as printed lines, narrow enough for a phone (40 characters with 5 seeds).

        Per count a heading with the steps and the gain from pretraining (points, the mean over the
        seeds), then one row per start with one accuracy per seed.
        """
        lines = ["held-out accuracy (%), one per seed;", "chance is 50"]
        for i, (n, gaps) in enumerate(zip(self.counts, self.gaps())):
            gain = 100 * sum(gaps) / len(gaps)
            lines += ["", f"{n} labels, {self.steps[i]} steps: gain {gain:+.1f}"]
            for name in ("pretrained", "from scratch"):
                row = " ".join(f"{100 * a:4.1f}" if a < 0.9995 else " 100"  # 4 characters each
                               for a in self.accuracy[name][i])
                lines.append(f"  {name:<12}  {row}")
        return "\n".join(lines)


def _finetune_once(pretrained: nn.Module, start: str, X, Y, val, num_steps: int, seed: int, batch_size: int,
                   lr: float) -> float:
    """Fine-tune a copy of ``pretrained`` (``start='pretrained'``) or a fresh encoder of its config
    (``'from scratch'``) with a new ``<cls>`` head on ``(X, Y)``; returns the accuracy on ``val``."""
    torch.manual_seed(seed)  # from scratch: the same start for every count
    model = copy.deepcopy(pretrained) if start == "pretrained" else type(pretrained)(pretrained.config)
    torch.manual_seed(seed)  # the same new head for both starts
    model.add_classifier(2)
    picks = torch.Generator().manual_seed(seed)  # the same minibatches for both starts
    size = min(len(X), batch_size)
    batches = []
    for _ in range(num_steps):
        idx = torch.randint(0, len(X), (size,), generator=picks)
        batches.append((X[idx], Y[idx]))
    fit(model, batches, classification_loss, epochs=1, lr=lr, clip_grad=1.0, progress=False)
    return accuracy(model, val, scores=model.classify)


def label_efficiency(pretrained: nn.Module, train_ids: torch.Tensor, val_ids: torch.Tensor, tok: Tokenizer, *,
                     counts: Sequence[int], steps: Sequence[int], num_seeds: int, seq_len: int,
                     replace_prob: float, batch_size: int, lr: float, num_val: int) -> LabelEfficiency:
    """What pretraining buys on the tampered-passage task (:func:`replaced_task_batch`), per number of labels.

    ``num_val`` held-out passages are drawn once from ``val_ids`` (generator seeded with the book's
    seed). The runs use ``num_seeds`` seeds, the book's seed plus 1, 2, …. For each seed, one labelled set of ``max(counts)`` passages is drawn from ``train_ids``; a run
    on ``n`` labels uses its first ``n``. For each count two models are fine-tuned for ``steps[i]``
    steps: a copy of ``pretrained`` and a fresh encoder of the same config. Both get the same new
    ``<cls>`` head (the generator is reset to the seed before it is made), the same minibatches of at
    most ``batch_size`` examples and learning rate ``lr``; head and encoder train together.
    Under ``ATTENTION_BOOK_MAX_STEPS`` (the full-size smoke run) at most that many seeds run, each
    scored on at most that many held-out passages.
    """
    task = {"seq_len": seq_len, "replace_prob": replace_prob}
    held_out = torch.Generator().manual_seed(resolve_seed(None))
    val = [replaced_task_batch(val_ids, tok, capped_count(num_val), generator=held_out, **task)]
    acc = {"pretrained": [[] for _ in counts], "from scratch": [[] for _ in counts]}
    seeds = [resolve_seed(None) + 1 + k for k in range(capped_count(num_seeds))]
    for seed in seeds:
        X, Y = replaced_task_batch(train_ids, tok, max(counts), generator=torch.Generator().manual_seed(seed),
                                   **task)
        for i, (n, num_steps) in enumerate(zip(counts, steps)):
            for start in acc:
                acc[start][i].append(_finetune_once(pretrained, start, X[:n], Y[:n], val, num_steps, seed,
                                                    batch_size, lr))
    return LabelEfficiency(list(counts), list(steps), list(seeds), acc)


def label_efficiency_figure(result: LabelEfficiency):
    """Held-out accuracy against the number of labelled examples: one dot per seed, a line through the means."""
    import matplotlib.pyplot as plt

    from ..core.plot import chance_line, ensure_style
    from .data_size import seed_spread

    ensure_style()
    # narrow, so that its text stays legible when a phone shrinks the figure to its width: 4.4 inches
    # with a one-line title came out 499 px wide, its ticks at 8.5 px in a 390 px phone's column (issue 36)
    fig, ax = plt.subplots(figsize=(3.8, 3.8), layout="constrained")
    seed_spread(ax, result.counts, {name: result.accuracy[name] for name in ("pretrained", "from scratch")})
    chance_line(ax, 50)
    ax.set_xlabel("labelled examples for fine-tuning")
    ax.set_ylabel("held-out accuracy (%)")
    ax.set_title("The same encoder,\nwith and without pretraining")
    fig.legend(loc="outside lower center", ncols=1, frameon=False)
    return fig


def pretraining_curves(history, title: str, baseline: float | None = None):
    """A training run's learning curves (``history.plot``) with the unigram ``baseline``, when
    given, as a dotted line, and the legend under the plot (beside it, a phone's copy had
    a narrow plot and its title on three lines, issue 36). Returns the figure."""
    from ..core.plot import chance_line, figure_alt_text, set_alt_text

    fig = history.plot(title=title)
    ax = fig.axes[0]
    if baseline is not None:
        chance_line(ax, baseline, label="unigram baseline")
        ax.legend()
    set_alt_text(fig, figure_alt_text(fig))  # its lines named, as the plot's own legend has them
    ax.get_legend().remove()
    handles, labels = ax.get_legend_handles_labels()
    ncols = 2 if max(map(len, labels)) <= 16 else 1  # two long names side by side: too wide for a phone
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, frameon=False)
    return fig


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


def exact_match(model: nn.Module, batch, tok: Tokenizer) -> float:
    """Share of examples an encoder–decoder answers exactly (greedy decoding).

    Under ``ATTENTION_BOOK_MAX_STEPS`` (the full-size smoke run) only the first that many
    examples are decoded (see :func:`~attention_book.core.config.capped_count`).
    """
    enc, _, labels = batch
    n = capped_count(len(enc))
    enc, labels = enc[:n], labels[:n]
    preds = greedy_decode(model, enc, tok.bos_id, tok.eos_id, labels.shape[1] + 2)
    want = [[t for t in row if t not in (tok.eos_id, IGNORE)] for row in labels.tolist()]
    return sum(p == w for p, w in zip(preds, want)) / len(want)


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


@torch.no_grad()
def next_word_accuracy(model: nn.Module, tok: Tokenizer, prompts: Sequence[str], answers: Sequence[str]) -> float:
    """Share of prompts after which a decoder-only model's most likely next token is the answer.

    Under ``ATTENTION_BOOK_MAX_STEPS`` (the full-size smoke run) only the first that many
    prompts are read (see :func:`~attention_book.core.config.capped_count`).
    """
    if len(prompts) != len(answers) or not prompts:
        raise ValueError(f"need as many answers as prompts (and at least one), got {len(prompts)} and {len(answers)}")
    n = capped_count(len(prompts))
    prompts, answers = prompts[:n], answers[:n]
    with evaluating(model):
        dev = next(model.parameters()).device
        right = 0
        for prompt, answer in zip(prompts, answers):
            ids = torch.tensor([[tok.bos_id] + tok.encode(prompt)], device=dev)[:, -model.max_len:]
            right += int(model(ids)[0, -1].argmax()) == tok.id(answer)
    return right / len(prompts)

