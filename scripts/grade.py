"""Grade a folder of submitted notebooks: each in a sandbox, judged by hidden tests outside it.

Usage: python scripts/grade.py SUBMISSIONS [--out grades.csv] [--timeout 600]
                               [--reference notebooks] [--memory-gb 8] [--disk-mb 512] [--seed N]

Layout: ``SUBMISSIONS/<student>/<name>.ipynb``, where ``<name>.ipynb`` is a reference
notebook (in ``--reference``) that has checker cells. Only those are graded, one per
student per reference; every other file is listed as ignored. For each notebook:

1. The grader builds the assignment's hidden cases here, from a seed chosen now, and
   writes only their arguments into a fresh read-only folder with the notebook, a copy
   of the package in which the package's own answers do not exist (they raise), and the
   worker that executes the notebook.
2. The notebook runs to the end (cells that raise do not stop it) inside a sandbox:
   bubblewrap with its own user, network, process and mount namespaces, as an
   unprivileged user, seeing only the system libraries, Python, that folder and a
   writable tmpfs of bounded size; memory and processes are limited for the whole
   sandbox by a cgroup where one can be made; wall time by ``--timeout``. Without
   bubblewrap it runs in a plain process group, with a loud warning.
3. After the student's cells the worker calls the student's function (named in their
   checker cell) on those arguments and sends the outputs back through a pipe; nothing
   the sandbox wrote is read from disk.
4. Here, a judge process with its own time and memory limits loads the outputs (plain
   types and dense tensors of bounded size only) and applies the instructor's checks
   (``attention_book.assignments.grading``).

Writes, as each notebook finishes, one row per (student, notebook, assignment) to
``--out``; then ``gradebook.csv`` (one row per student, points per assignment and
total: importable by Canvas and Moodle), ``feedback/<student>.md`` and ``ignored.csv``
beside it. Every cell a student controls is written so that a spreadsheet shows it as
text, and control characters are removed from everything printed or written.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import hashlib
import json
import os
import re
import resource
import secrets
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attention_book.assignments import assignment_names
from attention_book.assignments.grading import RESULTS_LIMIT, JudgeServer, hidden_arguments, package_without

ROOT = Path(__file__).resolve().parent.parent
CHECK_CALL = re.compile(r"check_(\w+)\s*\(")
POINTS = 10  # per assignment
FIELDS = ["student", "notebook", "assignment", "passed", "total", "score", "points", "status", "reason"]
OUTPUT_LIMIT = 64 * 2**20  # bytes a sandboxed process may write to one file
NOTEBOOK_LIMIT = 50 * 2**20  # bytes of a submitted notebook
PROCESSES = 256  # processes and threads of one sandbox
NOBODY = 65534
JUDGE_SECONDS = 60
JUDGE_MEMORY = 4 * 2**30

# Runs inside the sandbox: execute the notebook (errors do not stop it), then the hidden tests,
# then send the worker's report and each results file through the pipe the grader reads.
_WORKER = r"""
import json, os, shutil, stat, struct, sys
pipe = int(os.environ.pop("GRADE_PIPE"))
os.set_inheritable(pipe, False)  # the kernel does not inherit it
job = json.load(open(sys.argv[1]))
os.makedirs(job["out"], exist_ok=True)
shutil.copyfile(job["notebook"], "submission.ipynb")
import nbformat
from nbclient import NotebookClient
import kernel_poll  # noqa: F401  (book/_ext/kernel_poll.py: a missed socket wake-up must not stall grading)
report = {"errors": [], "harness": [], "worker": ""}
try:
    nb = nbformat.read("submission.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(job["harness"]))
    client = NotebookClient(nb, timeout=job["cell_timeout"], startup_timeout=job["cell_timeout"],
                            kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": os.getcwd()}})
    client.execute()
    for cell in nb.cells[:-1]:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                report["errors"].append(f"{out.get('ename')}: {str(out.get('evalue'))[:150]}")
    report["harness"] = [f"{o.get('ename')}: {str(o.get('evalue'))[:200]}"
                         for o in nb.cells[-1].get("outputs", []) if o.get("output_type") == "error"]
except BaseException as err:
    report["worker"] = f"{type(err).__name__}: {str(err)[:300]}"
report["errors"] = report["errors"][:3]
def send(name, data):
    key = name.encode()
    head = struct.pack(">H", len(key)) + key + struct.pack(">Q", len(data))
    for part in (head, data):
        view = memoryview(part)
        while view:
            view = view[os.write(pipe, view):]
send("worker", json.dumps(report).encode())
for name in job["assignments"]:
    try:
        fd = os.open(os.path.join(job["out"], name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                send("results:" + name, f.read(job["limit"] + 1))
    except OSError:
        pass
"""


# --------------------------------------------------------------------------- text a student controls

_ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")


def clean(text, limit: int = 500) -> str:
    """``text`` as one printable line: terminal escape sequences removed, every other control or
    format character (newline, tab, bidirectional overrides) replaced by a space, cut to ``limit``."""
    text = _ANSI.sub("", str(text)[: limit * 4])
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text)
    return text.strip()[:limit]


def display_name(raw: str) -> str:
    """A student's folder name, printable and still unique: a control character becomes ``\\xNN``
    (``\\uNNNN``), a backslash ``\\\\``."""
    out = []
    for c in raw:
        if c == "\\":
            out.append("\\\\")
        elif unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def safe(value):
    """A cell a spreadsheet shows as text: printable, no formula (=, +, -, @ first)."""
    if isinstance(value, str):
        value = clean(value)
        if value[:1] in ("=", "+", "-", "@"):
            return "'" + value
    return value


def file_names(students: list[str]) -> dict[str, str]:
    """``{student: file name stem}``: letters, digits, ``_.-`` only, never hidden, unique."""
    taken: set[str] = set()
    names = {}
    for who in students:
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", who)[:80].lstrip(".") or "student"
        name, n = stem, 2
        while name.lower() in taken:
            name, n = f"{stem}-{n}", n + 1
        taken.add(name.lower())
        names[who] = name
    return names


# --------------------------------------------------------------------------- what to grade


def _cells(nb) -> list:
    cells = nb.get("cells") if isinstance(nb, dict) else None
    return cells if isinstance(cells, list) else []


def _checker_sources(nb) -> list[str]:
    """The source of each code cell tagged ``checker`` (cells of any other form are skipped)."""
    found = []
    for cell in _cells(nb):
        meta = cell.get("metadata") if isinstance(cell, dict) else None
        tags = meta.get("tags") if isinstance(meta, dict) else None
        if cell.get("cell_type") != "code" or not isinstance(tags, list) or "checker" not in tags:
            continue
        src = cell.get("source", "")
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        if isinstance(src, str):
            found.append(src)
    return found


def expected_assignments(nb: dict) -> list[str]:
    """The assignments a notebook's ``checker`` cells call, in order."""
    names: list[str] = []
    for src in _checker_sources(nb):
        for name in CHECK_CALL.findall(src):
            if name not in names:
                names.append(name)
    return names


def graded_names(nb: dict) -> dict[str, str]:
    """``{assignment: expression naming the student's function}`` from the checker cells; a cell that
    is too long or too deep to parse safely is skipped."""
    found: dict[str, str] = {}
    for src in _checker_sources(nb):
        if len(src) > 20_000:
            continue
        try:
            tree = ast.parse(src)
            nodes = list(ast.walk(tree))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in nodes:
            if isinstance(node, ast.Call) and node.args and isinstance(node.func, (ast.Attribute, ast.Name)):
                func = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
                target = _dotted(node.args[0])
                if func.startswith("check_") and target:
                    found.setdefault(func[len("check_"):], target)
    return found


def _dotted(node: ast.AST, depth: int = 0) -> str | None:
    """``name`` or ``a.b.c`` (at most 8 parts) for a plain (dotted) name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and depth < 8:
        inner = _dotted(node.value, depth + 1)
        return f"{inner}.{node.attr}" if inner else None
    return None


def notebook_problem(nb) -> str:
    """Why ``nb`` is not a notebook the worker can run ('' when it is one)."""
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return "not a notebook (no list of cells)"
    if not isinstance(nb.get("metadata", {}), dict):
        return "the notebook's metadata is not a mapping"
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            return f"cell {i} is not a code, markdown or raw cell"
        if not isinstance(cell.get("metadata", {}), dict):
            return f"cell {i}'s metadata is not a mapping"
        tags = cell.get("metadata", {}).get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            return f"cell {i}'s tags are not a list of strings"
        src = cell.get("source", "")
        if not isinstance(src, str) and not (isinstance(src, list) and all(isinstance(s, str) for s in src)):
            return f"cell {i}'s source is not text"
    return ""


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, opened without following a link; a regular file of at most ``limit`` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"larger than {limit // 2**20} MB")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 2**20} MB")
    return data


def find_submissions(submissions: Path, references: dict[str, list[str]]) -> tuple[list, list]:
    """``([(student, path)], [(path, why ignored)])``: only ``SUBMISSIONS/<student>/<reference name>``,
    regular files, one per student per reference."""
    graded, ignored = [], []
    for path in sorted(submissions.rglob("*")):
        rel = path.relative_to(submissions)
        if any(part == ".ipynb_checkpoints" or part.startswith(".") for part in rel.parts):
            continue
        if path.is_symlink():
            ignored.append((rel, "a symbolic link"))
            continue
        if path.is_dir():
            continue
        if len(rel.parts) != 2:
            ignored.append((rel, "not in a student's folder directly (SUBMISSIONS/<student>/<notebook>)"))
        elif not path.is_file():
            ignored.append((rel, "not a regular file"))
        elif rel.parts[1] not in references:
            ignored.append((rel, "no reference notebook of this name has an assignment"))
        elif submissions.joinpath(rel.parts[0]).is_symlink():
            ignored.append((rel, "the student's folder is a symbolic link"))
        else:
            graded.append((rel.parts[0], path))
    return graded, ignored


# --------------------------------------------------------------------------- the sandbox


class Cgroup:
    """A memory and process limit for a whole sandbox: cgroup v2, or the v1 memory and pids controllers."""

    def __init__(self, dirs: list[Path]):
        self.dirs = dirs

    @staticmethod
    def create(memory: int, processes: int) -> tuple["Cgroup | None", str]:
        root = Path("/sys/fs/cgroup")
        name = f"grade-{os.getpid()}-{secrets.token_hex(4)}"
        made: list[Path] = []
        try:
            if (root / "cgroup.controllers").exists():  # v2
                own = next((line.split("::", 1)[1].strip() for line in Path("/proc/self/cgroup").read_text()
                            .splitlines() if line.startswith("0::")), "/")
                parent = root / own.lstrip("/")
                enabled = (parent / "cgroup.subtree_control").read_text().split()
                if not {"memory", "pids"} <= set(enabled):
                    (parent / "cgroup.subtree_control").write_text("+memory +pids")
                made.append(parent / name)
                made[-1].mkdir()
                (made[-1] / "memory.max").write_text(str(memory))
                with contextlib.suppress(OSError):
                    (made[-1] / "memory.swap.max").write_text("0")
                (made[-1] / "pids.max").write_text(str(processes))
            else:  # v1
                for controller, files in (("memory", {"memory.limit_in_bytes": memory}),
                                          ("pids", {"pids.max": processes})):
                    made.append(root / controller / name)
                    made[-1].mkdir()
                    for file, value in files.items():
                        (made[-1] / file).write_text(str(value))
                with contextlib.suppress(OSError):
                    (made[0] / "memory.memsw.limit_in_bytes").write_text(str(memory))
            return Cgroup(made), ""
        except (OSError, StopIteration) as err:
            Cgroup(made).remove()
            return None, f"{type(err).__name__}: {err.strerror if isinstance(err, OSError) else err}"

    def join(self) -> None:
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(os.getpid()))

    def out_of_memory(self) -> bool:
        for d in self.dirs:
            for file in ("memory.events", "memory.oom_control"):
                with contextlib.suppress(OSError, ValueError):
                    counts = dict(line.split() for line in (d / file).read_text().splitlines())
                    if int(counts.get("oom_kill", 0)) > 0:
                        return True
        return False

    def kill(self) -> None:
        for _ in range(50):
            pids = set()
            for d in self.dirs:
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def remove(self) -> None:
        self.kill()
        for d in self.dirs:
            with contextlib.suppress(OSError):
                d.rmdir()


@dataclass
class Sandbox:
    kind: str  # "bubblewrap" or "none"
    unprivileged: bool = False  # bubblewrap started as uid 65534 (the grader runs as root)
    missing: list[str] = field(default_factory=list)  # what is not isolated or not limited

    @staticmethod
    def detect(memory: int = 8 * 2**30) -> "Sandbox":
        bwrap = shutil.which("bwrap")
        if not bwrap:
            why = "bubblewrap (Debian package `bubblewrap`) is not installed"
        else:
            why = ""
            for unprivileged in ([True, False] if os.geteuid() == 0 else [False]):
                box = Sandbox("bubblewrap", unprivileged)
                with tempfile.TemporaryDirectory(prefix="grade-probe-") as tmp:
                    os.chmod(tmp, 0o755)
                    for file in ("passwd", "group"):
                        Path(tmp, file).write_text("")
                        os.chmod(Path(tmp, file), 0o644)
                    argv = box.command(Path(tmp), Path(tmp), 64 * 2**20,
                                       [sys.executable, "-c", "import torch, nbclient, ipykernel"])
                    probe = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                           preexec_fn=box._start(None, memory))
                if probe.returncode == 0:
                    if os.geteuid() == 0 and not unprivileged:
                        box.missing.append("the sandbox's user is root outside its namespace (Python is not "
                                           "readable by uid 65534 here): files of root's that the sandbox "
                                           "sees are readable to it")
                    elif os.geteuid() != 0:
                        box.missing.append("the sandbox runs as your own user outside its namespace (grading "
                                           "as root runs it as uid 65534)")
                    return box
                why = f"bwrap cannot start Python here ({clean(probe.stderr.strip()[-200:])})"
        return Sandbox("none", False, [why, "the file system (other submissions, the reference notebooks and this "
                                            "grader's output are readable and writable)", "the network",
                                       "processes that detach from the session survive"])

    def command(self, stage: Path, pkg: Path, disk: int, argv: list[str]) -> list[str]:
        if self.kind == "none":
            return argv
        cmd = ["bwrap", "--die-with-parent", "--new-session", "--unshare-all", "--unshare-user", "--disable-userns",
               "--uid", str(NOBODY), "--gid", str(NOBODY),
               "--size", str(disk), "--tmpfs", "/tmp"]  # first: the binds below may lie under /tmp
        for top in ("/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin"):
            p = Path(top)
            if p.is_symlink():
                cmd += ["--symlink", os.readlink(p), top]
            elif p.is_dir():
                cmd += ["--ro-bind", top, top]
        binds = [sys.base_prefix, sys.prefix, str(Path(sys.executable).parent)]
        data = os.environ.get("ATTENTION_BOOK_DATA", "").strip()
        if data and Path(data).is_dir():
            binds.append(data)
        seen: set[str] = set()
        for path in binds:
            for p in (os.path.abspath(path), os.path.realpath(path)):
                if p not in seen and Path(p).exists() and not p.startswith(("/usr/", "/proc", "/sandbox", "/in")):
                    seen.add(p)
                    cmd += ["--ro-bind", p, p]
        for file in ("ld.so.cache", "ld.so.conf", "nsswitch.conf", "hosts", "host.conf", "localtime"):
            if Path("/etc", file).exists():
                cmd += ["--ro-bind", str(Path("/etc", file).resolve()), f"/etc/{file}"]
        cmd += ["--ro-bind", str(stage / "passwd"), "/etc/passwd", "--ro-bind", str(stage / "group"), "/etc/group",
                "--ro-bind", str(stage), "/in", "--ro-bind", str(pkg), "/pkg",
                "--dev", "/dev", "--size", str(64 * 2**20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
                "--proc", "/proc", "--size", str(disk), "--tmpfs", "/sandbox", "--dir", "/sandbox/home",
                "--chdir", "/sandbox"]
        return cmd + argv

    def _start(self, cgroup: Cgroup | None, memory: int, cpu_seconds: int = 3600):
        unprivileged = self.unprivileged

        def apply():
            os.setsid()
            if cgroup is not None:
                cgroup.join()
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
            resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT, OUTPUT_LIMIT))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            uid = NOBODY if unprivileged else os.getuid()
            running = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid)
            resource.setrlimit(resource.RLIMIT_NPROC, (running + PROCESSES, running + PROCESSES))
            if unprivileged:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)

        return apply


def _owner(proc: Path) -> int:
    try:
        return proc.stat().st_uid
    except OSError:
        return -1


def _stream(data: bytes) -> dict[str, bytes]:
    """The worker's messages: (2-byte name length, name, 8-byte length, bytes) repeated."""
    items, i = {}, 0
    while i + 2 <= len(data):
        (n,) = struct.unpack(">H", data[i:i + 2])
        name = data[i + 2:i + 2 + n].decode("utf-8", "replace")
        (size,) = struct.unpack(">Q", data[i + 2 + n:i + 10 + n].rjust(8, b"\0"))
        body = data[i + 10 + n:i + 10 + n + size]
        if len(body) < size:
            break
        items.setdefault(name, body)
        i += 10 + n + size
    return items


def run_sandboxed(sandbox: Sandbox, stage: Path, pkg: Path, timeout: int, memory_gb: float, disk: int,
                  limit: int, missing: set[str]) -> tuple[str, dict[str, bytes], float]:
    """Run the worker on ``stage/job.json``; return (how it ended, the worker's messages, seconds)."""
    memory = int(memory_gb * 2**30)
    cgroup, why = (Cgroup.create(memory, PROCESSES) if os.geteuid() == 0 else (None, "not root"))
    if cgroup is None:
        missing.add(f"memory and processes of the whole sandbox (no cgroup: {why}); each process has "
                    f"{memory_gb:g} GB of address space and the user {PROCESSES} more processes")
    inside = {"stage": "/in", "pkg": "/pkg", "work": "/sandbox"} if sandbox.kind != "none" else \
        {"stage": str(stage), "pkg": str(pkg), "work": str(stage.parent / "work")}
    if sandbox.kind == "none":
        (stage.parent / "work" / "home").mkdir(parents=True)
    read, write = os.pipe()
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": f"{inside['work']}/home",
           "MPLBACKEND": "Agg", "ATTENTION_BOOK_SIZE": os.environ.get("ATTENTION_BOOK_SIZE", "ci"),
           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "JUPYTER_PLATFORM_DIRS": "1",
           "PYTHONPATH": f"{inside['pkg']}:{inside['stage']}", "GRADE_PIPE": str(write), "TMPDIR": "/tmp"}
    if os.environ.get("ATTENTION_BOOK_DATA"):
        env["ATTENTION_BOOK_DATA"] = os.environ["ATTENTION_BOOK_DATA"]
    argv = sandbox.command(stage, pkg, disk, [sys.executable, f"{inside['stage']}/worker.py",
                                              f"{inside['stage']}/job.json"])
    start = time.monotonic()
    received, tail, ended = bytearray(), b"", "timeout"
    proc = None
    try:
        err_read, err_write = os.pipe()
        proc = subprocess.Popen(argv, cwd=inside["work"] if sandbox.kind == "none" else stage, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err_write,
                                pass_fds=(write,), preexec_fn=sandbox._start(cgroup, memory, 2 * timeout + 30))
        os.close(write)
        os.close(err_write)
        write = err_write = -1
        open_fds = {read, err_read}
        deadline = start + timeout
        exited_at = None
        while open_fds:
            now = time.monotonic()
            if now > deadline or (exited_at is not None and now > exited_at + 5):
                break
            ready, _, _ = select.select(list(open_fds), [], [], 0.5)
            for fd in ready:
                chunk = os.read(fd, 2**20)
                if not chunk:
                    open_fds.discard(fd)
                elif fd == read:
                    if len(received) <= limit:
                        received += chunk
                else:
                    tail = (tail + chunk)[-4000:]
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
        if time.monotonic() <= deadline:
            code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            ended = "finished" if code == 0 else f"worker exited with {code}"
    except subprocess.TimeoutExpired:
        ended = "timeout"
    finally:
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # the whole tree (bubblewrap: its namespace dies too)
        if cgroup is not None:
            if ended != "finished" and ended != "timeout" and cgroup.out_of_memory():
                ended = f"the sandbox used more than its {memory_gb:g} GB of memory"
            cgroup.remove()
        if proc is not None:
            proc.wait()
        for fd in (read, write, locals().get("err_read", -1), locals().get("err_write", -1)):
            with contextlib.suppress(OSError):
                if fd >= 0:
                    os.close(fd)
    if ended.startswith("worker exited"):
        lines = tail.decode("utf-8", "replace").strip().splitlines()
        ended += f": {clean(lines[-1], 200)}" if lines else ""
    return ended, _stream(bytes(received)) if len(received) <= limit else {}, time.monotonic() - start


# --------------------------------------------------------------------------- one notebook


def harness_code(targets: dict[str, str], cases: str, out: str) -> str:
    """The cell appended to the notebook: each assignment's hidden cases, run on the student's function."""
    lines = ["import attention_book.assignments.grading as _grade"]
    for name, expr in targets.items():
        lines.append(f"try:\n    _grade.run_hidden({name!r}, _grade.resolve({expr!r}, globals()), "
                     f"{cases + '/cases-' + name + '.pt'!r}, {out + '/' + name!r})\n"
                     "except Exception as _err:\n    print(_err)")
    return "\n".join(lines)


class Grader:
    """Grades notebooks one at a time; holds what every notebook shares (the sandbox, the judge, the
    package copies)."""

    def __init__(self, reference: Path, timeout: int, memory_gb: float, disk_mb: int, seed: int | None):
        self.timeout, self.memory_gb, self.disk = timeout, memory_gb, disk_mb * 2**20
        self.offset = seed if seed is not None else secrets.randbelow(2**31)
        self.run_dir = Path(tempfile.mkdtemp(prefix="grade-run-"))
        os.chmod(self.run_dir, 0o755)
        self.sandbox = Sandbox.detect(int(memory_gb * 2**30))
        self.missing: set[str] = set(self.sandbox.missing)
        self.judge = JudgeServer()
        self.references: dict[str, list[str]] = {}
        known = set(assignment_names())
        for path in sorted(reference.glob("*.ipynb")):
            with contextlib.suppress(OSError, ValueError):
                names = [n for n in expected_assignments(json.loads(path.read_text(encoding="utf-8")))
                         if n in known]
                if names:
                    self.references[path.name] = names
        self.reference_names = {name: graded_names(json.loads((reference / name).read_text(encoding="utf-8")))
                                for name in self.references}
        self.packages: dict[tuple, Path] = {}

    def close(self) -> None:
        self.judge.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def package(self, names: list[str]) -> Path:
        key = tuple(sorted(names))
        if key not in self.packages:
            dest = self.run_dir / f"pkg-{hashlib.sha1(' '.join(key).encode()).hexdigest()[:10]}"
            package_without(key, dest)
            for p in [dest, *dest.rglob("*")]:
                os.chmod(p, 0o755 if p.is_dir() else 0o644)
            self.packages[key] = dest
        return self.packages[key]

    def grade_notebook(self, who: str, path: Path) -> list[dict]:
        expected = self.references[path.name]
        base = dict(student=who, notebook=path.name)

        def rows(status, reason, **extra):
            return [dict(base, assignment=n, passed=0, total=0, score=0.0, points=0.0, status=status,
                         reason=reason, **extra) for n in expected]

        try:
            nb = json.loads(read_regular(path, NOTEBOOK_LIMIT).decode("utf-8"))
            problem = notebook_problem(nb)
        except (ValueError, OSError, RecursionError, MemoryError) as err:
            nb, problem = None, f"{type(err).__name__}: {err}"
        if problem:
            return rows("unreadable", f"not a valid notebook: {clean(problem, 150)}")
        names = dict(self.reference_names[path.name])
        names.update({k: v for k, v in graded_names(nb).items() if k in expected})
        targets = {n: names.get(n, "") for n in expected}
        nonce = secrets.token_hex(16)
        stage_root = Path(tempfile.mkdtemp(prefix="grade-", dir=self.run_dir))
        try:
            os.chmod(stage_root, 0o755)
            stage = stage_root / "in"
            stage.mkdir(mode=0o755)
            shutil.copyfile(path, stage / "submission.ipynb")
            shutil.copyfile(ROOT / "book" / "_ext" / "kernel_poll.py", stage / "kernel_poll.py")
            (stage / "worker.py").write_text(_WORKER)
            (stage / "passwd").write_text(f"student:x:{NOBODY}:{NOBODY}:student:/sandbox/home:/bin/false\n")
            (stage / "group").write_text(f"student:x:{NOBODY}:\n")
            for name in expected:
                torch.save(hidden_arguments(name, self.offset, nonce), stage / f"cases-{name}.pt")
            boxed = self.sandbox.kind != "none"
            inside, work = ("/in", "/sandbox") if boxed else (str(stage), str(stage_root / "work"))
            harness = harness_code(targets, inside, work + "/out")
            (stage / "job.json").write_text(json.dumps({
                "notebook": f"{inside}/submission.ipynb", "harness": harness,
                "cell_timeout": self.timeout, "assignments": expected, "out": f"{work}/out",
                "limit": RESULTS_LIMIT}))
            for p in stage.iterdir():
                os.chmod(p, 0o644)
            ended, messages, seconds = run_sandboxed(
                self.sandbox, stage, self.package(expected), self.timeout, self.memory_gb, self.disk,
                len(expected) * (RESULTS_LIMIT + 1024) + 2**20, self.missing)
        finally:
            shutil.rmtree(stage_root, ignore_errors=True)
        try:
            worker = json.loads(messages.get("worker", b"{}").decode("utf-8"))
            errors = "; ".join(str(e) for e in worker.get("errors", []))[:300]
        except (ValueError, AttributeError, TypeError, RecursionError):
            errors = ""
        out = []
        for name in expected:
            row = dict(base, assignment=name, passed=0, total=0, score=0.0, points=0.0, seconds=round(seconds, 1))
            payload = messages.get(f"results:{name}")
            if ended == "timeout":
                row.update(status="timeout", reason=f"did not finish within {self.timeout} s")
            elif payload is None:
                row.update(status="no results", reason=(f"the hidden tests did not run ({ended})"
                                                        + (f"; cells raised: {errors}" if errors else "")))
            else:
                verdict = self.judge.judge(name, self.offset, nonce, payload, JUDGE_SECONDS, JUDGE_MEMORY)
                if verdict["status"] == "flagged":
                    row.update(status="flagged", reason=verdict["reason"])
                else:
                    score = verdict["passed"] / verdict["total"] if verdict["total"] else 0.0
                    row.update(passed=verdict["passed"], total=verdict["total"], score=round(score, 4),
                               points=round(POINTS * score, 2), status=verdict["status"],
                               reason="; ".join(f"{case}: {why}" for case, why in verdict["failures"])[:400])
            out.append(row)
        return out


# --------------------------------------------------------------------------- files


def write_gradebook(rows: list[dict], out_dir: Path) -> tuple[Path, Path]:
    """gradebook.csv (Canvas/Moodle import) and feedback/<student>.md; rows' students are display names."""
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
    for who, stem in file_names(students).items():
        lines = [f"# Feedback for {clean(who)}", ""]
        for r in rows:
            if r["student"] != who:
                continue
            lines.append(f"## {clean(r['notebook'])}: {r['assignment'] or '(no assignment)'}: "
                         f"{r['points']}/{POINTS} points ({r['status']})")
            lines += [f"- {clean(part)}" for part in str(r["reason"]).split("; ") if part.strip()]
            lines.append("")
        (feedback / f"{stem}.md").write_text("\n".join(lines), encoding="utf-8")
    return book, feedback


def grade(submissions: Path, out_csv: Path, timeout: int, reference: Path, memory_gb: float = 8.0,
          seed: int | None = None, disk_mb: int = 512) -> list[dict]:
    grader = Grader(reference, timeout, memory_gb, disk_mb, seed)
    try:
        return _grade_all(grader, submissions, out_csv)
    finally:
        grader.close()


def _grade_all(grader: Grader, submissions: Path, out_csv: Path) -> list[dict]:
    if grader.sandbox.kind == "none":
        bar = "!" * 78
        print(f"{bar}\nWARNING: submissions run WITHOUT a sandbox. Not isolated: " + "; ".join(grader.missing)
              + f".\nOnly grade work you trust this way.\n{bar}", file=sys.stderr)
    else:
        user = "uid 65534" if grader.sandbox.unprivileged else "your user" if os.geteuid() else "root"
        print(f"sandbox: bubblewrap as {user} (no network, own process tree, only the system, Python and a "
              f"package copy without the answers, read-only; {grader.disk // 2**20} MB tmpfs)")
    notebooks, ignored = find_submissions(submissions, grader.references)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with out_csv.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS + ["seconds"], extrasaction="ignore")
        writer.writeheader()
        f.flush()
        for raw, path in notebooks:
            who = display_name(raw)
            try:
                found = grader.grade_notebook(who, path)
            except Exception as err:  # noqa: BLE001  a failure of the grader costs this notebook only
                found = [dict(student=who, notebook=path.name, assignment=n, passed=0, total=0, score=0.0,
                              points=0.0, status="grader error", reason=f"{type(err).__name__}: {err}")
                         for n in grader.references[path.name]]
            for row in found:
                row["reason"] = clean(row["reason"], 500)
                row.setdefault("seconds", 0.0)
                writer.writerow({k: safe(v) for k, v in row.items()})
                rows.append(row)
                print(f"{clean(row['student'], 120)}/{clean(row['notebook'], 80)} {row['assignment']}: "
                      f"{row['points']}/{POINTS} ({row['status']})"
                      + (f" — {clean(row['reason'], 120)}" if row["reason"] else ""))
            f.flush()
    book, feedback = write_gradebook(rows, out_csv.parent)
    with (out_csv.parent / "ignored.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["path", "why"])
        for rel, why in ignored:
            writer.writerow([safe(display_name(str(rel))), why])
    for rel, why in ignored:
        print(f"ignored: {clean(display_name(str(rel)), 160)} ({why})")
    for what in sorted(grader.missing):
        print(f"not limited: {what}")
    print(f"Wrote {len(rows)} rows to {out_csv}, totals to {book}, feedback to {feedback}/, {len(ignored)} ignored "
          f"files to {out_csv.parent / 'ignored.csv'} (sandbox: {grader.sandbox.kind})")
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=Path)
    parser.add_argument("--out", type=Path, default=Path("grades.csv"))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per notebook")
    parser.add_argument("--memory-gb", type=float, default=8.0,
                        help="memory of the whole sandbox (cgroup) and address space of each process")
    parser.add_argument("--disk-mb", type=int, default=512, help="size of each of the sandbox's two tmpfs")
    parser.add_argument("--reference", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--seed", type=int, default=None, help="hidden-test seed (default: a fresh random one)")
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a directory of notebooks")
    if not args.reference.is_dir():
        parser.error(f"--reference {args.reference} is not a directory of reference notebooks")
    if args.timeout < 1:
        parser.error("--timeout must be at least 1 second")
    if args.memory_gb <= 0 or args.disk_mb < 16:
        parser.error("--memory-gb must be positive and --disk-mb at least 16")
    if args.seed is not None and args.seed < 0:
        parser.error("--seed must be non-negative")
    grade(args.submissions, args.out, args.timeout, args.reference, args.memory_gb, args.seed, args.disk_mb)


if __name__ == "__main__":
    main()
