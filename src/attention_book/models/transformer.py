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

from .attention import MultiHeadAttention
from .attention_variants import GroupedQueryAttention
from ..core.checks import (check_dropout, check_heads, check_positive_int, check_same_device, check_tensor_values,
                     check_token_ids)
from .positional import PositionalEncoding

__all__ = [
    "PositionWiseFFN",
    "AddNorm",
    "TransformerEncoderBlock",
    "TransformerDecoderBlock",
    "TokenStack",
    "TransformerEncoder",
    "TransformerDecoder",
    "make_transformer",
    "greedy_without_cache",
    "copy_to_torch_layer",
    "init_small_embeddings",
    "check_token_range",
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
    attention=None, ffn_dropout=0.0)``; ``ffn_dropout`` acts on the FFN's hidden layer.

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
                 activation: str = "relu", attention: nn.Module | None = None, ffn_dropout: float = 0.0):
        super().__init__()
        _check_sizes(num_hiddens, ffn_num_hiddens, num_heads, dropout)
        self.num_hiddens, self.causal = num_hiddens, bool(causal)
        self.attention = attention if attention is not None else MultiHeadAttention(num_hiddens, num_heads, dropout,
                                                                                     bias=use_bias)
        self.addnorm1 = AddNorm(num_hiddens, dropout, norm_first)
        self.ffn = PositionWiseFFN(ffn_num_hiddens, num_hiddens, activation=activation, dropout=ffn_dropout)
        self.addnorm2 = AddNorm(num_hiddens, dropout, norm_first)

    @property
    def attention_weights(self) -> torch.Tensor | None:
        return self.attention.attention_weights

    def forward(self, X: torch.Tensor, valid_lens=None, *, attn_mask=None, causal: bool | None = None) -> torch.Tensor:
        _check_hidden("X", X, self.num_hiddens)
        causal = self.causal if causal is None else causal
        Y = self.addnorm1(X, lambda Z: self.attention(Z, Z, Z, valid_lens, attn_mask=attn_mask, causal=causal))
        return self.addnorm2(Y, self.ffn)


def copy_to_torch_layer(block: nn.Module, layer: nn.TransformerEncoderLayer) -> nn.TransformerEncoderLayer:
    """Copy an encoder block's weights into PyTorch's ``nn.TransformerEncoderLayer``; returns ``layer``.

    ``block`` is a :class:`TransformerEncoderBlock`, or a chapter's own block with the same
    parts (``attention.W_q/W_k/W_v/W_o``, ``ffn.dense1/dense2``, ``addnorm1.ln``,
    ``addnorm2.ln``). PyTorch stacks the three input projections into one matrix,
    ``self_attn.in_proj_weight`` = [W_q; W_k; W_v] (3d, d), and their biases likewise; a block
    without biases gives ``layer`` zero biases. ``layer`` must have the block's width, FFN width
    and number of heads (a ``ValueError`` says which differs); its ``batch_first``, activation
    and ``norm_first`` are the caller's to match.
    """
    att, theirs = block.attention, layer.self_attn
    d, d_ff = att.W_q.weight.shape[1], block.ffn.dense1.weight.shape[0]
    heads = getattr(att, "num_heads", theirs.num_heads)
    wanted = {"num_hiddens": (d, theirs.embed_dim), "ffn_num_hiddens": (d_ff, layer.linear1.out_features),
              "num_heads": (heads, theirs.num_heads)}
    for name, (ours, torch_value) in wanted.items():
        if ours != torch_value:
            raise ValueError(f"copy_to_torch_layer: the block has {name}={ours}, the torch layer {torch_value}")
    projections = (att.W_q, att.W_k, att.W_v)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
        for ours, target in ((projections, theirs.in_proj_bias), ((att.W_o,), theirs.out_proj.bias)):
            if target is not None:
                target.copy_(torch.cat([p.bias if p.bias is not None else torch.zeros_like(p.weight[:, 0])
                                        for p in ours]))
        theirs.out_proj.weight.copy_(att.W_o.weight)
        for ours, target in ((block.ffn.dense1, layer.linear1), (block.ffn.dense2, layer.linear2),
                             (block.addnorm1.ln, layer.norm1), (block.addnorm2.ln, layer.norm2)):
            target.load_state_dict(ours.state_dict())
    return layer


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


def check_token_range(name: str, X, vocab_size: int, max_len: int, offset: int = 0) -> None:
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


def init_small_embeddings(module: nn.Module) -> None:
    """Draw every token embedding in ``module`` (``module`` itself included) with standard deviation 1/√d, not 1.

    The stacks multiply embeddings by √d before adding the positional encoding
    (entries in [-1, 1]); with PyTorch's default N(0, 1) embeddings the positions
    would be √d times weaker than the tokens (8 times at d = 64) and short training
    would barely see word order. With 1/√d both start at the same scale.
    """
    for m in module.modules():
        if isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=m.embedding_dim ** -0.5)


class TokenStack(nn.Module):
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
        check_token_range(name, X, self.vocab_size, self.max_len, offset)
        return self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens), offset=offset)

    def finish(self, X: torch.Tensor) -> torch.Tensor:
        return X if self.final_norm is None else self.final_norm(X)


class TransformerEncoder(TokenStack):
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


class TransformerDecoder(TokenStack):
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


def greedy_without_cache(model: nn.Module, src: torch.Tensor, src_valid_len, bos_id: int, eos_id: int,
                         max_steps: int) -> list[list[int]]:
    """``ab.greedy_search`` with ``use_cache=False``: the decoder re-runs the *whole* prefix at every step.

    The slow reference for the cached decoding (one new token per step, the earlier
    positions in the decoder's key/value cache): both produce the same tokens.
    Returns the ids of each example without ``<eos>``.
    """
    from .seq2seq import greedy_search

    return greedy_search(model, src, src_valid_len, bos_id, eos_id, max_steps, use_cache=False)[0]


# --- learning-rate schedule -------------------------------------------------------------------


# --- sequence reversal: an encoder-only predictor ---------------------------------------------


