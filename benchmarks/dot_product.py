"""DotProductAttention against a plain matmul–softmax–matmul reference: forward + backward time.

For a few (batch, queries = keys, d) sizes, float32 on the CPU, with and without
valid lengths, this times one forward + backward of ``out.sum()`` for

* ``fast``   — ``ab.DotProductAttention`` in training mode (the fused
  ``scaled_dot_product_attention`` kernel);
* ``weights``— the same module with ``need_weights=True`` (explicit softmax,
  keeps ``attention_weights`` for plots);
* ``plain``  — ``softmax(Q Kᵀ / √d + mask) V`` written out with ``torch.bmm``.

and prints the ratios plain/fast and plain/weights (above 1 = the package is
faster). Each entry is the best of ``--repeats`` runs after two warm-ups, all in
one process, on one thread unless ``--threads`` says otherwise. Timings on a
shared machine are inflated by whatever else runs.

Usage::

    python benchmarks/dot_product.py
    python benchmarks/dot_product.py --quick
"""

from __future__ import annotations

import argparse
import math
import os

import torch
from torch.nn import functional as F

import attention_book as ab

SIZES = [(32, 32, 64), (16, 128, 64), (4, 512, 64), (2, 1024, 64)]
QUICK_SIZES = [(32, 32, 64), (8, 128, 64)]


def plain_attention(q, k, v, valid_lens=None):
    scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    if valid_lens is not None:
        pad = torch.arange(k.shape[1])[None, None, :] >= valid_lens[:, None, None]
        scores = scores.masked_fill(pad, float("-inf"))
    return torch.bmm(F.softmax(scores, dim=-1), v)


def step_of(fn, q, k, v):
    """One forward + backward of ``fn()``, gradients cleared first."""
    def step():
        for t in (q, k, v):
            t.grad = None
        fn().sum().backward()

    return step


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1: steadier on a busy machine)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32 CPU, forward+backward, "
          f"best of {args.repeats}; load average {os.getloadavg()[0]:.2f}")
    head = (f"{'batch x n x d':>16} {'mask':>5} | {'fast ms':>8} {'weights ms':>10} {'plain ms':>9} | "
            f"{'plain/fast':>10} {'plain/weights':>13}")
    print(head)
    print("-" * len(head))
    fast = ab.DotProductAttention().train()
    weights = ab.DotProductAttention(need_weights=True).train()
    for batch, n, d in QUICK_SIZES if args.quick else SIZES:
        torch.manual_seed(0)
        q, k, v = (torch.randn(batch, n, d, requires_grad=True) for _ in range(3))
        for lens in (None, torch.randint(n // 2, n + 1, (batch,))):
            t = {name: ab.models.scoring.best_time(step_of(lambda m=m: m(q, k, v, lens), q, k, v), args.repeats)
                 for name, m in (("fast", fast), ("weights", weights))}
            t["plain"] = ab.models.scoring.best_time(step_of(lambda: plain_attention(q, k, v, lens), q, k, v), args.repeats)
            torch.testing.assert_close(fast(q, k, v, lens), plain_attention(q, k, v, lens), atol=1e-5, rtol=1e-4)
            print(f"{batch:>4} x {n:>4} x {d:>3} {'yes' if lens is not None else 'no':>5} | "
                  f"{t['fast'] * 1e3:>8.2f} {t['weights'] * 1e3:>10.2f} {t['plain'] * 1e3:>9.2f} | "
                  f"{t['plain'] / t['fast']:>10.2f} {t['plain'] / t['weights']:>13.2f}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
