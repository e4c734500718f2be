"""Attention: masked softmax, scoring functions and multi-head attention.

Conventions (d2l's, so a d2l reader feels at home):

* ``queries`` (batch, num_queries, query_size), ``keys`` (batch, num_keys,
  key_size), ``values`` (batch, num_keys, value_size).
* ``valid_lens``: ``None``; a 1-D tensor (batch,) — every query of example ``b``
  may look at its first ``valid_lens[b]`` keys; or a 2-D tensor
  (batch, num_queries) — one length per query. A boolean *mask* may be passed
  instead, with ``True`` meaning "may attend" (the convention of
  :func:`torch.nn.functional.scaled_dot_product_attention`; note that
  :class:`torch.nn.MultiheadAttention` uses the opposite one).

Fast by default, maps on request: every attention module calls the fused
``scaled_dot_product_attention`` kernel (``attention_weights = None``), in
training and in eval mode alike, unless weights are *wanted*; then it computes
them explicitly and keeps them in ``attention_weights``. Weights are wanted when

1. the call passes ``need_weights=True``, or else
2. the module was built with ``need_weights=True``, or else
3. :func:`keep_attention_weights` is active — which :func:`record_attention`
   does: the one way to get the maps of a whole model, one per attention module.

Both paths compute the same numbers (a test checks it).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import nn
from torch.nn import functional as F

from .checks import (check_dropout, check_heads, check_int, check_kv_heads, check_optional_positive_int,
                     check_positive_int, check_same_device, check_tensor_values)
from .train import evaluating

__all__ = [
    "masked_softmax",
    "key_mask",
    "causal_mask",
    "attend",
    "keep_attention_weights",
    "record_attention",
    "collect_attention",
    "AttentionRecord",
    "AttentionMap",
    "DotProductAttention",
    "AdditiveAttention",
    "MultiHeadAttention",
    "transpose_qkv",
    "transpose_output",
]

_KEEP_WEIGHTS: bool | None = None


@contextlib.contextmanager
def keep_attention_weights(flag: bool = True) -> Iterator[None]:
    """Within this block every attention module keeps (or skips) its weights.

    >>> with keep_attention_weights():
    ...     model(X)          # every layer's attention_weights is filled in
    """
    global _KEEP_WEIGHTS
    previous, _KEEP_WEIGHTS = _KEEP_WEIGHTS, bool(flag)
    try:
        yield
    finally:
        _KEEP_WEIGHTS = previous


def _wants_weights(module: nn.Module, need_weights: bool | None) -> bool:
    if need_weights is not None:
        return bool(need_weights)
    if getattr(module, "need_weights", None) is not None:
        return bool(module.need_weights)
    return bool(_KEEP_WEIGHTS)


def _shape(t) -> tuple:
    return tuple(t.shape)


def key_mask(valid_lens, batch: int, num_queries: int, num_keys: int, device=None) -> torch.Tensor | None:
    """Boolean mask (batch, num_queries, num_keys), True where a key may be attended.

    ``valid_lens`` may be ``None`` (returns ``None``), lengths of shape (batch,)
    or (batch, num_queries), or already a boolean mask broadcastable to
    (batch, num_queries, num_keys) — e.g. (batch, 1, num_keys) or (num_queries,
    num_keys). Lengths must be whole numbers in ``[0, num_keys]``. Lists and
    tuples are accepted too. When ``device`` is given the mask is put there
    (lengths often live on the CPU while the scores live on a GPU).
    """
    if valid_lens is None:
        return None
    if not isinstance(valid_lens, torch.Tensor):
        try:
            valid_lens = torch.as_tensor(valid_lens)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(
                f"valid_lens must be None, a tensor of lengths or a boolean mask, got {type(valid_lens).__name__}"
            ) from err
    needed = (batch, num_queries, num_keys)
    lens_shapes = f"({batch},) or ({batch}, {num_queries})"
    if valid_lens.dtype == torch.bool:
        mask = valid_lens
        try:
            torch.broadcast_shapes(_shape(mask), needed)
            ok = mask.dim() <= 3
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"mask (valid_lens given as a boolean mask) has shape {_shape(mask)}, which does not broadcast to "
                f"(batch, queries, keys) = {needed}; pass a boolean mask of shape {needed}, "
                f"({batch}, 1, {num_keys}) or ({num_queries}, {num_keys}), or lengths of shape {lens_shapes}"
            )
        mask = mask.expand(needed)
        return mask if device is None else mask.to(device)
    if valid_lens.is_complex() or not (valid_lens.is_floating_point() or _is_integer(valid_lens)):
        raise ValueError(f"valid_lens must hold integer lengths or be a boolean mask, got dtype {valid_lens.dtype}")
    if valid_lens.dim() == 1 and valid_lens.shape[0] == batch:
        lens = valid_lens[:, None].expand(batch, num_queries)
    elif valid_lens.dim() == 2 and _shape(valid_lens) == (batch, num_queries):
        lens = valid_lens
    else:
        raise ValueError(f"valid_lens has shape {_shape(valid_lens)} but needs {lens_shapes} (batch, or batch x queries)")
    check_tensor_values("valid_lens", lens, 0, num_keys, whole=True, what=f"lengths count keys, and there are {num_keys}")
    if device is not None:
        lens = lens.to(device)
    positions = torch.arange(num_keys, device=lens.device)
    return positions[None, None, :] < lens[:, :, None].to(positions.dtype)


def _is_integer(t: torch.Tensor) -> bool:
    return not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool


def causal_mask(num_queries: int, num_keys: int, device=None) -> torch.Tensor:
    """Boolean (num_queries, num_keys) mask letting query i see keys up to its own position.

    When there are fewer queries than keys (decoding with a key/value cache) the
    queries are the *last* ``num_queries`` positions: query i sits at position
    ``num_keys - num_queries + i``.
    """
    if num_queries > num_keys:
        raise ValueError(f"a causal mask needs num_queries <= num_keys, got {num_queries} > {num_keys}")
    offset = num_keys - num_queries
    rows = torch.arange(num_queries, device=device)[:, None] + offset
    cols = torch.arange(num_keys, device=device)[None, :]
    return cols <= rows


def _softmax_where(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis where ``mask`` is True; exact zeros elsewhere (and in empty rows)."""
    if mask is None:
        return F.softmax(scores, dim=-1)
    # The fill is the dtype's most negative finite number (not -inf, which would
    # give NaN in a row with no valid key); the product with the mask then zeroes
    # both the masked keys and every weight of an empty row.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return F.softmax(filled, dim=-1) * mask


def masked_softmax(X: torch.Tensor, valid_lens=None) -> torch.Tensor:
    """Softmax over the last axis of ``X`` (batch, queries, keys), ignoring masked keys.

    ``valid_lens`` is ``None``, lengths of shape (batch,) or (batch, queries), or a
    boolean mask (``True`` = keep) broadcastable to ``X``'s shape.

    * Masked keys get exactly zero weight (and zero gradient).
    * A row whose valid length is 0 has nothing to attend to: it returns **all
      zeros**, not a uniform row and not NaN. Attention over such a row outputs
      the zero vector. (d2l's version returns a uniform row there.)
    * ``X`` is never modified in place.
    * The fill value for masked scores is the most negative finite number of
      ``X``'s dtype, so float16 and bfloat16 stay finite.

    Bad input (``X`` not 3-D or not floating point, lengths of the wrong shape,
    negative, fractional or longer than the number of keys, a mask that does not
    broadcast) raises :class:`ValueError` saying what was given and what is needed.
    """
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"X must be a torch.Tensor, got {type(X).__name__}")
    if X.dim() != 3:
        raise ValueError(f"X must have shape (batch, queries, keys), got shape {_shape(X)}")
    if not X.is_floating_point():
        raise ValueError(f"X must be a floating-point tensor, got dtype {X.dtype}")
    return _softmax_where(X, key_mask(valid_lens, *X.shape, device=X.device))


def _check_qkv(queries, keys, values, same_qk_size: bool) -> None:
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 3:
            raise ValueError(f"{name} must have shape (batch, length, features), got shape {_shape(t)}")
    if not (queries.shape[0] == keys.shape[0] == values.shape[0]):
        raise ValueError(
            f"batch sizes differ: queries {_shape(queries)}, keys {_shape(keys)}, values {_shape(values)}; "
            "all three need the same first axis"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            f"keys {_shape(keys)} and values {_shape(values)} must have the same number of key-value pairs (axis 1)"
        )
    if same_qk_size and queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"dot-product attention needs queries and keys of the same feature size, got queries {_shape(queries)} "
            f"and keys {_shape(keys)}; use AdditiveAttention or BilinearAttention for different sizes"
        )
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not (queries.dtype == keys.dtype == values.dtype):
        raise ValueError(
            f"queries, keys and values need one dtype, got {queries.dtype}, {keys.dtype} and {values.dtype}"
        )


def _check_devices(module: nn.Module, queries, keys, values) -> None:
    """Queries, keys and values on the device of ``module``'s parameters (a clear error if not)."""
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        check_same_device(name, t, module)


def _check_mask(mask, q: torch.Tensor, k: torch.Tensor) -> None:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = f"dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a boolean tensor (True = may attend), got {got}")
    needed = (*q.shape[:-1], k.shape[-2])  # (..., queries, keys)
    try:
        ok = torch.broadcast_shapes(_shape(mask), needed) == needed
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"mask has shape {_shape(mask)}, which does not broadcast to (..., queries, keys) = {needed}")


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scaled dot-product attention on (..., queries, d) / (..., keys, d) / (..., keys, d_v).

    ``mask`` is boolean, ``True`` = may attend, broadcastable to (..., queries, keys).
    ``scale`` multiplies the scores (default ``1/√d``). ``bias`` (floating point,
    broadcastable to (..., queries, keys)) is added to the scaled scores before the
    softmax, e.g. ALiBi's distance penalty. With ``need_weights=False``
    this calls PyTorch's fused kernel and returns ``(output, None)``; with
    ``need_weights=True`` it computes the weights explicitly and returns
    ``(output, weights)``. Queries whose every key is masked (or that have no key
    at all) output zeros on both paths, never NaN.
    """
    if mask is not None:
        _check_mask(mask, q, k)
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if n_k == 0:  # no key at all: empty weights, zero output (kept in the autograd graph)
        weights = torch.matmul(q, k.transpose(-2, -1))  # (..., queries, 0)
        return torch.matmul(weights, v), (weights if need_weights else None)
    only_causal = causal and mask is None and n_q == n_k and bias is None
    if bias is not None:
        bias = bias.to(q.dtype)
    if causal:
        cm = causal_mask(n_q, n_k, device=q.device)
        mask = cm if mask is None else (mask & cm)
    if not need_weights:
        if mask is not None:
            # The fused kernel would produce NaN for rows with nothing to attend to: let them see
            # everything, then zero their output. Always done (no test on the host whether such a
            # row exists: that would make a GPU wait at every call). Values at keys no query may
            # see are zeroed too, so NaN or inf there (padding) never reaches the output.
            empty_rows = ~mask.any(dim=-1, keepdim=True)  # (..., queries, 1)
            allowed = mask | empty_rows
            if bias is not None:  # a float mask: the bias where allowed, -inf elsewhere
                allowed = torch.where(allowed, bias, torch.tensor(float("-inf"), dtype=q.dtype, device=q.device))
            out = F.scaled_dot_product_attention(q, _visible_values(k, mask), _visible_values(v, mask),
                                                 attn_mask=allowed, dropout_p=dropout_p, scale=scale)
            return out.masked_fill(empty_rows, 0.0), None
        if only_causal:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=scale)
        return out, None
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    weights = _softmax_where(scores if bias is None else scores + bias, mask)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return torch.matmul(dropped, v if mask is None else _visible_values(v, mask)), weights


def _visible_values(v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``v`` (values or keys) with the rows of keys that no query may attend set to 0: a weight
    of 0 times NaN is NaN, and an infinite key makes a NaN score that no mask removes, so
    padding must not reach the output whatever it holds."""
    dead = ~mask.any(dim=-2)  # (..., keys)
    return v.masked_fill(dead.unsqueeze(-1), 0.0)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention: softmax(Q Kᵀ / √d) V.

    ``forward(queries, keys, values, valid_lens=None)``; keeps
    ``attention_weights`` (batch, queries, keys) when weights are wanted (see the
    module docstring for when).
    """

    def __init__(self, dropout: float = 0.0, need_weights: bool | None = None):
        super().__init__()
        self.dropout = check_dropout(dropout)
        self.need_weights = need_weights
        self.attention_weights: torch.Tensor | None = None

    def forward(self, queries, keys, values, valid_lens=None, need_weights: bool | None = None):
        _check_qkv(queries, keys, values, same_qk_size=True)
        mask = key_mask(valid_lens, queries.shape[0], queries.shape[1], keys.shape[1], device=queries.device)
        p = self.dropout if self.training else 0.0
        out, self.attention_weights = attend(
            queries, keys, values, mask, dropout_p=p, need_weights=_wants_weights(self, need_weights)
        )
        return out


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention: score wᵥᵀ tanh(W_q q + W_k k).

    Works for queries and keys of different sizes. ``query_size``/``key_size``
    may be omitted; the projections are then created at the first call
    (``nn.LazyLinear``), as in d2l. There is no fused kernel for this score, so
    ``attention_weights`` (batch, queries, keys) is always kept. Note the
    (batch, queries, keys, num_hiddens) intermediate: its memory grows with
    ``num_hiddens`` times the size of the score matrix.
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0, query_size: int | None = None,
                 key_size: int | None = None):
        super().__init__()
        num_hiddens = check_positive_int("num_hiddens", num_hiddens)
        dropout = check_dropout(dropout)
        query_size = check_optional_positive_int("query_size", query_size)
        key_size = check_optional_positive_int("key_size", key_size)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False) if query_size else nn.LazyLinear(num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False) if key_size else nn.LazyLinear(num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def forward(self, queries, keys, values, valid_lens=None):
        _check_qkv(queries, keys, values, same_qk_size=False)
        _check_devices(self, queries, keys, values)
        for name, t, layer in (("queries", queries, self.W_q), ("keys", keys, self.W_k)):
            if not isinstance(layer, nn.LazyLinear) and t.shape[-1] != layer.in_features:
                raise ValueError(
                    f"{name} have shape {_shape(t)} but this layer needs {layer.in_features} features "
                    f"(batch, length, {layer.in_features}); it was built with "
                    f"{'query' if name == 'queries' else 'key'}_size={layer.in_features}"
                )
        mask = key_mask(valid_lens, queries.shape[0], queries.shape[1], keys.shape[1], device=queries.device)
        q, k = self.W_q(queries), self.W_k(keys)
        # (batch, queries, 1, h) + (batch, 1, keys, h) -> (batch, queries, keys, h); tanh in place
        # saves allocating a second tensor of this size, the largest of the layer
        features = (q.unsqueeze(2) + k.unsqueeze(1)).tanh_()
        scores = self.w_v(features).squeeze(-1)  # (batch, queries, keys)
        self.attention_weights = _softmax_where(scores, mask)
        return torch.bmm(self.dropout(self.attention_weights), values)


def transpose_qkv(X: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the features into heads: (batch, length, num_hiddens) -> (batch, num_heads, length, num_hiddens / num_heads).

    Head ``h`` gets the feature columns ``h * d_head .. (h + 1) * d_head - 1``.
    The result is a view (no copy): ``scaled_dot_product_attention`` and
    ``matmul`` then treat (batch, num_heads) as one batch of independent heads.
    """
    if not isinstance(X, torch.Tensor) or X.dim() != 3:
        got = _shape(X) if isinstance(X, torch.Tensor) else type(X).__name__
        raise ValueError(f"transpose_qkv expects X of shape (batch, length, num_hiddens), got {got}")
    b, n, d = X.shape
    num_heads = check_positive_int("num_heads", num_heads)
    if d % num_heads:
        raise ValueError(f"num_heads={num_heads} must be positive and divide the {d} features of X (shape {_shape(X)})")
    return X.reshape(b, n, num_heads, d // num_heads).transpose(1, 2)


def transpose_output(X: torch.Tensor) -> torch.Tensor:
    """Undo :func:`transpose_qkv`: (batch, heads, length, d_head) -> (batch, length, heads * d_head)."""
    if not isinstance(X, torch.Tensor) or X.dim() != 4:
        got = _shape(X) if isinstance(X, torch.Tensor) else type(X).__name__
        raise ValueError(f"transpose_output expects X of shape (batch, heads, length, d_head), got {got}")
    b, h, n, d = X.shape
    return X.transpose(1, 2).reshape(b, n, h * d)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al., 2017).

    ``num_heads`` heads, each a scaled dot-product attention on its own
    ``num_hiddens / num_heads``-dimensional projections, concatenated and mixed
    by ``W_o``. ``forward(queries, keys, values, valid_lens=None, *,
    attn_mask=None, causal=False, need_weights=None)`` returns
    (batch, queries, num_hiddens); ``attention_weights`` is
    (batch, heads, queries, keys) when weights are wanted, else ``None``.

    ``query_size``/``key_size``/``value_size`` default to ``num_hiddens``.
    ``attn_mask`` is boolean, ``True`` = may attend, of shape (queries, keys),
    (batch, queries, keys) or (batch, heads, queries, keys). ``causal=True``
    lets each query see only keys at its position or before.
    ``rotary=True`` rotates each head's queries and keys by their positions
    (:class:`~attention_book.positional.RotaryEmbedding`), so scores depend on
    relative positions; queries are taken to be the last ``num_queries`` of the
    ``num_keys`` positions, as in :func:`causal_mask` (both start at 0 when there
    are more queries than keys). ``alibi=True`` instead adds ALiBi's distance
    penalty ``-m_h |i - j|`` to each head's scores
    (:class:`~attention_book.positional.ALiBi`), with the same positions.

    ``num_kv_heads`` (default ``num_heads``) key/value heads are shared by the
    ``num_heads`` query heads in equal groups of consecutive heads: 1 is
    multi-query attention (Shazeer, 2019), a number between grouped-query
    attention (Ainslie et al., 2023), ``num_heads`` plain multi-head attention.
    ``W_k`` and ``W_v`` then map to ``num_kv_heads * head_dim`` features, and a
    key/value cache stores only those: :meth:`project_kv` gives what it stores,
    and ``forward(queries, None, None, kv=...)`` attends over it.

    Speed (see ``benchmarks/attention.py``): the fast path never builds a
    (queries, keys) matrix for the common cases — no mask, ``causal=True`` alone
    (the kernel's ``is_causal``) and 1-D ``valid_lens`` (a (batch, 1, 1, keys)
    mask broadcast by the kernel) — so its memory grows linearly in length.
    """

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float = 0.0, bias: bool = False,
                 query_size: int | None = None, key_size: int | None = None, value_size: int | None = None,
                 need_weights: bool | None = None, rotary: bool = False, num_kv_heads: int | None = None,
                 alibi: bool = False):
        super().__init__()
        num_hiddens, num_heads = check_heads(num_hiddens, num_heads)
        num_kv_heads = check_kv_heads(num_heads, num_kv_heads)
        dropout = check_dropout(dropout)
        query_size, key_size, value_size = (check_optional_positive_int(name, size) for name, size in (
            ("query_size", query_size), ("key_size", key_size), ("value_size", value_size)))
        if rotary and alibi:
            raise ValueError("rotary=True and alibi=True are two ways to give positions: choose one")
        self.num_hiddens, self.num_heads, self.dropout = num_hiddens, num_heads, dropout
        self.num_kv_heads, self.head_dim = num_kv_heads, num_hiddens // num_heads
        self.need_weights = need_weights
        kv_hiddens = num_kv_heads * self.head_dim
        self.W_q = nn.Linear(query_size or num_hiddens, num_hiddens, bias=bias)
        self.W_k = nn.Linear(key_size or num_hiddens, kv_hiddens, bias=bias)
        self.W_v = nn.Linear(value_size or num_hiddens, kv_hiddens, bias=bias)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=bias)
        self.rotary = self.alibi = None
        if rotary:
            from .positional import RotaryEmbedding

            if self.head_dim % 2:
                raise ValueError(
                    f"rotary=True needs an even head size, got num_hiddens / num_heads = {self.head_dim}; "
                    f"pick num_heads so that num_hiddens / num_heads is even"
                )
            self.rotary = RotaryEmbedding(self.head_dim)
        if alibi:
            from .positional import ALiBi

            self.alibi = ALiBi(num_heads)
        self.attention_weights: torch.Tensor | None = None

    def _check(self, queries, keys, values) -> None:
        _check_qkv(queries, keys, values, same_qk_size=False)
        _check_devices(self, queries, keys, values)
        for name, t, layer in (("queries", queries, self.W_q), ("keys", keys, self.W_k), ("values", values, self.W_v)):
            if t.shape[-1] != layer.in_features:
                raise ValueError(
                    f"{name} have {t.shape[-1]} features (shape {_shape(t)}) but this layer expects "
                    f"{layer.in_features}; set {name[:-1] if name != 'queries' else 'query'}_size accordingly"
                )

    def build_mask(self, batch: int, n_q: int, n_k: int, valid_lens=None, attn_mask=None, device=None):
        """Combine ``valid_lens`` and ``attn_mask`` into one boolean (batch, 1|heads, 1|q, k) mask.

        Lengths of shape (batch,) become a (batch, 1, 1, keys) mask that the
        kernel broadcasts, instead of a (batch, 1, queries, keys) copy.
        """
        if isinstance(valid_lens, torch.Tensor) and valid_lens.dtype != torch.bool and valid_lens.dim() == 1:
            mask = key_mask(valid_lens, batch, 1, n_k, device=device)  # checks shape and range
        else:
            mask = key_mask(valid_lens, batch, n_q, n_k, device=device)
        mask = None if mask is None else mask.unsqueeze(1)
        if attn_mask is not None:
            if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
                got = attn_mask.dtype if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
                raise ValueError(f"attn_mask must be a boolean tensor (True = may attend), got {got}")
            allowed = {(n_q, n_k), (batch, n_q, n_k), (batch, self.num_heads, n_q, n_k), (batch, 1, n_q, n_k)}
            if _shape(attn_mask) not in allowed:
                raise ValueError(
                    f"attn_mask has shape {_shape(attn_mask)}; it needs ({n_q}, {n_k}), ({batch}, {n_q}, {n_k}) "
                    f"or ({batch}, {self.num_heads}, {n_q}, {n_k})"
                )
            am = attn_mask if attn_mask.dim() != 3 else attn_mask.unsqueeze(1)
            if device is not None:
                am = am.to(device)
            mask = am if mask is None else (mask & am)
        return mask

    def _project(self, queries, keys, values):
        """W_q queries, W_k keys, W_v values — as one matrix product for self-attention.

        When the three inputs are the same tensor, stacking the three weight
        matrices turns three GEMMs (and, backward, three input-gradient GEMMs
        plus two additions) into one; ``benchmarks/attention.py`` measured this
        as about 10% less time at batch 8 x length 512 on the CPU. Same numbers
        either way.
        """
        if queries is keys and keys is values:
            weight = torch.cat([self.W_q.weight, self.W_k.weight, self.W_v.weight])
            bias = None if self.W_q.bias is None else torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias])
            kv = self.W_k.out_features
            return F.linear(queries, weight, bias).split([self.num_hiddens, kv, kv], dim=-1)
        return self.W_q(queries), self.W_k(keys), self.W_v(values)

    def project_kv(self, keys: torch.Tensor, values: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """What a key/value cache stores for these positions: (batch, length, 2 * num_kv_heads * head_dim).

        The projected keys (rotated to positions ``offset, offset + 1, ...`` when
        ``rotary=True``) followed by the projected values on the last axis. Pass
        the cache, new rows appended, as ``forward(queries, None, None, kv=cache)``.
        """
        for name, t in (("keys", keys), ("values", values)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3:
                got = _shape(t) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must have shape (batch, length, features), got {got}")
        offset = check_int("offset", offset, minimum=0)
        k, v = self.W_k(keys), self.W_v(values)
        if self.rotary is not None:
            k = transpose_output(self.rotary(transpose_qkv(k, self.num_kv_heads), offset=offset))
        return torch.cat((k, v), dim=-1)

    def _check_kv(self, queries, kv) -> None:
        for name, t in (("queries", queries), ("kv", kv)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3:
                got = _shape(t) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must have shape (batch, length, features), got {got}")
            check_same_device(name, t, self)
        width = 2 * self.W_k.out_features
        if kv.shape[-1] != width or kv.shape[0] != queries.shape[0]:
            raise ValueError(f"kv has shape {_shape(kv)}; it needs ({queries.shape[0]}, keys, {width}): "
                             f"keys and values of {self.num_kv_heads} key/value heads, as project_kv returns")
        if queries.shape[-1] != self.W_q.in_features:
            raise ValueError(f"queries have {queries.shape[-1]} features (shape {_shape(queries)}) but this layer "
                             f"expects {self.W_q.in_features}")
        if not queries.is_floating_point() or queries.dtype != kv.dtype:
            raise ValueError(f"queries and kv need one floating-point dtype, got {queries.dtype} and {kv.dtype}")

    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, causal: bool = False,
                need_weights: bool | None = None, kv: torch.Tensor | None = None):
        if kv is None:
            self._check(queries, keys, values)
            n_k = keys.shape[1]
        else:
            if keys is not None or values is not None:
                raise ValueError("pass either keys and values or kv (their projections, from project_kv), not both")
            self._check_kv(queries, kv)
            n_k = kv.shape[1]
        b, n_q = queries.shape[0], queries.shape[1]
        mask = self.build_mask(b, n_q, n_k, valid_lens, attn_mask, device=queries.device)
        # (batch, length, features) -> (batch, heads, length, d_head); keys and values have num_kv_heads heads
        if kv is None:
            q, k, v = self._project(queries, keys, values)
            k = self.rotary(transpose_qkv(k, self.num_kv_heads)) if self.rotary is not None else \
                transpose_qkv(k, self.num_kv_heads)
        else:
            q, (k, v) = self.W_q(queries), kv.chunk(2, dim=-1)
            k = transpose_qkv(k, self.num_kv_heads)
        q, v = transpose_qkv(q, self.num_heads), transpose_qkv(v, self.num_kv_heads)
        if self.rotary is not None:
            q = self.rotary(q, offset=max(n_k - n_q, 0))
        bias = None if self.alibi is None else self.alibi(n_q, n_k, dtype=q.dtype, device=q.device)
        p = self.dropout if self.training else 0.0
        out, self.attention_weights = self._attend(q, k, v, mask, causal, p, _wants_weights(self, need_weights), bias)
        # (batch, heads, queries, d_head) -> (batch, queries, num_hiddens)
        return self.W_o(transpose_output(out))

    def _attend(self, q, k, v, mask, causal: bool, p: float, wants: bool, bias):
        """Attention of the (batch, heads, queries, d_head) queries over (batch, kv_heads, keys, d_head) keys/values.

        With fewer key/value heads than query heads, each group of ``num_heads /
        num_kv_heads`` consecutive query heads shares one key/value head. When
        every query of a group sees the same keys (no mask, or one mask per
        example, and at most one causal query: decoding), the group's queries
        are stacked along the query axis and attend to the shared keys at once,
        so the keys and values are never copied; otherwise they are repeated.
        """
        b, n_q, n_k = q.shape[0], q.shape[-2], k.shape[-2]
        group = self.num_heads // self.num_kv_heads
        if group > 1:
            same_keys = mask is None or (mask.shape[-2] == 1 and (mask.dim() < 3 or mask.shape[-3] == 1))
            if bias is None and same_keys and (not causal or n_q == 1) and n_k > 0:
                # causal with one query: the query is the last position and sees every key
                folded = q.reshape(b, self.num_kv_heads, group * n_q, q.shape[-1])
                out, weights = attend(folded, k, v, mask, dropout_p=p, need_weights=wants)
                out = out.reshape(b, self.num_heads, n_q, v.shape[-1])
                return out, None if weights is None else weights.reshape(b, self.num_heads, n_q, n_k)
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if causal and mask is None and bias is None and n_q == n_k and not wants and n_k > 0:
            # The kernel masks by itself: no (queries, keys) mask is built or scanned.
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True), None
        return attend(q, k, v, mask, causal=causal, dropout_p=p, need_weights=wants, bias=bias)


# --- attention maps, on request ----------------------------------------------------------------

@dataclass
class AttentionMap:
    """One attention module's weights over one recorded run.

    ``name``: the module's qualified name in the model (``"encoder.blks.0.attention"``);
    ``kind``: ``"self"`` or ``"cross"``; ``layer``: its index among the recorded modules of
    its kind, in the order they were first called; ``weights``: (batch, heads, queries, keys),
    detached (modules without heads get a head axis of size 1).
    """

    name: str
    kind: str
    layer: int
    weights: torch.Tensor


class AttentionRecord:
    """The maps :func:`record_attention` collected: one :class:`AttentionMap` per attention module."""

    def __init__(self) -> None:
        self._parts: dict[nn.Module, list[torch.Tensor]] = {}
        self._info: dict[nn.Module, tuple[str, str]] = {}
        self._maps: list[AttentionMap] | None = None

    def _add(self, module: nn.Module, name: str, kind: str, weights: torch.Tensor) -> None:
        self._maps = None
        self._info.setdefault(module, (name, kind))
        self._parts.setdefault(module, []).append(weights if weights.dim() == 4 else weights.unsqueeze(1))

    @property
    def maps(self) -> list[AttentionMap]:
        """Every module's map, in the order the modules were first called. A module called several
        times (step-by-step decoding) gets one map: its calls stacked along the queries, keys padded
        with zeros on the right to the longest call (a cached decoder's causal map)."""
        if self._maps is None:
            counts: dict[str, int] = {}
            self._maps = []
            for module, parts in self._parts.items():
                name, kind = self._info[module]
                width = max(p.shape[-1] for p in parts)
                parts = [F.pad(p, (0, width - p.shape[-1])) for p in parts]
                self._maps.append(AttentionMap(name, kind, counts.get(kind, 0), torch.cat(parts, dim=2)))
                counts[kind] = counts.get(kind, 0) + 1
        return self._maps

    def __len__(self) -> int:
        return len(self._parts)

    def __iter__(self):
        return iter(self.maps)

    def tensors(self, kind: str | None = None, under: str | None = None) -> list[torch.Tensor]:
        """The weights of every map, layer by layer; only of one ``kind`` (``"self"``/``"cross"``)
        and only of modules inside the submodule named ``under`` (``"encoder"``), when given."""
        if kind not in (None, "self", "cross"):
            raise ValueError(f"kind must be 'self', 'cross' or None, got {kind!r}")
        return [m.weights for m in self.maps if (kind is None or m.kind == kind)
                and (under is None or m.name == under or m.name.startswith(under + "."))]

    def stacked(self, kind: str | None = None, under: str | None = None) -> torch.Tensor:
        """:meth:`tensors` as one tensor (layers, batch, heads, queries, keys)."""
        maps = self.tensors(kind, under)
        if not maps:
            raise ValueError(f"no attention of kind {kind!r} under {under!r} was recorded; recorded: {self!r}")
        return torch.stack(maps)

    def __repr__(self) -> str:
        rows = ", ".join(f"{m.kind}[{m.layer}] {m.name or '(model)'} {tuple(m.weights.shape)}" for m in self.maps)
        return f"AttentionRecord({rows})"


def _is_attention(module: nn.Module) -> bool:
    return isinstance(module, (DotProductAttention, AdditiveAttention, MultiHeadAttention))


@contextlib.contextmanager
def record_attention(model: nn.Module) -> Iterator[AttentionRecord]:
    """Record the weights of every attention module of ``model`` while the block runs.

    >>> with ab.record_attention(model) as maps:
    ...     model(X)
    >>> maps.stacked("self")        # (layers, batch, heads, queries, keys)

    Only inside this block do the modules compute their weights explicitly; outside
    it, in training and in eval mode alike, they take the fused kernel. Each
    attention module gives one map (see :attr:`AttentionRecord.maps`); the kind is
    the module's ``role`` when its model set one, else ``"self"`` when it was
    called with the same tensor as queries and keys, ``"cross"`` otherwise.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"record_attention needs an nn.Module, got {type(model).__name__}")
    record = AttentionRecord()
    names = {m: n for n, m in model.named_modules()}

    def hook(module, args, _output):
        weights = getattr(module, "attention_weights", None)
        if isinstance(weights, torch.Tensor):
            role = getattr(module, "role", None)
            kind = role if role in ("self", "cross") else ("self" if len(args) > 1 and args[0] is args[1] else "cross")
            record._add(module, names.get(module, ""), kind, weights.detach())

    handles = [m.register_forward_hook(hook) for m in model.modules() if _is_attention(m)]
    if not handles:
        raise ValueError(f"{type(model).__name__} has no attention module to record")
    try:
        with keep_attention_weights():
            yield record
    finally:
        for handle in handles:
            handle.remove()


def collect_attention(model: nn.Module, *inputs, **kwargs) -> list[torch.Tensor]:
    """Run ``model(*inputs, **kwargs)`` in eval mode and return its attention maps.

    One tensor of shape (batch, heads, queries, keys) per attention module, in
    the order they were first called (:func:`attention_book.record_attention`)
    — the per-layer list that attention viewers such as bertviz accept. Layers
    without heads get a head axis of size 1. The model's mode is restored.
    """
    with evaluating(model), torch.no_grad(), record_attention(model) as maps:
        model(*inputs, **kwargs)
    if not len(maps):
        raise ValueError(f"{type(model).__name__} made no attention call")
    return maps.tensors()
