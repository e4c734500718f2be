"""Grade a folder of submitted notebooks: each in a sandbox, judged by hidden tests outside it.

Usage: python scripts/grade.py SUBMISSIONS [--out grades.csv] [--timeout 600]
                               [--reference notebooks] [--memory-gb 8] [--seed N]

Layout: ``SUBMISSIONS/<student>/<chNN_exercises>.ipynb`` (a notebook directly in
SUBMISSIONS is graded under its file name as the student). For each notebook:

1. A fresh directory holds a copy of that notebook only. It is executed there, to
   the end (cells that raise do not stop it), inside a sandbox: bubblewrap when it
   works here (no network, its own process tree, nothing of the machine visible but
   the system, Python and the package, all read-only), else a plain process group
   with a loud warning. Limits: wall time (``--timeout``, the whole process tree is
   killed, loops that hold the GIL included), memory, CPU time, processes, file size.
2. After the student's cells, the sandbox runs the assignment's hidden tests: the
   checker's cases with inputs drawn from a seed chosen now, called on the
   student's function (named in their checker cell), with the package's own
   version of the answer disabled. Only the outputs leave the sandbox.
3. Here, outside, the instructor's checks judge those outputs
   (``attention_book.assignments.grading.judge``). Which assignments a notebook
   has comes from the reference notebook of the same name, not from the submission.

Writes, as each notebook finishes, one row per (student, notebook, assignment) to
``--out``; then ``gradebook.csv`` (one row per student, points per assignment and
total: importable by Canvas and Moodle) and ``feedback/<student>.md`` beside it.
Every cell a student controls is written so that a spreadsheet shows it as text.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import json
import os
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from editions import source, tags  # noqa: E402

import attention_book  # noqa: E402
from attention_book.assignments import assignment_names  # noqa: E402
from attention_book.assignments.grading import GradingError, judge, load_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CHECK_CALL = re.compile(r"check_(\w+)\s*\(")
POINTS = 10  # per assignment
FIELDS = ["student", "notebook", "assignment", "passed", "total", "score", "points", "status", "reason"]
RESULTS = "results.pt"
OUTPUT_LIMIT = 64 * 2**20  # bytes a sandboxed process may write to one file

# Runs inside the sandbox: execute the notebook (errors do not stop it), then the hidden tests.
_WORKER = r"""
import json, os, sys, nbformat
from nbclient import NotebookClient
import kernel_poll  # noqa: F401  (book/_ext/kernel_poll.py: a missed socket wake-up must not stall grading)
secret = json.load(open("secret.json"))
os.remove("secret.json")
nb = nbformat.read("submission.ipynb", as_version=4)
nb.cells.append(nbformat.v4.new_code_cell(secret["harness"]))
client = NotebookClient(nb, timeout=secret["cell_timeout"], startup_timeout=secret["cell_timeout"],
                        kernel_name="python3", allow_errors=True, resources={"metadata": {"path": os.getcwd()}})
client.execute()
errors = []
for cell in nb.cells[:-1]:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            errors.append(f"{out.get('ename')}: {str(out.get('evalue'))[:150]}")
harness = [o for o in nb.cells[-1].get("outputs", []) if o.get("output_type") == "error"]
with open("worker.json", "w") as f:
    json.dump({"errors": errors[:3], "harness": [f"{o.get('ename')}: {str(o.get('evalue'))[:200]}"
                                                  for o in harness]}, f)
"""


# --------------------------------------------------------------------------- what to grade


def expected_assignments(nb: dict) -> list[str]:
    """The assignments a notebook's ``checker`` cells call, in order."""
    names = []
    for cell in nb.get("cells", []):
        if isinstance(cell, dict) and cell.get("cell_type") == "code" and "checker" in tags(cell):
            for name in CHECK_CALL.findall(source(cell)):
                if name not in names:
                    names.append(name)
    return names


def graded_names(nb: dict) -> dict[str, str]:
    """``{assignment: expression naming the student's function}`` from the checker cells."""
    found: dict[str, str] = {}
    for cell in nb.get("cells", []):
        if not (isinstance(cell, dict) and cell.get("cell_type") == "code" and "checker" in tags(cell)):
            continue
        try:
            tree = ast.parse(source(cell))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and isinstance(node.func, (ast.Attribute, ast.Name)):
                func = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
                target = _dotted(node.args[0])
                if func.startswith("check_") and target:
                    found.setdefault(func[len("check_"):], target)
    return found


def _dotted(node: ast.AST) -> str | None:
    """``name`` or ``a.b.c`` for a plain (dotted) name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def harness_code(targets: dict[str, str], offset: int, out: str) -> str:
    lines = ["from attention_book.assignments.grading import resolve as _grade_resolve, run_hidden as _grade_run"]
    for name, expr in targets.items():
        lines.append(f"_grade_run({name!r}, _grade_resolve({expr!r}, globals()), {offset}, {out!r} + {name!r})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the sandbox


@dataclass
class Sandbox:
    kind: str  # "bubblewrap" or "none"
    missing: list[str] = field(default_factory=list)

    @staticmethod
    def detect() -> "Sandbox":
        bwrap = shutil.which("bwrap")
        if bwrap:
            probe = subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                                   capture_output=True, text=True)
            if probe.returncode == 0:
                return Sandbox("bubblewrap")
            why = f"bwrap is installed but cannot create namespaces here ({probe.stderr.strip()[:120]})"
        else:
            why = "bubblewrap (Debian package `bubblewrap`) is not installed"
        return Sandbox("none", [why, "the file system (other submissions, the reference notebooks and this "
                                     "grader's output are readable and writable)", "the network",
                                "processes that detach from the session survive"])

    def command(self, workdir: Path, argv: list[str]) -> list[str]:
        if self.kind == "none":
            return argv
        binds = ["/usr", "/bin", "/lib", "/lib64", "/lib32", "/etc", sys.base_prefix, sys.prefix,
                 str(Path(attention_book.__file__).resolve().parent.parent)]
        data = os.environ.get("ATTENTION_BOOK_DATA", "").strip()
        if data and Path(data).is_dir():
            binds.append(str(Path(data).resolve()))
        cmd = ["bwrap", "--die-with-parent", "--new-session", "--unshare-all"]
        seen = set()
        for path in binds:
            real = str(Path(path).resolve()) if Path(path).exists() else None
            for p in {path, real} - {None}:
                if p and Path(p).exists() and p not in seen:
                    seen.add(p)
                    cmd += ["--ro-bind", p, p]
        cmd += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--bind", str(workdir), "/sandbox",
                "--chdir", "/sandbox"]
        return cmd + argv


def _limits(memory_bytes: int, cpu_seconds: int):
    def apply():
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT, OUTPUT_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # Counted per user: leave room for this user's processes that already run.
        running = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
        resource.setrlimit(resource.RLIMIT_NPROC, (running + 256, running + 256))

    return apply


def run_sandboxed(sandbox: Sandbox, workdir: Path, timeout: int, memory_gb: float) -> tuple[str, float]:
    """Execute ``workdir/submission.ipynb`` in the sandbox; return (how it ended, seconds)."""
    home = workdir / "home"
    home.mkdir()
    inside = Path("/sandbox") if sandbox.kind != "none" else workdir
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(inside / "home"),
           "MPLBACKEND": "Agg", "ATTENTION_BOOK_SIZE": os.environ.get("ATTENTION_BOOK_SIZE", "ci"),
           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "JUPYTER_PLATFORM_DIRS": "1"}
    if os.environ.get("ATTENTION_BOOK_DATA"):
        env["ATTENTION_BOOK_DATA"] = os.environ["ATTENTION_BOOK_DATA"]
    argv = sandbox.command(workdir, [sys.executable, "-c", _WORKER])
    start = time.monotonic()
    with open(workdir / "stdout.txt", "wb") as out, open(workdir / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                preexec_fn=_limits(int(memory_gb * 2**30), 2 * timeout + 30))
        try:
            proc.wait(timeout=timeout)
            ended = "finished" if proc.returncode == 0 else f"worker exited with {proc.returncode}"
        except subprocess.TimeoutExpired:
            ended = "timeout"
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the whole tree (bubblewrap: its namespace dies too)
            proc.wait()
    return ended, time.monotonic() - start


# --------------------------------------------------------------------------- rows and files


def safe(value):
    """A cell a spreadsheet shows as text: no formula (=, +, -, @, tab, CR first), no NUL."""
    if isinstance(value, str):
        value = value.replace("\x00", "").replace("\r", " ").replace("\n", " ")[:500]
        if value[:1] in ("=", "+", "-", "@", "\t"):
            return "'" + value
    return value


def student_of(path: Path, submissions: Path) -> str:
    rel = path.relative_to(submissions)
    return rel.parts[0] if len(rel.parts) > 1 else path.stem


def grade_notebook(path: Path, submissions: Path, reference: Path | None, sandbox: Sandbox, timeout: int,
                   memory_gb: float, rng_offset: int) -> list[dict]:
    who = student_of(path, submissions)
    ref_nb = None
    if reference is not None and (reference / path.name).is_file():
        ref_nb = json.loads((reference / path.name).read_text(encoding="utf-8"))
    try:
        nb = json.loads(path.read_bytes()[:50 * 2**20].decode("utf-8"))
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise ValueError("not a notebook (no list of cells)")
    except (ValueError, UnicodeDecodeError) as err:
        nb, problem = None, f"not a valid notebook: {str(err)[:150]}"
    else:
        problem = ""
    known = set(assignment_names())
    expected = expected_assignments(ref_nb) if ref_nb is not None else []
    if not expected and nb is not None:  # no reference for this notebook: trust only known names
        expected = [n for n in expected_assignments(nb) if n in known]
    expected = [n for n in expected if n in known]
    base = dict(student=who, notebook=path.name)
    if not expected:
        return [dict(base, assignment="", passed=0, total=0, score=0.0, points=0.0, status="no assignment",
                     reason=problem or "no known assignment in this notebook or its reference")]
    if nb is None:
        return [dict(base, assignment=n, passed=0, total=0, score=0.0, points=0.0, status="unreadable",
                     reason=problem) for n in expected]
    names = graded_names(ref_nb or {})
    names.update({k: v for k, v in graded_names(nb).items() if k in names or k in expected})
    targets = {n: names.get(n, "") for n in expected}
    rows = []
    with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o700)
        shutil.copyfile(path, work / "submission.ipynb")
        shutil.copyfile(ROOT / "book" / "_ext" / "kernel_poll.py", work / "kernel_poll.py")
        out_prefix = f"out-{secrets.token_hex(8)}-"
        inside = "/sandbox/" if sandbox.kind != "none" else f"{work}/"
        (work / "secret.json").write_text(json.dumps({
            "harness": harness_code(targets, rng_offset, inside + out_prefix), "cell_timeout": timeout}))
        ended, seconds = run_sandboxed(sandbox, work, timeout, memory_gb)
        report_file = work / "worker.json"
        try:
            worker = json.loads(report_file.read_text(encoding="utf-8")[:100_000]) if report_file.is_file() else {}
            errors = "; ".join(str(e) for e in worker.get("errors", []))[:300] if isinstance(worker, dict) else ""
        except (ValueError, UnicodeDecodeError):
            errors = ""
        if ended.startswith("worker exited"):
            tail = (work / "stderr.txt").read_bytes()[-2000:].decode("utf-8", "replace").strip().splitlines()
            ended += f": {tail[-1][:200]}" if tail else ""
        for name in expected:
            row = dict(base, assignment=name, passed=0, total=0, score=0.0, points=0.0)
            result = work / f"{out_prefix}{name}"
            if ended == "timeout":
                row.update(status="timeout", reason=f"did not finish within {timeout} s")
            elif not result.is_file() or result.is_symlink():
                row.update(status="no results", reason=(f"the hidden tests did not run ({ended})"
                                                        + (f"; cells raised: {errors}" if errors else "")))
            else:
                try:
                    report = judge(name, rng_offset, load_results(result))
                except GradingError as err:
                    row.update(status="flagged", reason=f"malformed results: {err}")
                else:
                    failures = "; ".join(f"{case}: {why}" for case, ok, why in report.results if not ok)
                    row.update(passed=report.passed, total=report.total, score=round(report.score, 4),
                               points=round(POINTS * report.score, 2),
                               status="not implemented" if report.not_implemented else "graded",
                               reason=failures[:400])
            row["seconds"] = round(seconds, 1)
            rows.append(row)
    return rows


def write_gradebook(rows: list[dict], out_dir: Path) -> tuple[Path, Path]:
    """gradebook.csv (Canvas/Moodle import) and feedback/<student>.md."""
    assignments = sorted({(r["notebook"].split("_")[0], r["assignment"]) for r in rows if r["assignment"]})
    students = sorted({r["student"] for r in rows})
    book = out_dir / "gradebook.csv"
    with book.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["Student", "SIS Login ID"] + [f"{ch} {a} ({POINTS} pts)" for ch, a in assignments]
                        + ["Total"])
        for who in students:
            points = {(r["notebook"].split("_")[0], r["assignment"]): r["points"] for r in rows
                      if r["student"] == who and r["assignment"]}
            cells = [points.get(key, 0.0) for key in assignments]
            writer.writerow([safe(who), safe(who)] + cells + [round(sum(cells), 2)])
    feedback = out_dir / "feedback"
    feedback.mkdir(parents=True, exist_ok=True)
    for who in students:
        lines = [f"# Feedback for {who}", ""]
        for r in rows:
            if r["student"] != who:
                continue
            lines.append(f"## {r['notebook']}: {r['assignment'] or '(no assignment)'}: {r['points']}/{POINTS} points"
                         f" ({r['status']})")
            for part in str(r["reason"]).split("; "):
                if part:
                    lines.append(f"- {part}")
            lines.append("")
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", who)[:80] or "student"
        (feedback / f"{name}.md").write_text("\n".join(lines), encoding="utf-8")
    return book, feedback


def grade(submissions: Path, out_csv: Path, timeout: int, reference: Path | None, memory_gb: float = 8.0,
          seed: int | None = None) -> list[dict]:
    sandbox = Sandbox.detect()
    if sandbox.kind == "none":
        bar = "!" * 78
        print(f"{bar}\nWARNING: submissions run WITHOUT a sandbox. Not isolated: " + "; ".join(sandbox.missing)
              + f".\nOnly grade work you trust this way.\n{bar}", file=sys.stderr)
    else:
        print(f"sandbox: {sandbox.kind} (no network, own process tree, read-only system and package)")
    offset = seed if seed is not None else secrets.randbelow(2**31)
    notebooks = sorted(p for p in submissions.rglob("*.ipynb")
                       if ".ipynb_checkpoints" not in p.parts and p.is_file() and not p.is_symlink())
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with out_csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS + ["seconds"], extrasaction="ignore")
        writer.writeheader()
        f.flush()
        for path in notebooks:
            for row in grade_notebook(path, submissions, reference, sandbox, timeout, memory_gb, offset):
                row.setdefault("seconds", 0.0)
                writer.writerow({k: safe(v) for k, v in row.items()})
                rows.append(row)
                print(f"{row['student']}/{row['notebook']} {row['assignment']}: {row['points']}/{POINTS} "
                      f"({row['status']})" + (f" — {str(row['reason'])[:120]}" if row["reason"] else ""))
            f.flush()
    book, feedback = write_gradebook(rows, out_csv.parent)
    print(f"Wrote {len(rows)} rows to {out_csv}, totals to {book}, feedback to {feedback}/ (sandbox: {sandbox.kind})")
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=Path)
    parser.add_argument("--out", type=Path, default=Path("grades.csv"))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per notebook")
    parser.add_argument("--memory-gb", type=float, default=8.0, help="address space per process")
    parser.add_argument("--reference", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--seed", type=int, default=None, help="hidden-test seed (default: a fresh random one)")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a directory of notebooks")
    if args.timeout < 1:
        parser.error("--timeout must be at least 1 second")
    if args.seed is not None and args.seed < 0:
        parser.error("--seed must be non-negative")
    grade(args.submissions, args.out, args.timeout, args.reference if args.reference.is_dir() else None,
          args.memory_gb, args.seed)


if __name__ == "__main__":
    main()
