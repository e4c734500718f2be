"""Choosing the next token: sampling with temperature and top-k, and greedy decoding.

:func:`next_token_distribution` turns a model's last scores into the probabilities
to sample from; :func:`generate` continues a prompt with a decoder-only model
(reproducible under a seed); :func:`greedy_decode` decodes with an
encoder–decoder and its key/value cache; :func:`sampling_figure` is the widget
behind chapter 9's "try it".
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..core.checks import check_int
from ..core.config import resolve_seed
from ..data.tokenizer import Tokenizer
from ..core.train import evaluating
from .seq2seq import cut_at_eos, greedy

__all__ = ["next_token_distribution", "banned_ids", "generate", "greedy_decode", "sampling_figure",
           "PUNCTUATION_NAMES", "spoken_token", "spoken_text"]


# --------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------

def next_token_distribution(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None
                            ) -> torch.Tensor:
    """Probabilities to sample the next token from, given the last position's ``logits`` (..., vocab).

    ``temperature`` divides the logits (below 1 sharpens, above 1 flattens; 0
    means greedy: all mass on the arg-max). A temperature so small that the
    divided logits overflow gives the limit instead of NaN: all mass on the
    maximum (shared equally by tied maxima). ``top_k`` keeps only the ``k`` most
    likely tokens and renormalises (``None`` or 0 keeps all). ``logits`` may hold
    ``-inf`` (a banned token) but not NaN or ``+inf``, and each row needs a finite entry.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise ValueError("logits must be a floating-point tensor of shape (..., vocab)")
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if temperature < 0 or not math.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None:
        top_k = check_int("top_k", top_k, minimum=0)
    if bool(torch.isnan(logits).any() | torch.isposinf(logits).any()):
        raise ValueError("logits hold NaN or +inf: no distribution can be made from them")
    if logits.numel() and not bool(torch.isfinite(logits).any(dim=-1).all()):
        raise ValueError("a row of logits is -inf everywhere: every token is banned, nothing can be sampled")
    vocab = logits.shape[-1]
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), vocab).to(logits.dtype)
    scaled = logits / temperature
    if vocab:
        # A tiny temperature can push the quotients to +inf, NaN or -inf everywhere, where softmax
        # gives NaN. Those rows take the limit instead: all mass on the maximum (ties share it).
        # Exactly the rows that would have been NaN change; every other row is computed as always.
        broken = ((torch.isnan(scaled) | torch.isposinf(scaled)).any(dim=-1, keepdim=True)
                  | torch.isneginf(scaled).all(dim=-1, keepdim=True))
        limit = torch.full_like(logits, float("-inf")).masked_fill(logits == logits.amax(dim=-1, keepdim=True), 0.0)
        scaled = torch.where(broken, limit, scaled)
    if top_k and top_k < vocab:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return F.softmax(scaled, dim=-1)


def banned_ids(tok: Tokenizer) -> list[int]:
    """Ids generation never samples: the special tokens other than ``<eos>``."""
    return sorted(i for i in tok.special_ids if i != tok.eos_id)


def _ban_specials(logits: torch.Tensor, tok: Tokenizer) -> torch.Tensor:
    out = logits.clone()
    out[..., banned_ids(tok)] = float("-inf")
    return out


@torch.no_grad()
def generate(model: nn.Module, tok: Tokenizer, prompt: str = "", num_tokens: int = 20, temperature: float = 1.0,
             top_k: int | None = None, seed: int | None = None, stop_at_eos: bool = True) -> str:
    """Continue ``prompt`` with a decoder-only model, sampling ``num_tokens`` tokens.

    The model reads ``<bos>`` + the prompt (keeping the last ``model.max_len``
    tokens when it grows longer) and each new token is drawn from
    :func:`next_token_distribution`. With the same ``seed`` the same text comes
    back (``None``: the book's seed, so a chapter's samples repeat under one
    ``ATTENTION_BOOK_SEED``). Special tokens other than ``<eos>`` (``<unk>``,
    ``<pad>``, sentinels, …) are never sampled. Returns the continuation only.
    """
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    with evaluating(model):
        dev = next(model.parameters()).device
        gen = torch.Generator(device=dev)
        gen.manual_seed(resolve_seed(seed))
        ids = torch.tensor([[tok.bos_id] + tok.encode(prompt)], device=dev)
        out: list[int] = []
        for _ in range(num_tokens):
            logits = _ban_specials(model(ids[:, -model.max_len:])[:, -1], tok)
            probs = next_token_distribution(logits.float(), temperature, top_k)
            nxt = torch.multinomial(probs, 1, generator=gen)
            if stop_at_eos and int(nxt) == tok.eos_id:
                break
            out.append(int(nxt))
            ids = torch.cat([ids, nxt], dim=1)
    return tok.decode(out)


def greedy_decode(model: nn.Module, enc_inputs: torch.Tensor, bos_id: int, eos_id: int, max_len: int) -> list[list[int]]:
    """Greedy decoding with an encoder–decoder LM: :func:`~attention_book.models.seq2seq.greedy` after ``<bos>``.

    The encoder runs once (``model.decoder_state``); the decoder takes one new token
    per step and keeps the earlier ones in its key/value cache. Returns one list of
    ids per example (``<bos>`` and ``<eos>`` removed).
    """
    with evaluating(model):
        dev = next(model.parameters()).device
        enc_inputs = enc_inputs.to(dev)
        bos = torch.full((len(enc_inputs), 1), bos_id, dtype=torch.long, device=dev)
        tokens, _ = greedy(model.decoder, model.decoder_state(enc_inputs), bos, min(max_len, model.max_len), eos_id)
    return cut_at_eos(tokens, eos_id)


def sampling_figure(model: nn.Module, tok: Tokenizer, prompt: str = "the time traveller", temperature: float = 1.0,
                    top_k: int = 0, seed: int | None = None, num_tokens: int = 25, show: int = 12):
    """The widget behind "try it": what temperature and top-k do to the next-token distribution.

    Left: the model's probabilities for the token after ``prompt`` at temperature
    1 (grey) and after applying ``temperature`` and ``top_k`` (red), for the
    ``show`` most likely tokens (special tokens other than ``<eos>`` are never
    sampled, so they are left out). Below: a ``num_tokens``-token continuation sampled
    with these settings under ``seed`` (``None``: the book's seed). Returns the figure
    (the sampled text is also in ``fig.generated_text``).
    """
    import matplotlib.pyplot as plt

    from ..core.plot import ensure_style, set_alt_text

    ensure_style()
    seed = resolve_seed(seed)
    dev = next(model.parameters()).device
    with evaluating(model), torch.no_grad():
        ids = torch.tensor([[tok.bos_id] + tok.encode(prompt)], device=dev)
        logits = _ban_specials(model(ids[:, -model.max_len:])[0, -1].float(), tok).cpu()
    raw = next_token_distribution(logits, 1.0)
    adjusted = next_token_distribution(logits, temperature, top_k or None)
    order = torch.argsort(raw, descending=True)[:show]
    # punctuation by name: a bare "." or "," under its bar drew as a speck (issue 36)
    labels = [PUNCTUATION_NAMES.get(t, t) for t in map(tok.vocab.to_tokens, order.tolist())]
    text = generate(model, tok, prompt, num_tokens, temperature, top_k or None, seed)
    # 5.2 in tall: the phone copy keeps this shape (core/plot.py), and at 3.6 in its bars were ~80 px
    # tall under the legend and title, with the y label running into the sample (issue 36)
    fig, ax = plt.subplots(figsize=(7.5, 5.2), layout="constrained")
    xs = np.arange(len(order))
    ax.bar(xs - 0.2, raw[order].numpy(), width=0.4, color="0.7", label="temperature 1, all tokens")
    ax.bar(xs + 0.2, adjusted[order].numpy(), width=0.4, color="tab:red",
           label=f"temperature {temperature:g}, top-k {top_k or 'all'}")
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=45, ha="right")
    ax.set_ylabel("probability")  # the title says of what; short enough to stay beside the bars
    ax.set_title(f"next token after “{prompt}”", fontsize=10)
    # above the axes, never over the bars; one column, so the phone copy (core/plot.py) fits 358 px
    fig.legend(loc="outside upper center", ncols=1, frameon=False, fontsize=9)
    wrapped = _wrap(f"{prompt} ▸ {text}", 95)
    fig.text(0.01, -0.02, f"sample (seed {seed}):\n{wrapped}", ha="left", va="top", fontsize=9, family="monospace")
    fig.generated_text = text
    # What the bars and the sample say, in words: a screen reader (and the explorer's live region,
    # which reads this) hears the result of each setting, not only the figure's axes.
    likely = [int(i) for i in torch.argsort(adjusted, descending=True)[:3] if adjusted[i] > 0]
    # Tokens quoted and punctuation named ("'.' (period) 0.224", not ". 0.224"), "▸" said as "then"
    # (accessibility reader, issue 38).
    set_alt_text(fig, f"Bar chart: next token after “{prompt}” at temperature {temperature:g}, top-k "
                      f"{top_k or 'all'}: most likely "
                      + ", ".join(f"{spoken_token(tok.vocab.to_tokens(i))} {float(adjusted[i]):.3f}"
                                  for i in likely)
                      + f". Sample (seed {seed}): {prompt}, then: {spoken_text(text)}")
    return fig


#: The word tokenizer's punctuation tokens by name: what a screen reader is given instead of a bare
#: "." or "," (read as nothing, or a pause). The chapter 9 live view ships this table to its page
#: (``data()["punctuation"]``), so the figure's text and the page's live regions speak alike.
PUNCTUATION_NAMES = {".": "period", ",": "comma", ";": "semicolon", ":": "colon",
                     "!": "exclamation mark", "?": "question mark"}


def spoken_token(token: str) -> str:
    """One token as a listener can tell it apart: quoted, and punctuation named ("'.' (period)", "'and'")."""
    name = PUNCTUATION_NAMES.get(token)
    return f"'{token}' ({name})" if name else f"'{token}'"


def spoken_text(text: str) -> str:
    """Decoded text with its punctuation named, for a listener ("the machine, and" -> "the machine comma and")."""
    return " ".join("".join(f" {PUNCTUATION_NAMES[c]} " if c in PUNCTUATION_NAMES else c for c in text).split())


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))

