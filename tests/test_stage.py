"""scripts/stage.py: executed outputs are reused only for the same notebook *and* the same package."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_stage():
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("stage_under_test", ROOT / "scripts" / "stage.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_editing_a_docstring_in_the_package_makes_the_notebooks_run_again(tmp_path, monkeypatch):
    stage = load_stage()
    fake_root = tmp_path / "repo"
    (fake_root / "src" / "pkg").mkdir(parents=True)
    module = fake_root / "src" / "pkg" / "mod.py"
    module.write_text('def f():\n    """Old docstring."""\n', encoding="utf-8")
    shutil.copy2(ROOT / "pyproject.toml", fake_root / "pyproject.toml")
    monkeypatch.setattr(stage, "ROOT", fake_root)

    src = ROOT / "notebooks" / "ch01_queries_keys_values.ipynb"
    dest = tmp_path / "staged.ipynb"
    before = stage.package_hash()
    assert stage.stage_notebook(src, dest, "public", before) == "copied"
    # Pretend the test run executed it cleanly.
    nb = json.loads(dest.read_text(encoding="utf-8"))
    code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
    dest.write_text(json.dumps(nb), encoding="utf-8")
    assert stage.stage_notebook(src, dest, "public", stage.package_hash()).startswith("kept")

    module.write_text('def f():\n    """New docstring."""\n', encoding="utf-8")
    after = stage.package_hash()
    assert after != before
    assert stage.stage_notebook(src, dest, "public", after) == "copied"
    restaged = json.loads(dest.read_text(encoding="utf-8"))
    assert not any(c.get("outputs") for c in restaged["cells"] if c["cell_type"] == "code")


def test_make_clean_removes_every_build_product():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    clean = makefile.split("\nclean:", 1)[1].split("\n\n", 1)[0]
    for target in ("_build", "$(STAGE)", "student"):
        assert target in clean, f"make clean does not remove {target}"
