"""Positional information for attention, which on its own ignores order.

Three ways to tell attention where a token sits:

* ``PositionalEncoding`` adds the fixed sinusoidal table of Vaswani et al.
  (2017) to the input (absolute positions, nothing learned);
* ``LearnedPositionalEmbedding`` adds a trained vector per position (as in BERT
  and GPT; absolute positions, limited to ``max_len``);
* ``RotaryEmbedding`` rotates queries and keys by position-dependent angles
  (Su et al., 2021), so that a query–key score depends on the two positions
  only through their *offset* (a relative scheme). ``MultiHeadAttention(...,
  rotary=True)`` applies it inside every head.
* ``ALiBi`` adds nothing to the input either: it subtracts ``m_h · |i - j|``
  from the score of query i and key j in head h (Press et al., 2022), a
  penalty growing with the distance, steeper in some heads than in others.
  ``MultiHeadAttention(..., alibi=True)`` applies it.

``offset_rotation`` is the block-diagonal matrix that moves a row of the
sinusoidal table ``delta`` positions on: ``P[i + delta] = offset_rotation(delta, d) @ P[i]``.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from ..core.checks import check_int, check_positive_int

__all__ = [
    "encoding_columns_figure",
    "encoding_heatmap_figure",
    "positional_encoding_figure",
    "sinusoidal_table",
    "offset_rotation",
    "PositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "alibi_slopes",
    "alibi_bias",
    "ALiBi",
]


def sinusoidal_table(max_len: int, num_hiddens: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """The (max_len, num_hiddens) table P with

    P[i, 2j] = sin(i / 10000^(2j/d)),  P[i, 2j+1] = cos(i / 10000^(2j/d)).
    An odd ``num_hiddens`` is allowed (the last column is a sine).
    """
    _check_table_sizes(max_len, num_hiddens)
    pos = torch.arange(max_len, dtype=torch.float64, device=device)[:, None]
    angles = pos * _frequencies(num_hiddens, device=device)  # (max_len, ceil(d/2))
    table = torch.zeros(max_len, num_hiddens, dtype=torch.float64, device=device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : num_hiddens // 2])
    return table.to(dtype)


def _check_table_sizes(max_len: int, num_hiddens: int) -> None:
    """A table of positions needs at least one row and one column."""
    check_positive_int("max_len", max_len)
    check_positive_int("num_hiddens", num_hiddens)


def _frequencies(num_hiddens: int, base: float = 10000.0, dtype=torch.float64, device=None) -> torch.Tensor:
    """omega_j = 1 / base^(2j / num_hiddens) for j = 0 .. ceil(num_hiddens / 2) - 1."""
    return torch.pow(base, -torch.arange(0, num_hiddens, 2, dtype=dtype, device=device) / num_hiddens)


def offset_rotation(delta: float, num_hiddens: int, dtype=torch.float64) -> torch.Tensor:
    """The (num_hiddens, num_hiddens) matrix M with ``P[i + delta] = M @ P[i]`` for every i.

    ``P`` is :func:`sinusoidal_table`. M is block diagonal; block j is the 2x2
    rotation [[cos(delta w_j), sin(delta w_j)], [-sin(delta w_j), cos(delta w_j)]]
    acting on the column pair (2j, 2j + 1). It depends on ``delta`` but not on i,
    which is why a linear layer can learn to look a fixed distance away.
    """
    if num_hiddens < 2 or num_hiddens % 2:
        raise ValueError(
            f"offset_rotation needs an even num_hiddens >= 2 (sine/cosine column pairs), got {num_hiddens}"
        )
    angles = delta * _frequencies(num_hiddens)
    c, s = torch.cos(angles), torch.sin(angles)
    M = torch.zeros(num_hiddens, num_hiddens, dtype=torch.float64)
    M[0::2, 0::2] = torch.diag(c)
    M[0::2, 1::2] = torch.diag(s)
    M[1::2, 0::2] = torch.diag(-s)
    M[1::2, 1::2] = torch.diag(c)
    return M.to(dtype)


def _check_positions(name: str, X: torch.Tensor, num_hiddens: int, offset: int, max_len: int) -> None:
    if not isinstance(X, torch.Tensor) or X.dim() != 3 or X.shape[-1] != num_hiddens:
        got = tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__
        raise ValueError(f"{name} expects X of shape (batch, length, {num_hiddens}), got {got}")
    end = offset + X.shape[1]
    if offset < 0 or end > max_len:
        raise ValueError(
            f"positions {offset}..{end - 1} do not fit the positional table of max_len={max_len}; "
            f"shorten the input or build the model with a larger max_len"
        )


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to its input, then applies dropout.

    ``P`` of shape (1, max_len, num_hiddens) is a buffer: it follows
    ``.to(device)`` and is saved with the model, but is not trained.
    ``forward(X, offset=0)`` adds rows ``offset .. offset+len-1`` (``offset`` is
    used when decoding one token at a time).
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0, max_len: int = 1000):
        super().__init__()
        self.num_hiddens, self.max_len = num_hiddens, max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("P", sinusoidal_table(max_len, num_hiddens)[None], persistent=False)

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_positions("PositionalEncoding", X, self.num_hiddens, offset, self.max_len)
        end = offset + X.shape[1]
        return self.dropout(X + self.P[:, offset:end, :].to(X.dtype))


class LearnedPositionalEmbedding(nn.Module):
    """Adds a *trained* vector per position (exercise 11.6.2 in d2l), then dropout.

    Same interface as :class:`PositionalEncoding`: ``forward(X, offset=0)`` with
    ``X`` of shape (batch, length, num_hiddens). The table ``P`` is an
    ``nn.Embedding(max_len, num_hiddens)`` initialised with small random values
    (std ``init_std``); positions beyond ``max_len`` cannot be encoded, the price
    of learning one vector per position.
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0, max_len: int = 1000, init_std: float = 0.02):
        super().__init__()
        _check_table_sizes(max_len, num_hiddens)
        self.num_hiddens, self.max_len = num_hiddens, max_len
        self.P = nn.Embedding(max_len, num_hiddens)
        nn.init.normal_(self.P.weight, std=init_std)
        self.dropout = nn.Dropout(dropout)

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        _check_positions("LearnedPositionalEmbedding", X, self.num_hiddens, offset, self.max_len)
        positions = torch.arange(offset, offset + X.shape[1], device=X.device)
        return self.dropout(X + self.P(positions).to(X.dtype)[None])


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (RoPE, Su et al., 2021) for one head's queries or keys.

    ``forward(x, offset=0)`` takes ``x`` of shape (..., length, head_dim) and
    rotates each column pair (2j, 2j+1) of the row at position p by the angle
    ``p * w_j``, with the frequencies ``w_j = base^(-2j / head_dim)`` of the
    sinusoidal table. Rotations compose, so after rotating queries at position
    i and keys at position j, ``<R_i q, R_j k> = <q, R_(j-i) k>``: the score
    sees only the offset ``j - i``. Nothing is learned; no length limit.
    ``offset`` is the position of the first row (decoding with a cache).
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim < 2 or head_dim % 2:
            raise ValueError(f"RotaryEmbedding needs an even head_dim >= 2 (it rotates pairs), got {head_dim}")
        self.head_dim, self.base = head_dim, base
        self.register_buffer("inv_freq", _frequencies(head_dim, base).to(torch.float32), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] != self.head_dim:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"RotaryEmbedding expects x of shape (..., length, {self.head_dim}), got {got}")
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        n = x.shape[-2]
        positions = torch.arange(offset, offset + n, device=x.device, dtype=self.inv_freq.dtype)
        angles = positions[:, None] * self.inv_freq.to(x.device)[None, :]  # (length, head_dim / 2)
        cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rotated.flatten(-2)


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The slope ``m_h`` of each of ``num_heads`` heads in ALiBi (Press et al., 2022), float32.

    For a power of two H the slopes are ``2^(-8/H), 2^(-16/H), ..., 2^(-8)``: a
    geometric sequence, so some heads forget the past fast and others slowly.
    Other head counts take the slopes of the power of two just below, then every
    other slope of twice that power (the paper's recipe).
    """
    num_heads = check_positive_int("num_heads", num_heads)

    def powers_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    lower = 1 << (num_heads.bit_length() - 1)
    slopes = powers_of_two(lower)
    if lower < num_heads:
        slopes += powers_of_two(2 * lower)[0::2][: num_heads - lower]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: torch.Tensor, num_queries: int, num_keys: int, dtype=None, device=None) -> torch.Tensor:
    """The (heads, num_queries, num_keys) ALiBi bias ``-m_h · |i - j|`` added to the scores.

    Query ``i`` sits at position ``i + num_keys - num_queries`` when there are
    fewer queries than keys (decoding with a key/value cache, as in
    :func:`~attention_book.models.attention.causal_mask`), else at ``i``. Under a causal
    mask only keys ``j <= i`` are seen, and the bias is ``-m_h (i - j)``.
    ``dtype``/``device`` default to those of ``slopes``.
    """
    if not isinstance(slopes, torch.Tensor) or slopes.dim() != 1:
        got = tuple(slopes.shape) if isinstance(slopes, torch.Tensor) else type(slopes).__name__
        raise ValueError(f"slopes must be a 1-D tensor (one slope per head), got {got}")
    num_queries = check_int("num_queries", num_queries, minimum=0)
    num_keys = check_int("num_keys", num_keys, minimum=0)
    device = slopes.device if device is None else device
    dtype = slopes.dtype if dtype is None else dtype
    offset = max(num_keys - num_queries, 0)
    rows = torch.arange(num_queries, device=device, dtype=dtype)[:, None] + offset
    cols = torch.arange(num_keys, device=device, dtype=dtype)[None, :]
    return -slopes.to(device=device, dtype=dtype)[:, None, None] * (rows - cols).abs()


class ALiBi(nn.Module):
    """Attention with linear biases (Press et al., 2022) for ``num_heads`` heads.

    ``forward(num_queries, num_keys, dtype=None, device=None)`` returns the bias
    (1, heads, num_queries, num_keys) of :func:`alibi_bias`, to be added to the
    scaled scores before the softmax. Nothing is learned, nothing is added to
    the input, and there is no length limit: a position never seen in training
    only brings a larger distance, which the bias already penalises.
    """

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def forward(self, num_queries: int, num_keys: int, dtype=None, device=None) -> torch.Tensor:
        return alibi_bias(self.slopes, num_queries, num_keys, dtype=dtype, device=device)[None]


# --- pictures of the sinusoidal table (chapter 6) ---------------------------------------------

def _check_encoding_args(encoding_dim: int, num_steps: int) -> None:
    check_int("encoding_dim", encoding_dim, minimum=2)
    check_int("num_steps", num_steps, minimum=2)


def encoding_columns_figure(encoding_dim: int = 32, num_steps: int = 60, columns: Sequence[int] = (6, 7, 8, 9), ax=None):
    """Columns of the sinusoidal table against position: higher columns oscillate more slowly."""
    _check_encoding_args(encoding_dim, num_steps)
    bad = [c for c in columns if not 0 <= c < encoding_dim]
    if bad:
        raise ValueError(f"columns must lie in [0, {encoding_dim - 1}] for encoding_dim={encoding_dim}, got {bad}")
    from ..core.plot import ensure_style

    ensure_style()
    P = PositionalEncoding(encoding_dim, 0.0, max_len=num_steps).P[0]
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 2.6), layout="constrained")
    else:
        fig = ax.figure
    for c in columns:
        ax.plot(range(num_steps), P[:, c].numpy(), label=f"col {c} ({'sin' if c % 2 == 0 else 'cos'})")
    ax.set_xlabel("row (position)")
    ax.set_ylabel("value")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    return fig


def encoding_heatmap_figure(encoding_dim: int = 32, num_steps: int = 60):
    """The whole table P (positions down, encoding dimensions across)."""
    _check_encoding_args(encoding_dim, num_steps)
    from ..core.plot import heatmaps_figure

    P = sinusoidal_table(num_steps, encoding_dim)
    fig = heatmaps_figure(P[None, None], xlabel="column (encoding dimension)", ylabel="row (position)",
                        figsize=(4.0, 4.2), cmap="Blues", vmin=-1.0, vmax=1.0)
    return fig


def positional_encoding_figure(encoding_dim: int = 32, num_steps: int = 60):
    """Widget callback: a fast and a slow pair of columns, and the heatmap, side by side.

    The fast pair is columns 6 and 7 (0 and 1 when d < 8), the slow pair the middle columns d/2
    and d/2 + 1: their wavelength grows with d, so moving the dimension slider shows the slow
    waves in the line plot too, not only in the heatmap. Four lines at most, so the plot stays
    readable over 500 positions."""
    _check_encoding_args(encoding_dim, num_steps)
    from ..core.plot import PAGE_FIGURE_WIDTH, ensure_style

    ensure_style()
    import matplotlib.pyplot as plt

    P = sinusoidal_table(num_steps, encoding_dim)
    fig, (left, right) = plt.subplots(1, 2, figsize=(PAGE_FIGURE_WIDTH, 3.6), layout="constrained",
                                      gridspec_kw={"width_ratios": [1.4, 1]})
    fast = 6 if encoding_dim >= 8 else 0
    middle = encoding_dim // 2 - (encoding_dim // 2) % 2
    columns = sorted({c for c in (fast, fast + 1, middle, middle + 1) if c < encoding_dim})
    encoding_columns_figure(encoding_dim, num_steps, columns, ax=left)
    left.set_title("columns " + ", ".join(map(str, columns)) + " of P")
    # nearest: each of the d columns a stripe of its own (smoothing blurs them into blobs at d = 8 or 16)
    image = right.imshow(P.numpy(), cmap="Blues", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    right.grid(False)
    from matplotlib.ticker import MaxNLocator

    for axis in (left.xaxis, right.xaxis, right.yaxis):  # positions and columns are whole numbers
        axis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    right.set_xlabel("column (encoding dimension)")
    right.set_ylabel("row (position)")
    right.set_title(f"P: {num_steps} positions × {encoding_dim} dimensions")
    fig.colorbar(image, ax=right, shrink=0.8)
    return fig
