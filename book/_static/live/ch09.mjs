// Chapter 9, live: type a prompt, and the book's decoder-only model continues it in the page.
//
// The ONNX graph "next" maps token ids (1, T) to the scores of the next token (1, vocab).
// Everything around it mirrors the package so the page gives the notebook's numbers:
// tokenize() is Tokenizer.encode at level 'word', nextTokenDistribution() is
// ab.next_token_distribution, and continuing a prompt follows ab.generate (<bos> + prompt,
// cropped to the model's context, special tokens other than <eos> never drawn, stop at
// <eos>). Only the random numbers differ: the page draws from its own seeded generator,
// so a sampled continuation repeats under a seed here but is not the notebook's sample.
// Temperature 0 draws nothing at random, and there the page equals ab.generate token for token.
import { say, spokenTokens } from "./live.mjs";

const WORD = /<[a-z0-9_]+>|\p{L}[\p{L}\p{M}]*(?:'\p{L}[\p{L}\p{M}]*)?|[.,;:!?]/gu;

// ---------------------------------------------------------------------------- tokens

/** The text as the tokenizer reads it: NFKC, case folding, NFKC again, ’ as '. */
export function normalize(text, casefold) {
  let folded = "";
  for (const ch of text.normalize("NFKC")) {
    const exception = casefold[ch.codePointAt(0)];
    folded += exception !== undefined ? exception : ch.toLowerCase();
  }
  return folded.normalize("NFKC").replaceAll("\u2019", "'");
}

/** The word-level tokens of `text` (digits, symbols and stray apostrophes are dropped). */
export function split(text, casefold) {
  return normalize(text, casefold).match(WORD) || [];
}

/** Tokens and ids of `text`; a token outside the vocabulary becomes <unk>. */
export function tokenize(text, data) {
  const index = vocabularyIndex(data);
  const words = split(text, data.casefold);
  const ids = words.map((w) => (index.has(w) ? index.get(w) : data.unk));
  return { words, ids, tokens: ids.map((i) => data.tokens[i]) };
}

const indexes = new WeakMap();
function vocabularyIndex(data) {
  if (!indexes.has(data)) indexes.set(data, new Map(data.tokens.map((t, i) => [t, i])));
  return indexes.get(data);
}

/** Text of tokens, as Tokenizer.decode writes it: spaces between words, none before . , ; : ! ? */
export function decode(tokens) {
  return tokens.join(" ").replace(/ ([.,;:!?])/g, "$1");
}

// ---------------------------------------------------------------------------- spoken text

// A bare "." or "," is read as nothing (or a pause) by a screen reader (accessibility reader,
// issue 38): the live regions quote tokens and name punctuation, from the table the package
// ships (data.punctuation, models/decoding.PUNCTUATION_NAMES), as the figure's text does.

/** One token as a listener can tell it apart, as ab.models.decoding.spoken_token: "'.' (period)", "'and'". */
export function spokenToken(token, names) {
  const name = names && Object.hasOwn(names, token) ? names[token] : "";
  return name ? `'${token}' (${name})` : `'${token}'`;
}

/** Decoded text with its punctuation named, as ab.models.decoding.spoken_text: "the machine comma and". */
export function spokenText(text, names) {
  return [...text].map((c) => (names && Object.hasOwn(names, c) ? ` ${names[c]} ` : c)).join("")
    .split(/\s+/).filter(Boolean).join(" ");
}

/**
 * What the live region says of a continuation: whole sentences, each ended and spaced, with the
 * punctuation named ("the machine, then: the time comma and. Sampled with seed 0. The same text
 * again ..."). The region shows "prompt ▸ continuation" aria-hidden and says this; the spoken text
 * comes first and ends with a space, so even the region's textContent runs no two sentences together
 * (a listener heard "the machine ▸ , (sampled with seed 0)", an accessibility reader "...0.274Top";
 * issue 38).
 */
export function spokenContinuation(prompt, words, stopped, how, again, names) {
  const continued = [words.length ? spokenText(decode(words), names) : "", stopped ? "end of text" : ""];
  const sentence = (s) => s && `${s[0].toUpperCase()}${s.slice(1)}${/[.!?]$/.test(s) ? "" : "."}`;
  return spokenTokens([`${prompt.trim()}, then: ${continued.filter(Boolean).join(", ")}.`, sentence(how), again]
    .filter(Boolean).join(" ") + " ");
}

/** "1 new word", "3 new words". */
export function counted(n, noun) {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

// ---------------------------------------------------------------------------- sampling

/** Probabilities of the next token from `scores`, as ab.next_token_distribution computes them. */
export function nextTokenDistribution(scores, temperature, topK) {
  const n = scores.length;
  const probs = new Float64Array(n);
  if (!n) return probs;
  let best = 0;
  for (let i = 1; i < n; i++) if (scores[i] > scores[best]) best = i;
  if (temperature === 0) {
    probs[best] = 1;
    return probs;
  }
  let scaled = Float64Array.from(scores, (s) => s / temperature);
  // A temperature so small that the quotients overflow: the limit, all mass on the maximum.
  const broken = scaled.some((s) => Number.isNaN(s) || s === Infinity) || scaled.every((s) => s === -Infinity);
  if (broken) scaled = Float64Array.from(scores, (s) => (s === scores[best] ? 0 : -Infinity));
  if (topK && topK < n) {
    const kth = Float64Array.from(scaled).sort().reverse()[topK - 1];
    scaled = scaled.map((s) => (s < kth ? -Infinity : s));
  }
  const top = Math.max(...scaled);
  let total = 0;
  for (let i = 0; i < n; i++) total += probs[i] = Math.exp(scaled[i] - top);
  for (let i = 0; i < n; i++) probs[i] /= total;
  return probs;
}

/** Scores with the never-sampled ids set to -Infinity (a copy). */
export function banned(scores, ids) {
  const out = Float64Array.from(scores);
  for (const i of ids) out[i] = -Infinity;
  return out;
}

/** A seeded generator of uniform numbers in [0, 1) (mulberry32): the same seed, the same stream. */
export function randomStream(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One id drawn from `probs` with the uniform number `u`; a one-hot distribution gives its id whatever `u`. */
export function draw(probs, u) {
  let last = -1;
  let acc = 0;
  for (let i = 0; i < probs.length; i++) {
    if (probs[i] <= 0) continue;
    acc += probs[i];
    last = i;
    if (u < acc) return i;
  }
  return last;
}

/** The `count` most likely ids of `probs`, most likely first (ties: lower id first). */
export function topIds(probs, count) {
  const order = Array.from(probs.keys());
  order.sort((a, b) => probs[b] - probs[a] || a - b);
  return order.slice(0, count);
}

// ---------------------------------------------------------------------------- the model

/** Scores of the next token after `ids` (already cropped), from the ONNX session. */
async function nextScores(ort, session, ids) {
  const feeds = { [session.inputNames[0]]: new ort.Tensor("int64", BigInt64Array.from(ids, BigInt), [1, ids.length]) };
  const out = await session.run(feeds);
  return out[session.outputNames[0]].data;
}

function context(data, ids) {
  return [data.bos, ...ids].slice(-data.max_len);
}

/** Continue `ids` by up to `count` tokens, as ab.generate does; `uniform` gives the random numbers. */
export async function continueIds(ort, session, data, ids, count, temperature, topK, uniform) {
  const out = [];
  let stopped = false;
  for (let step = 0; step < count; step++) {
    const scores = banned(await nextScores(ort, session, context(data, [...ids, ...out])), data.banned);
    const next = draw(nextTokenDistribution(scores, temperature, topK), temperature === 0 ? 0 : uniform());
    if (next === data.eos) {
      stopped = true;
      break;
    }
    out.push(next);
  }
  return { ids: out, stopped };
}

// ---------------------------------------------------------------------------- the view

const STYLE = `
.ab-ch09 { display: grid; grid-template-columns: minmax(0, 1fr); gap: .5rem; margin: .5rem 0; max-width: min(42rem, 100%); }
.ab-ch09 > * { min-width: 0; }
.ab-ch09 .ab-row { display: flex; flex-wrap: wrap; gap: .4rem 1rem; align-items: center; }
.ab-ch09 label { display: inline-flex; gap: .4rem; align-items: center; }
.ab-ch09 .ab-prompt { flex: 1 1 16rem; min-width: 0; }
.ab-ch09 .ab-prompt input { flex: 1; min-width: 0; font-size: 1rem; padding: .2rem .4rem; }
.ab-ch09 select { max-width: 12rem; }
.ab-ch09 input[type=number] { width: 4.5rem; }
.ab-ch09 output { min-width: 2.5rem; }
/* the token line wraps within the column at any length (a fresh learner: a 15-word prompt ran to 583 px
   in a 358 px column) */
.ab-ch09 .ab-tokens { display: flex; flex-wrap: wrap; gap: .2rem .3rem; align-items: baseline; }
.ab-ch09 .ab-tokens code { white-space: normal; overflow-wrap: anywhere; min-width: 0; }
.ab-ch09 .ab-tokens .ab-cut { text-decoration: line-through; opacity: .6; }
.ab-ch09 .ab-unk { color: #b00; }
.ab-ch09 .ab-bars { display: grid; grid-template-columns: minmax(3rem, max-content) minmax(0, 1fr) 3.5rem;
  gap: .15rem .5rem; align-items: center; font-size: .9rem; }
.ab-ch09 .ab-bar { position: relative; height: 1.1rem; background: #f2f2f2; }
.ab-ch09 .ab-bar span { position: absolute; left: 0; }
.ab-ch09 .ab-bar .ab-raw { top: 0; height: .45rem; background: #b3b3b3; }
.ab-ch09 .ab-bar .ab-adj { bottom: 0; height: .6rem; background: #d62728; }
.ab-ch09 .ab-message { color: #b00; }
.ab-ch09 .ab-text { font-family: monospace; white-space: pre-wrap; overflow-wrap: anywhere; }
.ab-ch09 .ab-sr { position: absolute; width: 1px; height: 1px; margin: -1px; overflow: hidden;
  clip: rect(0 0 0 0); white-space: nowrap; }
`;

function element(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  el.append(...children);
  return el;
}

function labelled(text, ...inputs) {
  return element("label", {}, text, ...inputs);
}

/** Build the view in `root` and run the model behind it (ctx from live.mjs: ort, data, session, status). */
export async function mount(root, ctx) {
  const { ort, data } = ctx;
  // A model too big for a page was not exported: the loader keeps the figure and shows why.
  if (!ctx.manifest || !ctx.manifest.models.next) throw new Error(data.too_large || "the model was not exported");
  if (!document.getElementById("ab-ch09-style")) document.head.append(element("style", { id: "ab-ch09-style" }, STYLE));
  const prompt = element("input", { type: "text", value: data.prompt, "aria-label": "prompt", name: "prompt" });
  const examples = element("select", { "aria-label": "example prompts", name: "example" },
    ...data.examples.map((e) => element("option", { value: e }, e)));
  const temperature = element("input", { type: "range", min: "0", max: "2", step: "0.01", value: "1", name: "temperature" });
  const temperatureShown = element("output", {}, "1.00");
  const topK = element("input", { type: "number", min: "0", max: String(data.tokens.length), step: "1", value: "0", name: "top_k",
    title: "0 = all tokens" });
  // 0 means every token: the field and a screen reader say "all", not "0" (issue 38). showTopK alone sets
  // its value text and description, for the value it holds (a diff reviewer: set once, then overwritten).
  const topKShown = element("span", { "aria-hidden": "true" });
  const showTopK = () => {
    const k = Math.max(0, Math.floor(Number(topK.value) || 0));
    topK.setAttribute("aria-valuetext", k ? String(k) : "all tokens (0)");
    topK.setAttribute("aria-description", k ? "0 keeps all tokens" : "all tokens are kept");
    topKShown.textContent = k ? "" : " all";
  };
  showTopK();
  const seed = element("input", { type: "number", min: "0", step: "1", value: String(data.seed), name: "seed" });
  const count = element("input", { type: "number", min: "1", max: "200", step: "1", value: String(data.num_tokens), name: "num_tokens" });
  const generateButton = element("button", { type: "button", name: "generate" }, "Generate");
  const stepButton = element("button", { type: "button", name: "step" }, "Step");
  const tokensLine = element("div", { class: "ab-tokens" });
  const message = element("div", { class: "ab-message", role: "alert" });
  const caption = element("div", { class: "ab-caption" });
  const bars = element("div", { class: "ab-bars", role: "img" });
  const text = element("div", { class: "ab-text", "aria-live": "polite" });
  // What the bars show, in words, for a screen reader (issue 38): out of sight, still read.
  const said = element("p", { class: "ab-said", role: "status", "aria-live": "polite",
    style: "position:absolute;width:1px;height:1px;margin:-1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap" });
  const view = element("div", { class: "ab-ch09" },
    element("div", { class: "ab-row" }, element("label", { class: "ab-prompt" }, "prompt", prompt),
      labelled("examples", examples)),
    element("div", { class: "ab-row" }, labelled("temperature", temperature, temperatureShown),
      labelled("top-k", topK, topKShown), labelled("seed", seed), labelled("new words", count),
      element("span", {}, generateButton, " ", stepButton)),
    tokensLine, message, caption, bars, text, said);
  // The loader's status line and the build's frames stay in root; the form goes before them.
  root.insertBefore(view, root.firstChild);
  const report = (ms) => { if (ctx.result) ctx.result(ms); };

  const session = await ctx.session("next");
  let stream = null; // the seeded random numbers of Step, restarted when the seed changes
  let busy = Promise.resolve();
  // the last continuation shown, whether the reader asked for it, and how many times in a row
  let lastShown = "", lastAsked = false, repeats = 0;

  function settings() {
    const t = Math.min(2, Math.max(0, Number(temperature.value) || 0));
    const k = Math.max(0, Math.floor(Number(topK.value) || 0));
    const s = Math.max(0, Math.floor(Number(seed.value) || 0));
    const n = Math.min(200, Math.max(1, Math.floor(Number(count.value) || 1)));
    return { temperature: t, topK: k, seed: s, count: n };
  }

  // How many of the prompt's first tokens fall outside the model's context (<bos> + prompt, cropped).
  function cutCount(n) {
    return Math.max(0, n - data.max_len);
  }

  function showTokens(tokens) {
    const cut = cutCount(tokens.length);
    const kind = (t, i) => [t === data.tokens[data.unk] ? "ab-unk" : "", i < cut ? "ab-cut" : ""].join(" ").trim();
    tokensLine.replaceChildren(element("span", {}, "tokens:"),
      ...tokens.map((t, i) => element("code", kind(t, i) ? { class: kind(t, i) } : {}, t)));
  }

  function showBars(raw, adjusted, t, k) {
    const order = topIds(raw, data.show);
    // The longest bar fills the row, so small probabilities stay visible; the numbers give the scale.
    const longest = Math.max(...order.map((i) => Math.max(raw[i], adjusted[i])), 1e-12);
    const width = (p) => `width:${((100 * p) / longest).toFixed(2)}%`;
    const rows = [];
    for (const i of order) {
      const bar = element("div", { class: "ab-bar" },
        element("span", { class: "ab-raw", style: width(raw[i]) }),
        element("span", { class: "ab-adj", style: width(adjusted[i]) }));
      rows.push(element("code", {}, data.tokens[i]), bar, element("span", {}, adjusted[i].toFixed(3)));
    }
    bars.replaceChildren(...rows);
    bars.setAttribute("aria-label", spokenTokens(
      order.map((i) => `${spokenToken(data.tokens[i], data.punctuation)} ${adjusted[i].toFixed(3)}`).join(", ")));
    caption.textContent = `next token: grey at temperature 1 with all tokens, red at temperature ${t.toFixed(2)}` +
      `, top-k ${k || "all"} (the ${data.show} most likely at temperature 1)`;
  }

  // The distribution after the prompt; returns the prompt's ids, or null when it has no tokens.
  async function update() {
    const { temperature: t, topK: k } = settings();
    temperatureShown.textContent = t.toFixed(2);
    const { ids, tokens } = tokenize(prompt.value, data);
    showTokens(tokens);
    if (!ids.length) {
      message.textContent = "The prompt has no tokens: type a few words (digits and symbols are dropped).";
      bars.replaceChildren();
      caption.textContent = "";
      root.dataset.distribution = "";
      text.textContent = "";
      said.textContent = "";
      return null;
    }
    const cut = cutCount(ids.length);
    say(message, ids.length + 1 > data.max_len
      ? `The prompt has ${ids.length} tokens, more than the model reads: its context is ${data.max_len} tokens ` +
        `with <bos>, so ${cut ? `its first ${cut} (struck through) and <bos> are` : "<bos> is"} cut.`
      : "");
    const started = performance.now();
    const scores = banned(await nextScores(ort, session, context(data, ids)), data.banned);
    const ms = performance.now() - started;
    const raw = nextTokenDistribution(scores, 1, 0);
    const adjusted = nextTokenDistribution(scores, t, k);
    showBars(raw, adjusted, t, k);
    said.textContent = spokenTokens(`Next word at temperature ${t.toFixed(2)}, top-k ${k || "all"}: ` +
      topIds(adjusted, 3).filter((i) => adjusted[i] > 0)
        .map((i) => `${spokenToken(data.tokens[i], data.punctuation)} ${adjusted[i].toFixed(3)}`).join(", ") + ".");
    const top = topIds(adjusted, Math.max(data.show, k || 0)).filter((i) => adjusted[i] > 0);
    root.dataset.distribution = JSON.stringify({
      prompt: prompt.value, ids, temperature: t, top_k: k,
      top: top.map((i) => [i, adjusted[i]]), raw_top: topIds(raw, data.show).map((i) => [i, raw[i]]),
    });
    root.abProbabilities = adjusted;
    report(ms);
    return ids;
  }

  async function generate(asked = false) {
    const ids = await update();
    if (!ids) return;
    const { temperature: t, topK: k, seed: s, count: n } = settings();
    const started = performance.now();
    const out = await continueIds(ort, session, data, ids, n, t, k, randomStream(s));
    report((performance.now() - started) / Math.max(1, out.ids.length + (out.stopped ? 1 : 0)));
    const words = out.ids.map((i) => data.tokens[i]);
    const how = t === 0 ? "greedy: the most likely word each time" : `sampled with seed ${s}`;
    const written = `${decode(words)}${out.stopped ? " <eos>" : ""}`;
    const shown = `${prompt.value.trim()} ▸ ${written}\n(${how})`;
    // The same settings write the same text: say so, so the live region changes and is read again.
    // "Again" only when the reader asked (Generate, Enter) for the text they last asked for: the
    // text written as the page opened is not one they asked for (as chapter 7's translator).
    const same = shown === lastShown;
    repeats = asked && same && lastAsked ? repeats + 1 : 0;
    lastAsked = asked;
    lastShown = shown;
    const why = t === 0 ? "greedy decoding does no sampling, so it always writes the same words."
      : `seed ${s} draws the same words; change the seed for others.`;
    const again = repeats > 0 ? `The same text again (${repeats + 1} times): ${why}`
      : asked && same ? `The same text as before: ${why}` : "";
    text.replaceChildren(element("span", { class: "ab-sr" }, spokenContinuation(prompt.value, words, out.stopped, how, again,
      data.punctuation)), element("span", { "aria-hidden": "true" }, again ? `${shown}\n${again}` : shown));
    root.dataset.continuation = JSON.stringify({
      prompt: prompt.value, temperature: t, top_k: k, seed: s, count: n, ids: out.ids, text: decode(words),
      stopped: out.stopped,
    });
  }

  async function step() {
    const ids = await update();
    if (!ids) return;
    const { temperature: t, topK: k, seed: s } = settings();
    if (!stream || stream.seed !== s) stream = { seed: s, uniform: randomStream(s) };
    const out = await continueIds(ort, session, data, ids, 1, t, k, stream.uniform);
    if (out.stopped) {
      say(text, "The model chose <eos>: the text ends here.");
      return;
    }
    const word = data.tokens[out.ids[0]];
    prompt.value = `${prompt.value.trimEnd()} ${word}`;
    root.dataset.continuation = "";
    await update();
    text.textContent = spokenTokens(`Step added ${spokenToken(word, data.punctuation)} to the prompt `) +
      `(${t === 0 ? "greedy" : `sampled with seed ${s}`}): ` +
      "press Step for one more word, or Generate to continue from here.";
  }

  // One computation at a time, in order; an error shows in the view instead of the console.
  let pending = 0;
  function queue(job) {
    pending += 1;
    root.dataset.busy = "true";
    busy = busy.then(job).catch((err) => {
      message.textContent = `Something went wrong: ${err.message}`;
    }).then(() => {
      pending -= 1;
      root.dataset.busy = String(pending > 0);
    });
    return busy;
  }

  // A continuation belongs to the prompt it continued: a new prompt clears it at once.
  function stale() {
    lastShown = "";
    text.textContent = "The prompt changed: press Generate (or Enter) for a continuation of this one.";
    root.dataset.continuation = "";
  }

  prompt.addEventListener("input", () => { stale(); queue(update); });
  // Enter in the prompt writes the continuation, as the Generate button does.
  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter") { event.preventDefault(); queue(() => generate(true)); }
  });
  examples.addEventListener("change", () => { prompt.value = examples.value; stale(); queue(update); });
  temperature.addEventListener("input", () => queue(update));
  topK.addEventListener("input", () => { showTopK(); queue(update); });
  seed.addEventListener("input", () => {
    stream = null;
    said.textContent = `Seed ${settings().seed}: press Generate or Step to sample with it.`;
  });
  count.addEventListener("input", () => {
    const n = settings().count;
    said.textContent = `${counted(n, "new word")}: press Generate to write ${n === 1 ? "it" : "them"}.`;
  });
  generateButton.addEventListener("click", () => queue(() => generate(true)));
  stepButton.addEventListener("click", () => queue(step));
  await queue(generate);
  if (ctx.status) ctx.status("The model runs in your browser: every number above is computed in this page.");
}
