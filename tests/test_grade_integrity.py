"""A submission cannot change what it is judged against, and every run of the grader ends with a
result (issue 37, attacker S7): hidden inputs written into by the student's function, directories
that look like notebooks, notebooks of a format nobody can read, feedback cut mid-word, Canvas
resubmissions."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import torch

from attention_book.assignments import check_masked_softmax
from attention_book.assignments.grading import (
    case_results,
    dump_data,
    hidden_arguments,
    load_results,
    run_hidden,
)

SEED = 5


def results(tmp_path, fn, name, offset=SEED) -> list[dict]:
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments(name, offset, "n")))
    run_hidden(name, fn, str(tmp_path / "cases.bin"), str(tmp_path / "r.bin"))
    return case_results(name, offset, "n", load_results((tmp_path / "r.bin").read_bytes()))


def selects_nothing(tokens, mask_id, vocab_size, special_ids, select_prob=0.15, generator=None):
    """bob: a wrong answer (no token selected), written honestly."""
    return tokens.clone(), torch.full_like(tokens, -100)


def selects_nothing_and_pads_the_graders_copy(tokens, mask_id, vocab_size, special_ids, select_prob=0.15,
                                              generator=None):
    """alice: the same answer, and every input it can reach (its caller's too) filled with <pad>."""
    caller = sys._getframe(1)
    if caller.f_code.co_name == "_call":
        caller.f_locals["tokens"].fill_(1)
    tokens.fill_(1)
    return tokens.clone(), torch.full_like(tokens, -100)


def pads_its_own_tokens(tokens, mask_id, vocab_size, special_ids, select_prob=0.15, generator=None):
    """alice's answer without the reach into the grader's copy: all <pad>, nothing selected."""
    tokens.fill_(1)
    return tokens.clone(), torch.full_like(tokens, -100)


def test_writing_into_the_hidden_inputs_changes_no_grade(tmp_path):
    bob = results(tmp_path, selects_nothing, "mlm_masking")
    alice = results(tmp_path, selects_nothing_and_pads_the_graders_copy, "mlm_masking")
    same_answer = results(tmp_path, pads_its_own_tokens, "mlm_masking")
    # alice is judged on her answer alone: as the same answer given without the write into the grader's copy
    assert [c["passed"] for c in alice] == [c["passed"] for c in same_answer]
    # and never above bob's honest "select nothing" (before the fix: 7 of 10 against bob's 2)
    assert sum(c["passed"] for c in alice) <= sum(c["passed"] for c in bob) <= 2
    # selecting nothing is named as such (it was "every row selects the same number of tokens")
    assert any("no token was selected in any row" in c["why"] for c in bob)
    assert not any("the same number of tokens" in c["why"] for c in bob)


def masked_softmax_in_place(scores, valid_lens, window):
    n = scores.shape[-1]
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    keep = (j <= i) & (j > i - window) & (j < valid_lens.reshape(-1, 1, 1))
    scores[~keep] = torch.finfo(scores.dtype).min  # writes into the caller's tensor
    return torch.softmax(scores, dim=-1) * keep


def masked_softmax_copy(scores, valid_lens, window):
    return masked_softmax_in_place(scores.clone(), valid_lens, window)


def test_a_write_in_place_is_still_caught_where_the_assignment_asks_for_none(tmp_path):
    honest = results(tmp_path, masked_softmax_copy, "masked_softmax")
    writes = results(tmp_path, masked_softmax_in_place, "masked_softmax")
    assert all(c["passed"] for c in honest)
    assert not any(c["passed"] for c in writes)
    assert all("in place" in c["why"] for c in writes)
    assert check_masked_softmax(masked_softmax_in_place, verbose=False).passed == 0
    assert check_masked_softmax(masked_softmax_copy, verbose=False).passed \
        == check_masked_softmax(masked_softmax_copy, verbose=False).total


def exact_masking(tokens, mask_id, vocab_size, special_ids, select_prob=0.15, generator=None):
    """A right answer: exactly round(select_prob * n) of each row's n ordinary tokens, 80/10/10."""
    special = torch.isin(tokens, torch.tensor((*special_ids, mask_id)))
    k = torch.round(select_prob * (~special).sum(1).double()).long()
    rank = torch.rand(tokens.shape, generator=generator).masked_fill(special, 2.0).argsort(1).argsort(1)
    selected = rank < k[:, None]
    u = torch.rand(tokens.shape, generator=generator)
    other = torch.randint(max(special_ids) + 1, vocab_size, tokens.shape, generator=generator)
    inputs = torch.where(selected & (u < 0.8), mask_id, torch.where(selected & (u < 0.9), other, tokens))
    return inputs, torch.where(selected, tokens, -100)


def test_a_forged_before_does_not_hide_a_write_in_place(tmp_path):
    def writes_and_forges(tokens, mask_id, vocab_size, special_ids, select_prob=0.15, generator=None):
        caller = sys._getframe(1)
        out = exact_masking(tokens, mask_id, vocab_size, special_ids, select_prob, generator)
        tokens.fill_(1)
        if caller.f_code.co_name == "call_masking":
            caller.f_locals["before"].fill_(1)  # the adapter's copy of the tokens from before the call
        return out

    probe = "the tokens passed in are not modified"
    honest = {c["label"]: c["passed"] for c in results(tmp_path, exact_masking, "mlm_masking")}
    forged = {c["label"]: c["passed"] for c in results(tmp_path, writes_and_forges, "mlm_masking")}
    assert honest[probe] and not forged[probe]


# --------------------------------------------------------------------------- what is handed in, and how it is read

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
grade = importlib.import_module("grade")
bundle = importlib.import_module("gradescope_bundle")
CH09 = {"ch09_exercises.ipynb": ["mlm_masking"]}


def _a_notebook() -> dict:
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
            "cells": [{"cell_type": "code", "id": "a1", "metadata": {}, "execution_count": None, "outputs": [],
                       "source": "x = 1"}]}


def test_a_folder_named_like_a_notebook_is_listed_not_graded(tmp_path):
    (tmp_path / "carol" / "ch09_exercises-9.ipynb").mkdir(parents=True)
    (tmp_path / "carol" / "ch09_exercises.ipynb").write_text(json.dumps(_a_notebook()))
    found, ignored = grade.find_submissions(tmp_path, CH09)
    assert [s.rel for s in found] == ["carol/ch09_exercises.ipynb"]
    assert [(str(p), why) for p, why in ignored] == [
        ("carol/ch09_exercises-9.ipynb", "a folder named like a notebook, not a notebook file")]
    assert bundle.handed_notebooks(tmp_path) == [tmp_path / "carol" / "ch09_exercises.ipynb"]


def _gradescope_root(tmp_path) -> Path:
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    for name in ("src", "scripts", "notebooks"):
        (root / "source" / name).symlink_to(ROOT / name)
    (root / "source" / "gradescope.json").write_text(json.dumps({"secret": "s" * 40}))
    (root / "submission" / "ch09_exercises-9.ipynb").mkdir(parents=True)  # a folder, not a notebook
    (root / "submission" / "ch09_exercises.ipynb").write_text(json.dumps(_a_notebook()))
    return root


class _Box:
    kind, missing = "bubblewrap", []


def test_gradescope_grades_the_notebook_beside_a_folder_of_its_name(tmp_path, monkeypatch):
    root = _gradescope_root(tmp_path)
    seen = {}

    def fake_grade(subs, out_csv, *args, **kwargs):  # stands for the sandboxed run: records what it was given
        seen["files"] = sorted(p.name for p in subs.rglob("*"))
        folder = out_csv.parent / "gradescope" / grade.slug("student")
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps({"score": 1.0, "tests": [], "output": "ok"}))
        (out_csv.parent / "grades.jsonl").write_text("")  # the bundle reads it for grader errors (591648c)

    monkeypatch.setattr(grade.Sandbox, "detect", staticmethod(lambda **kw: _Box()))
    monkeypatch.setattr(grade, "grade", fake_grade)
    data = bundle.run(root)
    assert seen["files"] == ["ch09_exercises.ipynb", "student"]
    assert data["score"] == 1.0
    assert json.loads((root / "results" / "results.json").read_text())["score"] == 1.0


def test_gradescope_always_writes_results_a_grader_error_said_so(tmp_path, monkeypatch):
    root = _gradescope_root(tmp_path)

    def fails(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(grade.Sandbox, "detect", staticmethod(lambda **kw: _Box()))
    monkeypatch.setattr(grade, "grade", fails)
    data = bundle.run(root)
    written = json.loads((root / "results" / "results.json").read_text())
    assert written == data and data["extra_data"]["status"] == "grader error"
    assert "GRADER ERROR" in data["output"] and "not your fault" in data["output"]


def test_a_notebook_of_a_format_jupyter_cannot_read_is_unreadable_not_a_grader_error(tmp_path):
    nb = _a_notebook()
    assert grade.notebook_problem(nb) == ""
    for version in (5, 3, "4", True):
        nb["nbformat"] = version
        problem = grade.notebook_problem(nb)
        assert '"nbformat": 4' in problem, problem
    subs = tmp_path / "subs"
    (subs / "eve").mkdir(parents=True)
    (subs / "eve" / "ch09_exercises.ipynb").write_text(json.dumps(dict(_a_notebook(), nbformat=5)))
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "ch09_exercises.ipynb").symlink_to(ROOT / "notebooks" / "ch09_exercises.ipynb")
    rows = grade.grade(subs, tmp_path / "out" / "grades.csv", 10, tmp_path / "ref", secret="s" * 40)
    (row,) = rows
    assert row["status"] == "unreadable" and row["passed"] == 0 and "nbformat" in row["reason"], row
    feedback = next((tmp_path / "out" / "feedback").glob("eve*.md")).read_text(encoding="utf-8")
    assert "not your fault" not in feedback and '"nbformat": 4' in feedback


def test_of_canvas_resubmissions_the_highest_submission_id_is_graded(tmp_path):
    for name in ("carol_203_500_ch09_exercises.ipynb", "carol_LATE_203_400_ch09_exercises-3.ipynb"):
        (tmp_path / name).write_text(json.dumps(_a_notebook()))
    found, ignored = grade.find_submissions(tmp_path, CH09)
    assert [(s.key, s.rel) for s in found] == [("carol_203", "carol_203_500_ch09_exercises.ipynb")]
    assert [str(p) for p, _ in ignored] == ["carol_LATE_203_400_ch09_exercises-3.ipynb"]
    # in a student's folder, with no submission id, the copy number decides
    (tmp_path / "dan").mkdir()
    for name in ("ch09_exercises.ipynb", "ch09_exercises (1).ipynb", "ch09_exercises-2.ipynb"):
        (tmp_path / "dan" / name).write_text(json.dumps(_a_notebook()))
    found, _ = grade.find_submissions(tmp_path, CH09)
    assert [s.rel for s in found if s.key == "dan"] == ["dan/ch09_exercises-2.ipynb"]


# --------------------------------------------------------------------------- feedback cut only between words


def test_feedback_is_never_cut_inside_a_word():
    name = "second_argument_value"
    line = "result = my_masked_softmax(first_argument_value, " + name + ", third_argument_value_is_long)"
    place = grade.cell_place({"cells": [{"cell_type": "code", "source": line}]}, 0)
    quoted = place.split("first line: ", 1)[1].removesuffix(")")
    assert quoted.endswith(" …") and line.startswith(quoted.removesuffix(" …"))
    assert not quoted.removesuffix(" …")[-1].isalnum() or line[len(quoted) - 2] in " ,()"
    for text, limit in (("KeyError: " + "word " * 80, 200), ("x" * 10 + " " + "identifier_" * 30, 100)):
        cut = grade.clean(text, limit)
        assert len(cut) <= limit and cut.endswith(" …")
        kept = cut.removesuffix(" …")
        assert text.startswith(kept) and not (text[len(kept) - 1].isalnum() and text[len(kept)].isalnum())
    error = grade.short_error("ValueError: " + " ".join(["averyveryverylongword"] * 12))
    assert error.endswith(" …") and error.removesuffix(" …").endswith("averyveryverylongword")
    assert grade.clean("short text", 200) == "short text"


def test_a_wrong_count_fails_every_case_and_says_the_others_are_not_judged():
    """A learner read "✘ the tokens passed in are not modified: 4 of 7 rows select the wrong number of
    tokens" as a hint about an in-place write. The count cases say why a count is wrong; every other
    case still fails (a function selecting nothing passed "specials are never selected" and scored
    6 of 10 when they judged only their own property) and says it was not judged."""
    import attention_book as ab
    from attention_book.assignments.ch09 import COUNT_CASE, check_mlm_masking

    report = check_mlm_masking(ab.mask_for_mlm, verbose=False)  # each token on its own: counts vary by row
    failed = [(name, why) for name, ok, why in report.results if not ok]
    not_judged = [name for name, why in failed if why.startswith("not judged while the count is wrong")]
    explained = [why for name, why in failed if name not in not_judged]
    assert len(not_judged) >= 5 and "the tokens passed in are not modified" in not_judged, failed
    # the two spread cases say what gives the count, and point to nothing else
    assert len(explained) == 2 and all("should have exactly" in why for why in explained), explained
    assert COUNT_CASE in failed[0][1]  # the one line names the case that explains the count
    # as the checker prints it, and says what the count should be and what it was, on one line (a fresh
    # instructor, 8/10: "not judged while the count is wrong" gave neither)
    assert COUNT_CASE in [name for name, _ in failed] and "\n" not in failed[0][1]
    assert re.match(r"not judged while the count is wrong: a row with (\d+) ordinary tokens should have (\d+) "
                    r"selected, got (\d+) \(\d+ of \d+ rows are off\)", failed[0][1]), failed[0]
