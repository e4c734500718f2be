"""A fresh instructor's remaining findings (issue 37, i15, 8/10: "yes for a pilot section; no for all 300 yet"):
no way to keep a flagged notebook's grade out of the uploads until it is read."""
from __future__ import annotations

import csv
import functools
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))

import grade  # noqa: E402
from test_grade import SCAFFOLD, notebook  # noqa: E402
from test_grade_engine import FakeGrader, fake_grading  # noqa: E402


def _class(tmp_path, monkeypatch, hold: bool, override: str = "") -> Path:
    """Two Canvas students with one passed case each; ann's notebook starts a thread (the review flag)."""
    subs, reference = tmp_path / "subs", tmp_path / "ref"
    subs.mkdir()
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    flagged = notebook(SCAFFOLD)
    flagged["cells"].append({"cell_type": "code", "source": "import threading", "metadata": {}, "outputs": [],
                             "execution_count": None})
    (subs / "ann_101_501_ch03_exercises.ipynb").write_text(json.dumps(flagged))
    (subs / "bob_102_502_ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    (tmp_path / "roster.csv").write_text("folder,name,id,login\nann,Ann A,101,ann1\nbob,Bob B,102,bob1\n")
    (tmp_path / "o.csv").write_text(f"student,assignment,points,note\n{override}\n")
    (tmp_path / "c.toml").write_text(("[course]\nhold_flagged = true\n" if hold else "")
                                     + ('[overrides]\nfile = "o.csv"\n' if override else "")
                                     + '[roster]\nfile = "roster.csv"\n[assignments.masked_softmax]\npoints = 10\n')

    class Passing(FakeGrader):
        def grade_notebook(self, who, path, reference, seeds):
            rows = super().grade_notebook(who, path, reference, seeds)
            return [dict(r, cases=[dict(name="a", label="a", index=1, passed=True, why="")]) for r in rows]

    fake_grading(monkeypatch)
    monkeypatch.setattr(grade, "Grader", Passing)
    # as for an assignment whose text forbids a torch function: under bubblewrap only those are read
    monkeypatch.setattr(grade, "TORCH_BLOCKED", {**grade.TORCH_BLOCKED, "masked_softmax": {}})
    grade.grade(subs, tmp_path / "out" / "grades.csv", 10, reference, secret="s" * 40,
                course_file=tmp_path / "c.toml")
    return tmp_path / "out"


def _review(tmp_path: Path, code: str, assignment: str) -> list[str]:
    """The review flag's words for a notebook of one code cell ``code``, graded as ``assignment``."""
    (tmp_path / "a.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "source": code}], "nbformat": 4}))
    return sorted(grade.review_counts(tmp_path / "a.ipynb", assignment))


def _canvas(out: Path) -> dict[str, str]:
    rows = list(csv.DictReader((out / "canvas.csv").open(encoding="utf-8")))
    return {r["SIS Login ID"]: next(v for k, v in r.items() if "masked_softmax" in k.lower()) for r in rows}


@pytest.mark.parametrize("hold", [False, True])
def test_hold_flagged_keeps_a_flagged_grade_out_of_the_uploads(tmp_path, monkeypatch, capsys, hold):
    """i15 M4: the flag was in the gradebook, but canvas.csv uploaded the flagged grade with the others."""
    out = _class(tmp_path, monkeypatch, hold)
    assert _canvas(out) == {"ann1": "" if hold else "10.0", "bob1": "10.0"}, (out / "canvas.csv").read_text()
    book = (out / "gradebook.csv").read_text()
    assert ("held out of canvas.csv, moodle.csv and the Moodle worksheet until you read it" in book) == hold, book
    said = capsys.readouterr().out
    (line,) = [x for x in said.splitlines() if x.startswith("REVIEW: ann")]
    assert line.endswith("held out of the uploads ([course] hold_flagged)") == hold, line
    page = next(p for p in (out / "feedback").iterdir() if p.name.startswith("ann")).read_text()
    assert "Your code uses threading, which can get past the grader's checks, so your instructor will read it." \
        in page, page
    assert ("These points are not uploaded until then." in page) == hold, page
    bob = next(p for p in (out / "feedback").iterdir() if p.name.startswith("bob")).read_text()
    assert "instructor will read" not in bob


def test_hold_flagged_is_true_or_false(tmp_path):
    (tmp_path / "c.toml").write_text('[course]\nhold_flagged = "yes"\n')
    with pytest.raises(grade.CourseError, match="hold_flagged is true or false"):
        grade.course_mod.load_course(tmp_path / "c.toml")


def test_an_overrides_points_release_the_hold(tmp_path, monkeypatch, capsys):
    """Read, then decided: the override's points go to the upload, and nothing is said to be held (i16: the
    console still said held, and the feedback still said the instructor will read it)."""
    out = _class(tmp_path, monkeypatch, True, "ann,masked_softmax,8,read it: its thread only prints")
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("REVIEW: ann")]
    assert "held" not in line, line
    assert _canvas(out) == {"ann1": "8.0", "bob1": "10.0"}, (out / "canvas.csv").read_text()
    assert "held out" not in (out / "gradebook.csv").read_text()
    page = next(p for p in (out / "feedback").iterdir() if p.name.startswith("ann")).read_text()
    assert "not uploaded" not in page and "Your instructor changed this grade" in page, page
    assert "will read it" not in page, page


def test_bleu_that_counts_every_ngram_as_a_match_is_named(tmp_path):
    """i15 C1: a BLEU whose test `unused[gram] > -99` matched every n-gram got seven failed cases, each with its
    own hint and no cause; the feedback now names the one mistake."""
    import collections
    import math

    from attention_book.assignments import check_bleu, hidden_cases
    from attention_book.assignments.ch04 import MATCH_ALL

    def my_bleu(pred_seq, label_seq, k=2):
        pred, label = pred_seq.split(), label_seq.split()
        if not pred:
            return 0.0
        score = math.exp(min(0.0, 1.0 - len(label) / len(pred)))
        for n in range(1, min(k, len(pred)) + 1):
            unused = collections.Counter(tuple(label[i:i + n]) for i in range(len(label) - n + 1))
            matches = 0
            for i in range(len(pred) - n + 1):
                gram = tuple(pred[i:i + n])
                if unused[gram] > -99:
                    unused[gram] -= 1
                    matches += 1
            score *= (matches / (len(pred) - n + 1)) ** (0.5 ** n)
        return score

    for seed in (0, 5, 77):
        with hidden_cases(seed):
            report = check_bleu(my_bleu, verbose=False)
        failed = [why for _, ok, why in report.results if not ok]
        assert len(failed) >= 5 and all(why.endswith(MATCH_ALL) for why in failed), failed


def test_a_times_line_of_a_student_with_no_file_at_all_does_not_point_at_ignored_csv(tmp_path, capsys):
    """i15 A2: "see ignored.csv for a file of theirs" for a student who handed in nothing this week; i16: and a
    WARNING to fix a line already in the right form. The line is right and unused: said once, plainly."""
    from test_grade_i11 import _bea_with_times

    _bea_with_times(tmp_path, "someone_999_1_ch03_exercises.ipynb", "kochbea_102")
    said = capsys.readouterr()
    assert "WARNING: times file" not in said.out + said.err, said
    (line,) = [x for x in said.out.splitlines() if x.startswith("times file")]
    assert line.endswith("'kochbea_102' (ch03_exercises.ipynb) is 'kochbea', who handed in nothing in this "
                         "download: the line is not used in this run"), line


def test_attacker_r7s_runners_are_words_and_its_false_positives_are_not(tmp_path):
    """Attacker r7 (85a078e): IPython's getoutput started a fresh Python that ran F.unfold outside the guard,
    10/10 with no flag; and an honest `results_file = ...`, torch.load's safe `weights_only=True` and
    `logging.Formatter` were flagged."""
    review = functools.partial(_review, tmp_path, assignment="patchify")

    assert review("from IPython.utils.process import getoutput\nout = getoutput(cmd)") == ["IPython.utils",
                                                                                             "getoutput"]
    for runner in ("import pexpect", "import jupyter_client", "from nbclient import NotebookClient"):
        assert review(runner), runner
    for honest in ('results_file = "losses.csv"', "state = torch.load(p, weights_only=True)",
                   'handler.setFormatter(logging.Formatter("%(message)s"))', "if file == 3:\n    pass"):
        assert review(honest) == [], honest
    assert review("torch.load(p, weights_only=False)") == ["weights_only="]


def test_under_bubblewrap_only_the_assignments_with_torch_blocks_are_read(tmp_path, monkeypatch, capsys):
    """i16: a correct masked_softmax that printed to stderr (`file=`) was flagged and its grade held, though the
    sealed package holds nothing its process could reach; patchify's and masked_cross_entropy's torch blocks
    live in that process, so theirs are still read."""
    monkeypatch.setattr(grade.Sandbox, "detect", staticmethod(lambda *a, **k: type("Box", (), {"kind": "bubblewrap"})()))
    _class(tmp_path, monkeypatch, True)
    monkeypatch.setattr(grade, "TORCH_BLOCKED", {k: v for k, v in grade.TORCH_BLOCKED.items() if k != "masked_softmax"})
    grade.grade(tmp_path / "subs", tmp_path / "again" / "grades.csv", 10, tmp_path / "ref", secret="s" * 40,
                course_file=tmp_path / "c.toml")
    assert _canvas(tmp_path / "again") == {"ann1": "10.0", "bob1": "10.0"}
    assert "REVIEW" not in (tmp_path / "again" / "gradebook.csv").read_text()


def test_attacker_r8s_routes_outside_the_dispatcher_are_words(tmp_path):
    """Attacker r8 (6f1cf44): numpy's sliding_window_view as patchify's unfold, and onnxruntime's
    SoftmaxCrossEntropyLoss with its ignore_index, both outside torch's dispatcher: 10/10, no flag."""
    review = functools.partial(_review, tmp_path)

    assert review("w = np.lib.stride_tricks.sliding_window_view(x, (2, 2), axis=(2, 3))", "patchify") == [
        "sliding_window_view", "stride_tricks"]
    assert review("import onnxruntime as ort\ns = ort.InferenceSession(model)", "masked_cross_entropy") == [
        "InferenceSession", "onnxruntime"]


def test_the_students_checker_blocks_what_the_text_forbids_as_the_grader_does(capsys):
    """Attacker r8: a mean F.cross_entropy passed the student's checker (5 of 5) and scored 0 when graded; the
    checker now blocks the torch functions the assignment's text forbids, and says so."""
    import torch.nn.functional as F

    import attention_book as ab

    def masked_cross_entropy(logits, labels, pad_id):
        keep = labels != pad_id
        return F.cross_entropy(logits[keep], labels[keep])

    report = ab.assignments.check_masked_cross_entropy(masked_cross_entropy)
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    # said once, first, with what the grader does (a fresh learner, l1: the same line under five cases)
    assert report.passed == 0 and flat.startswith("Note: your function uses F.cross_entropy or F.nll_loss"), out
    assert flat.count("this assignment's text forbids") == 1 and "package" not in out, out
    assert "0 for the whole assignment" in flat and flat.endswith("and 0 when graded (see the Note above)."), out


def test_a_package_lambda_is_named_in_the_checkers_note(capsys):
    """Attacker r8: a graded function calling one of the package's module-level lambdas (lm_tasks' task table)
    passed the checker with no Note and scored 0 when graded."""
    import math

    import attention_book as ab
    from attention_book.experiments.lm_tasks import TEXT_TASKS

    def warmup_cosine(step, warmup, max_steps):
        steps = TEXT_TASKS["<copy>"]([min(step, max_steps)])[0]
        ramp = 1.0 if warmup == 0 else min(1.0, steps / warmup)
        return float(ramp * (1 + math.cos(math.pi * steps / max_steps)) / 2)

    ab.assignments.check_warmup_cosine(warmup_cosine)
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("Note: your function calls the package's own lm_tasks.<lambda>, which the grader blocks"), out


def test_a_release_by_override_is_a_change_to_upload(tmp_path, monkeypatch, capsys):
    """i17: the run that released two holds said "no grade changed since the last run into this folder", so
    nothing said to upload again. grades.csv keeps why a grade is held, and a release is a `changed:` line."""
    out = _class(tmp_path, monkeypatch, True)
    held = {r["student"]: r["held"] for r in csv.DictReader((out / "grades.csv").open(encoding="utf-8"))}
    assert held == {"ann_101": "review", "bob_102": ""}, held
    capsys.readouterr()
    (tmp_path / "o.csv").write_text("student,assignment,points,note\nann,masked_softmax,10,read it: only prints\n")
    text = (tmp_path / "c.toml").read_text()
    (tmp_path / "c.toml").write_text('[overrides]\nfile = "o.csv"\n' + text)
    grade.grade(tmp_path / "subs", out / "grades.csv", 10, tmp_path / "ref", secret="s" * 40,
                course_file=tmp_path / "c.toml")
    said = capsys.readouterr().out
    assert "changed: ann_101 masked_softmax: was 10 (graded, held out of the uploads), now 10 (graded)" in said, said
    assert "1 grade changed since the last run into this folder: upload" in said, said


def test_a_docstring_and_a_print_to_stderr_are_not_read_by_the_flag(tmp_path):
    """i17: a patchify docstring restating "no unfold, no convolution" and a debug print to stderr were flagged
    and held; neither runs anything. A string that is used (getattr's name) is still read."""
    review = functools.partial(_review, tmp_path, assignment="patchify")

    assert review('def patchify(X, p):\n    """Patches with reshape only: no unfold, no convolution."""\n'
                  '    print(X.shape, file=sys.stderr)\n    return X\n') == []
    assert review('op = getattr(F, "unfold")') == ["getattr", "unfold"]
    assert review('print(src, file=handle)') == ["file="]


def test_attacker_r9s_routes_are_words_and_a_variable_named_ignore_index_is_not(tmp_path):
    """Attacker r9 (8c258fd): scikit-learn's extract_patches_2d for patchify, its log_loss and F.kl_div for
    masked_cross_entropy, 10/10 with no flag; and an honest `ignore_index = pad_id` variable was flagged."""
    review = functools.partial(_review, tmp_path)

    assert review("from sklearn.feature_extraction.image import extract_patches_2d", "patchify") == [
        "extract_patches_2d", "sklearn"]
    assert review("loss = F.kl_div(logp, target, reduction='sum')", "masked_cross_entropy") == ["kl_div"]
    assert review("ignore_index = pad_id\nkeep = labels != ignore_index", "masked_cross_entropy") == []
    assert review("F.cross_entropy(x, y, ignore_index=pad)", "masked_cross_entropy") == ["ignore_index"]
    assert review("F.cross_entropy(x, y, **{'ignore_index': pad})", "masked_cross_entropy") == ["'ignore_index'"]


def test_a_sealed_lambda_is_named_in_the_feedback(tmp_path):
    """Attacker r9: a blocked package lambda got the generic 'a package function' and 'fix the failed cases'."""
    import os
    import subprocess

    from attention_book.assignments.grading import (case_results, dump_data, hidden_arguments, load_results,
                                                    package_without)

    package_without(["warmup_cosine"], tmp_path / "pkg")
    (tmp_path / "c.bin").write_bytes(dump_data(hidden_arguments("warmup_cosine", 3, "n")))
    code = ("import math\nfrom attention_book.experiments.lm_tasks import TEXT_TASKS\n"
            "def warmup_cosine(step, warmup, max_steps):\n    return float(TEXT_TASKS['<copy>']([step])[0])\n"
            "from attention_book.assignments.grading import run_hidden\n"
            f"run_hidden('warmup_cosine', warmup_cosine, {str(tmp_path / 'c.bin')!r}, {str(tmp_path / 'o.bin')!r})")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path / "pkg")))
    assert run.returncode == 0, run.stderr[-2000:]
    cases = case_results("warmup_cosine", 3, "n", load_results((tmp_path / "o.bin").read_bytes()))
    assert cases[0]["why"].startswith("your function called the package's lm_tasks.<lambda>, which"), cases[0]
