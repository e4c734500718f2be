"""Chapter 7 assignment: the learning-rate factor of a linear warm-up followed by a cosine decay."""

from __future__ import annotations

from . import Case, case_seed, compare, run_checks

__all__ = ["check_warmup_cosine"]

def _number(expected: float):
    inner = compare(float(expected), atol=1e-6, rtol=1e-6)

    def check(got):
        if hasattr(got, "item") and getattr(got, "ndim", 0) == 0:  # a 0-d tensor or NumPy scalar
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"expected a number, got {type(got).__name__}"
        return inner(float(got))

    return check


def check_warmup_cosine(fn, verbose: bool = True):
    """Check ``fn(step, warmup, max_steps) -> float``, the multiplier of the base learning rate.

    ``factor(t) = min(1, t / warmup) * (1 + cos(pi * t / max_steps)) / 2`` with
    ``t = min(step, max_steps)``: a linear warm-up from 0 over the first
    ``warmup`` steps (none when ``warmup = 0``) multiplied by a cosine decay from
    1 at step 0 to 0 at ``max_steps``; after ``max_steps`` it stays 0.
    """
    from ..core.train import warmup_cosine_factor as reference

    rows = [
        ("the very first step learns nothing", (0, 10, 100),
         "at step 0 the warm-up term t / warmup is 0"),
        ("half-way through the warm-up", (5, 10, 100),
         "during the warm-up the ramp t / warmup *multiplies* the cosine term, it does not replace it"),
        ("the last warm-up step", (10, 10, 100),
         "at t = warmup the ramp reaches 1; the cosine has already moved a little below 1"),
        ("half-way through training", (50, 10, 100),
         "the cosine runs over the whole run, from step 0 to max_steps: at t = max_steps / 2 the factor is 1/2"),
        ("a step in the decay", (73, 10, 100),
         "after the warm-up only the cosine term (1 + cos(pi t / max_steps)) / 2 is left"),
        ("the last step", (100, 10, 100), "at t = max_steps the cosine term is (1 + cos pi) / 2 = 0"),
        ("a step after the end", (130, 10, 100),
         "clip the step to max_steps: a cosine left alone would climb back up after max_steps"),
        ("no warm-up at all", (0, 0, 100),
         "warmup = 0 means no ramp: the factor starts at 1 (and must not divide by zero)"),
        ("no warm-up, later step", (25, 0, 100), "warmup = 0 means no ramp, only the cosine term"),
        ("the warm-up is the whole run", (3, 4, 4), "both terms apply together at every step"),
    ]
    total = 50 + case_seed(0) % 451  # another schedule in the grader's hidden run
    warm = case_seed(0) % (total // 2)
    rows.append((f"a schedule of {total} steps with {warm} warm-up steps, step {total // 3}",
                 (total // 3, warm, total), "the ramp and the cosine both depend on the schedule's own lengths"))
    cases = [Case(name, args, _number(reference(*args)), hint=hint) for name, args, hint in rows]
    return run_checks("warmup_cosine", fn, cases, verbose=verbose)
