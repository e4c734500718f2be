// The live views' loader (issue 31; src/attention_book/book/live.py writes the blocks it boots).
//
// boot(root) waits until the reader comes to the view (it scrolls into sight, or is touched,
// focused or typed into), then loads onnxruntime-web once per page (the wasm build vendored
// by scripts/vendor_js.py, one thread: static hosts cannot send the headers that threads
// need), fetches the view's <name>.json from models/, imports the view's own module and calls
// its mount(root, ctx). Until then, and whenever something fails, the notebook's precomputed
// frames stay in the page with a short message; nothing is thrown at the reader.
//
// A view whose block says data-build="load" (live.py: LiveView.build_on_load) is built at once,
// so that a keyboard user who Tabs past it before scrolling meets its controls (issue 38): its
// manifest and module load with the page, onnxruntime-web only with its first session, and
// ctx.arrived tells it when the reader comes to it (it computes its first result then).
//
// ctx = {ort, data, manifest, session(model), status(text), result(ms), root, arrived}:
//   session(model)  a Promise of the ort.InferenceSession of one of the view's graphs (cached);
//                   ctx.ort is set once that runtime has loaded;
//   arrived         a Promise, resolved when the reader comes to the view (at once unless
//                   the view is built on load);
//   status(text)    the line under the view;
//   result(ms)      the view reports each result it shows (ms: the time it took), which the
//                   browser tests and benchmarks/live_views.py read from root.dataset.

const RUNTIME = new URL("../onnxruntime-web/", import.meta.url);
const MODELS = new URL("models/", import.meta.url);
const FILE_NOTE =
  "The live model runs only when the site is served over http: " +
  "python -m http.server -d _build/html, then open http://localhost:8000/.";

let runtime = null;

/** onnxruntime-web, loaded once for the whole page. */
export function loadRuntime() {
  if (runtime === null) {
    runtime = import(new URL("ort.wasm.min.mjs", RUNTIME).href).then((ort) => {
      ort.env.wasm.numThreads = 1;
      ort.env.wasm.proxy = false;
      ort.env.wasm.wasmPaths = RUNTIME.href;
      return ort;
    });
    runtime.catch(() => {
      runtime = null; // a later view may try again
    });
  }
  return runtime;
}

async function fetchJson(url) {
  const response = await fetch(url);
  if (!response.ok) {
    throw new Error(`${url.pathname.split("/").pop()}: HTTP ${response.status}`);
  }
  return response.json();
}

function statusLine(root) {
  let line = root.querySelector(".ab-live-status");
  if (!line) {
    line = document.createElement("p");
    line.className = "ab-live-status";
    line.setAttribute("role", "status");
    root.appendChild(line);
  }
  return line;
}

/** Start the view in `root` (a div.ab-live) when the reader comes to it. */
export function boot(root) {
  if (root.dataset.booted) return;
  root.dataset.booted = "1";
  const line = statusLine(root);
  const status = (text) => say(line, text);
  if (location.protocol === "file:") {
    root.dataset.state = "file";
    status(root.dataset.fileNote || FILE_NOTE);
    return;
  }
  let started = 0;
  let observer = null;
  let arrive = null;
  const arrived = new Promise((resolve) => { arrive = resolve; });
  const early = root.dataset.build === "load";
  const triggers = ["pointerdown", "focusin", "keydown", "input"];
  const start = () => {
    if (started) return;
    started = performance.now();
    if (observer) observer.disconnect();
    triggers.forEach((t) => root.removeEventListener(t, start, true));
    arrive(started);
    if (!early) run(root, status, arrived);
  };
  if (early) run(root, status, arrived);
  triggers.forEach((t) => root.addEventListener(t, start, true));
  if ("IntersectionObserver" in window) {
    observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) start();
    }, { rootMargin: "200px" });
    observer.observe(root);
  } else {
    start();
  }
}

async function run(root, status, arrived) {
  const early = root.dataset.build === "load";
  // A view built on load waits for the reader ("waiting", as before it is booted); it loads,
  // and is busy, once they come to it.
  root.dataset.state = early ? "waiting" : "loading";
  arrived.then(() => {
    if (root.dataset.state !== "waiting" && root.dataset.state !== "loading") return;
    root.dataset.state = "loading";
    root.setAttribute("aria-busy", "true");
  });
  status("Loading the model…");
  try {
    const name = root.dataset.live;
    const manifest = await fetchJson(new URL(`${name}.json`, MODELS));
    // A view that computes in JavaScript alone (chapter 1's lookup) lists no models: no runtime;
    // a view built on load loads it with its first session.
    const ort = Object.keys(manifest.models || {}).length && !early ? await loadRuntime() : null;
    const view = await import(new URL(root.dataset.module, import.meta.url).href);
    const sessions = {};
    const session = (model) => {
      const info = manifest.models[model];
      if (!info) return Promise.reject(new Error(`${name} has no model ${model}`));
      if (!sessions[model]) {
        sessions[model] = loadRuntime().then((runtime) => {
          ctx.ort = runtime;
          return runtime.InferenceSession.create(new URL(info.file, MODELS).href, {
            executionProviders: ["wasm"],
            graphOptimizationLevel: "all",
          });
        });
      }
      return sessions[model];
    };
    let results = 0;
    const result = (ms) => {
      results += 1;
      const first = results === 1;
      // measured from when the reader came to the view
      arrived.then((t0) => {
        if (first) {
          root.dataset.firstResultMs = (performance.now() - t0).toFixed(1);
        }
      });
      if (typeof ms === "number") root.dataset.lastStepMs = ms.toFixed(2);
      root.dataset.results = String(results);
    };
    const ctx = { ort, data: manifest.data, manifest, session, status, result, root, arrived };
    status("Running the model in your browser…");
    await view.mount(root, ctx);
    const fallback = root.querySelector(".ab-live-fallback");
    if (fallback) fallback.hidden = true;
    root.dataset.state = "ready";
  } catch (err) {
    root.dataset.state = "error";
    status(`The live model could not start (${err && err.message ? err.message : err}); ` +
      "the notebook's frames stay above.");
    console.warn("live view", root.dataset.live, err);
  } finally {
    root.removeAttribute("aria-busy");
  }
}

// ---------------------------------------------------------------------------- spoken tokens

// A screen reader reads "<unk>" as "less than unk greater than" (accessibility reader, issue 38).
// What the live regions say instead; the page still shows the tokens as the chapters write them.
export const SPOKEN_TOKENS = {
  "<unk>": "unknown word", "<eos>": "end of sentence", "<bos>": "start of sentence",
  "<cls>": "class token", "<pad>": "padding",
};
const SPECIAL = /<(?:unk|eos|bos|cls|pad)>/g;
// "the <cls> token looks" is said "the class token looks", not "class token token".
const nameOf = (token, text, end) =>
  token === "<cls>" && text.startsWith(" token", end) ? "class" : SPOKEN_TOKENS[token];

/** `text` with each special token named: "after <bos>" -> "after start of sentence". */
export function spokenTokens(text) {
  const s = String(text);
  return s.replace(SPECIAL, (t, at) => nameOf(t, s, at + t.length));
}

/**
 * `text` as nodes for a live region: each special token shown as written but aria-hidden, its
 * name beside it out of sight (class ab-sr-only, book.css), so the region is heard with names.
 */
export function sayable(text) {
  const nodes = [];
  let at = 0;
  for (const m of String(text).matchAll(SPECIAL)) {
    if (m.index > at) nodes.push(document.createTextNode(text.slice(at, m.index)));
    const shown = document.createElement("span");
    shown.setAttribute("aria-hidden", "true");
    shown.textContent = m[0];
    const said = document.createElement("span");
    said.className = "ab-sr-only";
    said.textContent = nameOf(m[0], String(text), m.index + m[0].length);
    nodes.push(shown, said);
    at = m.index + m[0].length;
  }
  if (at < String(text).length) nodes.push(document.createTextNode(String(text).slice(at)));
  return nodes;
}

/** Show `text` in `el` (a live region), its special tokens said by name. */
export function say(el, text) {
  el.replaceChildren(...sayable(text));
}
