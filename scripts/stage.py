"""Copy the book's sources into a staging directory, where notebooks get executed.

Usage: python scripts/stage.py DEST

The edition (``public`` by default, ``instructor`` with EDITION=instructor in
the environment; see scripts/editions.py) decides what readers see of the
exercise pages: the public site hides instructor answers and folds solutions.

Sources are never executed in place, so committed notebooks stay output-free.
The site's JavaScript (widget manager, require.js, MathJax) is vendored into
DEST/_vendor, which `_config.yml` lists in `html_static_path` (scripts/vendor_js.py).
A staged notebook that already carries outputs from the *same* source and the
same package (SHA-1s of the notebook and of ``src/`` + ``pyproject.toml``,
recorded in its metadata) is kept, so a notebook executed by the test run
is not executed again by the site build.

The key also holds the settings that change what a notebook computes
(``run_settings``): the experiment size and the smoke run's step cap. A notebook
executed at the ``ci`` size is never published as a full-size one, and `make
publish` (its own staging folder, kept between runs as an execution cache)
re-executes only the notebooks whose source, package or settings changed.
The device is not part of the key: a chapter executed on a GPU is kept when the
site is rebuilt on a CPU, which is the point of the cache.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from editions import load_solutions, make_edition  # noqa: E402
import vendor_js  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FILES = ["_config.yml", "_toc.yml"]
DIRS = ["book"]


def source_hash(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def package_hash() -> str:
    """SHA-1 over the package's source files and pyproject.toml: outputs computed by
    another version of the package are stale, whatever the notebook says."""
    h = hashlib.sha1()
    files = [ROOT / "pyproject.toml"] + sorted(
        p for p in (ROOT / "src").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for p in files:
        h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


# Environment variables that change a notebook's results, hence its cache key.
RUN_SETTINGS = ("ATTENTION_BOOK_SIZE", "ATTENTION_BOOK_MAX_STEPS")


def run_settings(environ=None) -> str:
    """The key's part for the run's settings: empty at the default (``ci``, uncapped), so the
    keys of notebooks staged before this part existed stay valid; else e.g. ``size=full``."""
    environ = os.environ if environ is None else environ
    size = environ.get("ATTENTION_BOOK_SIZE", "") or "ci"
    parts = [] if size == "ci" else [f"size={size}"]
    if environ.get("ATTENTION_BOOK_MAX_STEPS"):
        parts.append(f"max_steps={environ['ATTENTION_BOOK_MAX_STEPS']}")
    return ",".join(parts)


def has_outputs(nb: dict) -> bool:
    return any(c.get("outputs") for c in nb.get("cells", []) if c.get("cell_type") == "code")


def ran_cleanly(nb: dict) -> bool:
    """Executed (some outputs) and no cell stopped with an error."""
    outputs = [o for c in nb.get("cells", []) if c.get("cell_type") == "code" for o in c.get("outputs", [])]
    return bool(outputs) and not any(o.get("output_type") == "error" for o in outputs)


def mark_executed(nb: dict) -> bool:
    """Tell myst-nb not to execute this notebook again; True if the metadata changed.

    myst-nb's 'auto' mode re-executes a notebook as soon as one code cell has no
    output (a cell with only definitions has none), so outputs alone do not stop it.
    """
    mystnb = nb.setdefault("metadata", {}).setdefault("mystnb", {})
    if mystnb.get("execution_mode") == "off":
        return False
    mystnb["execution_mode"] = "off"
    return True


def solutions_hash(src: Path) -> str:
    """SHA-1 of the graded solutions of ``src`` (they change the instructor edition only)."""
    return hashlib.sha1(json.dumps(load_solutions(src.name), sort_keys=True).encode()).hexdigest()


def stage_notebook(src: Path, dest: Path, edition: str, package: str, settings: str = "") -> str:
    digest = f"{source_hash(src)}-{package}-{edition}"
    if edition == "instructor":
        digest += f"-{solutions_hash(src)}"
    if settings:
        digest += f"-{settings}"
    if dest.exists():
        try:
            staged = json.loads(dest.read_text(encoding="utf-8"))
            same = staged.get("metadata", {}).get("attention_book", {}).get("source_sha1") == digest
            if same and ran_cleanly(staged):
                if mark_executed(staged):
                    dest.write_text(json.dumps(staged, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
                return "kept (already executed; the site build will not run it again)"
        except (json.JSONDecodeError, OSError):
            pass
    solutions = load_solutions(src.name) if edition == "instructor" else None
    nb = make_edition(json.loads(src.read_text(encoding="utf-8")), edition, solutions)
    nb.setdefault("metadata", {}).setdefault("attention_book", {})["source_sha1"] = digest
    dest.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return "copied"


def main(dest: str) -> None:
    out = (ROOT / dest).resolve() if not Path(dest).is_absolute() else Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy2(ROOT / name, out / name)
    for name in DIRS:
        if (out / name).exists():
            shutil.rmtree(out / name)
        shutil.copytree(ROOT / name, out / name)
    nb_out = out / "notebooks"
    nb_out.mkdir(exist_ok=True)
    sources = sorted((ROOT / "notebooks").glob("*.ipynb"))
    wanted = {p.name for p in sources}
    for stale in nb_out.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()
    edition = os.environ.get("EDITION", "public")
    package = package_hash()
    settings = run_settings()
    counts: dict[str, int] = {}
    for src in sources:
        outcome = stage_notebook(src, nb_out / src.name, edition, package, settings)
        counts[outcome.split()[0]] = counts.get(outcome.split()[0], 0) + 1
        print(f"stage {src.name} ({edition} edition{', ' + settings if settings else ''}): {outcome}")
    print(f"stage: {counts.get('kept', 0)} notebooks kept (executed), {counts.get('copied', 0)} to execute")
    # The live views' models and data (ATTENTION_BOOK_LIVE in the Makefile): written by the notebooks,
    # kept here while their outputs are kept; listed in html_static_path, so it must exist.
    (out / "_live" / "live" / "models").mkdir(parents=True, exist_ok=True)
    try:
        files = vendor_js.vendor(out / "_vendor")
    except vendor_js.VendorError as err:
        sys.exit(f"stage: cannot vendor the JavaScript: {err}")
    print(f"stage _vendor: widget, MathJax and onnxruntime-web JavaScript ({len(files)} files)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
