"""Chapter 7's live Transformer (src/attention_book/book/live_ch07.py, book/_static/live/ch07.mjs).

* The exported graphs (one per encoder block, two per decoder block) each fit a page's
  limit, at the chapter's size too, and their input names are those ch07.mjs feeds.
* Greedy decoding over the exported graphs under onnxruntime, chained as the page chains
  them, gives the tokens of ``ab.translate`` and the cross-attention maps of
  ``translation.translation_attention`` (through ``transformer_reference``) to 1e-4.
* The page's own decoding (ch07.mjs ``translate`` with onnxruntime-web under Node) gives
  the same, and its ``pickMap`` the head or head average ``pick_map`` gives.
* Rows are labelled by their query (decoder input), ``<bos>`` first, as the chapter's static
  figures label them; a ``<pad>``, ``<bos>`` or ``<eos>`` the reader types is an unknown word,
  in Python and on the page.

Node and the vendored onnxruntime-web (``make book`` stages it) are needed by the last
group; without them those tests are skipped and say why. The browser test over the built
site is tests/test_site_live_ch07.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_live_ch04 import _onnxruntime_web, _run_node

import attention_book as ab
from attention_book.book.live import MAX_MODEL_BYTES, export_onnx, live, run_onnx
from attention_book.book.live_ch07 import (
    MAX_VIEW_BYTES,
    ch07_live_view,
    map_choices,
    pick_map,
    transformer_reference,
)
from attention_book.data.text import synthetic_pairs

# Its module fixtures train and export a model (tens of seconds): every test of this file runs on one
# xdist worker, so the fixtures are built once, not once per worker (tests/xdist_group_ids.py).
pytestmark = pytest.mark.xdist_group("live_ch07")

ROOT = Path(__file__).resolve().parent.parent
VIEW_JS = ROOT / "book" / "_static" / "live" / "ch07.mjs"
TOL = 1e-4

# Typed sentences, none of them an example of the chapter: capitals and no space before the
# punctuation, extra spaces, unknown words, a sentence longer than num_steps (cut, <eos> lost),
# an empty one (just <eos>).
SENTENCES = [
    "She's TIRED!",
    "we   won .",
    "the zebra eats .",
    "they are lazy and very rich and tired today .",
    "",
]
# Control tokens typed by the reader: unknown words, read as <unk>; only the <eos> the
# tokenizer appends ends the sentence.
CONTROL = "<eos> we <bos> won <pad> ."
CONTROL_READS = ["<unk>", "we", "<unk>", "won", "<unk>", ".", "<eos>"]


@pytest.fixture(scope="module")
def trained():
    """A small Transformer trained for a few seconds on the generated corpus (no quality needed)."""
    with ab.single_thread():
        data = ab.load_translation(
            pairs=synthetic_pairs(300), num_train=240, num_val=60, verbose=False
        )
        model, _ = ab.experiments.translation.train_transformer(
            data,
            num_hiddens=32,
            ffn_num_hiddens=32,
            num_heads=4,
            num_blks=2,
            epochs=20,
            progress=False,
            seed=0,
        )
    return model.eval(), data


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """The view's graphs exported as the website build exports them."""
    model, data = trained
    folder = tmp_path_factory.mktemp("ch07_live")
    view = ch07_live_view(model, data, ["i'm home ."])
    paths = {}
    for name, (module, args, dynamic, *rest) in view.models().items():
        paths[name] = folder / f"{name}.onnx"
        export_onnx(module, args, paths[name], dynamic, rest[0] if rest else None)
    return view, paths


def test_graphs_fit_a_page_and_take_the_inputs_the_page_feeds(exported):
    view, paths = exported
    assert sorted(paths) == sorted(
        ["enc0", "enc1", "dec0_self", "dec0_cross", "dec1_self", "dec1_cross"]
    )
    import onnxruntime

    estimate = view.graph_bytes()
    for name, path in paths.items():
        size = path.stat().st_size
        assert size < MAX_MODEL_BYTES
        # the estimate that decides whether a model goes on the page is the file's size
        assert estimate[name] <= size < estimate[name] + 40_000, name
        session = onnxruntime.InferenceSession(
            str(path), providers=["CPUExecutionProvider"]
        )
        inputs = [i.name for i in session.get_inputs()]
        want = {
            "enc": ["x", "valid_len"],
            "dec": ["x"]
            if name.endswith("self")
            else ["x", "enc_outputs", "valid_len"],
        }[name[:3]]
        assert inputs == want, name


def test_the_chapters_translator_fits_at_the_quick_size():
    """d = 256, 4 heads, FFN 64, 2 blocks, vocabularies of 250 words: every graph under 2 MB."""
    model = ab.make_transformer(250, 250, 256, 64, 4, 2)

    class Corpus:
        num_steps = 9

    sizes = ch07_live_view(model, Corpus()).graph_bytes()
    assert max(sizes.values()) < MAX_MODEL_BYTES
    assert sum(sizes.values()) < MAX_VIEW_BYTES
    # one decoder block alone would not fit: that is why a block is two graphs
    block = 4 * sum(p.numel() for p in model.decoder.blks[0].parameters())
    assert block > MAX_MODEL_BYTES


def _decode_with_onnxruntime(paths, data, sentence):
    """Greedy decoding over the exported graphs, chained as ch07.mjs chains them."""
    src, _, valid_len, _ = data.build([sentence])
    valid_len = valid_len.numpy()
    x = src.numpy()
    for i in range(2):
        (x,) = run_onnx(paths[f"enc{i}"], {"x": x, "valid_len": valid_len})
    prefix, eos = [data.tgt_vocab["<bos>"]], data.tgt_vocab["<eos>"]
    wrote_eos = False
    for _ in range(data.num_steps):
        y, cross = np.array([prefix]), []
        for i in range(2):
            (y,) = run_onnx(paths[f"dec{i}_self"], {"x": y})
            y, weights = run_onnx(
                paths[f"dec{i}_cross"],
                {"x": y, "enc_outputs": x, "valid_len": valid_len},
            )
            cross.append(weights[0])
        token = int(np.argmax(y[0]))
        if token == eos:
            wrote_eos = True
            break
        prefix.append(token)
    tokens = data.tgt_vocab.to_tokens(prefix[1:])
    rows = len(tokens) + wrote_eos
    return tokens, np.stack(cross)[:, :, :rows]


@pytest.mark.parametrize("sentence", SENTENCES)
def test_onnx_decoding_gives_the_packages_translation(trained, exported, sentence):
    model, data = trained
    _, paths = exported
    tokens, cross = _decode_with_onnxruntime(paths, data, sentence)
    ref = transformer_reference(model, data, sentence)
    assert tokens == ref["tokens"]
    want = np.array(ref["cross"])
    np.testing.assert_allclose(cross[..., : want.shape[-1]], want, atol=TOL)
    assert np.all(cross[..., want.shape[-1] :] == 0)  # padding gets no weight


def test_reference_follows_the_maps_conventions(trained):
    model, data = trained
    ref = transformer_reference(model, data, "the zebra eats .")
    assert "zebra (unk)" in ref["source"] and "<unk>" in ref["reads"]
    cross = torch.tensor(ref["cross"])
    assert cross.shape == (2, 4, len(ref["rows"]), len(ref["source"]))
    torch.testing.assert_close(cross.sum(-1), torch.ones(cross.shape[:-1]))
    # rows are the queries (decoder inputs), as in the static figures: <bos>, then the French;
    # the step of each row writes the next token, the last one <eos> when the model wrote it
    assert (
        ref["rows"][0] == "<bos>"
        and ref["rows"][1:] == ref["tokens"][: len(ref["rows"]) - 1]
    )
    assert len(ref["writes"]) == len(ref["rows"])
    assert ref["writes"][: len(ref["tokens"])] == ref["tokens"]
    # the menu: per layer the head average, then each head; pick_map reads it
    choices = map_choices(2, 4)
    assert len(choices) == 10 and choices[0]["head"] is None
    torch.testing.assert_close(pick_map(cross, 2, None), cross[1].mean(0))
    torch.testing.assert_close(pick_map(cross, 1, 3), cross[0, 2])


def test_typed_control_tokens_are_unknown_words(trained):
    model, data = trained
    ref = transformer_reference(model, data, CONTROL)
    assert ref["reads"] == CONTROL_READS
    assert ref["source"][:3] == ["<eos> (unk)", "we", "<bos> (unk)"]
    assert ref["source"][4] == "<pad> (unk)" and ref["source"][-1] == "<eos>"
    # the model is given exactly what it gets for <unk> typed in their place
    same = transformer_reference(model, data, "<unk> we <unk> won <unk> .")
    assert same["tokens"] == ref["tokens"]
    np.testing.assert_allclose(
        np.array(same["cross"]), np.array(ref["cross"]), atol=TOL
    )


def test_live_shows_widget_or_page(trained, monkeypatch, tmp_path):
    model, data = trained
    view = ch07_live_view(model, data, ["i'm home .", "we won ."])
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "live")
    form = live(view)
    box, menu = form.children[0], form.children[1]
    assert box.value == "i'm home ." and menu.value == (2, None)
    menu.value = (
        1,
        2,
    )  # another map redraws; an empty sentence gets a message, not an error
    box.value = ""
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "static")
    monkeypatch.setenv("ATTENTION_BOOK_LIVE", str(tmp_path / "live"))
    monkeypatch.setenv("ATTENTION_BOOK_FRAMES", str(tmp_path / "frames"))
    html = live(view)._repr_html_()
    assert 'data-live="ch07.translate"' in html and "we won ." in html
    manifest = json.loads(
        (tmp_path / "live" / "ch07.translate.json").read_text(encoding="utf-8")
    )
    assert manifest["data"]["tgt_vocab"] == data.tgt_vocab.idx_to_token
    assert len(manifest["models"]) == 6
    saved = torch.load(
        tmp_path / "frames" / "live" / "ch07.translate.pt", weights_only=False
    )
    assert transformer_reference(
        saved["model"], saved["data"], "we won ."
    ) == transformer_reference(model, data, "we won .")


def test_view_refuses_a_model_that_is_not_a_transformer(trained):
    _, data = trained
    gru = ab.make_seq2seq(len(data.src_vocab), len(data.tgt_vocab), 8, 8, 1)
    with pytest.raises(TypeError, match="make_transformer"):
        ch07_live_view(gru, data)


def test_a_translator_too_big_for_a_page_stays_off_it(trained, monkeypatch, tmp_path):
    _, data = trained
    big = ab.make_transformer(len(data.src_vocab), 3000, 256, 64, 4, 2)
    view = ch07_live_view(big, data, ["i'm home ."])
    assert "dec1_cross" in view.too_large() and view.models() == {}
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "static")
    monkeypatch.setenv("ATTENTION_BOOK_LIVE", str(tmp_path))
    monkeypatch.delenv("ATTENTION_BOOK_FRAMES", raising=False)
    live(view)
    manifest = json.loads(
        (tmp_path / "ch07.translate.json").read_text(encoding="utf-8")
    )
    assert manifest["models"] == {} and "too big" in manifest["data"]["too_large"]
    assert list(tmp_path.glob("*.onnx")) == []


# --- the page's JavaScript, run by Node ---------------------------------------------------------

TRANSLATE_JS = """
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
const [ortPath, viewPath, jobPath] = process.argv.slice(1);
const ort = await import(pathToFileURL(ortPath).href);
const view = await import(pathToFileURL(viewPath).href);
ort.env.wasm.numThreads = 1;
const job = JSON.parse(readFileSync(jobPath, "utf8"));
const open = (name) => ort.InferenceSession.create(readFileSync(job.paths[name]));
const graphs = { enc: [await open("enc0"), await open("enc1")],
  dec: [[await open("dec0_self"), await open("dec0_cross")],
        [await open("dec1_self"), await open("dec1_cross")]] };
const out = [];
for (const s of job.sentences) {
  const r = await view.translate(ort, graphs, job.data, s);
  r.picked = r.rows.length ? [view.pickMap(r.cross, 2, null), view.pickMap(r.cross, 1, 3)] : [];
  r.said = r.rows.length ? view.describe(r, r.picked[0], "layer 2") : "";
  out.push(r);
}
console.log(JSON.stringify(out));
"""


@pytest.mark.slow
def test_page_decoding_matches_package(trained, exported, tmp_path):
    ort_module = _onnxruntime_web(tmp_path)
    model, data = trained
    view, paths = exported
    job = tmp_path / "job.json"
    job.write_text(
        json.dumps(
            {
                "paths": {k: str(p) for k, p in paths.items()},
                "data": view.data(),
                "sentences": SENTENCES + [CONTROL],
            }
        ),
        encoding="utf-8",
    )
    got = _run_node(TRANSLATE_JS, ort_module, VIEW_JS, job)
    assert got[-1]["reads"] == CONTROL_READS
    for sentence, page in zip(SENTENCES + [CONTROL], got):
        ref = transformer_reference(model, data, sentence)
        for key in ("source", "reads", "cut", "tokens", "rows", "writes"):
            assert page[key] == ref[key], f"{sentence!r}: {key}"
        np.testing.assert_allclose(
            np.array(page["cross"]), np.array(ref["cross"]), atol=TOL, err_msg=sentence
        )
        if ref["rows"]:
            cross = torch.tensor(ref["cross"])
            for picked, (layer, head) in zip(page["picked"], [(2, None), (1, 3)]):
                np.testing.assert_allclose(
                    picked, pick_map(cross, layer, head).numpy(), atol=TOL
                )
            first = f"after <bos>, writing {ref['writes'][0]}: "
            assert page["said"].startswith(
                "Where each step looks most, layer 2: " + first
            )


def test_fallback_table_keeps_its_columns_apart(trained):
    """The static page's table (issue 36: "he's calm .il est mouillé ." ran together at 390 px)."""
    model, data = trained
    html = ch07_live_view(model, data, ["i'm home .", "we won ."]).fallback_html()
    first_cells = html.count("<td style='padding:0 1.5em 0 0")
    assert first_cells == 2 and "<th style='padding:0 1.5em 0 0" in html, html
