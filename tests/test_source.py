"""ab.show_source: the package's code on the page, with where it lives."""

from __future__ import annotations

import inspect
import re

import pytest
from test_launch import BRANCH, REPO_URL

import attention_book as ab
from attention_book.book import source


def test_the_repository_is_the_books():
    assert (source.REPOSITORY_URL, source.BRANCH) == (REPO_URL, BRANCH)


def test_source_is_the_installed_code_without_docstrings():
    shown = ab.show_source(ab.TransformerEncoderBlock, ab.masked_softmax)
    (path, code, first, last), (path2, code2, _, _) = shown.parts
    assert path == "attention_book/models/transformer.py" and path2 == "attention_book/models/attention.py"
    lines, start = inspect.getsourcelines(ab.TransformerEncoderBlock)
    assert (first, last) == (start, start + len(lines) - 1)
    assert code.startswith("class TransformerEncoderBlock(nn.Module):")
    assert "def forward" in code and ab.TransformerEncoderBlock.__doc__.strip().splitlines()[0] not in code
    compile(code, "<shown>", "exec")  # still valid Python once the docstrings are gone
    with_doc = ab.show_source(ab.masked_softmax, docstring=True).parts[0][1]
    assert ab.masked_softmax.__doc__.strip().splitlines()[0] in with_doc


def test_html_links_to_the_lines_in_the_repository():
    page = ab.show_source(ab.MultiHeadAttention)._repr_html_()
    first, last = ab.show_source(ab.MultiHeadAttention).parts[0][2:]
    assert f'{REPO_URL}/blob/{BRANCH}/src/attention_book/models/attention.py#L{first}-L{last}' in page
    assert re.search(r'class="ab-source"', page) and "MultiHeadAttention" in page
    assert "<script" not in page


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        ab.show_source()
    with pytest.raises(ValueError, match="classes and functions"):
        ab.show_source(ab.MultiHeadAttention(8, 2))
    with pytest.raises(ValueError, match="not part of the attention_book"):
        ab.show_source(re.compile)
