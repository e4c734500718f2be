"""Greedy decoding with the key/value cache against without it: time per generated token.

A Transformer decoder writes one token per step. Without a cache every step runs the
decoder over the whole prefix again (step t costs attention over t queries and t keys in
every layer, so n tokens cost O(n^2) query rows); with the cache of chapter 7 each step
feeds only the newest token and reuses the keys and values of the earlier ones (one query
row per step). Both must produce the same tokens (checked here on every run).

The model is the book's translation Transformer (``ab.make_transformer``) with random
weights; the two ways are the package's ``ab.greedy_search`` (cache) and
``ab.greedy_without_cache``, on a source of 32 tokens, with no early stop. The two ways take turns for ``--repeats``
rounds (the first one rotating) and the median per way is printed with the ratio.

Usage::

    python benchmarks/decoding.py            # 64 and 256 tokens
    python benchmarks/decoding.py --quick    # 16 and 32 tokens, seconds
"""

from __future__ import annotations

import argparse
import os

import torch
from interleave import median_interleaved

import attention_book as ab

SRC_LEN = 32


def build(num_hiddens: int, num_blks: int, max_len: int):
    torch.manual_seed(0)
    model = ab.make_transformer(100, 100, num_hiddens=num_hiddens, ffn_num_hiddens=2 * num_hiddens, num_heads=4,
                                num_blks=num_blks, dropout=0.0, max_len=max_len).eval()
    src = torch.randint(3, 100, (1, SRC_LEN), generator=torch.Generator().manual_seed(1))
    return model, src, torch.tensor([SRC_LEN])


NO_EOS = 100  # an id outside the vocabulary (0..99): decoding never stops early


@torch.no_grad()
def with_cache(model, src, lens, steps: int, bos: int = 1) -> list[int]:
    return ab.greedy_search(model, src, lens, bos, NO_EOS, steps)[0][0]


@torch.no_grad()
def without_cache(model, src, lens, steps: int, bos: int = 1) -> list[int]:
    return ab.greedy_without_cache(model, src, lens, bos, NO_EOS, steps)[0]


def compare(steps: int, repeats: int, num_hiddens: int = 256, num_blks: int = 2) -> dict[str, float]:
    """Median seconds per generated token for each way; raises if they decode differently."""
    model, src, lens = build(num_hiddens, num_blks, max_len=max(steps, SRC_LEN) + 8)
    ways = {"cache": with_cache, "no cache": without_cache}
    tokens = {name: fn(model, src, lens, steps) for name, fn in ways.items()}  # warm-up, and the check
    if tokens["cache"] != tokens["no cache"]:
        raise AssertionError(f"the cache changed the decoded tokens: {tokens}")
    return median_interleaved({name: lambda fn=fn: fn(model, src, lens, steps) for name, fn in ways.items()},
                              repeats, units=steps)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short generations only (seconds)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = (16, 32) if args.quick else (64, 256)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, translation Transformer "
          f"(256 hidden, 4 heads, 2 blocks), source {SRC_LEN} tokens, greedy, median of {args.repeats}; "
          f"load average {os.getloadavg()[0]:.2f}")
    header = f"{'tokens':>6} | {'cache ms/token':>14} {'no cache ms/token':>17} | {'no cache / cache':>16}"
    print(header)
    print("-" * len(header))
    for steps in lengths:
        t = compare(steps, args.repeats)
        print(f"{steps:>6} | {t['cache'] * 1e3:>14.2f} {t['no cache'] * 1e3:>17.2f} | "
              f"{t['no cache'] / t['cache']:>16.2f}", flush=True)
    print("the decoded tokens were identical with and without the cache at every length")


if __name__ == "__main__":
    main()
