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

import operator
from typing import Any

__all__ = ["check_int", "check_positive_int", "check_index", "check_tensor_values"]


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
