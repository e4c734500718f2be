"""The one training loop every chapter uses.

``fit`` knows nothing about a particular model: the chapter passes a
``loss_fn(model, batch)`` that returns the loss of one batch. Everything else
(devices, clipping, mixed precision, schedules, progress, history) lives here.
"""

from __future__ import annotations

import collections.abc
import contextlib
import itertools
import functools
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
from torch import nn

from .checks import check_int, check_positive_int, check_tensor_values
from .config import (MAX_STEPS_ENV, DistributedRun, distributed_run, fit_log_path, max_steps, resolve_seed,
                     training_precision)
from .config import device as pick_device

__all__ = ["History", "fit", "PRECISIONS", "move_to", "grad_clipping", "evaluating", "capped_batches", "IGNORE", "warmup_cosine_factor", "warmup_cosine_schedule", "schedule_figure", "model_device",
           "accuracy",
           "notebook_progress_bar", "use_progress_bar"]

IGNORE = -100  # the label of a position with no target: PyTorch's default ignore_index in cross_entropy

# An epoch whose mean training loss exceeds this many times the loss of the first
# step (taken before any update) has diverged. The book's runs start at 2–10 and
# fall; a run at a far too large learning rate climbs to 1e6–1e20 within an epoch.
DIVERGENCE_FACTOR = 1e4

# What ``fit(precision=...)`` accepts: float32, bfloat16 or float16 autocast, or the best the device has.
PRECISIONS = ("32", "bf16", "fp16", "auto")


def capped_batches(batches: Iterable) -> Iterable:
    """``batches`` as they are, or only the first ``ATTENTION_BOOK_MAX_STEPS`` of them when that cap is set.

    The package's evaluation passes iterate through this, so the full-size smoke run (which caps
    every ``fit``) also evaluates on a few batches instead of a whole validation set.
    """
    cap = max_steps()
    return batches if cap is None else itertools.islice(batches, cap)


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Eval mode inside the block, the model's own mode (train or eval) again after it."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def move_to(batch: Any, device: torch.device) -> Any:
    """Move every tensor inside a (nested) tuple/list/dict to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, Mapping):
        return {k: move_to(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [move_to(v, device) for v in batch]
        return type(batch)(moved) if not hasattr(batch, "_fields") else type(batch)(*moved)
    return batch


def grad_clipping(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Rescale all gradients so their global L2 norm is at most ``max_norm``.

    Returns the norm before clipping as a 0-dim tensor on the gradients' device (useful to
    watch for exploding gradients; ``float()`` it when you want the number, which waits for
    the device).
    """
    if max_norm <= 0:
        raise ValueError(f"max_norm must be positive, got {max_norm}")
    params = [p for p in model.parameters() if p.grad is not None]
    if not params:
        return torch.zeros(())
    return torch.nn.utils.clip_grad_norm_(params, max_norm)


@dataclass
class History:
    """Per-epoch records of a training run.

    ``train_loss[e]`` is the loss averaged over all units (tokens, examples…)
    seen in epoch ``e``; ``metrics[name][e]`` holds what ``evaluate`` returned.
    ``lr`` records the learning rate at every optimisation step. ``seconds`` and
    ``cpu_seconds`` are the run's wall-clock and processor time (all threads; on a busy
    machine the first grows, the second does not). ``capped`` is the step cap
    (``ATTENTION_BOOK_MAX_STEPS``) that ended the run early, or None.
    """

    train_loss: list[float] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    lr: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    steps: int = 0
    capped: int | None = None

    def record(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(float(value))

    def plot(self, logy: bool = False, title: str | None = None):
        """Learning curves: training loss and every recorded metric. Returns the figure."""
        from .plot import curves_figure

        curves = {"train loss": self.train_loss, **self.metrics}
        losses_only = all("loss" in name or "perplexity" in name for name in curves)
        return curves_figure(curves, xlabel="epoch", ylabel="loss" if losses_only else "loss / metric", logy=logy,
                           title=title)

    def summary(self) -> str:
        parts = [f"{len(self.train_loss)} epochs, {self.steps} steps in {self.seconds:.1f}s"]
        if self.capped is not None:
            parts[0] += f" (stopped at the cap of {self.capped} steps)"
        if self.train_loss:
            parts.append(f"final train loss {self.train_loss[-1]:.4f}")
        for name, values in self.metrics.items():
            parts.append(f"{name} {values[-1]:.4f}")
        return ", ".join(parts)


def notebook_progress_bar(total: int, desc: str):
    """tqdm's bar: a widget in a live notebook, text in a terminal."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="epoch")


_progress_bar = notebook_progress_bar


def use_progress_bar(make_bar: Callable[[int, str], Any]) -> Callable[[int, str], Any]:
    """Set the bar ``fit(progress=True)`` draws: ``make_bar(total_epochs, desc)`` returns an
    object with tqdm's ``update``, ``set_postfix`` and ``close``. Returns the previous one.

    The book's machinery uses it for website builds (there the bar stays silent: a page
    states its results in prose), so the training loop never asks how it is being run.
    """
    global _progress_bar
    if not callable(make_bar):
        raise ValueError(f"use_progress_bar needs a callable (total, desc) -> bar, got {make_bar!r}")
    previous, _progress_bar = _progress_bar, make_bar
    return previous


def _log_epoch(desc: str, epoch: int, epochs: int, steps: int, seconds: float) -> None:
    """One JSON line in the fit log (``ATTENTION_BOOK_FIT_LOG``), when it is set."""
    path = fit_log_path()
    if path is None:
        return
    line = json.dumps({"desc": desc, "epoch": epoch, "epochs": epochs, "steps": steps, "seconds": round(seconds, 2)})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def fit(
    model: nn.Module,
    train_data: Iterable,
    loss_fn: Callable[[nn.Module, Any], Any],
    *,
    epochs: int,
    optimizer: torch.optim.Optimizer | None = None,
    lr: float = 1e-3,
    scheduler: Any = None,
    clip_grad: float | None = None,
    evaluate: Callable[[nn.Module], Mapping[str, float]] | None = None,
    device: torch.device | str | None = None,
    precision: str | None = None,
    progress: bool | Callable[[int, str], Any] = True,
    desc: str = "training",
) -> History:
    """Train ``model`` for ``epochs`` passes over ``train_data``.

    Parameters
    ----------
    train_data
        An iterable of batches that can be iterated once per epoch: a list, a
        ``DataLoader``, any object whose ``__iter__`` starts afresh. An iterator that
        runs out after one pass (a generator, ``map``, ``zip``, ``iter(...)``) is
        refused when ``epochs > 1`` (``ValueError``), before any training.
    loss_fn
        ``loss_fn(model, batch)`` returns either a scalar loss (a 0-dim floating-point
        tensor with a gradient: the mean over the batch) or a pair ``(mean_loss, count)``,
        where ``count`` is how many units (e.g. unpadded tokens) the mean was taken over: a
        number or 0-dim tensor, at least 0. Epoch losses are averaged with these counts, so
        a short last batch or padding does not skew them. A batch with count 0 (all padding)
        is still a training step but adds nothing to the epoch's mean, so its loss should be
        a finite zero (as :func:`attention_book.masked_cross_entropy` returns); an epoch whose
        every count is 0 has no mean and raises ``ValueError``. Anything else (a Python
        float, a tensor of another shape, a negative count) raises ``TypeError`` or
        ``ValueError`` naming ``loss_fn``.
    optimizer
        Defaults to Adam with learning rate ``lr`` over all parameters.
    scheduler
        A ``torch.optim.lr_scheduler`` object stepped once per optimisation step.
    clip_grad
        If given, the global gradient norm is clipped to this value.
    evaluate
        Called with the model (in eval mode, without gradients) after every
        epoch; its ``{name: value}`` result is recorded in the history.
    device
        Defaults to :func:`attention_book.device`. The batches are moved there.
    precision
        ``None`` (default): :func:`attention_book.training_precision`, that is ``'32'``
        at the ``ci`` size and ``'auto'`` at the ``full`` size, so every chapter's
        full-size runs use mixed precision on a CUDA GPU without asking.
        ``'32'``: float32 throughout. ``'bf16'``: the forward pass and
        loss under bfloat16 autocast (CUDA GPUs that support it, and the CPU).
        ``'fp16'``: float16 autocast with loss scaling (``torch.amp.GradScaler``),
        on CUDA only. ``'auto'``: ``'bf16'`` on a CUDA GPU that supports it,
        otherwise ``'fp16'`` there, and ``'32'`` on any other device. The
        parameters, the optimiser and ``evaluate`` stay in float32.

    Under ``torchrun`` (more than one process, see :func:`attention_book.distributed_run`)
    the same call trains with ``DistributedDataParallel``: each process takes its share of
    ``train_data`` (a ``DataLoader`` is rebuilt with a ``DistributedSampler``, any other
    iterable gives every process each ``WORLD_SIZE``-th batch), so **the batch size is per
    process** and one step sees ``WORLD_SIZE`` times as many examples. Gradients are
    averaged over the processes, the history records losses averaged over all of them,
    only rank 0 shows progress, and ``model`` itself (never a wrapper) ends up trained,
    with the same weights in every process.

    ``ATTENTION_BOOK_MAX_STEPS`` (:func:`attention_book.core.config.max_steps`) stops the
    run after that many optimisation steps; the history then ends with the epoch that was
    cut short.
    """
    epochs = check_positive_int("epochs", epochs)
    if epochs > 1 and isinstance(train_data, collections.abc.Iterator):
        raise ValueError(
            f"train_data is a {type(train_data).__name__}, an iterator that can be iterated only once, but "
            f"epochs={epochs} needs {epochs} passes over it; pass a list of batches or a torch DataLoader "
            "(both start afresh every epoch), or use epochs=1")
    run = distributed_run()
    dev = _training_device(device, run)
    autocast_dtype, use_scaler = _precision(training_precision() if precision is None else precision, dev)
    autocast = (functools.partial(torch.autocast, dev.type, dtype=autocast_dtype) if autocast_dtype is not None
                else contextlib.nullcontext)
    model.to(dev)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(dev.type) if use_scaler else None
    cap = max_steps()
    history = History()
    start, cpu_start = time.perf_counter(), time.process_time()

    sampler = None
    compute_loss: Callable[[Any], Any] = functools.partial(loss_fn, model)
    if run is not None:
        _join_process_group(dev)
        train_data, sampler = _shard(train_data, run)
        # The whole loss_fn runs inside DDP's forward, so it may call any method of the model.
        # static_graph: parameters a loss never uses (a head trained in another task) are fine.
        compute_loss = nn.parallel.DistributedDataParallel(
            _LossOf(model, loss_fn), device_ids=[dev.index] if dev.type == "cuda" else None, static_graph=True)
    main = run is None or run.is_main

    first_loss = None  # the loss of the first step, before any update: the yardstick for divergence
    make_bar = progress if callable(progress) else _progress_bar
    bar = make_bar(epochs, desc) if progress and main else None
    for _epoch in range(epochs):
        model.train()
        if sampler is not None:
            sampler.set_epoch(_epoch)
        # Summed on the device and read once per epoch: reading the loss every step would make
        # a GPU wait for each step to finish before the next can be queued.
        total, count, batches = torch.zeros((), device=dev), torch.zeros((), device=dev), 0
        for batch in train_data:
            batch = move_to(batch, dev)
            with autocast():
                out = compute_loss(batch)
            loss, n = _loss_and_count(out)
            if first_loss is None:  # the one read in the loop: the yardstick for divergence, before any update
                first_loss = _mean_over_processes(loss.detach().float(), run)
                if not math.isfinite(first_loss):
                    raise FloatingPointError(f"the loss of the first step is {first_loss}" + _advice(optimizer))
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                if clip_grad is not None:
                    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
                    grad_clipping(model, clip_grad)
                scaler.step(optimizer)  # skipped when the gradients overflowed; the scale then shrinks
                scaler.update()
            else:
                loss.backward()
                if clip_grad is not None:
                    grad_clipping(model, clip_grad)
                optimizer.step()
            history.lr.append(float(optimizer.param_groups[0]["lr"]))
            if scheduler is not None and scaler is None:
                scheduler.step()
            elif scheduler is not None:
                with warnings.catch_warnings():
                    # A step the scaler skipped makes PyTorch warn that the schedule runs ahead; it does
                    # not: the schedule counts optimisation steps taken or tried alike.
                    warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
                    scheduler.step()
            history.steps += 1
            total += loss.detach().float() * n  # the unscaled loss: the scaler only scales what backward sees
            count += n
            batches += 1
            if cap is not None and history.steps >= cap:
                break
        if batches == 0 and _epoch == 0:
            raise ValueError("train_data yielded no batches (it is empty)")
        if batches == 0:
            raise ValueError(
                f"train_data yielded no batches in epoch {_epoch + 1}, after {history.steps} in the epochs before: "
                "it can be iterated only once; pass a list of batches or a torch DataLoader")
        if run is not None:
            total, count = _sum_over_processes(total, count)
            _share_buffers(model)
        if float(count) == 0:
            raise ValueError(
                f"loss_fn returned a count of 0 for every batch of epoch {_epoch + 1}, so the epoch's loss has no "
                "mean; count is how many units (e.g. unpadded tokens) each batch's mean loss was taken over")
        epoch_loss = float(total / count)
        _check_divergence(epoch_loss, first_loss, _epoch, optimizer)
        history.train_loss.append(epoch_loss)
        if evaluate is not None:
            with evaluating(model), torch.no_grad():
                for name, value in evaluate(model).items():
                    history.record(name, value)
        if main:
            _log_epoch(desc, _epoch + 1, epochs, history.steps, time.perf_counter() - start)
        if bar is not None:
            post = {"loss": f"{history.train_loss[-1]:.3f}"}
            post.update({k: f"{v[-1]:.3f}" for k, v in history.metrics.items()})
            bar.set_postfix(post)
            bar.update(1)
        if cap is not None and history.steps >= cap:
            history.capped = cap
            break
    if bar is not None:
        bar.close()
    if history.capped is not None and main:
        print(f"{desc}: stopped after {cap} steps ({MAX_STEPS_ENV}={cap})")
    model.eval()
    history.seconds = time.perf_counter() - start
    history.cpu_seconds = time.process_time() - cpu_start
    if not all(math.isfinite(v) for v in history.train_loss):
        raise FloatingPointError("training produced a non-finite epoch loss" + _advice(optimizer))
    return history


def _loss_and_count(out: Any) -> tuple[torch.Tensor, Any]:
    """What ``loss_fn`` returned as ``(loss, count)`` (count 1 for a bare loss), checked: a clear error
    naming ``loss_fn`` instead of one from deep inside ``backward``. Reads nothing on the host."""
    if isinstance(out, tuple):
        if len(out) != 2:
            raise ValueError(f"loss_fn must return a loss or a pair (loss, count), got a tuple of {len(out)}")
        loss, n = out
    else:
        loss, n = out, 1
    if not isinstance(loss, torch.Tensor):
        raise TypeError(
            f"loss_fn must return the loss as a torch.Tensor (0-dim, with a gradient), got {type(loss).__name__}; "
            "a Python number (e.g. from loss.item() or float(loss)) carries no gradient to train with")
    if loss.dim() != 0:
        raise ValueError(f"loss_fn must return a scalar loss, got shape {tuple(loss.shape)}")
    if not loss.is_floating_point():
        raise ValueError(f"loss_fn must return a floating-point loss, got dtype {loss.dtype}")
    if not loss.requires_grad:
        raise ValueError("loss_fn returned a loss without a gradient (requires_grad=False): it was computed "
                         "under torch.no_grad() or detached, or from no trainable parameter")
    if isinstance(n, torch.Tensor):
        if n.dim() != 0 or n.dtype == torch.bool or n.is_complex():
            raise ValueError(f"loss_fn's count must be a number or a 0-dim real tensor, got a {n.dtype} tensor "
                             f"of shape {tuple(n.shape)}")
        check_tensor_values("loss_fn's count", n, 0, math.inf,
                            what="count is how many units (e.g. tokens) the batch's mean loss was taken over")
    elif isinstance(n, bool) or not isinstance(n, (int, float)):
        raise ValueError(f"loss_fn's count must be a number or a 0-dim real tensor, got {n!r} ({type(n).__name__})")
    elif not n >= 0:  # also NaN
        raise ValueError(f"loss_fn's count must be at least 0, got {n}; count is how many units (e.g. tokens) the "
                         "batch's mean loss was taken over")
    return loss, n


def _precision(precision: str, dev: torch.device) -> tuple[torch.dtype | None, bool]:
    """``fit``'s ``precision`` on ``dev`` as (autocast dtype or None for float32, whether to scale the loss)."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(repr(p) for p in PRECISIONS)}, got {precision!r}")
    cuda = dev.type == "cuda"
    if precision == "auto":
        precision = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if cuda else "32"
    if precision == "32":
        return None, False
    if precision == "fp16":
        if not cuda:
            raise ValueError(f"precision='fp16' needs a CUDA GPU (its loss scaling runs there), but the device is "
                             f"{dev}; use precision='bf16' (mixed precision without scaling) or '32' here")
        return torch.float16, True
    if cuda and not torch.cuda.is_bf16_supported():
        raise ValueError(f"precision='bf16' is not supported by this GPU ({torch.cuda.get_device_name(dev)}); "
                         "use precision='fp16' or 'auto' (float16 with loss scaling)")
    return torch.bfloat16, False


def _training_device(device: torch.device | str | None, run: DistributedRun | None) -> torch.device:
    """The device to train on; under ``torchrun`` a bare ``'cuda'`` means this process's GPU."""
    dev = torch.device(device) if device is not None else pick_device(verbose=False)
    if run is not None and dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", run.local_rank)
    return dev


class _LossOf(nn.Module):
    """``loss_fn(model, batch)`` as a module, so ``DistributedDataParallel`` can wrap the whole of it."""

    def __init__(self, model: nn.Module, loss_fn: Callable[[nn.Module, Any], Any]):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, batch: Any) -> Any:
        return self.loss_fn(self.model, batch)


def _join_process_group(dev: torch.device) -> None:
    """Start the ``torchrun`` job's process group once (NCCL between GPUs, Gloo between CPU processes)."""
    import atexit

    import torch.distributed as dist

    if dist.is_initialized():
        return
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())


class _EveryNth:
    """Batches ``rank``, ``rank + world_size``, … of ``data``: one process's share of any iterable.

    Every process goes through all batches (they must come out the same everywhere: a seeded
    iterable does) and keeps its own; a last incomplete round is dropped, so that all
    processes take the same number of steps.
    """

    def __init__(self, data: Iterable, world_size: int, rank: int):
        self.data, self.world_size, self.rank = data, world_size, rank

    def __iter__(self) -> Iterator:
        mine = None
        for i, batch in enumerate(self.data):
            if i % self.world_size == self.rank:
                mine = batch
            if i % self.world_size == self.world_size - 1:
                yield mine


def _shard(data: Iterable, run: DistributedRun) -> tuple[Iterable, Any]:
    """This process's share of ``data``, and the ``DistributedSampler`` to ``set_epoch`` (or None)."""
    from torch.utils.data import DataLoader, IterableDataset, RandomSampler, SequentialSampler
    from torch.utils.data.distributed import DistributedSampler

    if (not isinstance(data, DataLoader) or isinstance(data.dataset, IterableDataset) or data.batch_size is None
            or type(data.sampler) not in (RandomSampler, SequentialSampler)):
        return _EveryNth(data, run.world_size, run.rank), None  # a sampler of its own is kept as it is
    shuffle = isinstance(data.sampler, RandomSampler)
    generator = getattr(data.sampler, "generator", None) or data.generator
    seed = generator.initial_seed() if generator is not None else resolve_seed(None)
    sampler = DistributedSampler(data.dataset, num_replicas=run.world_size, rank=run.rank, shuffle=shuffle,
                                 seed=seed, drop_last=data.drop_last)
    loader = DataLoader(data.dataset, batch_size=data.batch_size, sampler=sampler, num_workers=data.num_workers,
                        collate_fn=data.collate_fn, pin_memory=data.pin_memory, drop_last=data.drop_last,
                        timeout=data.timeout, worker_init_fn=data.worker_init_fn,
                        persistent_workers=data.persistent_workers)
    return loader, sampler


def _mean_over_processes(value: torch.Tensor, run: DistributedRun | None) -> float:
    """The mean of a 0-dim tensor over the ``torchrun`` processes (the value itself when alone), read once."""
    if run is not None:
        import torch.distributed as dist

        value = value.clone()
        dist.all_reduce(value)
        value = value / run.world_size
    return float(value)


def _sum_over_processes(total: torch.Tensor, count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An epoch's summed loss and count over all processes: the whole job's epoch mean, the same everywhere."""
    import torch.distributed as dist

    both = torch.stack((total, count.to(total.dtype)))
    dist.all_reduce(both)
    return both[0], both[1]


def _share_buffers(model: nn.Module) -> None:
    """Rank 0's buffers (e.g. batch-norm statistics) in every process, so evaluation agrees everywhere."""
    import torch.distributed as dist

    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)


def _advice(optimizer: torch.optim.Optimizer) -> str:
    """What to say when training blows up: the learning rate it ran at, and what to try."""
    lr = float(optimizer.param_groups[0]["lr"])
    return (f" (learning rate {lr:g}); try a smaller learning rate (e.g. lr={lr / 10:g}) "
            "or gradient clipping (clip_grad=1.0)")


def _check_divergence(epoch_loss: float, first_loss: float, epoch: int, optimizer: torch.optim.Optimizer) -> None:
    """Stop with ``FloatingPointError`` when an epoch's mean training loss is not finite
    or exceeds ``DIVERGENCE_FACTOR`` times the first step's loss (at least 1)."""
    limit = DIVERGENCE_FACTOR * max(abs(first_loss), 1.0)
    if math.isfinite(epoch_loss) and epoch_loss <= limit:
        return
    how = "" if not math.isfinite(epoch_loss) else (
        f", more than {DIVERGENCE_FACTOR:g} times the first step's loss of {first_loss:.3g}")
    raise FloatingPointError(f"training diverged: the mean training loss of epoch {epoch + 1} is "
                             f"{epoch_loss:.3g}{how}" + _advice(optimizer))


def warmup_cosine_factor(step: int, warmup: int, max_steps: int) -> float:
    """Multiplier of the base learning rate at optimisation step ``step``.

    Linear warm-up from 0 to 1 over the first ``warmup`` steps, times a cosine
    decay from 1 (step 0) to 0 (step ``max_steps``):

        factor(t) = min(1, t / warmup) · ½ (1 + cos(π t / max_steps)),

    with t clipped to ``[0, max_steps]`` (``warmup=0`` means no warm-up).
    """
    max_steps = check_positive_int("max_steps", max_steps)
    warmup = check_int("warmup", warmup, minimum=0)
    if warmup > max_steps:
        raise ValueError(f"need max_steps >= 1 and 0 <= warmup <= max_steps, got warmup={warmup}, "
                         f"max_steps={max_steps}")
    t = min(max(step, 0), max_steps)
    factor = 0.5 * (1.0 + math.cos(math.pi * t / max_steps))
    if warmup > 0 and t < warmup:
        factor *= t / warmup
    return factor


def warmup_cosine_schedule(optimizer: torch.optim.Optimizer, warmup: int,
                           max_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` scaling every parameter group's learning rate by :func:`warmup_cosine_factor`.

    Step it once per optimisation step (``ab.fit(..., scheduler=...)`` does).
    """
    warmup_cosine_factor(0, warmup, max_steps)  # validates the arguments
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine_factor(step, warmup, max_steps))


def schedule_figure(warmup: int = 50, max_steps: int = 500, base_lr: float = 5e-4, figsize=(5.5, 3.0)):
    """The learning rate a ``warmup_cosine_schedule`` gives at every step, read off a real scheduler."""
    from ..core.plot import ensure_style
    import matplotlib.pyplot as plt

    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=base_lr)
    sched = warmup_cosine_schedule(opt, warmup, max_steps)
    lrs = []
    for _ in range(max_steps + 1):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    ensure_style()
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    ax.plot(range(max_steps + 1), lrs)
    if warmup:
        ax.axvline(warmup, color="0.6", linestyle="--", linewidth=1)
        # in the band above the peak, which the curve never enters (it sat on the curve at warm-up
        # 50 of 1000, where the peak is just right of the line; issue 36)
        ax.annotate("end of warm-up", (warmup, 1.1 * base_lr), xytext=(4, 0), textcoords="offset points",
                    fontsize=8, va="center", ha="left")
    ax.set_ylim(0.0, 1.2 * base_lr)  # the same scale for every warm-up length
    ax.set_xlabel("optimisation step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"warm-up {warmup} of {max_steps} steps")  # one line at 390 px
    return fig


@torch.no_grad()
def accuracy(model: nn.Module, batches: Iterable, device: torch.device | str | None = None, ignore: int = IGNORE,
             scores: Callable[[torch.Tensor], torch.Tensor] | None = None) -> float:
    """Share of the labels that the model's arg-max predicts, over batches of ``(inputs, labels)``.

    Labels are one per example (a class) or one per position (a token); those equal to
    ``ignore`` (``IGNORE``, -100) are skipped. Inputs and labels go to ``device`` (default: the
    model's); the model runs in eval mode. ``scores(inputs)`` gives the logits (default: the
    model itself; e.g. ``model.classify`` for a classifier head).
    """
    dev = model_device(model) if device is None else device
    right = total = 0
    with evaluating(model):
        for inputs, labels in capped_batches(batches):
            logits = (model if scores is None else scores)(inputs.to(dev))
            labels = labels.to(dev)
            scored = labels != ignore
            right += int(((logits.argmax(dim=-1) == labels) & scored).sum())
            total += int(scored.sum())
    if total == 0:
        raise ValueError("accuracy got no labels to score")
    return right / total


def model_device(model: nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")
