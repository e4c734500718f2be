"""Run-wide settings: where data lives, which experiment size runs, which device.

Every environment variable the book reads is read here, and only here:

``ATTENTION_BOOK_DATA``
    Directory for downloaded and cached data sets. Default: a per-user cache
    directory (``~/.cache/attention_book`` on Linux, via :mod:`pooch`).
``ATTENTION_BOOK_SIZE``
    ``ci`` (small experiments that finish in seconds on two CPU cores) or
    ``full`` (the hyper-parameters of the original chapter, meant for a GPU).
    Default: ``full`` when a CUDA GPU is visible, ``ci`` otherwise.
"""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path
from typing import Iterator, TypeVar

import numpy as np
import torch

__all__ = [
    "DATA_ENV",
    "SIZE_ENV",
    "data_dir",
    "experiment_size",
    "is_full_size",
    "sized",
    "device",
    "seed_everything",
    "describe_run",
    "single_thread",
    "small_model_threads",
]

DATA_ENV = "ATTENTION_BOOK_DATA"
SIZE_ENV = "ATTENTION_BOOK_SIZE"
_SIZES = ("ci", "full")

T = TypeVar("T")


def data_dir() -> Path:
    """The directory where data sets are looked for and cached.

    ``$ATTENTION_BOOK_DATA`` when set, otherwise the per-user cache directory.
    The directory is not created here; downloads create it when they need it.
    """
    configured = os.environ.get(DATA_ENV, "").strip()
    if configured:
        return Path(configured).expanduser().resolve()
    import pooch

    return Path(pooch.os_cache("attention_book"))


def experiment_size() -> str:
    """``'ci'`` or ``'full'``: which size of the chapters' experiments runs."""
    configured = os.environ.get(SIZE_ENV, "").strip().lower()
    if not configured:
        return "full" if torch.cuda.is_available() else "ci"
    if configured not in _SIZES:
        raise ValueError(
            f"{SIZE_ENV}={configured!r} is not a known experiment size; "
            f"use one of {', '.join(_SIZES)} (or unset it to choose by device)."
        )
    return configured


def is_full_size() -> bool:
    """True when the full-size (seed hyper-parameter) experiments should run."""
    return experiment_size() == "full"


def sized(ci: T, full: T) -> T:
    """Pick a value by experiment size: ``sized(ci=10, full=200)``."""
    return full if is_full_size() else ci


_DEVICE_ANNOUNCED = False


def device(verbose: bool = True) -> torch.device:
    """The best available device: CUDA, then Apple's MPS, then the CPU.

    The choice is printed the first time it is made (``verbose=False`` keeps quiet).
    """
    global _DEVICE_ANNOUNCED
    if torch.cuda.is_available():
        chosen = torch.device("cuda")
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        chosen = torch.device("mps")
    else:
        chosen = torch.device("cpu")
    if verbose and not _DEVICE_ANNOUNCED:
        name = torch.cuda.get_device_name(0) if chosen.type == "cuda" else chosen.type
        print(f"Using device: {chosen} ({name})")
        _DEVICE_ANNOUNCED = True
    return chosen


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch (all devices) so runs repeat."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def describe_run() -> str:
    """One line a chapter prints at its top: size, device and torch version."""
    size = experiment_size()
    dev = device(verbose=False)
    how = "small CPU-friendly sizes" if size == "ci" else "the original chapter's full sizes"
    line = (
        f"Experiment size: {size} ({how}; set {SIZE_ENV}=ci|full to change) "
        f"| device: {dev} | torch {torch.__version__}"
    )
    print(line)
    return line


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run the block with one intra-op CPU thread, then restore the previous count.

    Models of a few thousand parameters spend their time in many tiny operations;
    splitting each over several threads costs more than it saves, and on a
    processor shared with other programs the threads mostly wait for each other.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def small_model_threads() -> torch.device:
    """For the rest of a notebook that trains small models: one CPU thread when running on the CPU.

    Returns the device (see :func:`device`); on a GPU nothing changes. Use
    :func:`single_thread` instead to limit only one block.
    """
    dev = device(verbose=False)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    return dev
