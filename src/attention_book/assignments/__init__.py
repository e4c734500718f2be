"""Autograded assignments: checkers that explain, not just assert.

Each chapter's checkers live in ``assignments/chNN.py`` and are collected here,
so a notebook calls ``ab.assignments.check_masked_softmax(my_fn)``.

A checker runs the learner's function on several :class:`Case` s and prints one
line per case: a tick, or a cross with what was expected, what came back and a
hint. It returns a :class:`Report` (truthy when every case passed) whose
``score`` is the fraction of *all* cases passed: a case whose call raises, whatever
the exception, is a failed case, and every case runs. A function that still raises
``NotImplementedError`` is reported as "Not done yet" (0 of n cases) instead of a
crash.

Every case's inputs are drawn from :func:`case_seed`, so the grader's hidden run
(:func:`hidden_cases`) asks other questions than the ones a student sees; a case's
``label`` describes it without its inputs (the grader's feedback shows only that).

The grader (``scripts/grade.py``) does not trust what a student's kernel
prints or reports: it asks each checker for its cases with inputs drawn from a
seed chosen at grading time (:func:`case_seed`, :func:`hidden_cases`), runs the
student's function on them in a sandbox and judges the outputs in its own
process (:mod:`attention_book.assignments.grading`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect
import math
import pkgutil
import reprlib
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

__all__ = ["Case", "Report", "run_checks", "compare", "case_seed", "case_generator", "hidden_cases", "collect_cases"]

# The name of the check_<name> function running now: the grader files reports under it.
_CHECKER = contextvars.ContextVar("checker", default="")
# Added to every case seed: 0 for the cases students see, a secret number in the grader's hidden run.
_HIDDEN = contextvars.ContextVar("hidden_offset", default=0)
# When set (a list), run_checks records (function to call, cases) there instead of running them.
_COLLECT: contextvars.ContextVar[list | None] = contextvars.ContextVar("collect", default=None)


def case_seed(base: int) -> int:
    """The seed of a checker's case inputs: ``base`` for the cases students see, moved by
    the grader's secret offset inside :func:`hidden_cases`."""
    return base + _HIDDEN.get()


def case_generator(base: int) -> torch.Generator:
    """A generator seeded with :func:`case_seed` ``(base)``: a checker draws every input of
    every case from it (shapes, sizes and values), so no hidden case repeats a visible one."""
    return torch.Generator().manual_seed(case_seed(base))


def draw(gen: torch.Generator, low: int, high: int) -> int:
    """An integer in [low, high] drawn from ``gen``."""
    return int(torch.randint(low, high + 1, (1,), generator=gen))


@contextlib.contextmanager
def hidden_cases(offset: int):
    """Checkers called inside this block draw their inputs from other seeds (the hidden tests)."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a non-negative int, got {offset!r}")
    token = _HIDDEN.set(offset)
    try:
        yield
    finally:
        _HIDDEN.reset(token)


def collect_cases(name: str, fn: Callable | None = None) -> tuple[Callable | None, list[Case]]:
    """The cases ``check_<name>`` would run, and the callable it would run them on, without
    running anything (``fn`` may be None when only the cases are needed)."""
    checker = globals().get(f"check_{name}")
    if checker is None:
        raise ValueError(f"no assignment named {name!r}; known: {sorted(assignment_names())}")
    box: list = []
    token = _COLLECT.set(box)
    try:
        checker(fn, verbose=False)
    finally:
        _COLLECT.reset(token)
    if len(box) != 1:
        raise RuntimeError(f"check_{name} ran run_checks {len(box)} times; expected once")
    return box[0]


def assignment_names() -> list[str]:
    """Every assignment's name (``check_<name>`` exists for each)."""
    return [n[len("check_"):] for n in __all__ if n.startswith("check_")]


# the words a case's reason begins with when the function wrote into an input it must leave as it is (a
# case's ``unchanged`` begins with them, then says how to avoid it; the grader's hidden-case reason too)
IN_PLACE = "your function changed its input in place"


@dataclass
class Case:
    """One test case: call ``fn(*args, **kwargs)``; ``check(got)`` returns ``None``
    when the answer is right, else a sentence saying what is wrong.

    Build ``check`` with :func:`compare` for the common "equal to a reference"
    case. ``hint`` is shown when the case fails. ``label`` is a short description
    of the case without its parameters (no sizes, lengths or values drawn from the
    seed): the grader's feedback names a hidden case by it alone. ``name`` is shown
    with the visible cases and must not reveal a hidden parameter either; it is the
    label when left empty. ``unchanged``, when set, is the reason the case fails if the
    function writes into a tensor argument: the arguments after the call are compared with
    a copy taken before it, and ``check`` always sees the arguments as they were before the
    call (the grader judges every case against its own untouched copy of the inputs).
    """

    name: str
    args: tuple = ()
    check: Callable[[Any], str | None] = lambda got: None
    kwargs: dict = field(default_factory=dict)
    hint: str = ""
    label: str = ""
    unchanged: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            self.label = self.name


@dataclass
class Report:
    assignment: str
    results: list[tuple[str, bool, str]]
    not_implemented: bool = False

    @property
    def passed(self) -> int:
        return sum(ok for _, ok, _ in self.results)

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def score(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def __bool__(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def __repr__(self) -> str:
        # One line: a checker cell ends with this value, under the lines it printed.
        done = f"{self.passed} of {self.total} cases passed"
        return f"{self.assignment}: not done yet ({done})" if self.not_implemented else f"{self.assignment}: {done}"

    def to_json(self) -> dict:
        return {
            "assignment": self.assignment,
            "passed": self.passed,
            "total": self.total,
            "score": self.score,
            "not_implemented": self.not_implemented,
            "failures": [{"case": n, "why": why} for n, ok, why in self.results if not ok],
        }


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother = 3, 6, 6, 6, 60, 60


def describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        if x.numel() <= 12:
            vals = [round(v, 4) if isinstance(v, float) else v for v in x.detach().cpu().flatten().tolist()]
            return f"tensor of shape {tuple(x.shape)}, dtype {x.dtype}, values {vals}"
        return f"tensor of shape {tuple(x.shape)}, dtype {x.dtype}"
    # Bounded before it is built: a list that holds itself many times over stays short.
    text = _SHORT.repr(x)
    return text if len(text) <= 120 else text[:117] + "..."


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do two tensors hold the same values (same dtype and shape; NaN equal to NaN)?"""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


class Diagnosis(str):
    """A check's reason (with values) that carries ``cause``: what went wrong, in words that hold no value
    of the case, so the grader's feedback may show it for a hidden case too."""

    def __new__(cls, text: str, cause: str):
        obj = super().__new__(cls, text)
        obj.cause = cause
        return obj


def compare(expected: Any, atol: float = 1e-5, rtol: float = 1e-4) -> Callable[[Any], str | None]:
    """A ``check`` that wants ``got`` equal to ``expected`` (tensors: same shape, same dtype, close
    values, no NaN)."""

    def check(got: Any) -> str | None:
        if isinstance(expected, torch.Tensor):
            if not isinstance(got, torch.Tensor):
                return f"expected a tensor, got {type(got).__name__}: {describe(got)}"
            if tuple(got.shape) != tuple(expected.shape):
                return f"expected shape {tuple(expected.shape)}, got shape {tuple(got.shape)}"
            if got.dtype != expected.dtype:
                return f"expected dtype {expected.dtype} (that of the inputs), got dtype {got.dtype}"
            if got.is_floating_point() and torch.isnan(got).any():
                return f"the result contains NaN: {describe(got)}"
            if not torch.allclose(got.detach().to(expected.dtype).cpu(), expected.cpu(), atol=atol, rtol=rtol):
                worst = (got.detach().to(expected.dtype).cpu() - expected.cpu()).abs().max().item()
                want, have = describe(expected), describe(got)
                if want == have:  # a summary that reads the same twice (a fresh learner, l1: noise)
                    return f"the values differ from the expected ones (largest difference {worst:.3g})"
                return f"expected {want}, got {have} (largest difference {worst:.3g})"
            return None
        if isinstance(expected, float):
            if not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=rtol, abs_tol=atol):
                return f"expected {expected:.6g}, got {describe(got)}"
            return None
        return None if got == expected else f"expected {describe(expected)}, got {describe(got)}"

    return check


def _as_checker(name: str, fn: Callable) -> Callable:
    """Wrap ``check_<name>`` so its reports are filed under ``<name>`` for grading."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from .grading import is_package_version

        quiet = kwargs.get("verbose", True) is False
        if args and not quiet and _COLLECT.get() is None and is_package_version(name, args[0]):
            print(_wrap(f"Note: this is the package's own {name.replace('_', ' ')}, not yours. It passes these "
                        "cases, but the grader gives it no points: hand in your own function.".split()))
        token = _CHECKER.set(name)
        try:
            return fn(*args, **kwargs)
        finally:
            _CHECKER.reset(token)

    return wrapper


NOT_DONE = "not done yet"  # the reason recorded for a case whose call raised NotImplementedError
_NOT_DONE_TAIL = "Replace `raise NotImplementedError` with your code, then run this cell again."
WIDTH = 88  # the longest line a checker prints: an output cell shows it unwrapped at 1280 px


def _wrap(chunks: Sequence[str], width: int = WIDTH) -> str:
    """``chunks`` joined by spaces into lines of at most ``width`` characters, broken only between
    chunks (so "(0 of 7 cases passed)." stays on one line)."""
    lines: list[str] = []
    for chunk in chunks:
        if lines and len(lines[-1]) + 1 + len(chunk) <= width:
            lines[-1] += " " + chunk
        else:
            lines.append(chunk)
    return "\n".join(lines)


def run_checks(assignment: str, fn: Callable, cases: Sequence[Case], verbose: bool = True) -> Report:
    """Run ``fn`` on every case, print a line per case, return the :class:`Report`.

    Every case counts: a call that raises (``NotImplementedError`` included) is a
    failed case, and the cases after it still run, so answering some cases and
    raising on the others never scores more than answering them all honestly.
    """
    box = _COLLECT.get()
    if box is not None:  # collect_cases: hand over the cases, run nothing
        box.append((fn, list(cases)))
        return Report(assignment, [])
    if not callable(fn):
        raise TypeError(f"{assignment}: expected your function, got {type(fn).__name__}")
    results: list[tuple[str, bool, str]] = []
    not_implemented = False
    watch = _PackageCalls(assignment, fn)
    from .grading import BlockedAnswer, torch_guard

    # the torch functions the assignment's text forbids are blocked here too (attacker r8: a mean
    # F.cross_entropy passed the checker and scored 0 when graded, with nothing said before)
    forbid = _Reusable(lambda: torch_guard(assignment))
    forbidden: set[str] = set()  # what the text forbids that the function used
    for case in cases:
        before = [a.clone() if isinstance(a, torch.Tensor) else None for a in case.args] if case.unchanged else []
        try:
            with watch, forbid:
                got = fn(*case.args, **case.kwargs)
            written = any(b is not None and not same_values(a, b) for a, b in zip(case.args, before))
            for a, b in zip(case.args, before):
                if b is not None:
                    a.copy_(b)  # the check, and a later run, see the inputs as they were
            why = Diagnosis(case.unchanged, case.unchanged) if written else case.check(got)
        except NotImplementedError:
            not_implemented = True
            why = NOT_DONE
        except BlockedAnswer as err:  # a torch function the text forbids: blocked here as the grader blocks it
            forbidden.add(str(err.name))
            results.append((case.name, False, "blocked: see the Note above"))
            continue
        except Exception as err:  # the learner's code raised: say where, and only that
            frame = traceback.extract_tb(err.__traceback__)[-1]
            why = f"raised {type(err).__name__}: {err} (line {frame.lineno} in {frame.name})"
            raised = True
        else:
            raised = False
        # a check that names the mistake itself (a Diagnosis' cause) needs no general hint beside it, and
        # an error needs none either: a case's hint is about a wrong value, not about the code raising
        named = bool(getattr(why, "cause", ""))
        hint = (f" — hint: {case.hint}" if case.hint and why not in (None, NOT_DONE) and not named and not raised
                else "")
        results.append((case.name, why is None, "" if why is None else why + hint))
    report = Report(assignment, results, not_implemented)
    if verbose:
        if not_implemented and report.passed == 0:
            # the student's own name for the function (chapter 10's merge_states checks merge_softmax)
            name = getattr(fn, "__name__", "")
            shown = assignment if not name.isidentifier() or name == assignment else f"{name} ({assignment})"
            # each sentence on lines of its own, none longer than WIDTH
            print(_wrap([f"Not done yet: {shown}", "is", "not", "implemented", "yet",
                         f"(0 of {report.total} cases passed)."]))
            print(_wrap(_NOT_DONE_TAIL.split()))
            return report
        if watch.called:  # first, where it is seen: under nine ticks it was missed (a fresh instructor, i16)
            names = " and ".join(sorted(watch.called))
            print(_wrap(f"Note: your function calls the package's own {names}, which the grader blocks: it "
                        "runs your function where the package's code is not available, and a blocked call scores "
                        "0 for the whole assignment. Write the computation with torch and Python.".split()))
        for words in sorted(forbidden):  # said once, with what the grader does (a fresh learner, l1)
            print(_wrap(f"Note: your function uses {words}, which this assignment's text forbids. Here and when "
                        "graded that call is blocked, and a blocked call scores 0 for the whole assignment. Write "
                        "the computation without it.".split()))
        for name, ok, why in results:
            print(f"  {'✔' if ok else '✘'} {name}" + ("" if ok else f": {why}"))
        print(f"{assignment}: {report.passed} of {report.total} cases passed"
              + (" here, and 0 when graded (see the Note above)." if watch.called else
                 ", and 0 when graded (see the Note above)." if forbidden else "."))
    return report


class _Reusable:
    """A context made afresh by ``make`` at each entry (a generator-based context manager is single-use)."""

    def __init__(self, make: Callable):
        self.make, self.stack = make, []

    def __enter__(self):
        self.stack.append(self.make())
        return self.stack[-1].__enter__()

    def __exit__(self, *exc):
        return self.stack.pop().__exit__(*exc)


class _PackageCalls:
    """A context that records the package functions called inside it whose code the grader's copy of the
    package does not hold (``grading.is_sealed``: every one but the grader's own and a few setup helpers): a
    function that uses the package passes the student's checker but scores 0 when graded, so the checker says
    so. Not used for the package's own function handed in whole (the checker notes that one already)."""

    def __init__(self, name: str, fn: Callable):
        from .grading import BLOCKED, is_package_version

        self.called: set[str] = set()
        self.root = str(Path(__file__).resolve().parent.parent)
        self.seen: dict[Any, str] = {}  # code object -> its qualified name if sealed, else ''
        # watch a graded assignment's function only (an ungraded exercise's answer may use the package)
        self.codes = name in BLOCKED and not is_package_version(name, fn)

    def _sealed(self, code) -> str:
        found = self.seen.get(code)
        if found is None:
            from .grading import is_sealed

            found, path = "", Path(code.co_filename)
            if path.is_relative_to(self.root) and path.suffix == ".py":
                module = ".".join(("attention_book", *path.relative_to(self.root).with_suffix("").parts))
                qualname = getattr(code, "co_qualname", code.co_name)  # Python 3.10: the bare name
                if is_sealed(module.removesuffix(".__init__"), qualname):
                    found = qualname.split(".<locals>.")[0]
            self.seen[code] = found
        return found

    def _profile(self, frame, event, arg):
        # the outermost call only: the package's bleu calling its bleu_parts is one call of bleu; a nested
        # function or a generator (resumed from the standard library's Counter) was reached through its parent
        qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
        if event == "call" and (name := self._sealed(frame.f_code)) and "<locals>" not in qualname and \
                not qualname.endswith(("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>")) and (
                frame.f_back is None or not self._sealed(frame.f_back.f_code)):
            # a lambda by its module (attacker r8: a module-level lambda of core.train went unreported)
            self.called.add(name if not name.endswith("<lambda>") else
                            f"{Path(frame.f_code.co_filename).stem}.{name}")

    def __enter__(self):
        self.before = sys.getprofile()
        if self.codes and self.before is None:  # never replace a profiler that someone else runs
            sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        if self.codes and self.before is None:
            sys.setprofile(None)
        return False


def _collect() -> None:
    """Import every ``chNN`` module and expose its ``check_*`` functions here."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("ch"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name in dir(module):
            if name.startswith("check_") and callable(getattr(module, name)):
                globals()[name] = _as_checker(name[len("check_"):], getattr(module, name))
                __all__.append(name)


_collect()
