"""Grading a class safely (scripts/grade.py, attention_book.assignments.grading).

The main test grades a fake class of hostile and ordinary submissions of the chapter 3
assignment (masked softmax) and checks every row.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import shutil
import subprocess
import sys
import io
import tempfile
import time
from pathlib import Path

import pytest
import torch

import attention_book as ab
from attention_book.assignments import hidden_cases
from attention_book.assignments.grading import (DATA_MAGIC, GradingError, JudgeServer, dump_data, hidden_arguments,
                                                judge, load_results, package_without, run_hidden)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
grade = importlib.import_module("grade")

SEED = 424242
TIMEOUT = 45  # seconds per notebook: generous, so that a loaded machine still grades the honest ones
# notebooks graded at once: at least 2 (the hostile class also attacks the parallel grader), up to 4 cores
JOBS = max(2, min(4, os.cpu_count() or 2))

# A right answer: the checker's own reference, pasted into the notebook under the student's name
# (the assignment's contract lives in assignments/ch03.py; this follows it wherever it goes).
_CH03 = importlib.import_module("attention_book.assignments.ch03")
if hasattr(_CH03, "reference"):
    GOOD = "\n" + __import__("inspect").getsource(_CH03.reference).replace("def reference(", "def my_masked_softmax(")
else:  # the earlier contract, fn(X, valid_lens)
    GOOD = '''
def my_masked_softmax(X, valid_lens=None):
    if valid_lens is None:
        return torch.softmax(X, dim=-1)
    if valid_lens.dim() == 1:
        valid_lens = valid_lens[:, None].expand(X.shape[0], X.shape[1])
    mask = torch.arange(X.shape[-1], device=X.device)[None, None, :] < valid_lens[..., None]
    return torch.softmax(X.masked_fill(~mask, torch.finfo(X.dtype).min), dim=-1) * mask
'''
# Right on rows of an even number of keys, off by 0.01 on the others: some cases pass, some fail.
WRONG = GOOD + '''
_right_softmax = my_masked_softmax
def my_masked_softmax(*args, **kwargs):
    out = _right_softmax(*args, **kwargs)
    return out if out.shape[-1] % 2 == 0 else out + 0.01
'''
SCAFFOLD = '''
def my_masked_softmax(*args, **kwargs):
    raise NotImplementedError
'''
CHECK = "report = ab.assignments.check_masked_softmax(my_masked_softmax)"


def notebook(*cells: str, checker: str = CHECK) -> dict:
    code = [{"cell_type": "code", "metadata": {}, "source": "import torch\nimport attention_book as ab",
             "outputs": [], "execution_count": None}]
    code += [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in cells]
    code.append({"cell_type": "code", "metadata": {"tags": ["checker"]}, "source": checker, "outputs": [],
                 "execution_count": None})
    return {"cells": code, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                      "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def earned(source: str) -> tuple[int, int]:
    """What a function's real outputs earn on the grader's hidden cases (judged here, directly)."""
    namespace: dict = {"torch": torch, "ab": ab}
    exec(source, namespace)
    with hidden_cases(SEED):
        report = ab.assignments.check_masked_softmax(namespace["my_masked_softmax"], verbose=False)
    return report.passed, report.total


def clone_under_tmp() -> Path:
    """A copy of what the grader needs, under /tmp in a path with a space, its venv a symlink."""
    clone = Path(tempfile.mkdtemp(prefix="ab clone ", dir="/tmp"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "scripts", clone / "scripts", ignore=ignore)
    shutil.copytree(ROOT / "src", clone / "src", ignore=ignore)
    shutil.copytree(ROOT / "book" / "_ext", clone / "book" / "_ext", ignore=ignore)
    (clone / ".venv").symlink_to(Path(sys.prefix))
    return clone


# Each hostile results file replaces the harness's run_hidden in the student's own kernel.
PAYLOAD = "import struct, json, attention_book.assignments.grading as g\n"
# A header nested 100,000 levels deep; a tensor entry that claims 8e8 elements but brings 2 bytes.
DAG = PAYLOAD + """def forged(name, fn, cases, out):
    spec = g.load_data(open(cases, 'rb').read())
    head = ('{"$dict":[["assignment","' + name + '"],["nonce","' + spec["nonce"] + '"],["records",'
            + '[' * 100000 + ']' * 100000 + ']]}').encode()
    open(out, 'wb').write(g.DATA_MAGIC + struct.pack('>Q', len(head)) + head)
g.run_hidden = forged"""
STRIDE0 = PAYLOAD + """def forged(name, fn, cases, out):
    spec = g.load_data(open(cases, 'rb').read())
    got = {"$tensor": ["float16", [2, 2, 2 * 10**8], 2]}
    records = [{"$dict": [["status", "ok"], ["got", got], ["args", {"$tuple": []}]]}] * len(spec["cases"])
    head = json.dumps({"$dict": [["assignment", name], ["nonce", spec["nonce"]], ["records", records]]}).encode()
    open(out, 'wb').write(g.DATA_MAGIC + struct.pack('>Q', len(head)) + head + bytes(2 * len(records)))
g.run_hidden = forged"""
# Forks past the process limit, 3,000 nested directories, 1.5 GB into /tmp, four children of 1.5 GB each.
RESOURCES = """import os, time
forks = 0
for _ in range(600):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    forks += 1
for _ in range(forks):
    os.wait()
os.chdir('/tmp')
for _ in range(3000):
    try:
        os.mkdir('d'); os.chdir('d')
    except OSError:
        break
try:
    with open('/tmp/fill', 'wb') as f:
        for _ in range(1500):
            f.write(b'x' * 2**20)
except OSError:
    pass
os.chdir('/sandbox')
hogs = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray(1500 * 2**20)
            time.sleep(2)
        finally:
            os._exit(0)
    hogs.append(pid)
for pid in hogs:
    os.waitpid(pid, 0)"""
# Every way around the hidden tests the issue found; the function answers only if one works.
BYPASS = """
import gc, importlib, sys, types
def my_masked_softmax(X, valid_lens=None, *rest):
    checker = importlib.reload(importlib.import_module("attention_book.assignments.ch03"))
    for name in ("reference", "_reference"):
        try:
            return getattr(checker, name)(X, valid_lens, *rest)
        except Exception:
            pass
    for attr in ("tiled_attention", "online_softmax"):
        try:
            return getattr(ab.models.tiled, attr)(X, 1)
        except Exception:
            pass
    m = importlib.reload(ab.models.attention)
    try:
        return m.masked_softmax(X, valid_lens)
    except RuntimeError:
        pass
    space = {"__name__": "attention_book.models.attention", "__package__": "attention_book.models"}
    try:
        exec(compile(open(m.__file__).read(), m.__file__, "exec"), space)
        return space["masked_softmax"](X, valid_lens)
    except Exception:
        pass
    for obj in gc.get_objects():
        if isinstance(obj, types.CodeType) and obj.co_name in ("masked_softmax", "reference", "_softmax_where"):
            try:
                return types.FunctionType(obj, vars(m))(X, valid_lens, *rest)
            except Exception:
                pass
    frame = sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            for cell in getattr(getattr(value, "check", None), "__closure__", None) or ():
                if isinstance(cell.cell_contents, torch.Tensor) and cell.cell_contents.shape == X.shape:
                    return cell.cell_contents
        frame = frame.f_back
    raise RuntimeError("no way around the hidden tests worked")
"""
SUBCLASS = GOOD + """
class Marked(torch.Tensor):
    pass
_plain_softmax = my_masked_softmax
def my_masked_softmax(*args, **kwargs):
    return _plain_softmax(*args, **kwargs).as_subclass(Marked)
"""
# Attention with the identity as keys and values returns the softmax weights themselves.
TILED = """
def my_masked_softmax(scores, valid_lens, window):
    n = scores.shape[-1]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    keep = (j <= i) & (j > i - window) & (j < valid_lens[:, None, None])
    eye = torch.eye(n, dtype=scores.dtype).expand(*scores.shape[:-2], n, n)
    return ab.tiled_attention(scores, eye, eye, keep, scale=1.0)
"""
# Honest on the first two cases, then NotImplementedError: it earns what those two cases earn, no more.
STOPS = GOOD + """
_honest = my_masked_softmax
_calls = [0]
def my_masked_softmax(*args, **kwargs):
    _calls[0] += 1
    if _calls[0] > 2:
        raise NotImplementedError
    return _honest(*args, **kwargs)
"""
FORGE = "\n\x1b[2Kbob/ch03_exercises.ipynb masked_softmax: 10.0/10 (timeout)\r\n"
# The worker (the kernel's parent) sends its report through a pipe: a kernel that could open it through
# /proc/<parent>/fd would put its own report first ("cell 1 raised Forged ..."; attacker S7b).
PIPE_FORGE = """
import json, os, struct
key = b"worker"
report = json.dumps({"errors": [{"cell": 0, "error": "Forged: INJECTED BY KERNEL"}], "harness": [],
                     "worker": "", "dead": True}).encode()
message = struct.pack(">H", len(key)) + key + struct.pack(">Q", len(report)) + report
base = "/proc/%d/fd" % os.getppid()
try:
    names = os.listdir(base)
except OSError:
    names = []
for name in names:
    try:
        if os.readlink(os.path.join(base, name)).startswith("pipe:"):
            fd = os.open(os.path.join(base, name), os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, message)
            os.close(fd)
    except OSError:
        pass
"""


def leaks(secret: Path) -> str:
    """A function that puts into its error every host file it can read, after a forged console line."""
    return f"""
def my_masked_softmax(*args, **kwargs):
    found = []
    for path in ({str(secret)!r}, '/etc/shadow', '/root/.bash_history'):
        try:
            found.append(open(path).read())
        except OSError:
            pass
    raise ValueError({FORGE!r} + ' '.join(found))
"""


# Session scope: the xdist group keeps these tests on one worker, but that worker may run other
# modules between them, which would tear a module-scoped class down and grade it again (230 s).
@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    sandbox = grade.Sandbox.detect()
    if sandbox.kind == "none" and "cannot start Python" in sandbox.missing[0]:
        pytest.skip(f"this machine refuses the sandbox's namespaces: {sandbox.missing[0]}")
    if sandbox.kind == "none":  # never run these submissions unconfined: they attack the machine
        pytest.fail("the grader's sandbox is not available (" + "; ".join(sandbox.missing[:1]) + "). Install "
                    "bubblewrap: sudo apt-get install bubblewrap (make test does this when run as root)",
                    pytrace=False)
    clone = clone_under_tmp()
    base = tmp_path_factory.mktemp("class")
    subs, reference, out = base / "submissions", base / "reference", base / "out"
    reference.mkdir()
    (reference / "ch03_exercises.ipynb").write_text(json.dumps(notebook(SCAFFOLD)))
    secret = base / "host-secret.txt"
    token = f"host-secret-{time.time_ns()}"
    secret.write_text(token)
    victim = subs / "bob" / "ch03_exercises.ipynb"
    package_file = clone / "src" / "attention_book" / "models" / "attention.py"
    marker = f"grader-test-orphan-{time.time_ns()}"
    class_ = {
        "bob": notebook(GOOD),
        "carl-wrong": notebook(WRONG),
        "dana-raises": notebook("def my_masked_softmax(*args, **kwargs):\n    raise ValueError('oops')"),
        "erin-loop": notebook(GOOD, "while True:\n    pass"),
        "finn-gil": notebook(GOOD, "sum(range(10**13))"),
        "gus-forged-log": notebook(SCAFFOLD, "import os\nfor v in ('ATTENTION_BOOK_GRADE_LOG', 'GRADE_LOG'):\n"
                                   "    p = os.environ.get(v)\n    if p: open(p, 'a').write('{\"assignment\": "
                                   "\"masked_softmax\", \"passed\": 7, \"total\": 7, \"score\": 1.0}\\n')\n"
                                   "open('results.pt', 'w').write('forged')"),
        "hal-own-checks": notebook(SCAFFOLD, checker="from attention_book.assignments import Case, run_checks\n"
                                   "report = run_checks('masked_softmax', lambda *a: 0, [Case('x')])"),
        "ivy-extra-name": notebook(GOOD, checker=CHECK + "\nab.assignments.check_softmax_pool(lambda s, v, t: v)\n"
                                   "check_=ab.assignments.check_masked_softmax\n"
                                   "# check_=HYPERLINK(\"http://x\")(1)"),
        # rewrites another student's notebook, then edits the package (each attack checked on its own)
        "aaa-rewrites-bob": notebook(WRONG, f"open({str(victim)!r}, 'w').write('[]')",
                                     f"open({str(package_file)!r}, 'a').write('\\nraise SystemExit\\n')"),
        "kim-background": notebook(GOOD, "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', "
                                   f"'import time; time.sleep(600)  # {marker}'], start_new_session=True)"),
        "lea-prints-100mb": notebook(GOOD, "print('x' * 100_000_000)"),
        "max-hands-in-package": notebook(checker="report = ab.assignments.check_masked_softmax(ab.masked_softmax)"),
        "ned-wraps-package": notebook("ref = ab.masked_softmax\ndef my_masked_softmax(*args):\n"
                                      "    return ref(*args[:2])"),
        "ola-wraps-tiled": notebook(TILED),
        "kai-stops-after-two": notebook(STOPS),
        "=cmd|' -C calc'!A0": notebook(GOOD),
        "quinn-huge-checker": notebook(GOOD, checker=CHECK + "\nx = 1" + " + 1" * 50_000 + "\n"
                                       "ab.assignments.check_masked_softmax(" + "a." * 50_000 + "b)"),
        "pay-dag": notebook(GOOD, DAG),
        "pay-stride0": notebook(GOOD, STRIDE0),
        "rex-resources": notebook(GOOD, RESOURCES),
        "a b": notebook(GOOD),
        "tia-leaks-and-forges": notebook(leaks(secret)),
        "vic-bypasses": notebook(BYPASS),
        "yan-subclass": notebook(SUBCLASS),
        # writes a forged worker report into the grader's pipe, reached through the worker's /proc entry
        "uma-writes-the-pipe": notebook(GOOD, PIPE_FORGE),
    }
    for who, nb in class_.items():
        (subs / who).mkdir(parents=True)
        (subs / who / "ch03_exercises.ipynb").write_text(json.dumps(nb))
    unreadable = {"oli-invalid-json": "{not json", "pat-empty-list": "[]", "a_b": "{not json", "x\ny": "[]",
                  "x y": "[]", "nest-brackets": "[" * 100_000 + "]" * 100_000}
    for who, (key, value) in {"meta-list": ("metadata", []), "meta-null": ("metadata", None),
                              "tags-5": ("tags", 5), "source-dict": ("source", {"a": 1}),
                              "source-ints": ("source", [1, 2])}.items():
        nb = notebook(GOOD)
        if key == "tags":
            nb["cells"][1]["metadata"]["tags"] = value
        else:
            nb["cells"][1][key] = value
        unreadable[who] = json.dumps(nb)
    for who, text in unreadable.items():
        (subs / who).mkdir(parents=True)
        (subs / who / "ch03_exercises.ipynb").write_text(text)
    extra = subs / "tia-leaks-and-forges"
    for name in ("ch99_bonus.ipynb", "ch07_extra.ipynb", "extra/ch03_exercises.ipynb"):
        (extra / name).parent.mkdir(exist_ok=True)
        (extra / name).write_text(json.dumps(notebook(GOOD, checker=CHECK + "\nab.assignments.check_bleu(f)")))
    package_before = package_file.read_bytes()
    # the grader's own temporary folder: everything it leaves behind (its run folders, of every worker) is there
    scratch = Path(tempfile.mkdtemp(prefix="grade-scratch-", dir="/tmp"))
    scratch.chmod(0o755)
    start = time.monotonic()
    # several notebooks at once (--jobs JOBS): the hostile class also attacks the parallel grader
    proc = subprocess.Popen([str(clone / ".venv" / "bin" / "python"), str(clone / "scripts" / "grade.py"), str(subs),
                             "--out", str(out / "grades.csv"), "--timeout", str(TIMEOUT), "--reference",
                             str(reference), "--memory-gb", "3", "--disk-mb", "256", "--seed", str(SEED),
                             "--jobs", str(JOBS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(clone / "src"), TMPDIR=str(scratch)), cwd=clone)
    stdout, stderr = proc.communicate()
    run = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    seconds = time.monotonic() - start
    assert run.returncode == 0, run.stderr[-3000:]
    orphans = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    with (out / "grades.csv").open(newline="", encoding="utf-8") as f:
        rows = [dict(r, passed=int(r["passed"]), total=int(r["total"]),
                     points=float(r["points"]) if r["points"] else "") for r in csv.DictReader(f)]
    journal = [json.loads(line) for line in (out / "grades.jsonl").read_text().splitlines()]
    run_folders = sorted(scratch.glob("grade-run-*"))
    shutil.rmtree(scratch, ignore_errors=True)
    texts = [run.stdout, run.stderr] + [p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()]
    unchanged = package_file.read_bytes() == package_before
    shutil.rmtree(clone, ignore_errors=True)
    return dict(rows=rows, out=out, seconds=seconds, count=len(class_) + len(unreadable), victim=victim,
                package_unchanged=unchanged, orphans=orphans, journal=journal, run_folders=run_folders,
                bob_text=victim.read_text(), stdout=run.stdout, texts=texts, token=token)
def row(graded, who: str) -> dict:
    found = [r for r in graded["rows"] if r["student"] == who]
    assert len(found) == 1, f"{who}: {len(found)} rows: {found}"
    return found[0]


def detail(graded, who: str) -> str:
    """Every reason the judge gave for a student's failed cases, as the instructor sees them (grades.jsonl)."""
    return " ".join(c.get("detail", "") + " " + c.get("why", "") for r in graded["journal"] if r["student"] == who
                    for c in r.get("cases", []))


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_every_student_gets_what_their_outputs_earn(graded):
    good, wrong, stops = earned(GOOD), earned(WRONG), earned(STOPS)
    total = good[1]
    assert good == (total, total) and 0 < wrong[0] < total and stops[0] <= 2
    for who in ("quinn-huge-checker", "rex-resources"):  # their own cells may outlast the limit: their row only
        r = row(graded, who)
        assert (r["passed"], r["status"]) == (total, "graded") or r["status"] in ("timeout", "no results", "memory"), r
    for who in ("bob", "ivy-extra-name", "kim-background", "'=cmd|' -C calc'!A0", "a b", "yan-subclass",
                "uma-writes-the-pipe"):
        r = row(graded, who)
        assert (r["passed"], r["total"], r["status"]) == (total, total, "graded"), r
        assert r["points"] == 10.0
    assert not any("INJECTED" in text for text in graded["texts"]), "a kernel wrote into the grader's pipe"
    for who in ("carl-wrong", "aaa-rewrites-bob"):
        r = row(graded, who)
        assert (r["passed"], r["total"], r["status"]) == (*wrong, "graded"), r
    r = row(graded, "dana-raises")
    assert (r["passed"], r["total"]) == (0, total) and "raised ValueError" in r["reason"]
    assert "oops" not in r["reason"], "a hidden case's feedback carries the exception's text (it could carry inputs)"
    for who in ("gus-forged-log", "hal-own-checks"):
        r = row(graded, who)
        assert (r["passed"], r["total"], r["points"], r["status"]) == (0, total, 0.0, "not implemented"), r
    for who in ("max-hands-in-package", "ned-wraps-package", "ola-wraps-tiled"):
        r = row(graded, who)
        assert r["passed"] == 0 and r["total"] == total and r["points"] == 0.0, r
    assert "package's own function" in row(graded, "max-hands-in-package")["reason"]
    assert "called the package's masked_softmax, which this assignment blocks" in detail(graded, "ned-wraps-package")
    assert "called the package's tiled_attention, which this assignment blocks" in detail(graded, "ola-wraps-tiled")
    # stops after two honest cases: scored over every case, never more than the honest code
    r = row(graded, "kai-stops-after-two")
    assert (r["passed"], r["total"], r["status"]) == (stops[0], total, "graded"), r
    assert r["points"] <= row(graded, "bob")["points"] and r["points"] == round(10 * stops[0] / total, 2)
    # reload, exec of the module's file, gc and the call stack: none finds the answer or the checks
    r = row(graded, "vic-bypasses")
    assert (r["passed"], r["total"], r["status"]) == (0, total, "graded"), r
    assert "no way around the hidden tests worked" in detail(graded, "vic-bypasses"), r


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_broken_and_hostile_submissions_are_flagged_not_scored(graded):
    for who in ("erin-loop", "finn-gil"):
        r = row(graded, who)
        assert r["status"] == "timeout" and r["points"] == 0.0 and r["total"] == earned(GOOD)[1], r
    for who in ("oli-invalid-json", "pat-empty-list", "a_b", "nest-brackets", "meta-list",
                "meta-null", "tags-5", "source-dict", "source-ints"):
        assert row(graded, who)["status"] == "unreadable" and row(graded, who)["points"] == 0.0, row(graded, who)
    for who in ("x\\x0ay", "x y"):  # the same name once control characters are cleaned: refused, both
        r = row(graded, who)
        assert r["status"] == "refused" and r["points"] == "" and "rename" in r["reason"], r
    for who in ("pay-dag", "pay-stride0"):
        r = row(graded, who)
        assert (r["status"], r["points"]) == ("flagged", ""), r
        assert "malformed results" in r["reason"], r
    assert "nested more than" in row(graded, "pay-dag")["reason"]
    assert "does not match its bytes" in row(graded, "pay-stride0")["reason"]
    r = row(graded, "lea-prints-100mb")
    assert r["status"] in ("graded", "no results") and (r["points"] == 10.0 or r["status"] == "no results"), r


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_nobody_else_is_affected_and_nothing_survives(graded):
    assert graded["bob_text"] != "[]", "a submission rewrote another student's notebook"
    assert graded["package_unchanged"], "a submission edited the package"
    assert not graded["orphans"], f"a submission's background process survived grading: {graded['orphans']}"
    assert graded["seconds"] < graded["count"] * TIMEOUT, (
        f"grading took {graded['seconds']:.0f} s, more than the sum of the time limits")
    assignments = {r["assignment"] for r in graded["rows"]}
    assert assignments <= {"masked_softmax"}, f"unexpected assignment rows: {assignments}"
    # only SUBMISSIONS/<student>/<reference name> is graded: the rest is listed as ignored
    assert {r["notebook"] for r in graded["rows"]} == {"ch03_exercises.ipynb"}
    for name in ("ch99_bonus.ipynb", "ch07_extra.ipynb", "extra/ch03_exercises.ipynb"):
        assert f"ignored: tia-leaks-and-forges/{name}" in graded["stdout"], name
    assert not graded["run_folders"], f"run folders left behind: {graded['run_folders']}"


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_no_host_file_and_no_control_character_reaches_any_output(graded):
    r = row(graded, "tia-leaks-and-forges")
    assert (r["passed"], r["status"]) == (0, "graded") and "ValueError" in r["reason"], r
    for text in graded["texts"]:
        assert graded["token"] not in text and "root:" not in text
    lines = graded["stdout"].splitlines()
    total = earned(GOOD)[1]
    assert [line for line in lines if line.startswith("bob/")] == [f"bob/ch03_exercises.ipynb masked_softmax: "
                                                                  f"{total}/{total} cases (graded)"]
    assert not any("\x1b" in t or "\r" in t for t in graded["texts"][:1])
    for path in graded["out"].rglob("*"):
        if path.is_file():
            assert "\x1b" not in path.read_text(), path


@pytest.mark.slow
@pytest.mark.xdist_group("graded_class")
def test_files_are_well_formed_and_formula_safe(graded):
    out = graded["out"]
    with (out / "grades.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(graded["rows"]) == graded["count"]
    cells = [v for r in rows for v in r.values()]
    assert not [v for v in cells if v[:1] in ("=", "+", "@")], "a cell a spreadsheet would run as a formula"
    assert any(v.startswith("'=cmd") for v in cells)
    assert all(v.isprintable() for v in cells), [v for v in cells if not v.isprintable()]
    with (out / "gradebook.csv").open(newline="", encoding="utf-8") as f:
        book = list(csv.reader(f))
    assert book[0] == ["Student", "SIS Login ID", "Section", "ch03 masked_softmax (10 pts)",
                       "ch03 masked_softmax status"]
    points = {r[0]: r[3] for r in book[1:]}
    status = {r[0]: r[4] for r in book[1:]}
    assert points["bob"] == "10.0" and points["erin-loop"] == "0.0" and status["erin-loop"] == "timeout"
    assert len(points) == graded["count"]
    assert points["a b"] == "10.0" and points["x\\x0ay"] == "" and status["x y"] == "refused"
    # its code's words are not read for masked_softmax under bubblewrap (the package is sealed: i16)
    assert status["pay-dag"] == "flagged" and points["pay-dag"] == ""
    stems = sorted(p.stem for p in (out / "feedback").glob("*.md"))
    assert len(stems) == graded["count"] and len({s.rsplit("-", 1)[0] for s in stems if s.startswith("a_b")}) == 1
    feedback = next((out / "feedback").glob("carl-wrong-*.md")).read_text()
    assert "possible cause" in feedback and "Hidden case" in feedback


def hidden_run(tmp_path, name: str, fn, offset: int = 5, nonce: str = "n") -> dict:
    """The sandbox's part, here: the cases' arguments saved, ``fn`` run on them, its results loaded."""
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments(name, offset, nonce)))
    run_hidden(name, fn, str(tmp_path / "cases.bin"), str(tmp_path / "r.bin"))
    return load_results((tmp_path / "r.bin").read_bytes())


def test_judge_rejects_malformed_results(tmp_path):
    data = hidden_run(tmp_path, "masked_softmax", lambda X, *a: X)
    with pytest.raises(GradingError, match="another run"):
        judge("masked_softmax", 5, "other", data)
    with pytest.raises(GradingError, match="results for"):
        judge("masked_softmax", 5, "n", dict(data, records=data["records"][:-1]))
    with pytest.raises(GradingError, match="unknown form"):
        judge("masked_softmax", 5, "n", dict(data, records=[{"status": "passed"}] * len(data["records"])))
    with pytest.raises(GradingError, match="another run"):
        judge("masked_softmax", 5, "n", dict(data, nonce=torch.tensor([1, 2])))
    assert judge("masked_softmax", 5, "n", data).passed == 0


def test_only_the_arguments_enter_the_sandbox():
    spec = hidden_arguments("mlm_masking", 3, "n")
    assert spec["adapter"] == "attention_book.assignments.ch09:call_masking"
    loaded = grade_load(dump_data(spec))  # plain data: no function, no check
    assert set(loaded) == {"assignment", "nonce", "adapter", "cases"}
    assert all(set(case) == {"args", "kwargs"} for case in loaded["cases"])


def grade_load(payload: bytes):
    from attention_book.assignments.grading import load_data

    return load_data(payload)


def forged(header: str, blob: bytes = b"") -> bytes:
    head = header.encode()
    return DATA_MAGIC + len(head).to_bytes(8, "big") + head + blob


@pytest.mark.parametrize("kind", ["deep", "overclaim", "unknown-dtype", "pickle", "extra-bytes", "big-string",
                                  "bad-form", "cut-header"])
def test_results_load_only_plain_bounded_data(kind):
    record = {"status": "ok", "args": (), "got": None}
    payload = dump_data({"assignment": "masked_softmax", "nonce": "n", "records": [record]})
    if kind == "deep":
        payload = forged("[" * 100_000 + "]" * 100_000)
    elif kind == "overclaim":  # 8e8 elements promised, 2 bytes given: the shape must match the bytes
        payload = forged('{"$tensor": ["float16", [2, 2, 200000000], 2]}', b"\0\0")
    elif kind == "unknown-dtype":
        payload = forged('{"$tensor": ["meta", [1000000000], 0]}')
    elif kind == "pickle":  # what torch.save writes: never read (no pickle on the grader's side)
        buffer = io.BytesIO()
        torch.save({"assignment": "masked_softmax", "nonce": "n", "records": [record]}, buffer)
        payload = buffer.getvalue()
    elif kind == "extra-bytes":
        payload += b"\0" * 64
    elif kind == "big-string":
        payload = dump_data({"records": ["x" * 20_000]})
    elif kind == "bad-form":
        payload = forged('{"$class": "os.system"}')
    elif kind == "cut-header":
        payload = payload[:20]
    start = time.monotonic()
    with pytest.raises(GradingError):
        load_results(payload)
    assert time.monotonic() - start < 5


def test_results_round_trip_exactly():
    data = {"a": (torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.tensor([1.5], dtype=torch.bfloat16)),
            "b": [None, True, 3, float("nan"), float("-inf"), "s"], "c": torch.empty(0, 4),
            "d": torch.tensor([True, False]), "e": torch.randn(3, dtype=torch.float16)}
    back = grade_load(dump_data(data))
    assert torch.equal(back["a"][0], data["a"][0]) and back["a"][1].dtype == torch.bfloat16
    assert back["b"][:3] == [None, True, 3] and back["b"][3] != back["b"][3] and back["b"][4] == float("-inf")
    assert back["c"].shape == (0, 4) and torch.equal(back["d"], data["d"]) and torch.equal(back["e"], data["e"])
    assert isinstance(back["a"], tuple) and isinstance(back["b"], list)


def test_judge_process_survives_what_it_judges(tmp_path):
    namespace: dict = {"torch": torch}
    exec(SUBCLASS, namespace)
    (tmp_path / "cases.bin").write_bytes(dump_data(hidden_arguments("masked_softmax", 9, "n")))
    run_hidden("masked_softmax", namespace["my_masked_softmax"], str(tmp_path / "cases.bin"), str(tmp_path / "r.bin"))
    total = earned(GOOD)[1]
    with JudgeServer() as server:
        good = server.judge("masked_softmax", 9, "n", (tmp_path / "r.bin").read_bytes())
        junk = server.judge("masked_softmax", 9, "n", b"PK\x03\x04 not a zip")
        again = server.judge("masked_softmax", 9, "n", (tmp_path / "r.bin").read_bytes(), seconds=30)
    assert (good["status"], good["passed"], good["total"]) == ("graded", total, total)  # the subclass: a tensor
    assert junk["status"] == "flagged" and again == good


def test_package_copy_has_no_answer(tmp_path):
    package_without(["masked_softmax"], tmp_path)
    code = ("import importlib, attention_book as ab\n"
            "m = importlib.reload(ab.models.attention)\n"
            "space = {'__name__': 'attention_book.models.attention', '__package__': 'attention_book.models'}\n"
            "exec(compile(open(m.__file__).read(), m.__file__, 'exec'), space)\n"
            "for f in (ab.masked_softmax, m.masked_softmax, space['masked_softmax']):\n"
            "    try:\n        f(None)\n    except RuntimeError as e:\n        print('raises', 'not available' in str(e))\n"
            "print(ab.transpose_qkv.__name__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert run.stdout.split("\n")[:4] == ["raises True"] * 3 + ["transpose_qkv"], run.stderr[-2000:]


def test_in_place_writes_are_seen_outside(tmp_path):
    namespace: dict = {"torch": torch}
    exec(GOOD, namespace)

    def writes_in_place(X, *rest, **kwargs):
        out = namespace["my_masked_softmax"](X.clone(), *rest, **kwargs)
        X.zero_()
        return out

    honest = judge("masked_softmax", 9, "n", hidden_run(tmp_path, "masked_softmax", namespace["my_masked_softmax"], 9))
    report = judge("masked_softmax", 9, "n", hidden_run(tmp_path, "masked_softmax", writes_in_place, 9))
    assert honest.passed == honest.total and report.passed < report.total
    assert any("in place" in why for _, ok, why in report.results if not ok), report.results


def test_safe_cells_and_names():
    assert grade.safe("=1+1") == "'=1+1" and grade.safe("-2") == "'-2" and grade.safe("ok") == "ok"
    assert grade.safe(-2.5) == -2.5 and grade.safe("a\nb\x00") == "a b"
    assert grade.clean("\x1b[31mred\x1b[0m\u202eok") == "red ok"
    assert grade.display_name("x\ny") == "x\\x0ay" != grade.display_name("x y")
    names = grade.file_names(["a b", "a_b", "..", "A_B", "bea", "bea-2"])
    assert len(set(names.values())) == 6 and names["a b"].startswith("a_b-") and names[".."].startswith("student-")
    assert names == grade.file_names(["bea-2", "bea", "A_B", "..", "a_b", "a b"])  # stable, whatever the order
