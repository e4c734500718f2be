"""Chapter 5's worked exercises 11.5.1 and 11.5.2 check the learner's function (issue 36).

A fresh learner found that the two exercises had no checker: a learner who wrote
``head_weights`` or ``gate_importance`` got no feedback to act on. The exercises' page now calls
``ab.assignments.ch05.verify_head_weights`` and ``verify_gate_importance`` right after the
function. Checked here, at the visible seed and at four others:

- the page's own solutions pass every case;
- each common mistake fails and is named in words (its cause), in at least one case;
- an unfinished scaffold is "not done yet", not a crash;
- the two checkers are not graded assignments (their solutions are public), and the student
  edition keeps the check call after the stub.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import pytest
import torch
from torch.nn import functional as F

import attention_book as ab
from attention_book.assignments import ch05, hidden_cases

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import editions  # noqa: E402

NOTEBOOK = ROOT / "notebooks" / "ch05_exercises.ipynb"
OFFSETS = (0, 1, 97, 4242, 123457)


def _page_solutions() -> dict:
    """The functions the page's solution cells define (the public, ungraded solutions)."""
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    namespace = {"torch": torch, "F": F, "ab": ab, "math": math}
    for cell in nb["cells"]:
        if "solution" in editions.tags(cell) and not editions.is_graded(cell):
            tree = ast.parse(editions.source(cell))
            defs = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
            exec(compile(ast.Module(defs, []), str(NOTEBOOK), "exec"), namespace)
    return namespace


SOLUTIONS = _page_solutions()


def _run(verify, fn, offset):
    if offset == 0:
        return verify(fn, verbose=False)
    with hidden_cases(offset):
        return verify(fn, verbose=False)


# --------------------------------------------------------------------------- 11.5.1: head_weights


def _heads(layer, X):
    return X.reshape(X.shape[0], X.shape[1], layer.num_heads, -1).transpose(1, 2)


def _by_hand(layer, queries, keys, valid_lens, *, plain=False, scale=None, mask=True):
    if plain:
        q = layer.W_q(queries).reshape(queries.shape[0], layer.num_heads, queries.shape[1], -1)
        k = layer.W_k(keys).reshape(keys.shape[0], layer.num_heads, keys.shape[1], -1)
    else:
        q, k = _heads(layer, layer.W_q(queries)), _heads(layer, layer.W_k(keys))
    scores = q @ k.transpose(-1, -2) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    if valid_lens is not None and mask:
        hidden = torch.arange(keys.shape[1]) >= valid_lens[:, None, None, None]
        scores = scores.masked_fill(hidden, -1e9)
    return scores.softmax(-1)


def _scores(layer, queries, keys, valid_lens):
    q, k = _heads(layer, layer.W_q(queries)), _heads(layer, layer.W_k(keys))
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if valid_lens is None:
        return scores
    return scores.masked_fill(torch.arange(keys.shape[1]) >= valid_lens[:, None, None, None], float("-inf"))


def _weights(layer, queries, keys, values, valid_lens):
    layer(queries, keys, values, valid_lens, need_weights=True)
    return layer.attention_weights


HEAD_WEIGHTS_MISTAKES = {
    "valid lengths ignored": (lambda a, q, k, v, lens=None: _weights(a, q, k, v, None), "pass valid_lens"),
    "need_weights forgotten": (lambda a, q, k, v, lens=None: (a(q, k, v, lens), a.attention_weights)[1],
                               "need_weights=True"),
    "the layer's output": (lambda a, q, k, v, lens=None: a(q, k, v, lens), "the layer's output"),
    "heads flattened into the batch": (lambda *a: _weights(*a).flatten(0, 1), "(batch * heads, queries, keys)"),
    "heads averaged": (lambda *a: _weights(*a).mean(1), "no heads axis"),
    "no scaling": (lambda a, q, k, v, lens=None: _by_hand(a, q, k, lens, scale=1.0), "not divided by sqrt(p)"),
    "the whole width's scaling": (lambda a, q, k, v, lens=None: _by_hand(a, q, k, lens,
                                                                        scale=math.sqrt(a.num_hiddens)),
                                  "square root of the whole width"),
    "heads split by a plain reshape": (lambda a, q, k, v, lens=None: _by_hand(a, q, k, lens, plain=True),
                                       "reshaping straight to (batch, heads, n, p)"),
    # the log of the weights: rows that do not sum to 1, not the scores of any of the mistakes above
    "rows that do not sum to 1": (lambda *a: torch.log(_weights(*a).clamp_min(1e-30)), "does not sum to 1"),
    "scores before the softmax": (lambda a, q, k, v, lens=None: _scores(a, q, k, lens), "before the softmax"),
    # the page's solution says "no eval(), the caller's mode is kept": the weights are right, the mode is not
    "the layer put in evaluation mode": (lambda a, *rest: (a.eval(), _weights(a, *rest))[1],
                                         "left in evaluation mode"),
}


def test_head_weights_by_hand_passes_too():
    """Another route to the right answer (the weights computed from the layer's matrices) passes."""
    report = ch05.verify_head_weights(lambda a, q, k, v, lens=None: _by_hand(a, q, k, lens), verbose=False)
    assert report, report.results


# --------------------------------------------------------------------------- 11.5.2: gate_importance


def _gated(run, *, tiled=False, reduction="mean", absolute=True, at=1.0, keep_hook=False):
    mha = run.model.attention
    d_head = mha.num_hiddens // mha.num_heads
    gates = torch.full((mha.num_heads,), at, requires_grad=True)

    def gate(_module, args):
        return (args[0] * (gates.repeat(d_head) if tiled else gates.repeat_interleave(d_head)),)

    handle = mha.W_o.register_forward_pre_hook(gate)
    logits = run.model(run.X_test).flatten(0, -2)
    F.cross_entropy(logits, run.Y_test.flatten(), reduction=reduction).backward()
    if not keep_hook:
        handle.remove()
    return gates.grad.abs() if absolute else gates.grad


def _ablation(run):
    from attention_book.experiments import offset_task

    return offset_task.head_importance(run.model, run.model.attention, run.X_test, run.Y_test)


GATE_MISTAKES = {
    "signed gradient": (lambda run: _gated(run, absolute=False), "the signed gradient"),
    "summed loss": (lambda run: _gated(run, reduction="sum"), "the loss is summed"),
    "gates tiled over the columns": (lambda run: _gated(run, tiled=True), "every num_heads-th column"),
    "gates at 0": (lambda run: _gated(run, at=0.0), "the gates are at 0"),
    "hook left on the model": (lambda run: _gated(run, keep_hook=True), "the model is left changed"),
    "ablation drops": (_ablation, "ablation drops"),
    "one number per column": (lambda run: _gated(run).repeat_interleave(
        run.model.attention.num_hiddens // run.num_heads), "one number per column"),
    "a list": (lambda run: _gated(run).tolist(), "return a tensor of shape (num_heads,)"),
}


VERIFY = {"head_weights": ch05.verify_head_weights, "gate_importance": ch05.verify_gate_importance}
MISTAKES = {("head_weights", m): HEAD_WEIGHTS_MISTAKES[m] for m in HEAD_WEIGHTS_MISTAKES} | {
    ("gate_importance", m): GATE_MISTAKES[m] for m in GATE_MISTAKES
}


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("name", sorted(VERIFY))
def test_the_pages_solution_passes_every_case(name, offset):
    report = _run(VERIFY[name], SOLUTIONS[name], offset)
    assert report and report.total >= 4, report.results


@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("exercise, mistake", sorted(MISTAKES))
def test_each_mistake_is_named(exercise, mistake, offset):
    fn, cause = MISTAKES[exercise, mistake]
    report = _run(VERIFY[exercise], fn, offset)
    assert not report
    reasons = [why for _, ok, why in report.results if not ok]
    assert any(cause in why for why in reasons), reasons


# --------------------------------------------------------------------------- both


def test_an_unfinished_scaffold_is_not_done_yet(capsys):
    def head_weights(attention, queries, keys, values, valid_lens=None):
        raise NotImplementedError

    def gate_importance(run):
        raise NotImplementedError

    for verify, fn in ((ch05.verify_head_weights, head_weights), (ch05.verify_gate_importance, gate_importance)):
        report = verify(fn)
        assert report.not_implemented and report.passed == 0
        assert f"Not done yet: {fn.__name__} is not implemented yet" in capsys.readouterr().out


def test_the_exercise_checks_are_not_graded_assignments():
    names = ab.assignments.assignment_names()
    assert "head_weights" not in names and "gate_importance" not in names
    assert not hasattr(ab.assignments, "check_head_weights")


def test_the_student_edition_checks_right_after_the_stub():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    student = editions.make_edition(nb, "student")
    code = [editions.source(c) for c in student["cells"] if c["cell_type"] == "code"]
    for name in ("head_weights", "gate_importance"):
        (cell,) = [c for c in code if f"def {name}(" in c]
        stub = cell.index("raise NotImplementedError")
        call = cell.index(f"ab.assignments.ch05.verify_{name}({name})")
        assert stub < call and "BEGIN SOLUTION" not in cell


def test_a_signed_gradient_with_tiled_gates_is_told_both():
    """The learner's two mistakes at once (the first wrong answer tried on the student edition)."""
    report = ch05.verify_gate_importance(lambda run: _gated(run, tiled=True, absolute=False), verbose=False)
    reasons = [why for _, ok, why in report.results if not ok]
    assert reasons and all("signed gradient" in why and "every num_heads-th column" in why for why in reasons)


def test_an_unexplained_wrong_answer_gets_the_recipe():
    report = ch05.verify_gate_importance(lambda run: 2 * _gated(run), verbose=False)
    assert all("hint: gates = torch.ones" in why for _, ok, why in report.results), report.results
    report = ch05.verify_head_weights(lambda *a: _weights(*a).flip(2), verbose=False)  # queries reversed
    assert any("need_weights=True" in why for _, ok, why in report.results), report.results


def test_the_checks_leave_the_random_numbers_alone():
    """The cell goes on after the check: what it draws next does not depend on whether the check ran."""
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    for verify, name in ((ch05.verify_head_weights, "head_weights"), (ch05.verify_gate_importance, "gate_importance")):
        verify(SOLUTIONS[name], verbose=False)
    assert torch.equal(torch.rand(3), expected)


def test_a_function_that_restores_the_layers_mode_passes():
    """The mode is checked, not the call of eval(): put back as it was, the caller's mode is kept (a reader
    found head_weights with attention.eval() passing although the solution says the mode is kept)."""
    def head_weights(attention, queries, keys, values, valid_lens=None):
        was = attention.training
        attention.eval()
        try:
            return _weights(attention, queries, keys, values, valid_lens)
        finally:
            attention.train(was)

    assert ch05.verify_head_weights(head_weights, verbose=False)
    report = ch05.verify_head_weights(HEAD_WEIGHTS_MISTAKES["the layer put in evaluation mode"][0], verbose=False)
    assert report.passed == 0, report.results


@pytest.mark.parametrize("wrong", [lambda run: _gated(run).tolist(), lambda run: tuple(_gated(run).tolist()),
                                   lambda run: float(_gated(run).sum())])
def test_a_gate_importance_that_is_no_tensor_is_told_so_not_an_error_in_the_checker(wrong):
    """A list of the right numbers raised AttributeError at a line of the checker's own code (a reader)."""
    report = ch05.verify_gate_importance(wrong, verbose=False)
    reasons = [why for _, ok, why in report.results if not ok]
    assert len(reasons) == report.total, report.results
    for why in reasons:
        assert "not a tensor" in why and "shape (num_heads,)" in why and "raised" not in why, why
