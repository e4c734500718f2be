"""The sandbox's copy of the package is sealed (issue 37, attacker r7, 5/10): no function of the package keeps
its code there, apart from the grader's own and a few that set a notebook up (grading.SEALED_KEEP).

A list of blocked answers covers only the routes someone named, and a fresh attacker found three more: chapter
10's tile planner and its window figure both draw chapter 3's mask, and chapter 3's attention core does chapter
10's merge. What is checked here: the sealed copy imports, every module of it too, and the notebooks' setup
helpers run there; what runs while the package is imported is kept (traced, not listed by hand); every
assignment's reference solution still scores full marks in it; a package function no list names is blocked;
the student's own checker says when their function calls the package.
"""
from __future__ import annotations

import inspect
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import attention_book as ab
from attention_book.assignments import grading
from attention_book.assignments.grading import (case_results, dump_data, hidden_arguments, is_sealed,
                                                load_results, package_without)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))
import editions  # noqa: E402

SEED = 11
SETUP = "ab.seed_everything(); ab.use_book_style(); ab.describe_run(); ab.small_model_threads(); ab.sized(ci=1, full=2)"


def _python(code: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(path.parent),
                          env=dict(os.environ, PYTHONPATH=str(path), OMP_NUM_THREADS="1", MPLBACKEND="Agg"))


def test_what_runs_at_import_and_in_the_setup_cells_keeps_its_code():
    """Traced on the whole package: every function that runs while the package and each of its modules is
    imported, or while a notebook's setup cell runs, is one the sealed copy keeps."""
    root = Path(ab.__file__).resolve().parent
    code = textwrap.dedent(f"""
        import importlib, json, os, pkgutil, sys, inspect
        root, ran = {str(root)!r} + os.sep, set()
        def watch(frame, event, arg):
            c = frame.f_code
            if event == "call" and c.co_filename.startswith(root) and c.co_flags & inspect.CO_OPTIMIZED \
                    and not c.co_qualname.startswith("<"):  # a comprehension at module level stays in the copy
                rel = os.path.relpath(c.co_filename, os.path.dirname(root.rstrip(os.sep)))[:-3].replace(os.sep, ".")
                ran.add((rel.removesuffix(".__init__"), c.co_qualname))
        sys.setprofile(watch)
        import attention_book as ab
        for info in pkgutil.walk_packages(ab.__path__, "attention_book."):
            importlib.import_module(info.name)
        {SETUP}
        sys.setprofile(None)
        print(json.dumps(sorted(ran)))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, MPLBACKEND="Agg"))
    assert run.returncode == 0, run.stderr[-2000:]
    ran = json.loads(run.stdout.strip().splitlines()[-1])
    sealed = [(m, q) for m, q in ran if is_sealed(m, q)]
    assert not sealed, f"add these to grading.SEALED_KEEP (they run at import or in a setup cell): {sealed}"
    assert len(ran) >= 5, ran  # the trace saw the package at all


def test_the_sealed_copy_imports_and_sets_a_notebook_up(tmp_path):
    package_without(["masked_softmax"], tmp_path / "pkg")
    run = _python("import importlib, pkgutil\nimport attention_book as ab\n"
                  "for info in pkgutil.walk_packages(ab.__path__, 'attention_book.'):\n"
                  "    importlib.import_module(info.name)\n" + SETUP + "\nprint('ready')", tmp_path / "pkg")
    assert run.returncode == 0 and run.stdout.strip().endswith("ready"), run.stderr[-2000:]
    import ast

    tree = ast.parse((tmp_path / "pkg" / "attention_book" / "models" / "tiled.py").read_text())
    bodies = [f.body for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
    assert len(bodies) > 10 and all(len(b) == 1 and isinstance(b[0], ast.Raise) for b in bodies), \
        "every function of the copy's tiled.py is a raise, and nothing else"


def test_the_setup_cell_and_a_figure_run_in_a_kernel_on_the_sealed_copy(tmp_path):
    """Attacker r8: in an IPython kernel ``use_book_style`` wires the inline figures through the book's plot code,
    which was sealed; every notebook's setup cell stopped at its first line, and chapter 10's ``dev`` was never
    defined (an honest merge_states that used it scored 0). Run as a kernel runs it."""
    package_without(["merge_softmax"], tmp_path / "pkg")
    cells = ["import matplotlib\nmatplotlib.use('Agg')",
             "import torch\nimport attention_book as ab\n" + SETUP.replace("; ", "\n") + "\ndev = ab.small_model_threads()",
             "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\nfig",
             "print('dev', dev)"]
    code = ("from IPython.core.interactiveshell import InteractiveShell\nshell = InteractiveShell.instance()\n"
            f"print([shell.run_cell(c).success for c in {cells!r}])")
    run = _python(code, tmp_path / "pkg")
    assert run.returncode == 0 and "[True, True, True, True]" in run.stdout and "dev cpu" in run.stdout, \
        run.stdout[-3000:] + run.stderr[-2000:]


@pytest.mark.parametrize("call", ["ab.models.tiled.tile_plan(4, 4, 1, 1)", "ab.DotProductAttention()",
                                  "ab.experiments.long_context.window_figure(2, None)",
                                  "ab.models.kernels.log_kernel", "ab.load_corpus()"])
def test_a_package_function_no_list_names_is_blocked(tmp_path, call):
    package_without(["masked_softmax"], tmp_path / "pkg")
    code = ("import attention_book as ab\nfrom attention_book.assignments.grading import BlockedAnswer\n"
            f"f = {call}\ntry:\n    f(1, 2) if callable(f) else None\nexcept BlockedAnswer as e:\n    print('blocked', e.name)"
            if call.endswith("log_kernel") else
            "import attention_book as ab\nfrom attention_book.assignments.grading import BlockedAnswer\n"
            f"try:\n    {call}\nexcept BlockedAnswer as e:\n    print('blocked', e.name)")
    run = _python(code, tmp_path / "pkg")
    assert run.returncode == 0 and run.stdout.startswith("blocked "), (run.stdout, run.stderr[-2000:])


def _references() -> list[tuple[str, str, list[str], dict[str, str]]]:
    """``(notebook, graded cells' code, assignments, {assignment: function name})`` of each exercises notebook,
    from its instructor edition."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("ch*_exercises.ipynb")):
        solutions = editions.load_solutions(path.name)
        if not solutions:
            continue
        nb = editions.make_edition(json.loads(path.read_text(encoding="utf-8")), "instructor", solutions)
        code = "\n\n".join(editions.source(c) for c in nb["cells"] if editions.is_graded(c))
        names = dict(re.search(r"\bcheck_(\w+)\((\w+)\)", editions.source(c)).groups()
                     for c in nb["cells"] if "checker" in editions.tags(c))
        found.append((path.name, code, sorted(names), names))
    return found


REFERENCES = _references()


@pytest.mark.skipif(not REFERENCES, reason="solutions/ is absent (a public copy without them)")
@pytest.mark.parametrize("notebook, code, assignments, functions", REFERENCES, ids=[r[0] for r in REFERENCES])
def test_every_reference_solution_scores_full_marks_in_the_sealed_copy(tmp_path, notebook, code, assignments,
                                                                       functions):
    """No graded function needs the package: each reference solution, run in the copy as the grader runs it
    (the student's code, then run_hidden on the hidden cases' arguments), passes every hidden case."""
    package_without(assignments, tmp_path / "pkg")
    calls = ""
    for name in assignments:
        (tmp_path / f"{name}.bin").write_bytes(dump_data(hidden_arguments(name, SEED, "n")))
        calls += (f"run_hidden({name!r}, {functions[name]}, {str(tmp_path / f'{name}.bin')!r}, "
                  f"{str(tmp_path / f'{name}.out')!r})\n")
    run = _python("import math, collections, torch\nfrom torch import nn\nfrom torch.nn import functional as F\n"
                  "import attention_book as ab\nfrom attention_book.assignments.grading import run_hidden\n"
                  + code + "\n" + calls, tmp_path / "pkg")
    assert run.returncode == 0, run.stderr[-3000:]
    for name in assignments:
        cases = case_results(name, SEED, "n", load_results((tmp_path / f"{name}.out").read_bytes()))
        assert all(c["passed"] for c in cases), (name, [c["why"] for c in cases if not c["passed"]])


def test_the_students_checker_says_when_their_function_calls_the_package(capsys):
    """In the student's own session the package is whole, so a function that uses it passes the checker: the
    checker says that the grader blocks the call (here chapter 10's tile planner, which no list names)."""
    from test_grade_blocked_routes import MASK_TILE_PLAN

    namespace: dict = {}
    exec(MASK_TILE_PLAN, namespace)
    my_masked_softmax = namespace["my_masked_softmax"]

    def honest(scores, valid_lens, window):
        n = scores.shape[-1]
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        keep = (j <= i) & (j > i - window) & (j[None] < valid_lens[:, None, None])
        x = scores.double().masked_fill(~keep, torch.finfo(torch.float64).min)
        return (torch.softmax(x, dim=-1) * keep).to(scores.dtype)

    ab.assignments.check_masked_softmax(my_masked_softmax)
    said = " ".join(capsys.readouterr().out.split())
    assert "your function calls the package's own tile_plan, which the grader blocks" in said, said
    ab.assignments.check_masked_softmax(honest)
    said = capsys.readouterr().out
    assert "Note:" not in said and "9 of 9 cases passed" in said, said
