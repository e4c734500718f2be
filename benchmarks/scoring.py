"""What do the four scoring functions cost? (exercise 11.3.3)

Times dot-product, additive, distance and bilinear attention (the book's
modules, weights materialised for all four so the comparison is fair; add
``--fused`` to let the three dot-product-like scores use PyTorch's fused
kernel) as the number of keys grows at a fixed feature size, and as the
feature size grows at a fixed number of keys (queries = keys, values of the
feature size, additive attention with as many hidden units as features).
Prints one table per sweep: milliseconds per call, the ratio to dot-product
attention, and the counted MFLOP and MB of memory traffic per example (one
sequence, not the batch) from
``ab.scoring_flops``.

Usage::

    python benchmarks/scoring.py            # CPU float32, a minute or so on 2 cores
    python benchmarks/scoring.py --quick    # small sizes, seconds
    python benchmarks/scoring.py --backward # forward + backward

The chapter draws the same measurement at a small size with
``ab.measure_scoring_costs`` + ``ab.scoring_costs_figure``. Timings on a shared
machine are inflated by whatever else runs; each entry is the best of
``--repeats`` calls, on one thread unless ``--threads`` says otherwise.
"""

from __future__ import annotations

import argparse
import os

import torch

import attention_book as ab


def print_sweep(rows, sweep: str) -> None:
    sub = [r for r in rows if r["sweep"] == sweep]
    xkey = "num_keys" if sweep == "keys" else "dim"
    fixed = f"d = {sub[0]['dim']}" if sweep == "keys" else f"m = {sub[0]['num_keys']}"
    kinds = list(dict.fromkeys(r["kind"] for r in sub))
    xs = sorted({r[xkey] for r in sub})
    by = {(r["kind"], r[xkey]): r for r in sub}
    print(f"\ngrowing {'number of keys m (= queries)' if sweep == 'keys' else 'feature size d'} at {fixed}")
    head = f"{xkey:>9} | " + " ".join(f"{k + ' ms':>12}" for k in kinds) + " | " + " ".join(
        f"{k + '/dot':>12}" for k in kinds[1:]) + " | " + " ".join(f"{k[:3] + ' MF, MB':>15}" for k in kinds)
    print(head)
    print("-" * len(head))
    for x in xs:
        t = [by[k, x]["seconds"] * 1e3 for k in kinds]
        cost = " ".join(f"{by[k, x]['flops'] / 1e6:>7.2f},{by[k, x]['bytes'] / 1e6:>7.2f}" for k in kinds)
        print(f"{x:>9} | " + " ".join(f"{v:>12.3f}" for v in t) + " | "
              + " ".join(f"{v / t[0]:>12.2f}" for v in t[1:]) + " | " + cost)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (seconds)")
    parser.add_argument("--backward", action="store_true", help="time forward + backward")
    parser.add_argument("--fused", action="store_true", help="fused kernel for dot, distance and bilinear")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per entry (the best is kept)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads while timing (default 1)")
    args = parser.parse_args(argv)
    if args.quick:
        keys, dims, fixed_dim, fixed_keys = (32, 64, 128, 256), (8, 16, 32, 64), 32, 128
    else:
        keys, dims, fixed_dim, fixed_keys = (64, 128, 256, 512, 1024), (16, 32, 64, 128, 256), 64, 256
    print(f"torch {torch.__version__}, {args.threads} thread(s), float32 CPU, batch {args.batch}, "
          f"{'forward+backward' if args.backward else 'forward'}, {'fused' if args.fused else 'weights materialised'}, "
          f"best of {args.repeats}; load average {os.getloadavg()[0]:.2f}")
    rows = ab.measure_scoring_costs(key_counts=keys, dims=dims, fixed_dim=fixed_dim, fixed_keys=fixed_keys,
                                    repeats=args.repeats, batch=args.batch, backward=args.backward, fused=args.fused,
                                    num_threads=args.threads)
    print_sweep(rows, "keys")
    print_sweep(rows, "dim")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
