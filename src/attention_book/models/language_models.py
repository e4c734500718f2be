"""The three pretraining models, built from chapter 7's Transformer blocks, and the masks they use.

* :class:`EncoderOnlyLM` (BERT in miniature), :class:`DecoderOnlyLM` (GPT) and
  :class:`EncoderDecoderLM` (T5). All three are described by one
  :class:`LMConfig`; each accepts the config or its fields as arguments
  (``ab.DecoderOnlyLM(vocab_size, num_hiddens=64, num_heads=4, …)``).
* Each exposes the boolean attention masks it really uses (``attention_masks``),
  which :func:`pretraining_masks_figure` draws, and its attention maps
  (``attention_maps``, recorded by :func:`attention_book.record_attention`).

Masks follow the book's convention: boolean, ``True`` = may attend.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from .attention import causal_mask, record_attention
from ..core.checks import check_dropout, check_heads, check_index, check_optional_positive_int, check_positive_int
from ..core.config import resolve_seed
from .objectives import corrupt_spans
from ..data.tokenizer import Tokenizer
from .transformer import TransformerDecoder, TransformerEncoder, check_token_range, init_small_embeddings

__all__ = ["LMConfig", "EncoderOnlyLM", "DecoderOnlyLM", "EncoderDecoderLM", "pretraining_masks_figure"]


@dataclass(frozen=True)
class LMConfig:
    """The sizes of a pretraining model, shared by :class:`EncoderOnlyLM`, :class:`DecoderOnlyLM` and
    :class:`EncoderDecoderLM`.

    ``num_blks`` blocks (per stack: the encoder–decoder has ``num_blks`` of each)
    of width ``num_hiddens`` with ``num_heads`` heads and a feed-forward layer of
    ``ffn_num_hiddens`` units (``None``: ``4 * num_hiddens``); ``dropout``
    everywhere; positions up to ``max_len``; ``pad_id`` is the ``<pad>`` token,
    masked out as a key. ``norm_first=True`` (default) uses pre-normalisation,
    as GPT-2 and ViT do; at this size it trains faster than the original
    post-norm placement.
    """

    vocab_size: int
    num_hiddens: int = 64
    num_heads: int = 4
    num_blks: int = 2
    ffn_num_hiddens: int | None = None
    dropout: float = 0.1
    max_len: int = 128
    pad_id: int = 1
    norm_first: bool = True

    def __post_init__(self):
        num_hiddens, num_heads = check_heads(self.num_hiddens, self.num_heads)
        checked = {"vocab_size": check_positive_int("vocab_size", self.vocab_size), "num_hiddens": num_hiddens,
                   "num_heads": num_heads, "num_blks": check_positive_int("num_blks", self.num_blks),
                   "ffn_num_hiddens": check_optional_positive_int("ffn_num_hiddens", self.ffn_num_hiddens),
                   "dropout": check_dropout(self.dropout), "max_len": check_positive_int("max_len", self.max_len)}
        checked["pad_id"] = check_index("pad_id", self.pad_id, checked["vocab_size"], "the vocabulary")
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def ffn_hiddens(self) -> int:
        """Width of the feed-forward layers (``ffn_num_hiddens``, or ``4 * num_hiddens`` when it is ``None``)."""
        return self.ffn_num_hiddens or 4 * self.num_hiddens

    @classmethod
    def of(cls, config: LMConfig | int | None = None, *args, **kwargs) -> LMConfig:
        """A config from a config (``kwargs`` replace some of its fields) or from the fields themselves."""
        if isinstance(config, LMConfig):
            if args:
                raise TypeError("pass an LMConfig or its fields, not both (change fields by keyword)")
            return dataclasses.replace(config, **kwargs) if kwargs else config
        return cls(*args, **kwargs) if config is None else cls(config, *args, **kwargs)


class _LanguageModel(nn.Module):
    """What the three models share: the config, its most used fields as attributes, small embeddings."""

    def __init__(self, config: LMConfig | int | None = None, *args, **kwargs):
        super().__init__()
        self.config = LMConfig.of(config, *args, **kwargs)
        c = self.config
        self.vocab_size, self.num_hiddens, self.max_len, self.pad_id = c.vocab_size, c.num_hiddens, c.max_len, c.pad_id
        self._build(c)
        init_small_embeddings(self)

    def _build(self, c: LMConfig) -> None:
        raise NotImplementedError


class EncoderOnlyLM(_LanguageModel):
    """BERT in miniature: chapter 7's :class:`TransformerEncoder` with a masked-LM head.

    Built from an :class:`LMConfig` or its fields (``EncoderOnlyLM(vocab_size, num_hiddens=64, …)``).
    ``forward(ids)`` returns vocabulary scores (batch, length, vocab) at every
    position (the masked-LM loss reads the selected ones). ``add_classifier(n)``
    puts a fresh head on the ``<cls>`` position (BERT's pooler: dense + tanh, then
    a linear layer to ``n`` classes) and ``classify(ids)`` returns its scores.
    Self-attention is bidirectional; only ``<pad>`` keys are masked out.
    """

    def _build(self, c: LMConfig) -> None:
        self.encoder = TransformerEncoder(c.vocab_size, c.num_hiddens, c.ffn_hiddens, c.num_heads, c.num_blks,
                                          c.dropout, max_len=c.max_len, norm_first=c.norm_first)
        self.lm_head = nn.Linear(c.num_hiddens, c.vocab_size)
        self.cls_head: nn.Module | None = None

    @property
    def embedding(self) -> nn.Embedding:
        return self.encoder.embedding

    def attention_masks(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{'encoder self-attention': (batch, length, length)}``, True = may attend (every non-pad key)."""
        check_token_range("ids", ids, self.vocab_size, self.max_len)
        n = ids.shape[1]
        return {"encoder self-attention": _real_keys(ids, self.pad_id).expand(-1, n, -1)}

    def encode(self, ids: torch.Tensor) -> torch.Tensor:
        """Output vectors of the last block, (batch, length, num_hiddens)."""
        return self.encoder(ids, self.attention_masks(ids)["encoder self-attention"])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.encode(ids))  # scores of p(x_i | corrupted sequence) at every position i

    def add_classifier(self, num_classes: int) -> None:
        """A new, randomly initialised classification head on the ``<cls>`` position."""
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes must be an int >= 2, got {num_classes!r}")
        dev = self.lm_head.weight.device
        self.cls_head = nn.Sequential(nn.Linear(self.num_hiddens, self.num_hiddens), nn.Tanh(),
                                      nn.Linear(self.num_hiddens, num_classes)).to(dev)

    def classify(self, ids: torch.Tensor) -> torch.Tensor:
        """Class scores (batch, num_classes) from the output at position 0 (``<cls>``)."""
        if self.cls_head is None:
            raise ValueError("this model has no classifier yet; call add_classifier(num_classes) first")
        return self.cls_head(self.encode(ids)[:, 0])

    def attention_maps(self, ids: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """Attention weights of every layer, (batch, heads, length, length), labelled by mask name."""
        return _collect_maps(self, lambda: self.encode(ids), ["encoder self-attention"] * len(self.encoder.blks))


class DecoderOnlyLM(_LanguageModel):
    """GPT in miniature: chapter 7's :class:`TransformerEncoder` built with ``causal=True`` and a next-token head.

    A causal encoder block is a decoder block without cross-attention, i.e. a
    GPT block. ``forward(ids)`` returns scores (batch, length, vocab); position
    ``t`` depends on ``ids[:, :t+1]`` only. ``<pad>`` keys are masked as well.
    """

    def _build(self, c: LMConfig) -> None:
        self.body = TransformerEncoder(c.vocab_size, c.num_hiddens, c.ffn_hiddens, c.num_heads, c.num_blks, c.dropout,
                                       max_len=c.max_len, causal=True, norm_first=c.norm_first)
        self.lm_head = nn.Linear(c.num_hiddens, c.vocab_size)

    @property
    def embedding(self) -> nn.Embedding:
        return self.body.embedding

    def attention_masks(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{'decoder self-attention': (batch, length, length)}``: causal, and never a ``<pad>`` key.

        The blocks receive the ``<pad>`` part as ``valid_lens`` and add the causal
        part themselves (``causal=True``); this is the combination they apply.
        """
        check_token_range("ids", ids, self.vocab_size, self.max_len)
        n = ids.shape[1]
        return {"decoder self-attention": causal_mask(n, n, device=ids.device)[None] & _real_keys(ids, self.pad_id)}

    def encode(self, ids: torch.Tensor) -> torch.Tensor:
        """Output vectors of the last block, (batch, length, num_hiddens)."""
        check_token_range("ids", ids, self.vocab_size, self.max_len)
        return self.body(ids, _real_keys(ids, self.pad_id))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.encode(ids))  # position t: scores of p(x_t | <bos>, x_1, ..., x_{t-1})

    def attention_maps(self, ids: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        return _collect_maps(self, lambda: self.encode(ids), ["decoder self-attention"] * len(self.body.blks))


class EncoderDecoderLM(_LanguageModel):
    """T5 in miniature: chapter 7's :class:`TransformerEncoder` and :class:`TransformerDecoder`.

    ``forward(enc_ids, dec_ids)`` returns scores (batch, target length, vocab)
    (teacher forcing); ``encode`` and ``decoder_state`` prepare step-by-step
    decoding with the decoder's key/value cache (see :func:`greedy_decode`). The
    encoder is bidirectional over non-pad tokens, the decoder's self-attention is
    causal and its cross-attention sees every non-pad input token.
    """

    def _build(self, c: LMConfig) -> None:
        self.encoder = TransformerEncoder(c.vocab_size, c.num_hiddens, c.ffn_hiddens, c.num_heads, c.num_blks,
                                          c.dropout, max_len=c.max_len, norm_first=c.norm_first)
        self.decoder = TransformerDecoder(c.vocab_size, c.num_hiddens, c.ffn_hiddens, c.num_heads, c.num_blks,
                                          c.dropout, max_len=c.max_len, norm_first=c.norm_first)

    def attention_masks(self, enc_ids: torch.Tensor, dec_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The three masks (True = may attend): encoder self (batch, S, S), decoder self (batch, T, T; causal)
        and cross (batch, T, S).

        Decoder inputs are never padded on the left, so the causal mask alone
        already keeps every real target position away from ``<pad>``.
        """
        check_token_range("enc_ids", enc_ids, self.vocab_size, self.max_len)
        check_token_range("dec_ids", dec_ids, self.vocab_size, self.max_len)
        if enc_ids.shape[0] != dec_ids.shape[0]:
            raise ValueError(f"enc_ids {tuple(enc_ids.shape)} and dec_ids {tuple(dec_ids.shape)} need the same "
                             "batch size")
        s, t = enc_ids.shape[1], dec_ids.shape[1]
        enc_keys = _real_keys(enc_ids, self.pad_id)
        return {
            "encoder self-attention": enc_keys.expand(-1, s, -1),
            "decoder self-attention": causal_mask(t, t, device=dec_ids.device)[None].expand(len(dec_ids), -1, -1),
            "cross-attention": enc_keys.expand(-1, t, -1),
        }

    def encode(self, enc_ids: torch.Tensor) -> torch.Tensor:
        """Encoder outputs (batch, S, num_hiddens)."""
        check_token_range("enc_ids", enc_ids, self.vocab_size, self.max_len)
        s = enc_ids.shape[1]
        return self.encoder(enc_ids, _real_keys(enc_ids, self.pad_id).expand(-1, s, -1))

    def decoder_state(self, enc_ids: torch.Tensor, memory: torch.Tensor | None = None) -> dict:
        """A fresh decoder state (empty cache) for the inputs ``enc_ids``."""
        memory = self.encode(enc_ids) if memory is None else memory
        return self.decoder.init_state(memory, _real_keys(enc_ids, self.pad_id))

    def forward(self, enc_ids: torch.Tensor, dec_ids: torch.Tensor) -> torch.Tensor:
        check_token_range("dec_ids", dec_ids, self.vocab_size, self.max_len)
        if enc_ids.shape[0] != dec_ids.shape[0]:
            raise ValueError(f"enc_ids {tuple(enc_ids.shape)} and dec_ids {tuple(dec_ids.shape)} need the same "
                             "batch size")
        logits, _ = self.decoder(dec_ids, self.decoder_state(enc_ids))
        return logits

    def attention_maps(self, enc_ids: torch.Tensor, dec_ids: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        names = (["encoder self-attention"] * len(self.encoder.blks)
                 + ["decoder self-attention", "cross-attention"] * len(self.decoder.blks))
        return _collect_maps(self, lambda: self(enc_ids, dec_ids), names)


def _real_keys(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(batch, 1, length): True at real tokens, False at ``<pad>``."""
    return (ids != pad_id)[:, None, :]


def _collect_maps(model: nn.Module, run: Callable, names: Sequence[str]) -> list[tuple[str, torch.Tensor]]:
    """Run ``model`` recording its attention; return ``(mask name, weights)`` for every attention
    module in the order they were first called."""
    with torch.no_grad(), record_attention(model) as maps:
        run()
    if len(maps) != len(names):
        raise RuntimeError(f"expected {len(names)} attention modules, recorded {len(maps)}")
    return [(name, m.weights) for name, m in zip(names, maps)]


# --------------------------------------------------------------------------------------
# The three attention patterns, drawn from the masks the models use
# --------------------------------------------------------------------------------------

def pretraining_masks_figure(bert: nn.Module, t5: nn.Module, gpt: nn.Module, tok: Tokenizer,
                             text: str = "the time traveller smiled round at us", num_pad: int = 2,
                             seed: int | None = None):
    """Which positions each token may attend to, in the three pretraining modes.

    Every panel is a mask a model really passes to its attention layers, taken
    from its ``attention_masks`` method for one example built from ``text``:
    BERT's input (``<cls>`` + text + ``num_pad`` paddings), T5's span-corrupted
    input and target (encoder self-attention, decoder self-attention,
    decoder→encoder cross-attention) and GPT's input (``<bos>`` + text). A filled
    cell (row = query, column = key) means "may attend". ``seed`` (``None``: the book's
    seed plus 3) picks T5's corrupted spans. Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    from ..core.plot import PAGE_FIGURE_WIDTH, ensure_style

    ensure_style()
    ids = tok.encode(text)
    if len(ids) < 3:
        raise ValueError(f"text needs at least 3 tokens to draw a pattern, got {len(ids)}: {text!r}")
    names = lambda seq: [tok.vocab.to_tokens(int(i)) for i in seq]  # noqa: E731
    x_bert = torch.tensor([[tok.cls_id] + ids + [tok.pad_id] * num_pad])
    g = torch.Generator().manual_seed(resolve_seed(seed, 3))
    enc, tgt = corrupt_spans(ids, tok.sentinel_ids, noise_density=0.3, mean_span_length=2.0, generator=g)
    x_enc, x_dec = torch.tensor([enc]), torch.tensor([[tok.bos_id] + tgt])
    x_gpt = torch.tensor([[tok.bos_id] + ids])
    dev = lambda m: next(m.parameters()).device  # noqa: E731
    with torch.no_grad():
        m_bert = bert.attention_masks(x_bert.to(dev(bert)))
        m_t5 = t5.attention_masks(x_enc.to(dev(t5)), x_dec.to(dev(t5)))
        m_gpt = gpt.attention_masks(x_gpt.to(dev(gpt)))
    # Short titles (which model, which stack): the prose says which are self- and which
    # cross-attention; three-line titles crowded a phone's maps.
    panels = [
        ("BERT: encoder", m_bert["encoder self-attention"][0], x_bert[0], x_bert[0]),
        ("T5: encoder", m_t5["encoder self-attention"][0], x_enc[0], x_enc[0]),
        ("T5: decoder → encoder", m_t5["cross-attention"][0], x_dec[0], x_enc[0]),
        ("T5: decoder", m_t5["decoder self-attention"][0], x_dec[0], x_dec[0]),
        ("GPT: decoder", m_gpt["decoder self-attention"][0], x_gpt[0], x_gpt[0]),
    ]
    # Three masks above two (five in a row would shrink to the page's column and their token
    # labels with them), the two centred under the three: each spans two of six columns. A plot
    # spanning cells makes a phone's copy (core/plot.py) one map a row, each as wide as the
    # column, where two a row left ten token labels about 8 px apart.
    fig = plt.figure(figsize=(PAGE_FIGURE_WIDTH, 7.6), layout="constrained")
    spec = fig.add_gridspec(2, 6)
    axes = [fig.add_subplot(spec[r, c:c + 2]) for r, c in ((0, 0), (0, 2), (0, 4), (1, 1), (1, 3))]
    cmap = ListedColormap(["white", "tab:red"])
    for ax, (title, mask, q_ids, k_ids) in zip(axes, panels):
        m = mask.detach().cpu()
        if m.dim() == 3:  # (heads or 1, q, k): all heads share it
            m = m[0]
        ax.imshow(m.float().numpy(), cmap=cmap, vmin=0, vmax=1, aspect="equal")
        ax.set_xticks(range(len(k_ids)))
        ax.set_xticklabels(names(k_ids), rotation=90)
        ax.set_yticks(range(len(q_ids)))
        ax.set_yticklabels(names(q_ids))
        ax.set_xticks(np.arange(-0.5, len(k_ids)), minor=True)
        ax.set_yticks(np.arange(-0.5, len(q_ids)), minor=True)
        ax.grid(False)
        ax.grid(which="minor", color="0.85", linewidth=0.6)
        ax.tick_params(which="minor", length=0)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("keys (attended to)", fontsize=9)
    # one label for both rows (a plot's own y label would be prefixed to a phone copy's titles)
    fig.supylabel("queries (attending)", fontsize=10)
    return fig
