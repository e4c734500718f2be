"""Chapter 6's worked exercise 11.6.3 checks the learner's relative self-attention layer (issue 36).

A fresh learner found that 11.6.3 had no check of the layer: one that reads the bias at i - j
instead of j - i trains about as well and passed unnoticed. The page now calls
``ab.assignments.ch06.verify_relative_attention(RelativeSelfAttention)`` in the cell after the class,
and 11.6.2 ``verify_learned_positions(LearnedPositions)`` (the starting scale too).
Checked here, at the visible seed and at four others:

- the page's own solution passes every case;
- the flip and the other common slips fail, each named in words (its cause), in every case
  where it changes the answer;
- an unfinished scaffold is "not done yet", not a crash;
- the checker is not a graded assignment (its solution is public), and the student edition
  keeps the check call after the stub.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import attention_book as ab
from attention_book.assignments import ch06, hidden_cases

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import editions

NOTEBOOK = ROOT / "notebooks" / "ch06_exercises.ipynb"
OFFSETS = (0, 1, 97, 4242, 123457)
CLASS = "RelativeSelfAttention"


def _page_source() -> str:
    """The page's solution cell: the class (markers kept as comments) and the check call after it."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    (cell,) = [c for c in nb["cells"] if f"class {CLASS}(" in editions.source(c)]
    assert "solution" in editions.tags(cell) and not editions.is_graded(cell)
    return editions.source(cell)


def _layer_class(code: str):
    tree = ast.parse(code)
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    namespace = {"torch": torch, "nn": nn, "F": F, "ab": ab, "math": math}
    exec(compile(ast.Module(classes, []), str(NOTEBOOK), "exec"), namespace)  # noqa: S102
    return namespace[CLASS]


SOURCE = _page_source()
OFFSET_LINE = "positions[None, :] - positions[:, None]"
LOOKUP = "self.bias[:, offsets + self.max_distance]"
# (the learner's slip as an edit of the page's solution, words its feedback must say)
SLIPS = {
    "i - j for j - i": ((OFFSET_LINE, "positions[:, None] - positions[None, :]"), "instead of j - i"),
    "no shift": ((LOOKUP, "self.bias[:, offsets]"), "indexed by the offset itself"),
    "one head's row": ((LOOKUP, "self.bias[0, offsets + self.max_distance]"), "head 0's biases"),
    "no scale": ((" / math.sqrt(q.shape[-1])", ""), "not divided by sqrt(d_head)"),
    "softmax over queries": (("F.softmax(scores, dim=-1)", "F.softmax(scores, dim=-2)"), "over the queries"),
    "no weights kept": (("self.attention_weights = F.softmax(scores, dim=-1)\n        out = self.attention_weights",
                         "out = F.softmax(scores, dim=-1)"), "attention_weights is None"),
    "no clipping": ((""".clamp(
            -self.max_distance, self.max_distance
        )""", ""), "clamp j - i to [-max_distance, max_distance]"),
}


def _run(layer_class, offset):
    if offset == 0:
        return ch06.verify_relative_attention(layer_class, verbose=False)
    with hidden_cases(offset):
        return ch06.verify_relative_attention(layer_class, verbose=False)


@pytest.mark.parametrize("offset", OFFSETS)
def test_the_pages_solution_passes(offset):
    report = _run(_layer_class(SOURCE), offset)
    assert report and report.passed == report.total == 4, report.results


@pytest.mark.parametrize("slip", sorted(SLIPS))
@pytest.mark.parametrize("offset", OFFSETS)
def test_each_slip_fails_with_its_cause(slip, offset):
    (old, new), words = SLIPS[slip]
    assert SOURCE.count(old) == 1, slip
    report = _run(_layer_class(SOURCE.replace(old, new)), offset)
    failed = [why for _, ok, why in report.results if not ok]
    assert failed, (slip, report.results)
    assert all(words in why for why in failed), (slip, failed)
    if slip != "no clipping":  # clipping matters only where the sequence outruns the range
        assert len(failed) >= report.total - 1, (slip, report.results)  # one head: a single row serves


def test_the_flip_fails_on_the_pages_own_sizes():
    """The slip the learner made: on the page's layer (4 heads, offsets up to 7, 8 tokens) too."""
    (old, new), _ = SLIPS["i - j for j - i"]
    report = ch06.verify_relative_attention(_layer_class(SOURCE.replace(old, new)), verbose=False)
    name, ok, why = report.results[0]
    assert "(the page)" in name and not ok and "b[h, clip(j - i)]" in why


def test_an_unfinished_scaffold_is_not_done_yet(capsys):
    student = editions.make_edition(json.loads(NOTEBOOK.read_text(encoding="utf-8")), "student")
    (cell,) = [editions.source(c) for c in student["cells"] if f"class {CLASS}(" in editions.source(c)]
    report = ch06.verify_relative_attention(_layer_class(cell))
    assert report.not_implemented and report.passed == 0
    assert f"Not done yet: {CLASS} is not implemented yet" in capsys.readouterr().out


def test_the_exercise_check_is_not_a_graded_assignment():
    names = ab.assignments.assignment_names()
    assert CLASS not in names and "relative_attention" not in names
    assert not hasattr(ab.assignments, "check_relative_attention")


def _cell_after_the_class(edition: str, name: str = CLASS) -> tuple[str, dict]:
    """(the class's cell, the cell after it) in ``edition`` of the page."""
    cells = editions.make_edition(json.loads(NOTEBOOK.read_text(encoding="utf-8")), edition)["cells"]
    # the public edition shows the scaffold (a markdown block) above the folded solution
    (k,) = [k for k, c in enumerate(cells) if f"class {name}(" in editions.source(c) and c["cell_type"] == "code"]
    return editions.source(cells[k]), cells[k + 1]


@pytest.mark.parametrize("name, check", [(CLASS, "verify_relative_attention"),
                                         ("LearnedPositions", "verify_learned_positions")])
def test_the_check_is_the_visible_cell_after_the_class(name, check):
    """The prose says "the cell after the class": on the website the check is no longer folded
    with the solution under "Show solution" (a fresh learner found it only there, issue 36)."""
    stub, after = _cell_after_the_class("student", name)
    assert "raise NotImplementedError" in stub and "BEGIN SOLUTION" not in stub and check not in stub
    assert f"ab.assignments.ch06.{check}({name})" in editions.source(after)
    solution, after = _cell_after_the_class("public", name)
    assert check not in solution
    assert f"ab.assignments.ch06.{check}({name})" in editions.source(after)
    assert not {"hide-cell", "remove-cell", "solution"} & set(editions.tags(after))


def test_the_check_leaves_the_random_numbers_alone():
    """The page trains right after the check: what it draws next does not depend on the check."""
    layer_class = _layer_class(SOURCE)
    torch.manual_seed(0)
    ch06.verify_relative_attention(layer_class, verbose=False)
    after = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(3))


# --------------------------------------------------------------------------- exercise 11.6.2
POSITIONS = "LearnedPositions"


def _positions_class(std=None, parameter=True):
    """The page's LearnedPositions, or one whose table starts at ``std`` / is a plain tensor."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    (cell,) = [editions.source(c) for c in nb["cells"] if f"class {POSITIONS}(" in editions.source(c)]
    if std is not None:
        cell = cell.replace("torch.randn(max_len, num_hiddens)", f"{std} * torch.randn(max_len, num_hiddens)")
    if not parameter:
        cell = cell.replace("nn.Parameter(", "(")
    namespace = {"torch": torch, "nn": nn}
    exec(cell, namespace)  # noqa: S102
    return namespace[POSITIONS]


def test_the_pages_learned_positions_pass(capsys):
    report = ch06.verify_learned_positions(_positions_class())
    assert report and report.total == 5
    out = capsys.readouterr().out
    assert "✔" in out and "✘" not in out


@pytest.mark.parametrize("std", [0.02, 0.1])
def test_a_small_starting_table_fails_on_its_scale(std):
    """A fresh learner's table at std 0.02 matched the package exactly (difference 0.0) and trained
    to 0.272, the score without positions (std 0.1: 0.316; std 1: 1.000; issue 36)."""
    report = ch06.verify_learned_positions(_positions_class(std), verbose=False)
    failed = [(n, why) for n, ok, why in report.results if not ok]
    assert len(failed) == 1 and "std" in failed[0][0]
    assert "torch.randn(max_len, num_hiddens)" in failed[0][1] and "std 1" in failed[0][1]


def test_a_table_that_is_not_a_parameter_fails():
    report = ch06.verify_learned_positions(_positions_class(parameter=False), verbose=False)
    failed = [why for _, ok, why in report.results if not ok]
    assert failed == [ch06.POSITIONS_NOT_TRAINED]


def test_an_unfinished_learned_positions_is_not_done_yet(capsys):
    stub, _ = _cell_after_the_class("student", POSITIONS)
    namespace = {"torch": torch, "nn": nn}
    exec(stub, namespace)  # noqa: S102
    report = ch06.verify_learned_positions(namespace[POSITIONS])
    assert report.not_implemented and report.passed == 0
    assert f"Not done yet: {POSITIONS} is not implemented yet" in capsys.readouterr().out
    assert POSITIONS not in ab.assignments.assignment_names()
