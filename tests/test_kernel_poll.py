"""book/_ext/kernel_poll.py: sliced polling returns a waiting message and keeps the timeout."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from queue import Empty

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))
import kernel_poll  # noqa: E402
from jupyter_client.channels import AsyncZMQSocketChannel  # noqa: E402


class FakeSocket:
    """A socket whose poll never wakes up (the missed wake-up), but whose events say a message waits."""

    def __init__(self, ready_after: float | None):
        self.ready_at = None if ready_after is None else time.monotonic() + ready_after

    def _ready(self) -> bool:
        return self.ready_at is not None and time.monotonic() >= self.ready_at

    async def poll(self, timeout_ms):
        await asyncio.sleep(timeout_ms / 1000)
        return 0  # never reports the message: only the check of the socket's events finds it

    def get(self, option):
        import zmq

        return zmq.POLLIN if self._ready() else 0


class FakeChannel:
    get_msg = kernel_poll._sliced_get_msg

    def __init__(self, socket):
        self.socket = socket

    async def _recv(self):
        return {"msg": "reply"}


def test_installed_on_the_client_channel():
    assert getattr(AsyncZMQSocketChannel.get_msg, "book_sliced", False)


def test_a_waiting_message_is_found_within_a_slice_even_when_poll_misses_it():
    start = time.monotonic()
    msg = asyncio.run(FakeChannel(FakeSocket(ready_after=0.2)).get_msg(timeout=30))
    assert msg == {"msg": "reply"}
    assert time.monotonic() - start < 2 * kernel_poll.SLICE_SECONDS + 0.5


def test_the_timeout_still_raises_empty():
    start = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(FakeChannel(FakeSocket(ready_after=None)).get_msg(timeout=1.2))
    assert 1.1 < time.monotonic() - start < 2.5


# ---- kernels on IPC transport, notebook times, skipping executed notebooks ----------------------

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402

import nbformat  # noqa: E402
from nbclient import NotebookClient  # noqa: E402

EXT = Path(__file__).resolve().parent.parent / "book" / "_ext"


def tiny_notebook(path: Path, code: str, executed: bool = False) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if executed:  # as scripts/stage.py marks a notebook it keeps
        nb.metadata["mystnb"] = {"execution_mode": "off"}
    nbformat.write(nb, path)
    return path


def test_kernel_managers_get_ipc_sockets_of_their_own():
    kernel_poll.use_ipc_transport()
    nb = nbformat.v4.new_notebook()
    first = NotebookClient(nb, kernel_name="python3").create_kernel_manager()
    second = NotebookClient(nb, kernel_name="python3").create_kernel_manager()
    assert first.transport == second.transport == "ipc"
    assert os.path.isabs(first.ip) and first.ip != second.ip
    assert len(os.fsencode(first.ip + "-65535")) <= kernel_poll.MAX_SOCKET_PATH


def test_installing_twice_wraps_once():
    kernel_poll.use_ipc_transport()
    kernel_poll.use_ipc_transport()
    km = NotebookClient(nbformat.v4.new_notebook(), kernel_name="python3").create_kernel_manager()
    assert km.transport == "ipc" and km.ip.count("kernel-") == 1


def test_a_runtime_directory_too_long_for_socket_names_is_replaced(monkeypatch, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(deep))
    sockets = kernel_poll._socket_dir()
    assert sockets != str(deep) and len(os.fsencode(sockets)) + kernel_poll.SOCKET_SUFFIX <= kernel_poll.MAX_SOCKET_PATH


def run_pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(EXT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "kernel_poll", "--nbmake", "-p", "no:randomly",
                           "-p", "no:cacheprovider", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240)


def test_two_notebooks_at_a_time_write_their_times(tmp_path):
    # Two workers start their kernels together; on TCP they could pick the same port.
    for name in ("a", "b", "c"):
        tiny_notebook(tmp_path / f"nb_{name}.ipynb", f"import time; time.sleep(0.5); print({name!r})")
    times = tmp_path / "times.json"
    done = run_pytest("-n", "2", "--notebook-times", str(times), ".", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "notebook times (wall clock, seconds)" in done.stdout
    data = json.loads(times.read_text())
    assert set(data["notebooks"]) == {"nb_a.ipynb", "nb_b.ipynb", "nb_c.ipynb"}
    assert all(0.5 <= t < 120 for t in data["notebooks"].values())
    assert data["workers"] == 2 and data["wall_s"] > 0 and data["notebooks_run"] == 3 and data["omp_threads"] == "1"


def test_skip_executed_and_longest_first(tmp_path):
    tiny_notebook(tmp_path / "nb_done.ipynb", "print(1)", executed=True)
    tiny_notebook(tmp_path / "nb_short.ipynb", "print(2)")
    tiny_notebook(tmp_path / "nb_long.ipynb", "print(3)")
    times = tmp_path / "times.json"
    times.write_text(json.dumps({"notebooks": {"nb_short.ipynb": 1.0, "nb_long.ipynb": 9.0}}))
    done = run_pytest("--collect-only", "-q", "--skip-executed", "--notebook-times", str(times), ".", cwd=tmp_path)
    listed = [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]
    assert listed == ["nb_long.ipynb", "nb_short.ipynb"], done.stdout
    assert kernel_poll.marked_executed(tmp_path / "nb_done.ipynb")
    assert not kernel_poll.marked_executed(tmp_path / "nb_short.ipynb")
    # every notebook already executed: success, not pytest's "no tests ran"
    (tmp_path / "nb_short.ipynb").unlink()
    (tmp_path / "nb_long.ipynb").unlink()
    done = run_pytest("--skip-executed", ".", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:]


def test_a_fresh_clone_orders_by_the_committed_times(tmp_path):
    # no times file yet: the default orders the notebooks; once the file exists, it wins
    tiny_notebook(tmp_path / "nb_a.ipynb", "print(1)")
    tiny_notebook(tmp_path / "nb_b.ipynb", "print(2)")
    default = tmp_path / "default.json"
    default.write_text(json.dumps({"notebooks": {"nb_a.ipynb": 1.0, "nb_b.ipynb": 9.0}}))
    times = tmp_path / "times.json"

    def order():
        done = run_pytest("--collect-only", "-q", "--notebook-times", str(times),
                          "--notebook-times-default", str(default), ".", cwd=tmp_path)
        return [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]

    assert order() == ["nb_b.ipynb", "nb_a.ipynb"]
    assert not times.exists()  # the default is read, never written
    times.write_text(json.dumps({"notebooks": {"nb_a.ipynb": 5.0, "nb_b.ipynb": 2.0}}))
    assert order() == ["nb_a.ipynb", "nb_b.ipynb"]


def test_the_committed_times_name_every_notebook():
    root = Path(__file__).resolve().parent.parent
    names = {p.name for p in (root / "notebooks").glob("ch*.ipynb")}
    for kind in ("ci", "smoke"):
        listed = set(kernel_poll.read_times(root / "book" / "_ext" / f"notebook_times_{kind}.json"))
        assert listed <= names and len(listed) >= len(names) - 2, kind


def test_read_times_ignores_a_broken_file(tmp_path):
    broken = tmp_path / "times.json"
    broken.write_text("{not json")
    assert kernel_poll.read_times(broken) == {}
    assert kernel_poll.read_times(tmp_path / "missing.json") == {}
