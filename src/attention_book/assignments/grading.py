"""Hidden tests: what runs beside a student's code, and what judges it elsewhere.

The grader (``scripts/grade.py``) executes a submitted notebook in a sandbox and
then, in the same kernel, calls :func:`run_hidden`: the checker's cases are
built from a seed the grader chose at grading time, the student's function is
called on each, and only the *outputs* (tensors, numbers, strings, tuples,
lists, dicts) are written to a file. The grader loads that file with
``torch.load(weights_only=True)`` (no code runs while loading) and calls
:func:`judge` in its own process, which rebuilds the same cases and applies the
instructor's checks. The student's process never computes a verdict, so a
forged log line, a self-made ``run_checks`` call or a patched checker changes
nothing.

While the student's function runs on the hidden cases, the package's own
implementation of what the assignment asks for (``BLOCKED``) raises instead
of answering, and handing in the package's function itself is flagged.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable

import torch

from . import Case, Report, collect_cases, hidden_cases

__all__ = ["BLOCKED", "is_package_version", "resolve", "run_hidden", "judge", "GradingError"]

# What each assignment asks students to write, where the package already has it.
BLOCKED: dict[str, list[str]] = {
    "softmax_pool": ["attention_book.lookup:attention_pool"],
    "nadaraya_watson": ["attention_book.kernels:nadaraya_watson"],
    "masked_softmax": ["attention_book.attention:masked_softmax"],
    "masked_cross_entropy": ["attention_book.seq2seq:masked_cross_entropy"],
    "bleu": ["attention_book.text:bleu", "attention_book.text:bleu_parts"],
    "split_heads": ["attention_book.attention:transpose_qkv"],
    "sinusoidal_encoding": ["attention_book.positional:sinusoidal_table"],
    "warmup_cosine": ["attention_book.transformer:warmup_cosine_factor"],
    "patchify": ["attention_book.vit:patchify"],
    "mlm_masking": ["attention_book.objectives:mask_for_mlm"],
    "merge_softmax": ["attention_book.tiled:merge_softmax"],
}
STATUSES = ("ok", "raised", "not_implemented", "package", "missing")
MAX_ITEMS = 100_000  # elements of all containers in one output, beyond which it is cut


class GradingError(ValueError):
    """A results file that is not what run_hidden writes: flagged, never scored."""


def _blocked_functions(name: str) -> list[Callable]:
    found = []
    for spec in BLOCKED.get(name, []):
        module, attr = spec.split(":")
        found.append(getattr(importlib.import_module(module), attr))
    return found


def _unavailable(*args, **kwargs):
    # Runs with the blocked function's globals: only literals and builtins here.
    raise RuntimeError("the package's own version is not available while this assignment is graded: "
                       "the grade is for your implementation")


@contextlib.contextmanager
def _without(functions: list[Callable], name: str):
    """Make each function raise while the block runs (its code object is swapped, so a
    reference the student saved earlier raises too)."""

    saved = []
    for fn in functions:
        code = getattr(fn, "__code__", None)
        if code is not None and not code.co_freevars:
            saved.append((fn, code))
            fn.__code__ = _unavailable.__code__.replace(co_name=code.co_name)
    try:
        yield
    finally:
        for fn, code in saved:
            fn.__code__ = code


def _plain(obj: Any, budget: list[int]) -> Any:
    """``obj`` reduced to what ``torch.load(weights_only=True)`` reads back: tensors (CPU copies),
    numbers, strings, None, and tuples/lists/dicts of those. Anything else becomes a string."""
    budget[0] -= 1
    if budget[0] < 0:
        return "<output cut: too many elements>"
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True) if obj.device.type != "meta" else "<a tensor on the meta device>"
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (tuple, list)):
        items = [_plain(x, budget) for x in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    if isinstance(obj, dict):
        return {str(k): _plain(v, budget) for k, v in obj.items()}
    return f"<{type(obj).__name__} object>"


def is_package_version(name: str, fn: Any) -> bool:
    """Is ``fn`` the package's own implementation of what assignment ``name`` asks for?"""
    return any(fn is b or getattr(fn, "__wrapped__", None) is b for b in _blocked_functions(name))


def resolve(expr: str, namespace: dict) -> Any:
    """The object a dotted name (``my_fn`` or ``ab.masked_softmax``) names in ``namespace``, or None."""
    parts = expr.split(".") if expr else [""]
    if not all(p.isidentifier() for p in parts):
        return None
    obj = namespace.get(parts[0])
    for part in parts[1:]:
        obj = getattr(obj, part, None)
    return obj


def run_hidden(name: str, fn: Any, offset: int, out_path: str) -> None:
    """Beside the student's code: call ``fn`` on the hidden cases and save the outputs."""
    blocked = _blocked_functions(name)
    records: list[dict] = []
    if is_package_version(name, fn):
        records.append({"status": "package"})
    elif not callable(fn):
        records.append({"status": "missing", "error": f"expected your function, got {type(fn).__name__}"})
    else:
        with hidden_cases(offset):
            call, cases = collect_cases(name, fn)
        with _without(blocked, name):
            for case in cases:
                try:
                    got = call(*case.args, **case.kwargs)
                except NotImplementedError:
                    records.append({"status": "not_implemented"})
                    break
                except Exception as err:  # the student's code raised: a failed case, with its message
                    records.append({"status": "raised", "error": f"{type(err).__name__}: {err}"[:300]})
                    continue
                budget = [MAX_ITEMS]
                records.append({"status": "ok", "got": _plain(got, budget), "args": _plain(tuple(case.args), budget)})
    torch.save({"assignment": name, "offset": offset, "records": records}, out_path)


def _restore_args(args: tuple, after: Any) -> None:
    """Put the student's view of the inputs after the call into the grader's copies, so checks
    that look for in-place writes see them."""
    if not isinstance(after, tuple) or len(after) != len(args):
        return
    for mine, theirs in zip(args, after):
        if (isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor)
                and mine.shape == theirs.shape and mine.dtype == theirs.dtype):
            mine.copy_(theirs)


def load_results(path) -> dict:
    """Read a results file safely (``weights_only``: tensors and plain containers only)."""
    try:
        data = torch.load(path, weights_only=True)
    except Exception as err:
        raise GradingError(f"the results file cannot be read safely: {type(err).__name__}: {str(err)[:200]}")
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise GradingError("the results file does not hold a list of records")
    return data


def judge(name: str, offset: int, data: dict) -> Report:
    """In the grader's process: the instructor's checks applied to the saved outputs."""
    if data.get("assignment") != name or data.get("offset") != offset:
        raise GradingError(f"the results are for {data.get('assignment')!r} with another seed, not for {name!r}")
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
    if status == "raised":
        return False, f"raised {str(record.get('error', ''))[:300]}"
    _restore_args(tuple(case.args), record.get("args"))
    try:
        why = case.check(record.get("got"))
    except Exception as err:  # an output of a shape the check did not foresee
        why = f"the result could not be checked ({type(err).__name__}: {str(err)[:120]})"
    if why is None:
        return True, ""
    return False, why + (f" — hint: {case.hint}" if case.hint else "")
