"""``make test-unit`` and ``make test-site`` run ``--dist loadgroup``: tests of one ``xdist_group`` share a worker.

tests/xdist_group_ids.py restores the grouping under pytest 9.2 (see its docstring); these tests
run a small pytest session on two workers with that plugin, and check that the Makefile loads it
wherever it asks for ``loadgroup``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

GROUPED = textwrap.dedent('''
    import os, time
    import pytest

    LOG = os.environ["GROUP_LOG"]

    def note(what):
        with open(LOG, "a") as f:
            f.write(f"{what} {os.environ.get('PYTEST_XDIST_WORKER')}\\n")

    @pytest.fixture(scope="session")
    def costly():
        note("setup")
        time.sleep(0.5)  # long enough that the other worker starts on other tests meanwhile

    @pytest.mark.xdist_group("one")
    @pytest.mark.parametrize("i", range(4))
    def test_grouped(costly, i):
        note("grouped")

    @pytest.mark.parametrize("i", range(12))
    def test_free(i):
        time.sleep(0.05)
''')


@pytest.mark.slow
def test_tests_of_one_group_share_one_worker_and_one_session_fixture(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    log = tmp_path / "log.txt"
    env = dict(os.environ, GROUP_LOG=str(log), OMP_NUM_THREADS="1")
    # as the Makefile runs it: from the repository's root, the plugin named as tests.xdist_group_ids
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.xdist_group_ids",
                          "-n", "2", "--dist", "loadgroup", "--rootdir", str(tmp_path), str(tmp_path / "test_grouped.py")],
                         check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    lines = log.read_text().split()
    events = list(zip(lines[::2], lines[1::2]))
    setups = [worker for what, worker in events if what == "setup"]
    grouped = {worker for what, worker in events if what == "grouped"}
    assert len(setups) == 1, f"the session fixture of the group was built {len(setups)} times: {events}"
    assert len(grouped) == 1 and grouped == set(setups), events
    assert sum(what == "grouped" for what, _ in events) == 4


def test_every_loadgroup_run_of_the_makefile_loads_the_plugin():
    makefile = (ROOT / "Makefile").read_text()
    runs = [line for line in makefile.replace("\\\n", " ").splitlines() if "--dist loadgroup" in line]
    assert runs, "the Makefile runs no test with --dist loadgroup"
    for line in runs:
        assert re.search(r"-p tests\.xdist_group_ids\b", line), line
