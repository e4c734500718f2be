"""The one training loop every chapter uses.

``fit`` knows nothing about a particular model: the chapter passes a
``loss_fn(model, batch)`` that returns the loss of one batch. Everything else
(devices, clipping, mixed precision, schedules, progress, history) lives here.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
from torch import nn

from .checks import check_positive_int
from .config import device as pick_device
from .config import static_explorers

__all__ = ["History", "fit", "move_to", "grad_clipping", "evaluating"]

# An epoch whose mean training loss exceeds this many times the loss of the first
# step (taken before any update) has diverged. The book's runs start at 2–10 and
# fall; a run at a far too large learning rate climbs to 1e6–1e20 within an epoch.
DIVERGENCE_FACTOR = 1e4


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
    ``lr`` records the learning rate at every optimisation step.
    """

    train_loss: list[float] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    lr: list[float] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0

    def record(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(float(value))

    def plot(self, logy: bool = False, title: str | None = None):
        """Learning curves: training loss and every recorded metric. Returns the figure."""
        from .plot import plot_curves

        curves = {"train loss": self.train_loss, **self.metrics}
        losses_only = all("loss" in name or "perplexity" in name for name in curves)
        return plot_curves(curves, xlabel="epoch", ylabel="loss" if losses_only else "loss / metric", logy=logy,
                           title=title)

    def summary(self) -> str:
        parts = [f"{len(self.train_loss)} epochs, {self.steps} steps in {self.seconds:.1f}s"]
        if self.train_loss:
            parts.append(f"final train loss {self.train_loss[-1]:.4f}")
        for name, values in self.metrics.items():
            parts.append(f"{name} {values[-1]:.4f}")
        return ", ".join(parts)


def _progress_bar(total: int, desc: str):
    """tqdm's notebook bar in a live kernel. When the website is built (static explorers)
    the bar writes nothing while it runs and ``fit`` prints its final state as text: a
    widget on a page without a kernel would show an empty box."""
    if static_explorers():
        import io

        from tqdm.std import tqdm

        return tqdm(total=total, desc=desc, unit="epoch", file=io.StringIO(), ascii=False)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="epoch")


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
    amp: bool = False,
    progress: bool = True,
    desc: str = "training",
) -> History:
    """Train ``model`` for ``epochs`` passes over ``train_data``.

    Parameters
    ----------
    loss_fn
        ``loss_fn(model, batch)`` returns either a scalar loss (mean over the
        batch) or a pair ``(mean_loss, count)``, where ``count`` is how many units
        (e.g. unpadded tokens) the mean was taken over. Epoch losses are averaged
        with these counts, so a short last batch or padding does not skew them.
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
    amp
        Mixed precision (float16 autocast + gradient scaling) on CUDA; ignored
        elsewhere.
    """
    epochs = check_positive_int("epochs", epochs)
    dev = torch.device(device) if device is not None else pick_device(verbose=False)
    model.to(dev)
    if optimizer is None:
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    use_amp = bool(amp) and dev.type == "cuda"
    scaler = torch.amp.GradScaler("cuda") if use_amp else None
    history = History()
    start = time.perf_counter()

    first_loss = None  # the loss of the first step, before any update: the yardstick for divergence
    bar = None
    epoch_iter: Iterable[int] = range(epochs)
    if progress:
        bar = _progress_bar(epochs, desc)
    for _epoch in epoch_iter:
        model.train()
        # Summed on the device and read once per epoch: reading the loss every step would make
        # a GPU wait for each step to finish before the next can be queued.
        total, count, batches = torch.zeros((), device=dev), torch.zeros((), device=dev), 0
        for batch in train_data:
            batch = move_to(batch, dev)
            with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=use_amp):
                out = loss_fn(model, batch)
            loss, n = (out if isinstance(out, tuple) else (out, 1))
            if loss.dim() != 0:
                raise ValueError(f"loss_fn must return a scalar loss, got shape {tuple(loss.shape)}")
            if first_loss is None:  # the one read in the loop: the yardstick for divergence, before any update
                first_loss = float(loss.detach())
                if not math.isfinite(first_loss):
                    raise FloatingPointError(f"the loss of the first step is {first_loss}" + _advice(optimizer))
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                if clip_grad is not None:
                    scaler.unscale_(optimizer)
                    grad_clipping(model, clip_grad)
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                if clip_grad is not None:
                    grad_clipping(model, clip_grad)
                optimizer.step()
            history.lr.append(float(optimizer.param_groups[0]["lr"]))
            if scheduler is not None:
                scheduler.step()
            history.steps += 1
            total += loss.detach().float() * n
            count += n
            batches += 1
        if batches == 0:
            raise ValueError("train_data yielded no batches")
        epoch_loss = float(total / count)
        _check_divergence(epoch_loss, first_loss, _epoch, optimizer)
        history.train_loss.append(epoch_loss)
        if evaluate is not None:
            with evaluating(model), torch.no_grad():
                for name, value in evaluate(model).items():
                    history.record(name, value)
        if bar is not None:
            post = {"loss": f"{history.train_loss[-1]:.3f}"}
            post.update({k: f"{v[-1]:.3f}" for k, v in history.metrics.items()})
            bar.set_postfix(post)
            bar.update(1)
    if bar is not None:
        bar.close()
        if static_explorers():
            print(bar)  # the page shows the finished bar as one line of text
    model.eval()
    history.seconds = time.perf_counter() - start
    if not all(math.isfinite(v) for v in history.train_loss):
        raise FloatingPointError("training produced a non-finite epoch loss" + _advice(optimizer))
    return history


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
