"""Scaling laws in miniature: power-law fits, a scaling study of decoder-only models, its figure.

:func:`fit_power_law` fits ``L = c · x^(-α)``; :func:`scaling_experiment` trains
one :class:`~attention_book.DecoderOnlyLM` per size on the same batches and
returns :class:`ScalingRun` records; :func:`scaling_law_figure` draws loss against
parameters and against compute (``C ≈ 6 N D``, with ``N`` from
:func:`non_embedding_parameters`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from torch import nn

from ..core.config import resolve_seed
from ..data.corpus import Corpus
from ..models.language_models import DecoderOnlyLM
from ..models.objectives import Batches, clm_batch, clm_loss, evaluate_loss
from ..models.transformer import TransformerDecoder

__all__ = [
    "PowerLaw",
    "ScalingRun",
    "fit_power_law",
    "larger_wins_at_equal_compute",
    "non_embedding_parameters",
    "scaling_experiment",
    "scaling_law_figure",
]


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
    from ..core.config import seed_everything
    from ..core.train import fit

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
                      evaluate=lambda m: {"val loss": evaluate_loss(m, clm_loss, val)},
                      progress=progress, desc=f"d={num_hiddens} x{num_blks}")
        n = non_embedding_parameters(model)
        # Steps taken by each checkpoint (fewer than planned in the last when ATTENTION_BOOK_MAX_STEPS cut the run).
        done = [min(steps // checkpoints * (e + 1), history.steps) for e in range(len(history.metrics["val loss"]))]
        tokens = [batch_size * seq_len * k for k in done]
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


def _tick_label(v: float, _pos=None) -> str:
    """A log axis's tick: thousands written out (20,000), millions and more as m·10^k."""
    if v < 1e6:
        return f"{v:,.0f}" if v >= 1 else f"{v:g}"
    exp = math.floor(math.log10(v) + 1e-9)
    mant = round(v / 10**exp, 3)
    return f"$10^{{{exp}}}$" if mant == 1 else f"${mant:g}\\cdot10^{{{exp}}}$"


def _few_log_ticks(ax, axis: str, most: int = 4) -> None:
    """At most ``most`` labelled ticks (1, 2, 5 × 10^k, thinned to every other one while too many) on a
    log axis, so that its labels never run into each other."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    target = ax.xaxis if axis == "x" else ax.yaxis
    low, high = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    ticks = [t for t in LogLocator(base=10, subs=(1.0, 2.0, 5.0)).tick_values(low, high) if low <= t <= high]
    while len(ticks) > most:
        ticks = ticks[::2]
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(_tick_label))
    target.set_minor_formatter(NullFormatter())


def scaling_law_figure(runs: Sequence[ScalingRun], baseline: float | None = None):
    """Loss against parameters (final checkpoint, top) and against compute (every checkpoint, below),
    log–log, each with a fitted power law. Drawn at the width of the page's column, one panel above the
    other, so its text is read at full size. Returns the figure; the fits are in ``fig.fits``."""
    from ..core.plot import ensure_style

    if len(runs) < 2:
        raise ValueError(f"a scaling figure needs at least two runs, got {len(runs)}")
    ensure_style()
    fig = _scaling_axes(runs, baseline, figsize=(6.2, 7.0))
    # a phone's copy drawn again, as wide as its column at 100 dpi and tall, each panel with its y label:
    # re-laid out from this figure, the top panel came out about 60 px high, one y label for both (issue 36)
    fig._ab_phone_drawing = lambda: _scaling_axes(runs, baseline, figsize=(3.3, 8.6))
    return fig


def _scaling_axes(runs: Sequence[ScalingRun], baseline: float | None, figsize: tuple[float, float]):
    """:func:`scaling_law_figure` drawn at ``figsize`` (inches)."""
    import matplotlib.pyplot as plt

    from ..core.plot import readable_log_axis

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=figsize, layout="constrained")
    params = [r.params for r in runs]
    final = [r.val_loss[-1] for r in runs]
    law_n = fit_power_law(params, final)
    xs = np.geomspace(min(params) * 0.8, max(params) * 1.25, 50)
    ax1.plot(params, final, "o", color="tab:blue", label="trained models")
    ax1.plot(xs, law_n(xs), "--", color="tab:blue", label=f"fit: exponent {law_n.exponent:.3f}")
    colours = plt.cm.viridis(np.linspace(0.1, 0.85, len(runs)))
    points = []
    for r, col in zip(runs, colours):
        ax2.plot(r.compute, r.val_loss, "-o", color=col, markersize=4, label=r.label)
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
        ax.set_ylabel("validation loss\n(nats / token)")
    for ax in (ax1, ax2):
        readable_log_axis(ax, "y")
        _few_log_ticks(ax, "x")
    ax1.legend(loc="lower left")
    # Under the plots, not in them: the lower panel's legend (a line per model, the fit, the baseline)
    # covered the curves, on a phone most of them (issue 36). One column: with two the phone copy
    # came out too wide, so a phone showed the desktop figure scrolling sideways.
    fig.legend(*ax2.get_legend_handles_labels(), loc="outside lower center", ncols=1)
    ax1.set_xlabel("non-embedding parameters N")
    ax1.set_title("same steps, different sizes")
    ax2.set_xlabel("training compute C ≈ 6·N·D (FLOPs)")
    ax2.set_title("loss along training")
    fig.fits = {"params": law_n, "compute": law_c}
    on_front = set(front)
    fig._ab_values = [  # the figure's data for its "values as a table": every model, every checkpoint
        {"caption": "same steps, different sizes: validation loss (nats / token) at the end",
         "corner": "model", "cols": ["N", "loss", "fit"],
         "rows": [r.label for r in runs],
         "cells": [[f"{r.params:,}", f"{r.val_loss[-1]:.3f}", f"{law_n(r.params):.3f}"] for r in runs]},
        {"caption": "loss along training: validation loss at each checkpoint; * = on the frontier",
         "corner": "model, checkpoint", "cols": ["C (FLOPs)", "loss"],
         "rows": [f"{r.label}, {k + 1}/{len(r.compute)}" for r in runs for k in range(len(r.compute))],
         "cells": [[f"{c:.2e}", f"{v:.3f}{' *' if (c, v) in on_front else ''}"]
                   for r in runs for c, v in zip(r.compute, r.val_loss)]},
    ]
    return fig


def larger_wins_at_equal_compute(runs: Sequence[ScalingRun]) -> list[bool]:
    """For each pair of neighbouring sizes: did the larger model, at some checkpoint that used no more
    compute than the smaller model's last, reach a lower loss than that last one? (Chinchilla's trade-off:
    a larger model trained for fewer steps beating a smaller one trained for longer.)"""
    out = []
    for i in range(1, len(runs)):
        small, large = runs[i - 1], runs[i]
        budget, target = small.compute[-1], small.val_loss[-1]
        out.append(any(c <= budget and v < target for c, v in zip(large.compute, large.val_loss)))
    return out

