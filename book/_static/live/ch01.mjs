// Chapter 1's live view: a soft lookup of any name the reader types (issue 36).
//
// The page computes what src/attention_book/experiments/lookup.py computes, in float64: the
// Dice overlap of the character pairs of ^name$ (case ignored, lookup.string_similarity), the
// weights softmax(a / T) over the keys (lookup.lookup_weights) and the pooled one-hot values, a
// probability for each first name (lookup.soft_lookup). The keys and values come from the view's
// JSON (src/attention_book/book/live_ch01.py). The numbers shown are written to data-* attributes
// of the view, for the browser test; tests/test_live_ch01.py runs the functions below in Node.

/** The multiset of character pairs of ^word$, as a Map pair -> count (code points, not UTF-16 units). */
export function bigrams(word) {
  const chars = Array.from(`^${word}$`);
  const counts = new Map();
  for (let i = 0; i < chars.length - 1; i++) {
    const pair = chars[i] + chars[i + 1];
    counts.set(pair, (counts.get(pair) || 0) + 1);
  }
  return counts;
}

/** a(q, k) = 2 |B(q) ∩ B(k)| / (|B(q)| + |B(k)|), case and surrounding spaces ignored. */
export function similarity(query, key) {
  const a = bigrams(query.trim().toLowerCase());
  const b = bigrams(key.trim().toLowerCase());
  let shared = 0;
  for (const [pair, n] of a) shared += Math.min(n, b.get(pair) || 0);
  const size = (m) => Array.from(m.values()).reduce((s, n) => s + n, 0);
  return (2 * shared) / (size(a) + size(b));
}

/** The soft lookup of `query` at temperature `t`: scores, weights and {value: probability}. */
export function softLookup(query, keys, values, t) {
  const scores = keys.map((k) => similarity(query, k));
  const top = Math.max(...scores);
  const exp = scores.map((s) => Math.exp((s - top) / t));
  const total = exp.reduce((s, e) => s + e, 0);
  const weights = exp.map((e) => e / total);
  const pooled = new Map();
  values.forEach((v, i) => pooled.set(v, (pooled.get(v) || 0) + weights[i]));
  return { scores, weights, pooled };
}

/** The sentence the live region says, as live_ch01.SoftLookupView.said writes it. */
export function said(query, t, pooled) {
  const ranked = Array.from(pooled).map(([name, p], i) => ({ name, p, i }));
  ranked.sort((x, y) => y.p - x.p || x.i - y.i); // most likely first; ties keep the database order
  const shown = ranked.filter((r) => r.p >= 0.005).map((r) => `${r.name} ${r.p.toFixed(2)}`);
  return `soft lookup of '${query.trim()}' at T = ${Number(t.toPrecision(3))}: ${shown.join(", ")}`;
}

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text) node.textContent = text;
  return node;
}

export function mount(root, ctx) {
  const data = ctx.data;
  const d = data.defaults;
  const uid = `ab-ch01-${Math.random().toString(36).slice(2, 8)}`;
  const view = el("div", { class: "ab-live-view" });
  const form = el("form", { class: "ab-live-controls" });

  const nameLabel = el("label", { class: "ab-live-control", for: `${uid}-query` }, "name ");
  const query = el("input", { type: "text", id: `${uid}-query`, name: "query", size: 14,
    spellcheck: "false", autocomplete: "off", placeholder: "e.g. Smolar" });
  query.value = d.query;
  query.style.maxWidth = "100%";
  nameLabel.append(query);

  const [lo, hi] = data.temperature_range.map(Math.log10);
  const tLabel = el("label", { class: "ab-live-control", for: `${uid}-temperature` }, "temperature T ");
  const temperature = el("input", { type: "range", id: `${uid}-temperature`, name: "temperature",
    min: lo, max: hi, step: "any" });
  temperature.value = String(Math.log10(d.temperature));
  const tOut = el("output", { for: `${uid}-temperature` });
  tLabel.append(temperature, " ", tOut);
  const button = el("button", { type: "submit" }, "Look up");
  form.append(nameLabel, tLabel, button);

  const readout = el("p", { class: "ab-live-readout", "aria-live": "polite" });
  const table = el("table", { class: "ab-live-table" });
  table.style.borderCollapse = "separate"; // room between the columns, on a phone too
  table.style.borderSpacing = "0.8em 0.15em";
  table.style.marginLeft = "-0.8em";
  const head = el("thead");
  const headRow = el("tr");
  for (const name of ["key", "value", "score a", "weight α"]) headRow.append(el("th", { scope: "col" }, name));
  head.append(headRow);
  const body = el("tbody");
  table.append(head, body);
  const wrap = el("div", { class: "ab-live-table-wrap" });
  wrap.append(table);
  view.append(form, readout, wrap);
  root.insertBefore(view, root.querySelector(".ab-live-status"));
  const fallback = root.querySelector(".ab-live-fallback");
  if (fallback) fallback.hidden = true;

  let runs = 0;
  function update() {
    const t = 10 ** Number(temperature.value);
    tOut.textContent = t.toPrecision(2);
    // the slider's value is log10 T: a screen reader says the temperature itself (issue 38)
    temperature.setAttribute("aria-valuetext", `temperature ${tOut.textContent}`);
    const text = query.value;
    if (!text.trim()) {
      readout.textContent = "Type a name to look it up (for example Smolar).";
      body.replaceChildren();
      Object.assign(view.dataset, { query: "", temperature: String(t), weights: "[]", scores: "[]" });
      ctx.result(0);
      return;
    }
    const start = performance.now();
    const r = softLookup(text, data.keys, data.values, t);
    const ms = performance.now() - start;
    readout.textContent = said(text, t, r.pooled);
    const rows = data.keys.map((k, i) => {
      const row = el("tr");
      row.append(el("th", { scope: "row" }, k), el("td", {}, data.values[i]),
        el("td", {}, r.scores[i].toFixed(3)), el("td", {}, r.weights[i].toFixed(3)));
      return row;
    });
    body.replaceChildren(...rows);
    Object.assign(view.dataset, {
      query: text, temperature: String(t), scores: JSON.stringify(r.scores),
      weights: JSON.stringify(r.weights), pooled: JSON.stringify(Object.fromEntries(r.pooled)),
    });
    runs += 1;
    ctx.status(`Lookup ${runs} computed in your browser in ${ms.toFixed(2)} ms.`);
    ctx.result(ms);
  }

  let timer = null;
  form.addEventListener("submit", (event) => {
    event.preventDefault(); // Enter (or the button) looks the name up; the page does not reload
    clearTimeout(timer); // at once, not again after the typing pause
    update();
  });
  query.addEventListener("input", () => {
    clearTimeout(timer); // typing looks up after a pause; Enter looks up at once
    timer = setTimeout(update, 250);
  });
  temperature.addEventListener("input", update);
  temperature.addEventListener("change", update);
  update();
}
