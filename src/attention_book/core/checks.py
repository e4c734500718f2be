"""Argument validation: one home for the checks every module needs.

Each check raises ``ValueError`` whose message names the argument and the value
it got, so a wrong call says what to fix::

    check_positive_int("batch_size", 2.5)
    # ValueError: batch_size must be an integer, got 2.5 (float)

Booleans are not sizes (``True`` is an ``int`` to Python but never a count a
caller meant), and neither are floats with an integral value such as ``2.0``.
NumPy and other integer types that support ``__index__`` are accepted.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

import numpy as np

__all__ = ["check_int", "check_positive_int", "check_optional_positive_int", "check_dropout", "check_heads", "check_kv_heads", "check_index", "check_tensor_values", "check_same_device", "check_same_dtype", "check_token_ids", "check_size_pair", "check_divisible"]


def check_int(name: str, value: Any, minimum: int | None = None) -> int:
    """``value`` as a Python ``int``, or ``ValueError`` naming ``name``.

    Rejects booleans, floats (even ``2.0``), strings and other non-integers;
    with ``minimum``, also integers below it.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r} (bool)")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})") from None
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {number}")
    return number


def check_positive_int(name: str, value: Any) -> int:
    """``value`` as a Python ``int`` of at least 1, or ``ValueError`` naming ``name``."""
    return check_int(name, value, minimum=1)


def check_optional_positive_int(name: str, value: Any) -> int | None:
    """``None``, or ``value`` as a Python ``int`` of at least 1 (a size that has a default)."""
    return None if value is None else check_positive_int(name, value)


def check_dropout(value: Any, name: str = "dropout") -> float:
    """A dropout probability: a real number in ``[0, 1)``, or ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r} ({type(value).__name__})")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must lie in [0, 1), got {value}")
    return float(value)


def check_heads(num_hiddens: Any, num_heads: Any) -> tuple[int, int]:
    """``(num_hiddens, num_heads)``: positive integers, ``num_heads`` dividing ``num_hiddens``
    (each head gets ``num_hiddens / num_heads`` features)::

        check_heads(30, 4)
        # ValueError: num_hiddens=30 is not divisible by num_heads=4; head counts that work
        # with num_hiddens=30: [1, 2, 3, 5, 6, 10, 15, 30]
    """
    num_hiddens = check_positive_int("num_hiddens", num_hiddens)
    num_heads = check_positive_int("num_heads", num_heads)
    if num_hiddens % num_heads:
        options = [h for h in range(1, num_hiddens + 1) if num_hiddens % h == 0]
        raise ValueError(f"num_hiddens={num_hiddens} is not divisible by num_heads={num_heads}; "
                         f"head counts that work with num_hiddens={num_hiddens}: {options}")
    return num_hiddens, num_heads


def check_kv_heads(num_heads: Any, num_kv_heads: Any) -> int:
    """``num_kv_heads`` as an ``int``: ``None`` means ``num_heads`` (every head has its own keys
    and values); otherwise a positive integer dividing ``num_heads``, so that the query heads
    fall into equal groups that share one key/value head (1 is multi-query attention)::

        check_kv_heads(8, 3)
        # ValueError: num_kv_heads=3 does not divide num_heads=8 into equal groups; key/value head
        # counts that work with num_heads=8: [1, 2, 4, 8]
    """
    num_heads = check_positive_int("num_heads", num_heads)
    if num_kv_heads is None:
        return num_heads
    num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        options = [h for h in range(1, num_heads + 1) if num_heads % h == 0]
        raise ValueError(f"num_kv_heads={num_kv_heads} does not divide num_heads={num_heads} into equal groups; "
                         f"key/value head counts that work with num_heads={num_heads}: {options}")
    return num_kv_heads


def check_token_ids(name: str, X: Any) -> None:
    """``ValueError`` naming ``name`` unless ``X`` is a (batch, num_steps) tensor of integer token ids.

    Looks at the shape and dtype only; the range of the ids is the model's to check
    (with :func:`check_tensor_values`, which reads nothing on the host).
    """
    import torch

    if not isinstance(X, torch.Tensor) or X.dim() != 2:
        got = tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__
        raise ValueError(f"{name} must be a (batch, num_steps) tensor of token ids, got {got}")
    if X.is_floating_point() or X.is_complex() or X.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {X.dtype}")


def check_same_device(name: str, tensor: Any, module: Any) -> None:
    """``ValueError`` naming both devices when ``tensor`` is not where ``module``'s parameters are.

    Compares devices only (never a value, so nothing waits for a GPU). A module
    without parameters, or an argument that is not a tensor, passes: other
    checks deal with those. Without this check, a module on ``meta`` given CPU
    input returns uninitialised memory, and a CPU embedding given ids on the
    ``meta`` device returns garbage instead of failing::

        check_same_device("X", torch.zeros(2, 3, device="meta"), encoder)
        # ValueError: X is on device meta but TransformerEncoder's parameters are on device cpu; ...
    """
    import torch

    param = next(module.parameters(), None)
    if param is None or not isinstance(tensor, torch.Tensor) or tensor.device == param.device:
        return
    raise ValueError(
        f"{name} is on device {tensor.device} but {type(module).__name__}'s parameters are on device "
        f"{param.device}; move them to one device, e.g. {name.split()[0]}.to({str(param.device)!r}) "
        f"or model.to({str(tensor.device)!r})"
    )


def check_same_dtype(name: str, tensor: Any, module: Any) -> None:
    """``ValueError`` naming both dtypes when floating-point ``tensor`` is not in the dtype of
    ``module``'s floating-point parameters (say bfloat16 input to a float32 layer), instead of
    PyTorch's "expected m1 and m2 to have the same dtype" from inside a matrix product.

    Inside ``torch.autocast`` for the tensor's device the mix is what autocast is for, so it
    passes; so do a module without floating-point parameters and a tensor that is not
    floating point (other checks deal with those)::

        check_same_dtype("queries", torch.zeros(2, 3, 8, dtype=torch.bfloat16), attention)
        # ValueError: queries is in torch.bfloat16 but MultiHeadAttention's parameters are in
        # torch.float32; convert one, e.g. queries.to(torch.float32) or model.to(torch.bfloat16), ...
    """
    import torch

    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        return
    from torch.nn.parameter import is_lazy

    param = next((p for p in module.parameters() if not is_lazy(p) and p.dtype.is_floating_point), None)
    if param is None or tensor.dtype == param.dtype or torch.is_autocast_enabled(tensor.device.type):
        return
    raise ValueError(
        f"{name} is in {tensor.dtype} but {type(module).__name__}'s parameters are in {param.dtype}; convert "
        f"one, e.g. {name.split()[0]}.to({param.dtype}) or model.to({tensor.dtype}), or run the model under "
        f"torch.autocast({tensor.device.type!r}, dtype={tensor.dtype})"
    )


def check_index(name: str, value: Any, size: int, within: str = "a sequence") -> int:
    """An index into ``within`` (something of length ``size``): an integer in ``[0, size)``.

    Negative indices are rejected (Python would count them from the end, which
    silently turns a bad id into the last entry)::

        check_index("token id", -1, 28, within="the vocabulary")
        # ValueError: token id -1 is out of range for the vocabulary of size 28 (valid: 0 to 27)
    """
    index = check_int(name, value)
    if not 0 <= index < size:
        valid = f"valid: 0 to {size - 1}" if size > 0 else "it is empty"
        raise ValueError(f"{name} {index} is out of range for {within} of size {size} ({valid})")
    return index


def check_tensor_values(name: str, t, low: float, high: float, *, whole: bool = False, what: str = "") -> None:
    """``ValueError`` naming ``name`` when a value of tensor ``t`` lies outside ``[low, high]``
    (or, with ``whole``, is not a whole number) — without reading any value on the host when
    all is well, so a forward pass on a GPU does not wait for it.

    The test runs where ``t`` lives (``torch._assert_async``); only a failure reads the
    values, to name them. On a GPU the failure surfaces as a device-side assertion at the
    next synchronisation instead of this message. ``what`` ends the message (e.g. why the
    range is what it is).
    """
    import torch

    if t.device.type == "meta" or t.numel() == 0:
        return
    ok = (t >= low) & (t <= high)
    if whole and t.is_floating_point():
        ok &= t == t.round()
    try:
        torch._assert_async(ok.all())
    except RuntimeError:
        in_range = (t >= low) & (t <= high)
        if not bool(in_range.all()):
            problem = f"must lie in [{low:g}, {high:g}], got values from {t.min().item():g} to {t.max().item():g}"
        else:
            problem = f"must hold whole numbers, got {t[t != t.round()].flatten()[0].item():g}"
        raise ValueError(f"{name} {problem}" + (f"; {what}" if what else "")) from None


def check_size_pair(name: str, value) -> tuple[int, int]:
    """``7 -> (7, 7)``; ``(4, 6)`` stays; anything else is a clear error."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        pair = (int(value), int(value))
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
    ):
        pair = (int(value[0]), int(value[1]))
    else:
        raise ValueError(f"{name} must be an int or a pair (height, width) of ints, got {value!r}")
    if min(pair) < 1:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return pair


def check_divisible(img_size: tuple[int, int], patch_size: tuple[int, int]) -> None:
    if img_size[0] % patch_size[0] or img_size[1] % patch_size[1]:
        h, w = img_size
        ph, pw = patch_size
        fits_h = [p for p in range(1, h + 1) if h % p == 0]
        fits_w = [p for p in range(1, w + 1) if w % p == 0]
        raise ValueError(
            f"image size (height, width) = {img_size} is not divisible by patch_size = {patch_size} "
            f"(remainders {h % ph} and {w % pw}); patch heights that divide {h}: {fits_h}, "
            f"patch widths that divide {w}: {fits_w} — or resize the images to "
            f"({math.ceil(h / ph) * ph}, {math.ceil(w / pw) * pw})"
        )
