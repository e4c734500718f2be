"""Decoding with a key/value cache: its size, and the time per token with and without it, MHA vs GQA vs MQA.

A decoder-only Transformer (``ab.TransformerDecoder(..., cross_attention=False)``: ``--hidden``
features, 8 heads, ``--layers`` pre-norm blocks, random weights) continues a prompt of ``n`` random
tokens (batch ``--batch``) greedily by ``--steps`` tokens, four ways:

* **no cache** — every step runs the decoder over the whole sequence so far (8 key/value heads);
* **MHA** — with the cache, 8 key/value heads (one per query head);
* **GQA** — with the cache, 2 key/value heads, each shared by 4 query heads;
* **MQA** — with the cache, 1 key/value head shared by all 8.

The four take turns for ``--repeats`` rounds (the first one rotating) and the median seconds per
generated token are printed with the ratios. The cache sizes are measured from the decoder's state
(``ab.cache_bytes``) and checked against the formula ``ab.kv_cache_bytes``; the tokens decoded with
and without the cache are checked to be the same.

Usage::

    python benchmarks/kv_cache.py            # prompts of 256 and 1024 tokens
    python benchmarks/kv_cache.py --quick    # 32 and 64 tokens, seconds
"""

from __future__ import annotations

import argparse
import os

import torch
from interleave import median_interleaved

import attention_book as ab

VOCAB, HEADS = 1000, 8


def build(num_kv_heads: int, hidden: int, layers: int, max_len: int):
    torch.manual_seed(0)
    return ab.TransformerDecoder(VOCAB, hidden, 4 * hidden, HEADS, layers, 0.0, max_len=max_len, norm_first=True,
                                 cross_attention=False, num_kv_heads=num_kv_heads).eval()


def compare(n: int, args) -> tuple[dict[str, float], dict[str, int]]:
    """Median seconds per token per way, and the cache bytes per way after the run."""
    prompt = torch.randint(0, VOCAB, (args.batch, n), generator=torch.Generator().manual_seed(n))
    models = {"MHA": build(HEADS, args.hidden, args.layers, n + args.steps + 1)}
    models["GQA"] = build(2, args.hidden, args.layers, n + args.steps + 1)
    models["MQA"] = build(1, args.hidden, args.layers, n + args.steps + 1)
    ways = {
        "no cache": lambda: ab.greedy_generate(models["MHA"], prompt, args.steps, use_cache=False),
        "MHA": lambda: ab.greedy_generate(models["MHA"], prompt, args.steps),
        "GQA": lambda: ab.greedy_generate(models["GQA"], prompt, args.steps),
        "MQA": lambda: ab.greedy_generate(models["MQA"], prompt, args.steps),
    }
    results = {name: fn() for name, fn in ways.items()}  # warm-up, and the checks
    if not torch.equal(results["no cache"][0], results["MHA"][0]):
        raise AssertionError("the cache changed the decoded tokens")
    head_dim = args.hidden // HEADS
    sizes = {}
    for name, kv in (("MHA", HEADS), ("GQA", 2), ("MQA", 1)):
        sizes[name] = ab.cache_bytes(results[name][1])
        formula = ab.kv_cache_bytes(args.layers, args.batch, n + args.steps - 1, kv, head_dim)
        if sizes[name] != formula:
            raise AssertionError(f"{name}: measured cache {sizes[name]} bytes, formula {formula}")
    return median_interleaved(ways, args.repeats, units=args.steps), sizes


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short prompts only (seconds)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (median)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=32, help="tokens generated per run")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    lengths = (32, 64) if args.quick else (256, 1024)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, decoder-only Transformer ({args.hidden} "
          f"hidden, {HEADS} heads, {args.layers} blocks), batch {args.batch}, {args.steps} tokens generated, greedy, "
          f"median of {args.repeats}; load average {os.getloadavg()[0]:.2f}")
    header = (f"{'batch x prompt':>14} | {'no cache':>8} {'MHA':>7} {'GQA':>7} {'MQA':>7} ms/token | "
              f"{'no cache/MHA':>12} {'MHA/GQA':>7} {'MHA/MQA':>7} | {'MHA MiB':>7} {'GQA MiB':>7} {'MQA MiB':>7}")
    print(header)
    print("-" * len(header))
    for n in lengths:
        t, s = compare(n, args)
        ms = {name: value * 1e3 for name, value in t.items()}
        print(f"{str(args.batch) + ' x ' + str(n):>14} | {ms['no cache']:>8.2f} {ms['MHA']:>7.2f} {ms['GQA']:>7.2f} "
              f"{ms['MQA']:>7.2f}          | {t['no cache'] / t['MHA']:>12.2f} {t['MHA'] / t['GQA']:>7.2f} "
              f"{t['MHA'] / t['MQA']:>7.2f} | {s['MHA'] / 2**20:>7.2f} {s['GQA'] / 2**20:>7.2f} "
              f"{s['MQA'] / 2**20:>7.2f}", flush=True)
    print("cache sizes equal the formula 2 x layers x batch x length x kv heads x head size x 4 bytes; "
          "the tokens were the same with and without the cache")


if __name__ == "__main__":
    main()
