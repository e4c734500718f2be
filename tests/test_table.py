"""ab.print_table: a header and rows printed as aligned columns (core/table.py)."""

import pytest

import attention_book as ab
from attention_book.core.table import format_table


def test_columns_line_up_with_formats_per_column(capsys):
    ab.print_table(["score", "MFLOP", "MB moved"], [["dot", 16.777, 1.3], ["additive", 33.6, 35.12]],
                   formats=["", ".1f", ".2f"])
    assert capsys.readouterr().out.splitlines() == [
        "score     MFLOP  MB moved",
        "dot        16.8      1.30",
        "additive   33.6     35.12",
    ]


def test_two_line_titles_text_in_numbers_and_whole_numbers():
    table = format_table(["", "loss at\nstart", "below 0.1"],
                         [["scaled", 1.534, 62], ["unscaled", 1.6, "never"]], ".2f")
    assert table.splitlines() == [
        "          loss at",
        "            start  below 0.1",
        "scaled       1.53         62",
        "unscaled     1.60      never",
    ]


def test_one_format_for_all_and_no_trailing_spaces():
    lines = format_table(["a", "b"], [[1.0, "x"], [22.5, "yy"]], ".1f", gap=1).splitlines()
    assert lines == ["   a b", " 1.0 x", "22.5 yy"]


@pytest.mark.parametrize("formats, rows, message", [
    (["", ".1f"], [["x", 1.0, 2.0]], "row 0 has 3 cells"),
    ([".1f"], [["x", 1.0]], "one format per column"),
])
def test_mismatched_sizes_are_named(formats, rows, message):
    with pytest.raises(ValueError, match=message):
        format_table(["a", "b"], rows, formats)
