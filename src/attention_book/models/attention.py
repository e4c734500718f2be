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

from ..core.checks import (check_dropout, check_heads, check_optional_positive_int,
                     check_positive_int, check_same_device, check_same_dtype, check_tensor_values)
from ..core.train import evaluating

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
    "heads_mask",
    "transpose_qkv",
    "transpose_output",
    "wants_weights",
    "check_qkv",
    "check_qkv_devices",
    "check_mask",
    "check_projection_inputs",
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


def wants_weights(module: nn.Module, need_weights: bool | None) -> bool:
    """Whether an attention module keeps its weights: the call's ``need_weights``, else the module's, else the switch."""
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
        return mask if device is None else mask.to(_device_for("valid_lens", mask, device))
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
        lens = lens.to(_device_for("valid_lens", lens, device))
    positions = torch.arange(num_keys, device=lens.device)
    return positions[None, None, :] < lens[:, :, None].to(positions.dtype)


def _device_for(name: str, t: torch.Tensor, device) -> torch.device:
    """``device``, where ``t`` is about to be moved; a ``meta`` tensor (shapes only) cannot be moved
    to a device that holds values, so that raises ``ValueError`` naming ``name`` and both devices."""
    device = torch.device(device)
    if t.device.type == "meta" and device.type != "meta":
        raise ValueError(f"{name} is on the meta device (it has a shape but no values) while the scores are on "
                         f"{device}; pass {name} on {device} (or everything on meta, which gives a meta result)")
    return device


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
    """Softmax over the last axis where ``mask`` is True and the score is not -inf; exact zeros
    elsewhere, and in rows with nothing left to attend to (every key masked or scored -inf).
    NaN in a score that is not masked gives NaN in its row."""
    # Masked keys score -inf, so they get exactly zero weight and zero gradient. A row left with
    # nothing but -inf (its maximum is -inf; a NaN row's maximum is NaN) is empty: softmax would
    # give 0/0 = NaN there, so its weights are set to zero, as PyTorch's fused kernel does. The
    # clamp to the dtype's most negative finite number keeps the softmax of such a row, and so its
    # gradient, finite (float16 and bfloat16 included) without changing any other row.
    if scores.shape[-1] == 0:  # no key at all: empty rows of weights
        return F.softmax(scores, dim=-1)
    filled = scores if mask is None else scores.masked_fill(~mask, float("-inf"))
    empty = filled.amax(dim=-1, keepdim=True) == float("-inf")
    weights = F.softmax(filled.clamp(min=torch.finfo(scores.dtype).min), dim=-1)
    return weights.masked_fill(empty, 0.0)


def masked_softmax(X: torch.Tensor, valid_lens=None) -> torch.Tensor:
    """Softmax over the last axis of ``X`` (batch, queries, keys), ignoring masked keys.

    ``valid_lens`` is ``None``, lengths of shape (batch,) or (batch, queries), or a
    boolean mask (``True`` = keep) broadcastable to ``X``'s shape.

    * Masked keys get exactly zero weight (and zero gradient).
    * A row whose valid length is 0 has nothing to attend to: it returns **all
      zeros**, not a uniform row and not NaN. Attention over such a row outputs
      the zero vector. (d2l's version returns a uniform row there.)
    * A score of ``-inf`` counts as a masked key, so a row whose every score is
      ``-inf`` is such a row too: zeros, as PyTorch's fused attention kernel gives
      (``torch.softmax`` alone gives NaN there).
    * NaN in an unmasked score gives NaN across its row (never hidden as zeros).
    * ``X`` is never modified in place.
    * Masked scores become ``-inf``, clamped to the most negative finite number
      of ``X``'s dtype before the exponential, so float16 and bfloat16 stay finite.

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


def check_qkv(queries, keys, values, same_qk_size: bool) -> None:
    """Queries, keys and values: floating-point (batch, length, features) tensors that fit together (a clear error if not)."""
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
    # Inside torch.autocast a mix is normal (a layer norm's float32 output beside a linear layer's
    # bfloat16 one) and autocast casts at each product; outside it, a mix is a mistake.
    if not (queries.dtype == keys.dtype == values.dtype) and not torch.is_autocast_enabled(queries.device.type):
        raise ValueError(
            f"queries, keys and values need one dtype, got {queries.dtype}, {keys.dtype} and {values.dtype}"
        )


def check_qkv_devices(module: nn.Module, queries, keys, values) -> None:
    """Queries, keys and values on the device, and in the dtype, of ``module``'s parameters (a clear
    error naming both if not; under ``torch.autocast`` any floating-point dtype is fine)."""
    for name, t in (("queries", queries), ("keys", keys), ("values", values)):
        check_same_device(name, t, module)
        check_same_dtype(name, t, module)


def check_mask(mask, q: torch.Tensor, k: torch.Tensor) -> None:
    """A boolean attention mask (``True`` = may attend) that fits queries ``q`` and keys ``k``."""
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
    ``(output, weights)``. Both paths give the same numbers, edge cases included:

    * A query with nothing to attend to (every key masked, or given a ``bias`` of
      ``-inf``, or no key at all) outputs zeros, never NaN.
    * Otherwise NaN in a query, or in a key or value it may attend to, gives NaN
      in its output row. (PyTorch's fused kernel on the CPU, without a mask and
      below 16 positions, returns zeros for a query whose scores are all NaN;
      ``attend`` puts the NaN back, so a bad input is never hidden.) A query, key or
      value counts as holding NaN when its features sum to NaN, which a vector
      holding both ``+inf`` and ``-inf`` does too.
    """
    if mask is not None:
        check_mask(mask, q, k)
    n_q, n_k = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if n_k == 0:  # no key at all: empty weights, zero output (kept in the autograd graph)
        weights = torch.matmul(q, k.transpose(-2, -1))  # (..., queries, 0)
        return torch.matmul(weights, v), (weights if need_weights else None)
    if bias is not None:
        bias = bias.to(q.dtype)
        # A bias of -inf rules a key out: it joins the mask, so a query left with no key outputs zeros.
        finite = ~torch.isneginf(bias)
        mask = finite if mask is None else (mask & finite)
    if causal:
        cm = causal_mask(n_q, n_k, device=q.device)
        mask = cm if mask is None else (mask & cm)
    # Keys holding NaN (a row summing to NaN: one pass, several times cheaper than isnan().any()); with
    # a mask, values too, as the kernel would let them reach queries that may not attend to them.
    bad_keys = k.sum(dim=-1).isnan() if mask is None else (k.sum(dim=-1).isnan() | v.sum(dim=-1).isnan())
    nan_rows = _nan_rows(q, bad_keys, mask)
    if not need_weights:
        if mask is not None:
            # The fused kernel would produce NaN for rows with nothing to attend to: let them see
            # everything, then zero their output. Always done (no test on the host whether such a
            # row exists: that would make a GPU wait at every call). Values at keys no query may
            # see are zeroed too, so NaN or inf there (padding) never reaches the output.
            empty_rows = ~mask.any(dim=-1, keepdim=True)  # (..., queries, 1)
            allowed = mask | empty_rows
            if bias is not None:  # a float mask: the bias where allowed, -inf elsewhere, 0 in empty rows
                minus_inf = torch.tensor(float("-inf"), dtype=q.dtype, device=q.device)
                allowed = torch.where(mask, bias, minus_inf).masked_fill(empty_rows, 0.0)
            out = F.scaled_dot_product_attention(q, _visible_values(k, mask, bad_keys),
                                                 _visible_values(v, mask, bad_keys),
                                                 attn_mask=allowed, dropout_p=dropout_p, scale=scale)
            return out.masked_fill(nan_rows, float("nan")).masked_fill(empty_rows, 0.0), None
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=scale)
        return out.masked_fill(nan_rows, float("nan")), None
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    weights = _softmax_where(scores if bias is None else scores + bias, mask)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = torch.matmul(dropped, v if mask is None else _visible_values(v, mask, bad_keys))
    return out.masked_fill(nan_rows, float("nan")), weights


def _nan_rows(q: torch.Tensor, bad_keys: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """(..., queries, 1): True for each query that has a key to attend to (every key when ``mask`` is
    None) and holds NaN, or may attend to one of ``bad_keys`` (..., keys). Reads nothing on the host."""
    bad_q = q.sum(dim=-1, keepdim=True).isnan()
    if mask is None:
        return bad_q | bad_keys.any(dim=-1, keepdim=True).unsqueeze(-1)
    return (bad_q & mask.any(dim=-1, keepdim=True)) | (mask & bad_keys.unsqueeze(-2)).any(dim=-1, keepdim=True)


def _visible_values(v: torch.Tensor, mask: torch.Tensor, bad_keys: torch.Tensor) -> torch.Tensor:
    """``v`` (values or keys) with the rows of keys that no query may attend, and of ``bad_keys``, set to 0.

    Padding must not reach the output whatever it holds: a weight of 0 times NaN is NaN, and an
    infinite key makes a NaN score that no mask removes. PyTorch's kernel also lets NaN in a key
    or value reach queries that may not attend to it, so those rows are zeroed too and
    :func:`_nan_rows` marks the queries that may attend to them."""
    dead = ~mask.any(dim=-2) | bad_keys  # (..., keys)
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
        check_qkv(queries, keys, values, same_qk_size=True)
        mask = key_mask(valid_lens, queries.shape[0], queries.shape[1], keys.shape[1], device=queries.device)
        p = self.dropout if self.training else 0.0
        out, self.attention_weights = attend(
            queries, keys, values, mask, dropout_p=p, need_weights=wants_weights(self, need_weights)
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
        check_qkv(queries, keys, values, same_qk_size=False)
        check_qkv_devices(self, queries, keys, values)
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


def check_projection_inputs(module: nn.Module, queries, keys, values) -> None:
    """Queries, keys and values as ``module``'s ``W_q``, ``W_k``, ``W_v`` take them (a clear error if not)."""
    check_qkv(queries, keys, values, same_qk_size=False)
    check_qkv_devices(module, queries, keys, values)
    for name, t, layer in (("queries", queries, module.W_q), ("keys", keys, module.W_k),
                           ("values", values, module.W_v)):
        if t.shape[-1] != layer.in_features:
            raise ValueError(
                f"{name} have {t.shape[-1]} features (shape {_shape(t)}) but this layer expects "
                f"{layer.in_features}; set {name[:-1] if name != 'queries' else 'query'}_size accordingly"
            )


def heads_mask(valid_lens, attn_mask, batch: int, num_heads: int, n_q: int, n_k: int, device=None):
    """``valid_lens`` and ``attn_mask`` as one boolean (batch, 1|heads, 1|queries, keys) mask, or ``None``.

    Lengths of shape (batch,) become a (batch, 1, 1, keys) mask that the kernel
    broadcasts, instead of a (batch, 1, queries, keys) copy. ``attn_mask`` is
    boolean (``True`` = may attend) of shape (queries, keys), (batch, queries,
    keys) or (batch, 1|heads, queries, keys).
    """
    if isinstance(valid_lens, torch.Tensor) and valid_lens.dtype != torch.bool and valid_lens.dim() == 1:
        mask = key_mask(valid_lens, batch, 1, n_k, device=device)  # checks shape and range
    else:
        mask = key_mask(valid_lens, batch, n_q, n_k, device=device)
    mask = None if mask is None else mask.unsqueeze(1)
    if attn_mask is None:
        return mask
    if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
        got = attn_mask.dtype if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
        raise ValueError(f"attn_mask must be a boolean tensor (True = may attend), got {got}")
    if _shape(attn_mask) not in {(n_q, n_k), (batch, n_q, n_k), (batch, num_heads, n_q, n_k), (batch, 1, n_q, n_k)}:
        raise ValueError(
            f"attn_mask has shape {_shape(attn_mask)}; it needs ({n_q}, {n_k}), ({batch}, {n_q}, {n_k}) "
            f"or ({batch}, {num_heads}, {n_q}, {n_k})"
        )
    am = attn_mask if attn_mask.dim() != 3 else attn_mask.unsqueeze(1)
    am = am if device is None else am.to(device)
    return am if mask is None else (mask & am)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al., 2017): chapter 5's layer.

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

    Chapter 10's variants are subclasses in :mod:`attention_book.models.attention_variants`:
    :class:`~attention_book.GroupedQueryAttention` (shared key/value heads and
    a key/value cache), :class:`~attention_book.RotaryAttention` and
    :class:`~attention_book.ALiBiAttention` (positions inside the heads).

    Speed (see ``benchmarks/attention.py``): the fast path builds no
    (queries, keys) matrix without a mask or with 1-D ``valid_lens`` (a
    (batch, 1, 1, keys) mask broadcast by the kernel). ``causal=True`` builds a
    boolean (queries, keys) mask, one byte per pair, so that NaN inputs and empty
    rows come out the same on the fused and the explicit path.
    """

    def __init__(self, num_hiddens: int, num_heads: int, dropout: float = 0.0, bias: bool = False,
                 query_size: int | None = None, key_size: int | None = None, value_size: int | None = None,
                 need_weights: bool | None = None):
        super().__init__()
        (self.num_hiddens, self.num_heads), self.dropout = check_heads(num_hiddens, num_heads), check_dropout(dropout)
        self.head_dim, self.need_weights = self.num_hiddens // self.num_heads, need_weights
        sizes = [check_optional_positive_int(name, size) or self.num_hiddens for name, size in
                 (("query_size", query_size), ("key_size", key_size), ("value_size", value_size))]
        self.W_q, self.W_k, self.W_v = (nn.Linear(size, self.num_hiddens, bias=bias) for size in sizes)
        self.W_o = nn.Linear(self.num_hiddens, self.num_hiddens, bias=bias)
        self.attention_weights: torch.Tensor | None = None

    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, causal: bool = False,
                need_weights: bool | None = None):
        check_projection_inputs(self, queries, keys, values)
        b, n_q, n_k = queries.shape[0], queries.shape[1], keys.shape[1]
        mask = heads_mask(valid_lens, attn_mask, b, self.num_heads, n_q, n_k, device=queries.device)
        # (batch, length, num_hiddens) -> (batch, heads, length, head_dim): head h gets its own columns
        q, k, v = (transpose_qkv(t, self.num_heads) for t in self._project(queries, keys, values))
        p = self.dropout if self.training else 0.0
        out, self.attention_weights = attend(q, k, v, mask, causal=causal, dropout_p=p,
                                             need_weights=wants_weights(self, need_weights))
        # (batch, heads, queries, head_dim) -> (batch, queries, num_hiddens), then mix the heads
        return self.W_o(transpose_output(out))

    def _project(self, queries, keys, values):
        """W_q queries, W_k keys, W_v values — as one matrix product for self-attention.

        When the three inputs are the same tensor, stacking the three weight
        matrices turns three GEMMs (and, backward, three input-gradient GEMMs
        plus two additions) into one; ``benchmarks/attention.py`` measured this
        as about 10% less time at batch 8 x length 512 on the CPU. Same numbers
        either way.
        """
        if queries is keys and keys is values:
            layers = (self.W_q, self.W_k, self.W_v)
            weight = torch.cat([layer.weight for layer in layers])
            bias = None if self.W_q.bias is None else torch.cat([layer.bias for layer in layers])
            return F.linear(queries, weight, bias).split([layer.out_features for layer in layers], dim=-1)
        return self.W_q(queries), self.W_k(keys), self.W_v(values)


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
