"""Notebook times: print them after a run, record them, and write the timings page from them.

Usage::

    python scripts/timings.py RUN.json [SMOKE.json]            # print the per-notebook times
    python scripts/timings.py --write [--make-test-seconds S] RUN.json [SMOKE.json]
    python scripts/timings.py --render                         # book/_timings.md again

``RUN.json`` and ``SMOKE.json`` are what the notebook runs of the Makefile write
(``pytest -p kernel_poll --notebook-times FILE``: ``_stage/_notebook_times.json`` for the ``ci``
run, ``_stage_smoke/_notebook_times.json`` for the full-size smoke run). ``--write`` records them
in ``book/_timings.json`` with this machine's processor (``benchmarks/interleave.py``), the
workers and threads of the run and its date, replacing an earlier record of the same processor,
and writes ``book/_timings.md``: a table per processor, the full size on a CPU
(``book/_cpu_report.md``, from ``scripts/gpu_report.py --cpu``) and the GPU report
(``book/_gpu_report.md``, from ``scripts/gpu_report.py``) when they were measured. ``make times``
runs this script on the Makefile's files.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "book" / "_timings.json"
PAGE = ROOT / "book" / "_timings.md"
GPU_REPORT = ROOT / "book" / "_gpu_report.md"
CPU_REPORT = ROOT / "book" / "_cpu_report.md"
NOTEBOOKS = ROOT / "notebooks"
_NAME = re.compile(r"^ch(\d\d)_(.+)$")


def read_run(path: Path) -> dict:
    """One run's file (kernel_poll's --notebook-times), checked."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise SystemExit(f"timings: {path} does not exist; run the notebooks first (make test-notebooks)") from err
    except json.JSONDecodeError as err:
        raise SystemExit(f"timings: {path} is not valid JSON ({err})") from err
    if not isinstance(data.get("notebooks"), dict) or not data["notebooks"]:
        raise SystemExit(f"timings: {path} holds no notebook times")
    return data


def summary(runs: dict[str, dict]) -> str:
    """A plain-text table: one row per notebook, one column per run, sums at the foot."""
    names = sorted({name for run in runs.values() for name in run["notebooks"]})
    width = max(len(n) for n in names + ["notebook"])
    lines = [f"{'notebook':<{width}}" + "".join(f"  {label:>12}" for label in runs)]
    for name in names:
        cells = [run["notebooks"].get(name) for run in runs.values()]
        lines.append(f"{name:<{width}}" + "".join(f"  {'-' if c is None else f'{c:.1f} s':>12}" for c in cells))
    lines.append(f"{'sum of notebooks':<{width}}" + "".join(f"  {sum(r['notebooks'].values()):>10.1f} s" for r in runs.values()))
    walls = ["-" if r.get("wall_s") is None else f"{r['wall_s']:.1f} s" for r in runs.values()]
    lines.append(f"{'wall clock of the run':<{width}}" + "".join(f"  {w:>12}" for w in walls))
    lines.append("(" + "; ".join(f"{label}: {r.get('workers', 1)} notebooks at a time, OMP_NUM_THREADS="
                                 f"{r.get('omp_threads') or 'unset'}, {r.get('date', 'date unknown')}"
                                 for label, r in runs.items()) + ")")
    return "\n".join(lines)


def chapter_titles(notebooks: Path = NOTEBOOKS) -> dict[str, str]:
    """Chapter number ("05") -> the chapter notebook's title (its first '# ' heading)."""
    titles = {}
    for path in sorted(notebooks.glob("ch*.ipynb")):
        m = _NAME.match(path.stem)
        if not m or m.group(2) == "exercises":
            continue
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            if cell.get("cell_type") == "markdown":
                heading = [line[2:].strip() for line in "".join(cell.get("source", "")).splitlines()
                           if line.startswith("# ")]
                if heading:
                    titles[m.group(1)] = heading[0]
                    break
    return titles


def record(ci: dict, smoke: dict | None, make_test_seconds: float | None, processor: str) -> dict:
    """The entry ``--write`` keeps for this processor."""
    entry = {"processor": processor, "date": ci.get("date"), "workers": ci.get("workers", 1),
             "omp_threads": ci.get("omp_threads", ""), "ci": {"notebooks": ci["notebooks"], "wall_s": ci.get("wall_s")}}
    if smoke is not None:
        entry["smoke"] = {"notebooks": smoke["notebooks"], "wall_s": smoke.get("wall_s")}
    if make_test_seconds is not None:
        if make_test_seconds <= 0:
            raise SystemExit(f"timings: --make-test-seconds must be positive, got {make_test_seconds}")
        entry["make_test_s"] = make_test_seconds
    return entry


def seconds_text(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.0f} s" if value < 600 else f"{value / 60:.1f} min"


def render(records: list[dict], gpu_markdown: str, titles: dict[str, str], cpu_markdown: str = "") -> str:
    out = []
    if not records:
        out.append("**CPU: not measured yet.** `make test` followed by `make times TIMINGS_ARGS=--write` records "
                   "this machine's times here.\n")
    for r in records:
        at_a_time = (f"{r['workers']} notebooks at a time (pytest-xdist)" if r["workers"] != 1
                     else "one notebook at a time")
        threads = (f"OMP_NUM_THREADS={r['omp_threads']}" if r.get("omp_threads")
                   else "torch's default thread count")
        run = [f"Measured on {r.get('date') or 'an unknown date'} on **{r['processor']}**: nbmake ran {at_a_time}, "
               f"{threads}. Each time is the wall clock of one whole notebook, from kernel start to its last cell."]
        if r["ci"].get("wall_s") is not None:
            run.append(f"All notebooks at the `ci` size took {seconds_text(r['ci']['wall_s'])} of wall clock "
                       f"(the notebooks' own times add up to {seconds_text(sum(r['ci']['notebooks'].values()))}).")
        if r.get("smoke", {}).get("wall_s") is not None:
            run.append(f"The full-size smoke run (every fit capped at a few steps) took {seconds_text(r['smoke']['wall_s'])}.")
        if r.get("make_test_s") is not None:
            run.append(f"The whole `make test` took {seconds_text(r['make_test_s'])}.")
        out.append(" ".join(run) + "\n")
        smoke = "smoke" in r
        header = "| chapter | chapter notebook (`ci`) | exercises (`ci`) |"
        rule = "| --- | --- | --- |"
        if smoke:
            header += " chapter notebook (full size, capped) | exercises (full size, capped) |"
            rule += " --- | --- |"
        out += [header, rule]
        chapters = sorted({_NAME.match(n).group(1) for n in r["ci"]["notebooks"] if _NAME.match(n)})
        for ch in chapters:
            def cell(run: dict, exercises: bool) -> str:
                found = [v for n, v in run["notebooks"].items()
                         if n.startswith(f"ch{ch}_") and n.endswith("_exercises.ipynb") == exercises]
                return seconds_text(found[0]) if found else "–"
            row = f"| {int(ch)} {titles.get(ch, '')} | {cell(r['ci'], False)} | {cell(r['ci'], True)} |"
            if smoke:
                row += f" {cell(r['smoke'], False)} | {cell(r['smoke'], True)} |"
            out.append(row)
        out.append("")
    if cpu_markdown.strip():
        out += ["**Full size on this machine's CPU** (`make cpu-report`: every notebook at the full size, as "
                "`make publish` executes it on a CPU, each stopped at a time limit):", "", cpu_markdown]
    if gpu_markdown.strip():
        out += ["**Full size on a GPU** (`make gpu-report`: every notebook at the full size, one notebook per "
                "piece; the values are those of the claims each notebook states):", "", gpu_markdown]
    else:
        out.append("**Full size on a GPU: pending.** No GPU run has been measured yet, so we print no GPU times. "
                   "`make gpu-report` on a machine with a CUDA GPU runs every notebook at the full size and puts "
                   "its tables here (wall time, peak GPU memory, the results, precision, GPU and torch version).\n")
    return "\n".join(out)


def render_page(record_path: Path = RECORD, page: Path = PAGE, gpu_report: Path = GPU_REPORT,
                notebooks: Path = NOTEBOOKS, cpu_report: Path = CPU_REPORT) -> Path:
    """Write the timings page from the recorded runs and the GPU and CPU full-size reports (if any)."""
    records = json.loads(record_path.read_text(encoding="utf-8"))["runs"] if record_path.exists() else []
    records = sorted(records, key=lambda r: r.get("date") or "", reverse=True)  # the newest first
    gpu = gpu_report.read_text(encoding="utf-8") if gpu_report.exists() else ""
    cpu = cpu_report.read_text(encoding="utf-8") if cpu_report.exists() else ""
    page.write_text(render(records, gpu, chapter_titles(notebooks), cpu), encoding="utf-8")
    return page


def processor_name() -> str:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from interleave import processor_name as name

    return name()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="the ci run's times file, then the smoke run's")
    parser.add_argument("--write", action="store_true", help="record the runs and write book/_timings.md")
    parser.add_argument("--make-test-seconds", type=float, default=None, help="the wall clock of the whole make test")
    parser.add_argument("--render", action="store_true", help="only write book/_timings.md from what is recorded")
    parser.add_argument("--summary", action="store_true", help="print the times (the default)")
    args = parser.parse_args(argv)
    if args.render:
        print(f"wrote {render_page()}")
        return
    if not args.runs or len(args.runs) > 2:
        parser.error("give the ci run's times file, and optionally the smoke run's")
    present = [p for p in args.runs if p.exists()]
    if not args.write:
        if not present:
            print("timings: no notebook times yet (" + ", ".join(map(str, args.runs)) + ")")
            return
        labels = {args.runs[0]: "ci", **({args.runs[1]: "full, capped"} if len(args.runs) > 1 else {})}
        print("\nNotebook times (wall clock per notebook):")
        print(summary({labels[p]: read_run(p) for p in present}))
        return
    ci = read_run(args.runs[0])
    smoke = read_run(args.runs[1]) if len(args.runs) > 1 and args.runs[1].exists() else None
    entry = record(ci, smoke, args.make_test_seconds, processor_name())
    records = json.loads(RECORD.read_text(encoding="utf-8"))["runs"] if RECORD.exists() else []
    records = [r for r in records if r["processor"] != entry["processor"]] + [entry]
    RECORD.write_text(json.dumps({"runs": records}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {RECORD}; wrote {render_page()}")


if __name__ == "__main__":
    main()
