"""Hidden tests: what runs beside a student's code, and what judges it elsewhere.

The grader (``scripts/grade.py``) builds each assignment's hidden cases in its own
process, from a seed chosen at grading time, and writes only their *arguments*
(:func:`hidden_arguments`) into the sandbox. There, after the student's cells,
:func:`run_hidden` calls the student's function on those arguments and saves the
outputs (plain tensors, numbers, strings and containers of those). Outside again,
:func:`judge_isolated` loads them (:func:`load_results`: plain types and dense
tensors of bounded size only) and applies the instructor's checks
(:func:`judge`) in a child process with time and memory limits. The checks and
the expected values never enter the student's kernel, so a forged log line, a
self-made ``run_checks`` call, a patched checker or a walk up the call stack finds
nothing to copy.

The package the sandbox sees is a copy (:func:`package_without`) in which the
package's own answer to each graded assignment (``BLOCKED``) is replaced by a
function that raises: reloading the module or executing its file gives that
function again, because the answer is not in the copy at all.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import io
import os
import pickle
import reprlib
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

import torch

from . import Case, Report, collect_cases, hidden_cases

__all__ = ["BLOCKED", "is_package_version", "package_without", "hidden_arguments", "resolve", "run_hidden",
           "load_results", "judge", "JudgeServer", "judge_isolated", "serve_judge", "GradingError", "RESULTS_LIMIT"]

# What each assignment asks students to write, where the package already has it.
BLOCKED: dict[str, list[str]] = {
    "softmax_pool": ["attention_book.experiments.lookup:attention_pool"],
    "nadaraya_watson": ["attention_book.models.kernels:nadaraya_watson"],
    "masked_softmax": ["attention_book.models.attention:masked_softmax"],
    "masked_cross_entropy": ["attention_book.models.seq2seq:masked_cross_entropy"],
    "bleu": ["attention_book.data.text:bleu", "attention_book.data.text:bleu_parts"],
    "split_heads": ["attention_book.models.attention:transpose_qkv"],
    "sinusoidal_encoding": ["attention_book.models.positional:sinusoidal_table"],
    "warmup_cosine": ["attention_book.core.train:warmup_cosine_factor"],
    "patchify": ["attention_book.models.vit:patchify"],
    "mlm_masking": ["attention_book.models.objectives:mask_for_mlm"],
    "merge_softmax": ["attention_book.models.tiled:merge_softmax"],
}
STATUSES = ("ok", "raised", "not_implemented", "package", "missing")
MAX_ITEMS = 100_000  # containers, numbers and strings in one results file (shared ones counted each time)
MAX_DEPTH = 24  # nesting of containers in one results file
RESULTS_LIMIT = 64 * 2**20  # bytes of one results file, and of all its tensors together
BLOCKED_MARK = "__blocked_answer__"  # attribute of the stand-in that replaces a blocked answer


class GradingError(ValueError):
    """A results file that is not what run_hidden writes: flagged, never scored."""


# --------------------------------------------------------------------------- the package the sandbox sees


def package_without(names, dest: Path) -> Path:
    """Copy the package into ``dest/attention_book`` with the package's answers to the assignments
    ``names`` replaced by functions that raise. Returns ``dest`` (the directory to put on sys.path)."""
    source = Path(__file__).resolve().parent.parent
    target = Path(dest) / "attention_book"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    from ..book.claims import REPORT_PATH

    if REPORT_PATH.is_file():  # the seed check's report lives outside the package in a clone
        shutil.copyfile(REPORT_PATH, target / "book" / "claims_report.json")
    by_file: dict[str, list[str]] = {}
    for name in names:
        for spec in BLOCKED.get(name, []):
            module, attr = spec.split(":")
            by_file.setdefault(module, []).append(attr)
    for module, attrs in by_file.items():
        path = target.joinpath(*module.split(".")[1:]).with_suffix(".py")
        path.write_text(_without_definitions(path.read_text(encoding="utf-8"), attrs, module), encoding="utf-8")
    return Path(dest)


def _without_definitions(code: str, attrs: list[str], module: str) -> str:
    """``code`` with each top-level ``def attr`` (decorators included) replaced by a stand-in."""
    lines = code.splitlines(keepends=True)
    spans = []
    for node in ast.parse(code).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in attrs:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            spans.append((start, node.end_lineno, node.name))
    missing = set(attrs) - {name for _, _, name in spans}
    if missing:
        raise RuntimeError(f"{module} defines no top-level function {sorted(missing)}; update BLOCKED")
    for start, end, name in sorted(spans, reverse=True):
        stand_in = (f"def {name}(*args, **kwargs):\n"
                    f"    raise RuntimeError('the package\\'s own {name} is not available while this assignment "
                    "is graded: the grade is for your implementation')\n\n\n"
                    f"{name}.{BLOCKED_MARK} = True\n")
        lines[start - 1:end] = [stand_in]
    return "".join(lines)


def _blocked_functions(name: str) -> list[Callable]:
    found = []
    for spec in BLOCKED.get(name, []):
        module, attr = spec.split(":")
        found.append(getattr(importlib.import_module(module), attr))
    return found


def is_package_version(name: str, fn: Any) -> bool:
    """Is ``fn`` the package's own implementation of what assignment ``name`` asks for (or, in the
    grader's sandbox, the stand-in that replaced it)?"""
    try:
        if getattr(fn, BLOCKED_MARK, False) is True:
            return True
        return any(fn is b or getattr(fn, "__wrapped__", None) is b for b in _blocked_functions(name))
    except Exception:  # an object whose attribute lookup raises is not the package's function
        return False


# --------------------------------------------------------------------------- outside: the cases' arguments


class _Placeholder:
    """Stands for the student's function while the grader collects a checker's cases."""


def hidden_arguments(name: str, offset: int, nonce: str) -> dict:
    """What enters the sandbox for assignment ``name``: the hidden cases' arguments only, and how
    the checker calls the student's function (directly, or through a module-level adapter)."""
    placeholder = _Placeholder()
    with hidden_cases(offset):
        call, cases = collect_cases(name, placeholder)
    if call is placeholder:
        adapter = None
    elif (isinstance(call, functools.partial) and call.args == (placeholder,) and not call.keywords
          and "<" not in call.func.__qualname__):
        adapter = f"{call.func.__module__}:{call.func.__qualname__}"
    else:
        raise RuntimeError(f"check_{name} calls the function through a closure; make its adapter a "
                           "module-level function passed with functools.partial(adapter, fn)")
    return {"assignment": name, "nonce": nonce, "adapter": adapter,
            "cases": [{"args": tuple(c.args), "kwargs": dict(c.kwargs)} for c in cases]}


# --------------------------------------------------------------------------- inside the sandbox


def resolve(expr: str, namespace: dict) -> Any:
    """The object a dotted name (``my_fn`` or ``ab.masked_softmax``) names in ``namespace``, or None."""
    parts = expr.split(".") if isinstance(expr, str) and expr else [""]
    if not all(p.isidentifier() for p in parts):
        return None
    obj = namespace.get(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part, None)
    return obj


def _plain(obj: Any, budget: list[int]) -> Any:
    """``obj`` reduced to what :func:`load_results` accepts: plain CPU tensors (a subclass becomes a
    ``torch.Tensor`` holding the same numbers), numbers, strings, None, and tuples/lists/dicts of those.
    Anything else becomes a string naming its type."""
    budget[0] -= 1
    if budget[0] < 0:
        return "<output cut: too many elements>"
    if isinstance(obj, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            if obj.device.type == "meta" or obj.layout != torch.strided or obj.is_quantized:
                return f"<a tensor that is not a dense tensor in memory ({obj.layout}, {obj.device.type})>"
            plain = torch.Tensor._make_subclass(torch.Tensor, obj.detach()) if type(obj) is not torch.Tensor \
                else obj.detach()
            return plain.to("cpu").contiguous().clone()
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) in (tuple, list):
        items = [_plain(x, budget) for x in obj]
        return tuple(items) if type(obj) is tuple else items
    if type(obj) is dict:
        return {str(k): _plain(v, budget) for k, v in obj.items()}
    return f"<{type(obj).__name__} object>"


def run_hidden(name: str, fn: Any, cases_path: str, out_path: str) -> None:
    """Beside the student's code: call ``fn`` on the hidden cases' arguments and save the outputs."""
    spec = torch.load(cases_path, weights_only=True)
    records: list[dict] = []
    if is_package_version(name, fn):
        records.append({"status": "package"})
    elif not callable(fn):
        records.append({"status": "missing", "error": f"expected your function, got {type(fn).__name__}"})
    else:
        call = fn
        if spec["adapter"]:
            module, attr = spec["adapter"].split(":")
            call = functools.partial(getattr(importlib.import_module(module), attr), fn)
        for case in spec["cases"]:
            args, kwargs = case["args"], case["kwargs"]
            try:
                got = call(*args, **kwargs)
            except NotImplementedError:
                records.append({"status": "not_implemented"})
                break
            except Exception as err:  # the student's code raised: a failed case, with its message
                records.append({"status": "raised", "error": f"{type(err).__name__}: {err}"[:300]})
                continue
            budget = [MAX_ITEMS]
            records.append({"status": "ok", "got": _plain(got, budget), "args": _plain(tuple(args), budget)})
    torch.save({"assignment": name, "nonce": spec["nonce"], "records": records}, out_path)


# --------------------------------------------------------------------------- outside again: loading and judging


def load_results(payload: bytes) -> dict:
    """Read a results file's bytes: a ``torch.save`` zip whose entries are stored, not compressed,
    loaded with ``weights_only`` (no code runs), holding only plain types and dense, compact CPU
    tensors, all of bounded size. Anything else raises :class:`GradingError`."""
    if not isinstance(payload, (bytes, bytearray)) or len(payload) > RESULTS_LIMIT:
        raise GradingError(f"the results file is larger than {RESULTS_LIMIT // 2**20} MB")
    try:
        entries = zipfile.ZipFile(io.BytesIO(payload)).infolist()
    except Exception as err:
        raise GradingError(f"the results file is not what the grader writes ({type(err).__name__})") from None
    if len(entries) > 10_000:
        raise GradingError("the results file has too many entries")
    if any(e.compress_type != zipfile.ZIP_STORED for e in entries):
        raise GradingError("the results file has a compressed entry (the grader writes none)")
    if sum(e.file_size for e in entries) > RESULTS_LIMIT:
        raise GradingError(f"the results file unpacks to more than {RESULTS_LIMIT // 2**20} MB")
    try:
        data = torch.load(io.BytesIO(bytes(payload)), weights_only=True)
    except Exception as err:
        raise GradingError(f"the results file cannot be read safely ({type(err).__name__})") from None
    data = _checked(data, [MAX_ITEMS, RESULTS_LIMIT], 0)
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise GradingError("the results file does not hold a list of records")
    return data


def _checked(obj: Any, budget: list[int], depth: int) -> Any:
    """A fresh copy of ``obj`` if it holds only what run_hidden writes, else GradingError."""
    budget[0] -= 1
    if budget[0] < 0:
        raise GradingError(f"the results hold more than {MAX_ITEMS} items (counting shared ones each time)")
    if depth > MAX_DEPTH:
        raise GradingError(f"the results are nested more than {MAX_DEPTH} levels deep")
    kind = type(obj)
    if obj is None or kind in (bool, int, float):
        return obj
    if kind is str:
        if len(obj) > 10_000:
            raise GradingError("the results hold a string of more than 10,000 characters")
        return obj
    if kind in (list, tuple):
        items = [_checked(x, budget, depth + 1) for x in obj]
        return items if kind is list else tuple(items)
    if kind is dict:
        if any(type(k) is not str for k in obj):
            raise GradingError("the results hold a dict key that is not a string")
        return {k: _checked(v, budget, depth + 1) for k, v in obj.items()}
    if kind is torch.Tensor:
        if obj.layout != torch.strided or obj.device.type != "cpu" or obj.is_quantized:
            raise GradingError(f"the results hold a tensor that is not a dense CPU tensor ({obj.layout}, "
                               f"{obj.device.type})")
        nbytes = obj.numel() * obj.element_size()
        if (not obj.is_contiguous() or obj.storage_offset() != 0
                or obj.untyped_storage().nbytes() != nbytes):
            raise GradingError("the results hold a tensor whose elements overlap or do not fill its storage "
                               "(the grader writes compact tensors)")
        budget[1] -= nbytes
        if budget[1] < 0:
            raise GradingError(f"the results' tensors hold more than {RESULTS_LIMIT // 2**20} MB")
        return obj.detach()
    raise GradingError(f"the results hold a {kind.__name__}, which the grader does not write")


def _restore_args(args: tuple, after: Any) -> None:
    """Put the student's view of the inputs after the call into the grader's copies, so checks
    that look for in-place writes see them."""
    if not isinstance(after, tuple) or len(after) != len(args):
        return
    for mine, theirs in zip(args, after):
        if (isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor)
                and mine.shape == theirs.shape and mine.dtype == theirs.dtype):
            mine.copy_(theirs)


def judge(name: str, offset: int, nonce: str, data: dict) -> Report:
    """The instructor's checks applied to loaded outputs (call :func:`load_results` first)."""
    if data.get("assignment") != name or type(data.get("nonce")) is not str or data["nonce"] != nonce:
        raise GradingError(f"the results are for {reprlib.repr(data.get('assignment'))} of another run, "
                           f"not for {name!r}")
    records = data["records"]
    with hidden_cases(offset):
        _, cases = collect_cases(name, None)
    if any(not isinstance(r, dict) or r.get("status") not in STATUSES for r in records):
        raise GradingError("a record has an unknown form")
    if len(records) == 1 and records[0]["status"] == "package":
        return Report(name, [(c.name, False, "you handed in the package's own function") for c in cases])
    if len(records) == 1 and records[0]["status"] == "missing":
        why = f"the function named in your checker cell is not there ({str(records[0].get('error', ''))[:100]})"
        return Report(name, [(c.name, False, why) for c in cases])
    stopped = bool(records) and records[-1]["status"] == "not_implemented"
    if len(records) > len(cases) or (len(records) != len(cases) and not stopped):
        raise GradingError(f"{len(records)} results for {len(cases)} cases")
    results: list[tuple[str, bool, str]] = []
    for case, record in zip(cases, records):
        results.append((case.name, *_verdict(case, record)))
    return Report(name, results, not_implemented=stopped)


def _verdict(case: Case, record: dict) -> tuple[bool, str]:
    status = record["status"]
    if status == "not_implemented":
        return False, "not implemented yet"
    if status in ("package", "missing"):
        return False, "a record of the wrong kind"
    if status == "raised":
        return False, f"raised {str(record.get('error', ''))[:300]}"
    try:
        _restore_args(tuple(case.args), record.get("args"))
        why = case.check(record.get("got"))
    except Exception as err:  # an output of a shape the check did not foresee
        why = f"the result could not be checked ({type(err).__name__}: {str(err)[:120]})"
    if why is None:
        return True, ""
    return False, str(why)[:600] + (f" — hint: {case.hint}" if case.hint else "")


def _judge_limited(name: str, offset: int, nonce: str, payload: bytes, seconds: int, memory: int) -> dict:
    """In a forked child: set the limits, then load and judge; a plain dict, whatever the payload."""
    try:
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (size + memory, size + memory))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError, StopIteration):
        pass  # limits this system refuses: the server's wall-clock timeout still holds
    try:
        report = judge(name, offset, nonce, load_results(payload))
        return {"status": "not implemented" if report.not_implemented else "graded", "passed": report.passed,
                "total": report.total, "failures": [(n, why) for n, ok, why in report.results if not ok]}
    except GradingError as err:
        return {"status": "flagged", "reason": f"malformed results: {err}"}
    except MemoryError:
        return {"status": "flagged", "reason": "judging these results needs more memory than allowed"}
    except BaseException as err:  # noqa: BLE001  any other failure is this submission's alone
        return {"status": "flagged", "reason": f"the results could not be judged ({type(err).__name__}: "
                                               f"{str(err)[:150]})"}


def _read_exactly(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 2**20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _frame(obj) -> bytes:
    data = pickle.dumps(obj)
    return struct.pack(">Q", len(data)) + data


def _unframe(fd: int):
    (size,) = struct.unpack(">Q", _read_exactly(fd, 8))
    return pickle.loads(_read_exactly(fd, size))


def serve_judge() -> None:
    """The judge server (``python -c "...; serve_judge()"``): reads requests on stdin, judges each in a
    forked child with its limits, answers on stdout. It never runs a parallel torch operation itself,
    so forking it is safe, and torch and the checkers load once."""
    answers = os.dup(1)
    os.dup2(2, 1)  # anything printed goes to stderr, not into the answers
    torch.set_num_threads(1)
    while True:
        try:
            name, offset, nonce, payload, seconds, memory = _unframe(0)
        except EOFError:
            return
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                out = _frame(_judge_limited(name, offset, nonce, payload, seconds, memory))
                view = memoryview(out)
                while view:
                    view = view[os.write(write, view):]
            finally:
                os._exit(0)
        os.close(write)
        out = {"status": "flagged", "reason": f"judging these results took longer than {seconds} s"}
        buffer, deadline = b"", time.monotonic() + seconds + 2
        while time.monotonic() < deadline:
            ready, _, _ = select.select([read], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                continue
            chunk = os.read(read, 2**20)
            if not chunk:
                break
            buffer += chunk
        else:
            buffer = None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _, code = os.waitpid(pid, 0)
        os.close(read)
        if buffer is not None:
            try:
                (size,) = struct.unpack(">Q", buffer[:8])
                out = pickle.loads(buffer[8:8 + size])
            except Exception:
                out = {"status": "flagged", "reason": "judging these results ran out of memory or crashed "
                                                      f"(wait status {code})"}
        os.write(answers, _frame(out))


class JudgeServer:
    """The grader's side of :func:`serve_judge`: one server process, restarted if it ever fails."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None

    def judge(self, name: str, offset: int, nonce: str, payload: bytes, seconds: int = 60,
              memory: int = 4 * 2**30) -> dict:
        """:func:`load_results` and :func:`judge` in a child limited to ``seconds`` (wall and CPU) and
        ``memory`` bytes. Returns ``{"status", "passed", "total", "failures"}`` or ``{"status":
        "flagged", "reason"}``; never raises for anything in ``payload``."""
        for attempt in range(2):
            if self.proc is None or self.proc.poll() is not None:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", "from attention_book.assignments.grading import serve_judge; "
                                           "serve_judge()"],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"))
            try:
                self.proc.stdin.write(_frame((name, offset, nonce, bytes(payload), seconds, memory)))
                self.proc.stdin.flush()
                ready, _, _ = select.select([self.proc.stdout], [], [], seconds + 120)
                if ready:
                    return _unframe(self.proc.stdout.fileno())
            except (OSError, EOFError, pickle.UnpicklingError, struct.error):
                pass
            self.close()
        return {"status": "flagged", "reason": "the judge failed twice on these results"}

    def close(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def judge_isolated(name: str, offset: int, nonce: str, payload: bytes, seconds: int = 60,
                   memory: int = 4 * 2**30) -> dict:
    """:meth:`JudgeServer.judge` with a server of its own (started and stopped for this one call)."""
    with JudgeServer() as server:
        return server.judge(name, offset, nonce, payload, seconds, memory)
