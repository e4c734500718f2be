"""How fast is the book's multi-head attention? Forward + backward time and peak memory.

Compares, at num_hiddens=256 and 8 heads, float32 on the CPU:

* ``package``  — ``ab.MultiHeadAttention`` in training mode (the fused
  ``scaled_dot_product_attention`` path);
* ``naive``    — a straightforward multi-head attention: separate q/k/v
  projections, ``Q Kᵀ / √d``, softmax, times ``V`` (the full score matrix is
  materialised);
* ``torch``    — ``torch.nn.MultiheadAttention`` (``batch_first=True``,
  ``need_weights=False``, so it may use its own fused path);
* ``d2l``      — d2l's ``MultiHeadAttention`` (the book's reference: bmm, softmax,
  bmm, every score matrix materialised; causal through per-query valid lengths,
  as d2l's decoder does it), only when d2l is installed (``make venv`` installs
  it; imported through ``tests/d2l_shim.py``). ``--no-d2l`` leaves it out.

``--mode`` picks what is timed: ``train`` (the default: modules in training
mode, forward + backward), ``eval`` (modules in eval mode, forward + backward:
what every validation pass that needs gradients and every fine-tuning step
with dropout off pays) or ``inference`` (eval mode, forward only, under
``torch.no_grad()``: evaluation, decoding, serving).

Each size is timed in this process: one warm-up per implementation, then
``--repeats`` rounds in which the three implementations take turns (the first
one rotating), each timing one forward + backward of ``out.sum()``; the median
per implementation is reported. Peak memory is
measured in a fresh subprocess per (implementation, size): the growth of the
process's peak resident set size (``VmHWM``, reset through
``/proc/self/clear_refs``) during one forward + backward, after inputs and
parameters exist. It is a whole-process measure (allocator slack included),
so small sizes read as noise; the trend in length is what matters.

Usage::

    python benchmarks/attention.py            # all sizes (a few minutes on 2 cores)
    python benchmarks/attention.py --quick    # small sizes only, seconds
    python benchmarks/attention.py --causal   # causal self-attention instead
    python benchmarks/attention.py --mode eval        # eval mode, forward + backward
    python benchmarks/attention.py --mode inference   # eval mode, forward only
    python benchmarks/attention.py --threads 1 --cpu-time   # work done, robust to a busy machine
    python benchmarks/attention.py --no-d2l   # without d2l's column even when it is installed

Timings on a shared machine are inflated by whatever else runs; run it when the
machine is quiet; more ``--repeats`` help.

**Across machines.** Beside the milliseconds, each row gives every implementation's rate in
GFLOP/s of *model* FLOPs and its fraction of the machine's own float32 matrix-multiply rate
(``interleave.matmul_way``: a 2048³ product, timed in the same rounds at the same thread count),
and the head names the processor and torch build. Model FLOPs are counted plainly, the same for
every implementation (what it does beyond them is its own cost): a forward pass is the four
``num_hiddens x num_hiddens`` projections, ``8 b n d²``, plus ``Q Kᵀ`` and the weighted sum of
``V``, ``2 b n² d`` each (with ``--causal`` only the ``n (n + 1) / 2`` query-key pairs kept);
forward + backward is three times the forward pass. At 8 x 512 that is 4.3 and 12.9 GFLOP.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from interleave import MATMUL, attention_flops, gflops, machine_line, matmul_flops, matmul_way, peak_line
from torch import nn
from torch.nn import functional as F

NUM_HIDDENS, NUM_HEADS = 256, 8
FULL_SIZES = [(32, 64), (8, 512), (2, 2048), (1, 4096)]
QUICK_SIZES = [(32, 64), (8, 256), (2, 512)]
BASE_IMPLS = ("package", "naive", "torch")
SHIM = Path(__file__).resolve().parents[1] / "tests" / "d2l_shim.py"
# d2l is an extra implementation when it is installed (found without importing it: ~1 s)
HAS_D2L = importlib.util.find_spec("d2l") is not None and SHIM.exists()
IMPLS = BASE_IMPLS + (("d2l",) if HAS_D2L else ())


def load_d2l():
    """``d2l.torch``, imported with the torchvision stand-in of ``tests/d2l_shim.py``."""
    spec = importlib.util.spec_from_file_location("d2l_shim", SHIM)
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    d2l = shim.load_d2l()
    if d2l is None:
        raise RuntimeError(shim.why_missing())
    return d2l


class NaiveMultiHead(nn.Module):
    """Textbook multi-head attention that materialises every score matrix."""

    def __init__(self, num_hiddens: int, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.W_q = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_k = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=False)

    def split(self, X):
        b, n, d = X.shape
        return X.reshape(b, n, self.num_heads, d // self.num_heads).permute(0, 2, 1, 3)

    def forward(self, X, causal: bool = False):
        q, k, v = self.split(self.W_q(X)), self.split(self.W_k(X)), self.split(self.W_v(X))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            n = X.shape[1]
            keep = torch.ones(n, n, dtype=torch.bool, device=X.device).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        b, h, n, d = out.shape
        return self.W_o(out.permute(0, 2, 1, 3).reshape(b, n, h * d))


MODES = ("train", "eval", "inference")


def build(impl: str, mode: str = "train", device: str = "cpu"):
    """The module (in the mode's train/eval state, on ``device``) and a ``call(X, causal)`` for one implementation."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    module, call = _build(impl)
    module.train(mode == "train").to(device)
    return module, call


def _build(impl: str):
    torch.manual_seed(0)
    if impl == "package":
        import attention_book as ab

        m = ab.MultiHeadAttention(NUM_HIDDENS, NUM_HEADS, dropout=0.0).train()
        return m, lambda X, causal: m(X, X, X, causal=causal)
    if impl == "naive":
        m = NaiveMultiHead(NUM_HIDDENS, NUM_HEADS).train()
        return m, lambda X, causal: m(X, causal=causal)
    if impl == "torch":
        m = nn.MultiheadAttention(NUM_HIDDENS, NUM_HEADS, bias=False, batch_first=True).train()

        def call(X, causal):
            if not causal:
                return m(X, X, X, need_weights=False)[0]
            n = X.shape[1]
            mask = nn.Transformer.generate_square_subsequent_mask(n, device=X.device)
            return m(X, X, X, need_weights=False, attn_mask=mask, is_causal=True)[0]

        return m, call
    if impl == "d2l":
        m = load_d2l().MultiHeadAttention(NUM_HIDDENS, NUM_HEADS, 0.0, bias=False).train()
        with torch.no_grad():  # d2l's layers are LazyLinear: one call gives them their weights
            m(*(torch.zeros(1, 1, NUM_HIDDENS),) * 3, None)

        def call(X, causal):
            # d2l's decoder masks the future with per-query lengths 1..n, built at every call
            lens = torch.arange(1, X.shape[1] + 1, device=X.device).repeat(X.shape[0], 1) if causal else None
            return m(X, X, X, lens)

        return m, call
    raise ValueError(f"impl must be one of {BASE_IMPLS + ('d2l',)}, got {impl!r}")


def model_flops(batch: int, length: int, causal: bool = False, mode: str = "train") -> float:
    """Model FLOPs of one timed step: four projections and attention, forward (+ backward unless inference)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    return attention_flops(batch, length, NUM_HIDDENS, causal, projections=4, backward=mode != "inference")


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``"8x512,2x2048"`` -> ``[(8, 512), (2, 2048)]``."""
    sizes = []
    for part in text.split(","):
        batch, sep, length = part.strip().lower().partition("x")
        if not sep or not batch.isdigit() or not length.isdigit() or int(batch) < 1 or int(length) < 1:
            raise argparse.ArgumentTypeError(f"sizes must look like 8x512,2x2048 (batch x length, both at least 1), "
                                             f"got {text!r}")
        sizes.append((int(batch), int(length)))
    return sizes


def short(impl: str) -> str:
    """A column label's short name for an implementation."""
    return "pkg" if impl == "package" else impl


def step(call, X, causal, mode: str = "train"):
    if mode == "inference":
        with torch.no_grad():
            call(X, causal)
        if X.is_cuda:
            torch.cuda.synchronize()
        return
    out = call(X, causal)
    out.sum().backward()
    if X.is_cuda:  # GPU work is queued: wait for it, or the clock measures only the queueing
        torch.cuda.synchronize()


def time_interleaved(impls, batch: int, length: int, causal: bool, repeats: int,
                     clock=time.perf_counter, mode: str = "train", matmul: bool = False,
                     device: str = "cpu") -> dict[str, float]:
    """Median seconds of one forward + backward per implementation, read from ``clock``.

    With ``matmul``, the machine's reference matrix product takes its turn in every round too,
    and its median is returned under ``interleave.MATMUL``.

    The implementations take turns: each round times every one of them once, and the
    starting one rotates from round to round. Timing them one after another instead
    (all runs of the first, then all of the second, ...) lets slow drifts of a shared
    machine, and the memory state one implementation leaves behind for the next, fall
    on one of them only: an earlier version of this script reported a 10% gap between
    two implementations that run the same kernels, and it vanished when interleaved.
    """
    built = {impl: build(impl, mode, device) for impl in impls}
    X = torch.randn(batch, length, NUM_HIDDENS, device=device, requires_grad=mode != "inference")
    for _module, call in built.values():
        step(call, X, causal, mode)  # warm-up (allocations, kernel choice)
    reference = matmul_way(device=device) if matmul else None
    names = list(impls) + ([MATMUL] if matmul else [])
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for i in range(len(names)):
            name = names[(r + i) % len(names)]
            if name == MATMUL:
                start = clock()
                reference()
                times[name].append(clock() - start)
                continue
            module, call = built[name]
            module.zero_grad(set_to_none=True)
            X.grad = None
            start = clock()
            step(call, X, causal, mode)
            times[name].append(clock() - start)
    return {impl: statistics.median(ts) for impl, ts in times.items()}


def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not found in /proc/self/status")


def _reset_peak() -> None:
    """Reset the kernel's peak-RSS counter (VmHWM) of this process (Linux)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_child(impl: str, batch: int, length: int, causal: bool, mode: str = "train") -> None:
    """Runs in a subprocess: print the peak RSS growth (MiB) of one timed step of ``mode``."""
    module, call = build(impl, mode)
    X = torch.randn(batch, length, NUM_HIDDENS, requires_grad=mode != "inference")
    before = _status_mib("VmRSS")
    _reset_peak()
    step(call, X, causal, mode)
    print(json.dumps({"peak_mib": _status_mib("VmHWM") - before}))


def peak_memory(impl: str, batch: int, length: int, causal: bool, mode: str = "train") -> float:
    cmd = ([sys.executable, __file__, "--child", impl, str(batch), str(length), "--mode", mode]
           + (["--causal"] if causal else []))
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_mib"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (seconds)")
    parser.add_argument("--causal", action="store_true", help="causal self-attention")
    parser.add_argument("--mode", choices=MODES, default="train",
                        help="train: forward+backward in training mode; eval: the same in eval mode; "
                             "inference: eval mode, forward only")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per size (median)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time with the process CPU clock instead of the wall clock: with --threads 1 this "
                             "measures the work done, nearly independent of other programs on a busy machine")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where to run (cuda: one GPU; peak memory is then not measured)")
    parser.add_argument("--sizes", type=parse_sizes, default=None, metavar="BxN,...",
                        help="batch x length pairs to time instead of the preset ones, e.g. 8x512,2x2048")
    parser.add_argument("--no-d2l", action="store_true", help="leave d2l's implementation out even if installed")
    parser.add_argument("--child", nargs=3, metavar=("IMPL", "BATCH", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _peak_child(args.child[0], int(args.child[1]), int(args.child[2]), args.causal, args.mode)
        return
    sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            parser.error(f"--device cuda: torch {torch.__version__} sees no CUDA GPU here")
        if args.cpu_time:
            parser.error("--cpu-time measures the CPU's work; on a GPU use the wall clock")
        args.no_memory = True  # the memory columns measure the process's resident memory (CPU)
    impls = BASE_IMPLS if args.no_d2l else IMPLS
    extra = [impl for impl in impls if impl not in BASE_IMPLS]
    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.cpu_time else time.perf_counter
    print(machine_line())
    print(f"{'CPU' if args.cpu_time else 'wall'} clock, num_hiddens={NUM_HIDDENS}, "
          f"heads={NUM_HEADS}, float32 {args.device.upper()}, {'causal' if args.causal else 'no mask'}, "
          f"mode {args.mode}, median of {args.repeats} "
          f"{'forward' if args.mode == 'inference' else 'forward+backward'} runs; "
          f"load average {os.getloadavg()[0]:.2f}")
    if not extra:
        print("d2l: " + ("left out (--no-d2l)" if HAS_D2L else "not installed, so no d2l column (make venv installs it)"))
    header = (f"{'batch x len':>12} | {'package ms':>10} {'naive ms':>9} {'torch ms':>9}"
              + "".join(f" {impl + ' ms':>9}" for impl in extra)
              + f" | {'naive/pkg':>9} {'torch/pkg':>9}" + "".join(f" {impl + '/pkg':>9}" for impl in extra)
              + f" | {'GFLOP':>6} {'matmul GF/s':>11} |" + "".join(f" {short(impl) + ' GF/s':>10}" for impl in impls)
              + " |" + "".join(f" {short(impl) + ' %mm':>9}" for impl in impls))
    if not args.no_memory:
        header += f" | {'pkg MiB':>8} {'naive MiB':>9} {'torch MiB':>9}" + "".join(f" {impl + ' MiB':>9}" for impl in extra)
    print(header)
    print("-" * len(header))
    peaks: list[float] = []
    for batch, length in sizes:
        t = time_interleaved(impls, batch, length, args.causal, args.repeats, clock, args.mode, matmul=True,
                             device=args.device)
        flops = model_flops(batch, length, args.causal, args.mode)
        peak = gflops(matmul_flops(), t[MATMUL])
        peaks.append(t[MATMUL])
        row = (f"{batch:>5} x {length:<5}| {t['package'] * 1e3:>10.1f} {t['naive'] * 1e3:>9.1f} "
               f"{t['torch'] * 1e3:>9.1f}" + "".join(f" {t[impl] * 1e3:>9.1f}" for impl in extra)
               + f" | {t['naive'] / t['package']:>9.2f} {t['torch'] / t['package']:>9.2f}"
               + "".join(f" {t[impl] / t['package']:>9.2f}" for impl in extra)
               + f" | {flops / 1e9:>6.2f} {peak:>11.1f} |"
               + "".join(f" {gflops(flops, t[impl]):>10.1f}" for impl in impls)
               + " |" + "".join(f" {100 * gflops(flops, t[impl]) / peak:>9.1f}" for impl in impls))
        if not args.no_memory:
            mem = {impl: peak_memory(impl, batch, length, args.causal, args.mode) for impl in impls}
            row += (f" | {mem['package']:>8.1f} {mem['naive']:>9.1f} {mem['torch']:>9.1f}"
                    + "".join(f" {mem[impl]:>9.1f}" for impl in extra))
        print(row, flush=True)
    print(peak_line(statistics.median(peaks)) + "; GF/s: model GFLOP per second; %mm: percent of that rate")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
