"""Hidden tests: what runs beside a student's code, and what judges it elsewhere.

The grader (``scripts/grade.py``) builds each assignment's hidden cases in its own
process, from a seed it derives for each student and assignment, and writes only their
*arguments* (:func:`hidden_arguments`, in the format of :func:`dump_data`) into the
sandbox. There, after the student's cells, :func:`run_hidden` calls the student's
function on every case and saves one record per case (plain tensors, numbers, strings
and containers of those). Outside again, :func:`judge_isolated` loads them
(:func:`load_results`: a JSON header and raw tensor bytes, never pickle) and applies
the instructor's checks (:func:`judge`) in a child process with time and memory
limits. A case that did not run (it raised, or is missing) is a failed case: the
score is always over every case. The checks and
the expected values never enter the student's kernel, so a forged log line, a
self-made ``run_checks`` call, a patched checker or a walk up the call stack finds
nothing to copy.

The package the sandbox sees is a sealed copy (:func:`package_without`): the
package's own answer to each graded assignment (``BLOCKED``) is replaced by a
function that raises, and every other function and method keeps its signature
but no code (``SEALED_KEEP`` lists the few that keep theirs): reloading a module
or executing its file gives those stand-ins again, because the code is not in the
copy at all.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib
import json
import math
import os
import re
import reprlib
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from . import IN_PLACE, Case, Diagnosis, Report, collect_cases, hidden_cases, same_values

__all__ = ["BLOCKED", "SEALED_KEEP", "TORCH_BLOCKED", "torch_guard", "BlockedAnswer", "blocked_names", "is_package_version", "is_sealed", "package_without", "hidden_arguments", "resolve", "run_hidden",
           "load_results", "judge", "JudgeServer", "judge_isolated", "serve_judge", "GradingError", "RESULTS_LIMIT",
           "dump_data", "load_data", "grading_cases", "in_place_rule", "case_results", "describe_value"]

# What each assignment asks students to write, where the package already has it: the function
# itself and the package's other functions that compute the same thing by another route (a
# masked softmax is the weights of attention with the identity as keys and values, so the
# fused and tiled attention paths are blocked with it).
# ``attend`` is every attention module's core (its fused path included); ``next_token_distribution`` is a
# softmax with a temperature; the sliding window computes masked attention weights too.
_SOFTMAX_PATHS = ["attention_book.models.attention:_softmax_where", "attention_book.models.attention:attend",
                  "attention_book.models.tiled:online_softmax", "attention_book.models.tiled:softmax_block",
                  "attention_book.models.tiled:finish_softmax", "attention_book.models.tiled:tiled_forward",
                  "attention_book.models.decoding:next_token_distribution",
                  "attention_book.experiments.long_context:sliding_window_attention"]
BLOCKED: dict[str, list[str]] = {
    "softmax_pool": ["attention_book.experiments.lookup:attention_pool", *_SOFTMAX_PATHS],
    "nadaraya_watson": ["attention_book.models.kernels:nadaraya_watson",
                        "attention_book.experiments.long_context:feature_nadaraya_watson", *_SOFTMAX_PATHS],
    # the assignment says "build the mask from the positions i and j yourself": the package's masks go too
    # (key_mask, causal_mask, and the tiled path's _tile_mask, which is the sliding window itself)
    "masked_softmax": ["attention_book.models.attention:masked_softmax", "attention_book.models.attention:key_mask",
                       "attention_book.models.attention:causal_mask", "attention_book.models.tiled:_tile_mask",
                       *_SOFTMAX_PATHS],
    # the language-model losses are _token_ce (F.cross_entropy with ignore_index) on a model's logits
    "masked_cross_entropy": ["attention_book.models.seq2seq:masked_cross_entropy",
                             "attention_book.models.objectives:_token_ce", "attention_book.models.objectives:clm_loss",
                             "attention_book.models.objectives:mlm_loss",
                             "attention_book.models.objectives:seq2seq_loss",
                             # the validation loss taken apart: its "loss" is the masked mean (attacker r4: 10/10)
                             "attention_book.experiments.translation:teacher_forced_scores"],
    "bleu": ["attention_book.data.text:bleu", "attention_book.data.text:bleu_parts"],
    "per_head_attention": ["attention_book.models.attention:transpose_qkv", *_SOFTMAX_PATHS],
    "encode_positions": ["attention_book.models.positional:sinusoidal_table",
                         "attention_book.models.positional:_frequencies"],
    "warmup_cosine": ["attention_book.core.train:warmup_cosine_factor"],
    "patchify": ["attention_book.models.vit:patchify"],
    "mlm_masking": ["attention_book.models.objectives:mask_for_mlm"],
    # softmax_block is also the merge, given each state's log-sum-exp as a score and acc / l as a value
    # (attacker r1: 10/10); the demo cell that builds its states with it runs in the student's own session
    "merge_softmax": ["attention_book.models.tiled:merge_softmax", "attention_book.models.tiled:tiled_forward",
                      "attention_book.models.tiled:softmax_block", "attention_book.models.tiled:finish_softmax",
                      "attention_book.models.tiled:online_softmax"],
}
# Torch operations an assignment's own text forbids, blocked while the grader calls the student's function, at
# the level every route reaches (PyTorch's dispatcher: F.conv2d, nn.Conv2d, ab.PatchEmbedding and torch.ops all
# end in aten.convolution): {assignment: {aten operation: the words the feedback uses}}. Chapter 8: "using only
# reshape and permute (no convolution, no unfold)"; chapter 4: "You may use F.cross_entropy(...,
# reduction="none"), but not its ignore_index" (a reduction other than "none", or a target holding the
# ignore_index, is blocked; F.nll_loss and nn.CrossEntropyLoss end in the same operation).
_CONVOLUTIONS = ("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "convolution_overrideable",
                 "mkldnn_convolution", "_slow_conv2d_forward", "thnn_conv2d", "_nnpack_spatial_convolution",
                 "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
TORCH_BLOCKED: dict[str, dict[str, str]] = {
    "patchify": {**{op: "torch's convolution (F.conv2d, nn.Conv2d, ab.PatchEmbedding)" for op in _CONVOLUTIONS},
                 "im2col": "torch's unfold (F.unfold, nn.Unfold)", "unfold": "torch's Tensor.unfold"},
    "masked_cross_entropy": {op: "F.cross_entropy or F.nll_loss with a reduction other than \"none\" or with "
                                 "its ignore_index" for op in ("nll_loss_forward", "nll_loss2d_forward")},
}
# The sandbox's copy of the package is sealed: every function and method of it, apart from the grader's own
# (``assignments``) and those below, keeps no code there, and calling one raises BlockedAnswer. The lists above
# name the routes someone found, and a fresh attacker (r7) found more: chapter 10's tile planner and its window
# figure both draw chapter 3's mask, and chapter 3's attention core does chapter 10's merge. No graded function
# needs the package (each is written with torch and Python), so none keeps it. Kept whole (module: qualified
# names, None for every one): what runs while the package is imported, and what the notebooks' setup cells
# call, which tests/test_grade_sealed.py traces.
SEALED_KEEP: dict[str, frozenset[str] | None] = {
    "attention_book.core.config": None,  # sized, book_seed, seed_everything, describe_run, small_model_threads
    "attention_book.book.claims": None,  # claim and glue, the chapters' bookkeeping cells
    # use_book_style and the inline figures it routes through fit_page in a kernel (attacker r8: sealed, the
    # setup cell stopped at its first line and ch10's `dev` was never defined); plotting only, no attention
    "attention_book.core.plot": None,
    "attention_book.core.train": frozenset({"use_progress_bar"}),  # a decorator, run at import
    "attention_book.data.registry": frozenset({"DataFile.__post_init__", "register"}),  # the datasets, at import
}
STATUSES = ("ok", "raised", "not_implemented", "package", "missing", "blocked", "too_large")
DATA_MAGIC = b"ABGRADE1"  # the first bytes of every file dump_data writes
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128, torch.uint8,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)}
MAX_ITEMS = 100_000  # containers, numbers and strings in one results file (shared ones counted each time)
MAX_DEPTH = 24  # nesting of containers in one results file
RESULTS_LIMIT = 64 * 2**20  # bytes of one results file, and of all its tensors together
BLOCKED_MARK = "__blocked_answer__"  # attribute of the stand-in that replaces a blocked answer


class GradingError(ValueError):
    """A results file that is not what run_hidden writes: flagged, never scored."""


class BlockedAnswer(RuntimeError):
    """Raised by the stand-in of a package function that the graded assignment blocks."""

    def __init__(self, name: str, forbidden: bool = False):
        # ``forbidden``: a torch function the assignment's text forbids (TORCH_BLOCKED), not the package's
        super().__init__(f"{name}: the assignment's text forbids it, so it is blocked while your function runs"
                         if forbidden else f"the package's own {name} is not available while this assignment is "
                         "graded: the grade is for your implementation")
        self.name = name


def blocked_names(name: str) -> set[str]:
    """The package functions assignment ``name`` blocks: its routes (``BLOCKED``), every checker module's
    functions, and the words naming the torch operations it blocks (``TORCH_BLOCKED``)."""
    names = {spec.split(":")[1] for spec in BLOCKED.get(name, [])}
    names |= set(TORCH_BLOCKED.get(name, {}).values())
    for path in Path(__file__).resolve().parent.glob("ch[0-9][0-9].py"):  # every chapter's checker module
        code = path.read_text(encoding="utf-8")
        names |= {n.name for n in ast.parse(code).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


# --------------------------------------------------------------------------- the package the sandbox sees


def package_without(names, dest: Path) -> Path:
    """Copy the package into ``dest/attention_book`` with the package's answers to the assignments
    ``names`` replaced by functions that raise, and every function the grader does not need sealed
    (:func:`is_sealed`, :func:`_without_code`). Returns ``dest`` (the directory to put on sys.path)."""
    source = Path(__file__).resolve().parent.parent
    target = Path(dest) / "attention_book"
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    from ..book.claims import REPORT_PATH

    if REPORT_PATH.is_file():  # the seed check's report lives outside the package in a clone
        shutil.copyfile(REPORT_PATH, target / "book" / "claims_report.json")
    by_file: dict[str, list[str]] = {}
    graded_modules = set()
    for name in names:
        for spec in BLOCKED.get(name, []):
            module, attr = spec.split(":")
            by_file.setdefault(module, []).append(attr)
        module, keep = _checker_module(name)
        graded_modules.add(module)
        path = target.joinpath(*module.split(".")[1:]).with_suffix(".py")
        by_file.setdefault(module, []).extend(_answer_helpers(path.read_text(encoding="utf-8"), keep))
    # every other chapter's checker module holds references too (attacker r1 handed in chapter 1's reference for
    # chapter 2's nadaraya_watson: 10/10): no notebook calls another chapter's checker, so all of their functions go
    for path in sorted((target / "assignments").glob("ch[0-9][0-9].py")):
        module = f"attention_book.assignments.{path.stem}"
        if module not in graded_modules:
            code = path.read_text(encoding="utf-8")
            by_file.setdefault(module, []).extend(
                n.name for n in ast.parse(code).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    for module, attrs in by_file.items():
        path = target.joinpath(*module.split(".")[1:]).with_suffix(".py")
        code = _without_definitions(path.read_text(encoding="utf-8"), sorted(set(attrs)), module)
        path.write_text(code, encoding="utf-8")
    for path in sorted(target.rglob("*.py")):
        module = ".".join(path.relative_to(target.parent).with_suffix("").parts).removesuffix(".__init__")
        if is_sealed(module):
            path.write_text(_without_code(path.read_text(encoding="utf-8"), SEALED_KEEP.get(module) or frozenset(),
                                          module), encoding="utf-8")
    return Path(dest)


def is_sealed(module: str, qualname: str = "") -> bool:
    """Does the sandbox's copy of the package hold no code for function ``qualname`` of ``module`` (or, with no
    ``qualname``, for some function of it)? Every module but the grader's own and SEALED_KEEP's."""
    if module == "attention_book.assignments" or module.startswith("attention_book.assignments."):
        return False
    keep = SEALED_KEEP.get(module, frozenset())
    return keep is not None and (not qualname or qualname.split(".<locals>.")[0] not in keep)


@functools.lru_cache(maxsize=1)
def sealed_functions() -> frozenset[str]:
    """The qualified names of the package's functions and methods that the sandbox's copy holds no code for
    (what a stand-in of :func:`_without_code` may name)."""
    root = Path(__file__).resolve().parent.parent
    names = set()
    for path in root.rglob("*.py"):
        module = ".".join(("attention_book", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")

        def visit(node, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if is_sealed(module, prefix + child.name):
                        names.add(prefix + child.name)
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                elif not isinstance(child, ast.Lambda):
                    visit(child, prefix)

        if is_sealed(module):
            visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return frozenset(names)


_RAISES = "raise __import__('attention_book.assignments.grading', fromlist=['_']).BlockedAnswer({!r})"
_LAMBDA = ("(lambda *_args, **_kwargs: (_ for _ in ()).throw(__import__('attention_book.assignments.grading', "
           "fromlist=['_']).BlockedAnswer({!r})))")


def _without_code(code: str, keep: frozenset[str], module: str = "") -> str:
    """``code`` with the body of every function and method (at any depth of classes; a nested function goes
    with its parent's body) and every lambda outside a function replaced by a raise of BlockedAnswer; the
    signatures, decorators, classes and module-level values stay, so the module still imports. ``keep``: the
    qualified names whose code stays."""
    spans: list[tuple[int, int, int, int, str]] = []  # (line, column, end line, end column, replacement)

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                if name not in keep:
                    first, last = child.body[0], child.body[-1]
                    inline = first.lineno == child.lineno  # def f(x): return x
                    spans.append((first.lineno, first.col_offset if inline else 0, last.end_lineno,
                                  last.end_col_offset, ("" if inline else " " * first.col_offset)
                                  + _RAISES.format(name)))
                visit_defaults(child)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.Lambda):
                spans.append((child.lineno, child.col_offset, child.end_lineno, child.end_col_offset,
                              _LAMBDA.format(f"{module.rsplit('.', 1)[-1]}.{prefix}<lambda>".lstrip("."))))
            else:
                visit(child, prefix)

    def visit_defaults(fn) -> None:  # a lambda in a default or a decorator runs outside the body
        for part in [*fn.decorator_list, *fn.args.defaults, *(d for d in fn.args.kw_defaults if d is not None)]:
            visit(ast.Module(body=[ast.Expr(part)], type_ignores=[]), "")

    visit(ast.parse(code), "")
    lines = re.split(r"(?<=\n)", code)  # ast's lines end at \n only (str.splitlines also at a form feed: r8)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def at(line: int, col: int) -> int:  # ast's columns count UTF-8 bytes
        return starts[line - 1] + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8", errors="ignore"))

    for line, col, end_line, end_col, text in sorted(spans, reverse=True):
        # from the last span back: the text before a span is never changed, so its positions hold
        code = code[:at(line, col)] + text + code[at(end_line, end_col):]
    return code


def torch_guard(name: str):
    """A context in which the torch operations assignment ``name`` forbids (``TORCH_BLOCKED``) raise
    :class:`BlockedAnswer`."""
    rules = TORCH_BLOCKED.get(name, {})

    @contextlib.contextmanager
    def guard():
        if not rules:
            yield
            return
        from torch.utils._python_dispatch import TorchDispatchMode

        class Forbid(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                op = func.overloadpacket.__name__
                words = rules.get(op)
                if words is not None and _forbidden(op, args, kwargs):
                    raise BlockedAnswer(words, forbidden=True)
                return func(*args, **kwargs)

        with Forbid(), _ReducedLoss(rules):
            yield

    return guard()


class _ReducedLoss:
    """Where an assignment blocks ``nll_loss`` (chapter 4: "You may use F.cross_entropy(..., reduction="none")"):
    F.cross_entropy and F.nll_loss called with another reduction, seen at torch's function level, where
    probability targets never reach ``nll_loss`` (attackers r2, r3, r4: soft targets with reduction="sum"
    scored 10/10). Binding the functions to other names changes nothing: the mode sees the call itself."""

    def __init__(self, rules: dict):
        self.words = rules.get("nll_loss_forward")
        self.mode = None

    def __enter__(self):
        if self.words is None:
            return self
        import torch.nn.functional as F
        from torch.overrides import TorchFunctionMode

        words, losses = self.words, {F.cross_entropy: 6, F.nll_loss: 6}  # where `reduction` sits positionally

        class Reduced(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func in losses:
                    legacy = [kwargs.get(k, args[i] if len(args) > i else None)
                              for i, k in ((3, "size_average"), (5, "reduce"))]
                    reduction = kwargs.get("reduction", args[losses[func]] if len(args) > losses[func] else "mean")
                    if reduction != "none" or any(v is not None for v in legacy):
                        raise BlockedAnswer(words, forbidden=True)
                return func(*args, **kwargs)

        self.mode = Reduced()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        if self.mode is not None:
            self.mode.__exit__(*exc)
        return False


def _forbidden(op: str, args: tuple, kwargs: dict) -> bool:
    """Does this call of a ``TORCH_BLOCKED`` operation do what the assignment forbids? A loss is allowed
    with reduction "none" (0) and a target that never holds its ignore_index; everything else always."""
    if op.startswith("nll_loss"):
        names = ("self", "target", "weight", "reduction", "ignore_index")
        given = dict(zip(names, args), **kwargs)
        target = given.get("target")
        ignored = isinstance(target, torch.Tensor) and bool((target == given.get("ignore_index", -100)).any())
        return given.get("reduction", 1) != 0 or ignored
    return True


def _checker_module(name: str) -> tuple[str, set[str]]:
    """The module that defines ``check_<name>``, and the top-level functions the sandbox needs from it:
    the checker itself and the adapter through which it calls the student's function."""
    registry = vars(importlib.import_module(__package__))

    checker = registry.get(f"check_{name}")
    if checker is None:
        raise ValueError(f"no assignment named {name!r}")
    original = getattr(checker, "__wrapped__", checker)
    keep = {original.__name__}
    call, _ = collect_cases(name, _Placeholder())
    if isinstance(call, functools.partial):
        keep.add(call.func.__name__)
    return original.__module__, keep


def _answer_helpers(code: str, keep: set[str]) -> list[str]:
    """The top-level functions of a checker module that the sandbox must not have: every one except those
    in ``keep`` and the functions they name (the checker's reference answer, its case builders...)."""
    bodies = {node.name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
              for node in ast.parse(code).body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    needed, todo = set(), [k for k in keep if k in bodies and not k.startswith("check_")]
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += [n for n in bodies[name] if n in bodies and not n.startswith("check_")]
    # the checker itself becomes a stand-in too: in the sandbox it has no cases to show
    return sorted(n for n in bodies if n not in needed)


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
                    "    from attention_book.assignments.grading import BlockedAnswer\n\n"
                    f"    raise BlockedAnswer({name!r})\n\n\n"
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


def grading_cases(name: str, offset: int, extra: str | None = None) -> tuple[Any, list[Case]]:
    """``(how the checker calls the function, cases)`` of assignment ``name`` at the hidden seed
    ``offset``: the checker's cases, then the instructor's extra cases for ``name`` from the Python
    file ``extra`` (it defines ``cases(name, seed) -> list[Case]``; see book/instructors.md). An extra
    case that leaves ``unchanged`` empty gets the in-place rule of the assignment's own cases (chapter 3's
    cases all fail a function that writes into its scores, so its extra cases do too)."""
    placeholder = _Placeholder()
    with hidden_cases(offset):
        call, cases = collect_cases(name, placeholder)
    if extra:
        module = _extra_module(str(extra))
        more = module.cases(name, offset) if hasattr(module, "cases") else []
        if not isinstance(more, (list, tuple)) or not all(isinstance(c, Case) for c in more):
            raise RuntimeError(f"{extra}: cases({name!r}, seed) must return a list of Case")
        rule = in_place_rule(cases)
        more = [c if c.unchanged or not rule else dataclasses.replace(c, unchanged=rule) for c in more]
        cases = list(cases) + more
    return (call, placeholder), cases


def in_place_rule(cases: list[Case]) -> str:
    """The reason an assignment's own cases fail a function that writes into its inputs: ``unchanged`` when
    every one of ``cases`` sets the same, else '' (an assignment that tests in-place writes in one case of
    its own, as chapter 9's does, leaves the other cases free to)."""
    rules = {c.unchanged for c in cases}
    return rules.pop() if len(rules) == 1 else ""


@functools.lru_cache(maxsize=8)
def _extra_module(path: str):
    """The instructor's extra-cases file, loaded once (it is the instructor's code, never a student's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_extra_cases_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hidden_arguments(name: str, offset: int, nonce: str, extra: str | None = None) -> dict:
    """What enters the sandbox for assignment ``name``: the hidden cases' arguments only, and how
    the checker calls the student's function (directly, or through a module-level adapter)."""
    (call, placeholder), cases = grading_cases(name, offset, extra)
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


# --------------------------------------------------------------------------- the results format (no pickle)


def dump_data(obj: Any) -> bytes:
    """``obj`` (None, bool, int, float, str, tuples, lists, dicts with string keys, dense tensors) as
    bytes: ``DATA_MAGIC``, the length of a JSON header, the header, then each tensor's raw bytes one
    after the other. Nothing in it is code: :func:`load_data` reads it back without pickle."""
    blobs: list[bytes] = []
    at = [0]

    def enc(x):
        if isinstance(x, torch.Tensor):
            t = x.detach().to("cpu").contiguous()
            if t.dtype == torch.bfloat16:
                raw = t.view(torch.int16).numpy().tobytes()
            else:
                raw = t.numpy().tobytes() if t.numel() else b""
            blobs.append(raw)
            at[0] += len(raw)
            return {"$tensor": [str(t.dtype).removeprefix("torch."), list(t.shape), len(raw)]}
        if x is None or type(x) in (bool, int, str):
            return x
        if type(x) is float:
            return x if math.isfinite(x) else {"$float": repr(x)}
        if type(x) is tuple:
            return {"$tuple": [enc(v) for v in x]}
        if type(x) is list:
            return [enc(v) for v in x]
        if type(x) is dict:
            return {"$dict": [[str(k), enc(v)] for k, v in x.items()]}
        raise TypeError(f"dump_data cannot write a {type(x).__name__}")

    header = json.dumps(enc(obj), separators=(",", ":")).encode("utf-8")
    return DATA_MAGIC + struct.pack(">Q", len(header)) + header + b"".join(blobs)


def load_data(payload: bytes, limit: int = RESULTS_LIMIT) -> Any:
    """Read :func:`dump_data`'s bytes: bounded in size, depth and items; tensors only of the listed
    dtypes, each exactly its bytes, laid end to end. Anything else raises :class:`GradingError`."""
    if not isinstance(payload, (bytes, bytearray)) or len(payload) > limit:
        raise GradingError(f"the results file is larger than {limit // 2**20} MB")
    payload = bytes(payload)
    if not payload.startswith(DATA_MAGIC) or len(payload) < len(DATA_MAGIC) + 8:
        raise GradingError("the results file is not what the grader writes (wrong format)")
    (size,) = struct.unpack(">Q", payload[len(DATA_MAGIC):len(DATA_MAGIC) + 8])
    start = len(DATA_MAGIC) + 8
    if size > len(payload) - start:
        raise GradingError("the results file's header is cut short")
    try:
        tree = json.loads(payload[start:start + size].decode("utf-8"))
    except RecursionError:
        raise GradingError(f"the results are nested more than {MAX_DEPTH} levels deep") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise GradingError(f"the results file's header is not JSON ({type(err).__name__})") from None
    blob = memoryview(payload)[start + size:]
    state = {"items": MAX_ITEMS, "at": 0}

    def dec(x, depth):
        state["items"] -= 1
        if state["items"] < 0:
            raise GradingError(f"the results hold more than {MAX_ITEMS} items")
        if depth > MAX_DEPTH:
            raise GradingError(f"the results are nested more than {MAX_DEPTH} levels deep")
        if x is None or type(x) in (bool, int, float):
            return x
        if type(x) is str:
            if len(x) > 10_000:
                raise GradingError("the results hold a string of more than 10,000 characters")
            return x
        if type(x) is list:
            return [dec(v, depth + 1) for v in x]
        if type(x) is dict and len(x) == 1:
            (key, value), = x.items()
            if key == "$tuple" and type(value) is list:
                return tuple(dec(v, depth + 1) for v in value)
            if key == "$dict" and type(value) is list and all(type(p) is list and len(p) == 2
                                                             and type(p[0]) is str for p in value):
                return {k: dec(v, depth + 1) for k, v in value}
            if key == "$float" and value in ("nan", "inf", "-inf"):
                return float(value)
            if key == "$tensor":
                return tensor(value)
        raise GradingError("the results hold a value of a form the grader does not write")

    def tensor(value):
        if not (type(value) is list and len(value) == 3 and value[0] in _DTYPES and type(value[1]) is list
                and all(type(n) is int and 0 <= n < 2**40 for n in value[1]) and type(value[2]) is int):
            raise GradingError("the results hold a tensor entry of an unknown form")
        dtype, shape, nbytes = _DTYPES[value[0]], value[1], value[2]
        if len(shape) > 16:
            raise GradingError("the results hold a tensor of more than 16 dimensions")
        count = math.prod(shape)
        if count * torch.empty((), dtype=dtype).element_size() != nbytes:
            raise GradingError("the results hold a tensor whose size does not match its bytes (the grader "
                               "writes each tensor's elements exactly once, with no overlap)")
        if state["at"] + nbytes > len(blob):
            raise GradingError("the results hold a tensor whose bytes are missing")
        raw = bytearray(blob[state["at"]:state["at"] + nbytes])
        state["at"] += nbytes
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        if dtype == torch.bfloat16:
            return torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16).reshape(shape).clone()
        return torch.frombuffer(raw, dtype=dtype).reshape(shape).clone()

    out = dec(tree, 0)
    if state["at"] != len(blob):
        raise GradingError("the results file has bytes that belong to no tensor")
    return out


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


class _TooLarge(Exception):
    """A result that cannot be sent back: ``what`` is "size" or "depth"."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


TOO_LARGE = {  # what the feedback says of a result run_hidden could not send back (fixed text: no values)
    "size": f"your function's result is too large to send back to the grader (more than {RESULTS_LIMIT // 2**20} "
            "MB of values; an expanded view counts every element it shows)",
    "depth": f"your function's result is nested more than {MAX_DEPTH} levels deep, too deep to send back",
    "total": f"the results of all cases together are larger than {RESULTS_LIMIT // 2**20} MB: this case's result "
             "could not be sent back",
}


def _plain(obj: Any, budget: list[int], depth: int = 0) -> Any:
    """``obj`` reduced to what :func:`load_results` accepts: plain CPU tensors (a subclass becomes a
    ``torch.Tensor`` holding the same numbers), numbers, strings, None, and tuples/lists/dicts of those.
    Anything else becomes a string naming its type. Raises :class:`_TooLarge` for a result larger than
    ``RESULTS_LIMIT`` or nested deeper than ``MAX_DEPTH``."""
    budget[0] -= 1
    if budget[0] < 0:
        return "<output cut: too many elements>"
    if depth > MAX_DEPTH:
        raise _TooLarge("depth")
    if isinstance(obj, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            if obj.device.type == "meta" or obj.layout != torch.strided or obj.is_quantized:
                return f"<a tensor that is not a dense tensor in memory ({obj.layout}, {obj.device.type})>"
            if obj.numel() * obj.element_size() > RESULTS_LIMIT:
                raise _TooLarge("size")
            plain = torch.Tensor._make_subclass(torch.Tensor, obj.detach()) if type(obj) is not torch.Tensor \
                else obj.detach()
            return plain.to("cpu").contiguous().clone()
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) in (tuple, list):
        items = [_plain(x, budget, depth + 1) for x in obj]
        return tuple(items) if type(obj) is tuple else items
    if type(obj) is dict:
        return {str(k): _plain(v, budget, depth + 1) for k, v in obj.items()}
    return f"<{type(obj).__name__} object>"


def run_hidden(name: str, fn: Any, cases_path: str, out_path: str) -> None:
    """Beside the student's code: call ``fn`` on the hidden cases' arguments and save the outputs."""
    with open(cases_path, "rb") as f:
        spec = load_data(f.read())
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
        sent = 0  # bytes of tensors in the records so far
        for case in spec["cases"]:
            args, kwargs = case["args"], case["kwargs"]
            try:
                with torch_guard(name):
                    got = call(*args, **kwargs)
            except NotImplementedError:  # a failed case; the other cases still run
                records.append({"status": "not_implemented"})
                continue
            except BlockedAnswer as err:  # a route to the package's answer
                records.append({"status": "blocked", "name": str(err.name)[:100]})
                continue
            except Exception as err:  # the student's code raised: a failed case, with its message
                records.append({"status": "raised", "error": f"{type(err).__name__}: {err}"[:300]})
                continue
            budget = [MAX_ITEMS]
            try:
                record = {"status": "ok", "got": _plain(got, budget), "args": _plain(tuple(args), budget),
                          "kwargs": _plain(dict(kwargs), budget)}
            except _TooLarge as err:
                record = {"status": "too_large", "what": err.what}
            except RecursionError:
                record = {"status": "too_large", "what": "depth"}
            size = sum(t.numel() * t.element_size() for t in _tensors(record))
            if sent + size > RESULTS_LIMIT - 2**20:
                record = {"status": "too_large", "what": "total"}
            sent += size if record["status"] == "ok" else 0
            records.append(record)
    data = dump_data({"assignment": name, "nonce": spec["nonce"], "records": records})
    with open(out_path, "wb") as f:
        f.write(data)


def _tensors(obj: Any):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


# --------------------------------------------------------------------------- outside again: loading and judging


def load_results(payload: bytes) -> dict:
    """Read a results file's bytes (:func:`load_data`: no pickle, no code, bounded sizes) and check it
    holds a dict with a list of records. Anything else raises :class:`GradingError`."""
    data = load_data(payload)
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise GradingError("the results file does not hold a list of records")
    return data


def _inputs_kept(args: tuple, after: Any, kwargs: dict | None = None, after_kwargs: Any = None) -> bool:
    """Did the student's function leave its tensor arguments, positional and keyword, as they were?
    ``after`` and ``after_kwargs`` are its view of them after the call (sent back by run_hidden); anything
    not comparable counts as written."""
    if not isinstance(after, tuple) or len(after) != len(args):
        return False
    tensors = {k: v for k, v in (kwargs or {}).items() if isinstance(v, torch.Tensor)}
    if tensors and not isinstance(after_kwargs, dict):
        return False
    pairs = [*zip(args, after), *((v, after_kwargs.get(str(k))) for k, v in tensors.items())]
    return all(not isinstance(mine, torch.Tensor) or (isinstance(theirs, torch.Tensor) and same_values(mine, theirs))
               for mine, theirs in pairs)


def judge(name: str, offset: int, nonce: str, data: dict, extra: str | None = None) -> Report:
    """The instructor's checks applied to loaded outputs (call :func:`load_results` first): a
    :class:`Report` over every case (a case that did not run is a failed case)."""
    results = case_results(name, offset, nonce, data, extra)
    return Report(name, [(r["name"] or f"hidden case {r['index']}", r["passed"], r.get("detail") or r["why"])
                         for r in results],
                  not_implemented=all(r["status"] == "not_implemented" for r in results))


def _same(a: Any, b: Any) -> bool:
    """Are two case arguments the same value (tensors: same dtype, shape and elements)?"""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and bool(torch.equal(a, b)))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:
        return False


def _visible_index(case: Case, visible: list[Case]) -> int | None:
    """The position of the case the student's checker shows with these very arguments, or None."""
    for i, seen in enumerate(visible):
        if _same(tuple(case.args), tuple(seen.args)) and _same(dict(case.kwargs), dict(seen.kwargs)):
            return i
    return None


def _expected_of(check: Callable, depth: int = 0) -> tuple[bool, Any]:
    """``(True, expected)`` when ``check`` is, or wraps, a :func:`compare` check; else ``(False, None)``."""
    closure = getattr(check, "__closure__", None) or ()
    names = getattr(getattr(check, "__code__", None), "co_freevars", ())
    cells = dict(zip(names, closure))
    if getattr(check, "__qualname__", "").startswith("compare.") and "expected" in cells:
        with contextlib.suppress(ValueError):
            return True, cells["expected"].cell_contents
    if depth < 3:
        for cell in closure:
            with contextlib.suppress(ValueError):
                inner = cell.cell_contents
                if callable(inner) and not isinstance(inner, type):
                    found = _expected_of(inner, depth + 1)
                    if found[0]:
                        return found
    return False, None


def _kind(dtype: torch.dtype) -> str:
    return ("bool" if dtype == torch.bool else "complex" if dtype.is_complex else
            "floating point" if dtype.is_floating_point else "integer")


def _structure_problem(expected: Any, got: Any, args: tuple, path: str = "the result") -> str | None:
    """What is wrong with the form of ``got`` against the expected answer (type, length, shape, dtype),
    or None. A floating-point result must have the expected dtype or the dtype of a tensor input."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"{path} should be a tensor, got {type(got).__name__}"
        if tuple(got.shape) != tuple(expected.shape):
            return f"{path} should have shape {tuple(expected.shape)}, got shape {tuple(got.shape)}"
        if _kind(got.dtype) != _kind(expected.dtype):
            return (f"{path} should be a {_kind(expected.dtype)} tensor ({expected.dtype}), got dtype {got.dtype}")
        if got.dtype.is_floating_point and got.dtype != expected.dtype:
            inputs = {a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()}
            if got.dtype not in inputs:
                return f"{path} should have dtype {expected.dtype}, got dtype {got.dtype}"
        return None
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)):
            return f"{path} should be a {type(expected).__name__} of {len(expected)}, got {type(got).__name__}"
        if len(got) != len(expected):
            return f"{path} should have {len(expected)} items, got {len(got)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            why = _structure_problem(e, g, args, f"item {i} of {path}")
            if why:
                return why
        return None
    if isinstance(expected, bool):
        return None if isinstance(got, bool) else f"{path} should be True or False, got {type(got).__name__}"
    if isinstance(expected, (int, float)):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"{path} should be a number, got {type(got).__name__}"
    return None


def describe_value(x: Any, limit: int = 4000) -> str:
    """``x`` written out whole for feedback (tensors with every value up to 512 of them); longer text is
    cut only between values, saying how many were left out."""
    if isinstance(x, torch.Tensor):
        head = f"tensor of shape {tuple(x.shape)}, dtype {str(x.dtype).removeprefix('torch.')}"
        if x.numel() == 0:
            return head + ", no values"
        if x.numel() > 512:
            flat = x.detach().flatten()
            finite = flat[torch.isfinite(flat)].double() if flat.is_floating_point() else flat.double()
            stats = (f", min {finite.min().item():.6g}, max {finite.max().item():.6g}" if finite.numel() else "")
            return head + f" ({x.numel()} values, too many to list{stats})"
        return head + ", values " + _nested(x.detach().cpu().tolist())
    if isinstance(x, (tuple, list)):
        parts, used = [], 0
        for i, item in enumerate(x):
            text = describe_value(item, limit)
            if used + len(text) > limit:
                parts.append(f"... ({len(x) - i} more items)")
                break
            parts.append(text)
            used += len(text)
        open_, close = ("(", ")") if isinstance(x, tuple) else ("[", "]")
        return open_ + ", ".join(parts) + (",)" if isinstance(x, tuple) and len(x) == 1 else close)
    if isinstance(x, float):
        return f"{x:.6g}"
    text = repr(x)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def _nested(values: Any) -> str:
    if isinstance(values, list):
        return "[" + ", ".join(_nested(v) for v in values) + "]"
    if isinstance(values, float):
        return f"{values:.6g}"
    return str(values)


def case_results(name: str, offset: int, nonce: str, data: dict, extra: str | None = None) -> list[dict]:
    """One dict per case of assignment ``name`` at seed ``offset``: ``index``, ``name``, ``label`` (a
    description without the case's parameters: what ``weights`` match), ``title`` (what the feedback calls
    it: the checker's name for the case, the label for an extra case), ``visible`` (the student's checker shows this very
    input), ``passed``, ``status`` (ok, raised, not_implemented, package, missing), ``why``, and for
    a failed visible case its ``input``, ``expected`` and ``got`` written out whole."""
    if data.get("assignment") != name or type(data.get("nonce")) is not str or data["nonce"] != nonce:
        raise GradingError(f"the results are for {reprlib.repr(data.get('assignment'))} of another run, "
                           f"not for {name!r}")
    records = data["records"]
    _, cases = grading_cases(name, offset, extra)
    _, visible = collect_cases(name, None)
    if any(not isinstance(r, dict) or r.get("status") not in STATUSES for r in records):
        raise GradingError("a record has an unknown form")
    whole = None
    if len(records) == 1 and records[0]["status"] == "package":
        whole = ("package", "you handed in the package's own function, not yours")
    elif len(records) == 1 and records[0]["status"] == "missing":
        whole = ("missing", "the function named in your checker cell is not there "
                            f"({str(records[0].get('error', ''))[:200]})")
    elif len(records) != len(cases):
        raise GradingError(f"{len(records)} results for {len(cases)} cases")
    else:
        # a blocked route scores 0 for the whole assignment, as the guide says: a function that reaches the
        # package's answer on some cases only (a loop that calls the blocked merge_softmax for two or more
        # states: attacker r1, 1.11/10) earns nothing on the others either
        met = [r for r in records if r["status"] == "blocked"]
        if met:
            called = met[0].get("name")
            # a name the feedback may say: one of the package's (the record is written in the student's process)
            called = called if isinstance(called, str) and (called in blocked_names(name)
                                                            or called in sealed_functions()
                                                            or re.fullmatch(r"\w+\.(?:\w+\.)*<lambda>", called)) else ""
            torch_words = set(TORCH_BLOCKED.get(name, {}).values())
            whole = ("blocked", (f"your function used {called}, which this assignment's text forbids" if called
                                 in torch_words else f"your function called the package's {called}, which this "
                                 "assignment blocks" if called else "your function called a package function "
                                 "that this assignment blocks") + ": a blocked call scores 0 for the whole assignment")
    out = []
    for i, case in enumerate(cases):
        seen = _visible_index(case, visible)
        label = getattr(case, "label", "") or ""
        # ``title``: what the feedback calls a hidden case, the name the student's checker prints for a case of
        # the book's (the same at every seed: it holds no input), the label for one of the instructor's
        item = {"index": i + 1, "name": case.name if seen is not None else "", "visible": seen is not None,
                "label": label if seen is None else case.name, "title": case.name if i < len(visible) else label}
        if whole is not None:
            item.update(passed=False, status=whole[0], why=whole[1])
        elif records[i]["status"] == "too_large":
            item.update(passed=False, status="too_large",
                        why=TOO_LARGE.get(records[i].get("what"), TOO_LARGE["size"]))
        else:
            item.update(_verdict(case, records[i], item["visible"]))
        out.append(item)
    return out


# Exceptions whose cause can be named without any value of the case: (pattern in the error text, cause).
RAISED_CAUSES = [
    (re.compile(r"cannot be converted to type \S*(Half|BFloat16)\S* without overflow"),
     ("a constant too large for the half-precision dtype (float16 holds magnitudes up to 65504), such as a "
      "fill of -1e9: fill with torch.finfo(scores.dtype).min instead (a fill of float('-inf') makes a row "
      "with no allowed key NaN: set such rows to 0 after the softmax)")),
    # torch's own messages for the shape and type mistakes students make, said without their sizes (a hidden
    # case's shapes stay hidden); a fresh instructor (i11) read "your function raised RuntimeError" and no more
    (re.compile(r"shapes cannot be multiplied|Expected size for first two dimensions of batch2|"
                r"size mismatch, got input"),
     ("a matrix product whose inner sizes do not fit: check which dimensions your @, matmul or bmm "
      "multiplies (transpose the keys?)")),
    (re.compile(r"The size of tensor a \(\d+\) must match the size of tensor b|"
                r"shape mismatch: value tensor of shape|operands could not be broadcast"),
     ("two tensors whose shapes do not broadcast: check the shapes you combine (a missing None/unsqueeze, "
      "or a length taken from the wrong dimension)")),
    (re.compile(r"shape '\[[^\]]*\]' is invalid for input of size"),
     "a reshape or view to a shape that does not hold the tensor's number of elements"),
    (re.compile(r"view size is not compatible with input tensor's size and stride"),
     "view() on a tensor that is not contiguous (after a transpose or permute): use reshape()"),
    (re.compile(r"Dimension out of range"),
     "a dim= past the tensor's number of dimensions (the hidden cases may have other shapes than yours)"),
    (re.compile(r"index -?\d+ is out of bounds|index out of range|list index out of range"),
     "an index past the end of a tensor or list (the hidden cases may be longer or shorter than yours)"),
    (re.compile(r"expected scalar type|expected (m1|mat1) and (m2|mat2) to have the same dtype|"
                r"must have the same dtype|Found dtype \w+ but expected"),
     "tensors of two dtypes combined (float16 or float64 inputs?): make them one, e.g. .to(scores.dtype)"),
    (re.compile(r"Boolean value of Tensor with more than one value is ambiguous|"
                r"only one element tensors can be converted to Python scalars"),
     "a tensor of several values used as one number or one True/False (an if or float() on a tensor)"),
]


def raised_cause(error: str) -> str:
    """The cause of an exception a student's function raised, in words holding no value of the case
    (shown for hidden cases too), or '' when it is not one the grader knows."""
    return next((cause for pattern, cause in RAISED_CAUSES if pattern.search(str(error))), "")


def _verdict(case: Case, record: dict, visible: bool) -> dict:
    """A case's outcome. For a hidden case the reason names only the kind of failure (never an input,
    an expected value, or the text of an exception, which could carry the inputs out)."""
    status = record["status"]
    hint = f" (hint: {case.hint})" if case.hint else ""
    if status == "not_implemented":
        return {"passed": False, "status": status, "why": "not implemented yet (raised NotImplementedError)"}
    if status in ("package", "missing"):
        raise GradingError("a record of the wrong kind among the cases")
    if status == "raised":
        error = str(record.get("error", ""))
        if visible:
            return {"passed": False, "status": status, "why": f"raised {error[:2000]}"}
        kind = error.split(":", 1)[0] if error.split(":", 1)[0].isidentifier() else "an exception"
        cause = raised_cause(error)
        return {"passed": False, "status": status, "why": f"your function raised {kind}" + (
            f": {cause}" if cause else hint), "detail": f"raised {error[:2000]}", "cause": cause}
    got = record.get("got")
    has_expected, expected = _expected_of(case.check)
    why = _structure_problem(expected, got, tuple(case.args)) if has_expected else None
    form = why is not None
    # Every case is judged against the grader's own copy of its inputs, never the student's view of them after
    # the call (which the student's code controls). Where a case is about writing in place (``unchanged``), the
    # inputs after the call are compared with that copy apart from the answer. A check that writes into
    # shared inputs (chapter 9's `big` feeds several cases) is undone after it, too.
    # This case's own inputs only: a function that writes into them on one case fails that case, and is judged
    # on its results everywhere else.
    saved = [(t, t.clone()) for t in (*case.args, *case.kwargs.values()) if isinstance(t, torch.Tensor)]
    written, right = False, None
    try:
        if case.unchanged and not _inputs_kept(tuple(case.args), record.get("args"), dict(case.kwargs),
                                               record.get("kwargs")):
            checked, written = Diagnosis(case.unchanged, case.unchanged), True
            # judged anyway on the grader's copy, unscored: a second mistake shows in the first feedback
            # (a fresh instructor: smithjohn fixed the write and 8 of 9 cases still failed)
            try:
                right = why is None and case.check(got) is None
            except Exception:  # a result the check cannot read is not right
                right = False
        else:
            checked = case.check(got)
    except Exception as err:  # an output of a shape the check did not foresee
        checked = f"the result could not be checked ({type(err).__name__}: {str(err)[:200]})"
        form = True
    finally:
        for tensor, value in saved:
            tensor.copy_(value)
    # a check may name the cause of a failure in words that hold no value of the case (ch03's Diagnosis),
    # a wrong form's cause too (ch05 and ch06 name a wrong dtype)
    cause = getattr(checked, "cause", "") if checked is not None else ""
    cause = cause if isinstance(cause, str) else ""
    why = checked if why is None else why
    if why is None:
        return {"passed": True, "status": "ok", "why": ""}
    if not visible:
        kind = (IN_PLACE if written else "the result has the wrong form (type, length, shape or dtype)" if form
                else "the result is wrong")
        said = f": {cause}" if cause else hint
        if written and cause.startswith(IN_PLACE):
            said = cause[len(IN_PLACE):]  # a case's own in-place reason says these words once (i14)
        return {"passed": False, "status": "ok", "why": kind + said,
                "detail": str(why)[:4000], "cause": cause, **({"result_right": right} if written else {})}
    # as the student's checker does: a named cause needs no case hint beside it (it may point elsewhere)
    item = {"passed": False, "status": "ok", "why": str(why) + ("" if cause else hint), "cause": cause}
    item["input"] = describe_value(tuple(case.args)) + (
        f", keyword arguments {describe_value(dict(case.kwargs))}" if case.kwargs else "")
    if has_expected:
        item["expected"] = describe_value(expected)
    item["got"] = describe_value(got)
    return item


def _judge_limited(name: str, offset: int, nonce: str, payload: bytes, seconds: int, memory: int,
                   extra: str | None = None) -> dict:
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
        cases = case_results(name, offset, nonce, load_results(payload), extra)
        passed = sum(c["passed"] for c in cases)
        status = "not implemented" if all(c["status"] == "not_implemented" for c in cases) else "graded"
        return {"status": status, "passed": passed, "total": len(cases), "cases": cases,
                "failures": [(c["name"] or f"hidden case {c['index']}", c["why"]) for c in cases if not c["passed"]]}
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


def _frame(obj, payload: bytes = b"") -> bytes:
    """A message: 8-byte length of a JSON header, the header, 8-byte length of raw bytes, the bytes."""
    data = json.dumps(obj).encode("utf-8")
    return struct.pack(">Q", len(data)) + data + struct.pack(">Q", len(payload)) + payload


def _unframe(fd: int) -> tuple[Any, bytes]:
    (size,) = struct.unpack(">Q", _read_exactly(fd, 8))
    obj = json.loads(_read_exactly(fd, size).decode("utf-8"))
    (size,) = struct.unpack(">Q", _read_exactly(fd, 8))
    return obj, _read_exactly(fd, size)


def _preload(assignments) -> None:
    """Import every module the judge will use for ``assignments`` (``[[name, extra or None], ...]``):
    the checkers (their cases built once, so modules they import inside functions load too) and the
    instructor's extra cases. The judge then never reads a checker from disk again, so a notebook
    that rewrites the package's files after this (where nothing else stops it) changes nothing."""
    for name, extra in assignments:
        grading_cases(name, 0, extra)
        collect_cases(name, None)


def serve_judge(preload: str = "[]") -> None:
    """The judge server (``python -c "...; serve_judge()"``): loads the checkers of ``preload`` (JSON:
    ``[[assignment, extra cases file or null], ...]``) and says ``ready``, then reads requests on stdin,
    judges each in a forked child with its limits, answers on stdout. It never runs a parallel torch
    operation itself, so forking it is safe, and torch and the checkers load once, before any notebook runs."""
    answers = os.dup(1)
    os.dup2(2, 1)  # anything printed goes to stderr, not into the answers
    torch.set_num_threads(1)
    _preload(json.loads(preload))
    os.write(answers, _frame({"ready": True}))
    while True:
        try:
            (name, offset, nonce, seconds, memory, extra), payload = _unframe(0)
        except EOFError:
            return
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                out = _frame(_judge_limited(name, offset, nonce, payload, seconds, memory, extra))
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
                out = json.loads(buffer[8:8 + size].decode("utf-8"))
            except Exception:
                out = {"status": "flagged", "reason": "judging these results ran out of memory or crashed "
                                                      f"(wait status {code})"}
        os.write(answers, _frame(out))


class JudgeServer:
    """The grader's side of :func:`serve_judge`: one server process, restarted if it ever fails."""

    def __init__(self, preload=()):
        self.proc: subprocess.Popen | None = None
        self.preload = [[name, extra or None] for name, extra in preload]

    def start(self) -> None:
        """Start the server and wait until it has loaded the checkers (call it before any notebook runs)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from attention_book.assignments.grading import serve_judge; "
                                   "serve_judge(sys.argv[1])", json.dumps(self.preload)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ, OMP_NUM_THREADS="1"))
        ready, _, _ = select.select([self.proc.stdout], [], [], 600)
        if not ready or _unframe(self.proc.stdout.fileno())[0] != {"ready": True}:
            self.close()
            raise RuntimeError("the judge did not start")

    def judge(self, name: str, offset: int, nonce: str, payload: bytes, seconds: int = 60,
              memory: int = 4 * 2**30, extra: str | None = None) -> dict:
        """:func:`load_results` and :func:`judge` in a child limited to ``seconds`` (wall and CPU) and
        ``memory`` bytes. Returns ``{"status", "passed", "total", "failures"}`` or ``{"status":
        "flagged", "reason"}``; never raises for anything in ``payload``."""
        for attempt in range(2):
            try:
                self.start()
                self.proc.stdin.write(_frame([name, offset, nonce, seconds, memory, extra], bytes(payload)))
                self.proc.stdin.flush()
                ready, _, _ = select.select([self.proc.stdout], [], [], seconds + 120)
                if ready:
                    return _unframe(self.proc.stdout.fileno())[0]
            except (OSError, EOFError, ValueError, RuntimeError, struct.error):
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
                   memory: int = 4 * 2**30, extra: str | None = None) -> dict:
    """:meth:`JudgeServer.judge` with a server of its own (started and stopped for this one call)."""
    with JudgeServer() as server:
        return server.judge(name, offset, nonce, payload, seconds, memory, extra)
