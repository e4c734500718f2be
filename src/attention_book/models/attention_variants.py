"""Chapter 10's variants of chapter 5's :class:`~attention_book.MultiHeadAttention`, one feature each.

* :class:`GroupedQueryAttention` lets ``num_heads`` query heads share
  ``num_kv_heads`` key/value heads (1: multi-query attention, Shazeer, 2019; a
  number in between: grouped-query attention, Ainslie et al., 2023), and
  attends over a key/value cache: :meth:`~GroupedQueryAttention.project_kv`
  gives what a cache stores for some positions, ``forward(queries, None, None,
  kv=cache)`` attends over it. Chapter 7's decoder keeps its cache this way.
* :class:`RotaryAttention` rotates each head's queries and keys by their
  positions (:class:`~attention_book.models.positional.RotaryEmbedding`), so a score
  depends on the offset between query and key only.
* :class:`ALiBiAttention` adds ALiBi's distance penalty ``-m_h |i - j|`` to
  each head's scores (:class:`~attention_book.models.positional.ALiBi`).

The two position variants are grouped-query layers too (``num_kv_heads``
defaults to ``num_heads``: plain multi-head attention), so a model can combine
a position scheme with shared heads and a cache. Queries are taken to be the
last ``num_queries`` of the ``num_keys`` positions, as in
:func:`~attention_book.causal_mask` (both start at 0 when there are more
queries than keys).
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import (MultiHeadAttention, check_projection_inputs, wants_weights, attend, heads_mask,
                        transpose_output, transpose_qkv)
from ..core.checks import check_int, check_kv_heads, check_same_device
from .positional import ALiBi, RotaryEmbedding

__all__ = ["GroupedQueryAttention", "RotaryAttention", "ALiBiAttention"]


class GroupedQueryAttention(MultiHeadAttention):
    """Multi-head attention whose query heads share ``num_kv_heads`` key/value heads, with a key/value cache.

    ``GroupedQueryAttention(num_hiddens, num_heads, dropout=0.0, bias=False,
    ..., num_kv_heads=None)`` takes :class:`~attention_book.MultiHeadAttention`'s
    arguments. The query heads fall into ``num_kv_heads`` equal groups of
    consecutive heads; each group shares one key/value head, so ``W_k`` and
    ``W_v`` map to ``num_kv_heads * head_dim`` features only. With
    ``num_kv_heads=None`` (= ``num_heads``) it computes exactly what
    :class:`~attention_book.MultiHeadAttention` computes, from the same weights.

    ``forward(queries, keys, values, valid_lens=None, *, attn_mask=None,
    causal=False, need_weights=None, kv=None)``: pass ``kv`` (a cache, from
    :meth:`project_kv`) instead of ``keys`` and ``values`` to attend over keys
    and values projected earlier.
    """

    def __init__(self, num_hiddens: int, num_heads: int, *args, num_kv_heads: int | None = None, **kwargs):
        super().__init__(num_hiddens, num_heads, *args, **kwargs)
        self.num_kv_heads = check_kv_heads(self.num_heads, num_kv_heads)
        if self.num_kv_heads < self.num_heads:  # W_k and W_v make the shared heads' features only
            bias = self.W_k.bias is not None
            kv_hiddens = self.num_kv_heads * self.head_dim
            self.W_k = nn.Linear(self.W_k.in_features, kv_hiddens, bias=bias)
            self.W_v = nn.Linear(self.W_v.in_features, kv_hiddens, bias=bias)

    def _rotate(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Queries or keys (batch, heads, length, head_dim) at positions ``offset, offset + 1, ...``
        with their position information in them: none here; :class:`RotaryAttention` rotates."""
        return x

    def _bias(self, n_q: int, n_k: int, q: torch.Tensor) -> torch.Tensor | None:
        """A (1, heads, queries, keys) term added to the scores: none here; :class:`ALiBiAttention`'s penalty."""
        return None

    def project_kv(self, keys: torch.Tensor, values: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """What a key/value cache stores for these positions: (batch, length, 2 * num_kv_heads * head_dim).

        The projected keys (with their positions ``offset, offset + 1, ...``
        applied, for :class:`RotaryAttention`) followed by the projected values.
        """
        for name, t in (("keys", keys), ("values", values)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3:
                got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must have shape (batch, length, features), got {got}")
        offset = check_int("offset", offset, minimum=0)
        k = self._rotate(transpose_qkv(self.W_k(keys), self.num_kv_heads), offset)
        return torch.cat((transpose_output(k), self.W_v(values)), dim=-1)

    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, causal: bool = False,
                need_weights: bool | None = None, kv: torch.Tensor | None = None):
        if kv is None:
            check_projection_inputs(self, queries, keys, values)
            q, k, v = self._project(queries, keys, values)
            k = self._rotate(transpose_qkv(k, self.num_kv_heads))
        else:
            if keys is not None or values is not None:
                raise ValueError("pass either keys and values or kv (their projections, from project_kv), not both")
            _check_cache(self, queries, kv)
            q, (k, v) = self.W_q(queries), kv.chunk(2, dim=-1)
            k = transpose_qkv(k, self.num_kv_heads)  # rotated already, by project_kv
        q, v = transpose_qkv(q, self.num_heads), transpose_qkv(v, self.num_kv_heads)
        b, n_q, n_k = q.shape[0], q.shape[2], k.shape[2]
        mask = heads_mask(valid_lens, attn_mask, b, self.num_heads, n_q, n_k, device=queries.device)
        q = self._rotate(q, offset=max(n_k - n_q, 0))  # the queries are the last n_q positions
        p = self.dropout if self.training else 0.0
        out, self.attention_weights = self._attend(q, k, v, mask, causal, p, wants_weights(self, need_weights),
                                                   self._bias(n_q, n_k, q))
        return self.W_o(transpose_output(out))

    def _attend(self, q, k, v, mask, causal: bool, p: float, wants: bool, bias):
        """Attention of the (batch, heads, queries, d_head) queries over (batch, kv_heads, keys, d_head) keys/values.

        Each group of ``num_heads / num_kv_heads`` consecutive query heads
        shares one key/value head. When every query of a group sees the same
        keys (no mask, or one mask per example, and at most one causal query:
        decoding), the group's queries are stacked along the query axis and
        attend to the shared keys at once, so the keys and values are never
        copied; otherwise they are repeated.
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
        return attend(q, k, v, mask, causal=causal, dropout_p=p, need_weights=wants, bias=bias)


def _check_cache(module: GroupedQueryAttention, queries, kv) -> None:
    """Queries and a cache ``kv`` as ``module`` attends over them (a clear error if not)."""
    for name, t in (("queries", queries), ("kv", kv)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must have shape (batch, length, features), got {got}")
        check_same_device(name, t, module)
    width = 2 * module.W_k.out_features
    if kv.shape[-1] != width or kv.shape[0] != queries.shape[0]:
        raise ValueError(f"kv has shape {tuple(kv.shape)}; it needs ({queries.shape[0]}, keys, {width}): "
                         f"keys and values of {module.num_kv_heads} key/value heads, as project_kv returns")
    if queries.shape[-1] != module.W_q.in_features:
        raise ValueError(f"queries have {queries.shape[-1]} features (shape {tuple(queries.shape)}) but this layer "
                         f"expects {module.W_q.in_features}")
    # Under torch.autocast the cache holds the projections in the autocast dtype (bfloat16, say) while the
    # queries arrive in float32 (a layer norm's output): the mix is what autocast is for, as W_q(queries)
    # then comes out in the autocast dtype too. Outside autocast the two must agree.
    same = queries.dtype == kv.dtype or (kv.is_floating_point() and torch.is_autocast_enabled(queries.device.type))
    if not queries.is_floating_point() or not same:
        raise ValueError(f"queries and kv need one floating-point dtype, got {queries.dtype} and {kv.dtype}")


class RotaryAttention(GroupedQueryAttention):
    """Grouped-query attention whose heads rotate their queries and keys by position (RoPE, Su et al., 2021).

    ``RotaryAttention(num_hiddens, num_heads, ..., num_kv_heads=None,
    base=10000.0)``; the head size ``num_hiddens / num_heads`` must be even.
    Query ``i`` and key ``j`` then score ``<R_i q, R_j k> = <q, R_(j-i) k>``:
    only their offset counts, at any length.
    """

    def __init__(self, num_hiddens: int, num_heads: int, *args, base=10000.0, **kwargs):
        super().__init__(num_hiddens, num_heads, *args, **kwargs)
        if self.head_dim % 2:
            raise ValueError(
                "RotaryAttention needs an even head size num_hiddens / num_heads, got "
                f"{self.head_dim}: pick num_heads so that the quotient is even"
            )
        self.rotary = RotaryEmbedding(self.head_dim, base)

    def _rotate(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        return self.rotary(x, offset=offset)


class ALiBiAttention(GroupedQueryAttention):
    """Grouped-query attention with ALiBi's penalty ``-m_h |i - j|`` on head h's scores (Press et al., 2022)."""

    def __init__(self, num_hiddens: int, num_heads: int, *args, **kwargs):
        super().__init__(num_hiddens, num_heads, *args, **kwargs)
        self.alibi = ALiBi(self.num_heads)

    def _bias(self, n_q: int, n_k: int, q: torch.Tensor) -> torch.Tensor:
        return self.alibi(n_q, n_k, dtype=q.dtype, device=q.device)
