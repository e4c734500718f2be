"""Positional information for attention, which on its own ignores order.

``PositionalEncoding`` is the fixed sinusoidal table of Vaswani et al. (2017).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["sinusoidal_table", "PositionalEncoding"]


def sinusoidal_table(max_len: int, num_hiddens: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """The (max_len, num_hiddens) table P with

    P[i, 2j] = sin(i / 10000^(2j/d)),  P[i, 2j+1] = cos(i / 10000^(2j/d)).
    An odd ``num_hiddens`` is allowed (the last column is a sine).
    """
    if max_len < 1 or num_hiddens < 1:
        raise ValueError(f"max_len and num_hiddens must be positive, got {max_len} and {num_hiddens}")
    pos = torch.arange(max_len, dtype=torch.float64, device=device)[:, None]
    freqs = torch.pow(10000.0, -torch.arange(0, num_hiddens, 2, dtype=torch.float64, device=device) / num_hiddens)
    angles = pos * freqs  # (max_len, ceil(d/2))
    table = torch.zeros(max_len, num_hiddens, dtype=torch.float64, device=device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : num_hiddens // 2])
    return table.to(dtype)


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
        if X.dim() != 3 or X.shape[-1] != self.num_hiddens:
            raise ValueError(
                f"PositionalEncoding expects (batch, length, {self.num_hiddens}), got shape {tuple(X.shape)}"
            )
        end = offset + X.shape[1]
        if offset < 0 or end > self.max_len:
            raise ValueError(
                f"positions {offset}..{end - 1} do not fit the positional table of max_len={self.max_len}; "
                f"shorten the input or build the model with a larger max_len"
            )
        return self.dropout(X + self.P[:, offset:end, :].to(X.dtype))
