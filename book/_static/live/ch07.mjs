// Chapter 7's live view: type English, read the trained Transformer's French and its
// encoder–decoder attention (src/attention_book/book/live_ch07.py exports the graphs).
// The model comes as one graph per encoder block and two per decoder block (a page may load
// 2 MB a graph): enc0, enc1, …; dec0_self, dec0_cross, dec1_self, dec1_cross, …. The page
// encodes the padded source once, then decodes greedily as ab.translate does, running the
// decoder over <bos> and every token so far at each step; the last step's cross-attention
// weights are the maps translation.translation_attention collects in Python.
// The tokenizer and the heatmap are chapter 4's (one definition of each). Rows are labelled
// as in the chapter's static figures: each row's query (decoder input), <bos> first.

import { encodeSource, heatmap } from "./ch04.mjs";
import { say } from "./live.mjs";

function argmax(values) {
  let best = 0; // the first of equal maxima, as torch.argmax
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best;
}

function ids64(ort, ids, dims) {
  return new ort.Tensor("int64", BigInt64Array.from(ids, (i) => BigInt(i)), dims);
}

// Run a graph on its inputs in the order of its inputNames; returns its outputs in order.
async function call(session, inputs) {
  const feeds = {};
  session.inputNames.forEach((name, i) => {
    feeds[name] = inputs[i];
  });
  const out = await session.run(feeds);
  return session.outputNames.map((name) => out[name]);
}

// A (1, heads, T, S) tensor as heads × rows × columns arrays, cut to `rows` rows and `cols` columns.
function headsOf(tensor, rows, cols) {
  const [, heads, T, S] = tensor.dims;
  const flat = tensor.data;
  return Array.from({ length: heads }, (_, h) =>
    Array.from({ length: rows }, (_, t) =>
      Array.from(flat.subarray((h * T + t) * S, (h * T + t) * S + cols))));
}

// What the model reads, as encodeSource, except that a <pad>, <bos> or <eos> the reader typed
// is an unknown word (<unk>): only the <eos> the tokenizer appends ends the sentence.
export function encodeTyped(text, data) {
  const src = encodeSource(text, data);
  const control = new Set(data.control_tokens);
  const typed = src.cut ? src.tokens.length : src.tokens.length - 1; // the appended <eos> last
  for (let i = 0; i < typed; i++) {
    if (!control.has(src.tokens[i])) continue;
    src.ids[i] = 0; // <unk>
    src.reads[i] = "<unk>";
    src.labels[i] = `${src.tokens[i]} (unk)`;
  }
  src.validLen = src.ids.filter((i) => i !== data.pad).length;
  return src;
}

// Greedy decoding with the graphs; the result is what transformer_reference gives in Python.
// graphs = {enc: [sessions], dec: [[self, cross] per block]}.
export async function translate(ort, graphs, data, text) {
  const src = encodeTyped(text, data);
  const T = data.num_steps;
  const validLen = ids64(ort, [src.validLen], [1]);
  let x = ids64(ort, src.ids, [1, T]);
  for (const block of graphs.enc) [x] = await call(block, [x, validLen]);
  const encoded = x;
  const tokens = [];
  const prefix = [data.bos];
  let cross = [];
  let wroteEos = false;
  for (let s = 0; s < data.max_steps; s++) {
    let y = ids64(ort, prefix, [1, prefix.length]);
    cross = [];
    for (const [self, crossGraph] of graphs.dec) {
      [y] = await call(self, [y]);
      const [out, weights] = await call(crossGraph, [y, encoded, validLen]);
      y = out;
      cross.push(weights);
    }
    const next = argmax(y.data); // the last block gives the next token's scores
    if (next === data.eos) {
      wroteEos = true;
      break;
    }
    tokens.push(data.tgt_vocab[next]);
    prefix.push(next);
  }
  // each row's step writes a token: the French tokens, then <eos> if it was written;
  // its query (the row's label) is the decoder input before it: <bos>, then the French tokens
  const writes = wroteEos ? tokens.concat(["<eos>"]) : tokens;
  const rows = ["<bos>"].concat(tokens).slice(0, writes.length);
  return {
    source: src.labels, reads: src.reads, cut: src.cut, tokens, rows, writes,
    cross: cross.map((w) => headsOf(w, rows.length, src.labels.length)),
    steps: tokens.length + (wroteEos ? 1 : 0),
  };
}

// One map (rows × columns): a head of a layer, or the mean of the layer's heads (head null),
// as pick_map in Python. Layers and heads count from 1.
export function pickMap(cross, layer, head) {
  const heads = cross[layer - 1];
  if (head !== null) return heads[head - 1];
  return heads[0].map((row, t) => row.map((_, j) =>
    heads.reduce((sum, h) => sum + h[t][j], 0) / heads.length));
}

// The map in words, for screen readers: for each row (its query, and the token its step
// writes), the most-attended source token and its weight.
export function describe(result, map, label) {
  const parts = result.rows.map((row, t) => {
    const j = argmax(map[t]);
    const weight = map[t][j].toFixed(2);
    return `after ${row}, writing ${result.writes[t]}: ${result.source[j]} (${weight})`;
  });
  return `Where each step looks most, ${label}: ${parts.join("; ")}.`;
}

// The smallest text (CSS px, as drawn) the view may show: the book's figures keep the same floor.
export const MIN_TEXT_PX = 9;

// Chapter 4's heatmap draws its labels and numbers 12-13 units high and lets the SVG shrink to
// the column: on a 390 px phone a map of nine source tokens showed them 6-7 px high (issue 36).
// Enlarge every text of `svg` that would show under `minPx` at its drawn size, and grow the
// viewBox (and the width it asks for) around the enlarged labels, which then shrinks the map a
// little more: a few passes settle it. Sizes start from the heatmap's own on every call, so a
// wider column (a phone turned sideways) gets the smaller, original text back.
export function legibleText(svg, minPx = MIN_TEXT_PX) {
  const texts = [...svg.querySelectorAll("text")];
  for (const t of texts) {
    if (!t.dataset.size) t.dataset.size = t.getAttribute("font-size");
    t.setAttribute("font-size", t.dataset.size);
  }
  if (!svg.dataset.viewBox) svg.dataset.viewBox = svg.getAttribute("viewBox");
  if (!svg.dataset.width) svg.dataset.width = svg.getAttribute("width");
  svg.setAttribute("viewBox", svg.dataset.viewBox);
  svg.setAttribute("width", svg.dataset.width);
  for (let pass = 0; pass < 6; pass++) {
    const [x, y, w, h] = svg.getAttribute("viewBox").split(" ").map(Number);
    const scale = svg.getBoundingClientRect().width / w; // CSS px per unit, as drawn
    if (!scale) return svg; // not on the page (or hidden): nothing to measure
    let grown = false;
    for (const t of texts) {
      if (Number(t.getAttribute("font-size")) * scale >= minPx) continue;
      t.setAttribute("font-size", ((1.02 * minPx) / scale).toFixed(2));
      grown = true;
    }
    if (!grown) break;
    const box = svg.getBBox(); // every text and cell, in the viewBox's units
    const left = Math.min(x, box.x - 2);
    const top = Math.min(y, box.y - 2);
    const width = Math.max(x + w, box.x + box.width + 2) - left;
    const height = Math.max(y + h, box.y + box.height + 2) - top;
    svg.setAttribute("viewBox", `${left} ${top} ${width} ${height}`);
    svg.setAttribute("width", width);
  }
  return svg;
}

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  return node;
}

export function mount(root, ctx) {
  const { ort, data } = ctx;
  // A model too big for a page was not exported: the loader keeps the translations and shows why.
  if (!ctx.manifest.models.enc0) throw new Error(data.too_large || "the Transformer was not exported");
  const uid = `ab-ch07-${Math.random().toString(36).slice(2, 8)}`;
  const form = el("form", { class: "ab-live-form" });
  const input = el("input", { type: "text", "aria-label": "English sentence", size: 40,
    placeholder: "type an English sentence, e.g. we lost .", spellcheck: "false" });
  input.value = data.examples[0] || "";
  input.style.maxWidth = "100%";
  const button = el("button", { type: "submit" }, "Translate");
  form.append(input, " ", button);
  const examples = el("div", { class: "ab-live-examples" });
  examples.style.margin = "0.4em 0 0.8em";
  const controls = el("div", { class: "ab-live-controls" });
  const control = el("label", { class: "ab-live-control", for: `${uid}-map` }, "attention map ");
  const menu = el("select", { id: `${uid}-map`, name: "map" });
  const last = data.num_layers;
  data.choices.forEach((c, i) => {
    const chosen = c.layer === last && c.head === null; // the last layer's average to start
    menu.add(new Option(c.label, String(i), chosen, chosen));
  });
  controls.append(control, menu);
  const reads = el("p", { class: "ab-live-reads" });
  const french = el("p", { class: "ab-live-output", "aria-live": "polite" }); // the answer, said
  const words = el("p", { class: "ab-live-words", "aria-live": "polite" }); // the map, said
  const figure = el("div", { class: "ab-live-figure" });
  const panel = el("div", { class: "ab-live-panel" });
  panel.append(form, examples, reads, french, controls, words, figure);
  const line = root.querySelector(".ab-live-status");
  if (line) root.insertBefore(panel, line); // the status line stays under the view
  else root.append(panel);

  let graphs = null;
  let shown = null; // the result on the page
  let queue = Promise.resolve();
  let latest = 0;
  // The same sentence translated again gives the same words: say so, so that the line under the
  // view changes and a screen reader reads it again (it had only the time, which can repeat too).
  // "Again" only when the reader asks again (Enter, an example) for what they last asked for: typing
  // "they are happy ." translates it, and the first Enter after it is the reader's first request
  // (accessibility reader, issue 38, heard "The same sentence again (2 times)" there).
  let lastSentence = null; // the sentence last translated, typed or asked for
  let lastAsked = null; // the sentence last asked for (Enter, an example)
  let repeats = 0;

  function draw() {
    if (!shown) return;
    const choice = data.choices[Number(menu.value)];
    const map = pickMap(shown.cross, choice.layer, choice.head);
    const drawn = heatmap({ source: shown.source, rows: shown.rows, attention: map });
    // chapter 4's heatmap names its rows output tokens; here they are the decoder inputs
    drawn.querySelector("svg").setAttribute("aria-label",
      "attention weights: one row per query (decoder input), one column per source token");
    drawn.querySelector(".ab-live-caption").textContent = "Columns: source tokens (keys); " +
      "rows: queries (decoder inputs: <bos>, then each token written; a row's step writes the " +
      `next token); the darkest cell: ${Math.max(...map.flat()).toFixed(2)}.`;
    figure.replaceChildren(drawn);
    legibleText(drawn.querySelector("svg"));
    say(words, describe(shown, map, choice.label));
    root.dataset.map = JSON.stringify({ layer: choice.layer, head: choice.head, weights: map });
  }

  async function load() {
    const session = (name) => ctx.session(name);
    const enc = [];
    const dec = [];
    for (let i = 0; i < data.enc_layers; i++) enc.push(session(`enc${i}`));
    for (let i = 0; i < data.num_layers; i++) {
      dec.push(Promise.all([session(`dec${i}_self`), session(`dec${i}_cross`)]));
    }
    return { enc: await Promise.all(enc), dec: await Promise.all(dec) };
  }

  async function run(text, asked) {
    if (!text.trim()) {
      shown = null;
      root.dataset.result = "";
      reads.textContent = "";
      words.textContent = "";
      french.textContent = "Type an English sentence to translate (for example: i'm home .).";
      figure.replaceChildren();
      ctx.status(""); // no line about an earlier sentence under an empty box
      return;
    }
    ctx.status("Translating…"); // said at once, so that every request is answered in words
    if (!graphs) {
      ctx.status("Loading the Transformer…");
      graphs = await load();
    }
    const start = performance.now();
    const result = await translate(ort, graphs, data, text);
    const ms = performance.now() - start;
    reads.textContent = `The model reads: ${result.reads.join(" ")}` + (result.cut ?
      ` (cut to the first ${data.num_steps} tokens: the model reads no more, as in training)` : "");
    say(french, result.tokens.length ? `French: ${result.tokens.join(" ")}` :
      "French: (the model wrote <eos> at once: an empty translation)");
    shown = result;
    draw();
    root.dataset.result = JSON.stringify({ sentence: text, ...result, ms });
    ctx.result(ms);
    const same = text === lastSentence;
    repeats = asked && same && text === lastAsked ? repeats + 1 : 0;
    lastAsked = asked ? text : text === lastAsked ? lastAsked : null;
    lastSentence = text;
    const why = "the model does no sampling, so the same sentence always gets the same translation.";
    const again = repeats > 0 ? ` Asked again (${repeats + 1} times): ${why}` :
      asked && same ? ` The same translation as before: ${why}` : "";
    ctx.status(`Translated in your browser: ${result.steps} decoder steps in ${ms.toFixed(0)} ms.${again}`);
  }

  function request(text, asked = false) {
    const ticket = ++latest;
    // one translation at a time; one typed over by a newer sentence is skipped
    queue = queue.then(() => (ticket === latest ? run(text, asked) : null)).catch((err) => {
      ctx.status(`The translator failed: ${err && err.message ? err.message : err}`);
    });
    return queue;
  }

  let timer = null;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(timer); // Enter translates now: the typing's pending translation is not run again after it
    request(input.value, true);
  });
  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => request(input.value), 250);
  });
  // a new column width (a phone turned, a window resized) may need other text sizes
  let column = 0;
  if (typeof ResizeObserver !== "undefined") {
    new ResizeObserver(([entry]) => {
      const width = Math.round(entry.contentRect.width);
      if (width === column) return;
      column = width;
      const svg = figure.querySelector("svg");
      if (svg) legibleText(svg);
    }).observe(figure);
  }
  menu.addEventListener("change", draw);
  menu.addEventListener("input", draw);
  for (const sentence of data.examples) {
    const b = el("button", { type: "button", class: "ab-live-example" }, sentence);
    b.addEventListener("click", () => {
      input.value = sentence;
      request(sentence, true);
    });
    examples.append(b, " ");
  }
  return request(input.value);
}
