"""Keep notebook execution from stalling on a missed wake-up of a kernel socket.

Executing a notebook (nbmake, the book build, ``make claims``) waits for the
kernel's replies with ``jupyter_client``'s ``AsyncZMQSocketChannel.get_msg``,
which makes a single ``poll`` for the whole timeout. Here, with widget cells
(many comm messages), that poll sometimes misses the reply's wake-up: the kernel
is idle, the reply sits in the socket, and the client waits until its timeout
ends (300 s under nbmake; forever when there is none) — a slow or a stuck test
(nbclient#312 and nbconvert#2029 describe the same stall). Polling in short
slices, and checking the socket itself after each, finds such a reply within
half a second; behaviour is otherwise unchanged (same messages, same timeout).

Loaded by the site build (``book_site.py``), by nbmake (``pytest -p kernel_poll``
in the Makefile), by ``scripts/claims.py`` and by the grader's worker (``scripts/grade.py``).

As a pytest plugin it does two more things for the Makefile's notebook runs:

* **Kernels on IPC transport** (Unix sockets named after each kernel's connection file)
  instead of TCP ports. A kernel manager picks free TCP ports by binding to port 0 and
  letting go; two processes starting kernels at the same moment can both pick the same
  port (jupyter_client#487), which once left a run waiting forever. Sockets named after a
  unique file cannot collide, so ``pytest -n 2`` runs two notebooks at a time safely.
* **Notebook times.** ``--notebook-times FILE`` writes the wall time of every notebook
  (JSON, read by ``scripts/timings.py``), a table of them ends the run, and a later run
  that finds the file starts the longest notebooks first, so two workers finish together.
  ``--notebook-times-default FILE`` gives that order where the times file does not exist
  yet (a fresh clone): times committed from an earlier run, read and never written.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from datetime import date
from pathlib import Path
from queue import Empty
from time import monotonic

import zmq
from jupyter_client.channels import AsyncZMQSocketChannel

SLICE_SECONDS = 0.5


async def _sliced_get_msg(self, timeout: float | None = None):
    """``get_msg`` that polls in slices of at most SLICE_SECONDS until ``timeout``."""
    assert self.socket is not None
    deadline = None if timeout is None else monotonic() + timeout
    while True:
        wait = SLICE_SECONDS if deadline is None else max(0.0, min(SLICE_SECONDS, deadline - monotonic()))
        if await self.socket.poll(int(wait * 1000)) or self.socket.get(zmq.EVENTS) & zmq.POLLIN:
            return await self._recv()
        if deadline is not None and monotonic() >= deadline:
            raise Empty


_sliced_get_msg.book_sliced = True


def install() -> None:
    """Patch ``AsyncZMQSocketChannel.get_msg`` (once)."""
    if not getattr(AsyncZMQSocketChannel.get_msg, "book_sliced", False):
        AsyncZMQSocketChannel.get_msg = _sliced_get_msg


install()


# A Unix socket's path holds at most 107 bytes (Linux); a kernel's sockets are named
# "<runtime dir>/kernel-<12 hex digits>-ipc-<port>", at most 31 bytes after the directory.
MAX_SOCKET_PATH = 107
SOCKET_SUFFIX = len("/kernel-") + 12 + len("-ipc-") + 6


def _socket_dir() -> str:
    """Where kernels' sockets go: Jupyter's runtime directory, or a short temporary one if that is too long."""
    from jupyter_core.paths import jupyter_runtime_dir

    runtime = jupyter_runtime_dir()
    if len(os.fsencode(runtime)) + SOCKET_SUFFIX > MAX_SOCKET_PATH:
        runtime = tempfile.mkdtemp(prefix="jrt")
    os.makedirs(runtime, exist_ok=True)
    return runtime


def _on_ipc(km, sockets: str):
    """Put a kernel manager that has no kernel yet on IPC transport, with socket names of its own."""
    if not km.has_kernel and km.transport == "tcp":
        km.transport = "ipc"
        # Absolute, and unique per kernel: jupyter_client's default ("kernel-ipc" in the current
        # directory) is the same for every kernel and relative to a directory the kernel may not share.
        km.ip = os.path.join(sockets, f"kernel-{uuid.uuid4().hex[:12]}-ipc")
    return km


def use_ipc_transport() -> str:
    """Start every kernel that nbclient starts in this process on IPC transport; returns the sockets' directory."""
    from nbclient import NotebookClient

    sockets = _socket_dir()
    create = getattr(NotebookClient.create_kernel_manager, "book_original", NotebookClient.create_kernel_manager)

    def create_kernel_manager(self):
        return _on_ipc(create(self), sockets)

    create_kernel_manager.book_original = create
    NotebookClient.create_kernel_manager = create_kernel_manager
    return sockets


# ---- pytest plugin (pytest -p kernel_poll) -------------------------------------------------

_CONFIG: dict = {}  # the session's pytest config, for the report hook (which receives no config)


def pytest_addoption(parser) -> None:
    parser.addoption("--notebook-times", default=None, metavar="FILE",
                     help="write each notebook's wall time (seconds) to FILE as JSON; a later run reading "
                          "FILE starts the longest notebooks first")
    parser.addoption("--notebook-times-default", default=None, metavar="FILE",
                     help="times (same JSON) that order the notebooks, longest first, when the "
                          "--notebook-times file holds none; never written")
    parser.addoption("--skip-executed", action="store_true", default=False,
                     help="leave out notebooks that scripts/stage.py marked as executed (same source and package)")


def pytest_configure(config) -> None:
    install()
    use_ipc_transport()
    config._notebook_times = {}
    config._started = monotonic()
    _CONFIG["config"] = config


def _times_path(config) -> Path | None:
    path = config.getoption("--notebook-times", default=None)
    return Path(path) if path else None


def read_times(path: Path | None) -> dict[str, float]:
    """Notebook name -> seconds from a ``--notebook-times`` file; empty if there is none."""
    if path is None or not path.is_file():
        return {}
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text(encoding="utf-8"))["notebooks"].items()}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return {}


def _notebook(nodeid: str) -> str:
    return Path(nodeid.split("::")[0]).name


def marked_executed(path: Path) -> bool:
    """True if scripts/stage.py marked this staged notebook as executed from its current source."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    return nb.get("metadata", {}).get("mystnb", {}).get("execution_mode") == "off"


def pytest_collection_modifyitems(session, config, items) -> None:
    if config.getoption("--skip-executed", default=False):
        done = [item for item in items if marked_executed(Path(str(item.path)))]
        if done:
            config.hook.pytest_deselected(items=done)
            items[:] = [item for item in items if item not in done]
    before = read_times(_times_path(config))
    if not before:
        default = config.getoption("--notebook-times-default", default=None)
        before = read_times(Path(default) if default else None)
    if before:  # longest first (a stable sort keeps the others in their order)
        items.sort(key=lambda item: -before.get(_notebook(item.nodeid), 0.0))


def pytest_runtest_logreport(report) -> None:
    config = _CONFIG.get("config")
    if config is not None and report.when == "call":
        config._notebook_times[_notebook(report.nodeid)] = round(report.duration, 1)


def pytest_sessionfinish(session, exitstatus) -> None:
    # Every notebook already executed is success, not pytest's "no tests ran" (5).
    if exitstatus == 5 and session.config.getoption("--skip-executed", default=False):
        session.exitstatus = 0


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    times = getattr(config, "_notebook_times", {})
    if not times or hasattr(config, "workerinput"):
        return
    tr = terminalreporter
    tr.section("notebook times (wall clock, seconds)")
    width = max(len(name) for name in times)
    for name in sorted(times):
        tr.write_line(f"{name:<{width}}  {times[name]:7.1f}")
    tr.write_line(f"{'sum':<{width}}  {sum(times.values()):7.1f}")
    path = _times_path(config)
    if path is not None:
        kept = read_times(path)
        kept.update(times)  # a partial run keeps the other notebooks' earlier times
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"notebooks": dict(sorted(kept.items())),
                                    "workers": getattr(config.option, "numprocesses", None) or 1,
                                    "wall_s": round(monotonic() - config._started, 1),
                                    "notebooks_run": len(times),
                                    "date": date.today().isoformat(),
                                    "omp_threads": os.environ.get("OMP_NUM_THREADS", "")},
                                   indent=1) + "\n", encoding="utf-8")
        tr.write_line(f"notebook times written to {path}")


# ---- Sphinx extension ------------------------------------------------------------------------

def setup(app):
    install()
    use_ipc_transport()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
