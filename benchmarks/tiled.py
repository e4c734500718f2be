"""Tiled attention in plain PyTorch against the explicit path and PyTorch's fused kernel: time and memory.

One forward + backward pass (the gradient of ``out.sum()``) of causal self-attention, batch 1,
``--heads`` heads of size ``--head-dim``, float32 on the CPU, for three implementations of the same
numbers:

* **explicit** — ``ab.attend(..., need_weights=True)``: the (heads, n, n) weights are formed and kept
  for the backward pass;
* **fused** — ``torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)``;
* **tiled** — ``ab.tiled_attention(..., causal=True)``: chapter 10's FlashAttention-style loop over
  tiles of ``--block`` queries x ``--block`` keys in Python, skipping the tiles above the diagonal, and
  recomputing the weights tile by tile in the backward pass.

Memory is the peak of the tensor bytes alive during the pass (``ab.PeakMemory``: deterministic, the
same on every run; buffers a fused kernel uses inside one call are not seen). Time: the three take
turns for ``--repeats`` rounds (the first one rotating) and the median is printed with the ratios to
the fused kernel. Every length also checks that the tiled output matches the fused one.

Each row also gives the rate of each implementation in GFLOP/s of model FLOPs (``Q Kᵀ`` and the
weighted sum of ``V`` over the kept query-key pairs, forward + backward counted as three forward
passes: ``interleave.attention_flops``) and its percentage of the machine's float32 matrix-multiply
rate, a 2048³ product timed in the same rounds; the head names the processor and torch build.

Usage::

    python benchmarks/tiled.py            # lengths 512 .. 4096
    python benchmarks/tiled.py --quick    # 128 and 256, seconds
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch
from interleave import MATMUL, attention_flops, gflops, machine_line, matmul_flops, matmul_way, median_interleaved, peak_line
from torch.nn import functional as F

import attention_book as ab


def implementations(block: int):
    return {
        "explicit": lambda q, k, v: ab.attend(q, k, v, causal=True, need_weights=True)[0],
        "fused": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "tiled": lambda q, k, v: ab.tiled_attention(q, k, v, causal=True, block_q=block, block_k=block),
    }


def inputs(n: int, heads: int, head_dim: int):
    g = torch.Generator().manual_seed(n)
    return [torch.randn(1, heads, n, head_dim, generator=g).requires_grad_() for _ in range(3)]


def measure(n: int, heads: int, head_dim: int, block: int, repeats: int) -> tuple[dict, dict]:
    """(median seconds, peak bytes) per implementation at length n; raises if tiled != fused."""
    impls = implementations(block)
    q, k, v = inputs(n, heads, head_dim)
    torch.testing.assert_close(impls["tiled"](q, k, v), impls["fused"](q, k, v), atol=1e-4, rtol=1e-3)

    def step(fn):
        fn(q, k, v).sum().backward()
        q.grad = k.grad = v.grad = None

    memory = {name: ab.peak_memory(lambda fn=fn: fn(q, k, v).sum().backward()) for name, fn in impls.items()}
    q.grad = k.grad = v.grad = None
    for fn in impls.values():  # warm-up
        step(fn)
    ways = {name: lambda fn=fn: step(fn) for name, fn in impls.items()}
    ways[MATMUL] = matmul_way()
    return median_interleaved(ways, repeats), memory


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short sequences only (seconds)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--block", type=int, default=128, help="tile size (queries and keys)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = (128, 256) if args.quick else (512, 1024, 2048, 4096)
    print(machine_line())
    print(f"causal self-attention, batch 1, "
          f"{args.heads} heads x {args.head_dim}, tiles of {args.block}, forward + backward, median of "
          f"{args.repeats}; load average {os.getloadavg()[0]:.2f}")
    header = (f"{'batch x length':>14} | {'explicit ms':>11} {'fused ms':>9} {'tiled ms':>9} | "
              f"{'explicit/fused':>14} {'tiled/fused':>11} | {'explicit MiB':>12} {'fused MiB':>9} {'tiled MiB':>9} | {'GFLOP':>6} {'matmul GF/s':>11} | "
              f"{'explicit GF/s':>13} {'fused GF/s':>10} {'tiled GF/s':>10} | {'explicit %mm':>12} {'fused %mm':>9} "
              f"{'tiled %mm':>9}")
    print(header)
    print("-" * len(header))
    peaks = []
    for n in lengths:
        t, m = measure(n, args.heads, args.head_dim, args.block, args.repeats)
        ms = {name: seconds * 1e3 for name, seconds in t.items()}
        flops = attention_flops(1, n, args.heads * args.head_dim, causal=True, projections=0)
        peak = gflops(matmul_flops(), t[MATMUL])
        peaks.append(t[MATMUL])
        rates = {name: gflops(flops, t[name]) for name in ("explicit", "fused", "tiled")}
        print(f"{'1 x ' + str(n):>14} | {ms['explicit']:>11.1f} {ms['fused']:>9.1f} {ms['tiled']:>9.1f} | "
              f"{t['explicit'] / t['fused']:>14.2f} {t['tiled'] / t['fused']:>11.2f} | "
              f"{m['explicit'] / 2**20:>12.2f} {m['fused'] / 2**20:>9.2f} {m['tiled'] / 2**20:>9.2f} | "
              f"{flops / 1e9:>6.2f} {peak:>11.1f} | {rates['explicit']:>13.1f} {rates['fused']:>10.1f} "
              f"{rates['tiled']:>10.1f} | {100 * rates['explicit'] / peak:>12.1f} {100 * rates['fused'] / peak:>9.1f} "
              f"{100 * rates['tiled'] / peak:>9.1f}", flush=True)
    print(peak_line(statistics.median(peaks)))
    print("the tiled output matched the fused kernel's at every length")


if __name__ == "__main__":
    main()
