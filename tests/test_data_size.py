"""Chapter 8's data-size sweep: nested training subsets, the step budget, the results and their figure."""

import matplotlib
import pytest
import torch

from attention_book.data.images import ImageBatches
from attention_book.experiments import data_size

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def batches():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (50, 1, 8, 8), generator=g, dtype=torch.uint8)
    labels = torch.arange(50) % 10
    return ImageBatches(images, labels, batch_size=8, img_size=16, shuffle=True, seed=0, device="cpu")


def _pairs(subset):
    return {(bytes(img.numpy()), int(y)) for img, y in zip(subset.images, subset.labels)}


def test_a_larger_subset_holds_every_smaller_one(batches):
    small, large = (data_size.training_subset(batches, n, seed=3) for n in (10, 30))
    assert len(small.labels) == 10 and len(large.labels) == 30
    assert _pairs(small) <= _pairs(large) <= _pairs(batches)
    # another seed draws another order
    assert _pairs(data_size.training_subset(batches, 10, seed=4)) != _pairs(small)
    # the subset keeps the batches' settings: same size of batch and of image, standardised alike
    X, _ = next(iter(large))
    assert X.shape == (8, 1, 16, 16) and large.shuffle


@pytest.mark.parametrize("size", [0, 51])
def test_a_subset_size_outside_the_data_is_refused(batches, size):
    with pytest.raises(ValueError, match="size must be between 1 and the 50"):
        data_size.training_subset(batches, size, seed=0)


@pytest.mark.parametrize("size, steps, epochs", [(10, 20, 10), (30, 20, 5), (50, 3, 1), (50, 7, 1), (50, 8, 2)])
def test_the_step_budget_is_met_within_one_epoch(batches, size, steps, epochs):
    subset = data_size.training_subset(batches, size, seed=0)
    got = data_size.epochs_for(subset, steps)
    assert got == epochs
    assert got * len(subset) >= steps > (got - 1) * len(subset)


def test_means_and_gaps_follow_the_seeds():
    result = data_size.DataSizeSweep(
        sizes=[10, 100], steps=5, seeds=[1, 2],
        accuracy={"ViT": [[0.5, 0.7], [0.8, 0.9]], "CNN": [[0.8, 0.8], [0.9, 0.9]]},
    )
    assert result.mean("ViT") == pytest.approx([0.6, 0.85])
    gaps = result.gaps("CNN", "ViT")
    assert gaps == [pytest.approx([0.3, 0.1]), pytest.approx([0.1, 0.0])]


def test_the_figure_draws_every_seed_and_the_means():
    result = data_size.DataSizeSweep(
        sizes=[10, 100, 1000], steps=5, seeds=[1, 2, 3],
        accuracy={"ViT": [[0.5, 0.6, 0.7]] * 3, "CNN": [[0.8, 0.8, 0.9]] * 3},
    )
    fig = data_size.data_size_figure(result)
    ax = fig.axes[0]
    dots = sum(len(c.get_offsets()) for c in ax.collections)
    assert dots == 2 * 3 * 3
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["ViT (mean of 3 seeds)", "CNN (mean of 3 seeds)", "chance"]
    means = ax.get_lines()[1].get_ydata()
    assert list(means) == pytest.approx([100 * (0.8 + 0.8 + 0.9) / 3] * 3)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "100", "1,000"]
