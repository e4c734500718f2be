"""Timing shared by the benchmarks: turns, the machine's own matrix-multiply rate, the machine line.

Ways of computing the same thing take turns for ``repeats`` rounds, the one that goes first
rotating each round, so that a machine drifting in speed, or the memory state one way leaves for
the next, is shared fairly (book/how_fast.md, "What we got wrong"). The median per way is reported.

Milliseconds do not carry from one machine to another; a fraction of the machine's own peak does.
:func:`matmul_way` is a reference way — one ``2048 x 2048 x 2048`` float32 matrix product, the
operation processors and BLAS libraries are tuned for — that the benchmarks time in the same
rounds as the implementations, at the same thread count, so a busy machine slows both alike.
Each implementation's rate (model FLOPs per second) divided by the matrix product's rate is the
fraction of the machine's peak it reaches. :func:`machine_line` names the processor and the
torch build the numbers belong to.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Callable

MATMUL_SIZE = 2048
MATMUL = "matmul"  # the name of the reference way in a table of timings


def median_interleaved(ways: dict[str, Callable[[], object]], repeats: int, units: int = 1) -> dict[str, float]:
    """Median seconds per call of each way (divided by ``units``: tokens per call, say), taking turns."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    times: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for r in range(repeats):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            start = time.perf_counter()
            ways[name]()
            times[name].append((time.perf_counter() - start) / units)
    return {name: statistics.median(t) for name, t in times.items()}


def matmul_flops(n: int = MATMUL_SIZE) -> float:
    """FLOPs of one n x n by n x n matrix product: n^2 dot products of length n, a multiply and an add each."""
    return 2.0 * n ** 3


def matmul_way(n: int = MATMUL_SIZE, device: str = "cpu") -> Callable[[], object]:
    """The reference way: one float32 ``n x n x n`` matrix product (warmed up once)."""
    import torch

    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device)
    b = torch.randn(n, n, generator=g).to(device)
    out = torch.empty(n, n, device=device)

    def run():
        torch.matmul(a, b, out=out)
        if out.is_cuda:
            torch.cuda.synchronize()

    run()
    return run


def attention_flops(batch: int, length: int, width: int, causal: bool = False, projections: int = 4,
                    backward: bool = True) -> float:
    """Model FLOPs of self-attention over ``length`` positions of ``width`` features (all heads together).

    Counted plainly: ``projections`` products with a ``width x width`` matrix per position
    (``2 width²`` each), plus ``Q Kᵀ`` and the weighted sum of ``V`` (``2 width`` per query-key pair
    each; with ``causal`` only the ``length (length + 1) / 2`` pairs kept). With ``backward``, three
    times the forward pass (the backward pass does about twice the forward's products).
    """
    for name, value in (("batch", batch), ("length", length), ("width", width)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if projections < 0:
        raise ValueError(f"projections must be 0 or more, got {projections}")
    pairs = length * (length + 1) / 2 if causal else length * length
    forward = 2 * projections * batch * length * width ** 2 + 4 * batch * pairs * width
    return 3 * forward if backward else forward


def gflops(flops: float, seconds: float) -> float:
    """Rate in GFLOP/s."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return flops / seconds / 1e9


def processor_name() -> str:
    """The processor: model name and, where Linux tells them, family/model, widest vector unit, clock, CPUs.

    Virtual machines often report only a brand ("AMD EPYC"); the family and model numbers, the
    vector instructions (AVX2 or AVX-512: up to twice the float32 work per cycle) and the clock
    tell two such machines apart.
    """
    info: dict[str, str] = {}
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key == "flags":
                    flags = set(value.split())
                else:
                    info.setdefault(key, value.strip())
    except OSError:
        pass
    name = info.get("model name") or info.get("hardware") or platform.processor() or platform.machine() \
        or "unknown processor"
    details = []
    if "cpu family" in info and "model" in info:
        details.append(f"family {info['cpu family']} model {info['model']}")
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags else ""
    if vector:
        details.append(vector)
    if info.get("cpu mhz"):
        details.append(f"{float(info['cpu mhz']) / 1000:.1f} GHz")
    label = " ".join(name.split()) + (f" ({', '.join(details)})" if details else "")
    return f"{label}, {os.cpu_count()} logical CPUs"


def torch_build() -> str:
    """torch's version and the build's math back ends (and CUDA's, with the GPU's name, when present)."""
    import torch

    parts = [f"torch {torch.__version__}"]
    if torch.cuda.is_available():
        parts.append(f"CUDA {torch.version.cuda} on {torch.cuda.get_device_name()}")
    else:
        parts.append("CPU build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} (no GPU seen)")
    parts.append(f"MKL {'yes' if torch.backends.mkl.is_available() else 'no'}")
    parts.append(f"oneDNN {'yes' if torch.backends.mkldnn.is_available() else 'no'}")
    return ", ".join(parts)


def machine_line() -> str:
    """One line for the head of a benchmark's output: processor, torch build, threads, load."""
    import torch

    return (f"machine: {processor_name()}; {torch_build()}; {torch.get_num_threads()} torch threads; "
            f"load average {os.getloadavg()[0]:.2f}")


def peak_line(seconds: float, n: int = MATMUL_SIZE) -> str:
    """The reference rate measured in this run, as printed under a table."""
    return (f"machine's matmul rate ({n}^3 float32, median over the same rounds): "
            f"{gflops(matmul_flops(n), seconds):.1f} GFLOP/s")
