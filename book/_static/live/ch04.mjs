// Chapter 4's live view: type English, read the trained translator's French and where it looked.
// The page repeats what the package does in Python (src/attention_book/text.py and seq2seq.py):
// the same preprocessing and tokens, the source padded to num_steps, greedy decoding that feeds
// back the highest-scoring token until <eos>, and the attention rows ab.alignment_figure draws.

import { say } from "./live.mjs";

const PUNCTUATION = new Set([",", ".", "!", "?"]);

// preprocess_nmt: non-breaking spaces become spaces, lower case, a space before , . ! ?
export function preprocess(text) {
  const chars = Array.from(text.replace(/\u202f/g, " ").replace(/\u00a0/g, " ").toLowerCase());
  let out = "";
  chars.forEach((ch, i) => {
    if (PUNCTUATION.has(ch) && i > 0 && chars[i - 1] !== " ") out += " ";
    out += ch;
  });
  return out;
}

// tokenize_nmt: split on single spaces, drop empty pieces, end with <eos>
export function tokenize(sentence) {
  return sentence.split(" ").filter((t) => t.length > 0).concat(["<eos>"]);
}

// What the model reads for a typed sentence: tokens trimmed to num_steps, their ids (<unk> is 0),
// padded with <pad>, and the valid length (the ids that are not <pad>), as TranslationData.build;
// `cut` says whether tokens were dropped (the page says so under the sentence). A <pad>, <bos>
// or <eos> the reader typed is an unknown word: only the <eos> tokenize appends ends the sentence.
export function encodeSource(text, data) {
  const index = new Map(data.src_vocab.map((t, i) => [t, i]));
  const control = new Set(data.control_tokens || []);
  const all = tokenize(preprocess(text));
  const tokens = all.slice(0, data.num_steps);
  const typed = all.length - 1; // the appended <eos> is the last token
  const known = tokens.map((t, i) => index.has(t) && !(i < typed && control.has(t)));
  const ids = tokens.map((t, i) => (known[i] ? index.get(t) : 0));
  while (ids.length < data.num_steps) ids.push(data.pad);
  return {
    tokens,
    cut: all.length > data.num_steps,
    ids,
    validLen: ids.filter((i) => i !== data.pad).length,
    reads: tokens.map((t, i) => (known[i] ? t : "<unk>")),
    labels: tokens.map((t, i) => (known[i] ? t : `${t} (unk)`)),
  };
}

function argmax(values) {
  let best = 0; // the first of equal maxima, as torch.argmax
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

function ids64(ort, ids, dims) {
  return new ort.Tensor("int64", BigInt64Array.from(ids, (i) => BigInt(i)), dims);
}

// Greedy decoding with the two graphs; the result is what reference_translation gives in Python.
export async function translate(ort, encoder, step, data, text) {
  const src = encodeSource(text, data);
  const T = data.num_steps;
  const encoded = await encoder.run({ [encoder.inputNames[0]]: ids64(ort, src.ids, [1, T]) });
  const encOutputs = encoded[encoder.outputNames[0]];
  let hidden = encoded[encoder.outputNames[1]];
  const validLen = ids64(ort, [src.validLen], [1]);
  const [tokenName, hiddenName, encName, lenName] = step.inputNames;
  const tokens = [];
  const rows = [];
  let previous = data.bos;
  for (let s = 0; s < data.max_steps; s++) {
    const out = await step.run({
      [tokenName]: ids64(ort, [previous], [1, 1]),
      [hiddenName]: hidden,
      [encName]: encOutputs,
      [lenName]: validLen,
    });
    const next = argmax(out[step.outputNames[0]].data);
    hidden = out[step.outputNames[1]];
    rows.push(Array.from(out[step.outputNames[2]].data).slice(0, src.labels.length));
    if (next === data.eos) break;
    tokens.push(data.tgt_vocab[next]);
    previous = next;
  }
  const names = rows.length > tokens.length ? tokens.concat(["<eos>"]) : tokens;
  return { source: src.labels, reads: src.reads, cut: src.cut, tokens, rows: names, attention: rows,
    steps: rows.length };
}

// --- drawing -------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, text = null, ns = null) {
  const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

// white -> dark red, the colours of the book's heatmaps (matplotlib's "Reds")
const REDS = [[255, 245, 240], [252, 187, 161], [251, 106, 74], [203, 24, 29], [103, 0, 13]];

function red(w) {
  const x = Math.min(Math.max(w, 0), 1) * (REDS.length - 1);
  const i = Math.min(Math.floor(x), REDS.length - 2);
  const f = x - i;
  const c = REDS[i].map((a, k) => Math.round(a + f * (REDS[i + 1][k] - a)));
  return `rgb(${c.join(",")})`;
}

function textWidth(label) {
  return 8 * label.length + 8; // about 8 px a character at 13 px
}

// Rows: output tokens (queries); columns: source tokens (keys); each cell its weight. As the
// book's heatmaps (ab.heatmaps_figure), the colours run from 0 to the map's largest weight.
export function heatmap(result) {
  const cell = 52;
  const largest = Math.max(...result.attention.flat()) || 1;
  const left = Math.max(60, ...result.rows.map(textWidth));
  const top = Math.max(40, ...result.source.map((l) => 0.75 * textWidth(l) + 10));
  // the rotated column labels may reach past the last column
  const reach = Math.max(...result.source.map((l, j) => left + cell * (j + 0.5) + 0.77 * textWidth(l)));
  const width = Math.max(left + cell * result.source.length + 10, reach + 4);
  const height = top + cell * result.rows.length + 6;
  const svg = el("svg", { viewBox: `0 0 ${width} ${height}`, width, role: "img", class: "ab-live-heatmap",
    "aria-label": "attention weights: one row per output token, one column per source token" }, null, SVG);
  svg.style.maxWidth = "100%";
  svg.style.height = "auto";
  result.source.forEach((label, j) => {
    const x = left + cell * (j + 0.5);
    svg.append(el("text", { x, y: top - 8, transform: `rotate(-40 ${x} ${top - 8})`, "font-size": 13 },
      label, SVG));
  });
  result.rows.forEach((label, i) => {
    const y = top + cell * (i + 0.5) + 4;
    svg.append(el("text", { x: left - 8, y, "text-anchor": "end", "font-size": 13 }, label, SVG));
    result.attention[i].forEach((w, j) => {
      const rect = el("rect", { x: left + cell * j, y: top + cell * i, width: cell - 2, height: cell - 2,
        fill: red(w / largest) }, null, SVG);
      rect.append(el("title", {}, `${label} ← ${result.source[j]}: ${w.toFixed(3)}`, SVG));
      svg.append(rect);
      svg.append(el("text", { x: left + cell * (j + 0.5) - 1, y: top + cell * (i + 0.5) + 4,
        "text-anchor": "middle", "font-size": 12, fill: w / largest > 0.6 ? "white" : "black" }, w.toFixed(2), SVG));
    });
  });
  const note = el("p", { class: "ab-live-caption" },
    `Columns: source tokens (keys); rows: output tokens (queries); the darkest cell: ${largest.toFixed(2)}.`);
  const map = el("div", { class: "ab-live-map" });
  map.append(svg, note);
  return map;
}

// --- the view ------------------------------------------------------------------------------

export function mount(root, ctx) {
  const { ort, data } = ctx;
  // A model too big for a page was not exported: the loader keeps the translations and shows why.
  if (!ctx.manifest.models.step) throw new Error(data.too_large || "the translator was not exported");
  const form = el("form", { class: "ab-live-form" });
  const input = el("input", { type: "text", "aria-label": "English sentence", size: 40,
    placeholder: "type an English sentence, e.g. we are tired .", spellcheck: "false" });
  input.value = data.examples[0] || "";
  input.style.maxWidth = "100%";
  const button = el("button", { type: "submit" }, "Translate");
  form.append(input, " ", button);
  const examples = el("div", { class: "ab-live-examples" });
  examples.style.margin = "0.4em 0 0.8em";
  const french = el("p", { class: "ab-live-output", "aria-live": "polite" }); // the answer, said (issue 38)
  const reads = el("p", { class: "ab-live-reads" });
  const figure = el("div", { class: "ab-live-figure" });
  const panel = el("div", { class: "ab-live-panel" });
  panel.append(form, examples, reads, french, figure);
  const line = root.querySelector(".ab-live-status");
  if (line) root.insertBefore(panel, line); // the status line stays under the view
  else root.append(panel);

  let engines = null;
  let queue = Promise.resolve();
  let latest = 0;

  async function run(text) {
    if (!text.trim()) {
      root.dataset.result = "";
      reads.textContent = "";
      french.textContent = "Type an English sentence to translate (for example: i'm home .).";
      figure.replaceChildren();
      ctx.status(""); // no line about an earlier sentence under an empty box
      return;
    }
    ctx.status("Translating…"); // said at once, so that every request is answered in words
    if (!engines) {
      ctx.status("Loading the translator…");
      engines = await Promise.all([ctx.session("encoder"), ctx.session("step")]);
    }
    const start = performance.now();
    const result = await translate(ort, engines[0], engines[1], data, text);
    const ms = performance.now() - start;
    reads.textContent = `The model reads: ${result.reads.join(" ")}` + (result.cut ?
      ` (cut to the first ${data.num_steps} tokens: the model reads no more, as in training)` : "");
    // said through live.mjs's say, as chapter 7's: "nous <unk> ." was read "less than unk
    // greater than" (accessibility reader, issue 38); the page shows the tokens as written
    say(french, result.tokens.length ? `French: ${result.tokens.join(" ")}` :
      "French: (the model wrote <eos> at once: an empty translation)");
    figure.replaceChildren(heatmap(result));
    root.dataset.result = JSON.stringify({ sentence: text, ...result, ms });
    ctx.result(ms);
    root.dataset.decoderStepMs = (ms / result.steps).toFixed(2);
    ctx.status(`Translated in your browser: ${result.steps} decoder steps in ${ms.toFixed(0)} ms.`);
  }

  function request(text) {
    const ticket = ++latest;
    // one translation at a time; one typed over by a newer sentence is skipped
    queue = queue.then(() => (ticket === latest ? run(text) : null)).catch((err) => {
      ctx.status(`The translator failed: ${err && err.message ? err.message : err}`);
    });
    return queue;
  }

  let timer = null;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(timer); // Enter translates now: the typing's pending translation is not run again after it
    request(input.value);
  });
  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => request(input.value), 250);
  });
  for (const sentence of data.examples) {
    const b = el("button", { type: "button", class: "ab-live-example" }, sentence);
    b.addEventListener("click", () => {
      input.value = sentence;
      request(sentence);
    });
    examples.append(b, " ");
  }
  return request(input.value);
}
