"""The instructors' guide (book/instructors.md) against the code it describes.

The guide's table of assignment keys, notebooks and case labels is the one an instructor copies
into a course file's ``[assignments.<key>]`` and ``weights``: it must be the grader's own. Run this
file as a script to print the table the code gives (to paste between the guide's markers).
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "book" / "instructors.md"
START, END = "<!-- assignment-table:start -->", "<!-- assignment-table:end -->"
SEEDS = (1, 987_654)  # two hidden seeds: labels and visibility must not depend on the seed


def _grade():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import grade
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return grade


def code_table() -> str:
    """The table the grader's registry gives: every assignment key, its notebook, and the labels
    of its hidden cases in order (the labels ``weights`` matches in a real run)."""
    from attention_book.assignments import collect_cases
    from attention_book.assignments.grading import _visible_index, grading_cases

    refs = _grade().reference_assignments(ROOT / "notebooks")
    lines = ["| key | notebook | its cases by number and name (`weights` matches a name or its label) |",
             "| --- | --- | --- |"]
    for notebook, names in sorted(refs.items()):
        for name in names:
            labels = None
            for seed in SEEDS:
                _, cases = grading_cases(name, seed)
                _, shown = collect_cases(name, None)
                assert all(_visible_index(c, shown) is None for c in cases), (name, seed)
                # the feedback names a hidden case as the checker does: a name that changed with the seed
                # could carry a hidden input out
                these = [(c.name, c.label or "") for c in cases]
                assert all(label for _, label in these), f"{name}: a case without a label"
                assert these == [(c.name, c.label or "") for c in shown], f"{name}: names or labels change with the seed"
                assert labels is None or these == labels, f"{name}: labels change with the seed"
                labels = these
            cells = " ".join(f"**{i}** `{case}`" + (f" (label `{label}`)" if label != case else "")
                             for i, (case, label) in enumerate(labels, start=1))
            lines.append(f"| `{name}` | `{notebook}` | {cells} |")
    return "\n".join(lines)


def guide_table() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    assert START in text and END in text, "the guide lost its assignment table's markers"
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def test_assignment_table_is_the_graders():
    assert guide_table() == code_table(), (
        "book/instructors.md's assignment table disagrees with the code; paste the output of "
        "`python tests/test_instructors_guide.py` between its markers")


def test_every_assignment_is_in_the_table():
    from attention_book.assignments import assignment_names

    table = guide_table()
    for name in assignment_names():
        assert f"| `{name}` |" in table, f"assignment {name!r} is missing from the guide's table"


def test_the_checker_line_the_guide_quotes():
    """The guide quotes what an unfinished assignment's checker prints: it must be what it prints."""
    import attention_book as ab

    def my_masked_softmax(*args, **kwargs):  # the name chapter 3's scaffold gives it
        raise NotImplementedError

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ab.assignments.check_masked_softmax(my_masked_softmax)
    printed = " ".join(out.getvalue().split())
    first = printed.split(" Replace ")[0]
    assert first.startswith("Not done yet: my_masked_softmax (masked_softmax) is not implemented yet (0 of ")
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    assert first in text
    assert "Replace `raise NotImplementedError` with your code, then run this cell again." in printed
    assert "Replace `raise NotImplementedError` with your code, then run this cell again." in text


def test_example_course_file_names_real_assignments(tmp_path):
    """course.example.toml loads, its weights name real cases, and its keys are assignments."""
    from attention_book.assignments import assignment_names

    grade = _grade()
    import course

    example = course.load_course(ROOT / "course.example.toml")
    grade.check_weight_keys(example)
    assert set(example.assignments) <= set(assignment_names())
    table = guide_table()
    for name in example.assignments:
        assert f"| `{name}` |" in table


@pytest.mark.parametrize("spec", ["weights = { hidden = 2 }", "points = 20"])
def test_an_unknown_key_stops_the_run(tmp_path, spec):
    """The guide says a misspelt key stops the run and lists the known keys, with or without weights
    (without them it was ignored, its points and due date never applied: the guide's reader)."""
    grade = _grade()
    import course

    path = tmp_path / "course.toml"
    path.write_text(f"[assignments.patchfy]\n{spec}\n", encoding="utf-8")
    with pytest.raises(course.CourseError, match="no assignment of that name; known: .*patchify"):
        grade.check_weight_keys(course.load_course(path))



def test_every_weight_of_the_example_weighs_a_case_in_a_real_run():
    """An instructor copying course.example.toml gets what it says (issue 37: its `visible = 0.5` did
    nothing, every case being hidden in a real run): each weight key weighs a case at a student's seed,
    the weighted points are what the guide says, and the guide shows the example's own weights line."""
    from attention_book.assignments import collect_cases
    from attention_book.assignments.grading import _visible_index, grading_cases

    grade = _grade()
    import course

    example = course.load_course(ROOT / "course.example.toml")
    assert grade.idle_weights(example, None) == []
    for name, spec in example.assignments.items():
        for seed in SEEDS:
            _, cases = grading_cases(name, seed, spec.extra_cases or None)
            _, shown = collect_cases(name, None)
            dicts = [{"label": c.label, "name": c.name, "visible": _visible_index(c, shown) is not None}
                     for c in cases]
            for key in spec.weights:
                hit = [d for d in dicts if key in (d["label"], d["name"]) or key == ("visible" if d["visible"]
                                                                                   else "hidden")]
                assert hit, f"[assignments.{name}] weights: {key!r} weighs no case at seed {seed}"
            if name == "masked_softmax":  # the guide: ten cases weighing 12, two of them 2/12 of 20 points
                weights = [spec.weight(d) for d in dicts]
                assert (len(weights), sum(weights), weights.count(2.0), spec.points) == (10, 12, 2, 20)
    line = next(t for t in (ROOT / "course.example.toml").read_text().splitlines() if t.startswith("weights"))
    assert line in GUIDE.read_text(encoding="utf-8")
    visible = course.load_course(ROOT / "course.example.toml")
    visible.assignments["masked_softmax"].weights["visible"] = 0.5
    notes = grade.idle_weights(visible, None)
    assert len(notes) == 1 and "weighs no case" in notes[0] and grade.idle_weights(visible, 0) == []


def test_the_plan_names_every_assignment_by_its_key():
    """The week-by-week plan gives each chapter's assignment keys: every one real, none left out."""
    import re

    from attention_book.assignments import assignment_names

    text = GUIDE.read_text(encoding="utf-8")
    plan = text.split("## A suggested plan", 1)[1].split("\n## ", 1)[0]
    keys = set(re.findall(r"`([a-z_0-9]+)`", plan))
    assert keys == set(assignment_names())

def test_the_guide_says_extra_cases_check_the_inputs_as_the_books_cases_do():
    """A fresh instructor (8/10): an extra case skipped the in-place check unless it set the undocumented
    ``Case(unchanged=...)``. The grader now gives it the assignment's rule; the guide says so and names
    the field."""
    from attention_book.assignments.grading import IN_PLACE

    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    assert "each extra case does too" in text and 'unchanged="your reason"' in text
    assert f'("{IN_PLACE}")' in text


def test_the_guide_says_a_write_in_place_leaves_the_results_unjudged():
    """A fresh instructor (issue 37, 8/10): smithjohn's feedback said one mistake (his write into the
    scores) explained all ten failed cases; a window off by one was the second. The guide says what the
    feedback says now, and that a shared reason is said once and the late note skips rows with no points."""
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    assert "so its results were not judged; fix that first" in text and "(not scored)" in text
    assert "is said once, with the cases on one line" in text
    assert "not on a row with no points to take" in text


if __name__ == "__main__":
    print(code_table())
