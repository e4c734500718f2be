"""A reader can copy a page's visible code, in order, into a fresh Python session and run it.

The website hides bookkeeping cells (tag ``remove-cell``): the Colab install, the book's
plot style, the seed, the seed check's claims. Nothing a visible cell needs may live only
there: every name a visible cell reads is imported or defined by an earlier visible cell
(or is a Python/IPython builtin). The first visible code cell therefore holds the page's
imports, ``import torch`` and ``import attention_book as ab`` among them.

The check is static: ruff's undefined-name rules (F821, F822, F823) over the visible cells
joined in page order, IPython magics left out. Hidden cells (``remove-cell``,
``remove-input``) are skipped; folded cells (``hide-input``) count, as a click shows them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_notebook_layout import visible_code_lines

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# Names IPython puts in every session.
IPYTHON_BUILTINS = ["display", "get_ipython"]


def ruff() -> str:
    found = Path(sys.executable).with_name("ruff")
    if found.exists():
        return str(found)
    on_path = shutil.which("ruff")
    if on_path is None:
        pytest.skip("ruff is not installed (it comes with the test extra)")
    return on_path


def visible_script(nb: dict) -> str:
    """The visible code lines in page order, magics and shell lines left out."""
    lines = [line for _, _, line in visible_code_lines(nb)
             if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines) + "\n"


def undefined_names(script: str) -> list[str]:
    """ruff's undefined-name findings for ``script``, one line each."""
    builtins = ", ".join(f'"{name}"' for name in IPYTHON_BUILTINS)
    result = subprocess.run(
        [ruff(), "check", "--isolated", "--select", "F821,F822,F823",
         "--config", f"builtins = [{builtins}]",
         "--output-format", "concise", "--stdin-filename", "page.py", "-"],
        input=script, capture_output=True, text=True, check=False)
    if result.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed: {result.stderr}")
    return [line for line in result.stdout.splitlines() if "F82" in line]


def test_the_check_finds_a_name_only_a_hidden_cell_defines():
    nb = {"cells": [
        {"cell_type": "code", "metadata": {"tags": ["remove-cell"]}, "source": "import torch\n"},
        {"cell_type": "code", "metadata": {}, "source": ["%matplotlib inline\n", "x = torch.ones(2)\n"]},
        {"cell_type": "code", "metadata": {}, "source": "display(x)\n"},
    ]}
    found = undefined_names(visible_script(nb))
    assert len(found) == 1 and "torch" in found[0]
    nb["cells"].insert(1, {"cell_type": "code", "metadata": {}, "source": "import torch\n"})
    assert undefined_names(visible_script(nb)) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_visible_cells_run_in_a_fresh_session(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    found = undefined_names(visible_script(nb))
    names = sorted({line.rsplit(" ", 1)[-1].strip("`") for line in found})
    assert not found, (
        f"{path.name}: visible code reads names no earlier visible cell defines: "
        f"{', '.join(names)} (import them in the first visible code cell, or show the "
        "cell that makes them); first use: " + found[0])
