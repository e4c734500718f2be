"""scripts/gpu_report.py and scripts/timings.py: the report's CPU path, its files, and the timings page."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_report  # noqa: E402
import timings  # noqa: E402


def notebook(path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_cuda_it_stops_with_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), "ch01", "--report",
                           str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and "no CUDA GPU" in done.stderr, done.stderr
    assert not (tmp_path / "r.json").exists()


def test_a_run_on_the_cpu_writes_the_tables(tmp_path):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    notebook(nbs / "ch01_tiny.ipynb", "import attention_book as ab",
             "ab.claim('ch01.tiny_check', 2 > 1, 'two is more than one', value={'accuracy': 0.875, 'bleu': 0.25})")
    notebook(nbs / "ch01_exercises.ipynb", "x = 1", "raise ValueError('stopped here')", "y = 2")
    notebook(nbs / "ch02_other.ipynb", "print('not selected')")
    notebook(nbs / "ch03_slow.ipynb", "import time", "time.sleep(60)", "print('never')")
    report = tmp_path / "out" / "report.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), "ch01", "--allow-cpu",
                           "--report", str(report), "--notebooks-dir", str(nbs), "--no-timings-page",
                           "--executed", str(tmp_path / "executed")],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr  # one notebook failed
    # --executed keeps each notebook with its outputs, up to the cell that stopped it, without the probe
    kept = json.loads((tmp_path / "executed" / "ch01_exercises.ipynb").read_text())
    assert len(kept["cells"]) == 3 and kept["cells"][1]["outputs"][0]["ename"] == "ValueError"
    assert not kept["cells"][2]["outputs"] and "GPU_REPORT_PROBE" not in json.dumps(kept)
    data = json.loads(report.read_text())
    assert set(data["notebooks"]) == {"ch01_tiny", "ch01_exercises"}
    ok, failed = data["notebooks"]["ch01_tiny"], data["notebooks"]["ch01_exercises"]
    assert ok["status"] == "finished" and ok["wall_s"] > 0
    assert ok["claims"] == [{"key": "ch01.tiny_check", "holds": True, "value": {"accuracy": 0.875, "bleu": 0.25},
                             "statement": "two is more than one"}]
    assert ok["size"] == "full" and ok["precision"] == "auto -> float32" and ok["device"] == "cpu"
    assert ok["torch"] == torch.__version__ and ok["peak_gpu_mib"] is None
    assert failed["status"].startswith("error: ValueError: stopped here") and failed["stopped_at_cell"] == 1
    assert failed["size"] == "full"  # the probe still ran after the failing cell
    md = report.with_suffix(".md").read_text()
    assert "**Chapter 1**" in md and "Chapter 2" not in md
    assert "| ch01_tiny | finished |" in md and "n/a" in md
    assert "| `ch01.tiny_check` | yes | accuracy 0.875, bleu 0.25 | two is more than one |" in md

    # a second piece adds to the file and keeps the first
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), "ch02", "--allow-cpu",
                           "--report", str(report), "--notebooks-dir", str(nbs), "--no-timings-page"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(json.loads(report.read_text())["notebooks"]) == {"ch01_tiny", "ch01_exercises", "ch02_other"}
    assert "**Chapter 2**" in report.with_suffix(".md").read_text()

    # a notebook past its time is stopped, and the kernel still answers the probe
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), "ch03", "--allow-cpu", "--timeout",
                           "8", "--report", str(report), "--notebooks-dir", str(nbs), "--no-timings-page"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    slow = json.loads(report.read_text())["notebooks"]["ch03_slow"]
    assert slow["status"] == "timed out after 8 s" and slow["stopped_at_cell"] == 1 and slow["size"] == "full"
    assert slow["wall_s"] < 30


def test_selection_and_bad_input(tmp_path):
    notebook(tmp_path / "ch05_a.ipynb", "1")
    notebook(tmp_path / "ch05_exercises.ipynb", "1")
    notebook(tmp_path / "ch07_b.ipynb", "1")
    assert [p.stem for p in gpu_report.select(["ch05"], tmp_path)] == ["ch05_a", "ch05_exercises"]
    assert [p.stem for p in gpu_report.select(["ch07_b.ipynb", "ch05_a"], tmp_path)] == ["ch07_b", "ch05_a"]
    assert len(gpu_report.select([], tmp_path)) == 3
    with pytest.raises(gpu_report.ReportError, match="ch09"):
        gpu_report.select(["ch09"], tmp_path)
    broken = tmp_path / "r.json"
    broken.write_text("{")
    with pytest.raises(gpu_report.ReportError, match="not valid JSON"):
        gpu_report.load(broken)
    assert gpu_report.main(["--timeout", "0", "--allow-cpu", "--report", str(broken)]) == 1


def run_file(notebooks: dict, wall: float, workers: int = 2) -> dict:
    return {"notebooks": notebooks, "wall_s": wall, "workers": workers, "omp_threads": "1", "date": "2026-11-24"}


def test_timings_page_states_the_machine_and_shows_the_gpu_report_when_present(tmp_path):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Multi-Head Attention\n\ntext")])
    nbformat.write(nb, nbs / "ch05_multihead_attention.ipynb")
    ci = run_file({"ch05_multihead_attention.ipynb": 12.3, "ch05_exercises.ipynb": 700.0}, 400.0)
    smoke = run_file({"ch05_multihead_attention.ipynb": 30.0}, 50.0)
    entry = timings.record(ci, smoke, 1500.0, "Some CPU (AVX2), 2 logical CPUs")
    record = tmp_path / "t.json"
    record.write_text(json.dumps({"runs": [entry]}))
    page, gpu = tmp_path / "t.md", tmp_path / "gpu.md"
    timings.render_page(record, page, gpu, nbs)
    text = page.read_text()
    assert "on **Some CPU (AVX2), 2 logical CPUs**" in text and "2026-11-24" in text
    assert "2 notebooks at a time" in text and "OMP_NUM_THREADS=1" in text
    assert "| 5 Multi-Head Attention | 12 s | 11.7 min | 30 s | – |" in text
    assert "took 400 s of wall clock" in text and "`make test` took 25.0 min" in text
    assert "Full size on a GPU: pending" in text
    gpu.write_text("**Chapter 5**\n\n| notebook | status |\n")
    timings.render_page(record, page, gpu, nbs)
    text = page.read_text()
    assert "pending" not in text and "**Chapter 5**" in text
    with pytest.raises(SystemExit, match="positive"):
        timings.record(ci, None, -1.0, "x")


def test_timings_summary_lists_each_run(tmp_path):
    text = timings.summary({"ci": run_file({"a.ipynb": 1.5, "b.ipynb": 2.0}, 3.0),
                            "full, capped": run_file({"a.ipynb": 4.0}, 4.5)})
    assert "a.ipynb" in text and "3.5 s" in text and "4.5 s" in text and "2 notebooks at a time" in text
    missing = tmp_path / "none.json"
    with pytest.raises(SystemExit, match="does not exist"):
        timings.read_run(missing)


def test_render_states_the_note_and_keeps_error_text_inside_its_cell():
    entry = {"notebook": "ch07_transformer", "status": "error: ValueError: a | b\nc", "wall_s": 3.0,
             "claims": [], "measured": "2026-11-26 21:40 UTC"}
    text = gpu_report.render({"note": "Run on one GPU, 8 notebooks at a time.",
                              "notebooks": {"ch07_transformer": entry}})
    assert text.startswith("Run on one GPU, 8 notebooks at a time.\n")
    row = next(line for line in text.splitlines() if line.startswith("| ch07_transformer"))
    assert "a \\| b c" in row and row.count(" | ") == 7  # eight cells, the error's bar escaped


def test_cpu_report_names_the_cells_that_took_the_time_and_where_a_timeout_stopped(tmp_path):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    notebook(nbs / "ch04_quick.ipynb", "import os, time",
             "assert os.environ['ATTENTION_BOOK_EXPLORERS'] == 'static'\nassert os.environ['ATTENTION_BOOK_FRAMES']",
             "# the slow part\ntime.sleep(1.5)",
             "import attention_book as ab\nab.claim('ch04.quick', 1 > 2, 'one is more than two', value=0.5)")
    notebook(nbs / "ch04_stuck.ipynb", "import time",
             "for step in range(1000):\n    print(f'step {step} of 1000', flush=True)\n    time.sleep(0.5)",
             "print('never')")
    report = tmp_path / "cpu.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), "ch04", "--cpu", "--timeout", "15",
                           "--report", str(report), "--notebooks-dir", str(nbs), "--no-timings-page"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr  # the stuck notebook did not finish
    data = json.loads(report.read_text())
    assert data["processor"] and data["processor"] == timings.processor_name()
    quick, stuck = data["notebooks"]["ch04_quick"], data["notebooks"]["ch04_stuck"]
    assert quick["status"] == "finished" and quick["device"] == "cpu" and quick["threads"] >= 1
    # the three longest cells, longest first (on a busy machine the import may outlast the sleep)
    times = [c["seconds"] for c in quick["slowest_cells"]]
    assert len(times) == 3 and times == sorted(times, reverse=True)
    slow = next(c for c in quick["slowest_cells"] if c["cell"] == 2)
    assert slow["code"] == "time.sleep(1.5)" and 1.4 <= slow["seconds"] < 8
    assert "stopped" not in slow
    assert stuck["status"] == "timed out after 15 s"
    where = next(c for c in stuck["slowest_cells"] if c.get("stopped"))
    assert where["cell"] == 1 and where["code"] == "for step in range(1000):" and where["seconds"] >= 5
    assert where["last_line"].startswith("step ") and where["last_line"].endswith(" of 1000")
    md = report.with_suffix(".md").read_text()
    assert md.startswith("1 of 2 notebooks finished")
    row = next(line for line in md.splitlines() if line.startswith("| ch04_stuck"))
    assert "(stopped here; last printed: 'step " in row and "| 0 of 0 |" in row
    assert "| `ch04.quick` | 0.5 | one is more than two |" in md  # a claim that did not hold is listed
    # the timings page shows it, under a heading that says what it is
    page = tmp_path / "t.md"
    timings.render_page(tmp_path / "none.json", page, tmp_path / "no_gpu.md", nbs, report.with_suffix(".md"))
    text = page.read_text()
    assert "**Full size on this machine's CPU**" in text and "| ch04_stuck |" in text


def test_a_stopped_training_run_says_how_far_it_got_and_its_pace(tmp_path):
    nbs = tmp_path / "notebooks"
    nbs.mkdir()
    notebook(nbs / "ch07_long.ipynb", "import time, torch\nimport attention_book as ab",
             "class Slow(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
             "        self.w = torch.nn.Parameter(torch.zeros(()))\n"
             "    def forward(self, x):\n        time.sleep(0.5)\n        return ((self.w - x) ** 2).mean()",
             "ab.fit(Slow(), [torch.ones(2)] * 2, lambda m, b: m(b), epochs=100, lr=0.1, progress=False, desc='slow one')")
    report = tmp_path / "cpu.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_report.py"), "ch07", "--cpu", "--timeout", "25",
                           "--report", str(report), "--notebooks-dir", str(nbs), "--no-timings-page"],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    entry = json.loads(report.read_text())["notebooks"]["ch07_long"]
    fit = entry["unfinished_fit"]
    assert fit["desc"] == "slow one" and fit["epochs"] == 100 and 1 <= fit["epoch"] < 100
    assert fit["steps"] == 2 * fit["epoch"]
    assert fit["projected_s"] == pytest.approx(fit["seconds"] / fit["epoch"] * 100, rel=0.01)
    assert fit["projected_s"] > 60  # a second an epoch, a hundred epochs
    row = next(line for line in report.with_suffix(".md").read_text().splitlines() if line.startswith("| ch07_long"))
    assert "its training run 'slow one' at epoch" in row and "of 100 after" in row
