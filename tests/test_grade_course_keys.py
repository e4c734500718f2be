"""A misspelt key anywhere in the course file is refused in one line, never ignored (issue 37)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import course  # noqa: E402


@pytest.mark.parametrize("text, words", [
    ('[course]\nnmae = "typo"\n', r"\[course\] has unknown keys \['nmae'\] \('nmae': did you mean 'name'\?\)"),
    ("[late]\nper_dya = 0.1\n", r"\[late\] has unknown keys \['per_dya'\].*did you mean 'per_day'"),
    ('name = "x"\n', r"the top level has unknown keys \['name'\]; known: course, late"),
    ('[roster]\nfiel = "r.csv"\n', r"\[roster\].*did you mean 'file'"),
    ('[lat]\nper_day = 0.1\n', r"did you mean 'late'"),
    ('[gradescope]\nscore = "visible"\n', r"did you mean 'scores'"),
    ('[assignments.masked_softmax]\npoint = 3\n', r"did you mean 'points'"),
    ('course = 3\n', r"\[course\] must be a table"),
])
def test_an_unknown_key_is_refused_with_the_known_ones(tmp_path, text, words):
    (tmp_path / "c.toml").write_text(text)
    with pytest.raises(course.CourseError, match=words) as err:
        course.load_course(tmp_path / "c.toml")
    assert "\n" not in str(err.value)


def test_the_example_course_files_still_load():
    loaded = course.load_course(ROOT / "course.example.toml")
    assert loaded.name and loaded.per_day > 0 and loaded.assignments
