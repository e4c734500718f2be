"""Chapter 1: attention as a soft database lookup.

A database maps keys to values. An *exact* lookup returns the value whose key
equals the query; an *approximate* lookup returns the value whose key is most
similar to it; a *soft* lookup returns a blend of all values, each weighted by
how well its key matches. The blend is attention pooling,

    Attention(q, D) = sum_i alpha(q, k_i) v_i,

with weights ``alpha = softmax(a(q, k_i) / temperature)``. A temperature close
to zero turns the soft lookup into the approximate (argmax) one; a large
temperature turns it into the plain average of all values.

The database here is tiny and made of strings (last name -> first name), so
the score ``a(q, k)`` is a string similarity defined in this module: the Dice
overlap of character bigrams (1 for equal strings, 0 for strings with no
bigram in common).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Rectangle

from ..core.config import resolve_seed

__all__ = [
    "NAME_DATABASE",
    "LOOKUP_QUERIES",
    "string_similarity",
    "similarity_scores",
    "exact_lookup",
    "approximate_lookup",
    "lookup_weights",
    "soft_lookup",
    "attention_pool",
    "normalize_weights",
    "lookup_figure",
    "pooling_regions_figure",
]

# (last name, first name): the key is the last name, the value the first name.
NAME_DATABASE: tuple[tuple[str, str], ...] = (
    ("Zhang", "Aston"),
    ("Lipton", "Zachary"),
    ("Li", "Mu"),
    ("Smola", "Alex"),
    ("Hu", "Rachel"),
    ("Werness", "Brent"),
)

# Queries for the figures: one exact hit, one longer exact hit, and four typos.
LOOKUP_QUERIES: tuple[str, ...] = ("Li", "Lipton", "Smolla", "Zang", "Wernes", "Hue")


def _check_name(name, what: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a string, got {type(name).__name__}")
    if not name.strip():
        raise ValueError(f"{what} must be a non-empty string, got {name!r}")
    return name.strip().lower()


def _bigrams(word: str) -> Counter:
    padded = f"^{word}$"  # the markers make first and last letters count
    return Counter(padded[i : i + 2] for i in range(len(padded) - 1))


def string_similarity(query: str, key: str) -> float:
    """Dice overlap of the padded character bigrams of two strings, in [0, 1].

    ``2 |B(q) ∩ B(k)| / (|B(q)| + |B(k)|)`` where ``B`` is the multiset of
    two-letter pieces of ``^word$`` (case ignored). Equal strings score 1,
    strings without a common piece score 0; a typo breaks only the pieces
    around it, so it costs a long string less than a short one.
    """
    a, b = _bigrams(_check_name(query, "query")), _bigrams(_check_name(key, "key"))
    shared = sum((a & b).values())
    return 2.0 * shared / (sum(a.values()) + sum(b.values()))


def _check_database(database) -> None:
    if len(database) == 0:
        raise ValueError("database is empty: a lookup needs at least one (key, value) pair")
    for i, pair in enumerate(database):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"database[{i}] must be a (key, value) pair, got {pair!r}")


def similarity_scores(queries: Sequence[str], keys: Sequence[str]) -> torch.Tensor:
    """Scores ``a(q, k)`` for every query and key: a (len(queries), len(keys)) float tensor."""
    if isinstance(queries, str) or isinstance(keys, str):
        raise TypeError("queries and keys must be sequences of strings (wrap a single string in a list)")
    if len(keys) == 0:
        raise ValueError("keys is empty: there is nothing to compare the queries with")
    return torch.tensor([[string_similarity(q, k) for k in keys] for q in queries], dtype=torch.float32)


def exact_lookup(query: str, database=NAME_DATABASE) -> str | None:
    """The value whose key equals ``query`` (case ignored), or ``None`` when there is none."""
    _check_database(database)
    wanted = _check_name(query, "query")
    for key, value in database:
        if _check_name(key, "key") == wanted:
            return value
    return None


def approximate_lookup(query: str, database=NAME_DATABASE) -> str:
    """The value whose key is most similar to ``query`` (the first one on ties)."""
    _check_database(database)
    scores = similarity_scores([query], [k for k, _ in database])[0]
    return database[int(scores.argmax())][1]


def _check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature <= 0:
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    return float(temperature)


def lookup_weights(queries: Sequence[str], keys: Sequence[str], temperature: float = 1.0) -> torch.Tensor:
    """Attention weights ``softmax(a(q, k_i) / temperature)`` over the keys: (len(queries), len(keys)).

    Every row is nonnegative and sums to one. As ``temperature -> 0`` a row puts
    all its weight on the best-matching key(s); as it grows the row becomes uniform.
    """
    t = _check_temperature(temperature)
    return torch.softmax(similarity_scores(queries, keys) / t, dim=-1)


def soft_lookup(query: str, database=NAME_DATABASE, temperature: float = 1.0) -> dict[str, float]:
    """A soft lookup: the attention-pooled one-hot encodings of the values.

    Each value ``v_i`` is a one-hot vector over the distinct values in the
    database; pooling them with the weights of :func:`lookup_weights` gives a
    probability for every value. Returned as ``{value: probability}``, most
    likely first. (Two records with the same value add up their weights.)
    """
    _check_database(database)
    keys = [k for k, _ in database]
    names = list(dict.fromkeys(v for _, v in database))
    one_hot = torch.zeros(len(database), len(names))
    for i, (_, value) in enumerate(database):
        one_hot[i, names.index(value)] = 1.0
    weights = lookup_weights([query], keys, temperature)  # (1, m)
    pooled = attention_pool(weights, one_hot)[0]  # (number of distinct values,)
    order = torch.argsort(pooled, descending=True, stable=True)
    return {names[i]: float(pooled[i]) for i in order}


def attention_pool(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Attention pooling ``sum_i alpha_i v_i`` for every query.

    ``weights`` (..., num_queries, m) and ``values`` (..., m, value_size) give
    (..., num_queries, value_size). The weights are used as they are: this
    function does not normalise them (see :func:`normalize_weights` and softmax).
    """
    for name, t in (("weights", weights), ("values", values)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{name} needs at least 2 axes, got shape {tuple(t.shape)}")
    if weights.shape[-1] != values.shape[-2]:
        raise ValueError(
            f"weights {tuple(weights.shape)} have {weights.shape[-1]} keys but values {tuple(values.shape)} "
            f"have {values.shape[-2]}: the last axis of weights must match axis -2 of values"
        )
    if weights.shape[-1] == 0:
        raise ValueError("there are no key-value pairs to pool (m = 0)")
    return torch.matmul(weights, values.to(weights.dtype))


def normalize_weights(weights: torch.Tensor) -> torch.Tensor:
    """Divide nonnegative weights by their sum over the last axis, so each row sums to one.

    Raises ``ValueError`` for a negative weight or a row that sums to zero
    (exponentiating the scores first, i.e. softmax, avoids both).
    """
    if not isinstance(weights, torch.Tensor):
        raise TypeError(f"weights must be a torch.Tensor, got {type(weights).__name__}")
    if weights.device.type != "meta":
        if bool((weights < 0).any()):
            raise ValueError(f"weights must be nonnegative to be normalised by their sum, got minimum "
                             f"{float(weights.min()):.4g}; use softmax for scores of any sign")
        if bool((weights.sum(-1) == 0).any()):
            raise ValueError("a row of weights sums to zero and cannot be normalised")
    return weights / weights.sum(-1, keepdim=True)


def lookup_figure(temperature: float = 0.3, query: str = "Li", database=NAME_DATABASE,
                  queries: Sequence[str] = LOOKUP_QUERIES):
    """The temperature explorer: soft-lookup weights for several queries, and for one of them.

    Left: a heatmap of ``lookup_weights(queries, keys, temperature)`` with each
    weight written in its cell, the row of ``query`` framed (when it is one of
    ``queries``). Right: the pooled probabilities of the first
    names for ``query``. Returns the figure.
    """
    from ..core.plot import BOOK_CMAP, PAGE_FIGURE_WIDTH, ensure_style

    ensure_style()
    _check_database(database)
    t = _check_temperature(temperature)
    keys = [k for k, _ in database]
    weights = lookup_weights(list(queries), keys, t).numpy()
    answer = soft_lookup(query, database, t)

    fig, (left, right) = plt.subplots(1, 2, figsize=(0.8 * PAGE_FIGURE_WIDTH, 3.4), layout="constrained",
                                      gridspec_kw={"width_ratios": [1.25, 1]})
    image = left.imshow(weights, cmap=BOOK_CMAP, vmin=0.0, vmax=1.0, aspect="auto")
    left.grid(False)
    left.set_xticks(range(len(keys)), keys, rotation=30, ha="right")
    left.set_yticks(range(len(queries)), queries)
    for i in range(weights.shape[0]):
        for j in range(weights.shape[1]):
            w = weights[i, j]
            left.text(j, i, f"{w:.2f}", ha="center", va="center", fontsize=9,
                      color="white" if w > 0.6 else "black")
    left.set_xlabel("keys (last names)")
    left.set_ylabel("queries")
    left.set_title(f"attention weights at temperature {t:.3g}")
    fig.colorbar(image, ax=left, shrink=0.8)
    if query in queries:  # frame the chosen query's row: the right panel pools it
        row = list(queries).index(query)
        left.add_patch(Rectangle((-0.5, row - 0.5), len(keys), 1.0, fill=False,
                                 edgecolor="#1f77b4", linewidth=2.5, clip_on=False))
        left.get_yticklabels()[row].set_fontweight("bold")

    names, probs = list(answer), np.array(list(answer.values()))
    right.barh(range(len(names)), probs, color=plt.get_cmap(BOOK_CMAP)(0.3 + 0.6 * probs))
    right.set_yticks(range(len(names)), names)
    right.invert_yaxis()
    right.set_xlim(0, 1.05)
    right.set_xlabel("pooled weight")
    exact = exact_lookup(query, database)
    right.set_title(f"soft lookup of {query!r}: {names[0]} ({probs[0]:.2f})"
                    + ("" if exact is not None else "\n(no exact match)"))
    return fig


def pooling_regions_figure(values: torch.Tensor | None = None, n_samples: int = 400, seed: int | None = None):
    """Where attention pooling can land, for 2-D values.

    Left: nonnegative weights (each drawn from an exponential distribution) put
    the output anywhere in the convex cone spanned by the values. Right: weights
    that are also normalised (Dirichlet samples) keep it inside the convex hull.
    One-hot weights give the values themselves (the corners); uniform weights
    give their average. ``seed`` draws the weights (``None``: from the book's
    seed, :func:`attention_book.resolve_seed`). Returns the figure.
    """
    from matplotlib.patches import Polygon
    from scipy.spatial import ConvexHull

    from ..core.plot import ensure_style

    ensure_style()
    if values is None:
        values = torch.tensor([[2.0, 0.4], [1.6, 1.8], [0.5, 1.5], [1.2, 0.9]])
    if values.dim() != 2 or values.shape[1] != 2 or values.shape[0] < 3:
        raise ValueError(f"values must have shape (m, 2) with m >= 3, got {tuple(values.shape)}")
    gen = torch.Generator().manual_seed(resolve_seed(seed))
    m = values.shape[0]
    nonneg = -torch.log(torch.rand(n_samples, m, generator=gen))  # exponential(1) weights
    convex = nonneg / nonneg.sum(-1, keepdim=True)  # normalised: Dirichlet(1, ..., 1)
    v = values.numpy()
    angles = np.arctan2(v[:, 1], v[:, 0])
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.0), layout="constrained")
    for ax, weights, title in ((axes[0], nonneg, "nonnegative weights: the convex cone"),
                               (axes[1], convex, "weights that sum to one: the convex hull")):
        out = attention_pool(weights, values).numpy()
        if ax is axes[0]:
            reach = 1.1 * float(np.abs(out).max())
            lo, hi = angles.min(), angles.max()
            corner = [reach * np.array([np.cos(a), np.sin(a)]) for a in np.linspace(lo, hi, 20)]
            ax.add_patch(Polygon([[0.0, 0.0], *corner], alpha=0.12, color="C0", label="cone"))
        else:
            hull = ConvexHull(v)
            ax.add_patch(Polygon(v[hull.vertices], alpha=0.12, color="C0", label="hull"))
        ax.scatter(out[:, 0], out[:, 1], s=6, alpha=0.5, color="C0", label="pooled outputs")
        ax.scatter(v[:, 0], v[:, 1], s=60, color="C3", zorder=3, label="values = one-hot weights")
        mean = v.mean(0)
        ax.scatter([mean[0]], [mean[1]], s=90, marker="*", color="k", zorder=3, label="uniform weights")
        ax.set_title(title)
        ax.set_xlabel("first coordinate")
        ax.set_aspect("equal")
    axes[0].set_ylabel("second coordinate")
    axes[1].legend(loc="upper right", fontsize=8)
    reach = min(1.1 * float(np.abs(attention_pool(nonneg, values).numpy()).max()), 8.0)
    axes[0].set_xlim(-0.2, reach)
    axes[0].set_ylim(-0.2, reach)
    axes[1].set_xlim(v[:, 0].min() - 0.3, v[:, 0].max() + 0.3)
    axes[1].set_ylim(v[:, 1].min() - 0.3, v[:, 1].max() + 0.9)
    return fig
