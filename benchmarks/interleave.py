"""Timing by turns, shared by benchmarks/decoding.py, tiled.py and kv_cache.py.

Ways of computing the same thing take turns for ``repeats`` rounds, the one that goes first
rotating each round, so that a machine drifting in speed, or the memory state one way leaves for
the next, is shared fairly (book/how_fast.md, "What we got wrong"). The median per way is reported.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable


def median_interleaved(ways: dict[str, Callable[[], object]], repeats: int, units: int = 1) -> dict[str, float]:
    """Median seconds per call of each way (divided by ``units``: tokens per call, say), taking turns."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for r in range(repeats):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            start = time.perf_counter()
            ways[name]()
            times[name].append((time.perf_counter() - start) / units)
    return {name: statistics.median(t) for name, t in times.items()}
