"""d2l (the book's reference implementation) for the parity tests and the attention benchmark.

Not part of the package: only ``tests/test_d2l_parity.py`` and ``benchmarks/attention.py`` use it.

* :func:`load_d2l` imports ``d2l.torch``. That module imports torchvision at its top, and no
  torchvision release can be imported beside the torch this book is tested with; d2l's attention
  code never uses it. So a stand-in ``torchvision`` (with just ``transforms``, the one attribute
  d2l reads while it is imported) sits in ``sys.modules`` for the duration of the import and is
  taken out again afterwards. Whatever else d2l asks of it (its image data sets) raises an
  ``AttributeError`` that says why.
* ``copy_*`` copy the parameters of d2l's modules into the package's modules of the same kind, so
  both compute with the same weights. d2l builds its layers with ``nn.LazyLinear``: call a d2l
  module once (:func:`materialise`) before copying from it.
* :class:`D2LDecoderBlock` is d2l's Transformer decoder block, which ``d2l.torch`` does not ship
  (its chapter defines it in the text): put together here from d2l's own ``MultiHeadAttention``,
  ``AddNorm`` and ``PositionWiseFFN`` and run the way the chapter runs it.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import torch
from torch import nn

D2L_VERSION = "1.0.3"  # the release the Makefile installs (a test keeps the two the same)
INSTALL_HINT = (f'd2l is not installed: `make venv` installs it, or pip install --no-deps "d2l=={D2L_VERSION}" '
                'plus pip install -e ".[parity]"')

_LOADED: dict[str, types.ModuleType | None] = {}
_WHY_MISSING: list[str] = []


def _stand_in_torchvision() -> types.ModuleType:
    """A ``torchvision`` module with an empty ``transforms`` submodule, and nothing else."""

    def missing(name: str):
        raise AttributeError(f"torchvision.{name}: this is the stand-in of tests/d2l_shim.py (the real torchvision "
                             "cannot be imported beside this torch), so d2l's image helpers are unavailable")

    vision = types.ModuleType("torchvision", "stand-in for d2l's import (tests/d2l_shim.py)")
    transforms = types.ModuleType("torchvision.transforms", "stand-in (tests/d2l_shim.py)")
    transforms.__getattr__ = lambda name: missing(f"transforms.{name}")
    vision.transforms = transforms
    vision.__getattr__ = missing
    vision.is_stand_in = True
    return vision


def why_missing() -> str:
    """Why :func:`load_d2l` returned ``None``, and how to fix it."""
    return _WHY_MISSING[-1] if _WHY_MISSING else INSTALL_HINT


def load_d2l() -> types.ModuleType | None:
    """``d2l.torch``, or ``None`` when d2l is not installed or does not import (see :func:`why_missing`)."""
    if "d2l" in _LOADED:
        return _LOADED["d2l"]
    _LOADED["d2l"] = None
    if importlib.util.find_spec("d2l") is None:
        return None
    names = ("torchvision", "torchvision.transforms")
    before = {name: sys.modules.get(name) for name in names}
    if before["torchvision"] is None:  # a working torchvision already imported is used as it is
        vision = _stand_in_torchvision()
        sys.modules["torchvision"], sys.modules["torchvision.transforms"] = vision, vision.transforms
    try:
        import d2l.torch as d2l
    except ImportError as err:  # d2l without what it imports
        _WHY_MISSING.append(f'd2l is installed but d2l.torch does not import ({err}); pip install -e ".[parity]"')
        return None
    finally:
        for name, module in before.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    _LOADED["d2l"] = d2l
    return d2l


# --- weights from d2l's modules into the package's ---------------------------------------------

def materialise(module: nn.Module, *inputs) -> nn.Module:
    """Run ``module(*inputs)`` once without gradients, so its ``LazyLinear`` layers get their weights."""
    with torch.no_grad():
        module(*inputs)
    return module


def _copy(src: nn.Module, dst: nn.Module, what: str) -> None:
    """Copy every parameter of ``src`` into the parameter of ``dst`` with the same name and shape."""
    theirs, ours = dict(src.named_parameters()), dict(dst.named_parameters())
    if set(theirs) != set(ours):
        raise ValueError(f"{what}: d2l's parameters {sorted(theirs)} do not match the package's {sorted(ours)}")
    with torch.no_grad():
        for name, param in ours.items():
            source = theirs[name]
            if isinstance(source, nn.parameter.UninitializedParameter):
                raise ValueError(f"{what}: d2l's {name} is still lazy; call materialise(module, *inputs) first")
            if source.shape != param.shape:
                raise ValueError(f"{what}: {name} is {tuple(source.shape)} in d2l but {tuple(param.shape)} here")
            param.copy_(source)


def copy_linear(src: nn.Module, dst: nn.Module) -> None:
    _copy(src, dst, "linear layer")


def copy_additive(src: nn.Module, dst: nn.Module) -> None:
    """d2l's ``AdditiveAttention`` (W_q, W_k, w_v) into ``ab.AdditiveAttention``."""
    for name in ("W_q", "W_k", "w_v"):
        _copy(getattr(src, name), getattr(dst, name), f"AdditiveAttention.{name}")


def copy_multihead(src: nn.Module, dst: nn.Module) -> None:
    """d2l's ``MultiHeadAttention`` (W_q, W_k, W_v, W_o; biases if any) into ``ab.MultiHeadAttention``."""
    for name in ("W_q", "W_k", "W_v", "W_o"):
        _copy(getattr(src, name), getattr(dst, name), f"MultiHeadAttention.{name}")


def copy_ffn(src: nn.Module, dst: nn.Module) -> None:
    for name in ("dense1", "dense2"):
        _copy(getattr(src, name), getattr(dst, name), f"PositionWiseFFN.{name}")


def copy_addnorm(src: nn.Module, dst: nn.Module) -> None:
    _copy(src.ln, dst.ln, "AddNorm.ln")


def copy_encoder_block(src: nn.Module, dst: nn.Module) -> None:
    """d2l's ``TransformerEncoderBlock`` into ``ab.TransformerEncoderBlock``."""
    copy_multihead(src.attention, dst.attention)
    copy_addnorm(src.addnorm1, dst.addnorm1)
    copy_ffn(src.ffn, dst.ffn)
    copy_addnorm(src.addnorm2, dst.addnorm2)


def copy_decoder_block(src: nn.Module, dst: nn.Module) -> None:
    """:class:`D2LDecoderBlock` into ``ab.TransformerDecoderBlock``."""
    copy_multihead(src.attention1, dst.attention1)
    copy_addnorm(src.addnorm1, dst.addnorm1)
    copy_multihead(src.attention2, dst.attention2)
    copy_addnorm(src.addnorm2, dst.addnorm2)
    copy_ffn(src.ffn, dst.ffn)
    copy_addnorm(src.addnorm3, dst.addnorm3)


def copy_encoder(src: nn.Module, dst: nn.Module) -> None:
    """d2l's ``TransformerEncoder`` (embedding, blocks ``block0``, ``block1``, ...) into ``ab.TransformerEncoder``."""
    _copy(src.embedding, dst.embedding, "TransformerEncoder.embedding")
    if len(src.blks) != len(dst.blks):
        raise ValueError(f"d2l's encoder has {len(src.blks)} blocks, the package's {len(dst.blks)}")
    for theirs, ours in zip(src.blks, dst.blks):
        copy_encoder_block(theirs, ours)


class D2LDecoderBlock(nn.Module):
    """d2l's Transformer decoder block, from d2l's own parts, with the chapter's behaviour.

    ``forward(X, state) -> (output, state)`` with ``state = [enc_outputs, enc_valid_lens, cache]``
    and ``cache`` a list holding, for block ``i``, every decoder input it has seen so far. In
    training mode each position may attend to itself and the positions before it (lengths
    1, 2, ..., T per query); in eval mode no mask at all, since d2l then feeds one token at a
    time and the cache holds only the past.
    """

    def __init__(self, d2l, num_hiddens: int, ffn_num_hiddens: int, num_heads: int, dropout: float, i: int):
        super().__init__()
        self.i = i
        self.attention1 = d2l.MultiHeadAttention(num_hiddens, num_heads, dropout)
        self.addnorm1 = d2l.AddNorm(num_hiddens, dropout)
        self.attention2 = d2l.MultiHeadAttention(num_hiddens, num_heads, dropout)
        self.addnorm2 = d2l.AddNorm(num_hiddens, dropout)
        self.ffn = d2l.PositionWiseFFN(ffn_num_hiddens, num_hiddens)
        self.addnorm3 = d2l.AddNorm(num_hiddens, dropout)

    def forward(self, X, state):
        enc_outputs, enc_valid_lens, cache = state
        past = cache[self.i]
        seen = X if past is None else torch.cat((past, X), dim=1)
        cache[self.i] = seen
        lens = None
        if self.training:  # position t sees positions 1..t (as lengths, one row per example)
            batch, steps = X.shape[:2]
            lens = torch.arange(1, steps + 1, device=X.device).repeat(batch, 1)
        Y = self.addnorm1(X, self.attention1(X, seen, seen, lens))
        Z = self.addnorm2(Y, self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens))
        return self.addnorm3(Z, self.ffn(Z)), state
