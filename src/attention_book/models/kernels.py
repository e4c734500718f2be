"""Chapter 2: attention pooling by similarity (Nadaraya–Watson kernel regression).

A kernel ``alpha(q, k)`` scores how close a query is to a key. Normalising the
kernel over the keys and pooling the values,

    f(q) = sum_i alpha(q, k_i) / sum_j alpha(q, k_j) * v_i,

is the Nadaraya–Watson estimator — attention pooling with weights that
depend only on the distance between query and key. Here every kernel is
written through its logarithm ``log alpha`` and the weights are computed as a
(masked) softmax of it, which is the same number as "kernel divided by its
sum" but never divides 0 by 0 when a narrow Gaussian underflows. Kernels with
bounded support (boxcar, Epanechnikov) mask the keys they do not reach; a
query that reaches no key at all has no estimate (NaN) and a row of zero
weights, like an all-masked row of :func:`attention_book.masked_softmax`.

The width ``sigma`` of a kernel can be learned by gradient descent on the
leave-one-out error (:func:`learn_width`); fitting it on the in-sample error
instead drives it to zero, because each training point then predicts itself.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

from .attention import masked_softmax
from ..core.checks import check_optional_positive_int, check_positive_int, check_same_device
from ..core.config import resolve_seed
from ..core.plot import BOOK_CMAP, PAGE_FIGURE_WIDTH, ensure_style

__all__ = [
    "KERNEL_NAMES",
    "gaussian_kernel",
    "boxcar_kernel",
    "constant_kernel",
    "epanechnikov_kernel",
    "kernel_function",
    "log_kernel",
    "nadaraya_watson",
    "loo_predictions",
    "width_objective",
    "KernelData",
    "target_function",
    "make_kernel_data",
    "NadarayaWatson",
    "learn_width",
    "kernels_figure",
    "estimates_figure",
    "estimate_weights",
    "kernel_explorer_figure",
    "width_maps_figure",
    "width_objectives_figure",
]

KERNEL_NAMES: tuple[str, ...] = ("gaussian", "boxcar", "constant", "epanechnikov")
_DIFFERENTIABLE = ("gaussian", "epanechnikov")


# --- checks -------------------------------------------------------------------------------

def _check_kernel(kernel) -> str:
    if kernel not in KERNEL_NAMES:
        raise ValueError(f"kernel must be one of {', '.join(KERNEL_NAMES)}, got {kernel!r}")
    return kernel


def _check_sigma(sigma) -> None:
    if isinstance(sigma, torch.Tensor):
        if sigma.numel() != 1:
            raise ValueError(f"sigma (the kernel width) must be a single number, got a tensor of shape "
                             f"{tuple(sigma.shape)}")
        if sigma.device.type != "meta" and not bool(torch.isfinite(sigma) & (sigma > 0)):
            raise ValueError(f"sigma (the kernel width) must be positive and finite, got {float(sigma):.4g}")
        return
    if isinstance(sigma, bool) or not isinstance(sigma, numbers.Real) or not math.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma (the kernel width) must be a positive finite number, got {sigma!r}")


def _as_points(x, name: str) -> torch.Tensor:
    """(n,) or (n, d) floating tensor -> (n, d)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() == 1:
        return x[:, None]
    if x.dim() == 2:
        return x
    raise ValueError(f"{name} must have shape (n,) or (n, features), got shape {tuple(x.shape)}")


def _check_training(x_train, y_train) -> torch.Tensor:
    """Validate the training pairs; return the keys as (n, d)."""
    keys = _as_points(x_train, "x_train")
    if keys.shape[0] == 0:
        raise ValueError("x_train is empty: the estimator needs at least one training point")
    if not isinstance(y_train, torch.Tensor) or y_train.dim() not in (1, 2) or y_train.shape[0] != keys.shape[0]:
        got = tuple(y_train.shape) if isinstance(y_train, torch.Tensor) else type(y_train).__name__
        raise ValueError(f"y_train must have shape ({keys.shape[0]},) or ({keys.shape[0]}, value_size) to match "
                         f"x_train {tuple(x_train.shape)}, got {got}")
    return keys


# --- kernels ------------------------------------------------------------------------------

def log_kernel(sq_dists: torch.Tensor, kernel: str = "gaussian", sigma=1.0):
    """``(log alpha, support)`` of a kernel, given squared distances ``||q - k||^2``.

    ``support`` is a boolean tensor (True where ``alpha > 0``) or ``None`` when
    the kernel is positive everywhere. Outside the support ``log alpha`` is a
    finite placeholder; use the mask.

    ===============  ==========================  ======================
    kernel           alpha(q, k), u = ||q-k||/σ   support
    ===============  ==========================  ======================
    ``gaussian``     exp(-u² / 2)                everywhere
    ``boxcar``       1                           u ≤ 1
    ``constant``     1                           everywhere
    ``epanechnikov`` 1 - u²                      u < 1
    ===============  ==========================  ======================
    """
    _check_kernel(kernel)
    _check_sigma(sigma)
    if kernel == "gaussian":
        return -sq_dists / (2 * sigma**2), None
    if kernel == "constant":
        return torch.zeros_like(sq_dists), None
    if kernel == "boxcar":
        return torch.zeros_like(sq_dists), sq_dists <= sigma**2
    u = 1 - sq_dists / sigma**2  # epanechnikov
    # clamp before the log so that masked entries carry neither -inf nor a NaN gradient
    return torch.log(u.clamp_min(torch.finfo(u.dtype).tiny)), u > 0


def kernel_function(d: torch.Tensor, kernel: str = "gaussian", sigma=1.0) -> torch.Tensor:
    """``alpha`` as a function of the difference (or distance) ``d = q - k``, elementwise."""
    if not isinstance(d, torch.Tensor) or not d.is_floating_point():
        raise ValueError(f"d must be a floating-point tensor, got {type(d).__name__}"
                         + (f" of dtype {d.dtype}" if isinstance(d, torch.Tensor) else ""))
    scores, support = log_kernel(d**2, kernel, sigma)
    values = torch.exp(scores)
    return values if support is None else values * support


def gaussian_kernel(d: torch.Tensor, sigma=1.0) -> torch.Tensor:
    """exp(-d² / (2σ²))."""
    return kernel_function(d, "gaussian", sigma)


def boxcar_kernel(d: torch.Tensor, sigma=1.0) -> torch.Tensor:
    """1 where |d| ≤ σ, else 0."""
    return kernel_function(d, "boxcar", sigma)


def constant_kernel(d: torch.Tensor, sigma=1.0) -> torch.Tensor:
    """1 everywhere (σ is checked but has no effect)."""
    return kernel_function(d, "constant", sigma)


def epanechnikov_kernel(d: torch.Tensor, sigma=1.0) -> torch.Tensor:
    """max(0, 1 - d²/σ²)."""
    return kernel_function(d, "epanechnikov", sigma)


# --- the estimator ------------------------------------------------------------------------

def nadaraya_watson(x_train: torch.Tensor, y_train: torch.Tensor, x_query: torch.Tensor,
                    kernel: str = "gaussian", sigma=1.0, exclude: torch.Tensor | None = None):
    """Nadaraya–Watson regression as attention pooling.

    Queries ``x_query`` (n_q,) or (n_q, d), keys ``x_train`` (n,) or (n, d), values
    ``y_train`` (n,) or (n, v). ``exclude`` is an optional boolean (n_q, n) mask of
    query–key pairs to leave out (True = leave out), e.g. the diagonal for
    leave-one-out.

    Returns ``(y_hat, weights)``: predictions (n_q,) or (n_q, v) and the attention
    weights (n_q, n). Every row of weights is nonnegative and sums to one, except
    for a query that no key reaches (bounded kernels, or everything excluded):
    its row is all zeros and its prediction is NaN. For the Gaussian kernel the
    weights equal ``softmax(-||q - k||² / (2σ²))`` over the keys.
    """
    keys = _check_training(x_train, y_train)
    queries = _as_points(x_query, "x_query")
    if keys.shape[1] != queries.shape[1]:
        raise ValueError(f"x_query has {queries.shape[1]} features (shape {tuple(x_query.shape)}) but x_train has "
                         f"{keys.shape[1]} (shape {tuple(x_train.shape)}); they must match")
    n_q, n = queries.shape[0], keys.shape[0]
    if exclude is not None:
        if not isinstance(exclude, torch.Tensor) or exclude.dtype != torch.bool or tuple(exclude.shape) != (n_q, n):
            got = (f"{tuple(exclude.shape)} {exclude.dtype}" if isinstance(exclude, torch.Tensor)
                   else type(exclude).__name__)
            raise ValueError(f"exclude must be a boolean mask of shape ({n_q}, {n}) (queries, keys), got {got}")
    sq_dists = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)  # (n_q, n)
    scores, support = log_kernel(sq_dists, kernel, sigma)
    if exclude is not None:
        support = ~exclude if support is None else support & ~exclude
    weights = masked_softmax(scores[None], None if support is None else support[None])[0]  # (n_q, n)
    values = y_train if y_train.dim() == 2 else y_train[:, None]
    y_hat = weights @ values.to(weights.dtype)
    if support is not None:
        y_hat = y_hat.masked_fill(~support.any(-1, keepdim=True), float("nan"))
    return (y_hat if y_train.dim() == 2 else y_hat[:, 0]), weights


def loo_predictions(x_train: torch.Tensor, y_train: torch.Tensor, kernel: str = "gaussian", sigma=1.0):
    """Leave-one-out estimates: training point i predicted from all the others.

    Returns ``(y_hat, weights)`` as :func:`nadaraya_watson`; the diagonal of
    ``weights`` is zero.
    """
    n = _as_points(x_train, "x_train").shape[0]
    if n < 2:
        raise ValueError(f"leave-one-out needs at least 2 training points, got {n}")
    eye = torch.eye(n, dtype=torch.bool, device=x_train.device)
    return nadaraya_watson(x_train, y_train, x_train, kernel, sigma, exclude=eye)


def width_objective(x_train: torch.Tensor, y_train: torch.Tensor, sigma, kernel: str = "gaussian",
                    leave_one_out: bool = True) -> torch.Tensor:
    """Mean squared error of the training labels, predicted leave-one-out (default) or in sample.

    In sample, every point takes part in its own estimate, so the error goes to
    zero as ``sigma -> 0``; leave-one-out it does not. NaN when some point has no
    estimate (a bounded kernel narrower than the gap to its neighbours).
    """
    if leave_one_out:
        y_hat, _ = loo_predictions(x_train, y_train, kernel, sigma)
    else:
        y_hat, _ = nadaraya_watson(x_train, y_train, x_train, kernel, sigma)
    return ((y_hat - y_train) ** 2).mean()


# --- data ---------------------------------------------------------------------------------

def target_function(x: torch.Tensor) -> torch.Tensor:
    """The chapter's regression target: 2 sin(x) + x."""
    return 2 * torch.sin(x) + x


@dataclass
class KernelData:
    """Training points (sorted), their noisy labels, and a noise-free validation grid."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor


def make_kernel_data(n_train: int = 40, noise: float = 1.0, x_max: float = 5.0, step: float = 0.1,
                     seed: int | None = None) -> KernelData:
    """``n_train`` sorted points uniform in [0, x_max) with labels 2 sin x + x + noise·N(0, 1);
    a validation grid 0, step, …, < x_max with the noise-free target. Same seed, same data;
    ``seed=None`` uses the book's seed (:func:`attention_book.resolve_seed`)."""
    n_train = check_positive_int("n_train", n_train)
    if not (math.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be a nonnegative number, got {noise!r}")
    if not (math.isfinite(x_max) and x_max > 0 and math.isfinite(step) and 0 < step < x_max):
        raise ValueError(f"need x_max > 0 and 0 < step < x_max, got x_max={x_max!r}, step={step!r}")
    gen = torch.Generator().manual_seed(resolve_seed(seed))
    x_train, _ = torch.sort(torch.rand(n_train, generator=gen) * x_max)
    y_train = target_function(x_train) + noise * torch.randn(n_train, generator=gen)
    x_val = torch.arange(0, x_max, step)
    return KernelData(x_train, y_train, x_val, target_function(x_val))


# --- a learnable width --------------------------------------------------------------------

class NadarayaWatson(nn.Module):
    """Nadaraya–Watson regression over a fixed training set with a learnable width.

    The width is ``sigma = exp(log_sigma)`` so gradient steps keep it positive.
    ``forward(queries, leave_out=None)`` returns predictions; ``leave_out`` is an
    optional integer tensor (n_q,) naming, for each query, the training point to
    leave out of its estimate (use it when the queries *are* training points).
    ``attention_weights`` (n_q, n) holds the weights of the last call.
    """

    def __init__(self, x_train: torch.Tensor, y_train: torch.Tensor, kernel: str = "gaussian", sigma: float = 1.0):
        super().__init__()
        _check_kernel(kernel)
        _check_sigma(sigma)
        _check_training(x_train, y_train)
        self.kernel = kernel
        self.register_buffer("keys", x_train.detach().clone())
        self.register_buffer("values", y_train.detach().clone())
        self.log_sigma = nn.Parameter(torch.tensor(math.log(float(sigma)), dtype=x_train.dtype,
                                                   device=x_train.device))
        self.attention_weights: torch.Tensor | None = None

    @property
    def sigma(self) -> torch.Tensor:
        return self.log_sigma.exp()

    def forward(self, queries: torch.Tensor, leave_out: torch.Tensor | None = None) -> torch.Tensor:
        check_same_device("queries", queries, self)
        exclude = None
        if leave_out is not None:
            n_q = _as_points(queries, "queries").shape[0]
            if leave_out.dim() != 1 or leave_out.shape[0] != n_q or leave_out.is_floating_point():
                raise ValueError(f"leave_out must be an integer tensor of shape ({n_q},), one training index per "
                                 f"query, got shape {tuple(leave_out.shape)} and dtype {leave_out.dtype}")
            positions = torch.arange(self.keys.shape[0], device=queries.device)
            exclude = leave_out[:, None] == positions[None, :]
        y_hat, self.attention_weights = nadaraya_watson(self.keys, self.values, queries, self.kernel,
                                                        self.sigma, exclude)
        return y_hat

    def extra_repr(self) -> str:
        return f"kernel={self.kernel!r}, n_train={self.keys.shape[0]}"


def learn_width(data: KernelData, kernel: str = "gaussian", sigma: float = 1.0, objective: str = "loo",
                epochs: int = 50, lr: float = 0.5, batch_size: int | None = None, seed: int | None = None,
                progress: bool = True, device=None):
    """Learn the kernel width by gradient descent on ``log sigma``, with :func:`attention_book.fit`.

    ``objective='loo'`` minimises the leave-one-out squared error (each training
    point predicted without itself); ``objective='in_sample'`` minimises the
    plain training error, which rewards ``sigma -> 0``. ``batch_size=None`` takes
    full gradient steps (one per epoch); an int samples minibatches of training
    points as queries (stochastic gradient descent), shuffled by ``seed``
    (``None``: the book's seed + 1).

    Returns ``(model, history)``; the history records ``sigma``, the
    leave-one-out MSE and the validation MSE after every epoch.
    """
    from ..core.train import fit

    batch_size = check_optional_positive_int("batch_size", batch_size)
    if kernel not in _DIFFERENTIABLE:
        raise ValueError(f"kernel {kernel!r} does not change smoothly with its width, so gradient descent cannot "
                         f"learn it; use one of {', '.join(_DIFFERENTIABLE)}")
    if objective not in ("loo", "in_sample"):
        raise ValueError(f"objective must be 'loo' or 'in_sample', got {objective!r}")
    model = NadarayaWatson(data.x_train, data.y_train, kernel, sigma)
    n = data.x_train.shape[0]
    if objective == "loo" and n < 2:
        raise ValueError(f"leave-one-out needs at least 2 training points, got {n}")
    indices = torch.arange(n)
    if batch_size is None:
        batches = [indices]
    else:
        batches = torch.utils.data.DataLoader(indices, batch_size=batch_size, shuffle=True,
                                              generator=torch.Generator().manual_seed(resolve_seed(seed, 1)))

    def loss_fn(model, idx):
        y_hat = model(model.keys[idx], leave_out=idx if objective == "loo" else None)
        return ((y_hat - model.values[idx]) ** 2).mean(), len(idx)

    def evaluate(model):
        dev = model.keys.device
        val_hat = model(data.x_val.to(dev))
        return {
            "sigma": float(model.sigma),
            "LOO mse": float(width_objective(model.keys, model.values, model.sigma, kernel, leave_one_out=True)),
            "val mse": float(((val_hat - data.y_val.to(dev)) ** 2).mean()),
        }

    history = fit(model, batches, loss_fn, epochs=epochs, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                  clip_grad=10.0, evaluate=evaluate, device=device, progress=progress,
                  desc=f"width ({objective})")
    return model, history


# --- figures ------------------------------------------------------------------------------

_TITLES = {"gaussian": "Gaussian", "boxcar": "Boxcar", "constant": "Constant", "epanechnikov": "Epanechnikov"}


def _panels(num: int, width: float, height: float):
    """A figure with ``num`` panels sharing the y axis; more than three wrap onto rows of two
    (four panels in a row shrink to unreadable on a phone). Unused cells are removed."""
    cols = num if num <= 3 else 2
    rows = -(-num // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols + 0.4, height * rows), sharey=True, squeeze=False,
                             layout="constrained")
    for ax in axes.flat[num:]:
        ax.remove()
    return fig, axes


def kernels_figure(kernels=KERNEL_NAMES, sigma: float = 1.0, x_range: float = 2.5):
    """One panel per kernel: ``alpha(q, k)`` against ``q - k`` for the key at 0."""
    ensure_style()
    d = torch.linspace(-x_range, x_range, 401)
    fig, axes = _panels(len(kernels), 3.2, 2.4)
    for ax, name in zip(axes.flat, kernels):
        ax.plot(d.numpy(), kernel_function(d, name, sigma).numpy())
        ax.set_title(_TITLES[name])
        ax.set_xlabel("q − k")
    for ax in axes[:, 0]:
        ax.set_ylabel("α(q, k)")
    return fig


def estimate_weights(data: KernelData, settings):
    """Predictions and attention weights on the validation grid for several ``(kernel, sigma)`` settings.

    Returns ``(predictions, weights)``: a list of (n_val,) tensors and a
    (1, len(settings), n_val, n_train) tensor ready for :func:`attention_book.heatmaps_figure`.
    """
    preds, weights = [], []
    for kernel, sigma in settings:
        y_hat, w = nadaraya_watson(data.x_train, data.y_train, data.x_val, kernel, sigma)
        preds.append(y_hat)
        weights.append(w)
    return preds, torch.stack(weights)[None]


def _draw_fit(ax, data: KernelData, y_hat: torch.Tensor, title: str) -> None:
    ax.plot(data.x_train.numpy(), data.y_train.numpy(), "o", alpha=0.45, markersize=4, label="training data")
    ax.plot(data.x_val.numpy(), data.y_val.numpy(), "--", color="tab:purple", label="2 sin x + x")
    x, y = data.x_val.numpy(), y_hat.detach().numpy()
    ax.plot(x, y, color="tab:red", label="estimate")
    # A query reached while both its neighbours are not (NaN) would be a line of length 0: a dot.
    reached = np.isfinite(y)
    alone = reached & ~np.r_[False, reached[:-1]] & ~np.r_[reached[1:], False]
    if alone.any():
        ax.plot(x[alone], y[alone], "o", color="tab:red", markersize=3.5)
    ax.set_title(title)
    ax.set_xlabel("x")


def estimates_figure(data: KernelData, settings, titles=None):
    """One panel per ``(kernel, sigma)`` setting: training data, true function and the estimate."""
    ensure_style()
    preds, _ = estimate_weights(data, settings)
    titles = titles or [f"{_TITLES[k]}, σ={s:g}" for k, s in settings]
    fig, axes = _panels(len(settings), 3.6, 2.8)
    for ax, y_hat, title in zip(axes.flat, preds, titles):
        _draw_fit(ax, data, y_hat, title)
    for ax in axes[:, 0]:
        ax.set_ylabel("y")
    axes[0, 0].legend(loc="upper left", fontsize=8)
    return fig


def width_maps_figure(weights, titles, cols: int = 2):
    """Attention maps (validation queries down, training keys across), each with its own colour bar.

    ``weights`` is a sequence of (queries, keys) matrices, e.g. one per kernel width.
    Each map's colours run from 0 to its own largest weight: a wide kernel spreads
    its weight so thinly that on a shared scale its band would all but vanish.
    """
    ensure_style()
    rows = -(-len(weights) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5, 3.0 * rows), squeeze=False, layout="constrained")
    for ax in axes.flat[len(weights):]:
        ax.remove()
    for i, (ax, w, title) in enumerate(zip(axes.flat, weights, titles)):
        w = w.detach().numpy() if isinstance(w, torch.Tensor) else np.asarray(w)
        image = ax.imshow(w, cmap=BOOK_CMAP, aspect="auto", vmin=0.0, vmax=float(w.max()))
        ax.grid(False)
        ax.set_title(f"{title} (largest weight {w.max():.2f})")
        if i // cols == rows - 1:
            ax.set_xlabel("training point (key)")
        if i % cols == 0:
            ax.set_ylabel("validation point (query)")
        fig.colorbar(image, ax=ax, shrink=0.9)
    return fig


def kernel_explorer_figure(kernel: str = "gaussian", sigma: float = 0.5, n_train: int = 40, seed: int | None = None):
    """The widget's figure: the fit and the attention matrix for one kernel, width and training-set size.

    Draws data with :func:`make_kernel_data` (``n_train`` points, ``seed``; ``None``
    is the book's seed, so 40 points give the chapter's data),
    estimates the validation grid, and shows the fit (left) and the weights
    (validation queries × training keys, right). The title reports the
    validation MSE over the queries some training point reaches, and how many
    reach none (their rows are left blank over hatching, not drawn as zero weights).
    """
    ensure_style()
    data = make_kernel_data(n_train=n_train, seed=seed)
    y_hat, weights = nadaraya_watson(data.x_train, data.y_train, data.x_val, kernel, sigma)
    defined = ~torch.isnan(y_hat)
    reached, n_val = int(defined.sum()), len(defined)
    mse = float(((y_hat - data.y_val)[defined] ** 2).mean()) if reached else float("nan")
    if reached == n_val:
        score = f"val MSE {mse:.3f}"
    elif reached:
        score = f"val MSE {mse:.3f} over the {reached}\nqueries reached ({n_val - reached} of {n_val} reach no point)"
    else:
        score = f"no estimate:\nnone of the {n_val} queries reaches a training point"
    fig, (left, right) = plt.subplots(1, 2, figsize=(PAGE_FIGURE_WIDTH, 3.6), layout="constrained",
                                      gridspec_kw={"width_ratios": [1.1, 1]})
    _draw_fit(left, data, y_hat, f"{_TITLES[kernel]}, σ={sigma:.3g}, n={n_train}: {score}")
    left.set_ylabel("y")
    left.legend(loc="upper left", fontsize=8)
    x_max = float(data.x_val[-1])
    # A query no training point reaches has a row of zeros, not an even spread of attention:
    # leave its row blank over a hatched background, and scale the colours to [0, largest weight].
    shown = np.ma.masked_array(weights.numpy(), mask=np.repeat(~defined.numpy()[:, None], n_train, axis=1))
    top = float(weights.max()) if reached else 1.0
    cmap = plt.get_cmap(BOOK_CMAP).with_extremes(bad=(0.0, 0.0, 0.0, 0.0))  # masked: transparent
    right.add_patch(plt.Rectangle((-0.5, 0.0), n_train, x_max, facecolor="white", edgecolor="0.6", hatch="///",
                                  linewidth=0, zorder=0))
    image = right.imshow(shown, cmap=cmap, aspect="auto", vmin=0.0, vmax=top, zorder=1,
                         extent=(-0.5, n_train - 0.5, x_max, 0.0))
    right.grid(False)
    right.set_xlabel("training point (key), sorted by x")
    right.set_ylabel("validation query x")
    right.set_title("attention weights" if reached == n_val else "attention weights\n(hatched: query reaches no point)")
    if reached:  # with no query reached there is no weight to put on a scale
        fig.colorbar(image, ax=right, shrink=0.85)
    return fig


def width_objectives_figure(data: KernelData, sigmas=None, kernel: str = "gaussian", marks=None):
    """In-sample and leave-one-out MSE as functions of the width (log scale), with optional marked widths.

    ``marks`` is a dict ``{label: sigma}`` (e.g. the learned widths) drawn as vertical lines.
    """
    ensure_style()
    sigmas = np.geomspace(0.01, 3.0, 60) if sigmas is None else np.asarray(sigmas, dtype=float)
    with torch.no_grad():
        loo = [float(width_objective(data.x_train, data.y_train, float(s), kernel, True)) for s in sigmas]
        ins = [float(width_objective(data.x_train, data.y_train, float(s), kernel, False)) for s in sigmas]
    fig, ax = plt.subplots(figsize=(6.0, 3.6), layout="constrained")
    ax.plot(sigmas, ins, label="in-sample MSE")
    ax.plot(sigmas, loo, label="leave-one-out MSE")
    for i, (label, value) in enumerate((marks or {}).items()):
        value = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
        ax.axvline(float(value), linestyle=":", color=f"C{i + 2}", label=f"{label}: σ={float(value):.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("kernel width σ")
    ax.set_ylabel("mean squared error")
    ax.set_title(f"{_TITLES[kernel]} kernel: choosing the width")
    ax.legend(fontsize=8)
    return fig
