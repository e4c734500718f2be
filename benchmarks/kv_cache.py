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

Each row also gives each way's rate in GFLOP/s of model FLOPs per generated token (the same count
for all four ways with the same key/value heads: what one new token needs, :func:`token_flops`;
the work the run without a cache repeats is not counted) and its percentage of the machine's
float32 matrix-multiply rate, a 2048³ product timed in the same rounds. Decoding a few sequences
at a time reads every weight once per token, so it reaches a small fraction of that rate.

Usage::

    python benchmarks/kv_cache.py            # prompts of 256 and 1024 tokens
    python benchmarks/kv_cache.py --quick    # 32 and 64 tokens, seconds
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch
from interleave import MATMUL, gflops, machine_line, matmul_flops, matmul_way, median_interleaved, peak_line

import attention_book as ab

VOCAB, HEADS = 1000, 8


def build(num_kv_heads: int, hidden: int, layers: int, max_len: int):
    torch.manual_seed(0)
    return ab.TransformerDecoder(VOCAB, hidden, 4 * hidden, HEADS, layers, 0.0, max_len=max_len, norm_first=True,
                                 cross_attention=False, num_kv_heads=num_kv_heads).eval()


def token_flops(hidden: int, layers: int, num_kv_heads: int, context: float, batch: int = 1,
                vocab: int = VOCAB, heads: int = HEADS) -> float:
    """Model FLOPs of one generated token per sequence times ``batch``, attending to ``context`` positions.

    Per block: the query and output projections (``2 hidden²`` each), the key and value projections
    of the new position (``2 hidden x kv_width`` each, ``kv_width = hidden x num_kv_heads / heads``),
    the scores and the weighted sum over the context (``2 hidden`` per position each), the
    feed-forward network (``hidden -> 4 hidden -> hidden``: ``16 hidden²``); then the output layer
    (``2 hidden x vocab``).
    """
    for name, value in (("hidden", hidden), ("layers", layers), ("num_kv_heads", num_kv_heads), ("batch", batch)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    kv_width = hidden * num_kv_heads / heads
    block = 4 * hidden ** 2 + 4 * hidden * kv_width + 4 * hidden * context + 16 * hidden ** 2
    return batch * (layers * block + 2 * hidden * vocab)


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
    ways[MATMUL] = matmul_way()
    times = median_interleaved(ways, args.repeats, units=args.steps)
    times[MATMUL] *= args.steps  # one product per turn, not per token
    return times, sizes


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
    print(machine_line())
    print(f"decoder-only Transformer ({args.hidden} "
          f"hidden, {HEADS} heads, {args.layers} blocks), batch {args.batch}, {args.steps} tokens generated, greedy, "
          f"median of {args.repeats}; load average {os.getloadavg()[0]:.2f}")
    header = (f"{'batch x prompt':>14} | {'no cache':>8} {'MHA':>7} {'GQA':>7} {'MQA':>7} ms/token | "
              f"{'no cache/MHA':>12} {'MHA/GQA':>7} {'MHA/MQA':>7} | {'MHA MiB':>7} {'GQA MiB':>7} {'MQA MiB':>7} | "
              f"{'matmul GF/s':>11} | {'no cache':>8} {'MHA':>6} {'GQA':>6} {'MQA':>6} GF/s | "
              f"{'no cache':>8} {'MHA':>6} {'GQA':>6} {'MQA':>6} %mm")
    print(header)
    print("-" * len(header))
    peaks = []
    kv = {"no cache": HEADS, "MHA": HEADS, "GQA": 2, "MQA": 1}
    for n in lengths:
        t, s = compare(n, args)
        ms = {name: value * 1e3 for name, value in t.items()}
        peak = gflops(matmul_flops(), t[MATMUL])
        peaks.append(t[MATMUL])
        context = n + (args.steps - 1) / 2  # the mean length attended to over the generated tokens
        rates = {name: gflops(token_flops(args.hidden, args.layers, kv[name], context, args.batch), t[name])
                 for name in kv}
        print(f"{str(args.batch) + ' x ' + str(n):>14} | {ms['no cache']:>8.2f} {ms['MHA']:>7.2f} {ms['GQA']:>7.2f} "
              f"{ms['MQA']:>7.2f}          | {t['no cache'] / t['MHA']:>12.2f} {t['MHA'] / t['GQA']:>7.2f} "
              f"{t['MHA'] / t['MQA']:>7.2f} | {s['MHA'] / 2**20:>7.2f} {s['GQA'] / 2**20:>7.2f} "
              f"{s['MQA'] / 2**20:>7.2f} | {peak:>11.1f} | {rates['no cache']:>8.2f} {rates['MHA']:>6.2f} "
              f"{rates['GQA']:>6.2f} {rates['MQA']:>6.2f}      | {100 * rates['no cache'] / peak:>8.2f} "
              f"{100 * rates['MHA'] / peak:>6.2f} {100 * rates['GQA'] / peak:>6.2f} {100 * rates['MQA'] / peak:>6.2f}",
              flush=True)
    print(peak_line(statistics.median(peaks)) + "; GF/s: model GFLOP per second; %mm: percent of that rate")
    print("cache sizes equal the formula 2 x layers x batch x length x kv heads x head size x 4 bytes; "
          "the tokens were the same with and without the cache")


if __name__ == "__main__":
    main()
