"""The benchmark scripts still run and print complete tables (no timing is asserted here).

Speed is judged by reading what ``benchmarks/*.py`` print (see book/how_fast.md), never by
a timed assert; these tests only keep the scripts from rotting as the package changes.
"""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
ROW = re.compile(r"^\s*\d+\s*x\s*\d+")  # a table row starts with "batch x ..."


def attention_bench():
    sys.path.insert(0, str(BENCH))
    try:
        import attention as bench
    finally:
        sys.path.remove(str(BENCH))
    return bench


# the attention benchmark adds d2l's implementation (a time and a ratio per row) when d2l is installed
ATTENTION_IMPLS = attention_bench().IMPLS
ATTENTION_VALUES = 5 + 2 * (len(ATTENTION_IMPLS) - 3)


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


def test_attention_benchmark_quick_table():
    # 3 sizes; 3 times + 2 ratios each, and d2l's time and ratio when installed (memory tested below)
    check_rows(run("attention.py", "--quick", "--repeats", "1", "--no-memory"), 3, ATTENTION_VALUES)


def test_attention_benchmark_causal_quick_table():
    out = run("attention.py", "--quick", "--repeats", "1", "--no-memory", "--causal")
    check_rows(out, 3, ATTENTION_VALUES)
    assert ("d2l ms" in out and "d2l/pkg" in out) == ("d2l" in ATTENTION_IMPLS)


def test_attention_benchmark_without_d2l_keeps_the_three_columns():
    out = run("attention.py", "--quick", "--repeats", "1", "--no-memory", "--no-d2l")
    assert "d2l ms" not in out
    check_rows(out, 3, 5)


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
    check_rows(out, 2, 8)  # 3 times, 2 ratios, 3 memories per length
    assert "matched the fused kernel's at every length" in out


def test_kv_cache_benchmark_quick_table():
    out = run("kv_cache.py", "--quick", "--repeats", "1")
    check_rows(out, 2, 10)  # 4 times, 3 ratios, 3 cache sizes per prompt length
    assert "cache sizes equal the formula" in out and "same with and without the cache" in out
