"""Chapter 1's live view (issue 36): the page's soft lookup (book/_static/live/ch01.mjs, run in
Node) equals the package's lookup.similarity_scores, lookup_weights and soft_lookup."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import attention_book as ab
from attention_book.experiments import lookup

MODULE = Path(__file__).resolve().parent.parent / "book" / "_static" / "live" / "ch01.mjs"

CASES = [
    ("Smolar", 0.1),
    ("li", 10.0),
    ("  WERNES ", 0.03),
    ("Zang", 1.0),
    ("Bo", 0.3),  # no shared pair with any key: uniform weights
    ("Hühü", 0.5),  # beyond ASCII
    ("Li😀", 0.2),  # a code point outside the BMP counts as one character, as in Python
    ("Lipton Lipton", 0.01),
]

JS = """
import {softLookup, said} from %s;
const [cases, keys, values] = JSON.parse(process.argv[1]);
const out = cases.map(([q, t]) => {
  const r = softLookup(q, keys, values, t);
  return {scores: r.scores, weights: r.weights, pooled: Object.fromEntries(r.pooled), said: said(q, t, r.pooled)};
});
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def view():
    return ab.ch01_live_view()


@pytest.fixture(scope="module")
def page_results(view):
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the page's module cannot be run outside a browser")
    code = JS % json.dumps(MODULE.as_uri())
    arg = json.dumps([CASES, view.keys, view.values])
    done = subprocess.run([node, "--input-type=module", "-e", code, arg], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_page_looks_up_as_the_package_does(view, page_results, case):
    query, temperature = CASES[case]
    got, want = page_results[case], view.lookup(query, temperature)
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-6)
    np.testing.assert_allclose(got["weights"], want["weights"], atol=1e-5)
    assert abs(sum(got["weights"]) - 1) < 1e-9
    assert list(got["pooled"]) == view.values  # one probability per first name, in the database's order
    np.testing.assert_allclose([got["pooled"][n] for n in want["pooled"]], list(want["pooled"].values()), atol=1e-5)
    assert got["said"] == view.said(query, temperature)


def test_the_view_is_the_chapters_lookup(view):
    assert view.keys == [k for k, _ in lookup.NAME_DATABASE] and view.values == [v for _, v in lookup.NAME_DATABASE]
    got = view.lookup("Smolar", 0.1)
    assert got["pooled"] == lookup.soft_lookup("Smolar", lookup.NAME_DATABASE, 0.1)
    assert max(got["pooled"], key=got["pooled"].get) == "Alex"
    assert view.said("Smolar", 0.1).startswith("soft lookup of 'Smolar' at T = 0.1: Alex 1.00")


def test_the_page_data_is_json_and_the_notebook_form_is_a_widget(view, monkeypatch):
    data = json.loads(json.dumps(view.data(), allow_nan=False))
    assert data["defaults"] == {"query": "Smolar", "temperature": 0.3} and data["temperature_range"] == [0.01, 10.0]
    assert view.models() == {}  # computed in JavaScript: no model file to download
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "live")
    form = ab.live(view)
    assert [c.description for c in form.children[:2]] == ["name", "temperature T"]
    fallback = view.fallback_html()
    assert "<table" in fallback and "soft lookup of &#x27;Smolar&#x27;" in fallback
    with pytest.raises(ValueError, match="non-empty"):
        view.lookup("  ", 0.1)


def test_the_fallback_table_looks_up_once(view, monkeypatch):
    """A reviewer found the page's table computed its lookup twice (once for the rows, again for
    the caption's sentence): once now, and the sentence is the same either way."""
    calls = []
    original = type(view).lookup

    def counted(self, query, temperature):
        calls.append((query, temperature))
        return original(self, query, temperature)

    monkeypatch.setattr(type(view), "lookup", counted)
    view.fallback_html()
    assert calls == [("Smolar", 0.3)]
    pooled = original(view, "Wernez", 2.0)["pooled"]
    assert view.said("Wernez", 2.0, pooled) == view.said("Wernez", 2.0)
