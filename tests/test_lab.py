"""`make lab` from the repository: JupyterLab starts, serves its API and offers the book's kernel.

The README and the setup page tell readers to run `make lab`. This test runs that very target
(headless, on a free port, with a token of its own), waits for `/api/status`, checks that the
kernel `make venv` registered is offered and can import the package, then stops the server.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
    pytest.mark.skipif(Path(sys.prefix).resolve() != VENV.resolve(),
                       reason="runs `make lab`, which uses the repository's .venv; run the tests with .venv/bin/python"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, token: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def test_make_lab_starts_jupyterlab_with_the_book_kernel(tmp_path):
    port, token = free_port(), secrets.token_hex(16)
    args = (f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.port_retries=0 "
            f"--IdentityProvider.token={token}")
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(["make", "-s", "lab", f"LAB_ARGS={args}"], cwd=ROOT, env=env,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        status = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                status = get(f"{base}/api/status", token)
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.5)
        log.flush()
        assert status is not None, f"JupyterLab did not answer on {base}:\n{(tmp_path / 'lab.log').read_text()[-3000:]}"
        assert "started" in status

        lab = urllib.request.Request(f"{base}/lab", headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(lab, timeout=10) as response:
            assert response.status == 200
            assert "JupyterLab" in response.read().decode("utf-8", "replace")

        specs = get(f"{base}/api/kernelspecs", token)["kernelspecs"]
        book = [s for s in specs.values() if s["spec"]["display_name"] == "Python 3 (attention_book)"]
        assert book, f"the book's kernel is not offered: {sorted(specs)}"
        python = book[0]["spec"]["argv"][0]
        done = subprocess.run([python, "-c", "import attention_book, torch; print(attention_book.__version__)"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
