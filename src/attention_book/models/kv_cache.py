"""Chapter 10: the key/value cache of a decoder — its size, and the time it saves per generated token.

A decoder that writes one token at a time keeps, in every layer, the keys and
values of all earlier positions (chapter 7's cache, in
:class:`~attention_book.TransformerDecoder`). Its size is

    2 (keys and values) × layers × batch × length × key/value heads × head size × bytes per number,

:func:`kv_cache_bytes`; :func:`cache_bytes` measures the tensors a decoder's
state actually holds. Sharing key/value heads between query heads
(``num_kv_heads`` below ``num_heads``: grouped-query attention, or multi-query
attention with one) divides the cache by ``num_heads / num_kv_heads``.
:func:`greedy_generate` decodes with or without the cache, and
:func:`seconds_per_token` times it.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from ..core.checks import check_int, check_positive_int
from ..core.train import evaluating
from .seq2seq import greedy

__all__ = ["kv_cache_bytes", "cache_bytes", "greedy_generate", "seconds_per_token"]


def kv_cache_bytes(num_layers: int, batch: int, length: int, num_kv_heads: int, head_dim: int,
                   dtype: torch.dtype = torch.float32) -> int:
    """Bytes of a key/value cache: ``2 · num_layers · batch · length · num_kv_heads · head_dim · itemsize``."""
    sizes = [check_int(name, value, minimum=0) for name, value in (
        ("num_layers", num_layers), ("batch", batch), ("length", length), ("num_kv_heads", num_kv_heads),
        ("head_dim", head_dim))]
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype (e.g. torch.float16), got {dtype!r}")
    total = 2 * torch.tensor([], dtype=dtype).element_size()
    for size in sizes:
        total *= size
    return total


def cache_bytes(state: dict) -> int:
    """Bytes of the tensors in a decoder state's key/value cache (``state['cache']``, one entry per layer)."""
    if not isinstance(state, dict) or "cache" not in state:
        raise ValueError("state must be a decoder state with a 'cache' entry (from init_state and forward)")
    return sum(t.numel() * t.element_size() for t in state["cache"] if isinstance(t, torch.Tensor))


def _check_decoder(decoder) -> None:
    if not (isinstance(decoder, nn.Module) and hasattr(decoder, "init_state")
            and not getattr(decoder, "cross_attention", True)):
        raise ValueError("decoder must be a decoder-only TransformerDecoder (built with cross_attention=False)")


def greedy_generate(decoder: nn.Module, prompt: torch.Tensor, steps: int, use_cache: bool = True):
    """Greedy continuation of ``prompt`` (batch, n) by ``steps`` tokens with a decoder-only model.

    :func:`~attention_book.models.seq2seq.greedy` from the decoder's empty state:
    with the cache, the prompt is run once and each new token alone after it;
    without, every step runs the decoder over the whole sequence so far.
    Returns ``(tokens, state)``: the new ids (batch, steps) and, with the cache,
    the final decoder state (``None`` without).
    """
    _check_decoder(decoder)
    with evaluating(decoder):
        tokens, state = greedy(decoder, decoder.init_state(None), prompt, steps, use_cache=use_cache)
    return tokens, state if use_cache else None


def seconds_per_token(decoder: nn.Module, prompt: torch.Tensor, steps: int, use_cache: bool = True,
                      repeats: int = 3) -> float:
    """Median over ``repeats`` runs of the wall-clock seconds per generated token of :func:`greedy_generate`.

    Timings depend on the machine and on what else runs on it: compare numbers
    measured together, as ratios.
    """
    repeats = check_positive_int("repeats", repeats)
    greedy_generate(decoder, prompt, min(steps, 2), use_cache)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        greedy_generate(decoder, prompt, steps, use_cache)
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)
