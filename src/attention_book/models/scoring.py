"""Chapter 3 extras: more scoring functions, the 1/√d figure, and what scores cost.

* :class:`DistanceAttention` — the Gaussian-kernel score ``-½‖q - k‖²`` computed
  from dot products and the keys' squared norms only (exercise 11.3.1).
* :class:`BilinearAttention` — the score ``qᵀ M k`` for queries and keys of
  different sizes (exercise 11.3.2).
* :func:`scaling_statistics` / :func:`score_scale_figure` — why dot products are divided
  by ``√d``: variance of the raw scores and saturation of the softmax as ``d`` grows.
* :func:`scoring_cost`, :func:`measure_scoring_costs`, :func:`scoring_flops`,
  :func:`scoring_costs_figure` — measured and counted cost of the four scores as the
  number of keys and the feature size grow (exercise 11.3.3).

Both modules follow :mod:`attention_book.models.attention`: ``forward(queries, keys,
values, valid_lens=None)``, the fused kernel when weights are not wanted, and
``attention_weights`` (batch, queries, keys) kept when they are.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Callable, Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

from .attention import AdditiveAttention, DotProductAttention, check_qkv_devices, check_qkv, wants_weights, attend, key_mask
from ..core.checks import check_dropout, check_int, check_positive_int
from ..core.config import max_steps, resolve_seed
from ..core.plot import ensure_style, chance_line

__all__ = [
    "DistanceAttention",
    "BilinearAttention",
    "distance_scores",
    "scaling_statistics",
    "score_scale_figure",
    "SCORING_KINDS",
    "make_scorer",
    "scoring_cost",
    "best_time",
    "measure_scoring_costs",
    "scoring_flops",
    "scoring_costs_figure",
    "token_weights_figure",
]


def _attend_module(module: nn.Module, q, k, values, valid_lens, need_weights, scale: float):
    """Mask, dropout and fast/weights path shared by the modules below."""
    batch, num_queries, num_keys = q.shape[0], q.shape[1], k.shape[1]
    mask = key_mask(valid_lens, batch, num_queries, num_keys, device=q.device)
    p = module.dropout if module.training else 0.0
    out, module.attention_weights = attend(
        q, k, values, mask, dropout_p=p, need_weights=wants_weights(module, need_weights), scale=scale
    )
    return out


def distance_scores(queries: torch.Tensor, keys: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """The Gaussian-kernel scores ``-scale · ½‖q - k‖²`` (batch, queries, keys), computed directly.

    ``scale`` defaults to ``1/√d``. This is the slow, literal reference that
    :class:`DistanceAttention` must agree with after the softmax.
    """
    check_qkv(queries, keys, keys, same_qk_size=True)
    scale = 1.0 / math.sqrt(queries.shape[-1]) if scale is None else scale
    diff = queries.unsqueeze(2) - keys.unsqueeze(1)  # (batch, queries, keys, d)
    return -0.5 * scale * (diff * diff).sum(-1)


class DistanceAttention(nn.Module):
    """Distance-based (Gaussian-kernel) attention using only the keys' squared norms.

    The score of query ``q`` and key ``k`` is ``-scale · ½‖q - k‖²`` with
    ``scale = 1/√d`` by default. Expanding the square,

        -½‖q - k‖² = qᵀk - ½‖k‖² - ½‖q‖²,

    and the last term is the same for every key of a query, so the softmax over
    the keys cancels it. What is left is a dot product of the augmented vectors
    ``[q, 1]`` and ``[k, -½‖k‖²]``, which the fused dot-product kernel computes;
    only the keys' squared norms (one number per key) are extra work.
    """

    def __init__(self, dropout: float = 0.0, scale: float | None = None, need_weights: bool | None = None):
        super().__init__()
        check_dropout(dropout)
        if scale is not None and not scale > 0:
            raise ValueError(f"scale must be positive (or None for 1/sqrt(d)), got {scale}")
        self.dropout, self.scale, self.need_weights = dropout, scale, need_weights
        self.attention_weights: torch.Tensor | None = None

    def forward(self, queries, keys, values, valid_lens=None, need_weights: bool | None = None):
        check_qkv(queries, keys, values, same_qk_size=True)
        scale = 1.0 / math.sqrt(queries.shape[-1]) if self.scale is None else self.scale
        half_sq_norms = 0.5 * (keys * keys).sum(-1, keepdim=True)  # (batch, keys, 1)
        q_aug = torch.cat([queries, torch.ones_like(queries[..., :1])], dim=-1)  # [q, 1]
        k_aug = torch.cat([keys, -half_sq_norms], dim=-1)  # [k, -½‖k‖²]
        return _attend_module(self, q_aug, k_aug, values, valid_lens, need_weights, scale)


class BilinearAttention(nn.Module):
    """Bilinear attention: score ``qᵀ M k / √key_size`` with a learned ``M`` (query_size, key_size).

    Lets queries and keys have different sizes. ``M`` starts with entries of
    variance ``1/query_size``, so ``qᵀM`` has unit-variance entries for
    unit-variance queries, and the ``1/√key_size`` factor then plays the role
    of ``1/√d`` in dot-product attention. Computed as dot-product attention
    between ``Q M`` and the keys, so it uses the fused kernel too.
    """

    def __init__(self, query_size: int, key_size: int, dropout: float = 0.0, need_weights: bool | None = None):
        super().__init__()
        query_size = check_positive_int("query_size", query_size)
        key_size = check_positive_int("key_size", key_size)
        check_dropout(dropout)
        self.query_size, self.key_size = query_size, key_size
        self.M = nn.Parameter(torch.randn(query_size, key_size) / math.sqrt(query_size))
        self.dropout, self.need_weights = dropout, need_weights
        self.attention_weights: torch.Tensor | None = None

    def forward(self, queries, keys, values, valid_lens=None, need_weights: bool | None = None):
        check_qkv(queries, keys, values, same_qk_size=False)
        check_qkv_devices(self, queries, keys, values)
        for name, t, size in (("queries", queries, self.query_size), ("keys", keys, self.key_size)):
            if t.shape[-1] != size:
                raise ValueError(
                    f"{name} have shape {tuple(t.shape)} but this layer needs (batch, length, {size}); "
                    f"it was built with query_size={self.query_size}, key_size={self.key_size}"
                )
        q_mapped = queries @ self.M  # (batch, queries, key_size): qᵀM for every query
        return _attend_module(self, q_mapped, keys, values, valid_lens, need_weights, 1.0 / math.sqrt(self.key_size))


# --- why 1/√d -------------------------------------------------------------------------------


def scaling_statistics(dims: Iterable[int], num_keys: int = 16, num_samples: int = 500,
                       seed: int | None = None) -> dict[str, np.ndarray]:
    """Score and softmax statistics for random unit-variance queries and keys of each size ``d``.

    For every ``d`` in ``dims``: draw ``num_samples`` queries and, for each, ``num_keys``
    keys with independent N(0, 1) entries, and measure, with the raw scores
    ``qᵀk`` and with the scaled scores ``qᵀk/√d``:

    * ``var_*``: the variance of the scores (theory: ``d`` raw, 1 scaled);
    * ``max_weight_*``: the mean largest softmax weight (1 = one-hot, saturated;
      ``1/num_keys`` = uniform);
    * ``grad_*``: the mean Frobenius norm of the softmax Jacobian
      ``diag(α) - ααᵀ`` — how much gradient flows back through the softmax; it
      goes to 0 as the softmax saturates.

    ``seed`` draws the samples (``None``: the book's seed).
    """
    dims = tuple(int(d) for d in dims)
    if not dims or min(dims) < 1:
        raise ValueError(f"dims must be positive feature sizes, got {list(dims)}")
    num_keys = check_int("num_keys", num_keys, minimum=2)
    num_samples = check_int("num_samples", num_samples, minimum=2)
    stats = _scaling_statistics(dims, int(num_keys), int(num_samples), resolve_seed(seed))
    return {k: v.copy() for k, v in stats.items()}


@functools.lru_cache(maxsize=16)
def _scaling_statistics(dims: tuple[int, ...], num_keys: int, num_samples: int, seed: int) -> dict[str, np.ndarray]:
    """Cached: a slider moving ``d`` redraws the figure without redrawing the samples."""
    gen = torch.Generator().manual_seed(seed)
    out: dict[str, list[float]] = {k: [] for k in
                                   ("var_raw", "var_scaled", "max_weight_raw", "max_weight_scaled", "grad_raw", "grad_scaled")}
    for d in dims:
        q = torch.randn(num_samples, 1, d, generator=gen, dtype=torch.float64)
        k = torch.randn(num_samples, num_keys, d, generator=gen, dtype=torch.float64)
        raw = (q @ k.transpose(1, 2)).squeeze(1)  # (samples, keys)
        for tag, scores in (("raw", raw), ("scaled", raw / math.sqrt(d))):
            alpha = torch.softmax(scores, dim=-1)
            jac = torch.diag_embed(alpha) - alpha.unsqueeze(-1) * alpha.unsqueeze(-2)
            out[f"var_{tag}"].append(scores.var().item())
            out[f"max_weight_{tag}"].append(alpha.max(-1).values.mean().item())
            out[f"grad_{tag}"].append(torch.linalg.matrix_norm(jac).mean().item())
    result = {k: np.array(v) for k, v in out.items()}
    result["dims"] = np.array(dims)
    return result


def _powers_of_two_axis(ax, values) -> None:
    """Log-2 x axis with plain-number tick labels (mathtext tick labels are slow to draw)."""
    ax.set_xscale("log", base=2)
    ticks = [v for v in values if v & (v - 1) == 0][::2] or list(values)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()


def score_scale_figure(d: int = 64, num_keys: int = 16, max_dim: int = 1024, num_samples: int = 400, seed: int | None = None):
    """The "why 1/√d" figure at feature size ``d`` (the widget's callback). Returns the figure.

    Top left: variance of the scores against d, raw and scaled. Top right: the
    softmax weights of one random query over ``num_keys`` keys at size ``d``.
    Bottom: mean largest weight and mean softmax-gradient size against d.
    The dashed line marks the chosen ``d``. ``seed`` draws the samples (``None``:
    the book's seed).
    """
    if not 1 <= d <= max_dim:
        raise ValueError(f"d must lie in [1, max_dim={max_dim}], got {d}")
    ensure_style()
    dims = sorted({2**i for i in range(int(math.log2(max_dim)) + 1)} | {int(d)})
    seed = resolve_seed(seed)
    stats = scaling_statistics(dims, num_keys=num_keys, num_samples=num_samples, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(d, generator=gen, dtype=torch.float64)
    k = torch.randn(num_keys, d, generator=gen, dtype=torch.float64)
    raw = k @ q
    w_raw = torch.softmax(raw, 0).numpy()
    w_scaled = torch.softmax(raw / math.sqrt(d), 0).numpy()
    order = np.argsort(-w_scaled)

    # Fixed margins instead of a layout engine: this figure is redrawn at every move of the slider.
    # 7.6 inches wide: drawn at the column's width, so its text stays legible (at least 9 px).
    fig, axes = plt.subplots(2, 2, figsize=(7.6, 6.4))
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.08, top=0.95, hspace=0.5, wspace=0.32)
    colors = {"raw": "C3", "scaled": "C0"}
    labels = {"raw": "raw qᵀk", "scaled": "scaled qᵀk/√d"}
    ax = axes[0, 0]
    for tag in ("raw", "scaled"):
        ax.plot(stats["dims"], stats[f"var_{tag}"], "o-", ms=3, color=colors[tag], label=labels[tag])
    # The theory drawn over the raw curve it predicts (a grey dotted line under it was hidden):
    # dashed, in its own colour, on top.
    ax.plot(stats["dims"], stats["dims"], "--", color="C2", lw=1.6, zorder=3, label="theory: d")
    ax.set(yscale="log", xlabel="feature size d", ylabel="variance of the scores",
           title="Score variance grows like d unless scaled")
    _powers_of_two_axis(ax, stats["dims"])

    ax = axes[0, 1]
    pos = np.arange(num_keys)
    ax.bar(pos - 0.2, w_raw[order], width=0.4, color=colors["raw"], label=f"raw (largest {w_raw.max():.2f})")
    ax.bar(pos + 0.2, w_scaled[order], width=0.4, color=colors["scaled"],
           label=f"scaled (largest {w_scaled.max():.2f})")
    ax.set(xlabel="key (sorted by scaled weight)", ylabel="attention weight", ylim=(0, 1.02),
           title=f"One query's softmax over {num_keys} keys, d = {d}")
    ax.set_xticks(pos[:: max(1, num_keys // 8)])

    for ax, key, ylabel, title in (
        (axes[1, 0], "max_weight", "mean largest weight", "Raw scores saturate the softmax"),
        (axes[1, 1], "grad", "mean norm of the softmax Jacobian", "…and the gradient through it vanishes"),
    ):
        for tag in ("raw", "scaled"):
            ax.plot(stats["dims"], stats[f"{key}_{tag}"], "o-", ms=3, color=colors[tag], label=labels[tag])
        _powers_of_two_axis(ax, stats["dims"])
        ax.set(xlabel="feature size d", ylabel=ylabel, title=title)
    # The uniform level is named on its line, not in the legend: a legend of three entries found
    # no place in this plot that hides no curve (issue 36: it covered the raw curve).
    uniform = chance_line(axes[1, 0], 1.0 / num_keys, label=f"uniform weights (1/{num_keys})")
    axes[1, 0].annotate(uniform.get_label(), (1.0, 1.0 / num_keys), xycoords=("axes fraction", "data"),
                        xytext=(-3, 2), textcoords="offset points", ha="right", va="bottom",
                        fontsize=plt.rcParams["legend.fontsize"], color="0.3")
    renderer = fig.canvas.get_renderer()
    for ax in axes.flat:  # each legend where it hides no curve and no bar
        handles = [h for h in ax.get_legend_handles_labels()[0] if h is not uniform]
        _legend_off_the_lines(ax, renderer, handles)
    for ax in (axes[0, 0], axes[1, 0], axes[1, 1]):
        ax.axvline(d, color="black", ls="--", lw=1)
    return fig


# Fixed places, not "best": matplotlib would place a "best" legend again at drawing time, counting
# the dashed marker of the chosen d that is drawn afterwards, and could move it onto a curve.
_LEGEND_PLACES = ("upper left", "upper right", "lower right", "center right", "center left",
                  "lower left", "upper center", "lower center", "center")


def _legend_hides_lines(ax, renderer, pad: float = 3.0) -> bool:
    """Whether ``ax``'s legend lies over its data: a bar, or any point of a line (its vertices and
    20 points along each segment, in display pixels) within ``pad`` px of the legend's box."""
    legend = ax.get_legend()
    if legend is None:
        return False
    box = legend.get_window_extent(renderer).padded(pad)
    if any(bar.get_height() and bar.get_window_extent(renderer).overlaps(box) for bar in ax.patches):
        return True
    for line in ax.get_lines():
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        if len(xy) > 1:
            t = np.linspace(0.0, 1.0, 21)[:, None, None]
            xy = (xy[:-1] * (1 - t) + xy[1:] * t).reshape(-1, 2)
        inside = (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)
        if inside.any():
            return True
    return False


def _legend_off_the_lines(ax, renderer, handles) -> None:
    """A legend of ``handles`` at the first of _LEGEND_PLACES where it hides no data (else where
    matplotlib finds best)."""
    ax.get_xlim(), ax.get_ylim()  # settle the autoscaled limits before measuring
    for loc in _LEGEND_PLACES:
        ax.legend(handles=handles, loc=loc)
        if not _legend_hides_lines(ax, renderer):
            return
    ax.legend(handles=handles, loc="best")


# --- what scores cost (exercise 11.3.3) -------------------------------------------------------

SCORING_KINDS = ("dot", "additive", "distance", "bilinear")


def make_scorer(kind: str, dim: int, num_hiddens: int | None = None) -> nn.Module:
    """An attention module of the given ``kind`` for queries and keys of size ``dim``.

    ``additive`` uses ``num_hiddens`` hidden units (default ``dim``).
    """
    if kind == "dot":
        return DotProductAttention()
    if kind == "additive":
        return AdditiveAttention(num_hiddens or dim, query_size=dim, key_size=dim)
    if kind == "distance":
        return DistanceAttention()
    if kind == "bilinear":
        return BilinearAttention(dim, dim)
    raise ValueError(f"kind must be one of {SCORING_KINDS}, got {kind!r}")


def scoring_cost(kind: str, num_keys: int, dim: int, *, num_queries: int | None = None, value_size: int | None = None,
                 batch: int = 4, num_hiddens: int | None = None, backward: bool = False, fused: bool = False,
                 repeats: int = 5, seed: int | None = None, num_threads: int | None = 1) -> float:
    """Seconds of one attention call with the ``kind`` score (the best of ``repeats`` timed calls).

    Shapes: queries (batch, num_queries, dim), keys (batch, num_keys, dim),
    values (batch, num_keys, value_size); ``num_queries`` and ``value_size``
    default to ``num_keys`` and ``dim``. ``fused=False`` (default) computes the
    full weight matrix for every kind — the fair comparison, since additive
    attention has no fused kernel; ``fused=True`` lets dot, distance and bilinear
    use PyTorch's fused kernel. ``backward=True`` times forward + backward.
    Two warm-up calls precede the timed ones; the fastest timed call is returned,
    being the one least disturbed by other work on the machine. ``num_threads``
    (default 1: the cost on one core, which a busy machine disturbs least) sets
    PyTorch's intra-op threads during the measurement; ``None`` keeps the setting.
    ``seed`` draws the module's parameters and the inputs (``None``: the book's seed);
    the global generator is reseeded with it.
    """
    for name, size in (("repeats", repeats), ("num_keys", num_keys), ("dim", dim), ("batch", batch)):
        check_positive_int(name, size)
    num_queries = num_keys if num_queries is None else num_queries
    value_size = dim if value_size is None else value_size
    torch.manual_seed(resolve_seed(seed))
    module = make_scorer(kind, dim, num_hiddens).train()
    if kind != "additive":
        module.need_weights = not fused
    q = torch.randn(batch, num_queries, dim, requires_grad=backward)
    k = torch.randn(batch, num_keys, dim, requires_grad=backward)
    v = torch.randn(batch, num_keys, value_size, requires_grad=backward)

    def run():
        if backward:
            module(q, k, v).sum().backward()
        else:
            with torch.no_grad():
                module(q, k, v)

    threads_before = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        return best_time(run, repeats)
    finally:
        torch.set_num_threads(threads_before)


def best_time(fn: Callable[[], object], repeats: int = 5, warmup: int = 2) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``fn()``, after ``warmup`` untimed calls.

    The minimum is the run least disturbed by other work on a shared machine.
    Under the smoke switch (``ATTENTION_BOOK_MAX_STEPS`` set) ``fn`` runs once, untimed
    warm-ups left out: the run shows each size fits, and its times mean nothing.
    """
    repeats = check_positive_int("repeats", repeats)
    if max_steps() is not None:
        repeats, warmup = 1, 0
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def scoring_flops(kind: str, num_queries: int, num_keys: int, dim: int, value_size: int | None = None,
                  num_hiddens: int | None = None, bytes_per_element: int = 4) -> dict[str, float]:
    """Counted cost of one (unbatched) attention call: floating-point operations and memory traffic.

    A multiply-add counts as 2 flops. ``bytes`` counts reading the inputs,
    writing the output and writing + reading every intermediate of the size of
    the score matrix or larger once (what a non-fused implementation moves
    through memory). With n queries, m keys, size d, values of size v and h
    hidden units:

    * dot: ``2nmd`` (scores) + ``2nmv`` (weighted sum); intermediates ``nm``;
    * distance: dot + ``2md`` for the squared norms (+ ``2nm`` to add them);
    * bilinear: dot + ``2ndd`` for ``qᵀM``;
    * additive: ``2(n + m)dh`` for the projections, ``nmh`` adds + tanh, ``2nmh``
      for ``w_v``, + ``2nmv``; intermediates ``nmh`` — ``h`` times the dot's.
    """
    n, m, d = num_queries, num_keys, dim
    v = d if value_size is None else value_size
    h = d if num_hiddens is None else num_hiddens
    io = n * d + m * d + m * v + n * v
    if kind in ("dot", "distance", "bilinear"):
        flops = 2 * n * m * d + 2 * n * m * v + 3 * n * m  # + softmax (exp, sum, divide)
        inter = 2 * n * m * 2  # scores and weights, written then read
        if kind == "distance":
            flops += 2 * m * d + 2 * n * m
            io += d  # nothing big: the augmented keys are m(d+1)
        if kind == "bilinear":
            flops += 2 * n * d * d
            io += d * d + 2 * n * d
    elif kind == "additive":
        flops = 2 * (n + m) * d * h + 2 * n * m * h + 2 * n * m * h + 3 * n * m + 2 * n * m * v
        inter = 2 * n * m * h * 2 + 2 * n * m * 2  # features before and after tanh, then scores, weights
    else:
        raise ValueError(f"kind must be one of {SCORING_KINDS}, got {kind!r}")
    return {"flops": float(flops), "bytes": float((io + inter) * bytes_per_element)}


def measure_scoring_costs(key_counts: Sequence[int] = (64, 128, 256, 512), dims: Sequence[int] = (16, 32, 64, 128),
                          fixed_dim: int = 64, fixed_keys: int = 256, kinds: Sequence[str] = SCORING_KINDS,
                          **kwargs) -> list[dict]:
    """Time every ``kind`` as the number of keys grows (at ``fixed_dim``) and as the size grows (at ``fixed_keys``).

    Returns rows ``{"kind", "sweep" ("keys" or "dim"), "num_keys", "dim", "seconds", "flops", "bytes"}``;
    ``kwargs`` go to :func:`scoring_cost` (``num_queries`` defaults to the number of keys).
    """
    rows = []
    for sweep, grid in (("keys", [(m, fixed_dim) for m in key_counts]), ("dim", [(fixed_keys, d) for d in dims])):
        for kind in kinds:
            for m, d in grid:
                seconds = scoring_cost(kind, m, d, **kwargs)
                n = kwargs.get("num_queries") or m
                cost = scoring_flops(kind, n, m, d, kwargs.get("value_size"), kwargs.get("num_hiddens"))
                rows.append({"kind": kind, "sweep": sweep, "num_keys": m, "dim": d, "seconds": seconds, **cost})
    return rows


def scoring_costs_figure(rows: Sequence[dict]):
    """Measured time against number of keys and against feature size, one line per scoring kind."""
    if not rows:
        raise ValueError("scoring_costs_figure needs the rows returned by measure_scoring_costs")
    ensure_style()
    fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.4), layout="constrained")
    for ax, sweep, xkey, xlabel in ((axes[0], "keys", "num_keys", "number of keys $m$ (= queries)"),
                                    (axes[1], "dim", "dim", "feature size $d$")):
        sub = [r for r in rows if r["sweep"] == sweep]
        for i, kind in enumerate(dict.fromkeys(r["kind"] for r in sub)):
            pts = sorted((r[xkey], r["seconds"] * 1e3) for r in sub if r["kind"] == kind)
            ax.plot(*zip(*pts), "o-", ms=4, color=f"C{i}", label=kind)
        fixed = sub[0]["dim"] if sweep == "keys" else sub[0]["num_keys"]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(xlabel=xlabel, ylabel="time per call (ms)",
               title=f"growing {'keys' if sweep == 'keys' else 'size'} (at {'d' if sweep == 'keys' else 'm'} = {fixed})")
        ax.legend()
    return fig


def token_weights_figure(tokens: Sequence[Sequence[str]], weights, title: str | None = None,
                         rows: str = "sequence"):
    """One row per sequence: each cell names its token and shows its attention weight.

    ``tokens`` are the (padded) sequences, all of the same length; ``weights``
    is (sequences, length), e.g. one query's weights per sequence. ``rows`` names a
    row ("sentence 1", ...). Returns the figure.
    """
    data = np.asarray(weights.detach().cpu().float() if isinstance(weights, torch.Tensor) else weights)
    if data.ndim != 2 or data.shape[0] != len(tokens) or any(len(row) != data.shape[1] for row in tokens):
        raise ValueError(
            f"weights has shape {data.shape} but needs (sequences, length) = "
            f"({len(tokens)}, {len(tokens[0]) if tokens else 0}) to match tokens"
        )
    ensure_style()
    n_rows, n_cols = data.shape
    # No colour bar: every cell prints its weight, and on a phone the bar's width is what the
    # longer tokens need ("DeepLearning" ran together at 390 px).
    fig, ax = plt.subplots(figsize=(1.5 * n_cols + 1.0, 0.75 * n_rows + 0.9), layout="constrained")
    ax.imshow(data, cmap="Reds", vmin=0.0, vmax=max(float(data.max()), 1e-9), aspect="auto")
    ax.grid(False)
    for i in range(n_rows):
        for j in range(n_cols):
            dark = data[i, j] > 0.6 * data.max()
            ax.text(j, i, f"{tokens[i][j]}\n{data[i, j]:.2f}", ha="center", va="center", fontsize=9,
                    color="white" if dark else "black")
    ax.set_xticks(range(n_cols), [f"key {j + 1}" for j in range(n_cols)])
    ax.set_yticks(range(n_rows), [f"{rows} {i + 1}" for i in range(n_rows)])
    if title:
        ax.set_title(title)
    return fig
