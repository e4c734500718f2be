"""Printed tables: a header and rows as aligned text, narrow enough for a phone's column."""

from __future__ import annotations

import numbers
from typing import Sequence

__all__ = ["format_table", "print_table"]


def _cell(value, spec: str) -> str:
    """A number in the column's format; text (and a number without a format) as it is."""
    if isinstance(value, str) or not spec:
        return str(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and "f" in spec:
        return str(value)  # a count in a column of decimals: 97, not 97.00
    return format(value, spec)


def format_table(header: Sequence[str], rows: Sequence[Sequence], formats: str | Sequence[str] = "",
                 gap: int = 2) -> str:
    """The table as lines of text (see :func:`print_table`)."""
    width = len(header)
    specs = [formats] * width if isinstance(formats, str) else list(formats)
    if len(specs) != width:
        raise ValueError(f"formats must give one format per column ({width}), got {len(specs)}")
    for i, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"row {i} has {len(row)} cells, the header {width}")
    body = [[_cell(v, spec) for v, spec in zip(row, specs)] for row in rows]
    # a column of text only reads left-aligned, one holding a number right-aligned
    left = [all(isinstance(row[j], str) for row in rows) for j in range(width)]
    titles = [str(h).split("\n") for h in header]
    depth = max(len(t) for t in titles)
    head = [[""] * (depth - len(t)) + t for t in titles]  # a short title sits on the last line
    widths = [max(len(s) for s in head[j] + [row[j] for row in body]) for j in range(width)]

    def line(cells):
        return (" " * gap).join(c.ljust(w) if lf else c.rjust(w)
                                for c, w, lf in zip(cells, widths, left)).rstrip()

    return "\n".join([line([h[k] for h in head]) for k in range(depth)] + [line(r) for r in body])


def print_table(header: Sequence[str], rows: Sequence[Sequence], formats: str | Sequence[str] = "",
                gap: int = 2) -> None:
    """Print ``rows`` under ``header`` in aligned columns ``gap`` spaces apart.

    ``formats`` is one format spec per column (``".2f"``; ``""`` prints ``str(value)``), or one
    spec for every column. Text in a column of numbers (``"never"``) prints as it is, and so
    does a whole number in a column of decimals. A column holding only text is left-aligned,
    any other right-aligned; a header title may hold ``"\\n"`` to take two lines::

        >>> print_table(["score", "MFLOP"], [["dot", 16.78], ["additive", 33.6]], ["", ".1f"])
        score     MFLOP
        dot        16.8
        additive   33.6
    """
    print(format_table(header, rows, formats, gap))
