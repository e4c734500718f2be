"""The seed check: run every notebook for several seeds and count how often each claim held.

Usage: python scripts/claims.py [--seeds 0 1 2 3 4] [--jobs 2] [--notebooks PATTERN ...]

Set ATTENTION_BOOK_DATA to the real data (e.g. ../shared/data) first: without the network the
chapters fall back to generated data, and the counts would describe that instead.

Each notebook in ``notebooks/`` is executed (a fresh kernel, ``ci`` size unless
``ATTENTION_BOOK_SIZE`` says otherwise) once per seed, with
``ATTENTION_BOOK_SEED`` set to that seed and one CPU thread for even seeds, two
for odd ones, so the check also crosses thread counts. Every
:func:`attention_book.claim` call appends a line to a log; the script then
writes

* ``book/_claims_report.json``: per claim key, its statement, how
  many runs it held in and the values measured (the chapters print these counts);
* ``book/_claims.md``: the same as a table, included by ``book/robustness.md``.

A notebook that fails for a seed is reported (and the script exits non-zero);
its claims count only the runs that reached them. ``--notebooks ch05`` reruns
some notebooks and merges their counts into the existing report.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fcntl
import json
import os
import platform
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "book" / "_claims_report.json"
TABLE = ROOT / "book" / "_claims.md"
TITLES = {
    "ch01": "1 Queries, keys and values", "ch02": "2 Attention pooling", "ch03": "3 Scoring functions",
    "ch04": "4 Bahdanau attention", "ch05": "5 Multi-head attention", "ch06": "6 Self-attention and positions",
    "ch07": "7 The Transformer", "ch08": "8 Vision Transformer", "ch09": "9 Pretraining",
    "ch10": "10 Attention at scale",
}


def threads_for(seed: int) -> int:
    return 1 if seed % 2 == 0 else 2


def run_one(path: str, seed: int, log: str, lock: str, timeout: int) -> tuple[str, int, float, str]:
    """Execute one notebook for one seed in a fresh kernel; returns (name, seed, seconds, error or '')."""
    threads = str(threads_for(seed))
    os.environ.update({"ATTENTION_BOOK_SEED": str(seed), "ATTENTION_BOOK_CLAIMS": log, "OMP_NUM_THREADS": threads,
                       "MKL_NUM_THREADS": threads, "MPLBACKEND": "Agg"})
    os.environ.setdefault("ATTENTION_BOOK_SIZE", "ci")
    import nbformat
    from nbclient import NotebookClient

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import kernel_poll  # noqa: F401  (see its docstring: stalls after widget cells)
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": work}})
        # Two kernels starting at once can pick the same ports (jupyter_client#487): start one at a time.
        with open(lock, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            client.km = client.create_kernel_manager()
            client.start_new_kernel(cwd=str(Path(path).parent))
            client.start_new_kernel_client()
            fcntl.flock(fh, fcntl.LOCK_UN)
        error = ""
        try:
            client.execute(cleanup_kc=True)
        except CellExecutionError as err:
            error = str(err).strip().splitlines()[-1][:300]
        except Exception as err:  # a timeout or a dead kernel: report it, go on with the others
            error = f"{type(err).__name__}: {err}"[:300]
        finally:
            try:
                if client.km is not None and client.km.has_kernel:
                    client.km.shutdown_kernel(now=True)
            except Exception:
                pass
    return Path(path).name, seed, time.perf_counter() - start, error


def collect(log: Path) -> dict[str, dict]:
    claims: dict[str, dict] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        entry = claims.setdefault(rec["key"], {"statement": rec["statement"], "held": 0, "runs": 0, "values": [],
                                              "seeds_failed": []})
        if entry["statement"] != rec["statement"]:
            raise SystemExit(f"claim {rec['key']} has two statements: {entry['statement']!r} / {rec['statement']!r}")
        entry["runs"] += 1
        entry["held"] += bool(rec["holds"])
        entry["values"].append({"seed": rec["seed"], "threads": rec["threads"], "holds": rec["holds"],
                                "value": rec["value"]})
        if not rec["holds"]:
            entry["seeds_failed"].append(rec["seed"])
    for entry in claims.values():
        entry["values"].sort(key=lambda v: v["seed"])
        entry["seeds_failed"].sort()
    return claims


CLAIM_KEY = re.compile(r"""["'](ch\d\d\.[a-z0-9_]+)["']""")


def claim_keys(notebook: Path) -> set[str]:
    """The claim keys a notebook's code names (``ab.claim("ch04.name", ...)``)."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    return set(CLAIM_KEY.findall(code))


def drop_stale(report: dict, notebooks: list[Path] | None = None) -> dict:
    """``report`` without the claims that none of ``notebooks`` (default: the book's) makes any more."""
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb")) if notebooks is None else notebooks
    made = set().union(*(claim_keys(p) for p in notebooks))
    report["claims"] = {k: v for k, v in report["claims"].items() if k in made}
    return report


def merge_base(report: dict, rerun: list[Path], notebooks: list[Path] | None = None) -> dict:
    """``report`` without the claims and failures of the notebooks being rerun (and only those:
    chapter 4's chapter and its exercises page are two notebooks whose keys share "ch04.")."""
    keys = set().union(*(claim_keys(p) for p in rerun))
    names = {p.name for p in rerun}
    report["claims"] = {k: v for k, v in drop_stale(report, notebooks)["claims"].items() if k not in keys}
    report["failures"] = [f for f in report.get("failures", []) if f["notebook"] not in names]
    return report


def short_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list) and len(value) <= 6 and all(isinstance(v, (int, float)) for v in value):
        return "[" + ", ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in value) + "]"
    if isinstance(value, dict) and len(value) <= 6 and all(isinstance(v, (int, float)) for v in value.values()):
        return "{" + ", ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}" for k, v in value.items()) + "}"
    text = json.dumps(value)
    return text if len(text) <= 160 else text[:157] + "…"


def write_table(report: dict) -> None:
    seeds = report["seeds"]
    lines = [
        f"Measured on {report['date']} by `make claims`: every notebook executed for seeds "
        f"{', '.join(map(str, seeds))} at `{report['size']}` size on {report['machine']}, seeds "
        "alternating one and two CPU threads "
        f"(even seeds: 1 thread, odd seeds: 2), with {report.get('data', 'the package data')}. "
        f"torch {report['torch']}. "
        f"The notebook runs add up to {report['minutes']:.0f} minutes (two ran at a time).",
        "",
    ]
    if report.get("failures"):
        lines += ["**Notebooks that stopped with an error** (their later claims were not reached):", ""]
        lines += [f"- `{f['notebook']}`, seed {f['seed']}: {f['error']}" for f in report["failures"]]
        lines.append("")
    by_chapter: dict[str, list[tuple[str, dict]]] = {}
    for key, entry in sorted(report["claims"].items()):
        by_chapter.setdefault(key[:4], []).append((key, entry))
    for chapter, entries in sorted(by_chapter.items()):
        lines += [f"### {TITLES.get(chapter, chapter)}", "", "| claim | statement | held in |", "| --- | --- | --- |"]
        for key, e in entries:
            held = f"{e['held']} of {e['runs']} runs"
            if e["held"] < e["runs"]:
                held = f"**{held}** (not seed {', '.join(map(str, e['seeds_failed']))})"
            lines.append(f"| `{key}` | {e['statement']} | {held} |")
        lines += ["", "The values behind each claim, per seed:", ""]
        for key, e in entries:
            vals = "; ".join(f"seed {v['seed']}: {short_value(v['value'])}" for v in e["values"] if v["value"] is not None)
            lines.append(f"- `{key}`: {vals or 'no value recorded'}")
        lines.append("")
    TABLE.write_text("\n".join(lines), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per cell (as nbmake in make test)")
    ap.add_argument("--notebooks", nargs="*", default=[], help="substrings of notebook names to run (default: all)")
    ap.add_argument("--table-only", action="store_true", help="rewrite book/_claims.md from the report (dropping claims no notebook makes), run nothing")
    args = ap.parse_args()
    if args.table_only:  # also forgets claims no notebook makes any more
        report = drop_stale(json.loads(REPORT.read_text(encoding="utf-8")))
        REPORT.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        write_table(report)
        return
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.notebooks:
        notebooks = [p for p in notebooks if any(s in p.name for s in args.notebooks)]
        if not notebooks:
            sys.exit(f"no notebook matches {args.notebooks}")
    out = ROOT / "_claims"
    out.mkdir(exist_ok=True)
    log = out / "claims.jsonl"
    log.write_text("", encoding="utf-8")
    lock = str(out / "kernel-start.lock")
    jobs = [(str(p), s) for s in args.seeds for p in notebooks]
    # Longest first, so the two workers finish together.
    weight = {"ch07": 5, "ch09": 4, "ch08": 3, "ch04": 2}
    jobs.sort(key=lambda j: -weight.get(Path(j[0]).name[:4], 1))
    failures = []
    durations: dict[str, dict[str, float]] = {}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_one, p, s, str(log), lock, args.timeout) for p, s in jobs]
        for fut in as_completed(futures):
            name, seed, secs, error = fut.result()
            print(f"{name} seed {seed} ({threads_for(seed)} thread(s)): {secs:.0f} s {'FAILED: ' + error if error else 'ok'}",
                  flush=True)
            durations.setdefault(name, {})[str(seed)] = round(secs, 1)
            if error:
                failures.append({"notebook": name, "seed": seed, "error": error})
    import torch

    claims = collect(log)
    report = {"claims": {}, "failures": []}
    if args.notebooks and REPORT.exists():  # a partial rerun: keep the other notebooks' claims
        report = merge_base(json.loads(REPORT.read_text(encoding="utf-8")), notebooks)
    report["claims"].update(claims)
    report.setdefault("durations", {}).update(durations)
    report["failures"] = sorted(report.get("failures", []) + failures, key=lambda f: (f["notebook"], f["seed"]))
    report.update({
        "seeds": args.seeds, "size": os.environ.get("ATTENTION_BOOK_SIZE", "ci"),
        "threads": {str(s): threads_for(s) for s in args.seeds},
        "date": _dt.date.today().isoformat(), "torch": torch.__version__,
        "machine": f"a {os.cpu_count()}-core {platform.machine()} CPU",
        "data": ("the real data sets, from a local copy" if os.environ.get("ATTENTION_BOOK_DATA")
                 else "the data sets as the package finds them (downloaded, or generated when offline)"),
    })
    report["minutes"] = sum(sum(d.values()) for d in report["durations"].values()) / 60
    REPORT.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    write_table(report)
    weak = {k: v for k, v in claims.items() if v["held"] < v["runs"]}
    print(f"{len(claims)} claims; {len(claims) - len(weak)} held in every run; written {REPORT.relative_to(ROOT)} "
          f"and {TABLE.relative_to(ROOT)}")
    for key, v in sorted(weak.items()):
        print(f"  {key}: {v['held']} of {v['runs']} ({v['statement']})")
    if failures:
        sys.exit(f"{len(failures)} notebook run(s) failed; see {TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
