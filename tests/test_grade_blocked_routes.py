"""The routes around the grader's blocked answers that a fresh attacker found (issue 37, attacker r1: 4/10).

Each cell is the attacker's, made small. Outside the grader (the whole package, no guard) it passes; in the
package copy the sandbox sees, with run_hidden calling it, it earns 0 for the whole assignment. The grader on
the real notebooks (a full-marks solution still 10/10) is tests/test_grade.py and the slow test at the end.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attention_book.assignments import grading
from attention_book.assignments.grading import (
    case_results,
    dump_data,
    hidden_arguments,
    load_results,
    package_without,
    run_hidden,
)

SEED = 3

# route 8: the blocked merge reached only for two or more states (1 of 9 cases passed)
MERGE_LOOP = """
import torch
from attention_book.models.tiled import merge_softmax, finish_softmax
def merge_states(states):
    s = states[0]
    for t in states[1:]:
        s = merge_softmax(s, t)
    m, l, _ = s
    return finish_softmax(s), torch.where(l > 0, m + torch.log(l), torch.full_like(m, float("-inf")))
"""
# route 2: softmax_block with each state's log-sum-exp as a score and acc / l as a value
MERGE_BLOCK = """
import torch
from attention_book.models.tiled import softmax_block, finish_softmax
def merge_states(states):
    m = torch.stack([s[0] for s in states], -1)
    l = torch.stack([s[1] for s in states], -1)
    acc = torch.stack([s[2] for s in states], -2)
    scores = torch.where(l > 0, m + torch.log(l), torch.full_like(m, float("-inf")))
    vals = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
    M, L, A = softmax_block(scores[:, None, :], vals)
    out = finish_softmax((M, L, A))[:, 0]
    M, L = M[:, 0], L[:, 0]
    safe = torch.where(L > 0, L, torch.ones_like(L))
    return out, torch.where(L > 0, M + torch.log(safe), torch.full_like(M, float("-inf")))
"""
# route 3: the mask built by the package
MASK_PACKAGE = """
import torch
from attention_book.models.attention import key_mask
from attention_book.models.tiled import _tile_mask, MASKED
def my_masked_softmax(scores, valid_lens, window):
    b, n, _ = scores.shape
    keep = _tile_mask(key_mask(valid_lens, b, n, n), 0, n, 0, n, MASKED, 0, window, scores.device)
    x = scores.double().masked_fill(~keep, torch.finfo(torch.float64).min)
    return (torch.softmax(x, dim=-1) * keep).to(scores.dtype)
"""
# route 4: the language-model loss, which is F.cross_entropy with ignore_index
MCE_CLM = """
from attention_book.models.objectives import clm_loss
def masked_cross_entropy(logits, labels, pad_id):
    return clm_loss(lambda _: logits, (None, labels.masked_fill(labels == pad_id, -100)))
"""
# chapter 4's text: "You may use F.cross_entropy(..., reduction="none"), but not its ignore_index"
MCE_IGNORE = """
import torch.nn.functional as F
def masked_cross_entropy(logits, labels, pad_id):
    count = int((labels != pad_id).sum())
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=pad_id,
                           reduction="sum")
    return loss / max(count, 1), count
"""
# attackers r2, r3, r4: probability targets never reach nll_loss, so its dispatcher block missed them
MCE_SOFT = """
import torch
import torch.nn.functional as F
def masked_cross_entropy(logits, labels, pad_id):
    real = labels != pad_id
    soft = torch.eye(logits.shape[-1], dtype=logits.dtype)[labels] * real[..., None]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), soft.reshape(-1, logits.shape[-1]),
                           reduction="sum")
    return loss / max(int(real.sum()), 1), int(real.sum())
"""
# attacker r4: the validation loss taken apart, from the translation experiments
MCE_TFS = """
from types import SimpleNamespace
from attention_book.experiments.translation import teacher_forced_scores
import torch
def masked_cross_entropy(logits, labels, pad_id):
    model = torch.nn.Module()
    model.forward = lambda *_: logits
    model.p = torch.nn.Parameter(torch.zeros(1))
    data = SimpleNamespace(tgt_vocab={"<pad>": pad_id},
                           val_loader=lambda: [(labels, labels, torch.zeros(len(labels)), labels)])
    return torch.tensor(teacher_forced_scores(model, data)["loss"]), int((labels != pad_id).sum())
"""
MCE_OWN = """
import torch.nn.functional as F
def masked_cross_entropy(logits, labels, pad_id):
    keep = (labels != pad_id).reshape(-1)
    each = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
    count = int(keep.sum())
    return (each * keep).sum() / max(count, 1), count
"""
# route 5: another chapter's checker reference
NW_CH01 = """
import torch
from attention_book.assignments.ch01 import reference
def nw_gaussian(x_train, y_train, x_query, sigma):
    scores = -((x_query[:, None] - x_train[None, :]) ** 2) / (2 * sigma**2)
    return reference(scores, y_train[:, None], torch.ones(len(x_query), dtype=x_query.dtype))[0][:, 0]
"""
# route 6: random features, approximate (5/10)
NW_FEATURES = """
from attention_book.experiments.long_context import feature_nadaraya_watson
def nw_gaussian(x_train, y_train, x_query, sigma):
    return feature_nadaraya_watson(x_train.double(), y_train.double(), x_query.double(), float(sigma),
                                   num_features=1 << 16).to(x_query.dtype)
"""
# route 1: ab.PatchEmbedding with an identity convolution; chapter 8: "no convolution, no unfold"
PATCH_CONV = """
import torch
import attention_book as ab
def patchify(X, patch_size):
    ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    batch, channels, height, width = X.shape
    d = channels * ph * pw
    pe = ab.PatchEmbedding((height, width), (ph, pw), d, channels).to(X.dtype)
    with torch.no_grad():
        pe.conv.weight.copy_(torch.eye(d, dtype=X.dtype).reshape(d, channels, ph, pw))
        pe.conv.bias.zero_()
        return pe(X)
"""
PATCH_UNFOLD = """
import torch.nn.functional as F
def patchify(X, patch_size):
    ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    return F.unfold(X, (ph, pw), stride=(ph, pw)).transpose(1, 2)
"""
# attacker r7 (85a078e, 10/10 each): package functions no list named. Chapter 10's tile planner is chapter 3's
# mask (1x1 tiles: a tile is skipped exactly when its pair is hidden), and so is its window slider's figure; the
# attention core of chapter 3 does chapter 10's merge (a softmax over the blocks' log-sum-exps). The copy is
# sealed now: no function of the package keeps its code there (grading.SEALED_KEEP)
MASK_TILE_PLAN = """
import torch
from attention_book.models.tiled import tile_plan
def my_masked_softmax(scores, valid_lens, window):
    n = scores.shape[-1]
    band = tile_plan(n, n, 1, 1, window=window) != 0
    rows = tile_plan(n + 1, n + 1, 1, 1, causal=True)[:, 1:] != 0
    keep = (band[None] & rows[valid_lens.cpu().clamp(0, n)][:, None, :]).to(scores.device)
    x = scores.double().masked_fill(~keep, torch.finfo(torch.float64).min)
    return (torch.softmax(x, dim=-1) * keep).to(scores.dtype)
"""
MASK_FIGURE = """
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from torch import nn
from attention_book.experiments.long_context import window_figure
def _band(n, w):
    fig = window_figure(w, nn.Embedding(24, 1), lengths=(4,), show_len=n)
    band = torch.as_tensor(fig.axes[0].images[0].get_array()) > 0.5
    plt.close(fig)
    return band
def my_masked_softmax(scores, valid_lens, window):
    n = scores.shape[-1]
    rows = _band(n + 1, n + 1)[:, 1:]
    keep = (_band(n, window)[None] & rows[valid_lens.cpu().clamp(0, n)][:, None, :]).to(scores.device)
    x = scores.double().masked_fill(~keep, torch.finfo(torch.float64).min)
    return (torch.softmax(x, dim=-1) * keep).to(scores.dtype)
"""
MERGE_ATTEND = """
import torch
from attention_book.models.attention import attend
def merge_states(states):
    m = torch.stack([s[0] for s in states], -1)
    l = torch.stack([s[1] for s in states], -1)
    acc = torch.stack([s[2] for s in states], -2)
    lse = torch.where(l > 0, m + torch.log(l), torch.full_like(m, float("-inf")))
    vals = torch.where((l > 0)[..., None], acc / torch.where(l > 0, l, 1.0)[..., None], 0.0)
    zeros = m.new_zeros(m.shape[0], 1, 1)
    out, _ = attend(zeros, m.new_zeros(*m.shape, 1), vals, bias=lse[:, None, :])
    return out[:, 0], torch.logsumexp(lse, dim=-1)
"""
ROUTES = {  # name: (assignment, function, cell, passes outside?)
    "mask_tile_plan": ("masked_softmax", "my_masked_softmax", MASK_TILE_PLAN),
    "mask_figure": ("masked_softmax", "my_masked_softmax", MASK_FIGURE),
    "merge_attend": ("merge_softmax", "merge_states", MERGE_ATTEND),
    "merge_loop": ("merge_softmax", "merge_states", MERGE_LOOP),
    "merge_block": ("merge_softmax", "merge_states", MERGE_BLOCK),
    "mask_package": ("masked_softmax", "my_masked_softmax", MASK_PACKAGE),
    "mce_clm": ("masked_cross_entropy", "masked_cross_entropy", MCE_CLM),
    "mce_ignore": ("masked_cross_entropy", "masked_cross_entropy", MCE_IGNORE),
    "mce_soft": ("masked_cross_entropy", "masked_cross_entropy", MCE_SOFT),
    "mce_tfs": ("masked_cross_entropy", "masked_cross_entropy", MCE_TFS),
    "nw_ch01": ("nadaraya_watson", "nw_gaussian", NW_CH01),
    "nw_features": ("nadaraya_watson", "nw_gaussian", NW_FEATURES),
    "patch_conv": ("patchify", "patchify", PATCH_CONV),
    "patch_unfold": ("patchify", "patchify", PATCH_UNFOLD),
}


def outside(tmp_path, monkeypatch, name: str, fn_name: str, cell: str) -> list[dict]:
    """The cell's cases with the whole package and no guard (what the attacker's own checker saw)."""
    namespace: dict = {}
    exec(cell, namespace)
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments(name, SEED, "n")))
    with monkeypatch.context() as patch:
        patch.setattr(grading, "TORCH_BLOCKED", {}, raising=False)
        run_hidden(name, namespace[fn_name], str(tmp_path / "cases.bin"), str(tmp_path / "out.bin"))
        return case_results(name, SEED, "n", load_results((tmp_path / "out.bin").read_bytes()))


def inside(tmp_path, name: str, fn_name: str, cell: str, graded=None) -> list[dict]:
    """The cell run against the package copy the sandbox sees for ``graded`` (default: ``name``), judged."""
    package_without(graded or [name], tmp_path / "pkg")
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments(name, SEED, "n")))
    code = (textwrap.dedent(cell) + "\nfrom attention_book.assignments.grading import run_hidden\n"
            f"run_hidden({name!r}, {fn_name}, {str(tmp_path / 'cases.bin')!r}, {str(tmp_path / 'in.bin')!r})\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path / "pkg"), OMP_NUM_THREADS="1"))
    assert run.returncode == 0, run.stderr[-2000:]
    return case_results(name, SEED, "n", load_results((tmp_path / "in.bin").read_bytes()))


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_each_route_the_attacker_found_scores_0_for_the_whole_assignment(tmp_path, monkeypatch, route):
    name, fn_name, cell = ROUTES[route]
    before = sum(c["passed"] for c in outside(tmp_path, monkeypatch, name, fn_name, cell))
    assert before > 0, "the route is real: with the whole package it passes cases"
    cases = inside(tmp_path, name, fn_name, cell)
    assert sum(c["passed"] for c in cases) == 0, [c["why"] for c in cases]
    assert all(c["status"] == "blocked" for c in cases), cases[0]
    assert len({c["why"] for c in cases}) == 1 and "scores 0 for the whole assignment" in cases[0]["why"], cases[0]
    assert "a package function" not in cases[0]["why"], "the feedback names what was called"


def test_the_allowed_torch_route_still_scores_in_the_copy(tmp_path):
    """F.cross_entropy with reduction="none" and no ignore_index is what chapter 4's text allows."""
    cases = inside(tmp_path, "masked_cross_entropy", "masked_cross_entropy", MCE_OWN, ["bleu", "masked_cross_entropy"])
    assert all(c["passed"] for c in cases), [c["why"] for c in cases if not c["passed"]]


def test_the_routes_once_blocked_only_during_the_call_are_not_in_the_copy_at_all(tmp_path):
    """softmax_block and key_mask were blocked only while the grader called the student's function, because a
    demo cell used them; attacker r3 built the masks in an earlier cell, and five attackers got past the
    in-process guard. Now they are removed like the answers: outside the call too, in the copy they raise."""
    for i, (graded, code) in enumerate((
                         (["merge_softmax"], "ab.softmax_block(torch.randn(2, 5), torch.randn(5, 3))"),
                         (["merge_softmax"], "ab.online_softmax(torch.randn(2, 6), 3)"),
                         (["masked_softmax"], "from attention_book.models.attention import key_mask\n"
                                              "key_mask(torch.tensor([2]), 1, 3, 3)"),
                         (["masked_softmax"], "ab.causal_mask(3, 3)"))):
        package_without(graded, tmp_path / str(i))
        code = ("import torch, attention_book as ab\nfrom attention_book.assignments.grading import BlockedAnswer\n"
                f"try:\n{textwrap.indent(code, '    ')}\nexcept BlockedAnswer as err:\n    print('blocked', err.name)")
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=str(tmp_path / str(i)), OMP_NUM_THREADS="1"))
        assert run.returncode == 0 and run.stdout.startswith("blocked "), (code, run.stdout, run.stderr[-2000:])


def test_every_other_chapters_checker_is_stripped_in_the_copy(tmp_path):
    package_without(["nadaraya_watson"], tmp_path / "pkg")
    code = ("import attention_book.assignments as a, importlib\nfor n in range(1, 11):\n"
            "    m = importlib.import_module(f'attention_book.assignments.ch{n:02d}')\n"
            "    live = [k for k, v in vars(m).items() if callable(v) and getattr(v, '__module__', '') == m.__name__"
            " and not isinstance(v, type) and not getattr(v, '__blocked_answer__', False)]\n"
            "    print(n, sorted(live))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path / "pkg"), OMP_NUM_THREADS="1"))
    assert run.returncode == 0, run.stderr[-2000:]
    live = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    assert all(live[str(n)] == "[]" for n in range(1, 11)), live



def test_a_forbidden_torch_call_is_said_once_and_what_to_do_says_so(tmp_path):
    """The feedback of a torch route names it once, and What to do does not call it the package's."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    grade = importlib.import_module("grade")
    cases = inside(tmp_path, "patchify", "patchify", PATCH_UNFOLD)
    row = dict(student="ann", notebook="ch08_exercises.ipynb", assignment="patchify", points=0.0, max_points=10.0,
               passed=0, total=len(cases), cases=cases, status="graded", reason="")
    text = grade.feedback_markdown({"student": "ann"}, [row])
    assert f"One mistake explains all {len(cases)} failed cases" in text and "torch's unfold" in text, text
    assert "without what its text forbids" in text and "calling the package's" not in text, text
