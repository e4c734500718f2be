"""Claims about training runs, checked in every run and counted over seeds.

A chapter that trains something and wants to *say* what came out calls
:func:`claim` with a short key, the outcome of this run and the sentence it
stands for::

    ab.claim("ch05.more_heads_help", acc[4] > acc[1] + 0.05,
             "four heads beat one head by more than 5 points of test accuracy")

The call never raises because of the outcome (an unlucky run is not an error;
it is what the seed check counts). In Jupyter or Colab it prints one line for
the reader: whether the statement held in *this* run, and how often it held in
the book's seed check (``make claims``: every notebook executed for seeds 0–4 at ``ci`` size,
alternating one and two CPU threads). The counts come from
``book/_claims_report.json`` (see REPORT_PATH), which ``scripts/claims.py`` writes.
On a website build (``ATTENTION_BOOK_EXPLORERS=static``) it prints nothing: the
page states the result in prose, with the count glued by :func:`glue_counts`.

When ``ATTENTION_BOOK_CLAIMS`` names a file, every call appends one JSON line to
it (key, statement, outcome, value, seed, size, threads); that is how the seed
check collects its data.

Rule for notebooks (CONTRIBUTING.md): an ``assert`` may only state what holds
on every machine for every seed (an identity, a parity check, a tolerance
with a wide margin). Anything that a different seed, thread count or processor
could flip is a claim, and the prose states it no more strongly than the
seed check's count.
"""

from __future__ import annotations

import json
import math
import os
import re
import textwrap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from ..core.config import book_seed, claims_log, experiment_size, max_steps, static_explorers

__all__ = ["claim", "claim_report", "ClaimRecord", "assert_trained", "glue", "glue_counts"]

_IN_CLONE = Path(__file__).resolve().parents[3] / "book" / "_claims_report.json"
_IN_WHEEL = Path(__file__).with_name("claims_report.json")
REPORT_PATH = _IN_CLONE if _IN_CLONE.is_file() else _IN_WHEEL
"""The seed check's report: ``book/_claims_report.json`` in a clone; in an installed wheel,
the copy that setup.py's build step puts beside this module."""
_KEY = re.compile(r"^ch\d\d[a-z]?\.[a-z0-9_.]+$")


@dataclass(frozen=True)
class ClaimRecord:
    """One claim as the seed check counted it."""

    key: str
    statement: str
    held: int
    runs: int
    values: tuple

    def summary(self) -> str:
        if self.runs == 0:
            return "not yet counted by the seed check"
        return f"held in {self.held} of {self.runs} runs of the seed check"


@lru_cache(maxsize=1)
def _load_report() -> dict:
    try:
        return json.loads(REPORT_PATH.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"claims": {}}
    except (json.JSONDecodeError, OSError) as err:
        raise RuntimeError(f"{REPORT_PATH} is not a readable claims report ({err}); rerun `make claims`") from err


def claim_report() -> dict:
    """The seed check's report (a copy): settings it ran with and, per claim key, the counts."""
    return json.loads(json.dumps(_load_report()))


def _record(key: str) -> ClaimRecord | None:
    entry = _load_report().get("claims", {}).get(key)
    if entry is None:
        return None
    return ClaimRecord(key, entry["statement"], int(entry["held"]), int(entry["runs"]), tuple(entry.get("values", ())))


def _plain(value: Any) -> Any:
    """A JSON-friendly version of a measured value (numbers rounded to 4 significant digits)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().tolist()
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict)):
        try:
            value = value.item()
        except (ValueError, TypeError):
            pass
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return float(f"{value:.4g}") if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def claim(key: str, holds: Any, statement: str, value: Any = None, *, quiet: bool = False) -> bool:
    """Check a statement about this run; print how it fared here and in the seed check.

    ``key``: ``"chNN.name"``, unique in the book. ``holds``: the outcome in this
    run (a Python or NumPy/PyTorch boolean). ``statement``: the sentence the
    prose relies on, in plain words. ``value``: the measured number(s) behind
    it, recorded for the report. Returns ``holds`` as a ``bool``. Prints nothing
    when ``quiet`` or on a website build (the page's prose states the result).
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(f"claim key must look like 'ch05.more_heads_help' (chapter, dot, lower-case name), got {key!r}")
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError(f"claim {key!r}: statement must be a non-empty sentence, got {statement!r}")
    if isinstance(holds, torch.Tensor):
        if holds.numel() != 1:
            raise ValueError(f"claim {key!r}: holds must be one boolean, got a tensor of shape {tuple(holds.shape)}")
        holds = holds.item()
    if hasattr(holds, "dtype") and getattr(holds, "shape", ()) == ():  # NumPy scalar
        holds = holds.item()
    if not isinstance(holds, bool):
        raise ValueError(f"claim {key!r}: holds must be True or False, got {holds!r}")
    statement = " ".join(statement.split())
    log = claims_log()
    if log is not None:
        line = {
            "key": key, "statement": statement, "holds": holds, "value": _plain(value),
            "seed": book_seed(), "size": experiment_size(), "threads": torch.get_num_threads(),
            "omp_threads": os.environ.get("OMP_NUM_THREADS", ""),
        }
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as fh:  # one short line per write: appends do not interleave
            fh.write(json.dumps(line) + "\n")
    if not quiet and not static_explorers():
        record = _record(key)
        if record is None:
            counted = "not yet counted by the seed check"
        elif record.statement != statement:
            counted = "the statement changed since the last seed check; rerun `make claims`"
        else:
            counted = record.summary()
        mark = "✔ holds" if holds else "✘ does not hold"
        # Wrapped: the website shows outputs in a fixed-width box that would hide a long line.
        print(textwrap.fill(f"Claim {mark} in this run: {statement}. (Over seeds: {counted}.)", width=88,
                            subsequent_indent="  ", break_on_hyphens=False))
    return holds


def assert_trained(holds: Any, statement: str) -> None:
    """Assert an outcome of training that holds with a wide margin on every machine and seed.

    ``assert_trained(acc > 0.9, "test accuracy above 0.9")`` raises ``AssertionError``
    with the statement when it fails, like ``assert``. The one difference: when
    ``ATTENTION_BOOK_MAX_STEPS`` caps training (the full-size smoke run, which only
    checks that every shape, device and memory estimate works), the models are barely
    trained, so the check is skipped and a line says so.
    """
    if not isinstance(statement, str) or not statement.strip():
        raise ValueError("statement must be a non-empty sentence saying what training achieved")
    cap = max_steps()
    if cap is not None:
        print(f"(not checked: training was capped at {cap} steps) {statement}")
        return
    if isinstance(holds, torch.Tensor):
        if holds.numel() != 1:
            raise ValueError(f"holds must be one truth value, got a tensor of shape {tuple(holds.shape)}")
        holds = bool(holds.item())
    if not holds:
        raise AssertionError(f"training did not achieve what this chapter relies on: {statement}")


def glue(name: str, value: Any) -> None:
    """Hand a number of this run to the page's prose, where ``{glue:text}`name``` shows it.

    On the website myst-nb's ``glue`` stores the value in the cell's outputs and the
    built page prints it inside the sentence. Where myst-nb is not installed (Colab, a
    plain Jupyter) the prose shows the role's text instead, and the value is what the
    cell beside it printed: nothing is lost, so this is then a no-op.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"glue: name must be an identifier-like string, got {name!r}")
    try:
        from myst_nb import glue as myst_glue
    except ImportError:
        return
    myst_glue(name, value, display=False)


def glue_counts(name: str, key: str) -> None:
    """Glue how often claim ``key`` held in the seed check, as ``{name}_held`` and ``{name}_runs``.

    The prose then writes "in {glue:text}`name_held` of {glue:text}`name_runs` runs of the
    seed check". A claim the report does not list yet glues 0 of 0 (the claim's own line
    says it is not yet counted).
    """
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(f"glue_counts: key must look like 'ch05.more_heads_help', got {key!r}")
    record = _record(key)
    glue(f"{name}_held", record.held if record else 0)
    glue(f"{name}_runs", record.runs if record else 0)
