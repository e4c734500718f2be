"""Chapter 10: attention in tiles — the online softmax and a FlashAttention-style forward and backward.

The softmax over a row of scores needs the row's maximum and the sum of the
exponentials; both can be kept *running* while the row streams past in blocks
(Milakov and Gimelshein, 2018). The state of a row is three numbers' worth:

* ``m``, the largest score seen so far,
* ``l``, the sum of ``exp(score - m)`` over the scores seen,
* ``acc``, the sum of ``exp(score - m) * value`` over the keys seen (a vector).

:func:`softmax_block` makes the state of one block of keys, :func:`merge_softmax`
combines two states (rescaling the one with the smaller maximum by
``exp(m_old - m_new)``), and :func:`finish_softmax` divides ``acc`` by ``l``.
Attention computed this way never holds a whole row of scores, let alone the
(queries, keys) matrix: :func:`tiled_attention` walks over tiles of
``block_q`` queries × ``block_k`` keys (FlashAttention, Dao et al., 2022),
skips the tiles a causal mask or a sliding window hides entirely
(:func:`tile_plan`), and in the backward pass recomputes each tile's weights
from the row's log-sum-exp instead of storing them. It is written in plain
PyTorch, for reading; PyTorch's ``scaled_dot_product_attention`` does the same
in one fused kernel.
"""

from __future__ import annotations

import math

import torch

from ..core.checks import check_int, check_optional_positive_int, check_positive_int

__all__ = [
    "online_softmax",
    "softmax_block",
    "merge_softmax",
    "finish_softmax",
    "tiled_attention",
    "tiled_forward",
    "tile_plan",
    "tile_counts",
    "tile_figure",
    "SKIPPED",
    "MASKED",
    "FULL",
]

SKIPPED, MASKED, FULL = 0, 1, 2
"""Tile kinds in :func:`tile_plan`: not computed at all; computed with a mask inside; computed whole."""


def _safe(m: torch.Tensor) -> torch.Tensor:
    """A running maximum with -inf (nothing seen yet) replaced by 0, so ``exp(x - m)`` never sees -inf - (-inf)."""
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


# --- the online softmax -------------------------------------------------------------------------

def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last axis of ``x``, reading that axis in blocks of ``block_size``.

    A first pass keeps the running maximum ``m`` and the running sum
    ``l = Σ exp(x - m)`` (when a block raises the maximum, ``l`` is rescaled by
    ``exp(m_old - m_new)``); a second pass writes ``exp(x - m) / l``. Equal to
    ``torch.softmax(x, -1)``; scores of ``-inf`` (masked) get weight 0, and a
    row that is ``-inf`` throughout gets zeros, not NaN.
    """
    _check_floating("x", x)
    block_size = check_positive_int("block_size", block_size)
    n = x.shape[-1]
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype, device=x.device)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
    for start in range(0, n, block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        l = l * torch.exp(m - _safe(m_new)) + torch.exp(block - _safe(m_new)[..., None]).sum(dim=-1)
        m = m_new
    weights = torch.exp(x - _safe(m)[..., None]) / l.clamp_min(torch.finfo(x.dtype).tiny)[..., None]
    return weights


def softmax_block(scores: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The softmax state ``(m, l, acc)`` of one block of keys.

    ``scores`` (..., queries, keys) — ``-inf`` where a key is masked — and
    ``values`` (..., keys, d_v) give ``m`` (..., queries), the largest score;
    ``l`` (..., queries), ``Σ exp(score - m)``; ``acc`` (..., queries, d_v),
    ``Σ exp(score - m) · value``. A row with every key masked has ``m = -inf``,
    ``l = 0`` and ``acc = 0``.
    """
    _check_floating("scores", scores)
    m = scores.amax(dim=-1)
    p = torch.exp(scores - _safe(m)[..., None])
    return m, p.sum(dim=-1), p @ values


def merge_softmax(a: tuple, b: tuple) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Combine the softmax states ``a = (m_a, l_a, acc_a)`` and ``b`` of two disjoint blocks of keys.

    With ``m = max(m_a, m_b)``, each state is rescaled to the new maximum:
    ``l = l_a e^(m_a - m) + l_b e^(m_b - m)`` and likewise ``acc``. The result
    is the state of the two blocks together; the order does not matter. An
    empty state (``m = -inf``, ``l = 0``) leaves the other unchanged.
    """
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    m = torch.maximum(m_a, m_b)
    scale_a, scale_b = torch.exp(m_a - _safe(m)), torch.exp(m_b - _safe(m))
    return m, l_a * scale_a + l_b * scale_b, acc_a * scale_a[..., None] + acc_b * scale_b[..., None]


def finish_softmax(state: tuple) -> torch.Tensor:
    """The attention output ``acc / l`` of a softmax state; rows that saw no key give zeros."""
    _m, l, acc = state
    return acc / l.clamp_min(torch.finfo(acc.dtype).tiny)[..., None]


# --- which tiles are computed -------------------------------------------------------------------

def _tile_kind(r0: int, r1: int, c0: int, c1: int, offset: int, causal: bool, window: int | None) -> int:
    """Rows r0..r1-1 (query positions + offset) against key columns c0..c1-1: SKIPPED, MASKED or FULL."""
    if not causal and window is None:
        return FULL
    first_q, last_q = r0 + offset, r1 - 1 + offset
    if c0 > last_q:  # every key lies after every query
        return SKIPPED
    kind = MASKED if c1 - 1 > first_q else FULL  # some key after some query
    if window is not None:
        if c1 - 1 <= first_q - window:  # every key is too old for every query
            return SKIPPED
        if c0 <= last_q - window:  # some key too old for some query
            kind = MASKED
    return kind


def _check_plan(num_queries, num_keys, block_q, block_k, causal, window):
    num_queries = check_int("num_queries", num_queries, minimum=0)
    num_keys = check_int("num_keys", num_keys, minimum=0)
    block_q, block_k = check_positive_int("block_q", block_q), check_positive_int("block_k", block_k)
    window = check_optional_positive_int("window", window)
    if (causal or window is not None) and num_queries > num_keys:
        raise ValueError(f"a causal mask (or a window) needs num_queries <= num_keys, got {num_queries} > {num_keys}")
    return num_queries, num_keys, block_q, block_k, window


def tile_plan(num_queries: int, num_keys: int, block_q: int, block_k: int, causal: bool = False,
              window: int | None = None) -> torch.Tensor:
    """The kind of every tile, an int tensor (query blocks, key blocks) of SKIPPED (0), MASKED (1), FULL (2).

    Query ``i`` sits at position ``i + num_keys - num_queries`` (the last
    positions, as in :func:`~attention_book.models.attention.causal_mask`). With
    ``causal=True`` it sees keys ``j <= position``; a ``window`` of ``w`` (which
    implies causal) keeps only the ``w`` latest of those, ``position - w < j``.
    A tile none of whose (query, key) pairs is visible is SKIPPED; one with
    some hidden pairs is MASKED; the rest are FULL.
    """
    num_queries, num_keys, block_q, block_k, window = _check_plan(num_queries, num_keys, block_q, block_k,
                                                                  causal, window)
    causal = bool(causal) or window is not None
    offset = num_keys - num_queries if causal else 0
    rows, cols = math.ceil(num_queries / block_q), math.ceil(num_keys / block_k)
    plan = torch.empty(rows, cols, dtype=torch.long)
    for i in range(rows):
        for j in range(cols):
            plan[i, j] = _tile_kind(i * block_q, min((i + 1) * block_q, num_queries), j * block_k,
                                    min((j + 1) * block_k, num_keys), offset, causal, window)
    return plan


def tile_counts(num_queries: int, num_keys: int, block_q: int, block_k: int, causal: bool = False,
                window: int | None = None) -> dict[str, int]:
    """How much work a tiled pass does: tiles of each kind and score entries computed.

    Returns ``{'tiles', 'skipped', 'masked', 'full', 'scores', 'needed'}``:
    ``scores`` counts the (query, key) scores of the computed tiles, ``needed``
    those actually visible under the mask (the least any method must compute).
    """
    num_queries, num_keys, block_q, block_k, window = _check_plan(num_queries, num_keys, block_q, block_k,
                                                                  causal, window)
    causal = bool(causal) or window is not None
    plan = tile_plan(num_queries, num_keys, block_q, block_k, causal, window)
    scores = 0
    for i, j in (plan != SKIPPED).nonzero().tolist():
        scores += (min((i + 1) * block_q, num_queries) - i * block_q) * (min((j + 1) * block_k, num_keys) - j * block_k)
    positions = torch.arange(num_queries) + (num_keys - num_queries if causal else 0)
    if not causal:
        needed = num_queries * num_keys
    else:
        low = positions - window + 1 if window is not None else torch.zeros_like(positions)
        needed = int((positions - low.clamp_min(0) + 1).clamp_min(0).sum())
    return {"tiles": plan.numel(), "skipped": int((plan == SKIPPED).sum()), "masked": int((plan == MASKED).sum()),
            "full": int((plan == FULL).sum()), "scores": scores, "needed": needed}


# --- tiled attention, forward and backward ------------------------------------------------------

def _check_floating(name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if t.dim() < 1:
        raise ValueError(f"{name} must have at least one axis, got a 0-d tensor")


def _row_of_tiles(r0, r1, n_k, block_k, offset, causal, window):
    """(c0, c1, kind) of the computed tiles in the row of tiles of queries r0..r1-1."""
    for c0 in range(0, n_k, block_k):
        c1 = min(c0 + block_k, n_k)
        kind = _tile_kind(r0, r1, c0, c1, offset, causal, window)
        if kind != SKIPPED:
            yield c0, c1, kind


def _tiles(n_q, n_k, block_q, block_k, causal, window):
    """(r0, r1, c0, c1, kind) of every tile that is computed, row of tiles by row of tiles."""
    offset = n_k - n_q if causal else 0
    for r0 in range(0, n_q, block_q):
        r1 = min(r0 + block_q, n_q)
        for c0, c1, kind in _row_of_tiles(r0, r1, n_k, block_k, offset, causal, window):
            yield r0, r1, c0, c1, kind


def _tile_mask(mask, r0, r1, c0, c1, kind, offset, window, device):
    """The boolean (…, rows, cols) mask of one tile (True = visible), or None when all is visible."""
    visible = None
    if kind == MASKED:
        rows = torch.arange(r0, r1, device=device)[:, None] + offset
        cols = torch.arange(c0, c1, device=device)[None, :]
        visible = cols <= rows
        if window is not None:
            visible = visible & (cols > rows - window)
    if mask is not None:
        part = mask[..., r0:r1, c0:c1]
        visible = part if visible is None else (part & visible)
    return visible


def tiled_forward(q, k, v, mask, causal, window, block_q, block_k, scale):
    """The forward loop of :func:`tiled_attention`: ``(output, log-sum-exp per query)``.

    For each block of ``block_q`` queries one softmax state per query is carried
    over the blocks of ``block_k`` keys that the mask does not hide entirely;
    each tile of scores lives only until its state is merged in.
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    offset = n_k - n_q if causal else 0
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = q.new_full(q.shape[:-1], float("-inf"))  # log Σ exp(score) per query: all the backward pass needs
    for r0 in range(0, n_q, block_q):
        r1 = min(r0 + block_q, n_q)
        state = (q.new_full((*q.shape[:-2], r1 - r0), float("-inf")), q.new_zeros((*q.shape[:-2], r1 - r0)),
                 q.new_zeros((*q.shape[:-2], r1 - r0, v.shape[-1])))
        q_tile = q[..., r0:r1, :]
        for c0, c1, kind in _row_of_tiles(r0, r1, n_k, block_k, offset, causal, window):
            scores = (q_tile @ k[..., c0:c1, :].transpose(-2, -1)) * scale
            visible = _tile_mask(mask, r0, r1, c0, c1, kind, offset, window, q.device)
            if visible is not None:
                scores = scores.masked_fill(~visible, float("-inf"))
            state = merge_softmax(state, softmax_block(scores, v[..., c0:c1, :]))
        out[..., r0:r1, :] = finish_softmax(state)
        m, l, _ = state
        lse[..., r0:r1] = torch.where(l > 0, m + torch.log(l.clamp_min(torch.finfo(l.dtype).tiny)),
                                      torch.full_like(l, float("-inf")))
    return out, lse


def _tiled_backward(q, k, v, out, lse, d_out, mask, causal, window, block_q, block_k, scale):
    n_q, n_k = q.shape[-2], k.shape[-2]
    offset = n_k - n_q if causal else 0
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    # D_i = Σ_j P_ij dP_ij = dO_i · O_i: the row term of the softmax's backward, one number per query.
    D = (d_out * out).sum(dim=-1)
    safe_lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    for r0, r1, c0, c1, kind in _tiles(n_q, n_k, block_q, block_k, causal, window):
        q_tile, k_tile, v_tile, do_tile = q[..., r0:r1, :], k[..., c0:c1, :], v[..., c0:c1, :], d_out[..., r0:r1, :]
        scores = (q_tile @ k_tile.transpose(-2, -1)) * scale
        p = torch.exp(scores - safe_lse[..., r0:r1, None])  # the tile's weights, recomputed
        visible = _tile_mask(mask, r0, r1, c0, c1, kind, offset, window, q.device)
        empty = torch.isneginf(lse[..., r0:r1, None])
        p = p.masked_fill(empty if visible is None else (~visible | empty), 0.0)
        dv[..., c0:c1, :] += p.transpose(-2, -1) @ do_tile
        dp = do_tile @ v_tile.transpose(-2, -1)
        ds = p * (dp - D[..., r0:r1, None])
        dq[..., r0:r1, :] += (ds @ k_tile) * scale
        dk[..., c0:c1, :] += (ds.transpose(-2, -1) @ q_tile) * scale
    return dq, dk, dv


class _TiledAttention(torch.autograd.Function):
    """Forward: keep only the output and each query's log-sum-exp. Backward: recompute tile by tile."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, window, block_q, block_k, scale):
        out, lse = tiled_forward(q, k, v, mask, causal, window, block_q, block_k, scale)
        ctx.save_for_backward(q, k, v, out, lse, mask)
        ctx.settings = (causal, window, block_q, block_k, scale)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse, mask = ctx.saved_tensors
        dq, dk, dv = _tiled_backward(q, k, v, out, lse, d_out.contiguous(), mask, *ctx.settings)
        return dq, dk, dv, None, None, None, None, None, None


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
                    causal: bool = False, window: int | None = None, block_q: int = 64, block_k: int = 64,
                    scale: float | None = None) -> torch.Tensor:
    """Scaled dot-product attention computed tile by tile, never holding a (queries, keys) matrix.

    ``q`` (..., queries, d), ``k`` (..., keys, d), ``v`` (..., keys, d_v) with the
    same leading axes (batch, heads, ...). ``mask`` is boolean, ``True`` = may
    attend, broadcastable to (..., queries, keys); a key-padding mask of shape
    (batch, 1, 1, keys) costs memory linear in length. ``causal=True`` lets query
    ``i`` (at position ``i + keys - queries``) see keys up to its position;
    ``window=w`` keeps only the ``w`` latest of those (sliding-window attention,
    causal). Tiles are ``block_q`` queries × ``block_k`` keys; tiles that the
    causal mask or the window hide entirely are skipped (:func:`tile_plan`).
    ``scale`` defaults to ``1/√d``.

    The same numbers as ``torch.nn.functional.scaled_dot_product_attention``
    (values and gradients), except that a query with nothing to attend to
    outputs zeros (PyTorch's kernel gives NaN there), as
    :func:`~attention_book.models.attention.attend` does. The backward pass keeps only
    the output and one log-sum-exp per query, and recomputes each tile's weights.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_floating(name, t)
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., length, features), got {tuple(t.shape)}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} need the same leading "
                         "axes, and k and v the same number of keys")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same feature size, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k and v need one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    n_q, n_k, block_q, block_k, window = _check_plan(q.shape[-2], k.shape[-2], block_q, block_k, causal, window)
    causal = bool(causal) or window is not None
    if mask is not None:
        from .attention import check_mask

        check_mask(mask, q, k)
        mask = mask.expand(*q.shape[:-1], n_k)  # a view: slicing a tile of it costs nothing
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _TiledAttention.apply(q, k, v, mask, causal, window, block_q, block_k, scale)


# --- the picture of the tiles -------------------------------------------------------------------

def tile_figure(seq_len: int = 256, block_size: int = 32, causal: bool = True, window: int | None = None,
                ax=None):
    """The tiles of a (seq_len × seq_len) self-attention: computed whole, computed with a mask, skipped.

    The exact mask is drawn over the tiles (visible pairs shaded dark); the grid shows
    blocks of ``block_size`` queries × ``block_size`` keys. Prints the share of
    the n² scores computed and how much of that a tile-free method would need.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch, Rectangle

    from ..core.plot import ensure_style

    seq_len, block_size = check_positive_int("seq_len", seq_len), check_positive_int("block_size", block_size)
    plan = tile_plan(seq_len, seq_len, block_size, block_size, causal, window)
    counts = tile_counts(seq_len, seq_len, block_size, block_size, causal, window)
    ensure_style()
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.6, 4.6), layout="constrained")
    else:
        fig = ax.figure
    pos = torch.arange(seq_len)
    visible = torch.ones(seq_len, seq_len, dtype=torch.bool)
    if causal or window is not None:
        visible = pos[None, :] <= pos[:, None]
        if window is not None:
            visible &= pos[None, :] > pos[:, None] - window
    colours = {SKIPPED: "#ffffff", MASKED: "#f6c28b", FULL: "#9ecae1"}
    for i, j in torch.cartesian_prod(torch.arange(plan.shape[0]), torch.arange(plan.shape[1])).tolist():
        kind = int(plan[i, j])
        ax.add_patch(Rectangle((j * block_size - 0.5, i * block_size - 0.5), block_size, block_size,
                               facecolor=colours[kind], edgecolor="0.55", linewidth=0.6, zorder=1))
    visible_colour = (0.1, 0.2, 0.45, 0.55)
    ax.imshow(visible.float().numpy(), cmap=ListedColormap([(0, 0, 0, 0), visible_colour]),
              interpolation="nearest", zorder=2, extent=(-0.5, seq_len - 0.5, seq_len - 0.5, -0.5))
    ax.set_xlim(-0.5, seq_len - 0.5)
    ax.set_ylim(seq_len - 0.5, -0.5)
    ax.grid(False)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    computed = counts["tiles"] - counts["skipped"]
    what = "window " + str(window) if window is not None else ("causal" if causal else "no mask")
    ax.set_title(f"{what}, blocks of {block_size}: {computed} of {counts['tiles']} tiles computed", fontsize=10)
    # below the axes, off the tiles; the dark shading is the visible pairs drawn over the tiles
    ax.legend(handles=[Patch(facecolor=colours[FULL], edgecolor="0.55", label="tile computed"),
                       Patch(facecolor=colours[MASKED], edgecolor="0.55", label="computed, mask inside"),
                       Patch(facecolor=colours[SKIPPED], edgecolor="0.55", label="tile skipped"),
                       Patch(facecolor=visible_colour, edgecolor="0.55", label="visible under the mask")],
              loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8, frameon=False)
    print(f"scores computed: {counts['scores']:,} of {seq_len ** 2:,} ({counts['scores'] / seq_len ** 2:.0%})\n"
          f"visible under the mask: {counts['needed']:,} ({counts['needed'] / seq_len ** 2:.0%})")
    return fig
