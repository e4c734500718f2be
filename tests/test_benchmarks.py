"""The benchmark scripts still run and print complete tables (no timing is asserted here).

Speed is judged by reading what ``benchmarks/*.py`` print (see book/how_fast.md), never by
a timed assert; these tests only keep the scripts from rotting as the package changes.
"""

import argparse
import importlib
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
ROW = re.compile(r"^\s*\d+\s*x\s*\d+")  # a table row starts with "batch x ..."


def bench_module(name: str):
    """A module of benchmarks/, imported as the scripts import one another (their folder on the path)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def attention_bench():
    return bench_module("attention")


# the attention benchmark adds d2l's implementation (a time and a ratio per row) when d2l is installed;
# then the model GFLOP, the matmul rate, and a rate and a fraction of the matmul rate per implementation
ATTENTION_IMPLS = attention_bench().IMPLS
ATTENTION_VALUES = 5 + 2 * (len(ATTENTION_IMPLS) - 3) + 2 + 2 * len(ATTENTION_IMPLS)


def run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+\.\d+", line)]


def check_rows(out: str, expected_rows: int, values_per_row: int) -> None:
    rows = [line for line in out.splitlines() if ROW.match(line)]
    assert len(rows) == expected_rows, out
    for line in rows:
        vals = numbers(line)
        assert len(vals) == values_per_row, line
        assert all(math.isfinite(v) and v > 0 for v in vals), line


def check_machine(out: str) -> None:
    """The head names the processor and torch build; the foot gives the matmul rate measured."""
    assert re.search(r"^machine: .+, \d+ logical CPUs; torch \S+", out, re.M), out
    assert re.search(r"matmul rate \(2048\^3 float32.*\): \d+\.\d GFLOP/s", out), out


def test_attention_benchmark_quick_table():
    # 3 sizes; 3 times + 2 ratios each, and d2l's time and ratio when installed (memory tested below)
    out = run("attention.py", "--quick", "--repeats", "1", "--no-memory")
    check_rows(out, 3, ATTENTION_VALUES)
    check_machine(out)
    assert "pkg GF/s" in out and "pkg %mm" in out


def test_attention_model_flops_as_counted_in_the_issue():
    # forward = 4 projections + Q K^T + weights x V; forward + backward = 3 x forward
    bench = attention_bench()
    assert bench.model_flops(8, 512, mode="inference") == pytest.approx(4.295e9, rel=1e-3)
    assert bench.model_flops(8, 512, mode="train") == pytest.approx(12.885e9, rel=1e-3)
    assert bench.model_flops(8, 512, mode="eval") == bench.model_flops(8, 512, mode="train")
    # causal: only the n (n + 1) / 2 kept pairs of the two attention products
    n = 512
    attention_part = 4 * 8 * 256 * n * n
    assert bench.model_flops(8, n, causal=True, mode="inference") == pytest.approx(
        4.294967296e9 - attention_part + attention_part * (n + 1) / (2 * n))
    with pytest.raises(ValueError, match="mode"):
        bench.model_flops(8, 512, mode="training")


def test_attention_benchmark_sizes_option():
    bench = attention_bench()
    assert bench.parse_sizes("8x512, 2X2048") == [(8, 512), (2, 2048)]
    for bad in ("8x", "x512", "8*512", "0x64", "8x512,"):
        with pytest.raises(argparse.ArgumentTypeError, match="sizes"):
            bench.parse_sizes(bad)
    out = run("attention.py", "--sizes", "2x16", "--repeats", "1", "--no-memory")
    check_rows(out, 1, ATTENTION_VALUES)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_attention_benchmark_on_cuda_without_a_gpu_says_so():
    done = subprocess.run([sys.executable, str(BENCH / "attention.py"), "--device", "cuda", "--quick"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "sees no CUDA GPU" in done.stderr, done.stderr


def test_flop_counts_and_rates_reject_bad_input():
    il = bench_module("interleave")
    assert il.matmul_flops(2048) == 2 * 2048 ** 3
    assert il.gflops(2e9, 0.5) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="seconds"):
        il.gflops(1.0, 0.0)
    with pytest.raises(ValueError, match="length"):
        il.attention_flops(1, 0, 64)
    with pytest.raises(ValueError, match="projections"):
        il.attention_flops(1, 8, 64, projections=-1)
    with pytest.raises(ValueError, match="repeats"):
        il.median_interleaved({"a": lambda: None}, 0)


def test_processor_name_is_specific():
    name = bench_module("interleave").processor_name()
    assert re.search(r"\S.*, \d+ logical CPUs$", name), name


def test_attention_benchmark_causal_quick_table():
    out = run("attention.py", "--quick", "--repeats", "1", "--no-memory", "--causal")
    check_rows(out, 3, ATTENTION_VALUES)
    assert ("d2l ms" in out and "d2l/pkg" in out) == ("d2l" in ATTENTION_IMPLS)


def test_attention_benchmark_without_d2l_keeps_the_three_columns():
    out = run("attention.py", "--quick", "--repeats", "1", "--no-memory", "--no-d2l")
    assert "d2l ms" not in out and "d2l GF/s" not in out
    check_rows(out, 3, 5 + 2 + 2 * 3)


@pytest.mark.parametrize("mode", ["eval", "inference"])
def test_attention_benchmark_eval_and_inference_tables(mode):
    out = run("attention.py", "--quick", "--repeats", "1", "--no-memory", "--mode", mode)
    assert f"mode {mode}" in out
    check_rows(out, 3, ATTENTION_VALUES)


@pytest.mark.parametrize("impl", ATTENTION_IMPLS)
def test_attention_benchmark_memory_child(impl):
    out = run("attention.py", "--child", impl, "2", "64")
    peak = json.loads(out.strip().splitlines()[-1])["peak_mib"]
    assert math.isfinite(peak) and peak >= 0


def test_attention_benchmark_interleaves_every_implementation():
    bench = attention_bench()
    t = bench.time_interleaved(bench.IMPLS, 2, 16, False, repeats=2)
    assert set(t) == set(bench.IMPLS) and all(v > 0 for v in t.values())


def test_dot_product_benchmark_quick_table():
    # 2 sizes x (no mask, mask); 3 times + 2 ratios each
    check_rows(run("dot_product.py", "--quick", "--repeats", "1"), 4, 5)


def test_scoring_benchmark_quick_runs():
    out = run("scoring.py", "--quick", "--repeats", "1")
    assert "additive/dot" in out and "growing number of keys" in out and "growing feature size" in out


def test_decoding_benchmark_quick_table():
    out = run("decoding.py", "--quick", "--repeats", "1")
    rows = [line for line in out.splitlines() if re.match(r"^\s*\d+ \|", line)]
    assert len(rows) == 2, out
    for line in rows:
        vals = numbers(line)
        assert len(vals) == 3 and all(math.isfinite(v) and v > 0 for v in vals), line
    assert "identical with and without the cache" in out


def test_tiled_benchmark_quick_table():
    out = run("tiled.py", "--quick", "--repeats", "1")
    # 3 times, 2 ratios, 3 memories, model GFLOP, matmul rate, 3 rates and 3 fractions per length
    check_rows(out, 2, 16)
    check_machine(out)
    assert "matched the fused kernel's at every length" in out


def test_kv_cache_benchmark_quick_table():
    out = run("kv_cache.py", "--quick", "--repeats", "1")
    # 4 times, 3 ratios, 3 cache sizes, the matmul rate, 4 rates and 4 fractions per prompt length
    check_rows(out, 2, 19)
    check_machine(out)
    assert "cache sizes equal the formula" in out and "same with and without the cache" in out
