"""Chapter 4's live translator (src/attention_book/book/live_ch04.py, book/_static/live/ch04.mjs).

* The two exported graphs (encoder, one decoder step) match the PyTorch model
  under onnxruntime, for two source lengths.
* The page's tokenizer (``preprocess``, ``tokenize``, ``encodeSource`` in ch04.mjs,
  run by Node) gives the package's tokens, ids, valid lengths and labels on golden
  cases: punctuation, apostrophes, capitals, extra spaces, unknown words, Unicode.
* The page's greedy decoding (ch04.mjs ``translate`` with onnxruntime-web under
  Node, over the exported graphs) gives the tokens and attention weights of
  ``ab.translate`` (through ``reference_translation``) to 1e-4.

Node and the vendored onnxruntime-web (``make book`` stages it) are needed by the
last two groups; without them those tests are skipped and say why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

import attention_book as ab
from attention_book.book.live import export_onnx, live, run_onnx
from attention_book.book.live_ch04 import (
    DecoderStepGraph,
    SourceEncoderGraph,
    ch04_live_view,
    reference_translation,
    typed_source,
)
from attention_book.data.text import preprocess_nmt, synthetic_pairs, tokenize_nmt

# Its module fixtures train and export a model (tens of seconds): every test of this file runs on one
# xdist worker, so the fixtures are built once, not once per worker (tests/xdist_group_ids.py).
pytestmark = pytest.mark.xdist_group("live_ch04")

ROOT = Path(__file__).resolve().parent.parent
VIEW_JS = ROOT / "book" / "_static" / "live" / "ch04.mjs"
ORT_CANDIDATES = [
    ROOT / "_stage" / "_vendor" / "onnxruntime-web" / "ort.wasm.min.mjs",
    ROOT / "_build" / "html" / "_static" / "onnxruntime-web" / "ort.wasm.min.mjs",
]
TOL = 1e-4

# Typed sentences, none of them the chapter's examples: an unknown word, capitals and no space
# before the punctuation, extra spaces, a sentence longer than num_steps (trimmed, <eos> lost).
SENTENCES = [
    "she's TIRED!",
    "we   won .",
    "the zebra eats .",
    "they are lazy and very rich and tired today .",
]

# Golden cases for the tokenizer: what the package does with awkward input.
GOLDEN = [
    "I'm home.",
    "  Go   now!  ",
    "He's calm,really?",
    "Qu'est-ce QUE c'est ?",
    "ÉLÈVE Ünïcode straße",
    "ΟΔΟΣ ΟΔΟΣ.",
    "İstanbul",
    "non\u00a0breaking\u202fspace.",
    "...",
    "?!",
    "a.b.c",
    "",
    "   ",
    "constructor __proto__ toString hasOwnProperty",
    "<unk> <pad> <eos> <bos>",
    "<eos> we <bos> won <pad> .",
    "go\tnow .",
    "i ❤️ paris 😀!",
    "ǅungla",
    "one two three four five six seven eight nine ten eleven .",
    "i'm cool , i'm home .",
    "Wait ! ! !",
]


@pytest.fixture(scope="module")
def trained():
    """A tiny translator trained for a few seconds on the generated corpus (the model needs no quality)."""
    with ab.single_thread():
        data = ab.load_translation(
            pairs=synthetic_pairs(300), num_train=240, num_val=60, verbose=False
        )
        model, _ = ab.experiments.translation.train_translator(
            data,
            embed_size=32,
            num_hiddens=32,
            num_layers=2,
            epochs=30,
            progress=False,
            seed=0,
        )
    return model.eval(), data


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The view's two graphs exported as the website build exports them."""
    model, data = trained
    folder = tmp_path_factory.mktemp("ch04_live")
    view = ch04_live_view(model, data, ["i'm home ."])
    paths = {}
    for name, (module, args, dynamic, *rest) in view.models().items():
        paths[name] = folder / f"{name}.onnx"
        export_onnx(module, args, paths[name], dynamic, rest[0] if rest else None)
    return view, paths


def test_graph_sizes_and_names(exported):
    _, paths = exported
    for path in paths.values():
        assert path.stat().st_size < 2_000_000
    import onnxruntime

    encoder = onnxruntime.InferenceSession(
        str(paths["encoder"]), providers=["CPUExecutionProvider"]
    )
    step = onnxruntime.InferenceSession(
        str(paths["step"]), providers=["CPUExecutionProvider"]
    )
    # ch04.mjs feeds the graphs by the order of these names
    assert [i.name for i in encoder.get_inputs()] == ["src"]
    assert [i.name for i in step.get_inputs()] == [
        "token",
        "hidden",
        "enc_outputs",
        "valid_len",
    ]
    # the source length is a symbol, in and out, so no length is fixed by the example
    assert isinstance(encoder.get_outputs()[0].shape[1], str)


@pytest.mark.parametrize("length, valid", [(9, 6), (4, 4)])
def test_onnx_graphs_match_pytorch(trained, exported, length, valid):
    model, data = trained
    _, paths = exported
    gen = torch.Generator().manual_seed(length)
    src = torch.randint(4, len(data.src_vocab), (1, length), generator=gen)
    with torch.no_grad():
        outputs, hidden = SourceEncoderGraph(model.encoder)(src)
    got_outputs, got_hidden = run_onnx(paths["encoder"], {"src": src.numpy()})
    np.testing.assert_allclose(got_outputs, outputs.numpy(), atol=TOL)
    np.testing.assert_allclose(got_hidden, hidden.numpy(), atol=TOL)

    token = torch.tensor([[data.tgt_vocab["<bos>"]]])
    valid_len = torch.tensor([valid])
    with torch.no_grad():
        want = DecoderStepGraph(model.decoder)(token, hidden, outputs, valid_len)
    got = run_onnx(
        paths["step"],
        {
            "token": token.numpy(),
            "hidden": hidden.numpy(),
            "enc_outputs": outputs.numpy(),
            "valid_len": valid_len.numpy(),
        },
    )
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), atol=TOL)
    assert got[2].shape == (1, length)
    assert np.all(got[2][0, valid:] == 0)  # padding gets no weight


def test_reference_matches_attention_map_conventions(trained):
    model, data = trained
    ref = reference_translation(model, data, "the zebra eats .")
    assert "zebra (unk)" in ref["source"] and "<unk>" in ref["reads"]
    assert len(ref["attention"]) == len(ref["rows"])
    assert all(len(row) == len(ref["source"]) for row in ref["attention"])
    assert all(abs(sum(row) - 1) < 1e-5 for row in ref["attention"])


def test_typed_control_tokens_are_unknown_words(trained):
    model, data = trained
    ref = reference_translation(model, data, "<eos> we <bos> won <pad> .")
    assert ref["reads"] == ["<unk>", "we", "<unk>", "won", "<unk>", ".", "<eos>"]
    assert ref["source"][:3] == ["<eos> (unk)", "we", "<bos> (unk)"]
    assert ref["source"][4] == "<pad> (unk)" and ref["source"][-1] == "<eos>"
    # the model is given exactly what it gets for <unk> typed in their place
    same = reference_translation(model, data, "<unk> we <unk> won <unk> .")
    assert same["tokens"] == ref["tokens"] and same["rows"] == ref["rows"]
    np.testing.assert_allclose(
        np.array(same["attention"]), np.array(ref["attention"]), atol=TOL
    )


def test_live_shows_widget_or_page(trained, monkeypatch, tmp_path):
    model, data = trained
    view = ch04_live_view(model, data, ["i'm home .", "we won ."])
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "live")
    form = live(view)
    assert form.children[0].value == "i'm home ."
    form.children[0].value = ""  # an empty sentence gets a message, not an error
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "static")
    monkeypatch.setenv("ATTENTION_BOOK_LIVE", str(tmp_path / "live"))
    monkeypatch.setenv("ATTENTION_BOOK_FRAMES", str(tmp_path / "frames"))
    page = live(view)
    html = page._repr_html_()
    assert 'data-live="ch04.translate"' in html and "i&#x27;m home ." in html
    manifest = json.loads(
        (tmp_path / "live" / "ch04.translate.json").read_text(encoding="utf-8")
    )
    assert manifest["data"]["src_vocab"] == data.src_vocab.idx_to_token
    saved = torch.load(
        tmp_path / "frames" / "live" / "ch04.translate.pt", weights_only=False
    )
    assert reference_translation(
        saved["model"], saved["data"], "we won ."
    ) == reference_translation(model, data, "we won .")


def test_view_refuses_a_model_without_attention(trained):
    _, data = trained
    plain = ab.make_seq2seq(
        len(data.src_vocab), len(data.tgt_vocab), 8, 8, 1, attention=None
    )
    with pytest.raises(ValueError, match="attention"):
        ch04_live_view(plain, data)


# --- the page's JavaScript, run by Node ---------------------------------------------------------


def _node():
    node = shutil.which("node")
    if node is None:
        pytest.skip(
            "Node.js is not installed: the page's tokenizer and decoding are tested with it"
        )
    return node


def _run_node(script: str, *args) -> object:
    result = subprocess.run(
        [_node(), "--input-type=module", "-e", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


TOKENIZE_JS = """
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
const [viewPath, jobPath] = process.argv.slice(1);
const view = await import(pathToFileURL(viewPath).href);
const job = JSON.parse(readFileSync(jobPath, "utf8"));
console.log(JSON.stringify(job.cases.map((s) => ({
  preprocessed: view.preprocess(s), tokens: view.tokenize(view.preprocess(s)), source: view.encodeSource(s, job.data),
}))));
"""


def test_page_tokenizer_matches_package(trained, tmp_path):
    model, data = trained
    view = ch04_live_view(model, data)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"cases": GOLDEN, "data": view.data()}), encoding="utf-8")
    got = _run_node(TOKENIZE_JS, VIEW_JS, job)
    # the ids of the sentence the model is given (a typed <pad>, <bos> or <eos> as <unk>)
    src, _, valid, _ = data.build([typed_source(data, case)[2] for case in GOLDEN])
    for i, (case, page) in enumerate(zip(GOLDEN, got)):
        tokens = tokenize_nmt(preprocess_nmt(case))
        assert page["preprocessed"] == preprocess_nmt(case), case
        assert page["tokens"] == tokens, case
        assert page["source"]["tokens"] == tokens[: data.num_steps], case
        assert page["source"]["ids"] == src[i].tolist(), case
        assert page["source"]["validLen"] == int(valid[i]), case
        ref = reference_translation(model, data, case)
        assert page["source"]["labels"] == ref["source"], case
        assert page["source"]["reads"] == ref["reads"], case
        assert page["source"]["cut"] == ref["cut"] == (len(tokens) > data.num_steps), case
    assert any(page["source"]["cut"] for page in got), "no golden case is longer than num_steps"


TRANSLATE_JS = """
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
const [ortPath, viewPath, jobPath] = process.argv.slice(1);
const ort = await import(pathToFileURL(ortPath).href);
const view = await import(pathToFileURL(viewPath).href);
ort.env.wasm.numThreads = 1;
const job = JSON.parse(readFileSync(jobPath, "utf8"));
const encoder = await ort.InferenceSession.create(readFileSync(job.encoder));
const step = await ort.InferenceSession.create(readFileSync(job.step));
const out = [];
for (const s of job.sentences) out.push(await view.translate(ort, encoder, step, job.data, s));
console.log(JSON.stringify(out));
"""


def _onnxruntime_web(folder: Path) -> Path:
    """The vendored onnxruntime-web module, or the one in the pinned tarball scripts/vendor_js.py cached."""
    found = next((p for p in ORT_CANDIDATES if p.is_file()), None)
    if found is not None:
        return found
    tarballs = sorted((ROOT / "_build" / "cache" / "npm").glob("onnxruntime-web-*.tgz"))
    if not tarballs:
        pytest.skip("no onnxruntime-web: `make book` vendors it (scripts/vendor_js.py)")
    with tarfile.open(tarballs[-1]) as tar:
        for name in (
            "ort.wasm.min.mjs",
            "ort-wasm-simd-threaded.mjs",
            "ort-wasm-simd-threaded.wasm",
        ):
            tar.extract(f"package/dist/{name}", folder, filter="data")
    return folder / "package" / "dist" / "ort.wasm.min.mjs"


def assert_same_translation(page: dict, ref: dict, sentence: str) -> None:
    """The page's result equals the package's: the same tokens and labels, weights to 1e-4."""
    for key in ("source", "reads", "tokens", "rows"):
        assert page[key] == ref[key], f"{sentence!r}: {key} {page[key]} != {ref[key]}"
    np.testing.assert_allclose(
        np.array(page["attention"]),
        np.array(ref["attention"]),
        atol=TOL,
        err_msg=sentence,
    )


@pytest.mark.slow
def test_page_decoding_matches_package(trained, exported, tmp_path):
    ort_module = _onnxruntime_web(tmp_path)
    model, data = trained
    view, paths = exported
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "encoder": str(paths["encoder"]),
                "step": str(paths["step"]),
                "data": view.data(),
                "sentences": SENTENCES,
            }
        ),
        encoding="utf-8",
    )
    got = _run_node(TRANSLATE_JS, ort_module, VIEW_JS, job)
    for sentence, page in zip(SENTENCES, got):
        assert_same_translation(
            page, reference_translation(model, data, sentence), sentence
        )


def test_a_full_size_translator_stays_off_the_page(trained, monkeypatch, tmp_path):
    _, data = trained
    big = ab.make_seq2seq(len(data.src_vocab), len(data.tgt_vocab), 256, 256, 2)
    view = ch04_live_view(big, data, ["i'm home ."])
    assert "decoder" in view.too_large() and view.models() == {}
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "static")
    monkeypatch.setenv("ATTENTION_BOOK_LIVE", str(tmp_path))
    monkeypatch.delenv("ATTENTION_BOOK_FRAMES", raising=False)
    live(view)
    manifest = json.loads(
        (tmp_path / "ch04.translate.json").read_text(encoding="utf-8")
    )
    assert manifest["models"] == {} and "too big" in manifest["data"]["too_large"]
    assert list(tmp_path.glob("*.onnx")) == []
