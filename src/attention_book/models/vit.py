"""The vision Transformer (Dosovitskiy et al., 2021): images as sequences of patches.

Pieces, in the order the chapter builds them:

* :func:`patchify` cuts images (batch, channels, height, width) into a sequence
  of flattened patches; :class:`PatchEmbedding` does the cut *and* the linear
  projection in one strided convolution (the two agree exactly, see the tests).
* :class:`ViTMLP`, :class:`ViTBlock` (pre-normalisation) and :class:`ViT`, with
  a learned ``<cls>`` token (or mean pooling) and learned positional embeddings.
  Attention is :class:`attention_book.MultiHeadAttention`: the fused kernel
  unless its maps are asked for; :meth:`ViT.attention_maps` records them
  (:func:`attention_book.record_attention`).
* :func:`attention_rollout` (Abnar & Zuidema, 2020) follows attention through
  all layers back to the input patches.
* The data the chapter trains on lives in :mod:`attention_book.data.images`:
  Fashion-MNIST through the data registry (four IDX files, read by
  ``attention_book.data.images.read_idx``) and scikit-learn's 8x8 digits for
  offline CPU runs, both served by ``attention_book.data.images.ImageBatches``,
  which resizes every batch on the fly, on the training device
  (``ab.load_image_data`` builds both).
* :class:`SmallCNN`, the convolutional baseline trained on the same data.
* Figures: :func:`patch_grid_figure` (the patch-size slider) and
  :func:`cls_attention_figure` (where ``<cls>`` looks).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .attention import record_attention
from .transformer import PositionWiseFFN, TransformerEncoderBlock
from ..core.checks import (check_divisible, check_dropout, check_heads, check_positive_int, check_same_device,
                            check_size_pair)
from ..core.train import evaluating, model_device

__all__ = [
    "patchify",
    "PatchEmbedding",
    "ViTMLP",
    "ViTBlock",
    "ViT",
    "attention_rollout",
    "cls_attention",
    "SmallCNN",
    "image_classification_loss",
    "count_parameters",
    "sample_photo",
    "attention_cost",
    "patch_grid_figure",
    "cls_attention_figure",
]


# --- patches ------------------------------------------------------------------------


def patchify(X: torch.Tensor, patch_size) -> torch.Tensor:
    """Cut images into a sequence of flattened patches.

    ``X`` (batch, channels, height, width) -> (batch, num_patches, channels * ph * pw).
    Patches are numbered row by row (left to right, then top to bottom), and each
    patch is flattened channel first, then patch row, then patch column — the
    order in which a convolution kernel of size (ph, pw) is laid out, so that
    ``patchify(X, p) @ conv.weight.reshape(d, -1).T + conv.bias`` equals the
    strided convolution of :class:`PatchEmbedding`.
    """
    if not isinstance(X, torch.Tensor) or X.dim() != 4:
        got = tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__
        raise ValueError(f"X must have shape (batch, channels, height, width), got {got}")
    ph, pw = check_size_pair("patch_size", patch_size)
    b, c, h, w = X.shape
    check_divisible((h, w), (ph, pw))
    rows, cols = h // ph, w // pw
    # (b, c, rows, ph, cols, pw) -> (b, rows, cols, c, ph, pw)
    patches = X.reshape(b, c, rows, ph, cols, pw).permute(0, 2, 4, 1, 3, 5)
    return patches.reshape(b, rows * cols, c * ph * pw)


class PatchEmbedding(nn.Module):
    """Split an image into patches and project each one to ``num_hiddens`` features.

    One convolution whose kernel size and stride both equal the patch size does
    both steps at once: each output position sees exactly one patch, and its
    ``num_hiddens`` output channels are ``num_hiddens`` linear functions of that
    patch. ``img_size`` and ``patch_size`` are an int or a (height, width) pair;
    the image size must be divisible by the patch size.

    ``forward(X)``: (batch, in_channels, height, width) -> (batch, num_patches, num_hiddens).
    """

    def __init__(self, img_size=96, patch_size=16, num_hiddens: int = 512, in_channels: int = 1):
        super().__init__()
        self.img_size = check_size_pair("img_size", img_size)
        self.patch_size = check_size_pair("patch_size", patch_size)
        check_divisible(self.img_size, self.patch_size)
        num_hiddens = check_positive_int("num_hiddens", num_hiddens)
        in_channels = check_positive_int("in_channels", in_channels)
        self.grid_size = (self.img_size[0] // self.patch_size[0], self.img_size[1] // self.patch_size[1])
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.in_channels, self.num_hiddens = in_channels, num_hiddens
        self.conv = nn.Conv2d(in_channels, num_hiddens, kernel_size=self.patch_size, stride=self.patch_size)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        needed = (self.in_channels, *self.img_size)
        if not isinstance(X, torch.Tensor) or X.dim() != 4 or tuple(X.shape[1:]) != needed:
            got = tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__
            raise ValueError(
                f"X must have shape (batch, {needed[0]}, {needed[1]}, {needed[2]}) = (batch, in_channels, "
                f"height, width), got {got}; resize the images to img_size={self.img_size}"
            )
        check_same_device("X", X, self)
        # x_i E + b for every patch i at once: (batch, d, H/p, W/p) -> (batch, m, d)
        return self.conv(X).flatten(2).transpose(1, 2)


# --- the encoder -----------------------------------------------------------------------


class ViTMLP(PositionWiseFFN):
    """The MLP of a ViT block: chapter 7's position-wise FFN with GELU, and dropout after each dense layer.

    dense -> GELU -> dropout -> dense -> dropout. ``num_inputs`` defaults to
    ``mlp_num_outputs`` (in a ViT both are ``num_hiddens``). In a :class:`ViTBlock`
    the last dropout is the one its pre-norm ``AddNorm`` applies to the MLP's output.
    """

    def __init__(self, mlp_num_hiddens: int, mlp_num_outputs: int, dropout: float = 0.5,
                 num_inputs: int | None = None):
        super().__init__(mlp_num_hiddens, mlp_num_outputs, num_inputs, activation="gelu", dropout=dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.dropout2(super().forward(X))


class ViTBlock(TransformerEncoderBlock):
    """A pre-normalisation encoder block: chapter 7's :class:`TransformerEncoderBlock` with
    ``norm_first=True`` and a GELU MLP,

    X <- X + MultiHeadAttention(LN(X)),   X <- X + MLP(LN(X)).

    The layer norm sits *before* each sub-layer, so the residual path from input
    to output is a plain sum (post-normalisation, chapter 7, normalises after it).
    As in d2l's ViT, dropout acts inside the attention and the MLP (after each of its
    dense layers) and not on the attention's output. ``norm_shape`` must be ``num_hiddens``.
    ``attention_weights`` is the (batch, heads, tokens, tokens) map of the last
    forward pass when weights were kept (``ab.record_attention`` or ``ab.keep_attention_weights()``).
    """

    def __init__(self, num_hiddens: int, norm_shape, mlp_num_hiddens: int, num_heads: int,
                 dropout: float, use_bias: bool = False):
        if tuple(torch.Size([norm_shape] if isinstance(norm_shape, int) else norm_shape)) != (num_hiddens,):
            raise ValueError(f"norm_shape must be num_hiddens={num_hiddens}, got {norm_shape!r}")
        # Z' = Z + MultiHead(LN(Z)) and Z'' = Z' + MLP(LN(Z')): the two pre-norm AddNorms
        super().__init__(num_hiddens, mlp_num_hiddens, num_heads, dropout, use_bias, norm_first=True,
                         activation="gelu", ffn_dropout=dropout)
        self.addnorm1.dropout = nn.Identity()  # no dropout on the attention's output


class ViT(nn.Module):
    """Vision Transformer: patch embedding, ``<cls>`` token, learned positions, encoder, head.

    ``pool='cls'`` (d2l's model) classifies from the final representation of
    a learned ``<cls>`` token prepended to the patches; ``pool='mean'`` has no
    ``<cls>`` token and classifies from the average of the patch representations
    (exercise 11.8.2). ``lr`` is kept as ``model.lr`` for the optimiser.

    ``forward(X)``: (batch, in_channels, height, width) -> logits (batch, num_classes).
    """

    def __init__(self, img_size, patch_size, num_hiddens: int, mlp_num_hiddens: int, num_heads: int,
                 num_blks: int, emb_dropout: float, blk_dropout: float, lr: float = 0.1,
                 use_bias: bool = False, num_classes: int = 10, in_channels: int = 1, pool: str = "cls"):
        super().__init__()
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' or 'mean', got {pool!r}")
        num_blks = check_positive_int("num_blks", num_blks)
        num_classes = check_positive_int("num_classes", num_classes)
        check_heads(num_hiddens, num_heads)
        check_positive_int("mlp_num_hiddens", mlp_num_hiddens)
        check_dropout(emb_dropout, "emb_dropout")
        check_dropout(blk_dropout, "blk_dropout")
        self.lr, self.pool, self.num_classes = lr, pool, num_classes
        self.patch_embedding = PatchEmbedding(img_size, patch_size, num_hiddens, in_channels)
        self.num_extra = 1 if pool == "cls" else 0
        num_steps = self.patch_embedding.num_patches + self.num_extra
        self.cls_token = nn.Parameter(torch.zeros(1, 1, num_hiddens)) if pool == "cls" else None
        # Learned positional embeddings, one per token (small random start, as in the ViT paper).
        self.pos_embedding = nn.Parameter(torch.randn(1, num_steps, num_hiddens) * 0.02)
        self.dropout = nn.Dropout(emb_dropout)
        self.blks = nn.Sequential(*[
            ViTBlock(num_hiddens, num_hiddens, mlp_num_hiddens, num_heads, blk_dropout, use_bias)
            for _ in range(num_blks)
        ])
        self.head = nn.Sequential(nn.LayerNorm(num_hiddens), nn.Linear(num_hiddens, num_classes))

    @property
    def grid_size(self) -> tuple[int, int]:
        return self.patch_embedding.grid_size

    def encode(self, X: torch.Tensor) -> torch.Tensor:
        """Token representations after the last block: (batch, num_extra + num_patches, num_hiddens)."""
        check_same_device("X", X, self)
        X = self.patch_embedding(X)  # x_1 E, ..., x_m E
        if self.cls_token is not None:  # [x_cls; x_1 E; ...; x_m E]
            X = torch.cat((self.cls_token.expand(X.shape[0], -1, -1).to(X.dtype), X), dim=1)
        X = self.dropout(X + self.pos_embedding.to(X.dtype))  # Z_0 = [...] + E_pos
        for blk in self.blks:  # N blocks, each keeping the shape (m + 1, d)
            X = blk(X)
        return X

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        H = self.encode(X)
        summary = H[:, 0] if self.pool == "cls" else H.mean(dim=1)  # the final <cls> vector (or the patches' mean)
        return self.head(summary)

    @torch.no_grad()
    def attention_maps(self, X: torch.Tensor) -> torch.Tensor:
        """Every layer's attention: (num_blks, batch, heads, tokens, tokens), from one eval-mode pass.

        With ``pool='cls'`` token 0 is ``<cls>`` and tokens 1.. are the patches row by row.
        The model's train/eval mode is restored afterwards. ``X`` may sit on any device: it
        is moved to the model's, where the maps stay.
        """
        with evaluating(self), record_attention(self) as maps:
            self(X.to(model_device(self)))
        return maps.stacked("self")


def _check_maps(maps: torch.Tensor) -> None:
    if not isinstance(maps, torch.Tensor) or maps.dim() != 5 or maps.shape[-1] != maps.shape[-2]:
        got = tuple(maps.shape) if isinstance(maps, torch.Tensor) else type(maps).__name__
        raise ValueError(f"maps must have shape (layers, batch, heads, tokens, tokens), got {got}")


def attention_rollout(maps: torch.Tensor, residual: bool = True) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each output token draws on each input token.

    ``maps`` (layers, batch, heads, tokens, tokens) as from :meth:`ViT.attention_maps`.
    Per layer the heads are averaged; with ``residual=True`` the residual
    connection is accounted for as ``0.5 * A + 0.5 * I`` (rows renormalised).
    The layers are then chained, ``R = Ā_L ··· Ā_2 Ā_1``, so ``R[b, i, j]`` is
    the share of input token ``j`` in output token ``i``. Returns (batch, tokens, tokens);
    every row sums to one.
    """
    _check_maps(maps)
    A = maps.mean(dim=2)  # (layers, batch, n, n)
    if residual:
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        A = 0.5 * A + 0.5 * eye
        A = A / A.sum(dim=-1, keepdim=True)
    R = A[0]
    for layer in A[1:]:
        R = layer @ R
    return R


def cls_attention(maps: torch.Tensor, grid_size, layer: int = -1) -> torch.Tensor:
    """Attention of ``<cls>`` (token 0) to every patch in one layer, heads averaged: (batch, rows, cols)."""
    _check_maps(maps)
    rows, cols = check_size_pair("grid_size", grid_size)
    if maps.shape[-1] != rows * cols + 1:
        raise ValueError(
            f"maps cover {maps.shape[-1]} tokens but a <cls> token plus a {rows}x{cols} grid needs {rows * cols + 1}"
        )
    return maps[layer].mean(dim=1)[:, 0, 1:].reshape(-1, rows, cols)


# --- the convolutional baseline, training helpers ---------------------------------------


class SmallCNN(nn.Module):
    """A small LeNet-style CNN for the comparison: two conv-BN-ReLU-pool stages and a linear head.

    Adaptive pooling to a 4x4 map lets the same network take any image size.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, channels: Sequence[int] = (16, 32)):
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(), nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(4),
        )
        self.head = nn.Linear(c2 * 16, num_classes)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if X.dim() != 4 or X.shape[-1] < 4 or X.shape[-2] < 4:
            raise ValueError(f"X must have shape (batch, channels, height>=4, width>=4), got {tuple(X.shape)}")
        check_same_device("X", X, self)
        return self.head(self.features(X).flatten(1))


def image_classification_loss(model: nn.Module, batch) -> tuple[torch.Tensor, int]:
    """``loss_fn`` for :func:`attention_book.fit`: mean cross-entropy of a batch and its size."""
    X, y = batch
    return F.cross_entropy(model(X), y), len(y)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# --- figures ----------------------------------------------------------------------------


def sample_photo(size=(224, 336)) -> np.ndarray:
    """A real photograph (scikit-learn's sample 'china.jpg'), resized to ``size``: (H, W, 3) floats in [0, 1]."""
    from sklearn.datasets import load_sample_image

    h, w = check_size_pair("size", size)
    photo = torch.from_numpy(load_sample_image("china.jpg").astype(np.float32) / 255.0).permute(2, 0, 1)[None]
    resized = F.interpolate(photo, size=(h, w), mode="bilinear", align_corners=False, antialias=True)
    return resized[0].permute(1, 2, 0).clamp(0, 1).numpy()


def attention_cost(num_tokens: int, num_hiddens: int) -> int:
    """Multiply-adds of one self-attention on ``num_tokens`` tokens of width ``num_hiddens``.

    Scores Q Kᵀ and the weighted sum A V each take ``num_tokens² · num_hiddens``;
    the four projections take ``4 · num_tokens · num_hiddens²``.
    """
    return 2 * num_tokens**2 * num_hiddens + 4 * num_tokens * num_hiddens**2


def _as_hwc(image) -> np.ndarray:
    from ..core.plot import to_numpy

    img = to_numpy(image).astype(float)
    if img.ndim == 3 and img.shape[0] in (1, 3) and img.shape[-1] not in (1, 3):
        img = img.transpose(1, 2, 0)  # (C, H, W) -> (H, W, C)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.ndim not in (2, 3):
        raise ValueError(f"image must be (H, W), (H, W, C) or (C, H, W), got shape {img.shape}")
    return img


def patch_grid_figure(image, patch_size=16, num_hiddens: int = 512, max_shown: int = 48):
    """The patch-size slider's figure: the picture cut by a grid, the token sequence, the cost.

    Top left: ``image`` with the patch grid drawn over it. Top right: the first
    ``max_shown`` patches laid out as the sequence the Transformer reads.
    Below: number of tokens and self-attention multiply-adds (one layer, width
    ``num_hiddens``) for every patch size that divides the image, the chosen one
    marked. Returns the figure.
    """
    import matplotlib.pyplot as plt

    from ..core.plot import PAGE_FIGURE_WIDTH, ensure_style

    img = _as_hwc(image)
    h, w = img.shape[:2]
    ph, pw = check_size_pair("patch_size", patch_size)
    check_divisible((h, w), (ph, pw))
    rows, cols = h // ph, w // pw
    m = rows * cols
    ensure_style()
    cmap = "gray" if img.ndim == 2 else None
    # The picture and its sequence side by side, the cost below: three panels in a row would
    # shrink to the page's column and their labels with them.
    fig = plt.figure(figsize=(PAGE_FIGURE_WIDTH, 7.0), layout="constrained")
    grid = fig.add_gridspec(2, 2, width_ratios=[1.0, 1.1], height_ratios=[1.0, 0.9])
    ax = fig.add_subplot(grid[0, 0])
    ax.imshow(img, cmap=cmap, extent=(0, w, h, 0))
    for r in range(1, rows):
        ax.axhline(r * ph, color="yellow", lw=0.8)
    for c in range(1, cols):
        ax.axvline(c * pw, color="yellow", lw=0.8)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    ax.set_title(f"{h}x{w} image, {ph}x{pw} patches: {rows}x{cols} grid")

    # The sequence: patches in reading order, tiled into one mosaic with thin gaps.
    shown = min(m, max_shown)
    per_row = min(shown, 12)
    strip_rows = math.ceil(shown / per_row)
    gap = max(1, max(ph, pw) // 8)
    channels = () if img.ndim == 2 else (img.shape[2],)
    mosaic = np.full((strip_rows * (ph + gap) - gap, per_row * (pw + gap) - gap, *channels), np.nan)
    for k in range(shown):
        r, c = divmod(k, cols)
        top, left = (k // per_row) * (ph + gap), (k % per_row) * (pw + gap)
        mosaic[top:top + ph, left:left + pw] = img[r * ph:(r + 1) * ph, c * pw:(c + 1) * pw]
    if img.ndim == 3:  # RGB: show the gaps white
        mosaic = np.where(np.isnan(mosaic), 1.0, mosaic)
    sax = fig.add_subplot(grid[0, 1])
    sax.imshow(mosaic, cmap=cmap, vmin=float(img.min()), vmax=float(img.max()))
    sax.set_xticks([(pw + gap) * j + pw / 2 for j in range(per_row)])
    sax.set_xticklabels([str(j + 1) for j in range(per_row)], fontsize=7)
    sax.set_yticks([(ph + gap) * i + ph / 2 for i in range(strip_rows)])
    sax.set_yticklabels([f"+{i * per_row}" for i in range(strip_rows)], fontsize=7)
    sax.grid(False)
    for spine in sax.spines.values():
        spine.set_visible(False)
    more = f", first {shown} shown" if shown < m else ""
    sax.set_title(f"the sequence: {m} patch tokens{more}")

    # Cost of self-attention for every patch size that fits.
    sizes = [p for p in range(1, min(h, w) + 1) if h % p == 0 and w % p == 0 and (h // p) * (w // p) <= 20000]
    if ph == pw and ph not in sizes:
        sizes.append(ph)
    sizes.sort()
    tokens = np.array([(h // p) * (w // p) for p in sizes], dtype=float)
    costs = np.array([attention_cost(int(t) + 1, num_hiddens) for t in tokens], dtype=float)
    cax = fig.add_subplot(grid[1, :])
    cax.loglog(tokens, costs, "o-", color="C0", markersize=3)
    cost = attention_cost(m + 1, num_hiddens)
    cax.loglog([m], [cost], "o", color="C3", markersize=9, label=f"{m} + 1 tokens: {cost:.2e} multiply-adds")
    cax.set_xlabel("tokens (patches)")
    cax.set_ylabel(f"self-attention multiply-adds (d={num_hiddens})")
    cax.set_title("cost grows with the square of the tokens")
    cax.legend(loc="upper left", fontsize=8)
    return fig


def cls_attention_figure(images, maps: torch.Tensor, grid_size, labels=None, preds=None,
                         class_names: Sequence[str] | None = None, max_images: int = 6):
    """Where ``<cls>`` looks: per image, the input, the last layer's ``<cls>`` attention and the rollout.

    ``images`` (batch, channels, H, W) (what the model saw), ``maps`` from
    :meth:`ViT.attention_maps`. Attention is averaged over heads and drawn as a
    heat overlay stretched over the patch grid. Returns the figure.
    """
    import matplotlib.pyplot as plt

    from ..core.plot import PAGE_FIGURE_WIDTH, ensure_style, to_numpy

    _check_maps(maps)
    last = to_numpy(cls_attention(maps, grid_size))
    rolled = attention_rollout(maps)[:, 0, 1:]
    rolled = to_numpy(rolled.reshape(-1, *check_size_pair("grid_size", grid_size)))
    imgs = to_numpy(images)
    if imgs.ndim != 4 or imgs.shape[0] != last.shape[0]:
        raise ValueError(f"images must be (batch={last.shape[0]}, channels, H, W), got shape {imgs.shape}")
    n = min(len(imgs), max_images)

    def name(k: int) -> str:
        return class_names[k] if class_names is not None else str(k)

    ensure_style()
    side = min(1.75, (PAGE_FIGURE_WIDTH - 0.6) / n)  # at most the page's width (ab.PAGE_FIGURE_WIDTH)
    fig, axes = plt.subplots(3, n, figsize=(side * n + 0.6, 3.2 * side), squeeze=False, layout="constrained")
    for i in range(n):
        img = _as_hwc(imgs[i])
        h, w = img.shape[:2]
        for row, (heat, what) in enumerate(((None, "input"), (last[i], "last layer"), (rolled[i], "rollout"))):
            ax = axes[row, i]
            ax.imshow(img, cmap="gray" if img.ndim == 2 else None, extent=(0, w, h, 0))
            if heat is not None:
                span = float(heat.max() - heat.min())
                heat = (heat - heat.min()) / (span if span > 0 else 1.0)
                ax.imshow(heat, cmap="inferno", alpha=0.6, extent=(0, w, h, 0),
                          interpolation="nearest", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            if i == 0:
                ax.set_ylabel(what)
        if labels is not None:
            title = f"true {name(int(labels[i]))}"
            if preds is not None:
                title += f"\npred {name(int(preds[i]))}"
            axes[0, i].set_title(title, fontsize=9)
    # In words, where the attention goes (the titles alone said only which image; accessibility
    # reader, issue 38): per image, the third of the image holding the patch of largest weight.
    from ..core.plot import ALT_TEXT_CHARS, set_alt_text

    def where(heat):
        rows, cols = heat.shape
        r, c = divmod(int(np.argmax(heat)), cols)
        row = ("top", "middle", "bottom")[3 * (2 * r + 1) // (2 * rows)]
        col = ("left", "centre", "right")[3 * (2 * c + 1) // (2 * cols)]
        return "centre" if (row, col) == ("middle", "centre") else f"{row} {col}"

    def said(i, with_preds):
        who = f"image {i + 1}" if labels is None else name(int(labels[i]))
        if with_preds and labels is not None and preds is not None and int(preds[i]) != int(labels[i]):
            who += f" (predicted {name(int(preds[i]))})"
        a, b = where(last[i]), where(rolled[i])
        return f"{who}: {'both ' + a if a == b else f'{a}, then {b}'}"

    head = f"<cls> attention on {n} images; largest patch weight in the last layer, then the rollout: "
    alt = head + "; ".join(said(i, True) for i in range(n))
    if len(alt) > ALT_TEXT_CHARS:  # too long to say the wrong predictions too: the places come first
        alt = head + "; ".join(said(i, False) for i in range(n))
    set_alt_text(fig, alt)
    return fig
