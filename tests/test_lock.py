"""The locked environment (requirements.lock) agrees with pyproject.toml, without the network.

`make lock` writes the lock from pyproject.toml's extras; `make venv` installs it with
--no-deps --require-hashes. So every dependency pyproject.toml names must be pinned in the lock,
inside its lower bound, and every pin must carry a hash (pip refuses the whole file otherwise,
but only at install time: this test says so at once, naming the package).
"""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
# The extras `make venv` and `make lock` use (Makefile: --extra dev --extra lab --extra parity).
EXTRAS = ("dev", "lab", "parity")


def parse_lock(text: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) for each `name==version \\` entry and its `--hash=` lines."""
    pins: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in text.splitlines():
        entry = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if entry:
            current = canonicalize_name(entry[1])
            assert current not in pins, f"{entry[1]} is pinned twice in the lock"
            pins[current] = (entry[2], [])
            continue
        digest = re.match(r"^\s+--hash=sha256:([0-9a-f]{64})\b", line)
        if digest and current:
            pins[current][1].append(digest[1])
        elif line.strip() and not line.lstrip().startswith("#"):
            raise AssertionError(f"unexpected line in the lock: {line!r}")
    return pins


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = list(project["dependencies"])
    for extra in EXTRAS:
        names += project["optional-dependencies"][extra]
    return [Requirement(r) for r in names]


def test_parse_lock_reads_pins_and_hashes_and_rejects_a_bare_requirement():
    good = "a==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n    # via b\nc-d==2 \\\n    --hash=sha256:" + "1" * 64 + "\n"
    assert parse_lock(good) == {"a": ("1.0", ["0" * 64]), "c-d": ("2", ["1" * 64])}
    try:
        parse_lock(good + "numpy>=1.24\n")
    except AssertionError as err:
        assert "numpy>=1.24" in str(err)
    else:
        raise AssertionError("an unpinned line went unnoticed")


def test_every_pin_in_the_lock_carries_a_hash():
    pins = parse_lock(LOCK.read_text(encoding="utf-8"))
    assert len(pins) > 50, "the lock should pin the whole environment, dependencies of dependencies too"
    missing = sorted(name for name, (_, hashes) in pins.items() if not hashes)
    assert not missing, f"pinned without a hash (pip --require-hashes refuses the lock): {missing}"


def test_every_dependency_of_pyproject_is_locked_inside_its_bounds():
    pins = parse_lock(LOCK.read_text(encoding="utf-8"))
    problems = []
    for req in project_requirements():
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.11"}):
            continue
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"{req} is not in the lock: run `make lock`")
            continue
        version = Version(pins[name][0])
        # The lock's torch is the CPU build (2.13.0+cpu): compare without the local label.
        if not req.specifier.contains(Version(version.public), prereleases=True):
            problems.append(f"{req}: the lock pins {version}: run `make lock`")
    assert not problems, "\n".join(problems)


def test_the_lock_pins_the_cpu_build_of_torch_that_the_makefile_installs_first():
    pins = parse_lock(LOCK.read_text(encoding="utf-8"))
    assert pins["torch"][0].endswith("+cpu"), "the lock must pin PyTorch's CPU build, never a CUDA one"
    assert not [name for name in pins if name.startswith("nvidia-")], "CUDA libraries in the lock"
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "--require-hashes -r $(LOCK)" in makefile and "--no-deps" in makefile
    assert "$(LOCK)" in makefile.split("STAMP :=", 1)[1].splitlines()[0], (
        "the venv stamp must change with the lock, or `make venv` keeps an environment the lock no longer describes")
