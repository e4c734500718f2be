"""Chapter 8's data-size sweep: the ViT and the small CNN trained on growing training sets.

The ViT paper's "with enough data" meant tens to hundreds of millions of images; a CPU
can only show the small end of that curve. Chapter 8 writes the sweep's loop on the
page: for each seed it draws one order of the training set, and a run on ``n`` images
trains on the first ``n`` of that order (:func:`training_subset`) for about the same
number of steps whatever ``n`` is (:func:`epochs_for`). :class:`DataSizeSweep` holds
the test accuracies, :func:`data_size_figure` draws them: one dot per seed, a line
through the means. :func:`seed_spread` draws such dots and lines for any sweep
(chapter 9's label-efficiency figure uses it too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..data.images import ImageBatches

__all__ = ["DataSizeSweep", "data_size_figure", "epochs_for", "seed_spread", "training_subset"]


def training_subset(batches: ImageBatches, size: int, seed: int) -> ImageBatches:
    """The first ``size`` images of a random order of ``batches`` (fixed by ``seed``), shuffled
    every epoch from ``seed``: with the same seed a larger subset contains every smaller one."""
    n = len(batches.labels)
    if not 1 <= size <= n:
        raise ValueError(f"size must be between 1 and the {n} training images, got {size}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:size]
    return ImageBatches(batches.images[order], batches.labels[order], batches.batch_size,
                        batches.img_size, shuffle=True, seed=seed, mean=batches.mean,
                        std=batches.std, device=batches.device)


def epochs_for(batches: ImageBatches, steps: int) -> int:
    """Epochs that give at least ``steps`` minibatches (and at most one epoch more)."""
    return max(1, math.ceil(steps / len(batches)))


@dataclass
class DataSizeSweep:
    """Test accuracies against the number of training images.

    ``accuracy[name][i][k]`` is the test accuracy of model ``name`` trained on the
    first ``sizes[i]`` images of the order drawn with ``seeds[k]``, for about
    ``steps`` minibatches.
    """

    sizes: list[int]
    steps: int
    seeds: list[int]
    accuracy: dict[str, list[list[float]]]

    def mean(self, name: str) -> list[float]:
        """Accuracy of ``name`` averaged over the seeds, one value per size."""
        return [sum(row) / len(row) for row in self.accuracy[name]]

    def gaps(self, first: str, second: str) -> list[list[float]]:
        """``first`` minus ``second``, per size and seed (the same images for both)."""
        return [[a - b for a, b in zip(rows_a, rows_b)]
                for rows_a, rows_b in zip(self.accuracy[first], self.accuracy[second])]


def seed_spread(ax, xs: Sequence[float], accuracy: dict[str, list[list[float]]], markers: str = "os"):
    """One dot per seed and a line through the means of each model, on a log-2 x axis.

    ``accuracy[name][i]`` holds the values of every seed at ``xs[i]`` (in [0, 1];
    drawn in %). The dots of the models are nudged apart so that none hides another.
    """
    for c, (name, rows) in enumerate(accuracy.items()):
        marker = markers[c % len(markers)]
        for x, values in zip(xs, rows):
            k = len(values)
            shift = [2 ** (0.05 * (j - (k - 1) / 2) + (0.04 if c else -0.04)) for j in range(k)]
            ax.scatter([x * f for f in shift], [100 * v for v in values], color=f"C{c}", alpha=0.45,
                       s=18, marker=marker)
        means = [100 * sum(v) / len(v) for v in rows]
        ax.plot(xs, means, color=f"C{c}", marker=marker,
                label=f"{name} (mean of {len(rows[0])} seeds)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(xs), [f"{x:,}" for x in xs])
    ax.minorticks_off()


def data_size_figure(result: DataSizeSweep, chance: float = 10.0):
    """Test accuracy against the number of training images: one dot per seed, a line through the means."""
    import matplotlib.pyplot as plt

    from ..core.plot import chance_line, ensure_style

    ensure_style()
    # narrow, so that its text stays legible when a phone shrinks the figure to its width
    fig, ax = plt.subplots(figsize=(4.4, 3.6), layout="constrained")
    seed_spread(ax, result.sizes, result.accuracy)
    chance_line(ax, chance)
    # text a size larger than the style's: a phone shows this figure at three quarters
    ax.set_xlabel("training images", fontsize=11)
    ax.set_ylabel("test accuracy (%)", fontsize=11)
    ax.tick_params(labelsize=10)
    ax.set_title(f"About {result.steps} steps at every size")
    fig.legend(loc="outside lower center", ncols=1, frameon=False, fontsize=11)
    return fig
