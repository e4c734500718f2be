"""Run-wide settings: where data lives, which experiment size runs, which device.

Every environment variable the book reads is read here, and only here:

``ATTENTION_BOOK_DATA``
    Directory for downloaded and cached data sets. Default: a per-user cache
    directory (``~/.cache/attention_book`` on Linux, via :mod:`pooch`).
``ATTENTION_BOOK_SIZE``
    ``ci`` (small experiments that finish in seconds on two CPU cores) or
    ``full`` (the hyper-parameters of the original chapter, meant for a GPU).
    Default: ``full`` when a CUDA GPU is visible, ``ci`` otherwise.
``ATTENTION_BOOK_SEED``
    The book's seed, a non-negative integer (default 0). Every chapter seeds
    itself with it (:func:`seed_everything` with no argument), and every
    package function whose ``seed`` is left at ``None`` derives its seed from it,
    so one variable gives a whole other run of the book.
``ATTENTION_BOOK_CLAIMS``
    A file that :func:`attention_book.claim` appends one JSON line to per
    claim checked (used by ``make claims``, the seed check). Unset: nothing is written.
``ATTENTION_BOOK_EXPLORERS``
    ``live`` (default): :func:`attention_book.explore` shows ipywidgets controls
    that recompute on every move. ``static``: it computes its output for every
    setting of a grid and shows a player that needs no kernel (how the website is
    built: ``make book`` and ``make test`` set it).
``ATTENTION_BOOK_FRAMES``
    A directory where a ``static`` explorer writes a manifest of what it drew
    (one JSON file per explorer: settings, frame hashes, time taken), read by the
    build log and the browser test. Unset: nothing is written.
``ATTENTION_BOOK_MAX_STEPS``
    A positive integer N: every training run of the package (:func:`attention_book.fit`)
    stops after N optimisation steps, and every timed call of the scoring-cost sweep
    runs once. The work around those runs is bounded alike (:func:`capped_count`): at
    most N evaluation batches, N seeds of a study (:func:`book_seeds`), N batches drawn
    for a capped run. A smoke switch, to run the ``full`` size on a CPU in minutes and see
    that every shape and device fits; the results mean nothing.
    Unset: runs train for the epochs they ask for.
``ATTENTION_BOOK_FIT_LOG``
    A file that :func:`attention_book.fit` appends one JSON line to after every epoch
    (its ``desc``, the epoch, the epochs asked for, the steps and seconds so far), so a
    run stopped part way says how far each training run got (``make cpu-report`` reads it).
    Unset: nothing is written.

Set by PyTorch's launcher ``torchrun`` (read here, never elsewhere in the package):

``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``
    How many processes train together, this process's number among all of them, and
    its number on this machine. When ``WORLD_SIZE`` is above 1, :func:`device` picks
    the GPU ``cuda:LOCAL_RANK`` and :func:`attention_book.fit` trains with
    ``DistributedDataParallel`` (see :func:`distributed_run`).
"""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass
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
    "SEED_ENV",
    "CLAIMS_ENV",
    "book_seed",
    "book_seeds",
    "resolve_seed",
    "claims_log",
    "EXPLORERS_ENV",
    "FRAMES_ENV",
    "static_explorers",
    "frames_dir",
    "LIVE_ENV",
    "live_dir",
    "seed_everything",
    "describe_run",
    "single_thread",
    "small_model_threads",
    "MAX_STEPS_ENV",
    "max_steps",
    "fit_log_path",
    "capped_count",
    "training_precision",
    "DistributedRun",
    "distributed_run",
    "is_main_process",
]

DATA_ENV = "ATTENTION_BOOK_DATA"
SIZE_ENV = "ATTENTION_BOOK_SIZE"
SEED_ENV = "ATTENTION_BOOK_SEED"
CLAIMS_ENV = "ATTENTION_BOOK_CLAIMS"
EXPLORERS_ENV = "ATTENTION_BOOK_EXPLORERS"
FRAMES_ENV = "ATTENTION_BOOK_FRAMES"
LIVE_ENV = "ATTENTION_BOOK_LIVE"
MAX_STEPS_ENV = "ATTENTION_BOOK_MAX_STEPS"
FIT_LOG_ENV = "ATTENTION_BOOK_FIT_LOG"
_SIZES = ("ci", "full")

T = TypeVar("T")


def fit_log_path() -> Path | None:
    """The file named by ``$ATTENTION_BOOK_FIT_LOG`` (each epoch of :func:`attention_book.fit`
    appends a line there), or None when it is unset or empty."""
    value = os.environ.get(FIT_LOG_ENV, "").strip()
    return Path(value) if value else None


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
    """True when the full-size (original chapter's hyper-parameters) experiments should run."""
    return experiment_size() == "full"


def sized(ci: T, full: T) -> T:
    """Pick a value by experiment size: ``sized(ci=10, full=200)``."""
    return full if is_full_size() else ci


def training_precision() -> str:
    """The ``precision`` the package's training functions pass to :func:`attention_book.fit`.

    ``'32'`` at the ``ci`` size, so the seed check's results hold exactly as checked;
    ``'auto'`` at the ``full`` size, which is mixed precision on a CUDA GPU (bfloat16, or
    float16 with loss scaling where bfloat16 is missing) and plain float32 elsewhere.
    """
    return sized(ci="32", full="auto")


def max_steps() -> int | None:
    """The cap on optimisation steps per training run (``ATTENTION_BOOK_MAX_STEPS``), or None."""
    configured = os.environ.get(MAX_STEPS_ENV, "").strip()
    if not configured:
        return None
    try:
        value = int(configured)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{MAX_STEPS_ENV}={configured!r} is not a positive integer; set it to e.g. 5 or unset it.")
    return value


def capped_count(n: int) -> int:
    """``n``, or ``ATTENTION_BOOK_MAX_STEPS`` when that cap is set and smaller.

    How many training batches an experiment generates, seeds a study trains, or examples an
    evaluation decodes under the full-size smoke run: every loop still runs (at least once),
    on no more items than the capped ``fit`` can use. Unset: ``n`` itself.
    """
    cap = max_steps()
    return n if cap is None else min(n, cap)


@dataclass(frozen=True)
class DistributedRun:
    """This process's place in a ``torchrun`` job: ``world_size`` processes in all, this one
    ``rank`` (0 .. world_size - 1) overall and ``local_rank`` on its own machine."""

    world_size: int
    rank: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def distributed_run() -> DistributedRun | None:
    """The ``torchrun`` job this process belongs to, or None when it runs alone.

    Read from the variables ``torchrun`` sets (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``);
    a job of one process counts as running alone.
    """
    configured = {name: os.environ.get(name, "").strip() for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    if configured["WORLD_SIZE"] in ("", "1"):
        return None
    values = {}
    for name, text in configured.items():
        try:
            values[name] = int(text)
        except ValueError:
            raise ValueError(f"{name}={text!r} is not an integer; torchrun sets WORLD_SIZE, RANK and LOCAL_RANK "
                             "together (start the script with torchrun, or unset WORLD_SIZE)") from None
    if not 0 <= values["RANK"] < values["WORLD_SIZE"] or values["LOCAL_RANK"] < 0:
        raise ValueError(f"RANK={values['RANK']} and LOCAL_RANK={values['LOCAL_RANK']} do not fit "
                         f"WORLD_SIZE={values['WORLD_SIZE']} (need 0 <= LOCAL_RANK and 0 <= RANK < WORLD_SIZE)")
    return DistributedRun(values["WORLD_SIZE"], values["RANK"], values["LOCAL_RANK"])


def is_main_process() -> bool:
    """True unless this is a ``torchrun`` process other than rank 0 (which alone prints and saves)."""
    run = distributed_run()
    return run is None or run.is_main


_DEVICE_ANNOUNCED = False


def device(verbose: bool = True) -> torch.device:
    """The best available device: CUDA, then Apple's MPS, then the CPU.

    Under ``torchrun`` with GPUs each process gets its own, ``cuda:LOCAL_RANK``.
    The choice is printed the first time it is made (``verbose=False`` keeps quiet).
    """
    global _DEVICE_ANNOUNCED
    if torch.cuda.is_available():
        run = distributed_run()
        chosen = torch.device("cuda", run.local_rank) if run is not None else torch.device("cuda")
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        chosen = torch.device("mps")
    else:
        chosen = torch.device("cpu")
    if verbose and not _DEVICE_ANNOUNCED:
        name = torch.cuda.get_device_name(chosen) if chosen.type == "cuda" else chosen.type
        print(f"Using device: {chosen} ({name})")
        _DEVICE_ANNOUNCED = True
    return chosen


def book_seed() -> int:
    """The book's seed: ``$ATTENTION_BOOK_SEED`` (a non-negative integer), 0 when unset."""
    configured = os.environ.get(SEED_ENV, "").strip()
    if not configured:
        return 0
    try:
        value = int(configured)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{SEED_ENV}={configured!r} is not a non-negative integer; set it to e.g. 0, 1, 2 or unset it.")
    return value


def book_seeds(count: int, start: int = 0) -> list[int]:
    """The seeds of a study that repeats an experiment ``count`` times: ``book_seed() + start``,
    ``+ start + 1``, … (``start`` keeps them apart from the seed the chapter already uses).

    Under ``ATTENTION_BOOK_MAX_STEPS`` (the full-size smoke run) at most that many: the study's
    loop runs, on fewer seeds (see :func:`capped_count`).
    """
    first = book_seed() + start
    return [first + k for k in range(capped_count(count))]


def resolve_seed(seed: int | None, offset: int = 0) -> int:
    """``seed`` itself, or when it is ``None`` the book's seed plus ``offset``.

    Package functions take ``seed: int | None = None`` and call this, so that a
    chapter left at its defaults follows ``ATTENTION_BOOK_SEED`` while a test can
    still pin an exact seed. ``offset`` gives independent streams (data vs model).
    """
    if seed is None:
        return book_seed() + int(offset)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int or None (the book's seed), got {seed!r}")
    return seed


def claims_log() -> Path | None:
    """Where :func:`attention_book.claim` records claims: ``$ATTENTION_BOOK_CLAIMS``, or None."""
    configured = os.environ.get(CLAIMS_ENV, "").strip()
    return Path(configured).expanduser().resolve() if configured else None


def static_explorers() -> bool:
    """True when explorers should precompute a player for a page without a kernel."""
    configured = os.environ.get(EXPLORERS_ENV, "").strip().lower() or "live"
    if configured not in ("live", "static"):
        raise ValueError(f"{EXPLORERS_ENV} must be 'live' or 'static', got {configured!r}")
    return configured == "static"


def live_dir() -> Path | None:
    """Where a website build's live views write their models and data (``ATTENTION_BOOK_LIVE``),
    or None when unset."""
    configured = os.environ.get(LIVE_ENV, "").strip()
    return Path(configured).expanduser() if configured else None


def frames_dir() -> Path | None:
    """Where static explorers record what they drew (``ATTENTION_BOOK_FRAMES``), or None."""
    configured = os.environ.get(FRAMES_ENV, "").strip()
    return Path(configured).expanduser() if configured else None


def seed_everything(seed: int | None = None) -> int:
    """Seed Python, NumPy and PyTorch (all devices) so runs repeat; returns the seed used.

    With no argument the book's seed (``ATTENTION_BOOK_SEED``, default 0) is used:
    this is how every chapter starts, so one environment variable reruns the whole
    book with other random numbers.
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    seed = resolve_seed(seed)
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    return seed


class _PrintedLine(str):
    """A line already printed: a notebook cell ending with the call shows it once, not again as
    the cell's value (a fresh learner saw ch06's practice notebook print it twice, issue 36)."""

    def _ipython_display_(self) -> None:
        pass


def describe_run() -> str:
    """One line a chapter prints at its top: size, device and torch version (also returned)."""
    size = experiment_size()
    dev = device(verbose=False)
    how = "small CPU-friendly sizes" if size == "ci" else "the original chapter's full sizes"
    # The GPU's name too: the site's build reads this line (book/_ext/size_banner.py) and names
    # the device each page ran on.
    where = f"{dev} ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else f"{dev}"
    line = (
        f"Experiment size: {size} ({how}; set {SIZE_ENV}=ci|full to change) "
        f"| seed: {book_seed()} ({SEED_ENV}) | device: {where} | torch {torch.__version__}"
    )
    print(line)
    return _PrintedLine(line)


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
