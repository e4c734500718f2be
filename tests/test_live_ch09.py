"""Chapter 9's live view: the exported graph equals the PyTorch model, and the page's JavaScript
(tokenizer, temperature and top-k, greedy continuation) equals the package.

The JavaScript checks run ``book/_static/live/ch09.mjs`` under Node.js (skipped where there is
no ``node``); the browser test over the built site is tests/test_site_live_ch09.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book.book import live as live_mod
from attention_book.book.live_ch09 import (
    GenerateView,
    NextTokenScores,
    casefold_exceptions,
    next_token_probs,
)

# Its module fixtures train and export a model (tens of seconds): every test of this file runs on one
# xdist worker, so the fixtures are built once, not once per worker (tests/xdist_group_ids.py).
pytestmark = pytest.mark.xdist_group("live_ch09")

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "book" / "_static" / "live" / "ch09.mjs"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="Node.js is not installed")

TEXT = (
    "The Time Traveller smiled. Café, naïve straße! Он сказал: «Привет». 時間 machine didn't stop; "
    "the machine, the time, the traveller? Σίσυφος ΟΔΟΣ the end: the end. "
) * 3

# Inputs for the tokenizer: capitals, punctuation, Unicode letters, words outside the vocabulary,
# extra white space, special tokens written in the text, and characters the tokenizer drops.
GOLDEN = [
    "The Time Traveller smiled.",
    "  the   machine\t\tstopped\n",
    "CAFÉ, naïve — STRASSE! Straße",
    "cafe\u0301 and ﬁre and ＡＢＣ",
    "ΟΔΟΣ σίσυφος Σίσυφος",
    "İstanbul DİYARBAKIR Iğdır",
    "didn't 'quoted' don’t rock'n'roll it's'",
    'Room 101 — 3.14 #tag @you (yes) [no] "say"',
    "<mask> <MASK> <bos> <unknown_token> < cls >",
    "時間 machine 時間機械",
    "Привет, мир! Он сказал: «Привет».",
    "ᏣᎳᎩ ꭰꭱ Ꭰ",
    "emoji 🙂 and ŉ and ǰ and ﬀ",
    "",
    "   ",
    "123 456",
    "a.b,c;d:e!f?g",
    "e\u0301\u0301 ä\u0308",
]


def small_model(tok, max_len=12, seed=0):
    torch.manual_seed(seed)
    model = ab.DecoderOnlyLM(
        tok.vocab_size,
        max_len=max_len,
        num_hiddens=16,
        num_heads=2,
        num_blks=2,
        ffn_num_hiddens=32,
        dropout=0.1,
        pad_id=tok.pad_id,
    )
    return model.eval()


@pytest.fixture(scope="module")
def tok():
    return ab.data.tokenizer.Tokenizer(
        TEXT, level="word", min_freq=2, extra_tokens=("<copy>", "<reverse>")
    )


@pytest.fixture(scope="module")
def view(tok):
    return GenerateView(
        small_model(tok),
        tok,
        prompt="the time traveller",
        examples=("the machine",),
        seed=3,
    )


def run_node(script: str, payload) -> object:
    """Run an ES-module ``script`` (which reads JSON ``input`` and calls ``emit``) with ch09.mjs imported as ``m``."""
    program = (
        f"import * as m from {json.dumps(MODULE.as_uri())};\n"
        "import { readFileSync } from 'node:fs';\n"
        "const input = JSON.parse(readFileSync(0, 'utf8'));\n"
        "const emit = (x) => process.stdout.write(JSON.stringify(x));\n" + script
    )
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", program],
        input=json.dumps(payload),
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# ------------------------------------------------------------------ the exported graph


@pytest.mark.parametrize("lengths", [(1, 5), (7, 12)])
def test_onnx_export_matches_pytorch(tmp_path, one_thread, view, lengths):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    (module, args, dynamic_shapes, names) = view.models()["next"]
    path = tmp_path / "next.onnx"
    size = live_mod.export_onnx(module, args, path, dynamic_shapes, names)
    assert 0 < size <= live_mod.MAX_MODEL_BYTES
    g = torch.Generator().manual_seed(1)
    for length in lengths:
        ids = torch.randint(0, view.tok.vocab_size, (1, length), generator=g)
        (got,) = live_mod.run_onnx(path, {"ids": ids.numpy()})
        with torch.no_grad():
            want = view.model(ids)[:, -1].numpy()
        assert got.shape == (1, view.tok.vocab_size)
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_view_data_is_what_the_page_needs(view, tok):
    data = json.loads(json.dumps(view.data(), allow_nan=False))
    assert data["tokens"] == list(tok.vocab.idx_to_token)
    assert (
        data["unk"] == tok.unk_id
        and data["bos"] == tok.bos_id
        and data["eos"] == tok.eos_id
    )
    assert (
        tok.eos_id not in data["banned"]
        and tok.unk_id in data["banned"]
        and tok.pad_id in data["banned"]
    )
    assert data["max_len"] == 12 and data["examples"] == [
        "the time traveller",
        "the machine",
    ]
    assert data["casefold"]["223"] == "ss" and data["casefold"]["962"] == "σ"
    assert "65" not in data["casefold"]  # 'A': lower-casing already folds it
    assert isinstance(
        NextTokenScores(view.model)(torch.tensor([[2, 5, 6]])), torch.Tensor
    )


def test_view_refuses_what_it_cannot_show(tok):
    model = small_model(tok)
    with pytest.raises(ValueError, match="word-level"):
        GenerateView(model, ab.data.tokenizer.Tokenizer(TEXT, level="char"))
    with pytest.raises(ValueError, match="at least one token"):
        GenerateView(model, tok, prompt="123")


def test_casefold_table_covers_every_difference():
    table = casefold_exceptions()
    assert table["5024"] == "Ꭰ"  # Cherokee folds to upper case, unlike lower()
    assert all(chr(int(cp)).casefold() == v for cp, v in table.items())


# ------------------------------------------------------------------ the page's JavaScript


@needs_node
def test_javascript_tokenizer_matches_the_package(view, tok):
    data = view.data()
    got = run_node(
        "emit(input.cases.map((t) => ({ split: m.split(t, input.data.casefold), "
        "ids: m.tokenize(t, input.data).ids })));",
        {"cases": GOLDEN, "data": data},
    )
    for text, result in zip(GOLDEN, got):
        assert result["split"] == tok.split(text), text
        assert result["ids"] == tok.encode(text), text
    unknown = [t for t in GOLDEN if tok.unk_id in tok.encode(t)]
    assert len(unknown) >= 5  # the cases do reach words outside the vocabulary


@needs_node
def test_javascript_decode_matches_the_package(tok):
    ids = [
        tok.encode(t)
        for t in (
            "the time , traveller . smiled ? the end !",
            "didn't stop ; the machine :",
        )
    ]
    got = run_node(
        "emit(input.map((ts) => m.decode(ts)));",
        [[tok.vocab.to_tokens(i) for i in row] for row in ids],
    )
    assert got == [tok.decode(row) for row in ids]


@needs_node
def test_javascript_speaks_tokens_as_the_package(view):
    """The live regions say tokens as the figure's text does: quoted, punctuation named, from the
    one table the page is given (accessibility reader, issue 38: "top-k all: . 0.224, , 0.165")."""
    from attention_book.models.decoding import PUNCTUATION_NAMES, spoken_text, spoken_token

    names = view.data()["punctuation"]
    assert names == PUNCTUATION_NAMES
    tokens = [*names, "and", "<eos>", "i'm"]
    texts = ["the machine, and the time traveller.", "what ? no ! yes ; then : end", ","]
    # (prompt, words, stopped, how, again): what Generate's live region says
    continuations = [
        (" the machine ", ["the", "time", ",", "and"], False, "sampled with seed 0", ""),
        ("the end", ["of", "it", "."], True, "greedy: the most likely word each time",
         "The same text again (2 times): greedy decoding has no chance in it."),
        ("stop", [], True, "sampled with seed 7", ""),
    ]
    got = run_node(
        "emit([input.tokens.map((t) => m.spokenToken(t, input.names)),"
        " input.texts.map((t) => m.spokenText(t, input.names)),"
        " [1, 2, 20].map((n) => m.counted(n, 'new word')),"
        " input.continuations.map((c) => m.spokenContinuation(...c, input.names))]);",
        {"tokens": tokens, "texts": texts, "names": names, "continuations": continuations},
    )
    assert got[:3] == [
        [spoken_token(t) for t in tokens],
        [spoken_text(t) for t in texts],
        ["1 new word", "2 new words", "20 new words"],
    ]
    # Whole sentences, each ended and spaced, the last one too (an accessibility reader
    # heard two glued: "...0.274Top")
    assert got[3] == [
        "the machine, then: the time comma and. Sampled with seed 0. ",
        (
            "the end, then: of it period, end of text. Greedy: the most likely word each time. "
            "The same text again (2 times): greedy decoding has no chance in it. "
        ),
        "stop, then: end of text. Sampled with seed 7. ",
    ]


def punctuation_tokens(tok, text: str) -> list[str]:
    """The tokens of ``text`` that hold no letter: the tokenizer's punctuation marks."""
    return [t for t in tok.split(text) if not any(c.isalpha() for c in t)]


# Every printable ASCII character and every punctuation mark or symbol of the Basic Multilingual
# Plane (Unicode categories P* and S*), space-separated: whatever the tokenizer keeps of them.
CANDIDATES = " ".join(
    chr(cp)
    for cp in range(0x21, 0x10000)
    if cp < 0x7F or unicodedata.category(chr(cp))[0] in "PS"
)


def test_every_punctuation_token_has_a_spoken_name(tok):
    """PUNCTUATION_NAMES is written by hand beside the tokenizer's own list of punctuation (a diff
    reviewer): a punctuation mark the tokenizer makes a token of must have a name a screen reader
    says (else the live regions say a bare "-", read as nothing), and every name a token."""
    from attention_book.models.decoding import PUNCTUATION_NAMES

    made = set(punctuation_tokens(tok, CANDIDATES))
    assert made - set(PUNCTUATION_NAMES) == set(), "punctuation tokens without a spoken name"
    assert set(PUNCTUATION_NAMES) <= made, "names of no token"


@needs_node
def test_javascript_keeps_the_tokenizers_punctuation(view, tok):
    """The page's tokenizer and decoder list the punctuation by hand too: both keep in step with the
    package's (ASCII, and marks that normalise to ASCII: fullwidth, the ellipsis, "⁉")."""
    text = " ".join([chr(cp) for cp in range(0x21, 0x7F)] + list("！，。；：？…⁉‼¿¡«»—–·"))
    marks = sorted(set(punctuation_tokens(tok, text)))
    got = run_node(
        "emit([m.split(input.text, input.casefold),"
        " input.marks.map((p) => m.decode(['the', p, 'end']))]);",
        {"text": text, "casefold": view.data()["casefold"], "marks": marks},
    )
    assert got[0] == tok.split(text)
    assert got[1] == [tok.decode(tok.encode(f"the {p} end")) for p in marks]


@needs_node
def test_javascript_distribution_matches_the_package(tok):
    g = torch.Generator().manual_seed(0)
    rows = [torch.randn(40, generator=g) * 3 for _ in range(3)]
    rows.append(torch.tensor([2.0, 5.0, 5.0, -1.0, 0.5, 5.0]))  # tied maxima
    rows[1][[3, 7]] = float("-inf")  # banned tokens
    settings = [
        (1.0, 0),
        (0.0, 0),
        (0.35, 0),
        (1.7, 5),
        (0.8, 1),
        (1.0, 100),
        (1e-40, 0),
        (0.5, 3),
    ]
    payload = [
        {
            "scores": [float(x) if torch.isfinite(x) else None for x in row],
            "t": t,
            "k": k,
        }
        for row in rows
        for t, k in settings
    ]
    got = run_node(
        "emit(input.map((c) => Array.from(m.nextTokenDistribution("
        "c.scores.map((s) => (s === null ? -Infinity : s)), c.t, c.k))));",
        payload,
    )
    for case, probs in zip(payload, got):
        scores = torch.tensor(
            [-float("inf") if s is None else s for s in case["scores"]]
        )
        want = ab.models.decoding.next_token_distribution(
            scores, case["t"], case["k"] or None
        )
        np.testing.assert_allclose(probs, want.numpy(), atol=1e-6, err_msg=str(case))


@needs_node
def test_javascript_banning_matches_the_package(view, tok):
    scores = torch.randn(tok.vocab_size, generator=torch.Generator().manual_seed(5))
    data = view.data()
    got = run_node(
        "emit(Array.from(m.nextTokenDistribution(m.banned(input.scores, input.banned), 0.9, 7)));",
        {"scores": scores.tolist(), "banned": data["banned"]},
    )
    np.testing.assert_allclose(
        got, next_token_probs(scores, tok, 0.9, 7).numpy(), atol=1e-6
    )


class _Bigram(nn.Module):
    """A stand-in language model whose scores depend on the last id and the context length."""

    def __init__(self, table: torch.Tensor, max_len: int):
        super().__init__()
        self.table = nn.Parameter(table, requires_grad=False)
        self.max_len = max_len

    def forward(self, ids):
        assert ids.shape[1] <= self.max_len
        return self.table[ids] + 0.01 * ids.shape[1]


@needs_node
@pytest.mark.parametrize("prompt", ["the time traveller", "Zebra the machine! " * 4])
def test_javascript_greedy_continuation_matches_generate(view, tok, prompt):
    """The page's decoding loop (<bos>, cropping to the context, banned ids, stopping at <eos>)
    against ab.generate at temperature 0, on a model both sides can compute."""
    table = (
        torch.randn(
            tok.vocab_size, tok.vocab_size, generator=torch.Generator().manual_seed(2)
        )
        * 4
    )
    table[:, tok.eos_id] -= 2.0
    data = dict(view.data(), max_len=6)
    script = """
const table = input.table;
const ort = { Tensor: class { constructor(type, values, dims) { this.data = values; this.dims = dims; } } };
const session = { inputNames: ['ids'], outputNames: ['scores'], async run(feeds) {
  const ids = Array.from(feeds.ids.data, Number);
  if (ids.length > input.data.max_len) throw new Error('context not cropped');
  return { scores: { data: Float32Array.from(table[ids[ids.length - 1]], (s) => s + 0.01 * ids.length) } };
} };
const ids = m.tokenize(input.prompt, input.data).ids;
const greedy = await m.continueIds(ort, session, input.data, ids, 15, 0, 0, () => 0.5);
const sampled = await m.continueIds(ort, session, input.data, ids, 15, 1.3, 4, m.randomStream(9));
const again = await m.continueIds(ort, session, input.data, ids, 15, 1.3, 4, m.randomStream(9));
emit({ greedy, sampled, again });
"""
    got = run_node(script, {"table": table.tolist(), "data": data, "prompt": prompt})
    model = _Bigram(table, 6)
    want = ab.generate(model, tok, prompt, num_tokens=15, temperature=0.0)
    assert tok.decode(got["greedy"]["ids"]) == want
    assert got["sampled"] == got["again"]  # one seed, one sample
    # each sampled id lies among the 4 most likely after the text so far (top-k) and is never special
    ids = [tok.bos_id] + tok.encode(prompt)
    for nxt in got["sampled"]["ids"]:
        probs = next_token_probs(model(torch.tensor([ids[-6:]]))[0, -1], tok, 1.3, 4)
        assert probs[nxt] > 0 and nxt not in data["banned"]
        ids.append(nxt)


def test_widget_and_fallback(view, one_thread):
    pytest.importorskip("ipywidgets")
    form = view.widget()
    prompt, temperature, top_k, seed, _ = form.children
    assert (prompt.value, temperature.value, top_k.value, seed.value) == (
        "the time traveller",
        1.0,
        0,
        3,
    )
    prompt.value = "123 #"  # no tokens: a message, not an error
    temperature.value = 0.0
    top_k.value = 4
    assert view.fallback_html().count("<img") == 1


def test_a_model_too_big_for_a_page_is_not_exported(tok):
    big = ab.DecoderOnlyLM(
        tok.vocab_size, max_len=12, num_hiddens=256, num_heads=4, num_blks=3
    )
    view = GenerateView(big, tok)
    assert view.models() == {}
    assert "MB" in view.data()["too_large"]
    small = GenerateView(small_model(tok), tok)
    assert set(small.models()) == {"next"} and small.data()["too_large"] == ""
