"""Grade a folder of submitted notebooks: each in a sandbox, judged by hidden tests outside it.

Usage: python scripts/grade.py SUBMISSIONS [--out grades.csv] [--timeout 300] [--course course.toml]
           [--jobs N] [--resume] [--regrade STUDENT] [--secret S] [--reference notebooks]
           [--memory-gb 8] [--disk-mb 512] [--seed N]

Layout: ``SUBMISSIONS/<student>/<name>.ipynb`` (or, from an LMS's bulk download,
``SUBMISSIONS/<login>_<id>_<id>_<name>.ipynb``), where ``<name>.ipynb`` is a reference notebook
(in ``--reference``) that has checker cells; common renamings (``(1)``, ``-1``) are matched.
Everything else is listed as ignored. For each notebook:

1. The grader builds the assignment's hidden cases here, from the student's seed (HMAC-SHA256 of
   the course secret, the assignment and the student: the same grade on every regrade), and
   writes only their arguments into a fresh folder with the notebook, a copy of the package that
   holds no answer (the graded function, the package's other routes to it, the checker's own
   reference), and the worker that executes the notebook.
2. The notebook runs to the end (cells that raise do not stop it) inside a sandbox:
   bubblewrap with its own user, network, process and mount namespaces, as an
   unprivileged user, seeing only the system libraries, Python, that folder and two writable
   tmpfs of bounded size, the rest read-only; memory and processes are limited for the whole
   sandbox by a cgroup inside the grader's own; wall time by ``--timeout``. Without
   bubblewrap it runs in a plain process group, with a loud warning.
3. After the student's cells the worker calls the student's function (named in their
   checker cell) on every case and sends the outputs back through a pipe; nothing
   the sandbox wrote is read from disk.
4. Here, a judge process with its own time and memory limits reads the outputs (a JSON header
   and raw tensor bytes: never pickle) and applies the instructor's checks
   (``attention_book.assignments.grading``); the score is over every case.

Writes beside ``--out``: grades.csv (one row per student, notebook and assignment, with its status,
seed and reasons), grades.jsonl (the same with every case, as each notebook finishes: what
``--resume`` and ``--regrade`` read), gradebook.csv, canvas.csv (only with a roster: Canvas matches
rows by ID or SIS login) and moodle.csv (LMS imports; a missing submission blank),
feedback/<student>.md, gradescope/<student>/results.json and ignored.csv, each written atomically
under a lock on the folder. Every cell a student controls is
written so that a spreadsheet shows it as text, and control characters are removed from
everything printed or written. See book/instructors.md.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import datetime as dt
import errno
import fcntl
import functools
import hashlib
import io
import json
import os
import re
import reprlib
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
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from zoneinfo import ZoneInfo


def _missing_module() -> ModuleNotFoundError | None:
    try:
        import attention_book  # noqa: F401
    except ModuleNotFoundError as err:
        return err
    return None


_MISSING = _missing_module()
_SRC = Path(__file__).resolve().parent.parent / "src"
if _MISSING is not None and _MISSING.name == "attention_book" and (_SRC / "attention_book").is_dir():
    # A clone whose Python has the dependencies (torch, nbclient) but not this package installed: grade with
    # the clone's own source (children, the judge and the kernels, find it through PYTHONPATH too).
    sys.path.insert(0, str(_SRC))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(_SRC), os.environ.get("PYTHONPATH", "")) if p)
    _MISSING = _missing_module()
if _MISSING is not None:
    sys.exit(f"grade.py: {sys.executable} has no module {_MISSING.name!r}. The grader needs a Python with the "
             "book's dependencies: `make venv` makes one in .venv (make grade then uses it); or name yours with "
             "`make grade GRADE_PYTHON=/path/to/python`, or run `/path/to/python scripts/grade.py ...`")

from attention_book.assignments import assignment_names
from attention_book.assignments.grading import (IN_PLACE, RESULTS_LIMIT, TORCH_BLOCKED, BlockedAnswer, JudgeServer,
                                                dump_data, grading_cases, hidden_arguments, package_without)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import course as course_mod  # noqa: E402  (scripts/course.py)
import lms_export  # noqa: E402  (scripts/lms_export.py)
from course import (Course, CourseError, check_override_students, derive_seed, grading_secret,  # noqa: E402
                    load_course, load_times, secret_id)
CHECK_CALL = re.compile(r"check_(\w+)\s*\(")
OUTPUT_LIMIT = 64 * 2**20  # bytes a sandboxed process may write to one file
NOTEBOOK_LIMIT = 50 * 2**20  # bytes of a submitted notebook
TIMEOUT = 300  # default seconds per notebook (--timeout); chapter 7's exercises take ~90 s on 2 cores
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
# nor reaches it through /proc/<this worker>/fd: a process that is not dumpable has its /proc entries owned by
# root, out of reach of the kernel, which runs as the same user (an attacker wrote a forged report there)
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4, off
except (OSError, AttributeError):
    pass
job = json.load(open(sys.argv[1]))
os.makedirs(job["out"], exist_ok=True)
shutil.copyfile(job["notebook"], "submission.ipynb")
import nbformat
from nbclient import NotebookClient
import kernel_poll  # noqa: F401  (book/_ext/kernel_poll.py: a missed socket wake-up must not stall grading)
def send(name, data):
    key = name.encode()
    head = struct.pack(">H", len(key)) + key + struct.pack(">Q", len(data))
    for part in (head, data):
        view = memoryview(part)
        while view:
            view = view[os.write(pipe, view):]
report = {"errors": [], "harness": [], "worker": ""}
try:
    nb = nbformat.read("submission.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(job["harness"]))
    # The kernel runs on this worker's own Python whatever kernel.json an installation wrote (a venv moved,
    # or reached through a link, names a Python the sandbox cannot see): a kernelspec of the worker's own,
    # first on JUPYTER_PATH.
    spec = os.path.join(os.getcwd(), ".grader-kernels")
    os.makedirs(os.path.join(spec, "kernels", "python3"), exist_ok=True)
    with open(os.path.join(spec, "kernels", "python3", "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "Python 3", "language": "python"}, f)
    os.environ["JUPYTER_PATH"] = spec + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    client = NotebookClient(nb, timeout=job["cell_timeout"], startup_timeout=job["cell_timeout"],
                            kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": os.getcwd()}})
    # each code cell's index as it starts: after a timeout, a memory kill or a dead kernel the grader
    # names the cell that was running (the kernel has no handle on this pipe)
    client.on_cell_execute = lambda cell, cell_index: send("started:%d" % cell_index, b"")
    client.execute()
    for i, cell in enumerate(nb.cells[:-1]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                report["errors"].append({"cell": i, "error": f"{out.get('ename')}: {str(out.get('evalue'))[:300]}"})
    report["harness"] = [f"{o.get('ename')}: {str(o.get('evalue'))[:200]}"
                         for o in nb.cells[-1].get("outputs", []) if o.get("output_type") == "error"]
except BaseException as err:
    report["worker"] = f"{type(err).__name__}: {str(err)[:300]}"
    report["dead"] = type(err).__name__ == "DeadKernelError"
report["errors"] = report["errors"][:100]
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
    return cut_at_word(text.strip(), limit)


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


def cut_at_word(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else cut where a word or identifier ends (never
    inside one, unless the text starts with one longer than ``limit``) and ended with " …", ``limit``
    characters at most in all."""
    if len(text) <= limit:
        return text
    room = max(limit - 2, 1)
    at = next((i for i in range(room, 0, -1) if not (_word(text[i - 1]) and _word(text[i]))), room)
    return (text[:at].rstrip() or text[:room]) + " …"


def display_name(raw: str) -> str:
    """A student's folder name, printable and still unique: a control character becomes ``\\xNN``
    (``\\uNNNN``), a backslash ``\\\\``, and so does white space at either end (``ada `` is ``ada\\x20``:
    a cell or a line that strips spaces would show it as ``ada``, another student)."""
    out = []
    ends = len(raw) - len(raw.lstrip()), len(raw.rstrip())
    for i, c in enumerate(raw):
        if (i < ends[0] or i >= ends[1]) and c.isspace():
            out.append(f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
        elif c == "\\":
            out.append("\\\\")
        elif 0xDC80 <= ord(c) <= 0xDCFF:  # a byte of a name that is not UTF-8 (surrogate escape)
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        elif unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def safe(value):
    """A cell a spreadsheet shows as text: printable, no formula (=, +, -, @ first)."""
    if isinstance(value, str):
        value = clean(value, 10**7)  # never cut: a student's ID or a reason stays whole
        if value[:1] in ("=", "+", "-", "@"):
            return "'" + value
    return value


# --------------------------------------------------------------------------- what to grade


def _cells(nb) -> list:
    cells = nb.get("cells") if isinstance(nb, dict) else None
    return cells if isinstance(cells, list) else []


def _source(cell) -> str:
    """A cell's source as one string ('' for a cell of another form)."""
    src = cell.get("source", "") if isinstance(cell, dict) else ""
    return "".join(s for s in src if isinstance(s, str)) if isinstance(src, list) else str(src)


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
    version = nb.get("nbformat")
    if type(version) is not int or version != 4:
        return (f'its format ("nbformat": {reprlib.repr(version)}) is not the one Jupyter writes and the grader '
                'reads ("nbformat": 4); the file was edited by hand or saved by another program')
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
    import nbformat

    try:  # what the worker does with it: a notebook nbformat cannot read is the file's fault, not the grader's
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.reads(json.dumps(nb), as_version=4)
    except Exception as err:  # noqa: BLE001  any reason nbformat refuses it
        return f"Jupyter's notebook reader refuses it ({type(err).__name__}: {clean(err, 200)})"
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


# --------------------------------------------------------------------------- the sandbox


def cgroup_v1_paths(text: str) -> dict[str, str]:
    """``{controller: path}`` of this process's cgroups v1 from /proc/self/cgroup's text."""
    out = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1]:
            for controller in parts[1].split(","):
                out[controller] = parts[2].strip() or "/"
    return out


class Cgroup:
    """A memory and process limit for a whole sandbox: cgroup v2, or the v1 memory and pids controllers,
    made inside the grader's own cgroup (so a limit set on the grader holds for every sandbox too)."""

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
            else:  # v1: under the grader's own memory and pids cgroups, so their limits hold too
                own = cgroup_v1_paths(Path("/proc/self/cgroup").read_text())
                for controller, files in (("memory", {"memory.limit_in_bytes": memory}),
                                          ("pids", {"pids.max": processes})):
                    made.append(root / controller / own.get(controller, "/").lstrip("/") / name)
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
    # "bubblewrap"; "user" (no namespaces: each notebook runs as an unprivileged user of its own, the
    # fallback a course names with --user, e.g. in Gradescope's container); "refused" (neither was
    # possible and a fallback user was asked for: nothing is run); "none" (no isolation at all)
    kind: str
    unprivileged: bool = False  # started as ``uid`` (the grader runs as root)
    missing: list[str] = field(default_factory=list)  # what is not isolated or not limited
    uid: int = NOBODY
    gid: int = NOBODY

    @staticmethod
    def detect(memory: int = 8 * 2**30, fallback_user: str | None = None) -> "Sandbox":
        box = Sandbox._bubblewrap(memory)
        if box.kind == "bubblewrap" or not fallback_user:
            return box
        return Sandbox._user(memory, fallback_user, box.missing[0])

    @staticmethod
    def _user(memory: int, name: str, why_not_bwrap: str) -> "Sandbox":
        """Each notebook as the unprivileged user ``name`` (no namespaces), or "refused" when that cannot be."""
        import pwd

        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            return Sandbox("refused", False, [f"{why_not_bwrap}, and there is no user {name!r} to run notebooks as"])
        if os.geteuid() != 0:
            return Sandbox("refused", False, [f"{why_not_bwrap}, and only root can run notebooks as {name!r}"])
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            return Sandbox("refused", False, [f"{why_not_bwrap}, and the user {name!r} is root or in root's group"])
        box = Sandbox("user", True, [why_not_bwrap], entry.pw_uid, entry.pw_gid)
        try:
            probe = subprocess.run([sys.executable, "-c", "import torch, nbclient, ipykernel"], capture_output=True,
                                   text=True, stdin=subprocess.DEVNULL, cwd="/", env={"PATH": "/usr/bin:/bin"},
                                   preexec_fn=box._start(None, memory))
            problem = "" if probe.returncode == 0 else clean(probe.stderr.strip()[-200:])
        except OSError as err:
            problem = f"{type(err).__name__}: {err.strerror}"
        if problem:
            return Sandbox("refused", False, [f"{why_not_bwrap}, and the user {name!r} cannot run this Python "
                                              f"({problem})"])
        box.missing += [f"namespaces: each notebook runs as the user {name!r} (uid {entry.pw_uid}), which "
                        "cannot write the package, the checkers or the results and cannot read the grader's "
                        "files, but sees the network and every world-readable file"]
        return box

    @staticmethod
    def _bubblewrap(memory: int) -> "Sandbox":
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
        if self.kind != "bubblewrap":
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
        # an installed (non-editable) package under a bound prefix holds the checkers' answers: the sandbox
        # sees the student copy there instead (an editable install keeps them under src/, which is not bound)
        for installed in installed_packages():
            for p in sorted({os.path.abspath(installed), os.path.realpath(installed)}):
                if any(p == b or p.startswith(b.rstrip("/") + "/") for b in seen):
                    copy = pkg / "attention_book"
                    cmd += ["--ro-bind", str(copy), p] if copy.is_dir() else ["--tmpfs", p]
        # other packages in the grading Python that ship the assignments' answers (d2l/torch.py holds bleu,
        # masked_softmax, sequence_mask, transpose_qkv...: attacker r1 read bleu from it, 10/10): an empty folder
        for hidden in hidden_packages():
            for p in sorted({os.path.abspath(hidden), os.path.realpath(hidden)}):
                if any(p == b or p.startswith(b.rstrip("/") + "/") for b in seen):
                    cmd += ["--tmpfs", p]
        for file in ("ld.so.cache", "ld.so.conf", "nsswitch.conf", "hosts", "host.conf", "localtime"):
            if Path("/etc", file).exists():
                cmd += ["--ro-bind", str(Path("/etc", file).resolve()), f"/etc/{file}"]
        cmd += ["--ro-bind", str(stage / "passwd"), "/etc/passwd", "--ro-bind", str(stage / "group"), "/etc/group",
                "--ro-bind", str(stage), "/in", "--ro-bind", str(pkg), "/pkg",
                "--dev", "/dev", "--size", str(64 * 2**20), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
                "--proc", "/proc", "--size", str(disk), "--tmpfs", "/sandbox", "--dir", "/sandbox/home",
                "--remount-ro", "/", "--chdir", "/sandbox"]  # the root tmpfs (/etc, ...) read-only from here
        return cmd + argv

    def _start(self, cgroup: Cgroup | None, memory: int, cpu_seconds: int = 3600):
        unprivileged, gid = self.unprivileged, self.gid

        def apply():
            os.setsid()
            if cgroup is not None:
                cgroup.join()
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 5))
            resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT, OUTPUT_LIMIT))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            uid = self.uid if unprivileged else os.getuid()
            running = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid)
            resource.setrlimit(resource.RLIMIT_NPROC, (running + PROCESSES, running + PROCESSES))
            if unprivileged:
                os.setgroups([])
                os.setgid(gid)  # the user's own group (the "user" kind refuses root's)
                os.setuid(uid)

        return apply


def _package_dirs(name: str) -> list[Path]:
    """Every folder ``<entry>/<name>`` holding an ``__init__.py``, for each ``sys.path`` entry and site
    directory of this Python (found without importing anything)."""
    import site

    dirs = list(sys.path)
    with contextlib.suppress(AttributeError):
        dirs += site.getsitepackages() + [site.getusersitepackages()]
    found = []
    for entry in dirs:
        with contextlib.suppress(OSError):
            if entry and (Path(entry) / name / "__init__.py").is_file():
                found.append(Path(entry) / name)
    return found


def installed_packages() -> list[Path]:
    """Every ``attention_book`` package directory this Python can import or has installed (the grader's
    own, and one per ``sys.path`` entry and site directory): where a notebook could read the answers."""
    import attention_book

    return list(dict.fromkeys([Path(attention_book.__file__).parent, *_package_dirs("attention_book")]))


HIDDEN_PACKAGES = ("d2l",)  # packages of the grading Python that a notebook in the sandbox does not see


def hidden_packages() -> list[Path]:
    """Every installed copy of each of ``HIDDEN_PACKAGES`` (one per ``sys.path`` entry and site directory,
    as for :func:`installed_packages`), found without importing them."""
    return list(dict.fromkeys(p for name in HIDDEN_PACKAGES for p in _package_dirs(name)))


def _kill_user(uid: int, gid: int) -> None:
    """Kill every process of ``uid`` (a user of the grader's own, never uid 65534, which others share)."""
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)  # as that user: reaches its processes only
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.05)


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


STDERR_KEY = "grader:stderr"  # the key run_sandboxed gives the sandbox's last stderr when the worker failed


def exit_words(ended: str) -> str:
    """"worker exited with 137" in words: "killed by signal 9 (SIGKILL)" (a shell's 128 + N, or Popen's -N)
    or "exit status N"."""
    code = ended.rpartition(" ")[2]
    code = int(code) if code.lstrip("-").isdigit() else 0
    number = -code if code < 0 else code - 128 if 128 < code < 160 else 0
    if number:
        with contextlib.suppress(ValueError):
            return f"killed by signal {number} ({signal.Signals(number).name})"
        return f"killed by signal {number}"
    return f"exit status {code}"


def run_sandboxed(sandbox: Sandbox, stage: Path, pkg: Path, timeout: int, memory_gb: float, disk: int,
                  limit: int, missing: set[str]) -> tuple[str, dict[str, bytes], float]:
    """Run the worker on ``stage/job.json``; return (how it ended, the worker's messages, seconds)."""
    memory = int(memory_gb * 2**30)
    cgroup, why = (Cgroup.create(memory, PROCESSES) if os.geteuid() == 0 else (None, "not root"))
    if cgroup is None:
        missing.add(f"memory and processes of the whole sandbox (no cgroup: {why}); each process has "
                    f"{memory_gb:g} GB of address space and the user {PROCESSES} more processes")
    boxed = sandbox.kind == "bubblewrap"
    inside = {"stage": "/in", "pkg": "/pkg", "work": "/sandbox"} if boxed else \
        {"stage": str(stage), "pkg": str(pkg), "work": str(stage.parent / "work")}
    if not boxed:
        (stage.parent / "work" / "home").mkdir(parents=True)
        if sandbox.kind == "user":  # the notebook's user writes only here
            for d in (stage.parent / "work", stage.parent / "work" / "home"):
                os.chown(d, sandbox.uid, sandbox.gid)
                os.chmod(d, 0o700)
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
        proc = subprocess.Popen(argv, cwd=stage if boxed else inside["work"], env=env,
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
        if sandbox.kind == "user" and sandbox.uid != NOBODY:
            _kill_user(sandbox.uid, sandbox.gid)  # a process that left the session: every process of that user
        if cgroup is not None:
            if ended != "timeout" and cgroup.out_of_memory():  # the kernel may die of it while the worker lives
                ended = "memory"
            cgroup.remove()
        if proc is not None:
            proc.wait()
        for fd in (read, write, locals().get("err_read", -1), locals().get("err_write", -1)):
            with contextlib.suppress(OSError):
                if fd >= 0:
                    os.close(fd)
    messages = _stream(bytes(received))  # whole messages only: one cut short by the limit is left out
    if len(received) > limit:
        messages["overflow"] = b"1"
    # the sandbox's stderr (libraries' noise: "Fontconfig error ...") is the instructor's, for a worker that
    # never started a cell; never a student's feedback. The worker's own messages cannot carry this key.
    messages.pop(STDERR_KEY, None)
    if ended.startswith("worker exited"):
        messages[STDERR_KEY] = tail
    return ended, messages, time.monotonic() - start


# --------------------------------------------------------------------------- one notebook


def harness_code(targets: dict[str, str], cases: str, out: str) -> str:
    """The cell appended to the notebook: each assignment's hidden cases, run on the student's function."""
    lines = ["import attention_book.assignments.grading as _grade"]
    for name, expr in targets.items():
        lines.append(f"try:\n    _grade.run_hidden({name!r}, _grade.resolve({expr!r}, globals()), "
                     f"{cases + '/cases-' + name + '.bin'!r}, {out + '/' + name!r})\n"
                     "except Exception as _err:\n    print(_err)")
    return "\n".join(lines)


STATUS_WORDS = {
    "graded": "graded",
    "not implemented": "every case still raises NotImplementedError: write the function, then hand the "
                       "notebook in again",
    "timeout": "your notebook did not finish within the time limit and was stopped: every case counts as "
               "failed. What the grader saw (below) says where it was stopped",
    "memory": "your notebook used more memory than the grader allows, and was stopped: every case that had not "
              "run counts as failed. Look for a tensor far larger than the assignment needs",
    "kernel died": "the Python kernel running your notebook died (a crash in native code, such as a "
                   "segmentation fault, or the kernel was killed) before the hidden tests could run: every "
                   "case counts as failed",
    "no results": "your notebook ran, but the hidden tests produced no results: every case counts as failed",
    "not defined": "the function your checker cell names was not defined when the hidden tests ran: every "
                   "case counts as failed",
    "unreadable": "the file is not a notebook the grader can run",
    "flagged": "the results your notebook sent back are not what the grader writes; an instructor will look at it",
    "grader error": "the grader itself failed on this notebook (not your fault); an instructor will look at it",
    "not submitted": "no notebook was found for this assignment",
    "misnamed file": "a notebook was found, but under another name than the assignment's, so it was not graded",
    "refused": "the grader refused this submission because its folder name collides with another student's",
}
# What a student does next, for every outcome but full marks: each tells them how to see for themselves what
# the grader saw (a fresh kernel, Run All from the top: the grader runs the notebook the same way) and what to
# change. {notebook} is the assignment's notebook as the grader knows it.
FROM_THE_TOP = ("restart your kernel and Run All from the top (the grader runs your notebook the same way, "
                "from the first cell to the last)")
NEXT_STEP = {
    "graded": FROM_THE_TOP + ", then read your checker cell's report: fix the failed cases it shows, and the "
              "causes named above, and hand the notebook in again",
    "not implemented": "write the body of the function the assignment asks for (replace its raise "
                       "NotImplementedError), then " + FROM_THE_TOP + " and read your checker cell's report",
    "timeout": FROM_THE_TOP + " and time the cell named above: make it finish well within the limit (fewer "
               "steps, smaller sizes, a loop that ends), then hand the notebook in again",  # see next_step
    "memory": FROM_THE_TOP + " and watch the cell named above: make its tensors the size the assignment asks "
              "for, then hand the notebook in again",
    "kernel died": FROM_THE_TOP + ": if your kernel dies too, the cell named above crashes Python (native code, "
                   "ctypes, a huge allocation): remove or fix it; if it does not, hand in the notebook you ran, "
                   "and tell your instructor",
    "no results": FROM_THE_TOP + ": fix the first cell that raises, keep the function under the name your "
                  "checker cell calls, and make the checker cell print its report, then hand the notebook in "
                  "again",
    "not defined": "define the function in the exercise cell under the name your checker cell passes "
                   "(the notebook's own name for it), then " + FROM_THE_TOP + " and read your checker cell's "
                   "report",
    "unreadable": "open the file you handed in with Jupyter: if it does not open, download the notebook again "
                  "(File, Download as .ipynb) and hand in that file",
    "flagged": "nothing yet: your instructor will look at your notebook and tell you what happens next",
    "grader error": "nothing yet: your instructor will look at your notebook and grade it again",
    "not submitted": "hand in {notebook} under that name, if you have not already",
    "misnamed file": "rename your file to {notebook} and hand it in again",
    "refused": "tell your instructor: your folder's name is too close to another student's to tell apart",
}


# Statuses decided from the handed-in file alone, before anything of it runs: the same whatever hidden
# cases a submission draws, so a sealed Gradescope result may show them at once (see feedback_markdown).
DECIDED_BEFORE_RUNNING = frozenset({"unreadable", "misnamed file", "not submitted", "refused"})
# the statuses that are the notebook's, not one assignment's (the same for each assignment of chapter 4's)
WHOLE_NOTEBOOK = DECIDED_BEFORE_RUNNING | {"timeout", "memory", "kernel died"}


def next_step(row: dict, sealed: bool = False, named: bool = True) -> str:
    """The line that tells a student what to do after this row's outcome; '' for full marks. ``sealed``
    (feedback_markdown's): a row whose notebook ran gets one step that says nothing of how the run went.
    ``named``: the feedback above names a cause of a failed case (else a graded row's step points at none,
    and names the exceptions the function raised instead, when it raised)."""
    if sealed and row["status"] not in DECIDED_BEFORE_RUNNING:
        return (FROM_THE_TOP + ", check that it runs to its end, then make every case your checker cell shows "
                "pass: the hidden cases call your function on other inputs of the same kind")
    if row["status"] == "graded" and row.get("passed") == row.get("total") and not row.get("cell_error"):
        return ""
    if row["status"] == "graded" and row.get("passed") == row.get("total"):  # full marks, a cell that raised
        return (FROM_THE_TOP + " and fix the cell named above, so that your notebook runs to its end (your "
                "points stand)")
    if row["status"] == "timeout" and "code cell" not in row.get("reason", ""):  # no cell to name
        return (FROM_THE_TOP + ": " + ("every cell finishes there, so call your function on larger and unusual "
                                       "inputs (long sequences, a length of 0) and make it return quickly on each "
                                       "(a loop that ends whatever the input)"
                                       if "hidden tests were running" in row.get("reason", "") else
                                       "if it finishes well within the limit, tell your instructor")
                + ", then hand the notebook in again")
    step = row.get("step") or NEXT_STEP.get(row["status"], "ask your instructor what this status means for you")
    if row["status"] == "graded" and not named:
        raised = sorted({raised_kind(c) for c in row.get("cases") or [] if not c["passed"]} - {""})
        said = (f" (your function raised {' and '.join(raised)} in the grader's run; the report shows the line "
                "that raised)" if raised else "")
        step = step.replace(", and the causes named above,", said + ",")
    return step.format(notebook=row.get("notebook", "the notebook"))


def raised_kind(case: dict) -> str:
    """The exception a case's call raised (``RuntimeError``), from its reason; '' when it did not raise."""
    if case.get("status") != "raised":
        return ""
    found = re.match(r"(?:your function )?raised (an exception|\w+)", str(case.get("why", "")))
    return found.group(1) if found else "an exception"


# Statuses whose points an LMS should receive; the others stay blank there.
SCORED = lms_export.GRADED


class Grader:
    """Grades notebooks one at a time; holds what every notebook shares (the sandbox, the judge, the
    package copies)."""

    def __init__(self, reference: Path, timeout: int, memory_gb: float, disk_mb: int,
                 extras: dict[str, str] | None = None, fallback_user: str | None = None,
                 only: list[str] | None = None):
        """``only``: the assignments to grade (a course file's); the others of a notebook are not run as
        hidden cases, not judged and not blocked in the sandbox (None: every assignment)."""
        self.timeout, self.memory_gb, self.disk = timeout, memory_gb, disk_mb * 2**20
        self.extras = extras or {}
        # 0700: no other local user reads it; named by the grading process, so a leftover is traceable
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"grade-run-{os.getpid()}-"))
        self.sandbox = Sandbox.detect(int(memory_gb * 2**30), fallback_user)
        if self.sandbox.kind == "bubblewrap" and self.sandbox.unprivileged:
            os.chown(self.run_dir, NOBODY, NOBODY)  # the sandbox's own user must reach its folders, nobody else
        # the "user" kind: root's, passable but not listable (the notebook's user reaches only its own folder)
        os.chmod(self.run_dir, 0o711 if self.sandbox.kind == "user" else 0o700)
        self.missing: set[str] = set(self.sandbox.missing)
        self.references = reference_assignments(reference, only)
        # the judge loads every checker before the first notebook runs (grade_notebook starts it), and never
        # reads them again
        self.judge = JudgeServer([(n, self.extras.get(n)) for names in self.references.values() for n in names])
        books = {name: json.loads((reference / name).read_text(encoding="utf-8")) for name in self.references}
        self.reference_names = {name: graded_names(nb) for name, nb in books.items()}
        # the code cells as the chapter gives them, in every edition (a student starts from the student
        # edition, whose cells guard what follows an exercise): an error in one of these is not the student's
        self.reference_sources = {name: chapter_sources(nb) for name, nb in books.items()}
        self.packages: dict[tuple, Path] = {}
        self.case_counts: dict[tuple[str, int], int] = {}

    def _students_cell(self, nb, index: int, reference: str) -> bool:
        """Did the student write cell ``index`` of ``nb`` (a code cell that is not one of the reference
        notebook's, as the chapter gives it)? A checker cell the student changed counts as theirs."""
        source = _source(_cells(nb)[index])
        # a checker cell as the chapter gives it is the book's, not the student's: its errors (the package's
        # own checker is blocked in the sandbox) are not shown as if the student caused them
        return source.strip() not in self.reference_sources.get(reference, set())

    def _run_all_stop(self, nb, errors: list[dict], reference: str) -> str:
        """The line for the first cell of the student's that raised (``errors``: the worker's, in cell order),
        where their own Run All stops; '' when none did. An error an earlier cell (the student's or the
        chapter's) met at a package function this assignment blocks is the sandbox's, not theirs (their Run
        All does not stop there), so it gets no line; a cell of theirs that raised after it may only follow
        from it, so its line says so and asks them to run all from the top to see whether it raises there."""
        undefined: set[str] = set()  # what the cells that met a blocked function would have defined
        for e in errors:
            if str(e["error"]).startswith(BlockedAnswer.__name__ + ":"):
                undefined |= _defined_names(_source(_cells(nb)[int(e["cell"])]))
            elif self._students_cell(nb, e["cell"], reference):
                return stopped_run_all(nb, int(e["cell"]), e["error"], after_blocked=_may_follow(
                    e["error"], _source(_cells(nb)[int(e["cell"])]), undefined))
        return ""

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

    def grade_notebook(self, who: str, path: Path, reference: str, seeds: dict[str, int]) -> list[dict]:
        """One row per assignment of ``reference`` for the notebook at ``path``; ``seeds`` gives each
        assignment's hidden seed. A row's ``total`` is always the number of cases."""
        expected = [n for n in self.references[reference] if n in seeds]
        base = dict(student=who, notebook=reference)
        specs = {n: hidden_arguments(n, seeds[n], "", self.extras.get(n)) for n in expected}
        counts = {n: len(specs[n]["cases"]) for n in expected}

        def rows(status, reason, **extra):
            return [dict(base, assignment=n, passed=0, total=counts[n], status=status, reason=reason, cases=[],
                         seed=seeds[n], **extra) for n in expected]

        if self.sandbox.kind == "refused":
            return rows("grader error", "not run: no sandbox could be made here (" + "; ".join(self.sandbox.missing)
                        + "), and this grader does not run notebooks unisolated")
        try:
            data = read_regular(path, NOTEBOOK_LIMIT)
            digest = hashlib.sha256(data).hexdigest()
            nb = json.loads(data.decode("utf-8"))
            problem = notebook_problem(nb)
        except (ValueError, OSError, RecursionError, MemoryError) as err:
            nb, problem, digest = None, f"{type(err).__name__}: {err}", ""
        if problem:
            return rows("unreadable", f"not a valid notebook: {clean(problem, 300)}", sha256=digest)
        self.judge.start()  # before any notebook runs: its checkers are in memory from now on
        names = dict(self.reference_names[reference])
        names.update({k: v for k, v in graded_names(nb).items() if k in expected})
        targets = {n: names.get(n, "") for n in expected}
        nonce = secrets.token_hex(16)
        stage_root = Path(tempfile.mkdtemp(prefix="grade-", dir=self.run_dir))
        try:
            os.chmod(stage_root, 0o755)
            stage = stage_root / "in"
            stage.mkdir(mode=0o755)
            (stage / "submission.ipynb").write_bytes(data)
            shutil.copyfile(ROOT / "book" / "_ext" / "kernel_poll.py", stage / "kernel_poll.py")
            (stage / "worker.py").write_text(_WORKER)
            (stage / "passwd").write_text(f"student:x:{NOBODY}:{NOBODY}:student:/sandbox/home:/bin/false\n")
            (stage / "group").write_text(f"student:x:{NOBODY}:\n")
            for name in expected:
                (stage / f"cases-{name}.bin").write_bytes(dump_data(dict(specs[name], nonce=nonce)))
            boxed = self.sandbox.kind == "bubblewrap"
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
            dead = bool(worker.get("dead"))
            crash = clean(worker.get("worker", ""), 300)
            own = [e for e in worker.get("errors", []) if self._students_cell(nb, e["cell"], reference)]
            errors = [short_error(e["error"]) for e in own][:3]
            stopped = self._run_all_stop(nb, worker.get("errors", []), reference)
        except (ValueError, AttributeError, TypeError, RecursionError, KeyError, IndexError):
            errors, dead, crash, stopped = [], False, "", ""
        where = running_cell(nb, messages)
        started = any(k.startswith("started:") for k in messages)
        raised = ("; cells you wrote that raised: " + " | ".join(errors)) if errors else ""
        overflow = "overflow" in messages
        out = []
        for name in expected:
            row = dict(base, assignment=name, passed=0, total=counts[name], seconds=round(seconds, 1), cases=[],
                       seed=seeds[name], sha256=digest)
            payload = messages.get(f"results:{name}")
            if ended == "timeout":
                row.update(status="timeout", reason=f"did not finish within {self.timeout} s: {where}")
            elif ended == "memory":
                row.update(status="memory", reason=f"used more than {self.memory_gb:g} GB of memory: {where}"
                           + raised)
            elif payload is None and "worker" not in messages and ended.startswith("worker exited") and started:
                # the worker never reported: it was killed with the kernel (a cell that kills every process,
                # os.kill(-1, 9) or os.killpg). The cell is named; the sandbox's stderr is not the student's.
                row.update(status="kernel died", reason=(
                    f"the kernel was {exit_words(ended)}, and every process of your notebook with it, so the "
                    f"hidden tests could not run; {where}"))
            elif payload is None and "worker" not in messages and ended.startswith("worker exited"):
                lines = clean_block(messages.get(STDERR_KEY, b"").decode("utf-8", "replace")).strip().splitlines()
                row.update(status="grader error", reason=(
                    f"the grader's worker stopped before any cell of the notebook started ({exit_words(ended)})"
                    + (f": {clean(lines[-1], 200)}" if lines else "")))
            elif payload is None and crash and not started:
                # No cell of the notebook ever started: the kernel could not be started (a kernelspec whose
                # Python the sandbox cannot see, a broken environment). Nothing the student wrote had run,
                # so it is the grader's failure, not a 0 in the gradebook.
                row.update(status="grader error", reason=f"no kernel could be started for this notebook: {crash}")
            elif payload is None and dead:
                row.update(status="kernel died", reason=f"the kernel died: {crash}; {where}" + raised)
            elif payload is None and overflow:
                row.update(status="no results", reason=(
                    "your notebook ran, but what it sent back to the grader was larger than the limit of "
                    f"{RESULTS_LIMIT // 2**20} MB per assignment, so it could not be read back: return results "
                    "of the size the assignment asks for" + raised))
            elif payload is None:
                row.update(status="no results", reason=(f"the hidden tests did not run ({ended}"
                                                        + (f"; {crash}" if crash else "") + ")" + raised))
            else:
                verdict = self.judge.judge(name, seeds[name], nonce, payload, JUDGE_SECONDS, JUDGE_MEMORY,
                                           self.extras.get(name))
                if verdict["status"] == "flagged":
                    row.update(status="flagged", reason=verdict["reason"])
                elif verdict["cases"] and all(c.get("status") == "missing" for c in verdict["cases"]):
                    # one cause, said once (it was "not there" repeated on every case, "graded 0/9")
                    # with the cell of theirs that raised, if one did: a SyntaxError in the exercise cell
                    # leaves the function undefined, and "not defined" alone read as "but I defined it"
                    row.update(status="not defined", total=verdict["total"], cases=verdict["cases"],
                               reason=" | ".join(t for t in (not_defined(targets[name], name,
                                                                        verdict["cases"][0]["why"]), stopped) if t))
                    if stopped:
                        row["cell_error"] = stopped
                else:
                    row.update(passed=verdict["passed"], total=verdict["total"], status=verdict["status"],
                               cases=verdict["cases"],
                               reason=" | ".join(t for t in (stopped, case_summary(verdict["cases"])) if t))
                    if stopped:
                        row["cell_error"] = stopped
            out.append(row)
        return out


def not_defined(target: str, name: str, why: str) -> str:
    """The one line for a notebook whose function for assignment ``name`` (``target``, as its checker cell
    names it) did not exist, or was not a function, when the hidden tests ran."""
    target = clean(target, 80) or "the function"
    got = re.search(r"got (\w+)\)\s*$", str(why))
    kind = got.group(1) if got else "NoneType"
    what = "is not defined" if kind == "NoneType" else f"is not a function (it is a {clean(kind, 40)})"
    return (f"`{target}` {what}: define it in the exercise cell, under the name your checker cell passes to "
            f"check_{name}, and keep that cell before the checker cell (every case counts as failed)")


SHORT_ERROR = 100  # characters of an exception's message from a cell the student wrote, in the feedback


def short_error(text: str) -> str:
    """An error from a student's cell as the feedback shows it: the exception's type and at most
    :data:`SHORT_ERROR` characters of the first line of its message, cut at a word. A cell can raise
    any text (the hidden cases' inputs, read from the grader's files), so nothing longer comes back."""
    kind, _, message = str(text).partition(": ")
    kind = clean(kind, 60).split()[0] if clean(kind, 60).split() else "Error"
    line = " ".join(clean(message.splitlines()[0] if message.splitlines() else "", 10**4).split())
    line = cut_at_word(line, SHORT_ERROR + 2)
    return f"{kind}: {line}" if line else kind


def _code_sources(nb) -> set[str]:
    return {_source(c).strip() for c in _cells(nb) if isinstance(c, dict) and c.get("cell_type") == "code"}


def chapter_sources(nb: dict) -> set[str]:
    """The code cells of reference notebook ``nb`` as the chapter gives them, in each of its editions
    (scripts/editions.py): the committed notebook, and the student and public editions a student starts
    from, which scaffold the exercise cells and guard a chapter cell's lines that use an exercise's names.
    A fresh instructor (issue 37): chapter 4's guarded cell ``sentences = [...]`` raised NameError after
    a chapter cell met the blocked ``bleu``, and, not being the committed notebook's cell, was told to the
    student as theirs at full marks."""
    found = _code_sources(nb)
    try:
        import editions  # scripts/editions.py, beside this file (and in the Gradescope bundle)

        for edition in ("student", "public"):
            found |= _code_sources(editions.make_edition(nb, edition))
    except Exception:  # noqa: BLE001  an edition that cannot be made: the committed cells still count
        pass
    return found


FIRST_LINE = 80  # characters of a cell's first line that the feedback quotes to say which cell it means


def cell_place(nb, index: int) -> str:
    """Where cell ``index`` of the submitted notebook ``nb`` is, as a student finds it: "code cell N of M"
    (code cells counted from 1) and its first non-blank line, one line, at most :data:`FIRST_LINE`
    characters. The student wrote that line: it carries nothing of the hidden cases."""
    code = [i for i, c in enumerate(_cells(nb)) if isinstance(c, dict) and c.get("cell_type") == "code"]
    if index not in code:
        return f"cell {index + 1}"
    line = next((clean(t, 10**4) for t in _source(_cells(nb)[index]).splitlines() if t.strip()), "")
    line = cut_at_word(line, FIRST_LINE)
    return f"code cell {code.index(index) + 1} of {len(code)}" + (f" (first line: {line})" if line else "")


def running_cell(nb, messages: dict) -> str:
    """Which cell was running when the sandbox was stopped, from the worker's "started:<index>"
    messages: a cell of the student's notebook, the hidden tests (the cell the grader appends after the
    last one), or none yet (the kernel was still starting)."""
    started = [int(k.partition(":")[2]) for k in messages if k.startswith("started:") and
               k.partition(":")[2].isdigit()]
    if not started:
        return "the Python kernel had not yet started your first cell"
    if max(started) >= len(_cells(nb)):
        return ("every cell of your notebook had run, and the hidden tests were running: your function did "
                "not return on some case")
    return "it was running " + cell_place(nb, max(started))


def _defined_names(source: str) -> set[str]:
    """The names a cell's code binds (assignments, imports, defs, for and with targets); a cell that does
    not parse (IPython magics) by its lines' ``name = ...``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set(re.findall(r"^\s*([A-Za-z_]\w*)\s*(?:,[^=]*)?=(?!=)", source, re.M))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


# errors that a name an earlier cell left undefined, or left holding something else, would raise
FOLLOWS = ("NameError", "UnboundLocalError", "AttributeError", "TypeError", "KeyError", "IndexError")


def _may_follow(error: str, source: str, undefined: set[str]) -> bool:
    """Could ``error``, raised by a cell of code ``source``, follow from a blocked call in an earlier cell
    that would have defined ``undefined``? A NameError only on one of those names; another error of
    :data:`FOLLOWS` only in a cell that uses one of them; any other error (a student's own
    ``raise RuntimeError``) never."""
    kind = str(error).partition(":")[0].strip()
    if kind not in FOLLOWS or not undefined:
        return False
    if kind in ("NameError", "UnboundLocalError"):
        named = re.search(r"'([A-Za-z_]\w*)'", str(error))
        return named is not None and named.group(1) in undefined
    return bool(undefined & set(re.findall(r"[A-Za-z_]\w*", source)))


def stopped_run_all(nb, index: int, error: str, after_blocked: bool = False) -> str:
    """The feedback line for the first cell of the student's that raised, when the hidden tests ran
    anyway: the student's own Run All stops there, so they should know (the score is unchanged). After
    a cell that met a function the sandbox blocks (``after_blocked``), the error may only follow from
    that one, which the student's own run does not meet: the line says so, and how to find out."""
    if after_blocked:
        return (f"{cell_place(nb, index)} raised {short_error(error)} in the grader's run, after an earlier "
                "cell called a package function the grader blocks while it grades (in your own run that call "
                "works, so this error may only follow from it): restart your kernel and Run All from the top; "
                "if this cell raises there too, your own Run All stops here (the grader ran the rest)")
    return (f"{cell_place(nb, index)} raised {short_error(error)} (your own Run All stops here; the grader "
            "ran the rest)")


def case_summary(cases: list[dict]) -> str:
    """One line naming every failed case (visible ones by name, hidden ones by number and the checker's name)."""
    if len(cases) > 1 and all(c.get("status") in ("package", "blocked") for c in cases):  # one cause: said once
        return f"every case: {clean(cases[0]['why'], 1000)}"
    failed = [case_title(c) + ": " + clean(c["why"], 100_000) for c in cases if not c["passed"]]
    return " | ".join(failed)


def case_title(c: dict) -> str:
    if c.get("visible"):
        return f"case {c['index']} ({c['name']})"
    return lms_export.hidden_title(c)


def reference_assignments(reference: Path, only=None) -> dict[str, list[str]]:
    """``{reference notebook name: [assignment, ...]}`` for the notebooks of ``reference`` with checkers;
    with ``only`` (a course file's assignments), only those, and only the notebooks that have one."""
    known = set(assignment_names())
    if only is not None:
        known &= set(only)
    found = {}
    for path in sorted(reference.glob("*.ipynb")):
        with contextlib.suppress(OSError, ValueError):
            names = [n for n in expected_assignments(json.loads(path.read_text(encoding="utf-8"))) if n in known]
            if names:
                found[path.name] = names
    return found


# --------------------------------------------------------------------------- who handed in what

# [0-9], not \d: Canvas's ids are ASCII digits (\d also takes Arabic-Indic or fullwidth ones) (issue 37)
LMS_PREFIX = re.compile(r"^(?P<login>[^_/]+)_(?:LATE_|late_)?(?P<uid>[0-9]+)_(?P<sub>[0-9]+)_(?P<rest>.+)$")


def canvas_ids(name: str) -> tuple[str, str] | None:
    """``(user id, attachment id)`` as Canvas's Re-Upload Submissions reads a file name
    (app/models/assignment.rb, infer_comment_context_from_filename): the first two parts between "_"
    that are all ASCII digits; None without two."""
    ids = [p for p in name.split("_") if p and all("0" <= c <= "9" for c in p)]
    return (ids[0], ids[1]) if len(ids) > 1 else None


def inner_ids(stem: str) -> tuple[str, str] | None:
    """``(user id, attachment id)`` of the LMS prefix just before the file name a student gave (the name
    matched to a reference): the innermost of a name's prefixes, parsed from the right. A sortable name
    with "_" and digits in it (``A_102._999._B`` gives ``a_102_999_b_300_9007_ch03_exercises``) puts
    other numbers first, which are not the student's (issue 37)."""
    lms, ids = LMS_PREFIX.match(stem), None
    while lms:
        ids = (lms.group("uid"), lms.group("sub"))
        lms = LMS_PREFIX.match(lms.group("rest"))
    return ids


def lms_ids_problem(stem: str) -> str:
    """Why an LMS-named file's name (``stem``, without .ipynb) is refused, or '': its ids parsed from the
    left (Canvas's reading) and from the right (those just before the file name) differ, so the grader cannot
    tell whose it is, and Canvas would attach its feedback to the ids it reads first."""
    lms = LMS_PREFIX.match(stem)
    if lms is None:
        return ""
    left, right, canvas = (lms.group("uid"), lms.group("sub")), inner_ids(stem), canvas_ids(stem)
    if canvas != left or right[0] != left[0]:
        return (f"REFUSED: its name holds the user IDs {left[0]} and {right[0]} (Canvas reads "
                f"{canvas[0] if canvas else 'none'}): a name key with '_' and digits in it cannot be told from "
                "another student's; not graded, not matched to a roster row. Grade it by hand")
    return ""


def lms_uid(key: str) -> str:
    """The LMS user id of a student key ``<namekey>_<user id>`` (Canvas's bulk download), or ''."""
    uid = key.rpartition("_")[2]
    return uid if uid and all("0" <= c <= "9" for c in uid) else ""
RESUBMISSION = re.compile(r"^(?P<stem>.+?)(?:\s*\((?P<copy>[0-9]+)\)|-(?P<again>[0-9]+))?$")


def handed_name(rel: str, key: str | None = None) -> str:
    """The name a student gave the file at ``rel`` (a path under SUBMISSIONS): without the student's folder,
    and without the ``login_uid_sub_`` prefix an LMS's bulk download put before it (the student never saw
    ``wumei_107_9007_ch03_exercises_final.ipynb``, only ``ch03_exercises_final.ipynb``). Given the
    student's ``key`` (a graded row's, whose ``rel`` is a full path), the prefix is the LMS's only when it
    is that key's (``wumei_107``); otherwise only a file at the top of SUBMISSIONS has one."""
    name = Path(rel).name
    lms = LMS_PREFIX.match(name)
    # one user id is one student, whatever name key a file of theirs has (issue 37: a renamed student)
    ours = lms and (key == f"{lms.group('login')}_{lms.group('uid')}" or "/" not in rel and lms_uid(key) ==
                    lms.group("uid") if key is not None else "/" not in rel)
    return lms.group("rest") if ours else name


def match_reference(filename: str, references) -> tuple[str, int, str] | None:
    """``(reference name, resubmission number, LMS student key or '')`` for a submitted file's name,
    allowing the renamings LMSs and browsers make: ``ch03_exercises (1).ipynb`` (a second download),
    ``ch03_exercises-1.ipynb`` (Canvas's resubmission), ``namekey_12345_67890_ch03_exercises.ipynb``
    (Canvas's bulk download ``<namekey>_<user id>_<submission id>_<file>``, ``_LATE_`` included); None
    when it is none of the references. The LMS student key is ``<namekey>_<user id>``: two students
    with one name key (two John Smiths) are two students, told apart by their LMS user id."""
    if not filename.endswith(".ipynb"):
        return None
    login, rest = "", filename[: -len(".ipynb")]
    lms = LMS_PREFIX.match(rest)
    if lms and lms.group("rest") + ".ipynb" not in references and not _stem_match(lms.group("rest"), references):
        lms = None
    if rest + ".ipynb" in references:
        return rest + ".ipynb", 0, ""
    if lms:
        login, rest = f"{lms.group('login')}_{lms.group('uid')}", lms.group("rest")
    found = _stem_match(rest, references)
    return (found[0], found[1], login) if found else None


def _stem_match(rest: str, references) -> tuple[str, int] | None:
    if rest + ".ipynb" in references:
        return rest + ".ipynb", 0
    m = RESUBMISSION.match(rest)
    if m and m.group("stem") + ".ipynb" in references and (m.group("copy") or m.group("again")):
        return m.group("stem") + ".ipynb", int(m.group("copy") or m.group("again"))
    return None


@dataclass
class Submission:
    key: str  # the student: folder name, or ``<namekey>_<user id>`` of an LMS file at the top level
    path: Path
    reference: str
    rel: str
    lms_id: str = ""  # the LMS user id of an LMS-named file (Canvas's bulk download)
    order: int = 0  # the LMS submission id: a later one is a later submission
    # the student's other files for this notebook, not graded: ``[(relative path, why)]`` (find_submissions)
    others: list = field(default_factory=list)


# what students and their tools add to a file's name: a copy number, "final", a version, "copy", "Copy of"
DECORATION = re.compile(r"(?:\s*\(\d+\)|[\s_-]+\d+|[\s_.-]+(?:final|v\d+|copy|new|fixed|done))$", re.I)


def _loose(name: str) -> str:
    """A file name with case, spaces, punctuation and what renaming adds (:data:`DECORATION`) left out:
    ``ch 03 Exercises (2).ipynb``, ``ch03_exercises_final.ipynb``, ``Copy of ch03-exercises-v2.ipynb``
    and ``ch03_exercises.ipynb`` all give ``ch03exercises``."""
    stem = re.sub(r"^copy of\s+", "", unicodedata.normalize("NFKC", name).removesuffix(".ipynb"), flags=re.I)
    while (shorter := DECORATION.sub("", stem)) != stem and shorter:
        stem = shorter
    return re.sub(r"[\W_]+", "", stem).casefold()


def near_reference(name: str, references) -> str | None:
    """The reference notebook that a file's name (without an LMS prefix) matches only loosely
    (:func:`_loose`: ``ch03_exercises_final.ipynb`` for ``ch03_exercises.ipynb``), or None."""
    return next((ref for ref in references if _loose(ref) == _loose(name)), None)


def find_submissions(submissions: Path, references, misnamed: dict | None = None,
                     strays: dict | None = None) -> tuple[list[Submission], list]:
    """``([Submission], [(path, why ignored)])``: ``SUBMISSIONS/<student>/<notebook>`` or, at the top
    level, files named by an LMS's bulk download (``login_123_456_<notebook>``); a notebook's common
    renamings are matched (:func:`match_reference`). When one student handed in several versions of
    one notebook, the latest resubmission is graded and the others listed as ignored. A file in a
    student's folder whose name matches a reference only loosely (:func:`_loose`) is not graded; it is
    put in ``misnamed`` as ``{(student, reference): relative path}``, so the student's row says so. A
    notebook whose name is no reference's at all, in a student's folder or at the top level under an LMS
    name, is put in ``strays`` as ``{student: [relative path, ...]}`` when it is given (the caller, which
    knows the course's assignments, decides which notebook it stands for: :func:`place_strays`), else
    listed as ignored."""
    stray: dict[str, list[str]] = {}
    found: dict[tuple[str, str], list[tuple[int, Submission]]] = {}
    near: dict[tuple[str, str], list[tuple[str, int]]] = {}  # every loosely named file: (rel, LMS id)
    # a student's notebook-like file deeper in their folder or hidden: listed in their feedback, never graded
    deeper: dict[str, list[tuple[str, str]]] = {}
    ignored = []
    latest: dict[str, tuple[int, str]] = {}  # LMS user id -> (highest submission id, its file's student key)
    lms_keys: set[str] = set()  # the student keys of LMS-named files at the top level
    for path in sorted(submissions.rglob("*")):
        rel = path.relative_to(submissions)
        hidden = next((p for p in rel.parts if p.startswith(".")), None)
        if len(rel.parts) > 2 or hidden is not None and len(rel.parts) == 2:
            if not rel.parts[0].startswith(".") and path.is_file() and not path.is_symlink() and (
                    match_reference(path.name, references) or near_reference(path.name, references)):
                where = (f"in the folder {display_name('/'.join(rel.parts[1:-1]))}/" if len(rel.parts) > 2
                         else "hidden (its name starts with '.')")
                deeper.setdefault(rel.parts[0], []).append(
                    (str(rel), f"{where}: only files directly in the submission are graded"))
        if hidden is not None:
            if path.is_dir() and path.name == hidden or not path.is_dir() and rel.parts.count(hidden) and \
                    all(not q.startswith(".") for q in rel.parts[:rel.parts.index(hidden)]) and \
                    rel.parts.index(hidden) == len(rel.parts) - 1:
                ignored.append((rel, "a hidden file or folder (its name starts with '.'), not graded"))
            continue
        if path.is_symlink():
            ignored.append((rel, "a symbolic link"))
            continue
        if path.is_dir():
            if len(rel.parts) > 1 and path.name.casefold().endswith(".ipynb"):
                ignored.append((rel, "a folder named like a notebook, not a notebook file"))
            continue
        if not path.is_file():
            ignored.append((rel, "not a regular file"))
            continue
        match = match_reference(rel.parts[-1], references)
        lms = LMS_PREFIX.match(rel.parts[-1].removesuffix(".ipynb")) if len(rel.parts) == 1 else None
        if len(rel.parts) == 1 and lms and (why := lms_ids_problem(lms.group(0))):
            ignored.append((rel, why))
            continue
        if lms and len(rel.parts) == 1:  # the latest file of a user id names them (below)
            lms_keys.add(f"{lms.group('login')}_{lms.group('uid')}")
            latest[lms.group("uid")] = max(latest.get(lms.group("uid"), (-1, "")),
                                           (int(lms.group("sub")), f"{lms.group('login')}_{lms.group('uid')}"))
        if len(rel.parts) == 1:
            loose = near_reference(lms.group("rest"), references) if lms and match is None else None
            if loose is not None:  # an LMS name, a notebook renamed: as in a student's folder
                near.setdefault((f"{lms.group('login')}_{lms.group('uid')}", loose), []).append(
                    (str(rel), int(lms.group("sub"))))
                continue
            inner = match_reference(lms.group("rest") + ".ipynb", references) if lms and match is None else None
            if inner is not None:  # two LMS prefixes of one user id (a download renamed again;
                # two user ids were refused above): the student's
                near.setdefault((f"{lms.group('login')}_{lms.group('uid')}", inner[0]), []).append(
                    (str(rel), int(lms.group("sub"))))
                continue
            if lms and match is None and strays is not None and rel.name.casefold().endswith(".ipynb"):
                stray.setdefault(f"{lms.group('login')}_{lms.group('uid')}", []).append(str(rel))
                continue
            if lms and match is None:  # an LMS name (a student's file), but no notebook of an assignment
                ignored.append((rel, f"handed in by {lms.group('login')}_{lms.group('uid')} (its LMS name), but "
                                     "not a notebook of any assignment"))
                continue
            if match is None or not match[2]:
                ignored.append((rel, "at the top level without an LMS name (login_123_456_<notebook>); put it in "
                                     "SUBMISSIONS/<student>/"))
                continue
            key = match[2]
            lms_id, order = (lms.group("uid"), int(lms.group("sub"))) if lms else ("", 0)
        elif len(rel.parts) == 2:
            if submissions.joinpath(rel.parts[0]).is_symlink():
                ignored.append((rel, "the student's folder is a symbolic link"))
                continue
            loose = near_reference(rel.parts[-1], references) if match is None else None
            if loose is not None:
                near.setdefault((rel.parts[0], loose), []).append((str(rel), 0))
                continue
            if match is None and strays is not None and rel.name.casefold().endswith(".ipynb"):
                stray.setdefault(rel.parts[0], []).append(str(rel))
                continue
            if match is None:
                ignored.append((rel, "no reference notebook of this name (or a known renaming of one) has an "
                                     "assignment"))
                continue
            # an LMS-named file in a student's folder: its submission ID orders it among such files (as a
            # number: 100 after 99), and a file with the assignment's own name beats it (plain, below)
            inner = LMS_PREFIX.match(rel.parts[-1].removesuffix(".ipynb")) if match[2] else None
            key, lms_id, order = rel.parts[0], "", int(inner.group("sub")) if inner else 0
        else:
            ignored.append((rel, "not in a student's folder directly (SUBMISSIONS/<student>/<notebook>)"))
            continue
        found.setdefault((key, match[0]), []).append(
            (match[1], Submission(key, path, match[0], str(rel), lms_id, order)))
    # one Canvas user id is one student (issue 37: a student renamed between two downloads graded together got
    # two rows, jonesbob_102 and smithbob_102): every key of a user id becomes the key of their latest file
    same = lambda key: latest[lms_uid(key)][1] if key in lms_keys else key
    merged: dict[tuple[str, str], list] = {}
    for (key, ref), versions in found.items():
        merged.setdefault((same(key), ref), []).extend(
            (n, Submission(same(key), s.path, s.reference, s.rel, s.lms_id, s.order)) for n, s in versions)
    found = merged
    near_merged: dict[tuple[str, str], list] = {}
    for (key, ref), files in near.items():
        near_merged.setdefault((same(key), ref), []).extend(files)
    near = near_merged
    for key, files in stray.items():
        strays.setdefault(same(key), []).extend(files)
    graded = []
    for (key, ref), versions in sorted(found.items()):
        # an LMS submission id decides first (Canvas: the highest is the latest, whatever the file's "-N"), then
        # the resubmission number of the file's name
        # the resubmission number of the file's name; in a student's folder, a file with the assignment's own
        # name (or a renaming of it) beats one with an LMS prefix (the exact name wins)
        versions.sort(key=lambda v: (_plain_in_folder(v[1], references), v[1].order, v[0], v[1].rel))
        chosen = versions[-1][1]
        graded.append(chosen)
        for _, older in versions[:-1]:
            if _plain_in_folder(chosen, references) and not _plain_in_folder(older, references):
                ignored.append((Path(older.rel), f"not graded: {display_name(str(chosen.rel))} has the "
                                                 f"assignment's name ({ref})"))
                chosen.others.append((older.rel, f"its name has an LMS prefix; the file named {ref} is graded"))
                continue
            ignored.append((Path(older.rel), f"an earlier version: {display_name(str(chosen.rel))} is graded instead"))
            chosen.others.append((older.rel, "an earlier version" + (" (a lower LMS submission ID)"
                                                                     if older.order < chosen.order
                                                                     else " (a lower resubmission number)")))
    chosen_of = {(s.key, s.reference): s for s in graded}
    for (key, ref), files in sorted(near.items()):
        chosen = chosen_of.get((key, ref))
        for rel, order in files:
            if chosen is None:  # only loosely named files: the student's row says "misnamed file"
                ignored.append((Path(rel), f"misnamed: not graded; it looks like {ref}, the name to hand it in under"))
                if misnamed is not None:
                    misnamed.setdefault((key, ref), rel)
                continue
            # beside a file of the right name, whatever it holds and whenever it came: never graded (the rule
            # cannot be gamed and a regrade picks the same file), never silently (Submission.others)
            later = "; handed in after the graded file (a higher LMS submission ID)" if order > chosen.order > 0 \
                else ""
            ignored.append((Path(rel), f"misnamed: not graded, since {display_name(str(chosen.rel))} has the "
                                       f"assignment's name ({ref}){later}; said in the student's feedback and row"))
            chosen.others.append((rel, f"its name is not {ref}{later}"))
    for chosen in graded:  # the same student's files in a subfolder or hidden: also in their feedback
        chosen.others += [(rel, why) for rel, why in deeper.get(chosen.key.split("/")[0], [])
                          if (match_reference(Path(rel).name, references) or (None,))[0] == chosen.reference
                          or near_reference(Path(rel).name, references) == chosen.reference]
    return graded, sorted(ignored, key=lambda x: str(x[0]))


def place_strays(strays: dict[str, list[str]], found: list[Submission], misnamed: dict, references,
                 files_of: dict | None = None) -> list:
    """Each student's notebooks whose names are no assignment's (``strays``, from :func:`find_submissions`),
    placed among the notebooks of this run (``references``, the course's; those someone handed in, else all)
    that the student has no graded file for: where exactly one has no file at all, the strays stand for it
    and go in ``misnamed``, so the student gets a 'misnamed file' row and feedback naming the notebook to hand
    in (a fresh instructor, i11: ``my homework (1).ipynb`` alone in a Moodle folder, and a Canvas file with the
    student's LMS prefix, were reported 'not submitted', without feedback); where several do, each of them,
    and its row says the grader cannot tell which (:func:`misnamed_reason`); where every ungraded notebook
    already has a loosely named file (``ch03 Exercises.ipynb``), they join it. ``files_of`` gets every file
    of each misnamed row, so that its feedback names them all (i14: ``hw3.ipynb`` beside ``ch03
    Exercises.ipynb`` was named nowhere the student saw). Returns the ``ignored`` entries."""
    present = {s.reference for s in found} | {ref for _, ref in misnamed}
    pool = sorted(ref for ref in (present or set(references)) if ref in references)
    files_of = {} if files_of is None else files_of
    for (key, ref), rel in misnamed.items():
        files_of.setdefault((key, ref), [rel])
    ignored = []
    for key, files in sorted(strays.items()):
        graded = {s.reference for s in found if s.key == key}
        missing = [ref for ref in pool if ref not in graded]
        free = [ref for ref in missing if (key, ref) not in misnamed]
        for ref in free or missing:
            misnamed.setdefault((key, ref), sorted(files)[0])  # a loosely named file stays the row's first
            files_of.setdefault((key, ref), [])
            files_of[(key, ref)] = sorted(set(files_of[(key, ref)]) | set(files))
        if len(free) == 1:
            why = (f"misnamed: not graded; no assignment has this name, and {free[0]} (the name to hand it "
                   "in under) is the notebook of this run the student did not hand in")
        elif free:
            why = ("misnamed: not graded; no assignment has this name, and it could stand for any of "
                   f"{', '.join(free)} (the student handed in none of them)")
        elif missing:
            why = (f"misnamed: not graded; no assignment has this name, and the student handed in "
                   f"{', '.join(missing)} only under another name (said in their feedback)")
        else:
            why = "not graded: no assignment has this name (the student's notebooks of this run are graded)"
        ignored += [(Path(rel), why) for rel in files]
    return ignored


def misnamed_reason(files: list[str], candidates: list[str], notebook: str) -> tuple[str, str]:
    """A 'misnamed file' row's reason and next step: ``files``, every file standing for ``notebook``
    (:func:`place_strays`); ``candidates``, the notebooks of the run those same files could stand for.
    Every file is named (the feedback used to name the first of several only), and with several
    candidates the student is told to rename each file to the assignment it answers: no guess."""
    names = [repr(display_name(handed_name(rel))) for rel in sorted(files)]
    if len(candidates) > 1:
        handed = (f"handed in {names[0]}, whose name is no assignment's" if len(names) == 1 else
                  f"handed in {len(names)} notebooks whose names are no assignment's: {', '.join(names)}")
        listed, every = (" and ".join(sorted(candidates)), "both") if len(candidates) == 2 else (
            ", ".join(sorted(candidates)), "all")
        return (f"{handed}; this run's {listed} are {every} missing, so the grader cannot "
                f"tell which one {'it answers' if len(names) == 1 else 'each answers'}: rename each notebook to "
                "its assignment's name and hand it in again"), ("rename the notebook that answers this "
                                                                "assignment to {notebook} and hand it in again")
    if len(names) == 1:
        return (f"handed in {names[0]}, which is not named {notebook}: rename the file and hand it in again",
                "rename your file to {notebook} and hand it in again")
    # the one whose name looks like the notebook's, said (a fresh instructor, i15: the grader knew, the student
    # was left to guess)
    likely = [repr(display_name(handed_name(rel))) for rel in sorted(files)
              if near_reference(Path(handed_name(rel)).name, [notebook]) == notebook]
    hint = f" ({likely[0]} looks like it)" if len(likely) == 1 else ""
    return (f"handed in {len(names)} notebooks, none named {notebook}: {', '.join(names)}: rename the one that "
            f"answers this assignment{hint} to {notebook} and hand it in again"), (
        "rename the notebook that answers this assignment to {notebook} and hand it in again")


def _plain_in_folder(sub: Submission, references) -> bool:
    """Whether ``sub`` is in a student's folder under a name without an LMS prefix."""
    found = match_reference(Path(sub.rel).name, references)
    return "/" in sub.rel and not (found and found[2])


def several_files(sub: Submission) -> dict:
    """What a row says of a student who handed in other files for its notebook beside the graded one
    (``sub.others``): ``files``, the graded file's name and each other's with why it was not graded, as
    the student named them (:func:`handed_name`, escaped), for the feedback; ``note``, the same on one
    line, for grades.csv and the console."""
    name = lambda rel: display_name(handed_name(str(rel)))  # noqa: E731
    files = [name(sub.rel), [[name(rel), why] for rel, why in sub.others]]
    note = (f"several files for {sub.reference}: graded {files[0]!r}; not graded: "
            + ", ".join(f"{n!r} ({why})" for n, why in files[1]))
    return {"files": files, "note": note}


def roster_keys(lms_ids: dict[str, str], roster) -> dict[str, str]:
    """``{student key: roster folder}`` for the LMS-named students (``lms_ids``: key -> LMS user id,
    '' for a folder): the roster row whose ``id`` is the user id; else the row whose folder is the whole
    key (``namekey_userid``), when it names no other id; else, only for a roster without ids, the row whose
    folder is the name key, when only one user id came with that name key. With ids in the roster, a name key
    alone never takes a row (issue 37: a student renamed to a classmate's name key took the row of the
    classmate who handed nothing in). Students not listed keep their own key."""
    out: dict[str, str] = {}
    if not roster:
        return out
    by_id = {str(info.id).strip(): folder for folder, info in roster.items() if str(info.id).strip()}
    uids_of: dict[str, set[str]] = {}
    for key, uid in lms_ids.items():
        if uid:
            uids_of.setdefault(key[: -len(uid) - 1], set()).add(uid)
    for key, uid in lms_ids.items():
        if not uid:
            continue
        namekey = unicodedata.normalize("NFC", key[: -len(uid) - 1])
        row = roster.get(namekey)
        if uid in by_id:
            out[key] = by_id[uid]
        elif unicodedata.normalize("NFC", key) in roster and str(
                roster[unicodedata.normalize("NFC", key)].id).strip() in ("", uid):
            out[key] = unicodedata.normalize("NFC", key)
        elif row is not None and not by_id and len(uids_of[key[: -len(uid) - 1]]) == 1:
            out[key] = namekey
    return out


def identity_problems(keys: list[str]) -> dict[str, str]:
    """``{key: why refused}`` for student keys that another key equals after Unicode normalisation
    (NFC), ignoring case, or after cleaning (control characters and surrounding white space)."""
    problems: dict[str, str] = {}
    for how, fold in (("after Unicode normalisation (NFC)", lambda k: unicodedata.normalize("NFC", k)),
                      ("ignoring upper and lower case", lambda k: unicodedata.normalize("NFC", k).casefold()),
                      ("after removing control characters and surrounding spaces",
                       lambda k: " ".join(clean(unicodedata.normalize("NFC", k), 10**6).split()).casefold())):
        groups: dict[str, list[str]] = {}
        for k in keys:
            groups.setdefault(fold(k), []).append(k)
        for group in groups.values():
            if len(set(group)) > 1:
                plain = all(g.isascii() for g in group)  # else names that look alike are told apart by code points
                # quoted as display_name writes them (repr would double its backslashes)
                names = ", ".join(f"'{display_name(g)}'" if plain else f"'{display_name(g)}' (code points "
                                  f"{ascii(g)[1:-1]})" for g in sorted(set(group)))
                for k in group:
                    problems.setdefault(k, f"the names {names} are the same {how}: rename the folders so each "
                                           "student has exactly one")
    return problems


def slug(key: str) -> str:
    """A stable file name for a student: letters, digits and ``_.-`` of the name (at most 60), then a
    dash and 8 hex digits of the name's SHA-256, so two students never share a file and a student keeps
    theirs from run to run."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", unicodedata.normalize("NFC", key))[:60].lstrip(".-") or "student"
    return f"{stem}-{hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


def file_names(students: list[str]) -> dict[str, str]:
    """``{student: file name stem}`` (see :func:`slug`)."""
    return {who: slug(who) for who in students}


# --------------------------------------------------------------------------- files


# a surrogate that no byte of a file's name gave (surrogateescape gives U+DC80..U+DCFF): a lone one, which
# UTF-8 cannot write, from a student's exception text (ValueError("\\ud800")) or a name
LONE_SURROGATE = re.compile("[\ud800-\udc7f\udd00-\udfff]")


def escape_undecodable(text: str) -> str:
    """``text`` with each byte of a name that was not UTF-8 (a surrogate escape, as os.listdir gives
    it) written as ``\\xff``, and any other lone surrogate as ``\\ud800``: such a text can be printed
    and written, and still tells what it held. Every text the grader writes passes here (write_atomic,
    the feedback zips): a lone surrogate in an exception's text would stop the run at grades.csv."""
    text = LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# Outputs hold every student's grades and feedback: the folder 0700 and its files 0600 unless a run asks
# for --shared-output (then new files and folders follow the umask).
PRIVATE = [True]


def private_dirs(path: Path, top: Path) -> None:
    """``path`` and every folder between it and ``top`` made and, when private, the ones it made mode 0700:
    never a folder the grader did not make (a fresh attacker's --out /tmp/grades.csv took /tmp's sticky bit)."""
    made = [d for d in [path, *path.parents] if not d.exists()]
    path.mkdir(parents=True, exist_ok=True)
    if PRIVATE[0]:
        for d in made:
            if d == top.parent or len(d.parts) < len(top.parts):
                break
            with contextlib.suppress(OSError):
                os.chmod(d, 0o700)


def foreign_out_folder(out_dir: Path) -> str:
    """Why the grader must not write into ``out_dir``, or '': an existing folder that is not the grader's
    (no .grade.lock from an earlier run), holds files and is not the documented default (the repository's
    grades/, which git ignores). A fresh attacker's --out grades.csv at the repository root wrote the
    secret, the grades and the feedback there, where git would take them."""
    if not out_dir.is_dir() or (out_dir / ".grade.lock").is_file() or not any(out_dir.iterdir()):
        return ""
    if out_dir.resolve() == (ROOT / "grades").resolve():
        return ""
    return (f"{out_dir} already holds files the grader did not write (it has no .grade.lock): name a CSV in a "
            f"new or empty folder, such as --out {out_dir / 'grades' / 'grades.csv'}")


def ignore_in_git(folder: Path) -> None:
    """Put a ``.gitignore`` holding ``*`` in ``folder`` (one the grader made, or made before), unless it has
    one: whatever OUT= names, its grades, feedback and secret never go into a commit of the instructor's
    clone (only grades/ is in the repository's .gitignore)."""
    if not (folder / ".gitignore").exists():  # private as every file of the folder (write_atomic)
        write_atomic(folder / ".gitignore", "# written by scripts/grade.py: grades, feedback and the secret stay "
                                            "out of git\n*\n")


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` (or bytes: the Gradescope bundle's zip) to a temporary file beside ``path``, mode 0600
    while PRIVATE, then rename it over ``path``: a reader (or a full disk) never sees a half-written file,
    and the old file stays whole if writing fails. A name that was not UTF-8 is written escaped
    (:func:`escape_undecodable`)."""
    data = text if isinstance(text, bytes) else escape_undecodable(text).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o600 if PRIVATE[0] else 0o666 & ~umask)  # shared: as an ordinary new file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def csv_text(header: list[str], rows: list[list]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


def fenced(text: str) -> str:
    """``text`` in a fenced code block whose fence is longer than any run of backticks in it: Markdown
    and HTML inside stay literal text."""
    text = clean_block(text)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def clean_block(text: str) -> str:
    """Printable text of any length, line breaks kept (control and format characters removed)."""
    text = _ANSI.sub("", str(text))
    return "\n".join(" ".join(clean(line, 10**7).split(" ")) for line in text.replace("\r\n", "\n").split("\n"))


# When a sealed Gradescope result shows what it holds back, per [gradescope] scores (course.GRADESCOPE_SCORES)
SHOWN = {"after_due_date": "after the due date", "after_published": "when your instructor publishes the grades"}


def late_lines(r: dict) -> list[str]:
    """The times a late row's penalty rests on (:func:`late_basis`), for its feedback."""
    return [fenced(r["late_basis"]), ""] if r.get("late_basis") else []


def feedback_markdown(student: dict, rows: list[dict], hidden_details: bool = True, sealed: str = "",
                      course: Course | None = None) -> str:
    """A student's feedback: per assignment the points, the status in words, and each failed case (a
    visible case whole: input, expected, got; a hidden case by number and description only). Every
    text the student's code or name could influence is in a fenced code block.

    ``sealed`` (a key of SHOWN; Gradescope, before the hidden cases' results show): nothing that can
    depend on the hidden cases a submission drew. Its seed derives from the notebook's bytes, so what
    one draw revealed would let a student resubmit until a lucky draw; and a notebook's code can see
    its draw (its function receives the inputs), so whatever running it gave can: the points, how many
    cases passed and why, and also its status, a cell that raised, a kernel that died or a timeout (a
    fresh attacker resubmitted a function that killed its kernel on the cases it failed until the
    visible "ran" test passed, then held 20/20 for a wrong answer). What stays: a status decided from
    the file alone (DECIDED_BEFORE_RUNNING), the late days and how many hidden cases there are.
    ``course``: its name heads the feedback and each assignment's title names it (a fresh instructor: every
    file began "# Feedback" and "## ch03_exercises.ipynb: masked_softmax")."""
    # the roster's name where there is one (escaped as the folder's key is: both are untrusted text),
    # with the key that names the folder or the LMS's files
    name = student.get("name") or student["student"]
    name = name if name == student["student"] else display_name(name)
    who = name if name == student["student"] else f"{name} ({student['student']})"
    plain = lambda text: " ".join(str(text).split())  # noqa: E731 (the instructor's text, on one line)
    lines = [f"# Feedback: {plain(course.name)}" if course is not None and course.name.strip() else "# Feedback",
             "", "Student:", "", fenced(who), ""]
    said_for: dict[tuple, str] = {}  # (notebook, status, reason) of a WHOLE_NOTEBOOK outcome: the assignment it is under
    for r in rows:
        spec = course.assignments.get(r["assignment"]) if course is not None else None
        assignment = f"{plain(spec.title)} ({r['assignment']})" if spec is not None and spec.title.strip() \
            else r["assignment"]
        # the name the student uploaded (handed_name: without the prefix an LMS's download put before it, `_LATE_`
        # included), in characters Markdown leaves alone (a name an LMS prefixed could hold any)
        base = handed_name(r["path"], r.get("key") or "") if r.get("path") else ""
        handed = re.sub(r"[^A-Za-z0-9 ._()-]", "_", base)[:200]
        title = f"{r['notebook']}: {assignment}" if handed in ("", r["notebook"]) else \
            f"{handed} (graded as {r['notebook']}): {assignment}"
        points = "" if r["points"] is None else f"{r['points']:g} of {r['max_points']:g} points"
        hidden_cases = hidden_count(r)
        if sealed and r["status"] not in DECIDED_BEFORE_RUNNING:  # what the run gave waits, all of it
            lines += [f"## {title}", "", f"**Status and points: shown {SHOWN[sealed]}**", "",
                      f"Your notebook was received and run. How the run went (its status, any cell that raised) "
                      f"and which of its {hidden_cases} hidden case(s) passed are shown {SHOWN[sealed]}: what a "
                      "run does can depend on the hidden cases it drew.", ""]
            if r.get("late_days"):
                lines += [f"Handed in {r['late_days']} day(s) late: {100 * r['penalty']:g} % of the points "
                          "taken.", ""] + late_lines(r)
            lines += other_files(r)
            step = next_step(r, sealed=True)
            lines += what_to_do(step)
            continue
        if sealed:
            lines += [f"## {title}", "", f"**Points: shown {SHOWN[sealed]}** — status: {r['status']}", ""]
        else:
            lines += [f"## {title}", "", f"**{points or 'no points'}** — status: {r['status']}"
                      + (f"; {r['passed']} of {r['total']} cases passed" + weighted_cases(r)
                         if r["status"] in ("graded", "not implemented") else ""), ""]
        # one notebook's outcome for all its assignments (chapter 4's two: a misnamed file, a timeout) is said
        # under the first; the second said it all again (a fresh instructor, i15)
        whole = (r["status"], r.get("reason") or r["notebook"])  # a misnamed file's reason is the file's
        if r["status"] in WHOLE_NOTEBOOK and whole in said_for:
            lines += [f"The same file as {said_for[whole]} above, with the same outcome: what the grader saw, "
                      "and what to do, are said there.", ""]
            continue
        if r["status"] in WHOLE_NOTEBOOK:
            said_for[whole] = assignment
        if r["status"] not in ("graded",):
            words = STATUS_WORDS.get(r["status"], r["status"])
            lines += [words[:1].upper() + words[1:] + ".", ""]
        if r.get("canvas_late"):  # i15: the student heard nothing of it
            lines += ["Canvas marked this file late. Your instructor applies the late policy once they have its "
                      "submission time, so these points may change.", ""]
        decided = course is not None and (o := course.overrides.get((unicodedata.normalize(
            "NFC", r.get("key", "")), r["assignment"]))) is not None and o.points is not None
        # the LMS's feedback (on Gradescope its REVIEW test says it), until the instructor has decided (i16)
        if r.get("review") and hidden_details and not decided:
            lines += [REVIEW_WORDS.format(words=", ".join(r["review"])) + (
                " These points are not uploaded until then." if course is not None and held_out(r, course)
                == "review" else " Your points stand until then."), ""]
        lines += other_files(r)
        if r.get("cell_error"):  # the score stands, but the student's own Run All stops at that cell
            lines += ["One of your cells raised an error:", "", fenced(r["cell_error"]), ""]
        if r.get("late_days"):
            lines += [f"Handed in {r['late_days']} day(s) late: {100 * r['penalty']:g} % of the points taken.",
                      ""] + late_lines(r)
        if r.get("override"):  # the instructor's decision (an appeal, an extension): the points above are it
            lines += ["Your instructor changed this grade:", "", fenced(r["override"].removeprefix("override: ")),
                      ""]
        if r["status"] not in ("graded", "not implemented") and r.get("reason"):
            lines += ["What the grader saw:", "", fenced(r["reason"]), ""]
        failed = [c for c in r.get("cases", []) if not c["passed"]] if r["status"] != "not defined" else []
        if len(failed) > 1 and all(c.get("status") == "package" for c in r["cases"]):  # one cause: said once
            lines += ["Every case:", "", fenced(failed[0]["why"]), ""]
            failed = []
        causes = [c.get("cause") or "" for c in failed]
        common = causes[0] if len(failed) >= 2 and causes[0] and causes.count(causes[0]) == len(causes) else ""
        if sealed:  # how many hidden cases failed, and why, depends on the draw
            causes, common, failed = [], "", [c for c in failed if c.get("visible")]
        stated = {common} if common else set(c for c in causes if c) if len(failed) >= 2 else set()
        # the same exception on every failed hidden case (a fresh instructor: dan's NameError said ten
        # times): said once, as one mistake, with the cases listed under it (each with its hint, if any)
        raised = {c["why"].split(" (hint: ")[0] for c in failed} if len(failed) >= 2 and hidden_details and all(
            c.get("status") == "raised" and not c.get("visible") for c in failed) else set()
        once = raised.pop() if len(raised) == 1 and not common else ""
        # the same reason under every failed hidden case (a fresh instructor: gus's "called the package's
        # masked_softmax" and dan's "not implemented yet" ten times each): said once, the cases on one line
        same = failed[0]["why"] if len(failed) >= 2 and hidden_details and not sealed and not once and all(
            c["why"] == failed[0]["why"] and not c.get("visible") and c.get("status") in ("blocked", "not_implemented")
            for c in failed) else ""
        # a write into the inputs fails a case whatever it returned: its result was not judged, so one
        # mistake does not explain the failures (a fresh instructor: smithjohn fixed the write, and 8 of 9
        # cases still failed); the results on the grader's own copy are counted, unscored
        written = [c for c in failed if c["why"].startswith(IN_PLACE)]
        if written and len(written) == len(failed) and hidden_details and not sealed and len(failed) >= 2:
            right = [c for c in written if c.get("result_right") is not None]
            if r.get("in_place_scored"):  # [course] in_place = "case": each was scored on its result (i11)
                lines += [f"**Your function changed its input in place in {len(written)} failed cases; this "
                          "course scores such a case on its result on the grader's own copy of the inputs (these "
                          "were wrong), and its case about writing in place fails; fix the write first:**", "",
                          fenced(common or written[0]["why"]), ""]
                right = []
            else:
                lines += [f"**Your function changed its input in place in {'all ' * (len(written) == r['total'])}"
                          f"{len(written)} cases, so {'its' if len(written) == r['total'] else 'their'} results "
                          "were not judged; fix that first:**", "", fenced(common or written[0]["why"]), ""]
            if right:
                lines += [f"Apart from that, its results were right in {sum(c['result_right'] for c in right)} "
                          f"of {len(right)} cases (not scored).", ""]
            lines += ["The cases: " + cases_line(written) + ".", ""]
            # "fix the failed cases it shows, and the write named above first" read awkwardly (issue 37); with every
            # result right, there is nothing else to fix (a fresh instructor, i15)
            step = next_step(r, named=True).replace(
                "fix the failed cases it shows, and the causes named above,",
                "first stop your function writing into its input (above), then fix the failed cases it shows,"
                if not (right and all(c["result_right"] for c in right) and len(right) == len(failed)) else
                "stop your function writing into its input (above): its results were right,")
            lines += what_to_do(step)
            continue
        if same and not common:
            if r["status"] == "graded":
                lines += [f"**One mistake explains all {len(failed)} failed cases:**", "", fenced(same), ""]
            lines += ["The cases: " + cases_line(failed) + ".", ""]
            step = next_step(r, named=True)
            called = re.match(r"your function called the package's (\S+), which", same)
            if r["status"] == "graded" and failed[0].get("status") == "blocked" and called:
                # the checker passes such a function in the student's session, where the package is whole: "fix
                # the failed cases it shows" pointed at none (a fresh instructor, i16)
                step = (f"Write the function with torch and Python, without calling the package's "
                        f"{called.group(1)}: in your own session the package is whole, so the call works there, and "
                        "your checker cell's report says so in a Note above its cases; the grader's copy of the "
                        "package has no code to call. Then hand the notebook in again")
            elif r["status"] == "graded" and failed[0].get("status") == "blocked":
                # what the text forbids, said once above (i17: the step repeated the whole reason)
                step = step.replace(", and the causes named above,",
                                    ", and write the function without what its text forbids (named above),")
            elif r["status"] == "graded":
                step = step.replace(", and the causes named above,", ", and the cause named above (" + same + "),")
            lines += what_to_do(step)
            continue
        numbered: dict[str, int] = {}
        # with one mistake, every failed hidden case that reads the same without it is listed on one line
        # (a fresh instructor, i14: a crash printed 9 sections of "your function raised RuntimeError (the cause
        # named above)")
        bare = {c["why"].removesuffix(": " + common) for c in failed} if common and hidden_details and not any(
            c.get("visible") for c in failed) else set()
        compact = len(bare) == 1 and bare != {failed[0]["why"]}
        if common:  # one mistake explains every failed case: say it first, once
            lines += [f"**One mistake explains all {len(failed)} failed cases:**", "", fenced(common), ""]
            if compact:
                lines += [f"The cases: {cases_line(failed)}; in each, {bare.pop()}.", ""]
        elif once:
            lines += [f"**One mistake explains all {len(failed)} failed cases:**", "", fenced(once), "",
                      "The cases:", "", fenced("\n".join(capital(lms_export.hidden_title(c)) + c["why"][len(once):]
                                                         for c in failed)), ""]
        elif len(failed) >= 2 and any(causes):
            # ties in the order the failed cases first meet them: the same notebook gets the same text
            # (a set's order changes from run to run with Python's string hashing)
            ranked = sorted(dict.fromkeys(c for c in causes if c), key=lambda c: -causes.count(c))
            lines += ["Possible causes, the one most failed cases share first:", ""]
            # several causes are numbered, so that each case names its own (a fresh instructor: every case
            # read "(the cause named above)" under three causes)
            numbered = {c: i for i, c in enumerate(ranked, 1)} if len(ranked) >= 2 else {}
            for c in ranked:
                lines += [(f"Cause {numbered[c]}, in " if numbered else "In ")
                          + f"{causes.count(c)} of {len(failed)} failed cases:", "", fenced(c), ""]
        for c in failed:
            if once or compact:
                break
            if c.get("visible"):
                lines += [f"### Case {c['index']}: a case your checker cell shows", "",
                          fenced("\n".join([f"case: {c['name']}"] + [f"{k}: {c[k]}" for k in
                                                                     ("input", "expected", "got") if c.get(k)]
                                           + [f"why: {c['why']}"])), ""]
            elif hidden_details:  # a cause said above once is not said again under each case
                why = c["why"]
                if c.get("cause") in stated and why.endswith(": " + c["cause"]):
                    why = why.removesuffix(": " + c["cause"]) + (
                        f" (cause {numbered[c['cause']]} above)" if c["cause"] in numbered else
                        " (the cause named above)")
                lines += ["### " + capital(lms_export.hidden_title(c)), "", fenced(why), ""]
        hidden = sum(1 for c in failed if not c.get("visible"))
        if hidden and not hidden_details:  # Gradescope: which hidden cases failed is in their own tests
            lines += [f"{hidden} hidden case(s) failed; which ones, and why, is in the hidden cases' tests.", ""]
        # "the causes named above" only where some are: a crash on every case names none (a fresh instructor)
        named = bool(stated) or any(c.get("visible") or (hidden_details and c.get("cause")) for c in failed)
        step = next_step(r, sealed=bool(sealed), named=named)
        if step:  # every outcome but full marks ends with what to do next, after what it refers to
            lines += what_to_do(step)
    return "\n".join(lines + ([] if sealed else canvas_totals(rows, course)))


def canvas_totals(rows: list[dict], course) -> list[str]:
    """The feedback's closing lines for assignments that share one Canvas assignment (``canvas_id``), where the
    student sees only their sum (a fresh instructor, i14: the page showed no total)."""
    if course is None:
        return []
    scored = {r["assignment"]: r for r in rows if r.get("max_points") is not None}
    lines = []
    for names in lms_export.canvas_groups(course, list(scored)).values():
        rs = [scored[a] for a in names]
        if len(rs) > 1 and any(r["points"] is not None for r in rs):
            titles = [" ".join(course.assignments[r["assignment"]].title.split()) or r["assignment"] for r in rs]
            lines += [f"**In Canvas, {' and '.join(titles)} are one assignment:** "
                      f"{sum(r['points'] or 0 for r in rs):g} of {sum(r['max_points'] for r in rs):g} points.", ""]
    return lines


def capital(text: str) -> str:
    """``text`` with its first letter upper case (a sentence of the feedback that starts with a phrase)."""
    return text[:1].upper() + text[1:]


def what_to_do(step: str) -> list[str]:
    """The feedback's closing lines for an outcome: what to do next (:func:`next_step`), as a sentence."""
    return ["**What to do:** " + capital(step) + ".", ""]


def cases_line(cases: list[dict]) -> str:
    """``hidden cases 1, 2, 3 and 10``: the failed cases that share one reason, on one line (their names are in
    the student's checker cell)."""
    ix = [str(c["index"]) for c in cases]
    return "hidden case " + ix[0] if len(ix) == 1 else f"hidden cases {', '.join(ix[:-1])} and {ix[-1]}"


def weighted_cases(row: dict) -> str:
    """`` (4 of 12 weighted case points: cases 5 and 10 count 2)`` when some case's weight is not 1, so
    that the points follow from the line (points x 4/12, less a late penalty); '' otherwise."""
    cases = row.get("cases") or []
    if all(c.get("weight", 1.0) == 1.0 for c in cases):
        return ""
    by: dict[float, list[str]] = {}
    for i, c in enumerate(cases, 1):
        if c.get("weight", 1.0) != 1.0:
            by.setdefault(c["weight"], []).append(str(c.get("index", i)))
    said = "; ".join((f"case {ix[0]} counts" if len(ix) == 1 else
                      f"cases {', '.join(ix[:-1])} and {ix[-1]} count") + f" {w:g}" for w, ix in sorted(by.items()))
    got = sum(c.get("weight", 1.0) for c in cases if c["passed"])
    return f" ({got:g} of {sum(c.get('weight', 1.0) for c in cases):g} weighted case points: {said})"


def other_files(row: dict) -> list[str]:
    """The feedback's lines on the other files a student handed in for a row's notebook (several_files):
    which one was graded and why the others were not, in the names the student gave them (fenced: a
    file's name is the student's text); [] when there were none."""
    if not row.get("files"):
        return []
    graded, others = row["files"]
    notebook = row["notebook"]
    return ["**You handed in more than one file for this notebook; one was graded:**", "",
            fenced("\n".join([f"graded:     {graded}"] + [f"not graded: {n} ({why})" for n, why in others])),
            "", f"Only the file named {notebook} is graded (of several versions under that name, the latest), "
            "whatever the other files hold and whenever they came. If a file that was not graded is the one you "
            f"meant, hand it in again named {notebook}, alone.", ""]


def counted(n: int, noun: str) -> str:
    """``1 row``, ``2 rows``: the grader's printout in the right number (a fresh instructor: "Wrote 1 rows")."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def hidden_count(row: dict) -> int:
    """How many cases sealed feedback says ``row``'s assignment drew: its total, whatever the run gave.
    Not the cases that are not visible: a drawn case can coincide with one the checker shows, and a row the
    run left without cases (timeout, kernel died, ...) has none to count, so a count of the non-visible
    ones said 9 for a graded run and 10 for a killed one (a fresh attacker: an oracle before the due date)."""
    return int(row.get("total") or len(row.get("cases") or []))


def gradescope_json(student: dict, rows: list[dict], scores: str = "after_due_date",
                    course: Course | None = None) -> dict:
    """One submission's Gradescope ``results.json``. ``scores`` is the course file's ``[gradescope]
    scores``: "visible" shows every case's test, the points and the feedback with its counts at once
    (a student who resubmits meets newly drawn cases and sees how each draw went); "after_due_date"
    or "after_published" (Gradescope's own visibility names) holds back every case's test (a drawn case
    that equals a checker case too) and
    the feedback with the points until then, and shows at once, per assignment, a test that says only
    that the notebook was received and run (or, for a status decided from the file alone, why it was
    not), with the sealed feedback (feedback_markdown's ``sealed``) as the output.
    Gradescope's specification: while a test is hidden the student does not see the total score. A
    row's ``points`` None (not graded) counts 0 there."""
    data = lms_export.gradescope_results([dict(r, points=r["points"] or 0.0) for r in rows],
                                         feedback_markdown(student, rows, hidden_details=False, course=course))
    if scores == "visible":
        return dict(data, tests=data["tests"] + review_tests(rows, "visible"))
    ran = []
    for r in rows:  # at once: only what does not depend on the draw (feedback_markdown's ``sealed``)
        hidden_cases = hidden_count(r)
        if r["status"] in DECIDED_BEFORE_RUNNING:
            ran.append({"name": f"{r['assignment']}: your notebook was not run (see the feedback)",
                        "status": "failed", "visibility": "visible",
                        "output": f"Status: {STATUS_WORDS.get(r['status'], r['status'])}."})
            continue
        ran.append({"name": f"{r['assignment']}: your notebook was received and run", "status": "passed",
                    "visibility": "visible",
                    "output": f"How the run went, which of its {hidden_cases} hidden case(s) passed and your "
                              f"points are shown {SHOWN[scores]}. Before you hand in, run your notebook from the "
                              "top: its checker cell tests the same function on cases of its own."})
    # the test gradescope_results writes for a row without cases names its status and reason: for a
    # status the run gave (timeout, kernel died, no results, flagged, ...) that is a one-bit oracle
    # before the due date (a fresh attacker: a function that kills its kernel on the inputs it fails);
    # `ran` above says a status decided from the file alone. Every per-case test waits, a visible one too:
    # a drawn case whose inputs equal a checker case's is visible, and its test shown at once said that the
    # run was graded, not killed (a fresh attacker: mlm_masking's seeds 8, 18 and 22 draw one)
    for t in data["tests"]:
        t["visibility"] = scores
    every = all(r["status"] == "graded" and r.get("passed") == r.get("total") for r in rows)
    points = {"name": "Your points, with the feedback on the hidden cases", "visibility": scores,
              "status": "passed" if every else "failed", "output": data["output"], "output_format": "md"}
    return dict(data, output=feedback_markdown(student, rows, hidden_details=False, sealed=scores, course=course),
                tests=ran + data["tests"] + review_tests(rows, scores) + [points])


REVIEW_WORDS = "Your code uses {words}, which can get past the grader's checks, so your instructor will read it."


def review_tests(rows: list[dict], visibility: str) -> list[dict]:
    """A Gradescope test per row the review flag marked (its code uses words that get past the in-call
    blocks), failed and worth nothing, so that the flag is on the submission's page, not only in the
    autograder's log (a fresh instructor, i14). It shows when the per-case tests do (``visibility``): a test
    "hidden" from students would hide their total score for good (Gradescope's specification), and only
    theirs; the student reads that the instructor will read the notebook, which is true."""
    return [{"name": f"{r['assignment']}: REVIEW: your instructor will read this notebook",
             "visibility": visibility, "status": "failed", "score": 0.0, "max_score": 0.0,
             "output": REVIEW_WORDS.format(words=", ".join(r["review"])) + " Your points stand until then."}
            for r in rows if r.get("review")]


FIELDS = ["student", "login", "section", "notebook", "assignment", "status", "passed", "total", "score", "points",
          "max_points", "late_days", "penalty", "seed", "secret_id", "sha256", "seconds", "reason", "note", "handed_in", "override",
          "held"]  # held: why the uploads leave the grade out ("late", "review"; held_out), '' when they carry it


@functools.lru_cache(maxsize=64)
def case_count(name: str, extra: str | None = None) -> int:
    """How many cases assignment ``name`` has (with the instructor's ``extra`` cases); the same for
    every seed, so a row without results (not submitted, refused, grader error) still says it."""
    try:
        return len(grading_cases(name, 0, extra or None)[1])
    except Exception:  # noqa: BLE001  an assignment the package no longer has: unknown
        return 0


CASES_FILE = "cases.json"  # in the output folder: each assignment's case set when it was graded


def case_fingerprints(course, names) -> dict[str, str]:
    """``{assignment: sha256}`` of the contents of each of ``names``' extra_cases file (b"" without one):
    what decides which cases a kept row ran. Weights and points are not in it: :func:`score_row`
    applies the course file's to every row, kept or new, at each run."""
    out = {}
    for name in sorted(names):
        spec = course.assignments.get(name)
        out[name] = hashlib.sha256(Path(spec.extra_cases).read_bytes() if spec and spec.extra_cases
                                   else b"").hexdigest()
    return out


def check_weight_keys(course) -> None:
    """Refuse a course file with an ``[assignments.<key>]`` the package does not have, or whose
    ``weights`` name a case that does not exist: every weight's key must be ``visible``, ``hidden``
    or a case's label (its description, the same for every seed)."""
    for name, spec in course.assignments.items():
        # a misspelt key would otherwise pass silently, its points, due date and weights never applied
        if name not in assignment_names():
            raise CourseError(f"[assignments.{name}]: no assignment of that name; known: {sorted(assignment_names())}")
        if not spec.weights:
            continue
        _, cases = grading_cases(name, 0, spec.extra_cases or None)
        known = {"visible", "hidden"} | {getattr(c, "label", "") or c.name for c in cases} | {c.name for c in cases}
        unknown = sorted(set(spec.weights) - known)
        if unknown:
            raise CourseError(f"[assignments.{name}] weights: unknown keys {unknown}; known keys: "
                              + ", ".join(repr(k) for k in sorted(known))
                              + ("" if spec.extra_cases else " (a label of cases you wrote yourself counts only "
                                 "with the file that adds them: extra_cases = \"...\" in the same table, as in "
                                 "course.example.toml)"))


def idle_weights(course, seed: int | None) -> list[str]:
    """The course file's weights that weigh no case in a run at ``seed`` (None: each student's own): a
    ``visible`` weight, unless the run uses --seed 0 (the only seed whose cases are the checker's)."""
    if seed == 0:
        return []
    return [f"[assignments.{name}] weights: visible = {spec.weights['visible']:g} weighs no case in this run: "
            "every case's inputs come from the student's seed, so every case is hidden (a case is visible only "
            "with --seed 0); weight cases by their labels instead (book/instructors.md, 'The assignments')"
            for name, spec in sorted(course.assignments.items()) if "visible" in spec.weights]


# each assignment's own case about writing in place, by label: it fails a write under either in_place policy
# (chapter 9's checks the tokens in its own check, so a write fails it whatever the policy)
IN_PLACE_CASES = {"masked_softmax": "the scores are not modified in place"}


def late_basis(course, submitted, due, extended: bool = False, excused: bool = False) -> str:
    """The times and the policy a late penalty rests on, in the course's timezone, in words: "handed in
    2027-05-02 09:30, due 2027-04-30 23:59 (Europe/Berlin), 15 minutes' grace; 10 % per day or part of
    a day, at most 50 %"."""
    zone = ZoneInfo(course.timezone) if course.timezone else dt.timezone.utc
    at = lambda when: when.astimezone(zone).strftime("%Y-%m-%d %H:%M")  # noqa: E731
    grace = f", {course.grace_minutes:g} minutes' grace" if course.grace_minutes else ""
    policy = ("your instructor excused the lateness" if excused else
              f"{100 * course.per_day:g} % per day or part of a day" + (
                  f", at most {100 * course.cap:g} %" if course.cap < 1 else ""))
    return (f"handed in {at(submitted)}, due {at(due)}{' (your extended date)' if extended else ''} "
            f"({course.timezone or 'UTC'}){grace}; {policy}")


# What a notebook has no business using, which gets past the blocks that hold only while the grader calls the
# student's function (a fresh attacker, r3, 4/10: a thread or a subprocess doing the forbidden call, stepping
# out of the dispatcher's mode, or one assignment to the grading module's state each scored full marks). Those
# blocks live in the student's own process, so the grader cannot make them hold; it flags the notebook for
# the instructor to read (gradebook status "REVIEW: ...", and the run's summary), and leaves the score alone.
REVIEW_CODE = re.compile(r"\b(threading|_thread|subprocess|multiprocessing|concurrent\.futures|os\.fork|os\.system|"
                         r"os\.popen|os\.exec\w*|os\.spawn\w*|ctypes|_python_dispatch|_disable_current_modes|"
                         r"assignments\.grading|assignments import grading|TORCH_BLOCKED|_forbidden|"
                         r"__import__|importlib|_decomp|_refs|as_strided|"
                         # attacker r8: the forbidden operation outside torch's dispatcher (numpy's strided
                         # windows, an ONNX runtime's loss with its ignore_index)
                         r"stride_tricks|sliding_window_view|onnx\w*|InferenceSession)\b")
# and code that names what it runs only at run time, which hides any word above from a word match: a name
# built from strings (getattr, vars, __dict__, attrgetter), source run from a string (exec, eval, compile,
# base64, a file written then imported), torch's operator registry, and IPython's magics and shell lines
REVIEW_DYNAMIC = re.compile(r"(?<![.\w])(exec|eval|compile|getattr|setattr|delattr|globals|locals|vars|dir|"
                            r"breakpoint)\s*\(|\b(__dict__|__builtins__|builtins|__getattribute__|__setattr__|"
                            r"__code__|__globals__|__closure__|__subclasses__|__loader__|__spec__|attrgetter|"
                            r"methodcaller|getmembers|sys\.modules|sys\.path|base64|codecs|binascii|marshal|pickle|"
                            r"dill|zlib|fromhex|runpy|CodeType|FunctionType|get_ipython|torch\.ops|torch\._C|"
                            r"torch\.library|torch\.overrides|write_text|write_bytes|writelines|getattr_static|__getattr__|"
                            r"_getframe|f_globals|f_locals|f_builtins|get_referents|get_referrers|get_objects|"
                            r"fromlist|resolve_name|_pop_mode|_push_mode|DisableTorchFunction\w*|"
                            r"_DisableTorchDispatch|TorchFunctionMode|TorchDispatchMode)\b|(\.write)\s*\(|"
                            # modules that run a string as code or find an object by its dotted name (r5:
                            # after a comma too), the notebook's own file, other threads and processes
                            r"\b(?:import\s+(?:[\w.]+\s*(?:as\s+\w+\s*)?,\s*)*|from\s+)(code|gc|inspect|trace|profile|"
                            r"pdb)\b|\b(codeop|timeit|doctest|pydoc|pkgutil|cProfile|runpy|get_field|__self__|_C|"
                            r"posix_spawnp?|forkpty|pty|create_subprocess_\w+|spawn\w*|fork|joblib|loky|dask|ray|"
                            r"thread_map|process_map|ThreadPool\w*|ProcessPool\w*|Pool|asyncio|to_thread|"
                            r"run_in_executor|multiprocess|executable)\b|(\.(?:getattr|setattr|delattr|exec|vars|"
                            r"globals|locals|__import__))\s*\(|(from\s+(?:sys|os|builtins)\s+import|import\s+(?:sys|os)"
                            r"\s+as)\b|(\.ipynb\b|[\"']/in/?[\"'])|"
                            # attacker r6: the dispatcher switched off, TorchScript, a module printed to a file
                            # and put on the path, pickles run by torch.load, string annotations evaluated, other
                            # ways to a thread or a process
                            r"\b(no_dispatch|_mode_utils|CompilationUnit|torch\.jit|torch\._ops|string\.Formatter|"
                            r"from\s+string\s+import|format_field|addsitedir|zipimport|writestr|get_type_hints|"
                            r"forkserver|multiprocessing_context|QueueListener|Thread\w*|\w+Thread|"
                            # attacker r7: a fresh Python started through IPython's or Jupyter's own runners
                            r"getoutput|getstatusoutput|pexpect|jupyter_client|nbclient|nbconvert|"
                            r"start_new_kernel|KernelManager|IPython\.utils)\b|(\bfile\s*=(?!=)(?!\s*sys\.std(?:err|out)\b)|"
                            # r7's false positives: torch.load's safe weights_only=True, results_file = ...
                            r"\bweights_only\s*=\s*(?!True\b))")
# a magic or shell line, and a shell line's output assigned (r5: ``log = !cmd``); ``!=`` starting a line is Python
MAGIC_LINE = re.compile(r"^[ \t]*(%%?\w+|!(?!=))|=[ \t]*(!)(?!=)", re.MULTILINE)
# and, per assignment, the torch routes around what its text forbids (attackers r2, r3: PyTorch's own Python
# im2col and nll_loss_forward, pixel_unshuffle; soft-label cross-entropy with a reduction is blocked at the
# call now, grading._ReducedLoss, so one_hot, which an honest loss may use, is no longer a word: attacker r4)
REVIEW_TORCH = {"patchify": re.compile(r"\b(unfold|Unfold|conv[123]d|conv_transpose[123]d|Conv[123]d|"
                                       r"ConvTranspose[123]d|_?convolution\w*|pixel_unshuffle|im2col|"
                                       r"sklearn|extract_patches\w*)\b"),  # attacker r9: scikit-learn's patches
                # nll_loss: allowed with "none" (r5); ignore_index as a keyword or a key, not a variable of that
                # name (r9's false positive); r9's losses outside the two blocked ones
                "masked_cross_entropy": re.compile(r"[(,]\s*(ignore_index)\s*=(?!=)|([\"']ignore_index[\"'])|"
                                                   r"\b(kl_div|KLDivLoss|sklearn|log_loss)\b")}


def without_comments(text: str) -> str:
    """``text`` (a code cell) with its comments blanked, as Python's tokenizer finds them (a word in a comment
    never runs: i14's "# I first tried threading" was flagged); the text as it is when it does not tokenize."""
    import io
    import tokenize

    lines = text.splitlines(keepends=True)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                (row, col), (_, end) = tok.start, tok.end
                lines[row - 1] = lines[row - 1][:col] + " " * (end - col) + lines[row - 1][end:]
    except (tokenize.TokenError, SyntaxError, IndentationError, IndexError):
        return text
    return "".join(lines)


def without_docstrings(text: str) -> str:
    """``text`` with every string that stands alone as a statement (a docstring) blanked: it runs nothing (i17:
    a patchify docstring restating "no unfold, no convolution" was flagged and held); the text as it is when it
    does not parse (a cell with magics)."""
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return text
    lines = re.split(r"(?<=\n)", text)
    spans = [(n.lineno, n.col_offset, n.end_lineno, n.end_col_offset) for n in ast.walk(tree)
             if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)]
    for line, col, end_line, end_col in sorted(spans, reverse=True):
        if line == end_line:
            row = lines[line - 1].encode("utf-8")
            lines[line - 1] = (row[:col] + b'""' + row[end_col:]).decode("utf-8", errors="replace")
        else:
            first, last = lines[line - 1].encode("utf-8"), lines[end_line - 1].encode("utf-8")
            lines[line - 1:end_line] = [(first[:col] + b'""' + last[end_col:]).decode("utf-8", errors="replace")]
    return "".join(lines)


def review_counts(path, assignment: str = "", chapter: frozenset | set = frozenset()) -> dict[str, int]:
    """How often the code and raw cells of the notebook at ``path`` use each :data:`REVIEW_CODE` word and
    ``assignment``'s :data:`REVIEW_TORCH` words (nothing if unreadable), apart from the cells that are the
    chapter's own as given (``chapter``: :func:`chapter_sources`). Only the cells the student wrote or changed
    count: a budget of the chapter's own words let a fresh attacker (r5) delete a demo cell and spell its word
    once in the graded cell."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # a hostile file: JSON nested past Python's limit (test_grade)
        return {}
    found: dict[str, int] = {}
    for cell in nb.get("cells", []) if isinstance(nb, dict) and isinstance(nb.get("cells"), list) else []:
        if isinstance(cell, dict) and cell.get("cell_type") in ("code", "raw"):  # raw: read and run (r4)
            if cell.get("cell_type") == "code" and _source(cell).strip() in chapter:
                continue
            src = cell.get("source", "")
            # as Python reads identifiers (NFKC: a fresh attacker's 'ｓｕｂｐｒｏｃｅｓｓ' runs as subprocess)
            text = without_docstrings(without_comments(unicodedata.normalize(
                "NFKC", "".join(map(str, src)) if isinstance(src, list) else str(src))))
            words = [m.group(1) for m in REVIEW_CODE.finditer(text)]
            words += [next(g for g in m.groups() if g) for m in REVIEW_DYNAMIC.finditer(text)]
            words += ["!shell" if (m.group(1) or "!") == "!" else m.group(1) for m in MAGIC_LINE.finditer(text)]
            if assignment in REVIEW_TORCH:
                words += [next(g for g in m.groups() if g) for m in REVIEW_TORCH[assignment].finditer(text)]
            words += ["import *" for _ in re.finditer(r"\bfrom\s+attention_book\S*\s+import\s+\*", text)]
            for word in words:
                found[word] = found.get(word, 0) + 1
    return found


def score_row(row: dict, course, submitted) -> dict:
    """Points from the passed cases' weights, the assignment's points and the late policy, then the
    instructor's override for this student and assignment, if any ([overrides]: at every run and regrade,
    so a grade changed on appeal is never lost). The course's ``in_place`` policy is applied here, from the
    judged cases, so that a resume or regrade applies the policy of the course file it runs with: under
    "case" a case that failed only for a write into its inputs (:data:`IN_PLACE`) passes when its result on
    the grader's own copy was right, except the assignment's own in-place case (:data:`IN_PLACE_CASES`)."""
    spec = course.assignment(row["assignment"])
    row["max_points"] = spec.points
    override = course.overrides.get((unicodedata.normalize("NFC", row.get("key", "")), row["assignment"]))
    row.pop("override", None)
    forgive = course.in_place_policy(row["assignment"]) == "case"
    for c in row.get("cases", []):
        c["weight"] = spec.weight(c)
        if str(c.get("why", "")).startswith(IN_PLACE) and c.get("result_right") is not None:  # judged unscored
            c["passed"] = bool(forgive and c["result_right"] and c.get("label") != IN_PLACE_CASES.get(
                row["assignment"]))
            row["in_place_scored"] = forgive
    if row.get("cases") and row["status"] not in ("not submitted", "misnamed file", "refused", "grader error",
                                                  "flagged"):
        row["passed"] = sum(bool(c["passed"]) for c in row["cases"])
    if row["status"] in ("not submitted", "misnamed file", "refused", "grader error", "flagged"):
        row.update(score=0.0, points=None, late_days=0, penalty=0.0)
    else:
        weights = sum(c["weight"] for c in row.get("cases", []))
        score = sum(c["weight"] for c in row.get("cases", []) if c["passed"]) / weights if weights else 0.0
        days = course.late_days(row["assignment"], submitted, override.due if override else None)
        penalty = 0.0 if override and override.excuse_late else course.penalty(days)
        row.update(score=round(score, 4), late_days=days, penalty=penalty,
                   points=round(spec.points * score * (1 - penalty), 2))
        row.pop("late_basis", None)
        if days:  # the times the penalty rests on, for the student's feedback (a fresh instructor, i11)
            row["late_basis"] = late_basis(course, submitted, override.due if override and override.due else spec.due,
                                           extended=bool(override and override.due),
                                           excused=bool(override and override.excuse_late))
    if override is not None:
        computed = row["points"]
        if override.points is not None:
            row["points"] = override.points
        row["override"] = override.describe(computed)
    return row


def grade(submissions: Path, out_csv: Path, timeout: int, reference: Path, memory_gb: float = 8.0,
          seed: int | None = None, disk_mb: int = 512, course_file: Path | None = None, secret: str | None = None,
          jobs: int = 1, resume: bool = False, regrade: str | None = None, submitted: dict | None = None,
          fallback_user: str | None = None, shared_output: bool = False, lms_notes: bool = True,
          names: dict[str, str] | None = None) -> list[dict]:
    """Grade the class; see :func:`main`. Returns the rows of grades.csv. ``submitted`` gives a
    student folder's submission time (an aware datetime) directly, as Gradescope's metadata does.
    ``lms_notes=False`` (the Gradescope run): no advice about the LMS exports (canvas.csv needs a
    roster), which a Gradescope container has no use for. ``names`` gives a student folder's name
    where the roster gives none (Gradescope's metadata: the student's name beside the user id)."""
    course = load_course(course_file)
    check_weight_keys(course)
    for note in idle_weights(course, seed):  # never silently: an instructor copied a weight that does nothing
        print(f"WARNING: {note}")
    out_dir = out_csv.parent
    PRIVATE[0] = not shared_output
    foreign = foreign_out_folder(out_dir)
    if foreign:  # before anything is written
        raise GradeError(foreign)
    private_dirs(out_dir, out_dir)  # mode 0700 only if the grader makes it
    ignore_in_git(out_dir)  # new, empty, the grader's own or grades/: never a folder of the instructor's files
    lock = open(out_dir / ".grade.lock", "a+")
    if PRIVATE[0]:
        os.chmod(out_dir / ".grade.lock", 0o600)
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise GradeError(f"another grade.py run is writing into {out_dir}: wait for it to finish") from None
    try:
        return _grade_locked(submissions, out_csv, timeout, reference, memory_gb, seed, disk_mb, course, secret,
                             jobs, resume, regrade, submitted, fallback_user, lms_notes, names)
    finally:
        lock.close()


class GradeError(Exception):
    """A problem the instructor must fix before grading: printed as one line."""


_POOL_GRADER: "Grader | None" = None


def _pool_init(args) -> None:
    global _POOL_GRADER
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it ends the pool
    signal.signal(signal.SIGTERM, _worker_term)
    _POOL_GRADER = Grader(*args)
    import atexit
    from multiprocessing.util import Finalize

    atexit.register(_POOL_GRADER.close)
    Finalize(None, _POOL_GRADER.close, exitpriority=10)  # also when the pool's process ends its own way


_BUSY = [False]  # is this pool worker grading a notebook now?


def _worker_term(signum, frame):
    """SIGTERM in a pool worker: while it grades, stop that notebook (its sandbox ended, its folder
    removed, by the finally clauses on the way out); while it waits for work, end quietly (no traceback)."""
    if _BUSY[0]:
        raise KeyboardInterrupt(f"signal {signum}")
    raise SystemExit(0)


def _pool_grade(task):
    _BUSY[0] = True
    try:
        return _grade_one(_POOL_GRADER, *task)
    finally:
        _BUSY[0] = False


def _grade_one(grader: Grader, who: str, key: str, path: Path, reference: str, seeds: dict) -> list[dict]:
    try:
        return grader.grade_notebook(who, path, reference, seeds)
    except Exception as err:  # noqa: BLE001  a failure of the grader costs this notebook only
        return [dict(student=who, notebook=reference, assignment=n, passed=0,
                     total=case_count(n, grader.extras.get(n)), cases=[], seed=seeds[n],
                     status="grader error", reason=f"{type(err).__name__}: {err}", sha256="")
                for n in seeds]


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def _grade_locked(submissions, out_csv, timeout, reference, memory_gb, seed, disk_mb, course, secret, jobs, resume,
                  regrade, submitted=None, fallback_user=None, lms_notes=True, names=None) -> list[dict]:
    out_dir = out_csv.parent
    key, key_from = grading_secret(secret, course, out_dir)
    key_id = secret_id(key)
    references = reference_assignments(reference)
    misnamed: dict[tuple[str, str], str] = {}
    strays: dict[str, list[str]] = {}
    found, ignored = find_submissions(submissions, references, misnamed, strays)
    if course.assignments:  # a course file: only its assignments are graded and exported (issue 37)
        outside = {nb for nb, names in references.items() if not set(names) & set(course.assignments)}
        for sub in [s for s in found if s.reference in outside]:
            found.remove(sub)
            ignored.append((Path(sub.rel), f"not graded: the course file names none of {sub.reference}'s "
                                           f"assignments ({', '.join(references[sub.reference])})"))
        for mis in [m for m in misnamed if m[1] in outside]:
            del misnamed[mis]
        ignored.sort(key=lambda x: str(x[0]))
        references = {nb: [n for n in names if n in course.assignments] for nb, names in references.items()
                      if nb not in outside}
    files_of: dict[tuple[str, str], list[str]] = {}  # every file of a misnamed row, for its feedback
    ignored = sorted(ignored + place_strays(strays, found, misnamed, references, files_of), key=lambda x: str(x[0]))
    roster = course.roster
    lms_ids = {k: LMS_PREFIX.match(rel).group("uid") if "/" not in rel else "" for (k, _), rel in misnamed.items()}
    by_roster = roster_keys(lms_ids | {s.key: s.lms_id for s in found}, roster)
    keys = sorted({s.key for s in found} | (set(roster or {}) - set(by_roster.values())) | {k for k, _ in misnamed})
    keys = sorted(set(keys) | worksheet_participants(course, keys))
    refused = identity_problems(keys)
    names = dict(names or {})  # a Moodle folder's Full name from its worksheet row, where no roster names it
    for sheet in course.worksheets.values():
        col = sheet.column("Full name")
        for k in keys:
            if col >= 0 and (pid := MOODLE_FOLDER.match(k)) and pid.group("pid") in sheet.ids:
                names.setdefault(k, sheet.rows[sheet.ids[pid.group("pid")]][col].strip() or None)
    names = {k: v for k, v in names.items() if v}
    students = {}
    for k in keys:
        info = (roster or {}).get(by_roster.get(k, unicodedata.normalize("NFC", k)))
        students[k] = {"key": k, "student": display_name(k), "name": (info.name if info and info.name else
                                                                    (names or {}).get(k) or display_name(k)),
                       "id": info.id if info else "", "sis_user_id": info.sis_user_id if info else "",
                       "login": info.login if info and info.login else display_name(k),
                       "roster_login": bool(info and info.login),
                       "section": info.section if info else "", "email": info.email if info else ""}
    try:  # an override for a student the class does not have changes nobody: refused, with the near name
        check_override_students(course, set(keys) | set(by_roster.values()))
    except CourseError as err:
        raise GradeError(str(err)) from None
    # an override may name the roster's folder of a student whose files came under another name (Canvas's
    # smithjohn_103): it applies to the rows of that name
    handed_as = {v: k for k, v in by_roster.items()}
    course.overrides = {(handed_as.get(who, who), n): o for (who, n), o in course.overrides.items()}
    # every student who handed something in (graded or misnamed) but whom the roster does not name
    unmatched = sorted(k for k in keys if roster is not None and k not in by_roster
                       and unicodedata.normalize("NFC", k) not in roster and k not in refused)
    extras = {n: a.extra_cases for n, a in course.assignments.items() if a.extra_cases}
    journal = out_dir / "grades.jsonl"
    previous: dict[tuple[str, str], list[dict]] = {}
    if (resume or regrade is not None) and journal.exists():
        latest: dict[tuple[str, str, str], dict] = {}  # a later line (a regrade) replaces an earlier one
        for line in journal.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                r = json.loads(line)
                if r["status"] != "refused":
                    latest[(r["key"], r["notebook"], r["assignment"])] = r
        for (k, nb, _), r in latest.items():
            previous.setdefault((k, nb), []).append(r)
    elif regrade is not None:
        raise GradeError(f"--regrade needs the grades of an earlier run in {out_dir} (grades.jsonl)")
    cases_file = out_dir / CASES_FILE
    recorded = {}
    with contextlib.suppress(OSError, ValueError):  # a folder graded before the record: the counts alone
        recorded = json.loads(cases_file.read_text(encoding="utf-8"))
    graded = {n for names in references.values() for n in names}
    kept = [r for rs in previous.values() for r in rs if r["assignment"] in graded]
    now = case_fingerprints(course, {r["assignment"] for r in kept})
    counts = {n: case_count(n, extras.get(n)) for n in now}
    changed = sorted({n for n in now if isinstance(recorded, dict) and n in recorded and recorded[n] != now[n]}
                     | {r["assignment"] for r in kept if r.get("total") and r["total"] != counts[r["assignment"]]})
    if changed:  # issue 37: a resume kept 11-case grades beside a new 12-case one, "no grade changed"
        raise GradeError(f"the cases of {', '.join(changed)} changed since {out_dir} was graded (its "
                         "extra_cases or the package's cases): run without --resume or --regrade to grade "
                         "everyone again")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(cases_file, json.dumps(case_fingerprints(course, graded), indent=1, sort_keys=True))
    if regrade is not None and regrade not in keys and regrade not in {students[k]["student"] for k in keys}:
        raise GradeError(f"--regrade {regrade!r}: no such student in {submissions}")
    times = load_times(Path(course.times_file), course.timezone) if course.late_source == "csv" and \
        course.times_file else {}
    if course.late_source == "moodle_worksheet":
        print(f"submission times: each worksheet's {course_mod.WORKSHEET_SUBMITTED}, read in {course.timezone} "
              "(the course timezone: Moodle writes them in the timezone of whoever downloaded the worksheet)")
    todo, rows = [], []
    for sub in found:
        who = students[sub.key]["student"]
        if sub.key in refused:
            rows += [dict(student=who, key=sub.key, notebook=sub.reference, assignment=n, passed=0,
                          total=case_count(n, extras.get(n)),
                          cases=[], status="refused", reason=refused[sub.key], sha256="", seed="")
                     for n in references[sub.reference]]
            continue
        old = previous.get((sub.key, sub.reference), [])
        digest = hashlib.sha256(sub.path.read_bytes()).hexdigest() if old else ""
        again = regrade is not None and regrade in (sub.key, who)
        if old and not again and (regrade is not None or (all(r.get("sha256") == digest for r in old)
                                                          and all(r["status"] != "grader error" for r in old))):
            # the file as it is in this run's SUBMISSIONS (the same bytes, or the same student kept by a
            # regrade): a fresh download into another folder still gets every kept row's feedback entry
            # (issue 37, i10: --resume from a new download wrote a feedback zip of 3 files for 9 students)
            rows += [dict(r, path=str(sub.path)) for r in old]
            continue
        try:  # the seed covers the notebook's content: a changed resubmission meets new hidden cases
            content = read_regular(sub.path, NOTEBOOK_LIMIT)
        except (OSError, ValueError):
            content = b""  # graded "unreadable" without running
        # only the course file's assignments run (issue 37: chapter 4's masked_cross_entropy was run, blocked
        # and journalled while the course named only bleu)
        seeds = {n: seed if seed is not None else derive_seed(key, n, sub.key, content)
                 for n in references[sub.reference]}
        todo.append((who, sub.key, sub.path, sub.reference, seeds))
    if regrade is not None:
        before = {(r["key"], r["assignment"]): r for rs in previous.values() for r in rs}
    sandbox_note = _run(todo, rows, reference, timeout, memory_gb, disk_mb, extras, jobs, journal, course, times,
                        key_id, resume or regrade is not None, fallback_user,
                        sorted(course.assignments) if course.assignments else None)
    partial = sandbox_note.pop("interrupted", False)
    rows = [r for r in rows if "key" in r and (not course.assignments or r["assignment"] in course.assignments)]
    # every student × assignment without a row: not submitted
    # in the notebooks' own order (i14: chapter 4's BLEU came before masked cross-entropy, alphabetically)
    order = {n: i for names in references.values() for i, n in enumerate(names)}
    columns = sorted({(ref.split("_")[0], n) for ref, names in references.items() for n in names
                      if any(r["assignment"] == n for r in rows) or n in course.assignments
                      or any(ref == mine for _, mine in misnamed)}, key=lambda c: (c[0], order.get(c[1], 0), c[1]))
    have = {(r["key"], r["assignment"]) for r in rows}
    for k in keys:
        for ch, n in columns:
            if (k, n) not in have and not partial:
                wrong = next((rel for (who, ref), rel in misnamed.items() if who == k and n in references[ref]), "")
                ref = next((ref for (who, ref) in misnamed if who == k and n in references[ref]), "")
                reason, step = "", ""
                if wrong:  # every file standing for it, and the notebooks those same files could stand for
                    files = files_of.get((k, ref), [wrong])
                    reason, step = misnamed_reason(files, [r for (who, r), fs in files_of.items()
                                                           if who == k and fs == files], ref)
                rows.append(dict(student=students[k]["student"], key=k, notebook=ref, assignment=n, passed=0,
                                 total=case_count(n, extras.get(n)), cases=[],
                                 status="misnamed file" if wrong else "not submitted", reason=reason,
                                 sha256="", seed="", handed_in=display_name(handed_name(wrong)) if wrong else "",
                                 handed_path=wrong, **({"step": step} if step else {})))
    several = {(s.key, s.reference): s for s in found if s.others}
    for r in rows:  # from this run's files, also for a row kept from an earlier run (--resume, --regrade)
        if (r["key"], r["notebook"]) in several:
            r.update(several_files(several[(r["key"], r["notebook"])]))

    def submitted_at(r):
        if submitted and r["key"] in submitted:
            return submitted[r["key"]]
        # the key, or the roster's folder for a Canvas file (the guide's example keys ada, the roster's folder,
        # where Canvas's download gives ada_101: a fresh instructor, i12, lost every late penalty to it)
        whos = [unicodedata.normalize("NFC", r["key"])] + ([by_roster[r["key"]]] if r["key"] in by_roster else [])
        when = next((times[(who, what)] for who in whos for what in (r["notebook"], r["assignment"])
                     if (who, what) in times), None)
        if when is None and course.late_source == "mtime" and r.get("path"):
            when = _mtime(r["path"])
        if when is None and course.late_source == "moodle_worksheet" and (pid := MOODLE_FOLDER.match(r["key"])):
            when = course.submitted.get(r["assignment"], {}).get(pid.group("pid"))
        return when

    # a times-file line that matches no student of this run changes nobody: said, with the near name (as the
    # overrides file does; a fresh instructor, i10, wrote 'Ivo Late' for 'Ivo Late_1000009_assignsubmission_file')
    known = {unicodedata.normalize("NFC", k) for k in keys} | set(by_roster.values())
    handed_in = {name for r in rows if r.get("key") and r["status"] != "not submitted"
                 for name in (unicodedata.normalize("NFC", r["key"]), by_roster.get(r["key"]))}
    by_id = {str(info.id).strip(): folder for folder, info in (roster or {}).items() if str(info.id).strip()}
    for who, what in sorted(times):
        if who not in known:
            # a right key (smithjohn_103) whose student has no graded file in this run: no other name to suggest
            # (a fresh instructor, i11: 'did you mean kochbea?', the roster's folder, for a file the run ignored)
            uid = re.fullmatch(r"(.+)_(\d+)", who)
            # "see ignored.csv" only where it has a file of theirs (i15: Oki handed in nothing this week)
            theirs = uid is not None and any(re.match(rf"{re.escape(uid.group(1))}(?:_LATE)?_{uid.group(2)}_",
                                                      Path(str(rel)).name) for rel, _ in ignored)
            student = by_id.get(uid.group(2)) if uid else None
            if student is None:  # the nearest key of the run, for a line in another form (Moodle's Full name)
                close = course_mod.near(who, known, cutoff=0.5)
                student = re.search(r"'(.*)'", close).group(1) if close else None
            # a student who handed in nothing this week: their line is right, or changes nothing; said once,
            # not as a WARNING (a fresh instructor, i16: "fix" advice for a line already in the right form)
            if student is not None and not theirs and student not in handed_in:
                print(f"times file {course.times_file}: {who!r} ({what}) is {student!r}, who handed in nothing "
                      "in this download: the line is not used in this run")
                continue
            hint = (f" (user id {uid.group(2)} is the roster's {by_id[uid.group(2)]!r}, who has no graded notebook "
                    "in this run: see ignored.csv for a file of theirs)" if uid and uid.group(2) in by_id
                    else course_mod.near(who, known, cutoff=0.5))
            warn(f"WARNING: times file {course.times_file}: {who!r} ({what}) matches no student of this run"
                 + hint + ": the student column is the whole folder name (a Moodle folder's Full name_participant "
                 "id_assignsubmission_file), or the file's name key and user id (smithjohn_103)")

    no_time = []
    # the review flag is for what the student's process can reach: under bubblewrap that is the sealed package,
    # where no answer is, so only the in-call torch blocks (TORCH_BLOCKED) can be got past and only their
    # assignments are read (i16: a correct masked_softmax held for printing to stderr); in another sandbox the
    # grading Python's own package is readable, so every assignment is read
    kind = sandbox_note.get("kind", "")
    if kind not in ("bubblewrap", "user", "none", "refused"):  # nothing ran (all resumed): as this machine grades
        kind = Sandbox.detect(int(memory_gb * 2**30), fallback_user).kind
    sealed_only = kind == "bubblewrap"
    chapter_of: dict[str, frozenset] = {}  # each reference notebook's own cells, for the review flag
    for r in rows:
        r.setdefault("seconds", 0.0)
        sheet, pid = course.worksheets.get(r["assignment"]), MOODLE_FOLDER.match(r["key"])
        if sheet is not None and pid and pid.group("pid") not in sheet.ids:
            r["not_in_worksheet"] = sheet.path  # no Moodle participant to take its grade or feedback (i11)
        r["login"], r["section"] = students[r["key"]]["login"], students[r["key"]]["section"]
        r["secret_id"] = key_id if r.get("seed", "") != "" else ""
        r.pop("review", None)
        if r.get("path") and r["status"] not in ("not submitted", "misnamed file", "refused") and (
                r["assignment"] in TORCH_BLOCKED or not sealed_only):
            if r["notebook"] not in chapter_of:
                with contextlib.suppress(OSError, ValueError):
                    chapter_of[r["notebook"]] = frozenset(chapter_sources(json.loads(
                        (reference / r["notebook"]).read_text(encoding="utf-8"))))
            if review := sorted(review_counts(r["path"], r["assignment"], chapter_of.get(r["notebook"], frozenset()))):
                r["review"] = review
                print(f"REVIEW: {r['key']} {r['assignment']}: its code uses {', '.join(review)} (threads, "
                      "processes and the grading module get past the in-call blocks: read it; "
                      "book/instructors.md, 'What a grade is')"
                      + ("; held out of the uploads ([course] hold_flagged)" if held_out(r, course) == "review"
                         else ""))
        when = submitted_at(r)
        score_row(r, course, when)
        # a row with no points to take (kernel died, not implemented, 0 points) is left out: a fresh instructor
        # read "late policy not applied" on rows a late policy could not change
        if when is None and course.assignment(r["assignment"]).due is not None and r["points"]:
            r["no_time"] = True  # never silently on time: said in the summary and the gradebook
            no_time.append(r)
    # Canvas's bulk download puts _LATE_ in a late file's name; without a time for the file that is all the
    # grader knows: said, never silently on time (a fresh instructor, issue 37: "_LATE_ ... is ignored"; i14: a
    # times file without the file's line said only "no submission time")
    canvas_late = []
    if course.late_source != "mtime":
        marked = {(s.key, s.reference) for s in found if CANVAS_LATE.match(Path(s.rel).name)}
        for r in rows:
            if (r["key"], r["notebook"]) in marked and r["status"] not in ("not submitted", "misnamed file") \
                    and course.assignment(r["assignment"]).due is not None \
                    and ((not times and not submitted) or r.get("no_time")):
                r["canvas_late"] = True
                canvas_late.append(r)
    rows.sort(key=lambda r: (r["student"], r["notebook"], order.get(r["assignment"], 0), r["assignment"]))
    uploaded = earlier_grades(out_csv) if not partial else {}  # before this run replaces them
    sheet_warnings = write_outputs(rows, out_csv, [students[k] for k in keys], course, columns, ignored, unmatched,
                                   partial, submissions)
    for rel, why in ignored:
        print(f"ignored: {clean(display_name(str(rel)), 160)} ({why})")
    for r in rows:
        if r.get("note"):
            print(f"several files: {clean(r['student'], 120)} {r['assignment']}: {clean(r['note'], 400)}")
    for k, why in sorted(refused.items()):
        print(f"REFUSED: {clean(display_name(k), 160)}: {why} (not graded; in grades.csv and gradebook.csv as "
              "'refused', left out of canvas.csv and moodle.csv)")
    for k in unmatched:
        print(f"not in the roster: {clean(display_name(k), 160)} (left out of canvas.csv and moodle.csv)")
    if no_time:
        print(f"{'=' * 78}\nWARNING: {len(no_time)} graded notebook(s) have a due date but NO submission time "
              f"(no [late] times, or no line for them); no late policy was applied to them:")
        for r in no_time:
            print(f"  no submission time: {clean(display_name(r['student']), 160)} {r['assignment']}")
        print("=" * 78)
        elsewhere(f"WARNING: {counted(len(no_time), 'graded notebook')} with a due date and no submission time, "
                  "no late policy applied: " + ", ".join(f"{clean(display_name(r['student']), 80)} "
                                                         f"{r['assignment']}" for r in no_time))
    if canvas_late:
        print(f"WARNING: {counted(len(canvas_late), 'graded notebook')} Canvas marked late (_LATE_ in the file "
              "name), with no submission time to count the days: no late policy was applied to them (a times file "
              "gives the days; book/instructors.md, 'The course file', times)"
              + (": their canvas.csv cells are left blank until it does" if course.per_day else "") + ":")
        for r in canvas_late:
            print(f"  Canvas marked late: {clean(display_name(r['student']), 160)} {r['assignment']}")
    if uploaded and regrade is None:
        for line in grade_changes(uploaded, rows):
            print(line, file=sys.stderr if line.startswith("WARNING") else sys.stdout)
    if regrade is not None:
        for r in rows:
            if regrade in (r["key"], r["student"]) and r["status"] != "not submitted":
                old = before.get((r["key"], r["assignment"]))
                if old is not None:
                    old = score_row(json.loads(json.dumps(old)), course, submitted_at(old))
                was = "no earlier grade" if old is None else f"was {old['points']} ({old['status']})"
                same = old is not None and (old["points"], old["status"], old["passed"], old["seed"]) == (
                    r["points"], r["status"], r["passed"], r["seed"])
                print(f"regrade {clean(r['student'], 120)} {r['assignment']}: {r['points']}/{r['max_points']:g} "
                      f"({r['status']}, seed {r['seed']}); {was}" + (": the same" if same else ""))
    for what in sorted(sandbox_note.get("missing", [])):
        print(f"not limited: {what}")
    canvas = "" if partial or course.roster is None else " canvas.csv,"
    moodle_only = moodle_folders_only(course, [students[k] for k in keys])
    moodle = "" if partial or moodle_only else " moodle.csv,"
    if moodle_only and not partial and lms_notes:  # said once, quietly: canvas.csv is Canvas's
        line = ("canvas.csv and moodle.csv not written: these are Moodle folders without a roster (canvas.csv is "
                "for Canvas; moodle.csv would match no Moodle username); ")
        if course.worksheets:
            print(line + "Moodle's grades go back through the grading worksheet")
        else:
            line += ("name each assignment's grading worksheet in the course file (moodle_worksheet; "
                     "book/instructors.md, \"Moodle's grading worksheet\") and run again with --resume")
            warn(f"WARNING: {line}")
    elif course.roster is None and not partial and lms_notes:
        print(NO_ROSTER)
        elsewhere(f"WARNING: {NO_ROSTER}")
    print(("PARTIAL (interrupted): " if partial else "") +
          f"Wrote {counted(len(rows), 'row')} to {out_csv}, gradebook.csv,{canvas}{moodle} feedback/ and "
          f"gradescope/ in {out_dir}, "
          + (f"{counted(len(ignored), 'ignored file')} to ignored.csv" if ignored else "no ignored files") +
          f" (sandbox: {sandbox_note.get('kind')}; "
          f"seeds from the secret {key_id}, {key_from})")
    for line in sheet_warnings:  # repeated last, where the run's summary is read
        print(line)
    if partial:
        raise KeyboardInterrupt
    return rows


CANVAS_LATE = re.compile(r"^[^_/]+_LATE_[0-9]+_[0-9]+_")  # Canvas's bulk-download name of a late file


def earlier_grades(out_csv: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(student, assignment): (points, status)}`` of the grades.csv an earlier run wrote at ``out_csv``
    (what may already be uploaded); {} when there is none or it cannot be read."""
    with contextlib.suppress(OSError, ValueError, KeyError, csv.Error):
        with open(out_csv, newline="", encoding="utf-8") as f:
            # by the student's login where the roster gives one: a Canvas student's key is their file's name key
            # in a week they handed in (kimtwo_105) and the roster's folder in a week they did not (kimtwo), and
            # a lost grade read "no earlier grade" (a fresh instructor, i15)
            return {(r.get("login") or r["student"], r["assignment"]): (r["points"], r["status"], r.get("held") or "")
                    for r in csv.DictReader(f)}
    return {}


def grade_changes(before: dict, rows: list[dict]) -> list[str]:
    """What a run into a folder graded before changed, per student and assignment ("was X, now Y"), then one
    line that counts them and says what to upload again: an extra case, a weight or a resubmission changes
    grades an earlier upload put in the LMS (a fresh instructor, issue 37: every grade silently replaced)."""
    lines = []

    def said(points: str, status: str, held: str) -> str:
        return f"{points or 'no points'} ({status}{', held out of the uploads' if held else ''})"

    for r in rows:
        now = ("" if r.get("points") is None else f"{r['points']:g}", r["status"], r.get("held") or "")
        was = before.get((safe(r["login"]) if r.get("login") else safe(r["student"]), r["assignment"]))
        if was is None:
            was_text = "no earlier grade"
        else:
            was = (*was, "")[:3]  # (points, status, held); a folder graded before "held" was recorded: ''
            with contextlib.suppress(ValueError):
                was = (f"{float(was[0]):g}" if was[0] else "", was[1], was[2])
            if was == now:
                continue
            was_text = "was " + said(*was)
        lines.append(f"changed: {clean(display_name(r['student']), 120)} {r['assignment']}: {was_text}, now "
                     + said(*now))
    # a folder that held another download's grades: every graded row of an assignment is gone (i14: week 4's
    # download graded into week 3's folder turned every week 3 grade into 'not submitted')
    gone = sorted({a for (_, a), (_, status, *_) in before.items() if status != "not submitted"}
                  - {r["assignment"] for r in rows if r["status"] != "not submitted"})
    if lines:
        lines.append(f"{counted(len(lines), 'grade')} changed since the last run into this folder: upload "
                     "canvas.csv or moodle.csv (and the feedback zip) again, or a Moodle worksheet filled from a "
                     "fresh download (book/instructors.md, 'Grading again')")
    else:
        lines.append("no grade changed since the last run into this folder")
    if gone:
        lines.append(f"WARNING: this folder held grades of {', '.join(gone)}, and this run found no submission of "
                     f"{'it' if len(gone) == 1 else 'them'}: grade each download into a folder of its own "
                     "(OUT=grades/<assignment>/grades.csv), or upload these files only for this run's assignments")
    return lines


def _mtime(path):
    import datetime as dt

    with contextlib.suppress(OSError):
        return dt.datetime.fromtimestamp(Path(path).stat().st_mtime, dt.timezone.utc)
    return None


def _run(todo, rows, reference, timeout, memory_gb, disk_mb, extras, jobs, journal, course, times, key_id,
         append, fallback_user=None, only=None) -> dict:
    """Grade ``todo`` (one process, or a pool of ``jobs``), appending each notebook's rows to ``rows`` and to
    the journal as it finishes. Ctrl-C or SIGTERM stops it: what was graded stays."""
    note: dict = {}
    mode = "a" if append else "w"
    old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    journal.parent.mkdir(parents=True, exist_ok=True)
    if not append:
        write_atomic(journal, "".join(json.dumps(r) + "\n" for r in rows))
        mode = "a"
    try:
        with open(journal, mode, encoding="utf-8") as log:
            if PRIVATE[0]:
                os.chmod(journal, 0o600)
            def done(task, found):
                who, k, path = task[0], task[1], task[2]
                for r in found:
                    r.update(key=k, path=str(path))
                    r.setdefault("seconds", 0.0)
                    log.write(json.dumps(r) + "\n")
                    status = r["status"]
                    # the file that was graded, as the student named it (ch05_exercises (1).ipynb), then what as
                    handed = clean(Path(path).name, 120) if path else r["notebook"]
                    graded_as = "" if handed == r["notebook"] else f" (graded as {r['notebook']})"
                    print(f"{clean(who, 120)}/{handed}{graded_as} {r['assignment']}: {r['passed']}/{r['total']} "
                          f"cases ({status})")
                log.flush()
                rows.extend(found)

            if not todo:  # nothing to run (every notebook graded before, or none handed in): no sandbox needed
                note.update(kind="not needed, no notebook to run", missing=set())
            elif jobs <= 1 or len(todo) <= 1:
                grader = Grader(reference, timeout, memory_gb, disk_mb, extras, fallback_user, only)
                note.update(kind=grader.sandbox.kind, missing=grader.missing)
                _announce(grader)
                try:
                    for task in todo:
                        done(task, _grade_one(grader, *task))
                except KeyboardInterrupt:
                    note["interrupted"] = True
                finally:
                    grader.close()
            else:
                import concurrent.futures as cf
                import multiprocessing

                probe = Grader.__new__(Grader)
                probe.sandbox = Sandbox.detect(int(memory_gb * 2**30), fallback_user)
                probe.disk = disk_mb * 2**20
                probe.missing = set(probe.sandbox.missing)
                note.update(kind=probe.sandbox.kind, missing=probe.missing)
                _announce(probe)
                print(f"grading {len(todo)} notebooks, {jobs} at a time")
                pool = cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                              initializer=_pool_init,
                                              initargs=((reference, timeout, memory_gb, disk_mb, extras,
                                                         fallback_user, only),))
                finished = False
                try:
                    futures = {pool.submit(_pool_grade, task): task for task in todo}
                    for future in cf.as_completed(futures):
                        done(futures[future], future.result())
                    finished = True
                except KeyboardInterrupt:
                    note["interrupted"] = True
                finally:
                    if not finished:  # interrupted: stop the notebooks being graded now
                        for proc in list(getattr(pool, "_processes", {}).values()):
                            with contextlib.suppress(Exception):
                                proc.terminate()  # SIGTERM: each worker ends its sandbox and removes its folder
                    pool.shutdown(wait=True, cancel_futures=True)  # done: the idle workers end on their own
    finally:
        signal.signal(signal.SIGTERM, old_term)
    return note


def _announce(grader: Grader) -> None:
    if grader.sandbox.kind == "none":
        bar = "!" * 78
        print(f"{bar}\nWARNING: submissions run WITHOUT a sandbox. Not isolated: " + "; ".join(grader.missing)
              + f".\nOnly grade work you trust this way.\n{bar}", file=sys.stderr)
    elif grader.sandbox.kind == "refused":
        print("!" * 78 + "\nNOT GRADING: " + "; ".join(grader.missing) + ". Every notebook gets the status "
              "'grader error'.\n" + "!" * 78, file=sys.stderr)
    elif grader.sandbox.kind == "user":
        print(f"sandbox: none (bubblewrap cannot start here); each notebook runs as uid {grader.sandbox.uid}, "
              "which cannot write the package, the checkers or the results, nor read this grader's files")
    else:
        user = "uid 65534" if grader.sandbox.unprivileged else "your user" if os.geteuid() else "root"
        print(f"sandbox: bubblewrap as {user} (no network, own process tree, only the system, Python and a "
              f"package copy without the answers, read-only; {grader.disk // 2**20} MB tmpfs)")


NO_ROSTER = ("canvas.csv not written: no roster ([roster] in the course file, --course), so no student has the "
             "Canvas ID or SIS login Canvas matches a row by; add a roster (book/instructors.md, 'the roster') "
             "and run again with --resume")


# Moodle's "Download all submissions" with "Download submissions in folders" (its default since Moodle 3.1):
# a folder a student, ``<Full name>_<participant id>_assignsubmission_file`` (``..._file_`` before Moodle 4.1).
# Its "Upload multiple feedback files in a zip" reads a name back as this: split at "_" into at most five
# parts, the second the participant id (mod/assign/feedback/file/importziplib.php), so a full name with
# "_" in it is not one.
MOODLE_FOLDER = re.compile(r"^[^_/]+_(?P<pid>[0-9]+)_assignsubmission_file_?$")
# The feedback files the LMSs take back, and the file each student's feedback is in (book/instructors.md,
# "Return feedback")
FEEDBACK_ZIPS = ("canvas_feedback.zip", "moodle_feedback.zip")
FEEDBACK_FILE = "feedback.html"


def _submitted_rel(row: dict, submissions: Path) -> Path | None:
    """A row's file as a path under SUBMISSIONS (the graded file, or a misnamed row's file), or None."""
    if row.get("handed_path"):
        return Path(row["handed_path"])
    if not row.get("path"):
        return None
    with contextlib.suppress(ValueError):
        return Path(row["path"]).relative_to(submissions)
    with contextlib.suppress(ValueError, OSError):
        return Path(row["path"]).resolve().relative_to(submissions.resolve())
    return None


def lms_feedback(rows: list[dict], students: list[dict], course, submissions: Path) -> tuple[dict, list]:
    """``({zip name: {name in the zip: HTML}}, [(zip name, name, why refused)])``: each student's feedback
    under the name the LMS they were downloaded from matches on re-upload. Canvas's bulk download
    (``<namekey>_<user id>_<attachment id>_<file>``, ``_LATE_`` included, at the top of SUBMISSIONS): the same
    prefix, then feedback.html, one file per notebook handed in; Canvas's Re-Upload Submissions takes the
    first two numbers between "_" as the user and the attachment (app/models/assignment.rb,
    infer_comment_context_from_filename) and attaches the file to that submission as a comment. Moodle's
    download in folders (:data:`MOODLE_FOLDER`): ``<the student's folder>/feedback.html``, one file per
    student, which Moodle's feedback-zip upload adds as a new feedback file (a name the submission does not
    hold). A student with a refused name gets none; a name :func:`lms_export.entry_problem` refuses, or one
    that two students' files share (ignoring case), is left out and listed."""
    zips: dict[str, dict[str, list[dict]]] = {name: {} for name in FEEDBACK_ZIPS}
    who = {s["key"]: s for s in students}
    refused = []
    for r in rows:
        if r["status"] in ("not submitted", "refused") or r["key"] not in who:
            continue
        if r.get("not_in_worksheet"):  # Moodle would reject or misfile it (a fresh instructor, i11)
            refused.append((FEEDBACK_ZIPS[1], r["key"], f"not in the worksheet {r['not_in_worksheet']}, so no "
                                                        "participant of this Moodle assignment"))
            continue
        rel = _submitted_rel(r, submissions)
        if rel is None:  # never silently without feedback: said, with where the feedback is
            if MOODLE_FOLDER.match(r["key"]) or lms_uid(r["key"]):
                zip_name = FEEDBACK_ZIPS[1] if MOODLE_FOLDER.match(r["key"]) else FEEDBACK_ZIPS[0]
                refused.append((zip_name, r["key"], f"its file {r.get('path') or '?'} is not under {submissions} "
                                                    "(graded from another folder)"))
            continue
        lms = LMS_PREFIX.match(rel.name.removesuffix(".ipynb")) if len(rel.parts) == 1 else None
        if lms and lms_uid(r["key"]) == lms.group("uid"):  # the student's key carries the file's user id
            name = rel.name[: lms.start("rest")] + FEEDBACK_FILE
            if lms.group("login").isdigit():  # Canvas would take it for the user id
                refused.append((FEEDBACK_ZIPS[0], name, "its name key is a number, which Canvas would read as "
                                                        "the user id"))
                continue
            if canvas_ids(name) != (lms.group("uid"), lms.group("sub")) or lms_ids_problem(
                    rel.name.removesuffix(".ipynb")):  # Canvas would attach it to other ids than ours (issue 37)
                refused.append((FEEDBACK_ZIPS[0], name, ("Canvas would read other IDs from this name than the "
                                                         "grader's")))
                continue
            zips[FEEDBACK_ZIPS[0]].setdefault(name, []).append(r)
        elif len(rel.parts) == 2 and MOODLE_FOLDER.match(rel.parts[0]) and r["key"] == rel.parts[0]:
            zips[FEEDBACK_ZIPS[1]].setdefault(f"{rel.parts[0]}/{FEEDBACK_FILE}", []).append(r)
    out: dict[str, dict[str, str]] = {}
    for zip_name, entries in zips.items():
        folded: dict[str, list[str]] = {}
        for name in entries:
            folded.setdefault(unicodedata.normalize("NFC", name).casefold(), []).append(name)
        out[zip_name] = {}
        for name, mine in sorted(entries.items()):
            why = lms_export.entry_problem(name) or (
                "another student's file has the same name, ignoring case" if len(
                    folded[unicodedata.normalize("NFC", name).casefold()]) > 1 else "")
            if why:
                refused.append((zip_name, name, why))
                continue
            student = who[mine[0]["key"]]
            title = f"Feedback: {course.name.strip()}" if course is not None and course.name.strip() else "Feedback"
            out[zip_name][name] = lms_export.feedback_html(feedback_markdown(student, mine, course=course), title)
    return out, refused


def write_outputs(rows, out_csv, students, course, columns, ignored, unmatched, partial, submissions) -> list[str]:
    """grades.csv, gradebook.csv, canvas.csv, moodle.csv, feedback/, gradescope/, ignored.csv, the feedback zips
    and the Moodle worksheets (:func:`moodle_worksheets`), each written atomically. When ``partial`` the gradebook is gradebook.partial.csv and no LMS export is written."""
    out_dir = out_csv.parent
    for r in rows:  # what the uploads leave out, kept with the grade: a release is a change to upload (i17)
        r["held"] = held_out(r, course)
    # handed_in: the name the student gave the file (a misnamed file's row names the expected notebook in
    # `notebook`, and a fresh instructor looked for the file handed in there); the LMS files are unchanged
    rows_out = [dict(r, handed_in=r.get("handed_in") or (display_name(handed_name(r["path"], r.get("key") or ""))
                                                           if r.get("path") else "")) for r in rows]
    write_atomic(out_csv, csv_text(FIELDS, [[safe(r.get(k, "")) if k != "points" or r.get(k) is not None else ""
                                             for k in FIELDS] for r in rows_out]))
    by = {(r["key"], r["assignment"]): r for r in rows}
    header = ["Student", "SIS Login ID", "Section"]
    for ch, a in columns:
        header += [f"{ch} {a} ({course.assignment(a).points:g} pts)", f"{ch} {a} status"]
    book_rows = []
    for s in students:
        # a login only where the roster gives one (i14: a Moodle folder's name stood under "SIS Login ID")
        cells = [safe(s["student"]), safe(s["login"]) if s.get("roster_login") else "", safe(s["section"])]
        for _, a in columns:
            r = by.get((s["key"], a))
            cells += ["" if r is None or r["points"] is None else r["points"],
                      "not graded yet" if r is None else r["status"]
                      + ("; no submission time, late policy not applied" if r.get("no_time") else "")
                      + (f"; {r['late_days']} day(s) late, {100 * r['penalty']:g} % of the points taken"
                         if r.get("late_days") else "")
                      + (f"; {len(r['files'][1])} other file(s) handed in, not graded (see the feedback)"
                         if r.get("files") else "")
                      + ("; Canvas marked it late (_LATE_ in its name; no time in a times file)"
                         if r.get("canvas_late") else "")
                      + (f"; {r['override']}" if r.get("override") else "")
                      + ("; not in the Moodle worksheet: left out of its upload and of moodle_feedback.zip"
                         if r.get("not_in_worksheet") else "")
                      + (f"; REVIEW: its code uses {', '.join(r['review'])}" if r.get("review") else "")
                      + ("; held out of canvas.csv, moodle.csv and the Moodle worksheet until you read it "
                         "([course] hold_flagged; an override's points release it)"
                         if held_out(r, course) == "review" else "")]
        book_rows.append(cells)
    # a file Canvas marked late, with no time to count its days, is held out of canvas.csv where a late policy
    # would take points: uploaded unpenalised it was full credit for late work (a fresh instructor, i15); and,
    # with [course] hold_flagged, a notebook the review flag marked, until the instructor has read it (i15)
    export_rows = [dict(r, **({"status": "held"} if held_out(r, course) else {})) for r in rows]
    stale = ["gradebook.csv", "canvas.csv", "moodle.csv"] if partial else ["gradebook.partial.csv", "PARTIAL.txt"]
    for name in stale:
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()
    write_atomic(out_dir / ("gradebook.partial.csv" if partial else "gradebook.csv"), csv_text(header, book_rows))
    if partial:
        write_atomic(out_dir / "PARTIAL.txt", "Grading was interrupted: gradebook.partial.csv holds the notebooks "
                     f"graded so far ({len({r['key'] for r in rows})} students). Run the same command with --resume "
                     "to grade the rest; canvas.csv and moodle.csv are written only when every notebook is graded.\n")
    else:
        # a refused name is the instructor's to settle (its row would name no one, or two students, in the LMS)
        refused = {r["key"] for r in rows if r["status"] == "refused"}
        lms = [s for s in students if (course.roster is None or s["key"] not in unmatched)
               and s["key"] not in refused]
        if course.roster is None:  # no Canvas ID or SIS login to match a row by: not an upload (NO_ROSTER)
            with contextlib.suppress(FileNotFoundError):
                (out_dir / "canvas.csv").unlink()  # an earlier run's would no longer match these grades
        else:
            write_atomic(out_dir / "canvas.csv", lms_export.canvas_csv(export_rows, lms, course, columns))
        if moodle_folders_only(course, students):  # its Username would be a folder name Moodle never matches
            with contextlib.suppress(FileNotFoundError):
                (out_dir / "moodle.csv").unlink()
        else:
            write_atomic(out_dir / "moodle.csv", lms_export.moodle_csv(export_rows, lms, course, columns))
    feedback, scope = out_dir / "feedback", out_dir / "gradescope"
    for folder in (feedback, scope):
        private_dirs(folder, out_dir)
    written = set()
    for s in students:
        mine = [r for r in rows if r["key"] == s["key"] and r["status"] != "not submitted"]
        if not mine:
            continue
        text = feedback_markdown(s, mine, course=course)
        write_atomic(feedback / f"{slug(s['key'])}.md", text)
        private_dirs(scope / slug(s["key"]), out_dir)
        write_atomic(scope / slug(s["key"]) / "results.json", lms_export.dump_json(
            gradescope_json(s, mine, course.gradescope_scores, course)))
        written.add(slug(s["key"]))
    if not partial:  # an earlier run's page of a student this run has nothing of would be handed back stale (i14)
        for page in feedback.glob("*.md"):
            if page.stem not in written:
                page.unlink()
        for result in scope.glob("*/results.json"):
            if result.parent.name not in written:
                result.unlink()
                with contextlib.suppress(OSError):
                    result.parent.rmdir()
    write_atomic(out_dir / "ignored.csv", csv_text(["path", "why"], [[safe(display_name(str(rel))), safe(why)]
                                                                     for rel, why in ignored]))
    # each student's feedback in a zip their LMS's re-upload matches; never for a partial run (a student not
    # graded yet would get none, and the next run's zip would hold the same comments again)
    zips, refused = lms_feedback(rows, students, course, submissions) if not partial else ({}, [])
    for zip_name in FEEDBACK_ZIPS:
        if zips.get(zip_name):
            write_atomic(out_dir / zip_name, lms_export.feedback_zip(
                {name: escape_undecodable(text).encode("utf-8") for name, text in zips[zip_name].items()}))
            where = "Canvas: Re-Upload Submissions" if zip_name == FEEDBACK_ZIPS[0] else \
                "Moodle: Upload multiple feedback files in a zip"
            print(f"Wrote {zip_name}: {counted(len(zips[zip_name]), 'feedback file')} to upload ({where}; "
                  "book/instructors.md, 'Return feedback')")
        else:  # an earlier run's would no longer match these grades
            with contextlib.suppress(FileNotFoundError):
                (out_dir / zip_name).unlink()
    for zip_name, name, why in dict.fromkeys(refused):
        line = (f"REFUSED in {zip_name}: {clean(display_name(name), 160)}: {why} (left out: return this feedback "
                "by hand, from feedback/)")
        print(line)
        elsewhere(f"WARNING: {line}")
    return moodle_worksheets(export_rows, course, out_dir, partial)


def elsewhere(line: str) -> None:
    """``line`` (a WARNING the run has printed) on stderr too, where stderr is not where stdout goes: a log of
    the output and a terminal both get it, and a terminal or a `2>&1` log gets it once (a fresh instructor,
    i16: every WARNING came twice in a row)."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        if os.path.sameopenfile(sys.stdout.fileno(), sys.stderr.fileno()):
            return
    print(line, file=sys.stderr)


def warn(line: str) -> None:
    """A WARNING: printed, and on stderr where that is somewhere else (:func:`elsewhere`)."""
    print(line)
    elsewhere(line)


def held_out(row: dict, course) -> str:
    """Why ``row``'s grade is left out of canvas.csv, moodle.csv and the Moodle worksheet (blank; the LMS keeps
    what it has), or '': "late", a file Canvas marked late with no time to count its days, where a late policy
    takes points; "review", a notebook the review flag marked, where the course file says ``hold_flagged``,
    until an override gives its points (the instructor has read it)."""
    if row.get("canvas_late") and course.per_day:
        return "late"
    decided = course.overrides.get((unicodedata.normalize("NFC", row.get("key", "")), row["assignment"]))
    if row.get("review") and course.hold_flagged and (decided is None or decided.points is None):
        return "review"
    return ""


def worksheet_participants(course, keys) -> set[str]:
    """Without a roster, where every student is a folder of Moodle's download: a key for each participant of
    the course's grading worksheets who has no folder (``<Full name>_<participant id>_assignsubmission_file``,
    as Moodle names it), so that gradebook.csv is the class list and they read 'not submitted', as a roster
    student without a file does (a fresh instructor, i11). Their worksheet rows stay as downloaded."""
    if course.roster is not None or not keys or not all(MOODLE_FOLDER.match(k) for k in keys):
        return set()
    have = {MOODLE_FOLDER.match(k).group("pid") for k in keys}
    added = set()
    for sheet in course.worksheets.values():
        col = sheet.column("Full name")
        for pid, i in sheet.ids.items():
            if pid not in have:
                name = re.sub(r"[_/\s]+", " ", sheet.rows[i][col] if col >= 0 else "").strip() or "Participant"
                added.add(f"{name}_{pid}_assignsubmission_file")
                have.add(pid)
    return added


def moodle_folders_only(course, students: list[dict]) -> bool:
    """No roster, and every student a folder of Moodle's download (:data:`MOODLE_FOLDER`): canvas.csv and
    moodle.csv could match nobody (no Canvas ID, no Moodle username), so neither is written; Moodle's grades go
    back through the grading worksheet (a fresh instructor, i10: moodle.csv with Username = folder names)."""
    return course.roster is None and bool(students) and all(MOODLE_FOLDER.match(s["key"]) for s in students)


WORKSHEET_OUT = "moodle_worksheet_{}.csv"  # in the output folder: an assignment's Moodle grading worksheet, filled


def moodle_worksheets(rows: list[dict], course, out_dir: Path, partial: bool) -> list[str]:
    """For each assignment whose course-file entry names a ``moodle_worksheet`` (the file Moodle's *Download
    grading worksheet* wrote), ``moodle_worksheet_<assignment>.csv``: that worksheet with the grades filled in
    (:func:`lms_export.moodle_worksheet`), matched by the participant id of each Moodle folder
    (:data:`MOODLE_FOLDER`), never by name. Not written for an interrupted run, nor when no folder's id is in
    the worksheet (the submissions came in another layout, or from another Moodle assignment), nor when its
    Maximum grade is not the course file's points; an earlier run's file that is not written again is removed.
    Every folder not in the worksheet is listed, on stderr too. Returns the WARNINGs, for the run's summary."""
    said: list[str] = []
    sheets = {} if partial else course.worksheets
    for old in out_dir.glob(WORKSHEET_OUT.format("*")):
        if old.name not in {WORKSHEET_OUT.format(name) for name in sheets}:
            old.unlink()
    for name, sheet in sorted(sheets.items()):
        target = out_dir / WORKSHEET_OUT.format(name)
        mine = [r for r in rows if r["assignment"] == name]
        participant = {r["key"]: found.group("pid") for r in mine if (found := MOODLE_FOLDER.match(r["key"]))}
        if not any(pid in sheet.ids for pid in participant.values()):
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            why = (f"it holds none of the participant ids of the {counted(len(participant), 'Moodle folder')}: was "
                   "it downloaded from the Moodle assignment these submissions came from?") if participant else \
                "the submissions did not come as Moodle's download in folders, whose participant ids it matches"
            line = f"WARNING: {target.name} not written for {sheet.path}: {why}"
            warn(line)
            said.append(line)
            continue
        scale = lms_export.worksheet_maximum_problem(sheet, course.assignment(name).points)
        if scale:  # 20 points uploaded as 20 out of 100: never written (a fresh instructor, i10)
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            line = f"WARNING: {target.name} not written for {sheet.path}: {scale}"
            warn(line)
            said.append(line)
            continue
        text, notes, filled = lms_export.moodle_worksheet(sheet, mine, participant)
        write_atomic(target, text)
        missing = [n for n in notes if n.startswith("not in the worksheet")]
        for note in notes:
            print(f"{target.name}: {clean(note, 400)}")
        left = len(sheet.ids) - filled
        print(f"Wrote {target.name}: {counted(filled, 'grade')} filled, {counted(left, 'participant')} left as "
              "downloaded; upload it to that Moodle assignment (Upload grading worksheet; book/instructors.md, "
              "\"Moodle's grading worksheet\")" + (f"; {counted(len(missing), 'folder')} not in the worksheet, "
                                                  "listed above" if missing else ""))
        if missing:
            elsewhere(f"WARNING: {counted(len(missing), 'Moodle folder')} not in {sheet.path} (not graded in "
                      f"{target.name}): " + "; ".join(clean(n, 200) for n in missing))
    return said


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=Path)
    parser.add_argument("--out", default="grades/grades.csv", help="the CSV file of the grades (default "
                        "grades/grades.csv); the other outputs are written beside it, in a folder that is new, "
                        "empty or the grader's own")
    parser.add_argument("--timeout", type=int, default=TIMEOUT,
                        help=f"seconds per notebook (default {TIMEOUT}: a class's exercises notebook runs in well "
                             "under a minute; raise it for slow chapters or machines)")
    parser.add_argument("--memory-gb", type=float, default=8.0,
                        help="memory of the whole sandbox (cgroup) and address space of each process")
    parser.add_argument("--disk-mb", type=int, default=512, help="size of each of the sandbox's two tmpfs")
    parser.add_argument("--reference", type=Path, default=ROOT / "notebooks")
    parser.add_argument("--course", type=Path, default=None, help="the course file (TOML; see course.example.toml)")
    parser.add_argument("--secret", default=None, help="the grading secret (default: $GRADE_SECRET, the course "
                        "file's secret_file, or OUT's .grade-secret, made on the first run)")
    parser.add_argument("--seed", type=int, default=None,
                        help="one hidden seed for every student (tests and demonstrations; default: a seed per "
                             "student and assignment derived from the secret)")
    parser.add_argument("--shared-output", action="store_true", help="new output files follow the umask "
                        "(default: the output folder 0700 and its files 0600, readable only by you)")
    parser.add_argument("--user", default=None, metavar="NAME", help="where bubblewrap cannot start, run each "
                        "notebook as this unprivileged user (grading as root), and never without isolation: "
                        "if neither is possible, nothing is run")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded at once, each in its own sandbox")
    parser.add_argument("--resume", action="store_true", help="keep what an earlier (interrupted) run into the "
                        "same OUT graded, and grade the rest")
    parser.add_argument("--regrade", default=None, metavar="STUDENT",
                        help="grade this student's notebooks again (with the same seeds) and keep everyone else's")
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
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.out.endswith(("/", os.sep)) or Path(args.out).is_dir():  # an instructor expected a folder
        parser.error(f"--out {args.out} is a folder: name the CSV file to write, such as "
                     f"{Path(args.out) / 'grades.csv'} (the other outputs go beside it)")
    args.out = Path(args.out)
    try:
        grade(args.submissions, args.out, args.timeout, args.reference, args.memory_gb, args.seed, args.disk_mb,
              args.course, args.secret, args.jobs, args.resume, args.regrade, fallback_user=args.user,
              shared_output=args.shared_output)
    except KeyboardInterrupt:
        print(f"grade.py: interrupted; what was graded is kept (gradebook.partial.csv in {args.out.parent}); "
              "run again with --resume to finish", file=sys.stderr)
        sys.exit(130)
    except (GradeError, CourseError) as err:
        print(f"grade.py: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
            print(f"grade.py: cannot write {err.filename or args.out.parent}: {err.strerror} "
                  f"({'disk full' if err.errno in (errno.ENOSPC, errno.EDQUOT) else 'not writable'}); the files "
                  "already there are unchanged", file=sys.stderr)
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()
