"""Chapter 8's images: Fashion-MNIST (fetched and verified) and scikit-learn's digits, in
batches resized, normalised and shuffled on the device, with the ``ImageData`` bundle the
chapter trains on."""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch.nn import functional as F

from ..core.checks import check_positive_int, check_size_pair
from ..core.config import device as pick_device, resolve_seed
from ..data.registry import FASHION_MNIST, DataFile, Dataset, fetch, register

__all__ = ["read_idx", "FASHION_MNIST_CLASSES", "load_fashion_mnist", "load_digits_images", "ImageBatches", "ImageData", "load_image_data"]


_IDX_TYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path) -> np.ndarray:
    """Read an IDX file (the format of MNIST and Fashion-MNIST), gzipped or not.

    The header is two zero bytes, a type code (0x08 unsigned byte, 0x09 signed
    byte, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64), the number of
    dimensions, then each dimension as a big-endian uint32; the values follow,
    big-endian, row-major. A wrong magic number or a short file raises
    ``ValueError`` naming the file.
    """
    path = Path(path)
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    try:
        raw = gzip.decompress(path.read_bytes()) if gzipped else path.read_bytes()
    except (EOFError, gzip.BadGzipFile, OSError) as err:
        raise ValueError(f"{path}: the gzip stream is damaged or cut short ({err}); download the file again") from err
    if len(raw) < 4:
        raise ValueError(f"{path}: {len(raw)} bytes is too short for an IDX header (4 bytes at least)")
    zero0, zero1, type_code, ndim = raw[0], raw[1], raw[2], raw[3]
    if zero0 != 0 or zero1 != 0 or type_code not in _IDX_TYPES or ndim == 0:
        raise ValueError(
            f"{path}: not an IDX file — magic number {raw[:4].hex(' ')} should be 00 00 <type> <ndim> with "
            f"type one of {', '.join(f'{k:02x}' for k in _IDX_TYPES)} and ndim >= 1"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: the header needs {header} bytes for {ndim} dimensions, the file has {len(raw)}")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    dtype = _IDX_TYPES[type_code]
    needed = int(np.prod(shape)) * dtype.itemsize
    have = len(raw) - header
    if have != needed:
        raise ValueError(
            f"{path}: the header promises shape {shape} of {dtype.name} ({needed} bytes of data) but the file has "
            f"{have} bytes of data — it is {'truncated' if have < needed else 'longer than its header says'}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


FASHION_MNIST_CLASSES = ("T-shirt/top", "trouser", "pullover", "dress", "coat",
                         "sandal", "shirt", "sneaker", "bag", "ankle boot")


_FASHION_MIRROR = "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/"


# The official MD5 sums published with the data set (zalandoresearch/fashion-mnist README).
_FASHION_FILES = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}

register(Dataset(
    name="fashion-mnist",
    files=tuple(
        DataFile(fname, (FASHION_MNIST + fname, _FASHION_MIRROR + fname), f"md5:{md5}")
        for fname, md5 in _FASHION_FILES.items()
    ),
    description="Fashion-MNIST (Xiao et al., 2017): 70,000 28x28 greyscale images of clothes in 10 classes.",
    licence="MIT (Zalando SE)",
))


def load_fashion_mnist(train: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST images (N, 1, 28, 28) uint8 and labels (N,) int64, fetched and verified."""
    prefix = "train" if train else "t10k"
    images = read_idx(fetch("fashion-mnist", f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(fetch("fashion-mnist", f"{prefix}-labels-idx1-ubyte.gz"))
    if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(f"Fashion-MNIST files disagree: images {images.shape}, labels {labels.shape}")
    return torch.from_numpy(images)[:, None], torch.from_numpy(labels.astype(np.int64))


def load_digits_images(test_fraction: float = 0.2, seed: int | None = None):
    """scikit-learn's 8x8 handwritten digits (1,797 images, shipped with the package), split in two.

    Returns ``(train_images, train_labels), (test_images, test_labels)``; images
    are (N, 1, 8, 8) uint8 in 0..255 (the original 0..16 grey levels rescaled),
    labels int64. The split is stratified by class and fixed by ``seed`` (``None``: the
    book's seed, ``ATTENTION_BOOK_SEED``).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
    digits = load_digits()
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)[:, None]
    labels = digits.target.astype(np.int64)
    tr_x, te_x, tr_y, te_y = train_test_split(
        images, labels, test_size=test_fraction, random_state=resolve_seed(seed), stratify=labels
    )
    return ((torch.from_numpy(tr_x), torch.from_numpy(tr_y)), (torch.from_numpy(te_x), torch.from_numpy(te_y)))


class ImageBatches:
    """Mini-batches of images resized on the fly: an iterable that :func:`attention_book.fit` can use.

    ``images`` (N, channels, H, W) uint8 (0..255) stay small in memory; each batch
    is converted to floats, resized to ``img_size`` (bilinear; anti-aliased when
    shrinking) and standardised with ``mean``/``std``. Yields ``(X, y)`` with X
    (batch, channels, *img_size). With ``shuffle=True`` the order changes every
    epoch, reproducibly from ``seed`` (``None``: the book's seed).

    All of this happens on ``device`` (default: :func:`attention_book.device`, the one
    ``fit`` trains on): the uint8 images are copied there once, and each batch is cut,
    resized and standardised there, so a GPU is never kept waiting for the CPU to
    resize the next batch.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, img_size,
                 shuffle: bool = False, seed: int | None = None, mean: float = 0.5,
                 std: float = 0.5, device: torch.device | str | None = None):
        if images.dim() != 4 or labels.dim() != 1 or images.shape[0] != labels.shape[0]:
            raise ValueError(
                f"images must be (N, channels, H, W) and labels (N,), got {tuple(images.shape)} and {tuple(labels.shape)}"
            )
        batch_size = check_positive_int("batch_size", batch_size)
        self.images, self.labels = images, labels
        self.batch_size, self.img_size = batch_size, check_size_pair("img_size", img_size)
        self.shuffle, self.mean, self.std = shuffle, mean, std
        self.device = torch.device(device) if device is not None else pick_device(verbose=False)
        self._generator = torch.Generator().manual_seed(resolve_seed(seed))
        self._on_device: tuple[torch.Tensor, torch.Tensor] | None = None

    def __len__(self) -> int:
        return math.ceil(len(self.labels) / self.batch_size)

    def transform(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, C, H, W) -> standardised float (B, C, *img_size), on the device ``images`` are on."""
        X = images.float() / 255.0
        if tuple(X.shape[-2:]) != self.img_size:
            shrinking = X.shape[-2] > self.img_size[0] or X.shape[-1] > self.img_size[1]
            X = F.interpolate(X, size=self.img_size, mode="bilinear", align_corners=False, antialias=shrinking)
        return (X - self.mean) / self.std

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._on_device is None:  # one copy of the whole (uint8) data set, the first time it is needed
            self._on_device = (self.images.to(self.device), self.labels.to(self.device))
        images, labels = self._on_device
        n = len(self.labels)
        order = torch.randperm(n, generator=self._generator) if self.shuffle else torch.arange(n)
        order = order.to(self.device)
        for start in range(0, n, self.batch_size):
            idx = order[start: start + self.batch_size]
            yield self.transform(images[idx]), labels[idx]


@dataclass
class ImageData:
    """What :func:`load_image_data` returns: the batches and a description of them."""

    name: str
    train: ImageBatches
    test: ImageBatches
    classes: tuple[str, ...]
    img_size: tuple[int, int]
    note: str = ""

    def describe(self) -> str:
        line = (f"Data set: {self.name} — {len(self.train.labels)} training and {len(self.test.labels)} test "
                f"images, resized to {self.img_size[0]}x{self.img_size[1]}, batches of {self.train.batch_size}")
        return line + (f"\n{self.note}" if self.note else "")


def load_image_data(name: str, img_size, batch_size: int, seed: int | None = None,
                    fallback: bool = True, device: torch.device | str | None = None) -> ImageData:
    """Training and test batches of ``'digits'`` (offline) or ``'fashion-mnist'`` (downloaded once).

    ``seed`` fixes the digits' train/test split and the order of the training
    batches (``None``: the book's seed, ``ATTENTION_BOOK_SEED``). The batches are made
    on ``device`` (default: :func:`attention_book.device`), see :class:`ImageBatches`.

    When Fashion-MNIST cannot be had and ``fallback`` is true, the digits are used
    instead and :attr:`ImageData.note` says so (the chapter prints it).
    """
    from ..data.registry import DataUnavailableError

    note = ""
    if name == "fashion-mnist":
        try:
            train, test = load_fashion_mnist(True), load_fashion_mnist(False)
            classes = FASHION_MNIST_CLASSES
        except DataUnavailableError as err:
            if not fallback:
                raise
            note = f"Fashion-MNIST is unavailable here, so the 8x8 digits are used instead. ({err})"
            name = "digits"
    elif name != "digits":
        raise ValueError(f"name must be 'digits' or 'fashion-mnist', got {name!r}")
    seed = resolve_seed(seed)
    if name == "digits":
        train, test = load_digits_images(seed=seed)
        classes = tuple(str(d) for d in range(10))
    return ImageData(
        name=name,
        train=ImageBatches(*train, batch_size=batch_size, img_size=img_size, shuffle=True, seed=seed, device=device),
        test=ImageBatches(*test, batch_size=max(batch_size, 256), img_size=img_size, device=device),
        classes=classes,
        img_size=check_size_pair("img_size", img_size),
        note=note,
    )
