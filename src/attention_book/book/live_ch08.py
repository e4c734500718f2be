"""Chapter 8's live view: draw a digit, see the ViT's class probabilities and where ``<cls>`` looks.

The view runs one ONNX graph, :class:`ViTProbe`: it takes an image at the data
set's own resolution with the data set's pixel values (0..255, as the uint8
images are stored), applies the very transform the training batches use
(:meth:`attention_book.data.images.ImageBatches.transform`: resize, standardise), runs the
trained ViT and returns

* ``probs`` (batch, classes): the softmax of the class scores;
* ``cls_attention`` (batch, rows, cols): the last layer's ``<cls>`` row over the
  patches, heads averaged (:func:`attention_book.models.vit.cls_attention`);
* ``rollout`` (batch, rows, cols): the same row of the attention rollout
  (:func:`attention_book.models.vit.attention_rollout`).

These are the two maps of the chapter's figure. In Jupyter and Colab the same
probe runs in PyTorch behind a form (:meth:`DigitView.widget`); on the website the
page (``book/_static/live/ch08.mjs``) turns the reader's drawing into those input
pixels the way the data set was made, and runs the exported graph.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..core.plot import PAGE_FIGURE_WIDTH, use_book_style
from ..core.train import evaluating
from ..data.images import ImageBatches
from ..models.attention import MultiHeadAttention
from ..models.vit import ViT, attention_rollout, cls_attention
from .live import MAX_MODEL_BYTES, LiveView, figure_img

__all__ = ["DigitView", "ViTProbe", "ch08_live_view", "probe_figure"]

# The 8x8 digits were made from 32x32 binary bitmaps by counting the ink pixels in each
# 4x4 block (0..16); the page draws a bitmap of (block x native) pixels and counts the same way.
BLOCK = 4
# The graph's outputs, in the order ViTProbe returns them.
OUTPUTS = ("probs", "cls_attention", "rollout")


class ViTProbe(nn.Module):
    """pixels (batch, channels, h, w), values 0..255 at the data's own size -> (probs, cls_attention, rollout).

    A copy of ``model`` in eval mode whose attention modules keep their weights, behind
    the transform of ``batches`` (an :class:`attention_book.data.images.ImageBatches`), so the graph
    sees exactly what the training batches fed the model.
    """

    def __init__(self, model: nn.Module, batches):
        super().__init__()
        if not isinstance(model, ViT) or model.pool != "cls":
            raise ValueError(
                f"the probe needs an ab.ViT with a <cls> token, got {type(model).__name__}"
            )
        self.model = copy.deepcopy(model).cpu().eval()
        # The explicit path in every attention module: its weights become graph outputs.
        for module in self.model.modules():
            if isinstance(module, MultiHeadAttention):
                module.need_weights = True
        # Only the transform is needed: an empty set of images with the same settings.
        channels, height, width = batches.images.shape[1:]
        self.batches = ImageBatches(
            torch.zeros(0, channels, height, width, dtype=torch.uint8),
            torch.zeros(0, dtype=torch.long),
            1,
            batches.img_size,
            mean=batches.mean,
            std=batches.std,
            device="cpu",
        )
        self.native = (int(height), int(width))
        self.in_channels = int(channels)
        self.eval()  # no dropout, in the graph and in the notebook's form alike

    def forward(self, pixels: torch.Tensor):
        X = self.batches.transform(pixels)
        probs = F.softmax(self.model(X), dim=-1)
        maps = torch.stack([blk.attention.attention_weights for blk in self.model.blks])
        grid = self.model.grid_size
        rollout = attention_rollout(maps)[:, 0, 1:].reshape(-1, *grid)
        return probs, cls_attention(maps, grid), rollout

    @torch.no_grad()
    def answer(self, pixels) -> dict[str, np.ndarray]:
        """The probe's outputs for one image given as an (h, w) array of 0..255 values."""
        image = torch.as_tensor(np.asarray(pixels, dtype=np.float32))
        if tuple(image.shape) != self.native:
            raise ValueError(
                f"pixels must have shape {self.native} (the data set's images), got {tuple(image.shape)}"
            )
        with evaluating(self):
            out = self(image.expand(1, self.in_channels, *self.native))
        return {k: v[0].numpy() for k, v in zip(OUTPUTS, out)}


def _heat(ax, image: np.ndarray, heat: np.ndarray) -> None:
    """``image`` in grey with ``heat`` stretched to its own range laid over it, as the chapter's figure."""
    h, w = image.shape
    ax.imshow(image, cmap="gray", extent=(0, w, h, 0), vmin=0, vmax=255)
    span = float(heat.max() - heat.min())
    ax.imshow(
        (heat - heat.min()) / (span if span > 0 else 1.0),
        cmap="inferno",
        alpha=0.6,
        extent=(0, w, h, 0),
        interpolation="nearest",
        vmin=0,
        vmax=1,
    )
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def probe_figure(probe: ViTProbe, pixels, classes, title: str = ""):
    """One image: its last-layer and rollout ``<cls>`` maps, and the class probabilities as bars."""
    import matplotlib.pyplot as plt

    image = np.asarray(pixels, dtype=np.float32)
    out = probe.answer(image)
    use_book_style()
    fig = plt.figure(figsize=(PAGE_FIGURE_WIDTH, 2.6), layout="constrained")
    grid = fig.add_gridspec(1, 3, width_ratios=[1.0, 1.0, 1.6])
    for col, (key, what) in enumerate(
        (("cls_attention", "last layer"), ("rollout", "rollout"))
    ):
        ax = fig.add_subplot(grid[0, col])
        _heat(ax, image, out[key])
        ax.set_title(f"<cls> attention: {what}", fontsize=9)
    bars = fig.add_subplot(grid[0, 2])
    probs = out["probs"]
    best = int(probs.argmax())
    bars.barh(
        range(len(classes)),
        probs,
        color=["C3" if k == best else "C0" for k in range(len(classes))],
    )
    bars.set_yticks(range(len(classes)), [str(c) for c in classes], fontsize=8)
    bars.invert_yaxis()
    bars.set_xlim(0, 1)
    bars.set_xlabel("probability")
    bars.set_title(
        title or f"prediction: {classes[best]} ({probs[best]:.0%})", fontsize=9
    )
    return fig


class DigitView(LiveView):
    """Draw (website) or pick (Jupyter) an image; the trained ViT's probabilities and ``<cls>`` maps."""

    name = "ch08.draw"
    module = "ch08.mjs"

    def __init__(self, model: nn.Module, data, num_examples: int = 4):
        self.probe = ViTProbe(model, data.test)
        self.classes = tuple(str(c) for c in data.classes)
        self.dataset = data.name
        self.train_size = len(data.train.labels)
        images, labels = data.test.images, data.test.labels
        if images.shape[1] != 1:
            raise ValueError(
                f"the drawing view takes greyscale images, got {images.shape[1]} channels"
            )
        # The first test image of each of the first classes: the page's and the form's examples.
        picks = [
            int(torch.nonzero(labels == k)[0])
            for k in range(min(num_examples, len(self.classes)))
            if bool((labels == k).any())
        ]
        self.examples = [
            (self.classes[int(labels[i])], images[i, 0].numpy().astype(np.float32))
            for i in picks
        ]
        self.test_images, self.test_labels = images, labels

    def weight_bytes(self) -> int:
        """Bytes of the model's float32 weights: about the size of the exported file."""
        return 4 * sum(p.numel() for p in self.probe.parameters())

    def models(self):
        if self.weight_bytes() > MAX_MODEL_BYTES:
            return {}  # too big to send to every reader: the page keeps its frames and says why
        example = torch.from_numpy(self.examples[0][1])[None, None]
        return {"vit": (self.probe, (example,), None, list(OUTPUTS))}

    def data(self) -> dict:
        h, w = self.probe.native
        return {
            "dataset": self.dataset,
            "train_size": self.train_size,
            "too_large": (
                f"This model's weights take {self.weight_bytes() / 1e6:.1f} MB, more than a page "
                f"may load ({MAX_MODEL_BYTES / 1e6:.0f} MB), so it does not run here; "
                "the frames above show it on test images."
            )
            if self.weight_bytes() > MAX_MODEL_BYTES
            else "",
            "classes": list(self.classes),
            "native": [h, w],
            "block": BLOCK,
            "grid": list(self.probe.model.grid_size),
            "img_size": list(self.probe.batches.img_size),
            "examples": [
                {"label": label, "pixels": pixels.astype(int).ravel().tolist()}
                for label, pixels in self.examples
            ],
        }

    def fallback_html(self) -> str:
        parts = [
            figure_img(
                probe_figure(self.probe, pixels, self.classes),
                f"test image of a {label}: the ViT's probabilities and where its "
                "&lt;cls&gt; token looks",
                dpi=70,
            )
            for label, pixels in self.examples
        ]
        return '<div class="ab-live-frames">' + "".join(parts) + "</div>"

    def widget(self):
        import ipywidgets as widgets
        import matplotlib.pyplot as plt

        n = len(self.test_labels)
        note = widgets.HTML(
            "<p>Pick a test image, shift it or add noise; the website's version of this "
            "cell lets you draw your own digit.</p>"
        )

        def show(index: int, shift_right: int, shift_down: int, noise: float):
            image = self.test_images[index, 0].float()
            image = _shifted(image, shift_down, shift_right)
            if noise > 0:
                generator = torch.Generator().manual_seed(index)
                image = (
                    image + noise * 255 * torch.randn(image.shape, generator=generator)
                ).clamp(0, 255)
            title = f"true {self.classes[int(self.test_labels[index])]}"
            out = self.probe.answer(image.numpy())
            best = int(out["probs"].argmax())
            probe_figure(
                self.probe,
                image.numpy(),
                self.classes,
                title=f"{title}, predicted {self.classes[best]} ({out['probs'][best]:.0%})",
            )
            plt.show()

        form = widgets.interactive(
            show,
            index=widgets.IntSlider(0, 0, n - 1, description="test image"),
            shift_right=widgets.IntSlider(0, -2, 2, description="shift right"),
            shift_down=widgets.IntSlider(0, -2, 2, description="shift down"),
            noise=widgets.FloatSlider(
                0.0, min=0.0, max=0.5, step=0.05, description="noise"
            ),
        )
        return widgets.VBox([note, form])


def _shifted(image: torch.Tensor, down: int, right: int) -> torch.Tensor:
    """``image`` (h, w) moved by whole pixels, the uncovered border black (0)."""
    h, w = image.shape
    out = torch.zeros_like(image)
    src = image[max(0, -down) : h - max(0, down), max(0, -right) : w - max(0, right)]
    out[
        max(0, down) : max(0, down) + src.shape[0],
        max(0, right) : max(0, right) + src.shape[1],
    ] = src
    return out


def ch08_live_view(model: nn.Module, data, num_examples: int = 4) -> DigitView:
    """Chapter 8's live view of a trained ``ViT`` and its ``ab.data.images.ImageData``."""
    return DigitView(model, data, num_examples)
