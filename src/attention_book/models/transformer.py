"""The Transformer (Vaswani et al., 2017), built from ``ab.MultiHeadAttention``.

Building blocks (shapes are batch-first: (batch, length, num_hiddens)):

* :class:`PositionWiseFFN` — the same two-layer MLP applied at every position.
* :class:`AddNorm` — residual connection + layer norm. ``norm_first=False`` is
  the paper's *post-norm* ``LN(X + dropout(f(X)))``; ``norm_first=True`` the
  *pre-norm* ``X + dropout(f(LN(X)))`` used by ViT and GPT-style models.
* :class:`TransformerEncoderBlock` — self-attention, then the FFN, each wrapped
  in an :class:`AddNorm`. ``causal=True`` turns it into a decoder-only (GPT)
  block: every position sees only itself and earlier positions.
* :class:`TransformerDecoderBlock` — masked (causal) self-attention,
  encoder–decoder (cross-)attention, FFN. ``cross_attention=False`` drops the
  middle sublayer (a decoder-only block that supports the key/value cache).
* :class:`TransformerEncoder` / :class:`TransformerDecoder` — token embedding
  × √d + sinusoidal :class:`~attention_book.models.positional.PositionalEncoding`,
  a stack of blocks, and (decoder) a dense layer to the vocabulary. Their
  attention maps come from ``ab.record_attention(model)``; outside it every
  layer runs the fused kernel, in training and in eval mode.

Masks follow ``attention.py``: ``valid_lens`` is ``None``, lengths (batch,) or
(batch, queries), or a boolean mask with ``True`` = may attend.

The decoder follows the interface of :mod:`attention_book.models.seq2seq`
(``init_state`` / ``forward(X, state) -> (logits, state)``), so its greedy and
beam search decode a Transformer too. Its state carries a *key/value cache*:
for each block the projected keys and values of its self-attention at all
earlier positions (``num_kv_heads`` heads of them), so a new token is pushed
through the stack alone instead of re-running the whole prefix at every step.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from .attention import MultiHeadAttention, record_attention
from .attention_variants import GroupedQueryAttention
from ..core.checks import (check_dropout, check_heads, check_int, check_positive_int, check_same_device, check_tensor_values,
                     check_token_ids)
from .positional import PositionalEncoding
from ..core.train import capped_batches, evaluating

__all__ = [
    "PositionWiseFFN",
    "AddNorm",
    "TransformerEncoderBlock",
    "TransformerDecoderBlock",
    "TransformerEncoder",
    "TransformerDecoder",
    "make_transformer",
    "train_transformer",
    "greedy_without_cache",
    "translation_attention",
    "translation_attention_figure",
    "warmup_cosine_factor",
    "warmup_cosine_schedule",
    "schedule_figure",
    "warmup_experiment",
    "warmup_experiment_figure",
    "reverse_dataset",
    "reverse_loaders",
    "SequencePredictor",
    "reversal_attention_figure",
    "reversal_attention_profile",
    "AdditiveSelfAttention",
    "token_loss",
    "token_accuracy",
]

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def _check_sizes(num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float) -> None:
    check_heads(num_hiddens, num_heads)
    check_positive_int("ffn_num_hiddens", ffn_num_hiddens)
    check_dropout(dropout)


class PositionWiseFFN(nn.Module):
    """Two dense layers with an activation between, applied to every position alike.

    (batch, length, num_inputs) -> (batch, length, ffn_num_outputs).
    ``num_inputs`` defaults to ``ffn_num_outputs`` (in a Transformer both are
    ``num_hiddens``); ``activation`` is ``'relu'`` (the paper) or ``'gelu'``;
    ``dropout`` (default 0, as in the paper's FFN) acts on the hidden layer.
    Because the same weights act on every position independently, identical
    input rows give identical output rows.
    """

    def __init__(self, ffn_num_hiddens: int, ffn_num_outputs: int, num_inputs: int | None = None,
                 activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.dense1 = nn.Linear(num_inputs or ffn_num_outputs, ffn_num_hiddens)
        self.activation = _ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.dense2 = nn.Linear(ffn_num_hiddens, ffn_num_outputs)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if X.shape[-1] != self.dense1.in_features:
            raise ValueError(
                f"X has {X.shape[-1]} features (shape {tuple(X.shape)}) but this FFN expects "
                f"{self.dense1.in_features} on its last axis"
            )
        return self.dense2(self.dropout(self.activation(self.dense1(X))))


class AddNorm(nn.Module):
    """Residual connection and layer normalisation around a sublayer ``f``.

    * post-norm (``norm_first=False``, the paper): ``LN(X + dropout(f(X)))``;
    * pre-norm (``norm_first=True``): ``X + dropout(f(LN(X)))``.

    ``forward(X, Y)`` takes either the sublayer's output ``Y = f(X)`` (post-norm
    only, as in d2l) or the sublayer itself as a callable ``f``; with a callable
    the same call works for both placements::

        X = addnorm(X, lambda Z: attention(Z, Z, Z))
    """

    def __init__(self, norm_shape, dropout: float = 0.0, norm_first: bool = False, eps: float = 1e-5):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.ln = nn.LayerNorm(norm_shape, eps=eps)
        self.norm_first = bool(norm_first)

    def forward(self, X: torch.Tensor, Y: torch.Tensor | Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if callable(Y) and not isinstance(Y, torch.Tensor):
            if self.norm_first:
                return X + self.dropout(Y(self.ln(X)))
            Y = Y(X)
        elif self.norm_first:
            raise ValueError(
                "a pre-norm AddNorm (norm_first=True) must normalise X before the sublayer runs: "
                "pass the sublayer as a callable, addnorm(X, f), not its output"
            )
        if Y.shape != X.shape:
            raise ValueError(
                f"the residual connection needs the sublayer output to have X's shape {tuple(X.shape)}, "
                f"got {tuple(Y.shape)}"
            )
        return self.ln(X + self.dropout(Y))


class TransformerEncoderBlock(nn.Module):
    """Self-attention and a position-wise FFN, each inside an :class:`AddNorm`.

    ``TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout,
    use_bias=False, *, norm_first=False, causal=False, activation='relu',
    attention=None)``.

    ``forward(X, valid_lens=None, *, attn_mask=None, causal=None)`` maps
    (batch, length, num_hiddens) to the same shape. ``valid_lens`` masks keys
    (lengths or a boolean mask, ``True`` = may attend); ``attn_mask`` is a
    further boolean (length, length) or (batch, length, length) mask;
    ``causal`` (default: the constructor's) lets position ``t`` see positions
    ``<= t`` only — a causal encoder block is a decoder-only (GPT) block.
    ``self.attention`` is the :class:`~attention_book.MultiHeadAttention`
    (or the module passed as ``attention``, which must accept the same call,
    e.g. :class:`AdditiveSelfAttention`); its ``attention_weights``
    (batch, heads, length, length) are kept only under ``ab.record_attention`` or
    ``ab.keep_attention_weights()``.
    """

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float = 0.0,
                 use_bias: bool = False, *, norm_first: bool = False, causal: bool = False,
                 activation: str = "relu", attention: nn.Module | None = None):
        super().__init__()
        _check_sizes(num_hiddens, ffn_num_hiddens, num_heads, dropout)
        self.num_hiddens, self.causal = num_hiddens, bool(causal)
        self.attention = attention if attention is not None else MultiHeadAttention(num_hiddens, num_heads, dropout,
                                                                                     bias=use_bias)
        self.addnorm1 = AddNorm(num_hiddens, dropout, norm_first)
        self.ffn = PositionWiseFFN(ffn_num_hiddens, num_hiddens, activation=activation)
        self.addnorm2 = AddNorm(num_hiddens, dropout, norm_first)

    @property
    def attention_weights(self) -> torch.Tensor | None:
        return self.attention.attention_weights

    def forward(self, X: torch.Tensor, valid_lens=None, *, attn_mask=None, causal: bool | None = None) -> torch.Tensor:
        _check_hidden("X", X, self.num_hiddens)
        causal = self.causal if causal is None else causal
        Y = self.addnorm1(X, lambda Z: self.attention(Z, Z, Z, valid_lens, attn_mask=attn_mask, causal=causal))
        return self.addnorm2(Y, self.ffn)


class TransformerDecoderBlock(nn.Module):
    """Masked self-attention, encoder–decoder attention and an FFN, each inside an :class:`AddNorm`.

    ``TransformerDecoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout,
    i=0, use_bias=False, *, norm_first=False, cross_attention=True,
    activation='relu', num_kv_heads=None)``; ``i`` is the block's index in its
    stack (it picks the block's entry in a key/value cache); ``num_kv_heads``
    key/value heads are shared by the query heads of both attention sublayers
    (default: one per head; see :class:`~attention_book.GroupedQueryAttention`).

    ``forward(X, enc_outputs=None, dec_valid_lens=None, enc_valid_lens=None, *,
    cache=None)`` returns (batch, T, num_hiddens) for X of shape
    (batch, T, num_hiddens):

    * self-attention is always causal; ``dec_valid_lens`` may mask further
      (e.g. ``<pad>`` keys: lengths or a boolean (batch, T, keys) mask);
    * cross-attention (queries from the decoder, keys and values
      ``enc_outputs`` (batch, S, num_hiddens)) masks the source with
      ``enc_valid_lens`` (lengths (batch,) or a boolean (batch, T, S) mask).
      With ``cross_attention=False`` there is no such sublayer and
      ``enc_outputs`` must be ``None`` (a decoder-only block);
    * ``cache`` is a list with one entry per block (``None`` at first). If
      given, ``cache[i]`` holds the self-attention's projected keys and values
      of all earlier positions, (batch, earlier positions, 2 * num_kv_heads *
      head_dim) as ``GroupedQueryAttention.project_kv`` makes them; those of ``X``
      are appended to it, and the queries of ``X`` attend over the whole. ``X``
      then holds only the newest position(s), whose queries sit at the end of
      the sequence.

    ``self.attention1`` (self) and ``self.attention2`` (cross; ``None`` without
    cross-attention) are :class:`~attention_book.GroupedQueryAttention` modules
    (multi-head attention that can attend over a key/value cache), called in
    that order.
    """

    def __init__(self, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float = 0.0, i: int = 0,
                 use_bias: bool = False, *, norm_first: bool = False, cross_attention: bool = True,
                 activation: str = "relu", num_kv_heads: int | None = None):
        super().__init__()
        _check_sizes(num_hiddens, ffn_num_hiddens, num_heads, dropout)
        self.i, self.num_hiddens = i, num_hiddens
        self.attention1 = GroupedQueryAttention(num_hiddens, num_heads, dropout, bias=use_bias,
                                                num_kv_heads=num_kv_heads)
        self.attention1.role = "self"  # its keys are the cache plus the new tokens: not the queries' tensor
        self.addnorm1 = AddNorm(num_hiddens, dropout, norm_first)
        self.attention2 = (GroupedQueryAttention(num_hiddens, num_heads, dropout, bias=use_bias,
                                                 num_kv_heads=num_kv_heads) if cross_attention else None)
        self.addnorm2 = AddNorm(num_hiddens, dropout, norm_first) if cross_attention else None
        self.ffn = PositionWiseFFN(ffn_num_hiddens, num_hiddens, activation=activation)
        self.addnorm3 = AddNorm(num_hiddens, dropout, norm_first)

    def forward(self, X: torch.Tensor, enc_outputs: torch.Tensor | None = None, dec_valid_lens=None,
                enc_valid_lens=None, *, cache: list | None = None) -> torch.Tensor:
        _check_hidden("X", X, self.num_hiddens)
        if self.attention2 is None and enc_outputs is not None:
            raise ValueError("this block was built with cross_attention=False, so enc_outputs must be None")
        if self.attention2 is not None:
            if enc_outputs is None:
                raise ValueError("this block has cross-attention and needs enc_outputs (batch, S, num_hiddens)")
            _check_hidden("enc_outputs", enc_outputs, self.num_hiddens)
            if enc_outputs.shape[0] != X.shape[0]:
                raise ValueError(
                    f"enc_outputs {tuple(enc_outputs.shape)} and X {tuple(X.shape)} need the same batch size"
                )
        if cache is not None and not 0 <= self.i < len(cache):
            raise ValueError(f"cache has {len(cache)} entries but this is block i={self.i}")

        def self_attend(Z):
            if cache is None:
                return self.attention1(Z, Z, Z, dec_valid_lens, causal=True)
            past = cache[self.i]
            new = self.attention1.project_kv(Z, Z, offset=0 if past is None else past.shape[1])
            kv = new if past is None else torch.cat((past, new), dim=1)
            cache[self.i] = kv
            return self.attention1(Z, None, None, dec_valid_lens, causal=True, kv=kv)

        X = self.addnorm1(X, self_attend)
        if self.attention2 is not None:
            X = self.addnorm2(X, lambda Z: self.attention2(Z, enc_outputs, enc_outputs, enc_valid_lens))
        return self.addnorm3(X, self.ffn)


def _check_hidden(name: str, X, num_hiddens: int) -> None:
    if not isinstance(X, torch.Tensor) or X.dim() != 3 or X.shape[-1] != num_hiddens:
        got = tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__
        raise ValueError(f"{name} must have shape (batch, length, num_hiddens={num_hiddens}), got {got}")


def _check_ids(name: str, X, vocab_size: int, max_len: int, offset: int = 0) -> None:
    """Token ids: a (batch, length) integer tensor, each id < vocab_size, positions within the table."""
    check_token_ids(name, X)
    if offset + X.shape[1] > max_len:
        raise ValueError(
            f"{name} reaches position {offset + X.shape[1] - 1} but the positional table has max_len={max_len} "
            f"rows (positions 0..{max_len - 1}); shorten the sequence or build the model with max_len >= "
            f"{offset + X.shape[1]}"
        )
    check_tensor_values(name, X, 0, vocab_size - 1,
                        what=f"the embedding has vocab_size={vocab_size}; build the model with the vocabulary "
                             "size of the data it reads")


class _TokenStack(nn.Module):
    """What encoder and decoder share: checks, token embedding × √d + positions, a final norm if pre-norm."""

    def __init__(self, vocab_size: int, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, num_blks: int,
                 dropout: float, max_len: int, norm_first: bool):
        super().__init__()
        for name, size in (("vocab_size", vocab_size), ("num_blks", num_blks), ("max_len", max_len)):
            check_positive_int(name, size)
        _check_sizes(num_hiddens, ffn_num_hiddens, num_heads, dropout)
        self.vocab_size, self.num_hiddens, self.max_len, self.num_blks = vocab_size, num_hiddens, max_len, num_blks
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        self.pos_encoding = PositionalEncoding(num_hiddens, dropout, max_len)
        self.final_norm = nn.LayerNorm(num_hiddens) if norm_first else None

    def embed(self, name: str, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """Checked token ids (batch, T) -> embedding · √num_hiddens + the positions offset .. offset+T-1."""
        check_same_device(name, X, self)
        _check_ids(name, X, self.vocab_size, self.max_len, offset)
        return self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens), offset=offset)

    def finish(self, X: torch.Tensor) -> torch.Tensor:
        return X if self.final_norm is None else self.final_norm(X)


class TransformerEncoder(_TokenStack):
    """Embedding × √num_hiddens + sinusoidal positions, then ``num_blks`` encoder blocks.

    ``TransformerEncoder(vocab_size, num_hiddens, ffn_num_hiddens, num_heads,
    num_blks, dropout, use_bias=False, *, max_len=1000, norm_first=False,
    causal=False, attention=None)``. ``forward(X, valid_lens=None)`` maps token
    ids (batch, num_steps) to (batch, num_steps, num_hiddens). As in d2l, the
    embedding keeps ``nn.Embedding``'s default N(0, 1) entries and is multiplied
    by √num_hiddens, so at the start its entries (std √num_hiddens) are far
    larger than the positional encoding's, which lie in [-1, 1]: the token
    dominates and the positions are a small addition. (In the paper the
    embedding is shared with the output layer, and the authors' code starts it
    with entries of std 1/√num_hiddens, so the factor brings it up to the
    positional encoding's scale; :class:`SequencePredictor` starts its
    embedding that way.) With ``norm_first=True`` a final layer norm follows
    the stack (a pre-norm stack ends un-normalised otherwise). ``attention``
    (a function ``() -> module``) swaps the attention sublayer of every block
    (see :class:`TransformerEncoderBlock`).

    ``attention_weights`` is a list with one (batch, heads, num_steps, num_steps)
    tensor per block after a forward pass under ``ab.keep_attention_weights()``
    (``None`` entries otherwise); ``ab.record_attention(model)`` is the simpler way.
    """

    def __init__(self, vocab_size: int, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, num_blks: int,
                 dropout: float = 0.0, use_bias: bool = False, *, max_len: int = 1000, norm_first: bool = False,
                 causal: bool = False, attention: Callable[[], nn.Module] | None = None):
        super().__init__(vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout, max_len, norm_first)
        self.blks = nn.ModuleList(
            TransformerEncoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, use_bias,
                                    norm_first=norm_first, causal=causal,
                                    attention=None if attention is None else attention())
            for _ in range(num_blks)
        )
        self.attention_weights: list[torch.Tensor | None] = [None] * num_blks

    def forward(self, X: torch.Tensor, valid_lens=None) -> torch.Tensor:
        X = self.embed("X (source tokens)", X)
        for i, blk in enumerate(self.blks):
            X = blk(X, valid_lens)
            self.attention_weights[i] = blk.attention.attention_weights
        return self.finish(X)


class TransformerDecoder(_TokenStack):
    """Embedding × √num_hiddens + positions, ``num_blks`` decoder blocks, a dense layer to the vocabulary.

    ``TransformerDecoder(vocab_size, num_hiddens, ffn_num_hiddens, num_heads,
    num_blks, dropout, use_bias=False, *, max_len=1000, norm_first=False,
    cross_attention=True, num_kv_heads=None)``; ``num_kv_heads`` key/value heads
    per attention sublayer (``None``: one per head, 1: multi-query attention).

    Interface of :mod:`attention_book.models.seq2seq`:

    * ``init_state(enc_outputs, enc_valid_lens=None)`` returns the state
      ``{'enc_outputs', 'enc_valid_lens', 'cache'}``; ``cache`` has one entry per
      block, ``None`` until the first call, then the block's keys and values so
      far, (batch, positions, 2 * num_kv_heads * head_dim). (Without
      cross-attention: ``init_state(None)``, a decoder-only language model.)
    * ``forward(X, state) -> (logits, state)``: ``X`` (batch, T) holds the
      tokens at the positions after those already in the cache (all of them,
      teacher-forced, in training; the newest one when decoding step by step);
      logits are (batch, T, vocab_size). The state returned has the cache
      extended by these T positions.

    ``attention_weights`` is ``[self-attention per block, cross-attention per
    block]``, each entry (batch, heads, T, keys), filled under
    ``ab.keep_attention_weights()``; ``ab.record_attention(model)`` is the simpler way.
    """

    def __init__(self, vocab_size: int, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, num_blks: int,
                 dropout: float = 0.0, use_bias: bool = False, *, max_len: int = 1000, norm_first: bool = False,
                 cross_attention: bool = True, num_kv_heads: int | None = None):
        super().__init__(vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout, max_len, norm_first)
        self.cross_attention = bool(cross_attention)
        self.blks = nn.ModuleList(
            TransformerDecoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, i, use_bias,
                                    norm_first=norm_first, cross_attention=cross_attention, num_kv_heads=num_kv_heads)
            for i in range(num_blks)
        )
        self.dense = nn.Linear(num_hiddens, vocab_size)
        self._attention_weights: list[list[torch.Tensor | None]] = [[None] * num_blks, [None] * num_blks]

    def init_state(self, enc_outputs: torch.Tensor | None, enc_valid_lens=None) -> dict:
        return {"enc_outputs": enc_outputs, "enc_valid_lens": enc_valid_lens, "cache": [None] * self.num_blks}

    @staticmethod
    def cached_steps(state: dict) -> int:
        """How many positions the key/value cache of ``state`` already holds."""
        first = state["cache"][0]
        return 0 if first is None else first.shape[1]

    def forward(self, X: torch.Tensor, state: dict):
        if not isinstance(state, dict) or len(state.get("cache", ())) != self.num_blks:
            raise ValueError(f"state must come from init_state (a dict with a cache of {self.num_blks} entries)")
        offset = self.cached_steps(state)
        X = self.embed("X (target tokens)", X, offset)
        cache = list(state["cache"])
        for i, blk in enumerate(self.blks):
            X = blk(X, state["enc_outputs"], None, state["enc_valid_lens"], cache=cache)
            self._attention_weights[0][i] = blk.attention1.attention_weights
            self._attention_weights[1][i] = None if blk.attention2 is None else blk.attention2.attention_weights
        return self.dense(self.finish(X)), {**state, "cache": cache}

    @property
    def attention_weights(self) -> list[list[torch.Tensor | None]]:
        return self._attention_weights


# --- the encoder–decoder model for translation ----------------------------------------------

def make_transformer(src_vocab_size: int, tgt_vocab_size: int, num_hiddens: int = 256, ffn_num_hiddens: int = 64,
                     num_heads: int = 4, num_blks: int = 2, dropout: float = 0.2, max_len: int = 1000,
                     norm_first: bool = False) -> nn.Module:
    """d2l's translation Transformer (defaults: its sizes, 2 blocks, 4 heads, 256 hidden, FFN 64, dropout 0.2).

    Returns a :class:`attention_book.models.seq2seq.EncoderDecoder`:
    ``model(src, tgt_input, src_valid_len)`` gives logits (batch, T, tgt_vocab_size),
    and ``ab.greedy_search`` / ``ab.beam_search`` / ``ab.translate`` decode with it
    (step by step, through the decoder's key/value cache).
    """
    from .seq2seq import EncoderDecoder

    encoder = TransformerEncoder(src_vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout,
                                 max_len=max_len, norm_first=norm_first)
    decoder = TransformerDecoder(tgt_vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks, dropout,
                                 max_len=max_len, norm_first=norm_first)
    return EncoderDecoder(encoder, decoder)


def train_transformer(data, num_hiddens: int = 256, ffn_num_hiddens: int = 64, num_heads: int = 4,
                      num_blks: int = 2, dropout: float = 0.2, lr: float = 0.001, epochs: int = 30,
                      clip_grad: float = 1.0, norm_first: bool = False, progress: bool = True,
                      desc: str = "Transformer", seed: int | None = None):
    """Build a :func:`make_transformer` model for ``data`` and train it with :func:`attention_book.fit`.

    d2l's recipe: Adam at a constant ``lr``, gradient norm clipped at
    ``clip_grad``, the masked cross-entropy of ``ab.translation_loss``, and the
    validation loss recorded after every epoch (``history.metrics['val loss']``).
    ``seed`` seeds the initial weights, the dropout masks and the batch order;
    ``None`` (the default) uses the book's seed (``ab.book_seed()``). Returns
    ``(model, history)``.
    """
    from ..core.config import seed_everything
    from .seq2seq import translation_loss, validation_loss
    from ..data.text import PAD
    from ..core.train import fit

    seed = seed_everything(seed)  # None: the book's seed
    model = make_transformer(len(data.src_vocab), len(data.tgt_vocab), num_hiddens, ffn_num_hiddens, num_heads,
                             num_blks, dropout, norm_first=norm_first)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history = fit(model, data.train_loader(seed=seed), translation_loss(data.tgt_vocab[PAD]), epochs=epochs,
                  optimizer=optimizer, clip_grad=clip_grad,
                  evaluate=lambda m: {"val loss": validation_loss(m, data)}, progress=progress, desc=desc)
    return model, history


@torch.no_grad()
def greedy_without_cache(model: nn.Module, src: torch.Tensor, src_valid_len, bos_id: int, eos_id: int,
                         max_steps: int) -> list[list[int]]:
    """Greedy decoding that re-runs the decoder on the *whole* prefix at every step (no cache).

    The slow reference for ``ab.greedy_search``, which feeds one token per step
    and keeps the earlier positions in the decoder's key/value cache. Both must
    produce the same tokens. Returns the ids of each example without ``<eos>``.
    """
    max_steps = check_positive_int("max_steps", max_steps)
    with evaluating(model):
        enc_outputs = model.encoder(src, src_valid_len)
        prefix = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(max_steps):
            logits, _ = model.decoder(prefix, model.decoder.init_state(enc_outputs, src_valid_len))
            prefix = torch.cat((prefix, logits[:, -1:].argmax(dim=-1)), dim=1)
            if bool((prefix[:, 1:] == eos_id).any(dim=1).all()):
                break
    out = []
    for row in prefix[:, 1:].tolist():
        out.append(row[: row.index(eos_id)] if eos_id in row else row)
    return out


def translation_attention(model: nn.Module, data, sentence: str) -> dict:
    """Translate ``sentence`` greedily and collect every attention map of the model for it.

    Returns a dict with

    * ``'source'``: the source tokens (without padding), ``'output'``: the
      predicted tokens, ``'queries'``: the decoder inputs ``<bos>`` + output (the
      query in row t predicts output token t, or ``<eos>`` in the last row);
    * ``'encoder'`` (layers, heads, S, S), ``'decoder_self'`` (layers, heads, T, T)
      and ``'cross'`` (layers, heads, T, S) attention weights, S the source length
      with ``<eos>``, T = len(output) + 1.

    The maps come from one teacher-forced pass over ``<bos>`` + output in eval
    mode, which computes the same numbers as the step-by-step decoding with the
    cache (a test checks the two agree).
    """
    from .seq2seq import translate
    from ..data.text import BOS

    (result,) = translate(model, data, [sentence])
    dev = next(model.parameters()).device
    src, _, src_valid_len, _ = data.build([sentence])
    src, src_valid_len = src.to(dev), src_valid_len.to(dev)
    bos = data.tgt_vocab[BOS]
    tgt = torch.tensor([[bos] + data.tgt_vocab[result.tokens]], dtype=torch.long, device=dev)
    S, T = int(src_valid_len[0]), tgt.shape[1]
    with evaluating(model), torch.no_grad(), record_attention(model) as maps:
        enc_outputs = model.encoder(src, src_valid_len)
        model.decoder(tgt, model.decoder.init_state(enc_outputs, src_valid_len))
    enc = maps.stacked("self", under="encoder")[:, 0, :, :S, :S]
    dec_self = maps.stacked("self", under="decoder")[:, 0]
    cross = maps.stacked("cross", under="decoder")[:, 0, :, :, :S]
    return {
        "source": data.src_vocab.to_tokens(src[0, :S].tolist()),
        "output": list(result.tokens),
        "queries": [BOS] + list(result.tokens),
        "encoder": enc.cpu(),
        "decoder_self": dec_self.cpu(),
        "cross": cross.cpu()[:, :, :T],
    }


_MAP_KINDS = {
    "encoder": ("encoder self-attention", "source", "source", "key (source token)", "query (source token)"),
    "decoder_self": ("decoder self-attention", "queries", "queries", "key (decoder input)", "query (decoder input)"),
    "cross": ("encoder–decoder attention", "queries", "source", "key (source token)", "query (decoder input)"),
}


def translation_attention_figure(maps: dict, kind: str = "encoder", layer: int | None = None,
                                 heads_per_row: int = 2, figsize=None):
    """Heatmaps of one kind of attention from :func:`translation_attention`, labelled with tokens.

    ``kind`` is ``'encoder'``, ``'decoder_self'`` or ``'cross'``. One plot per
    head of every layer (or only ``layer``, counted from 1), ``heads_per_row``
    plots side by side, layer after layer; in each plot the rows are queries and
    the columns keys. Two plots per row keep the token labels readable in the
    book's column (a page about 688 pixels wide).
    """
    if kind not in _MAP_KINDS:
        raise ValueError(f"kind must be one of {sorted(_MAP_KINDS)}, got {kind!r}")
    from ..core.plot import show_heatmaps

    title, q_name, k_name, xlabel, ylabel = _MAP_KINDS[kind]
    weights = maps[kind]  # (layers, heads, queries, keys)
    num_layers, num_heads = weights.shape[:2]
    heads_per_row = check_positive_int("heads_per_row", heads_per_row)
    if num_heads % heads_per_row:
        raise ValueError(f"heads_per_row must divide the number of heads ({num_heads}), got {heads_per_row}")
    layers = list(range(num_layers))
    if layer is not None:
        if not 1 <= layer <= num_layers:
            raise ValueError(f"layer must lie in 1..{num_layers}, got {layer}")
        layers = [layer - 1]
    panels = weights[layers].reshape(-1, heads_per_row, *weights.shape[2:])
    if figsize is None:
        figsize = (1.2 + 2.7 * heads_per_row, 0.9 + 2.5 * panels.shape[0])
    fig = show_heatmaps(panels, xlabel=xlabel, ylabel=ylabel,
                        titles=[f"layer {i + 1}, head {h + 1}" for i in layers for h in range(num_heads)],
                        figsize=figsize, xticklabels=maps[k_name], yticklabels=maps[q_name], vmin=0.0, vmax=1.0)
    source, output = " ".join(maps["source"][:-1]), " ".join(maps["output"])
    fig.suptitle(f"{title}\n{source} → {output}")
    return fig


# --- learning-rate schedule -------------------------------------------------------------------

def warmup_cosine_factor(step: int, warmup: int, max_steps: int) -> float:
    """Multiplier of the base learning rate at optimisation step ``step``.

    Linear warm-up from 0 to 1 over the first ``warmup`` steps, times a cosine
    decay from 1 (step 0) to 0 (step ``max_steps``):

        factor(t) = min(1, t / warmup) · ½ (1 + cos(π t / max_steps)),

    with t clipped to ``[0, max_steps]`` (``warmup=0`` means no warm-up).
    """
    max_steps = check_positive_int("max_steps", max_steps)
    warmup = check_int("warmup", warmup, minimum=0)
    if warmup > max_steps:
        raise ValueError(f"need max_steps >= 1 and 0 <= warmup <= max_steps, got warmup={warmup}, "
                         f"max_steps={max_steps}")
    t = min(max(step, 0), max_steps)
    factor = 0.5 * (1.0 + math.cos(math.pi * t / max_steps))
    if warmup > 0 and t < warmup:
        factor *= t / warmup
    return factor


def warmup_cosine_schedule(optimizer: torch.optim.Optimizer, warmup: int,
                           max_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` scaling every parameter group's learning rate by :func:`warmup_cosine_factor`.

    Step it once per optimisation step (``ab.fit(..., scheduler=...)`` does).
    """
    warmup_cosine_factor(0, warmup, max_steps)  # validates the arguments
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_cosine_factor(step, warmup, max_steps))


def schedule_figure(warmup: int = 50, max_steps: int = 500, base_lr: float = 5e-4, figsize=(5.5, 3.0)):
    """The learning rate a ``warmup_cosine_schedule`` gives at every step, read off a real scheduler."""
    from ..core.plot import _ensure_style
    import matplotlib.pyplot as plt

    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=base_lr)
    sched = warmup_cosine_schedule(opt, warmup, max_steps)
    lrs = []
    for _ in range(max_steps + 1):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    _ensure_style()
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    ax.plot(range(max_steps + 1), lrs)
    if warmup:
        ax.axvline(warmup, color="0.6", linestyle="--", linewidth=1)
        ax.annotate("end of warm-up", (warmup, base_lr), xytext=(4, -12), textcoords="offset points", fontsize=8)
    ax.set_ylim(0.0, 1.1 * base_lr)  # the same scale for every warm-up length
    ax.set_xlabel("optimisation step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"warm-up {warmup} steps, cosine decay to step {max_steps}")
    return fig


# --- sequence reversal: an encoder-only predictor ---------------------------------------------

def reverse_dataset(num_samples: int, seq_len: int = 16, num_classes: int = 10, seed: int | None = None):
    """``TensorDataset`` of random digit sequences (num_samples, seq_len) and their reversals.

    ``seed`` fixes the digits; ``None`` (the default) uses the book's seed.
    """
    from torch.utils.data import TensorDataset

    from ..core.config import resolve_seed

    num_samples = check_positive_int("num_samples", num_samples)
    seq_len = check_positive_int("seq_len", seq_len)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    gen = torch.Generator().manual_seed(resolve_seed(seed))
    X = torch.randint(num_classes, (num_samples, seq_len), generator=gen)
    return TensorDataset(X, X.flip(1))


def reverse_loaders(batch_size: int = 128, num_train: int = 50000, num_val: int = 1000, num_test: int = 10000,
                    seq_len: int = 16, num_classes: int = 10, seed: int | None = None):
    """Train (shuffled, full batches only), validation and test loaders for the reversal task.

    The three sets are drawn with ``seed``, ``seed + 1`` and ``seed + 2`` (and the
    batch order with ``seed``); ``None`` (the default) means the book's seed.
    """
    from torch.utils.data import DataLoader

    from ..core.config import resolve_seed

    batch_size = check_positive_int("batch_size", batch_size)
    seed = resolve_seed(seed)
    train = reverse_dataset(num_train, seq_len, num_classes, seed)
    val = reverse_dataset(num_val, seq_len, num_classes, seed + 1)
    test = reverse_dataset(num_test, seq_len, num_classes, seed + 2)
    gen = torch.Generator().manual_seed(seed)
    return (DataLoader(train, batch_size=batch_size, shuffle=True, drop_last=True, generator=gen),
            DataLoader(val, batch_size=batch_size), DataLoader(test, batch_size=batch_size))


class SequencePredictor(nn.Module):
    """Encoder-only Transformer that predicts one class per input position.

    ``SequencePredictor(num_classes, num_hiddens=32, num_heads=1, num_blks=1,
    ffn_num_hiddens=None, dropout=0.0, max_len=64, scoring='dot')``: a
    :class:`TransformerEncoder` over the input tokens (an embedding is the same
    as a one-hot vector times a dense layer), then a small output network
    (dense, layer norm, ReLU, dense) to ``num_classes`` scores at every position.
    ``ffn_num_hiddens`` defaults to ``2 * num_hiddens``. The embedding starts
    with entries of std ``1/sqrt(num_hiddens)`` so that, once scaled by
    ``sqrt(num_hiddens)``, it is as large as the positional encoding, which
    this task needs to see. ``scoring='additive'``
    swaps the scaled dot-product attention for :class:`AdditiveSelfAttention`.
    ``forward(X)``: (batch, length) ids -> (batch, length, num_classes).
    """

    def __init__(self, num_classes: int, num_hiddens: int = 32, num_heads: int = 1, num_blks: int = 1,
                 ffn_num_hiddens: int | None = None, dropout: float = 0.0, max_len: int = 64, scoring: str = "dot"):
        super().__init__()
        if scoring not in ("dot", "additive"):
            raise ValueError(f"scoring must be 'dot' or 'additive', got {scoring!r}")
        check_positive_int("num_classes", num_classes)
        if scoring == "additive" and check_positive_int("num_heads", num_heads) != 1:
            raise ValueError(f"scoring='additive' has a single head, got num_heads={num_heads}")
        attention = (lambda: AdditiveSelfAttention(num_hiddens, dropout)) if scoring == "additive" else None
        self.num_classes = num_classes
        self.encoder = TransformerEncoder(num_classes, num_hiddens, ffn_num_hiddens or 2 * num_hiddens, num_heads,
                                          num_blks, dropout, max_len=max_len, attention=attention)
        # Reversal is a task about positions only. With nn.Embedding's default N(0, 1) entries, the
        # token embedding × √num_hiddens would be √num_hiddens times larger than the positional
        # encoding (entries in [-1, 1]) and hide it: training then stalls near chance. Entries of
        # std 1/√num_hiddens make both of the same size at the start.
        nn.init.normal_(self.encoder.embedding.weight, std=num_hiddens ** -0.5)
        self.output_net = nn.Sequential(nn.Linear(num_hiddens, num_hiddens), nn.LayerNorm(num_hiddens), nn.ReLU(),
                                        nn.Dropout(dropout), nn.Linear(num_hiddens, num_classes))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.output_net(self.encoder(X))

    @torch.no_grad()
    def attention_maps(self, X: torch.Tensor) -> list[torch.Tensor]:
        """One (batch, heads, length, length) map per layer, from an eval-mode pass."""
        with evaluating(self), record_attention(self) as maps:
            self(X)
        return maps.tensors()


def reversal_attention_figure(model: SequencePredictor, X: torch.Tensor, index: int = 0, figsize=(4.6, 4.0)):
    """The attention map of example ``index`` of ``X`` (batch, length), one plot per layer and head.

    Rows are query positions, columns key positions; the ticks show the
    position and the digit there (``position:digit``).
    """
    from ..core.plot import show_heatmaps

    if not 0 <= index < X.shape[0]:
        raise ValueError(f"index must lie in 0..{X.shape[0] - 1}, got {index}")
    maps = torch.stack([m[0] for m in model.attention_maps(X[index:index + 1])])  # (layers, heads, n, n)
    ticks = [f"{i}:{d}" for i, d in enumerate(X[index].tolist())]
    return show_heatmaps(maps, xlabel="key position : digit", ylabel="query position : digit",
                         titles=[f"head {h + 1}" for h in range(maps.shape[1])],
                         row_titles=[f"layer {i + 1}" for i in range(maps.shape[0])] if maps.shape[0] > 1 else None,
                         xticklabels=ticks, yticklabels=ticks, figsize=figsize, vmin=0.0)


@torch.no_grad()
def reversal_attention_profile(model: SequencePredictor, X: torch.Tensor, layer: int = -1) -> dict[str, float]:
    """Where the attention of a reversal model sits relative to the rule "query i reads key n-1-i".

    Takes the maps of block ``layer`` (default the last) for the sequences ``X``
    (batch, n), averaged over heads, and returns, over all sequences and query
    positions ``i``: ``'argmax_on_target'``, the fraction of rows whose largest
    weight is at key ``n-1-i``; ``'on_target'``, the mean weight on that key;
    ``'on_neighbours'``, the mean weight on keys ``n-1-i ± 1`` together.
    """
    maps = model.attention_maps(X)[layer].mean(dim=1)  # (batch, n, n)
    n = maps.shape[-1]
    rows = torch.arange(n, device=maps.device)
    target = rows.flip(0)
    neighbours = torch.zeros_like(maps[0], dtype=torch.bool)
    for shift in (-1, 1):
        cols = target + shift
        ok = (cols >= 0) & (cols < n)
        neighbours[rows[ok], cols[ok]] = True
    return {
        "argmax_on_target": (maps.argmax(dim=-1) == target).float().mean().item(),
        "on_target": maps[:, rows, target].mean().item(),
        "on_neighbours": (maps * neighbours).sum(dim=-1).mean().item(),
    }


def warmup_experiment(lrs=(3e-3, 3e-2), warmups=(0, 50), num_seeds: int = 4, epochs: int = 3,
                      num_train: int = 12_800, num_blks: int = 1, seed: int | None = None) -> list[dict]:
    """Train the post-norm reversal model with and without warm-up, for several rates and seeds.

    For every peak rate in ``lrs``, warm-up length in ``warmups`` (0: none) and
    seed ``seed + k`` (k < ``num_seeds``; ``seed`` ``None`` is the book's seed), a
    :class:`SequencePredictor` (one head, ``num_blks`` post-norm blocks, d = 32)
    is trained for ``epochs`` epochs on ``num_train`` sequences with Adam, the
    warm-up + cosine schedule and gradient clipping at 5: the chapter's recipe at
    a shorter budget, the same for every run. A seed fixes the data, the initial
    weights and the batch order, so the runs of one seed differ only in their
    schedule. Returns one dict per run: ``lr``, ``warmup``, ``seed``,
    ``val_accuracy`` (after every epoch) and ``train_loss`` (per epoch).
    """
    from ..core.config import resolve_seed, seed_everything
    from ..core.train import fit

    lrs = [float(lr) for lr in lrs]
    if not lrs or any(not math.isfinite(lr) or lr <= 0 for lr in lrs):
        raise ValueError(f"lrs must be a non-empty list of positive rates, got {lrs}")
    warmups = [check_int("warmups", w, minimum=0) for w in warmups]
    if not warmups:
        raise ValueError("warmups must name at least one warm-up length (0 for none)")
    num_seeds, epochs = check_positive_int("num_seeds", num_seeds), check_positive_int("epochs", epochs)
    first = resolve_seed(seed)
    rows = []
    for k in range(num_seeds):
        train, val, _ = reverse_loaders(128, num_train=num_train, num_val=1000, num_test=1, seed=first + k)
        max_steps = epochs * len(train)
        for lr in lrs:
            for warmup in warmups:
                seed_everything(first + k)
                model = SequencePredictor(10, 32, num_heads=1, num_blks=num_blks)
                optimizer = torch.optim.Adam(model.parameters(), lr=lr)
                scheduler = warmup_cosine_schedule(optimizer, min(warmup, max_steps), max_steps)
                history = fit(model, train, token_loss, epochs=epochs, optimizer=optimizer, scheduler=scheduler,
                              clip_grad=5.0, progress=False,
                              evaluate=lambda m: {"val accuracy": token_accuracy(m, val)})
                rows.append({"lr": lr, "warmup": warmup, "seed": first + k,
                             "val_accuracy": list(history.metrics["val accuracy"]),
                             "train_loss": list(history.train_loss)})
    return rows


def warmup_experiment_figure(rows: list[dict], figsize=(6.0, 3.2)):
    """Final validation accuracy of every run of :func:`warmup_experiment`, one dot per seed.

    One column of dots per (peak rate, warm-up) setting, so the spread over
    seeds is visible; the dashed line is chance (one class in ten).
    """
    import matplotlib.pyplot as plt

    from ..core.plot import _ensure_style, chance_line

    if not rows:
        raise ValueError("rows is empty: pass the list that warmup_experiment returns")
    settings = sorted({(r["lr"], r["warmup"]) for r in rows})
    _ensure_style()
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    for x, (lr, warmup) in enumerate(settings):
        finals = [r["val_accuracy"][-1] for r in rows if (r["lr"], r["warmup"]) == (lr, warmup)]
        offsets = torch.linspace(-0.12, 0.12, len(finals)).tolist() if len(finals) > 1 else [0.0]
        ax.scatter([x + o for o in offsets], finals, s=36, color="C0" if warmup else "C1", zorder=3)
    chance_line(ax, 0.1)
    ax.set_xticks(range(len(settings)))
    ax.set_xticklabels([f"peak {lr:g}\n" + (f"warm-up {w}" if w else "no warm-up") for lr, w in settings])
    ax.set_ylim(0.0, 1.05)
    ax.set_ylabel("validation accuracy")
    ax.set_title("Post-norm reversal model, same budget, one dot per seed")
    return fig


class AdditiveSelfAttention(nn.Module):
    """A one-head attention sublayer scored additively, as a drop-in for ``MultiHeadAttention``.

    Values are projected by ``W_v``, weighted by :class:`~attention_book.AdditiveAttention`
    (score ``wᵀ tanh(W_q q + W_k k)``) and mixed by ``W_o``. Accepts the same
    ``forward(queries, keys, values, valid_lens=None, *, attn_mask=None,
    causal=False)``; ``attention_weights`` is (batch, 1, queries, keys).
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0):
        super().__init__()
        from .attention import AdditiveAttention

        self.attention = AdditiveAttention(num_hiddens, dropout, query_size=num_hiddens, key_size=num_hiddens)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=False)

    @property
    def attention_weights(self) -> torch.Tensor | None:
        w = self.attention.attention_weights
        return None if w is None else w.unsqueeze(1)

    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, causal: bool = False):
        from .attention import causal_mask, key_mask

        b, n_q, n_k = queries.shape[0], queries.shape[1], keys.shape[1]
        mask = key_mask(valid_lens, b, n_q, n_k, device=queries.device)
        for extra in (attn_mask, causal_mask(n_q, n_k, device=queries.device) if causal else None):
            if extra is not None:
                mask = extra.expand(b, n_q, n_k) if mask is None else mask & extra
        return self.W_o(self.attention(queries, keys, self.W_v(values), mask))


def token_loss(model: nn.Module, batch) -> tuple[torch.Tensor, int]:
    """``loss_fn`` for ``ab.fit`` on (inputs, labels) batches: cross-entropy over every position."""
    X, Y = batch
    logits = model(X)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), Y.reshape(-1)), Y.numel()


@torch.no_grad()
def token_accuracy(model: nn.Module, loader, device=None) -> float:
    """Fraction of positions whose most likely class is the label (eval mode)."""
    dev = device or next(model.parameters()).device
    right = total = 0
    with evaluating(model):
        for X, Y in capped_batches(loader):
            X, Y = X.to(dev), Y.to(dev)
            right += int((model(X).argmax(dim=-1) == Y).sum())
            total += Y.numel()
    return right / total
