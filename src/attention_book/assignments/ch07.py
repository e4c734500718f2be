"""Chapter 7 assignment: the learning-rate factor of a linear warm-up followed by a cosine decay."""

from __future__ import annotations

import math

from . import Case, Diagnosis, case_generator, compare, draw, run_checks

__all__ = ["check_warmup_cosine"]


def _cosine(t, total):
    return (1 + math.cos(math.pi * t / total)) / 2


def _ramp(t, warmup):
    return 1.0 if warmup == 0 else min(1.0, t / warmup)


# Common mistakes: (cause in words that hold no value of a case, the factor a schedule with that mistake gives).
RAMP_ONLY = ("during the warm-up the factor is the ramp alone (the ramp replaces the cosine term): multiply the "
             "ramp min(1, t / warmup) by the cosine term at every step")
NO_RAMP = ("the warm-up ramp is missing (the factor is the cosine term alone): multiply the cosine term by "
           "min(1, t / warmup), which is 0 at step 0")
EITHER_TERM = ("one of the two terms is missing (the ramp replaces the cosine term, or the ramp is missing): "
               "the factor is min(1, t / warmup) times the cosine term at every step")
MISTAKES = [
    ("the ramp runs one step ahead: the warm-up term is t / warmup, 0 at step 0, not (t + 1) / warmup",
     lambda s, w, n: min(1.0, (min(s, n) + 1) / w) * _cosine(min(s, n), n)),
    (RAMP_ONLY, lambda s, w, n: min(s, n) / w if s < w else _cosine(min(s, n), n)),
    (NO_RAMP, lambda s, w, n: _cosine(min(s, n), n)),
    ("the step is not clipped to max_steps: past the end the cosine climbs back up; use t = min(step, max_steps)",
     lambda s, w, n: _ramp(s, w) * _cosine(s, n)),
    (("the cosine starts after the warm-up, (t - warmup) / (max_steps - warmup): in this schedule it runs over "
     "the whole run, cos(pi t / max_steps) from step 0"),
     lambda s, w, n: _ramp(min(s, n), w) * _cosine(max(min(s, n) - w, 0), n - w)),
]
NOT_FLOAT = ("the factor must be a Python float, as the task asks (LambdaLR multiplies the base rate by it): "
             "compute it with math.cos and math.pi, or return float(...) of your result")


def _number(expected: float, args: tuple = ()):
    """A check of one factor: a float close to ``expected``; a wrong value names the mistake it
    matches (or both, where the ramp alone and the cosine alone give the same value)."""
    inner = compare(float(expected), atol=1e-6, rtol=1e-6)
    mistaken = []
    for cause, wrong in MISTAKES if args else []:
        try:
            value = wrong(*args)
        except ZeroDivisionError:
            continue
        if not math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-6):
            mistaken.append((cause, value))

    def check(got):
        if hasattr(got, "item") and not isinstance(got, float):  # a tensor or a NumPy array
            return Diagnosis(f"expected a Python float, got {type(got).__module__}.{type(got).__name__} {got!r}"
                             f" — {NOT_FLOAT}", NOT_FLOAT)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return f"expected a number, got {type(got).__name__}"
        why = inner(float(got))
        if not why:
            return None
        causes = [cause for cause, value in mistaken
                  if math.isclose(float(got), value, rel_tol=1e-6, abs_tol=1e-6)]
        if {RAMP_ONLY, NO_RAMP} <= set(causes):
            causes = [EITHER_TERM]
        return Diagnosis(f"{why} — {causes[0]}", causes[0]) if causes else why

    return check


def check_warmup_cosine(fn, verbose: bool = True):
    """Check ``fn(step, warmup, max_steps) -> float``, the multiplier of the base learning rate.

    ``factor(t) = min(1, t / warmup) * (1 + cos(pi * t / max_steps)) / 2`` with
    ``t = min(step, max_steps)``: a linear warm-up from 0 over the first
    ``warmup`` steps (none when ``warmup = 0``) multiplied by a cosine decay from
    1 at step 0 to 0 at ``max_steps``; after ``max_steps`` it stays 0. Every
    schedule and step is drawn from the case seed.
    """
    from ..core.train import warmup_cosine_factor as reference

    g = case_generator(7)

    def schedule():
        total = draw(g, 40, 600)
        return draw(g, 4, total // 4), total

    rows = []
    warm, total = schedule()
    rows.append(("the very first step learns nothing", (0, warm, total), "at step 0 the warm-up term t / warmup is 0"))
    warm, total = schedule()
    rows.append(("a step inside the warm-up", (draw(g, 1, warm - 1), warm, total),
                 "during the warm-up the ramp t / warmup *multiplies* the cosine term, it does not replace it"))
    warm, total = schedule()
    rows.append(("the last warm-up step", (warm, warm, total),
                 "at t = warmup the ramp reaches 1; the cosine has already moved a little below 1"))
    warm, total = schedule()
    total += total % 2
    rows.append(("half-way through training", (total // 2, warm, total),
                 "the cosine runs over the whole run, from step 0 to max_steps: at t = max_steps / 2 it is 1/2"))
    warm, total = schedule()
    rows.append(("a step in the decay", (draw(g, warm + 1, total - 1), warm, total),
                 "after the warm-up only the cosine term (1 + cos(pi t / max_steps)) / 2 is left"))
    warm, total = schedule()
    rows.append(("the last step", (total, warm, total), "at t = max_steps the cosine term is (1 + cos pi) / 2 = 0"))
    warm, total = schedule()
    rows.append(("a step after the end", (total + draw(g, 1, total), warm, total),
                 "clip the step to max_steps: a cosine left alone would climb back up after max_steps"))
    _, total = schedule()
    rows.append(("no warm-up, first step", (0, 0, total),
                 "warmup = 0 means no ramp: the factor starts at 1 (and must not divide by zero)"))
    _, total = schedule()
    rows.append(("no warm-up, a later step", (draw(g, 1, total - 1), 0, total),
                 "warmup = 0 means no ramp, only the cosine term"))
    total = draw(g, 3, 12)
    rows.append(("the warm-up is the whole run", (draw(g, 1, total - 1), total, total),
                 "both terms apply together at every step"))
    cases = [Case(name, args, _number(reference(*args), args), hint=hint) for name, args, hint in rows]
    return run_checks("warmup_cosine", fn, cases, verbose=verbose)
