"""Every chapter at full size on a CUDA GPU: wall time, peak GPU memory and headline results.

Usage::

    python scripts/gpu_report.py                 # every notebook, one after another
    python scripts/gpu_report.py ch05 ch07       # the notebooks whose names start so
    make gpu-report GPU_NOTEBOOKS="ch05"         # the same through make

Each notebook is one piece: it runs in a fresh kernel, from the repository's ``notebooks/``
(nothing is written into them; an exercises notebook runs as the instructor edition, its graded
parts solved), at ``ATTENTION_BOOK_SIZE=full`` with the explorers live, and
stops at ``--timeout`` seconds (570 by default, so that a piece fits a 10-minute slot on a
shared GPU machine). A piece records, in ``book/_gpu_report.json``:

* the wall time from kernel start to the last cell;
* the peak GPU memory the notebook's tensors took (``torch.cuda.max_memory_allocated`` in the
  kernel: one kernel per notebook, so its peak is the notebook's);
* every ``ab.claim`` the notebook made, with the measured values behind it (accuracies, BLEU,
  losses), through ``ATTENTION_BOOK_CLAIMS``;
* the training precision (``ab.training_precision()`` and what it resolves to on the GPU), the
  GPU's name, torch's and CUDA's versions;
* whether it finished, or the error or timeout that stopped it.

A later piece adds to the same file (a notebook run again replaces its earlier entry), and
after each piece ``book/_gpu_report.md`` (one table per chapter) and the timings page
(``scripts/timings.py``) are written again from it.

Without a CUDA GPU the script stops at once with one line and exit status 1 (``--allow-cpu``
lets the tests run it on a CPU). ``--cpu`` (``make cpu-report``) measures the full size on this
machine's CPU instead, as ``make publish`` executes it there (explorers drawn for a static page), into
``book/_cpu_report.json``: each notebook's wall time up to ``--timeout``, the processor and torch's
thread count, and the cells that took the time (for a notebook the timeout stopped, the cell it was
in and that cell's last printed line, so the report shows where the rest of the time would go). On a GPU machine with PyTorch for CUDA but nothing else of the
book, install the rest into that same Python without touching its torch:
``pip install -e ".[dev]"`` (the package asks only ``torch>=2.2``, which the CUDA build meets).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
REPORT_JSON = ROOT / "book" / "_gpu_report.json"
CPU_REPORT_JSON = ROOT / "book" / "_cpu_report.json"
SLOW_CELLS = 3  # the cells listed per notebook, longest first
NEEDED = ("nbclient", "nbformat", "ipykernel", "attention_book")
MARK = "GPU_REPORT_PROBE "
TIMED_OUT = "NotebookTimeout"

# Run in the notebook's kernel after its last cell (or after the cell that stopped it).
PROBE = f"""
import json as _json, torch as _torch, attention_book as _ab
from attention_book.core.train import _precision as _resolve
_dev = _ab.device(verbose=False)
_chosen = _ab.training_precision()
_dtype, _scaled = _resolve(_chosen, _dev)
print({MARK!r} + _json.dumps({{
    "peak_gpu_mib": _torch.cuda.max_memory_allocated() / 2**20 if _torch.cuda.is_available() else None,
    "device": _torch.cuda.get_device_name() if _torch.cuda.is_available() else "cpu",
    "torch": _torch.__version__, "cuda": _torch.version.cuda,
    "size": _ab.experiment_size(), "threads": _torch.get_num_threads(),
    "precision": _chosen + " -> " + ("float32" if _dtype is None else str(_dtype).replace("torch.", ""))
                 + (" with loss scaling" if _scaled else ""),
}}))
"""


class ReportError(RuntimeError):
    """A problem the report cannot work around; its message is the one line printed."""


def select(names: list[str], notebooks_dir: Path) -> list[Path]:
    """The notebooks whose file names start with one of ``names`` (all of them for none)."""
    available = sorted(notebooks_dir.glob("*.ipynb"))
    if not available:
        raise ReportError(f"no notebooks in {notebooks_dir}")
    if not names:
        return available
    chosen = []
    for name in names:
        stem = name.removesuffix(".ipynb")
        matches = [p for p in available if p.stem.startswith(stem)]
        if not matches:
            raise ReportError(f"notebook {name!r} matches none of {', '.join(p.stem for p in available)}")
        chosen += [p for p in matches if p not in chosen]
    return chosen


def check_setup(allow_cpu: bool) -> str:
    """The torch version; raises ReportError (one line) without CUDA or without the book's packages."""
    try:
        import torch
    except ImportError as err:
        raise ReportError("gpu-report: torch is not installed in this Python; run it with the Python "
                          "that has PyTorch for CUDA (make gpu-report GPU_PYTHON=...)") from err
    if not torch.cuda.is_available() and not allow_cpu:
        raise ReportError(f"gpu-report: no CUDA GPU here (torch {torch.__version__} sees none); the report "
                          "measures the full size on a GPU, so it runs only on a machine with one")
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise ReportError(f"gpu-report: {', '.join(missing)} missing; install them beside this torch with "
                          f"{sys.executable} -m pip install -e \"{ROOT}[dev]\" (torch stays as it is)")
    return torch.__version__


def run_notebook(path: Path, timeout: float, env: dict[str, str], executed: Path | None = None) -> dict:
    """Execute one notebook in a fresh kernel; its entry for the report.

    With ``executed``, the notebook is also written there with its outputs (the probe cell left out),
    so the full-size results can be read against the chapter's prose."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import kernel_poll  # noqa: F401  (a missed socket wake-up must not stall a piece)

    sys.path.insert(0, str(ROOT / "scripts"))
    from editions import load_solutions, make_edition

    # The instructor edition: an exercises notebook's graded parts hold their solutions (the committed
    # notebook holds the students' stubs, which raise NotImplementedError), so the solutions run too.
    raw = json.loads(path.read_text(encoding="utf-8"))
    solutions = load_solutions(path.name) if path.parent.resolve() == NOTEBOOKS.resolve() else {}
    nb = nbformat.reads(json.dumps(make_edition(raw, "instructor", solutions)), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    cells = len(nb.cells)
    probe = nbformat.v4.new_code_cell(PROBE)
    nb.cells.append(probe)  # nbclient writes each executed cell back into the notebook
    with tempfile.TemporaryDirectory() as tmp:
        claims_file, fit_log = Path(tmp) / "claims.jsonl", Path(tmp) / "fits.jsonl"
        kernel_env = {**os.environ, **env, "ATTENTION_BOOK_CLAIMS": str(claims_file),
                      "ATTENTION_BOOK_FIT_LOG": str(fit_log)}
        # On a timeout the cell is interrupted and fails, so the probe can still ask the kernel for its peak.
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", interrupt_on_timeout=True,
                                error_on_timeout={"ename": TIMED_OUT, "evalue": "", "traceback": []},
                                resources={"metadata": {"path": str(path.parent)}})
        status, stopped_at = "finished", None
        start = time.monotonic()
        with client.setup_kernel(env=kernel_env, cwd=str(path.parent)):
            for index, cell in enumerate(nb.cells[:cells]):
                if cell.cell_type != "code":
                    continue
                left = timeout - (time.monotonic() - start)
                if left <= 0:
                    status, stopped_at = f"timed out after {timeout:.0f} s", index
                    break
                client.timeout = int(max(1, left))
                try:
                    client.execute_cell(cell, index)
                except (CellExecutionError, CellTimeoutError) as err:
                    stopped_at = index
                    if isinstance(err, CellTimeoutError) or err.ename == TIMED_OUT:
                        status = f"timed out after {timeout:.0f} s"
                    else:
                        status = f"error: {err.ename}: {' '.join(str(err.evalue).split())[:200]}"
                    break
                except DeadKernelError:
                    status, stopped_at = "error: the kernel died (out of memory?)", index
                    break
            wall = time.monotonic() - start
            facts = {}
            if not status.startswith("error: the kernel died"):
                client.timeout = 120
                try:
                    client.execute_cell(probe, cells)
                    for out in probe.outputs:
                        for line in out.get("text", "").splitlines():
                            if line.startswith(MARK):
                                facts = json.loads(line[len(MARK):])
                except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
                    facts = {"probe_error": type(err).__name__}
        claims = []
        if claims_file.exists():
            for line in claims_file.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                claims.append({"key": record["key"], "holds": record["holds"], "value": record.get("value"),
                               "statement": record["statement"]})
        unfinished = unfinished_fit(fit_log, status)
    ended = datetime.now(timezone.utc)
    if executed is not None:
        executed.mkdir(parents=True, exist_ok=True)
        nb.cells = nb.cells[:cells]
        nbformat.write(nb, str(executed / path.name))
    entry = {"notebook": path.stem, "status": status, "wall_s": round(wall, 1), "claims": claims,
             "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), **facts}
    if stopped_at is not None:
        entry["stopped_at_cell"] = stopped_at
    entry["slowest_cells"] = slowest_cells(nb.cells[:cells], ended, stopped_at)
    if unfinished:
        entry["unfinished_fit"] = unfinished
    return entry


def unfinished_fit(fit_log: Path, status: str) -> dict | None:
    """For a notebook the timeout stopped: the last ``ab.fit`` run of the fit log, when it had not
    reached its last epoch, with its pace so far (seconds per epoch) and the seconds all its epochs
    would take at that pace."""
    if not status.startswith("timed out") or not fit_log.exists():
        return None
    lines = [json.loads(line) for line in fit_log.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines or lines[-1]["epoch"] >= lines[-1]["epochs"]:
        return None
    last = lines[-1]
    return {**last, "projected_s": round(last["seconds"] / last["epoch"] * last["epochs"], 1)}


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _first_line(source: str) -> str:
    for line in source.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()[:70]
    return ""


def _last_printed(cell) -> str:
    """The last line a cell printed (a progress line of a training run, say), or ''."""
    for out in reversed(cell.get("outputs", [])):
        text = out.get("text") or out.get("data", {}).get("text/plain", "")
        lines = [ln.strip() for ln in "".join(text).replace("\r", "\n").splitlines() if ln.strip()]
        if lines:
            return lines[-1][:120]
    return ""


def slowest_cells(cells: list, ended: datetime, stopped_at: int | None) -> list[dict]:
    """The longest code cells, longest first, from the times the kernel reported for each cell
    (nbclient's ``metadata.execution``); the cell a timeout stopped runs until ``ended`` and carries
    its last printed line."""
    timed = []
    for index, cell in enumerate(cells):
        execution = cell.get("metadata", {}).get("execution", {})
        if cell.get("cell_type") != "code" or "iopub.execute_input" not in execution:
            continue
        start = _stamp(execution["iopub.execute_input"])
        end = _stamp(execution["shell.execute_reply"]) if "shell.execute_reply" in execution else ended
        item = {"cell": index, "seconds": round((end - start).total_seconds(), 1), "code": _first_line(cell.source)}
        if index == stopped_at:
            item["stopped"] = True
            item["last_line"] = _last_printed(cell)
        timed.append(item)
    timed.sort(key=lambda t: -t["seconds"])
    kept = timed[:SLOW_CELLS]
    kept += [t for t in timed[SLOW_CELLS:] if t.get("stopped")]
    return kept


def load(report: Path) -> dict:
    if not report.exists():
        return {"notebooks": {}}
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ReportError(f"{report} is not valid JSON ({err}); remove it and run the report again") from err
    if not isinstance(data.get("notebooks"), dict):
        raise ReportError(f"{report} has no 'notebooks' table; remove it and run the report again")
    return data


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items())
    return "" if value is None else str(value)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (an error message may hold a '|' or a newline)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _where(entry: dict) -> str:
    """The cells that took the time, for the CPU table."""
    parts = []
    for c in entry.get("slowest_cells", []):
        code = c["code"].replace("`", "'")
        text = f"cell {c['cell']} `{code}` {_seconds(c['seconds'])}"
        if c.get("stopped"):
            fit = entry.get("unfinished_fit")
            if fit:
                text += (f" (stopped here, its training run {fit['desc']!r} at epoch {fit['epoch']} of "
                         f"{fit['epochs']} after {_seconds(fit['seconds'])}: about {_seconds(fit['projected_s'])} "
                         "for all its epochs at that pace)")
            else:
                text += " (stopped here" + (f"; last printed: {c['last_line']!r}" if c.get("last_line") else "") + ")"
        parts.append(text)
    return _cell("; ".join(parts))


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value < 600 else f"{value / 60:.1f} min"


def render_cpu(data: dict) -> str:
    """The CPU report as Markdown: one row per notebook (status, wall time, the cells that took the
    time, claims held), then the claims that did not hold."""
    entries = data["notebooks"]
    lines = [str(data["note"]), ""] if data.get("note") else []
    done = [e for e in entries.values() if e["status"] == "finished"]
    cut = [e for e in entries.values() if e["status"].startswith("timed out")]
    lines += [f"{len(done)} of {len(entries)} notebooks finished; their wall times add up to "
              f"{_seconds(sum(e['wall_s'] for e in done))}"
              + (f"; {len(cut)} were stopped by the timeout after {_seconds(sum(e['wall_s'] for e in cut))} "
                 "together (the cell each was in says where the rest of its time goes)" if cut else "") + ".", "",
              "| notebook | status | wall time | torch threads | where the time went (longest cells) | claims held |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name in sorted(entries):
        e = entries[name]
        held = sum(c["holds"] for c in e["claims"])
        lines.append(f"| {name} | {_cell(e['status'])} | {_seconds(e['wall_s'])} | {e.get('threads', '?')} | "
                     f"{_where(e)} | {held} of {len(e['claims'])} |")
    failing = [c for name in sorted(entries) for c in entries[name]["claims"] if not c["holds"]]
    if failing:
        lines += ["", "Claims that did not hold at the full size on this CPU:", "",
                  "| claim | values | statement |", "| --- | --- | --- |"]
        lines += [f"| `{c['key']}` | {_cell(_value(c['value']))} | {_cell(c['statement'])} |" for c in failing]
    return "\n".join(lines) + "\n"


def render(data: dict) -> str:
    """The report as Markdown: a table per chapter, then each chapter's claims and values."""
    entries = data["notebooks"]
    if not entries:
        return ""
    if data.get("processor"):
        return render_cpu(data)
    lines = [str(data["note"]), ""] if data.get("note") else []
    chapters = sorted({name[:4] for name in entries})
    for chapter in chapters:
        rows = [entries[name] for name in sorted(entries) if name.startswith(chapter)]
        lines += [f"**Chapter {int(chapter[2:])}**", "",
                  "| notebook | status | wall time | peak GPU memory | precision | GPU | torch (CUDA) | measured |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for e in rows:
            peak = e.get("peak_gpu_mib")
            lines.append(
                f"| {e['notebook']} | {_cell(e['status'])} | {e['wall_s']:.0f} s | "
                f"{'n/a' if peak is None else f'{peak:,.0f} MiB'} | {e.get('precision', '?')} | "
                f"{e.get('device', '?')} | {e.get('torch', '?')} ({e.get('cuda') or 'none'}) | {e['measured']} |")
        claims = [(e["notebook"], c) for e in rows for c in e["claims"]]
        if claims:
            lines += ["", "| claim | held | values | statement |", "| --- | --- | --- | --- |"]
            for _notebook, c in claims:
                lines.append(f"| `{c['key']}` | {'yes' if c['holds'] else 'no'} | {_value(c['value'])} | "
                             f"{c['statement']} |")
        lines.append("")
    return "\n".join(lines)


def write(data: dict, report: Path) -> Path:
    """Write the JSON and its Markdown beside it; returns the Markdown's path."""
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md = report.with_suffix(".md")
    md.write_text(render(data), encoding="utf-8")
    return md


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("notebooks", nargs="*", help="name prefixes (ch05, ch07_transformer); all by default")
    parser.add_argument("--timeout", type=float, default=570, help="seconds per notebook (default 570)")
    parser.add_argument("--report", type=Path, default=None,
                        help="the JSON to add to (default book/_gpu_report.json, with --cpu book/_cpu_report.json)")
    parser.add_argument("--cpu", action="store_true",
                        help="measure the full size on this machine's CPU, as `make publish` executes it there")
    parser.add_argument("--notebooks-dir", type=Path, default=NOTEBOOKS, help=argparse.SUPPRESS)
    parser.add_argument("--allow-cpu", action="store_true", help="run without CUDA (for testing the report itself)")
    parser.add_argument("--executed", type=Path, help="also write each executed notebook (with its outputs) here")
    parser.add_argument("--no-timings-page", action="store_true", help="do not rewrite book/_timings.md")
    args = parser.parse_args(argv)
    try:
        if args.timeout <= 0:
            raise ReportError(f"gpu-report: --timeout must be positive, got {args.timeout}")
        check_setup(args.allow_cpu or args.cpu)
        chosen = select(args.notebooks, args.notebooks_dir)
        report = args.report or (CPU_REPORT_JSON if args.cpu else REPORT_JSON)
        data = load(report)
    except ReportError as err:
        print(err, file=sys.stderr)
        return 1
    env = {"ATTENTION_BOOK_SIZE": "full", "ATTENTION_BOOK_EXPLORERS": "live", "MPLBACKEND": "Agg"}
    drawn = None
    if args.cpu:
        # What `make publish` executes on a CPU: every explorer's settings drawn for the static page
        # (into a folder of this run, thrown away), and no GPU even where one is present.
        drawn = tempfile.TemporaryDirectory(prefix="cpu-report-")
        env.update({"ATTENTION_BOOK_EXPLORERS": "static", "CUDA_VISIBLE_DEVICES": "",
                    "ATTENTION_BOOK_FRAMES": str(Path(drawn.name) / "frames"),
                    "ATTENTION_BOOK_LIVE": str(Path(drawn.name) / "live")})
        sys.path.insert(0, str(ROOT / "scripts"))
        from timings import processor_name

        data["processor"] = processor_name()
    failed = 0
    for path in chosen:
        print(f"gpu-report: {path.stem} ...", flush=True)
        entry = run_notebook(path, args.timeout, env, args.executed)
        data["notebooks"][path.stem] = entry
        md = write(data, report)
        failed += entry["status"] != "finished"
        peak = entry.get("peak_gpu_mib")
        print(f"gpu-report: {path.stem}: {entry['status']}, {entry['wall_s']:.0f} s, peak GPU memory "
              f"{'n/a' if peak is None else f'{peak:,.0f} MiB'}, {len(entry['claims'])} claims -> {md}", flush=True)
    if drawn is not None:
        drawn.cleanup()
    if not args.no_timings_page:
        sys.path.insert(0, str(ROOT / "scripts"))
        import timings

        timings.render_page()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
