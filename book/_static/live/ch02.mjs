// Chapter 2's live view: Nadaraya–Watson pooling computed in the page (issue 31).
//
// The graph (src/attention_book/book/live_ch02.py) is ab.nadaraya_watson exported to ONNX, one
// per kernel: inputs keys (n), values (n), queries (q), sigma (); outputs the estimate (q) and
// the attention weights (q × n). One run pools the curve's 251 queries and the reader's query.
// The numbers shown are written to data-* attributes of the view, for the browser test.

const SVG = "http://www.w3.org/2000/svg";
const TOP = [12, 212]; // y range of the fit panel, in SVG units
const BOTTOM = [242, 322]; // y range of the weights panel
const LEFT = 46;

function el(tag, attrs = {}, parent = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (parent) parent.appendChild(node);
  return node;
}

function control(form, label, input, id) {
  input.name = id.split("-").pop(); // kernel, sigma, n, query: what the browser test sets
  const wrap = document.createElement("label");
  wrap.className = "ab-live-control";
  wrap.htmlFor = id;
  wrap.append(label, " ");
  input.id = id;
  const out = document.createElement("output");
  out.htmlFor = id;
  wrap.append(input, " ", out);
  form.appendChild(wrap);
  return out;
}

function range(min, max, step, value) {
  const input = document.createElement("input");
  Object.assign(input, { type: "range", min, max, step, value });
  return input;
}

/** A path through (xs[i], ys[i]); NaN values (no training point in reach) break the line. */
function pathOf(xs, ys, sx, sy) {
  let d = "";
  let pen = false;
  for (let i = 0; i < xs.length; i++) {
    if (!Number.isFinite(ys[i])) {
      pen = false;
      continue;
    }
    d += `${pen ? "L" : "M"}${sx(xs[i]).toFixed(1)},${sy(ys[i]).toFixed(1)}`;
    pen = true;
  }
  return d;
}

export async function mount(root, ctx) {
  const data = ctx.data;
  const d = data.defaults;
  const nMax = data.x.length;
  const xs = Float32Array.from(data.x);
  const ys = Float32Array.from(data.y);
  const uid = `ab-ch02-${Math.random().toString(36).slice(2, 8)}`;
  // Drawn at the column's width (340 to 640 units, one unit about a pixel), so that the
  // labels keep their size on a phone instead of shrinking with the picture.
  const W = Math.round(Math.min(640, Math.max(340, root.clientWidth || 640)));
  const RIGHT = W - 12;

  const view = document.createElement("div");
  view.className = "ab-live-view";
  const form = document.createElement("div");
  form.className = "ab-live-controls";
  const kernel = document.createElement("select");
  for (const k of data.kernels) kernel.add(new Option(k, k, k === d.kernel, k === d.kernel));
  control(form, "kernel", kernel, `${uid}-kernel`);
  const [lo, hi] = data.sigma_range.map(Math.log10);
  const sigma = range(lo, hi, "any", Math.log10(d.sigma));
  const sigmaOut = control(form, "width σ", sigma, `${uid}-sigma`);
  const count = range(2, nMax, 1, d.n);
  const countOut = control(form, "points n", count, `${uid}-n`);
  const query = range(0, data.x_max, "any", d.query);
  const queryOut = control(form, "query x", query, `${uid}-query`);
  query.setAttribute("aria-valuetext", `x = ${d.query.toFixed(2)}`);
  view.appendChild(form);

  const svg = el("svg", { viewBox: `0 0 ${W} 362`, class: "ab-live-plot", role: "img" });
  svg.style.width = "100%";
  svg.style.maxWidth = `${W * 1.25}px`;
  svg.style.touchAction = "none";
  svg.style.userSelect = "none"; // dragging the query must not select the labels
  svg.style.webkitUserSelect = "none";
  view.appendChild(svg);
  const readout = document.createElement("p");
  readout.className = "ab-live-readout";
  readout.setAttribute("aria-live", "polite");
  // Until the first result, a sentence about as long as the result's keeps its place, so
  // that the first result does not push the page down.
  readout.style.minHeight = "2lh";
  readout.textContent = `At x = ${d.query.toFixed(2)} the estimate and its weights are being ` +
    "computed in your browser (the first run loads the model).";
  view.appendChild(readout);
  // The plot's name until its first result (built on load, it may wait for the reader): axe's
  // svg-img-alt found it nameless.
  svg.setAttribute("aria-label", "Plot of the estimate and the attention weights, drawn once the model has run.");
  // The view takes the notebook's frames' place at once, before its first result (the first
  // run loads the graph, seconds on a slow machine): the two are never shown together, and
  // the page does not jump when the result comes. If that run fails, the frames come back.
  const fallback = root.querySelector(".ab-live-fallback");
  root.insertBefore(view, root.querySelector(".ab-live-status"));
  if (fallback) fallback.hidden = true;

  // Scales: x over [0, x_max]; the fit panel's y over all the labels (fixed, so curves can be compared).
  const sx = (x) => LEFT + ((RIGHT - LEFT) * x) / data.x_max;
  const yMin = Math.min(...data.y, ...data.y_val) - 0.5;
  const yMax = Math.max(...data.y, ...data.y_val) + 0.5;
  const sy = (y) => TOP[1] - ((TOP[1] - TOP[0]) * (y - yMin)) / (yMax - yMin);
  const curveX = Float32Array.from({ length: data.curve_points }, (_, i) => (data.x_max * i) / (data.curve_points - 1));

  // Static parts: axes, ticks, the true function.
  const axes = el("g", { class: "ab-live-axes", fill: "none", stroke: "#888", "stroke-width": 1 }, svg);
  el("line", { x1: LEFT, x2: RIGHT, y1: TOP[1], y2: TOP[1] }, axes);
  el("line", { x1: LEFT, x2: RIGHT, y1: BOTTOM[1], y2: BOTTOM[1] }, axes);
  el("line", { x1: LEFT, x2: LEFT, y1: TOP[0], y2: TOP[1] }, axes);
  el("line", { x1: LEFT, x2: LEFT, y1: BOTTOM[0], y2: BOTTOM[1] }, axes);
  const labels = el("g", { "font-size": 12, fill: "#444" }, svg);
  for (let t = 0; t <= data.x_max + 1e-9; t += 1) {
    el("text", { x: sx(t), y: BOTTOM[1] + 15, "text-anchor": "middle" }, labels).textContent = String(t);
  }
  for (let t = Math.ceil(yMin); t <= yMax; t += 2) {
    el("text", { x: LEFT - 6, y: sy(t) + 4, "text-anchor": "end" }, labels).textContent = String(t);
  }
  el("text", { x: RIGHT, y: BOTTOM[1] + 30, "text-anchor": "end" }, labels).textContent =
    "x (click or drag to move the query)";
  el("text", { x: LEFT + 6, y: BOTTOM[0] + 2 }, labels).textContent = "attention weights of the query";
  const yMid = (TOP[0] + TOP[1]) / 2;
  el("text", { x: 12, y: yMid, "text-anchor": "middle", transform: `rotate(-90 12 ${yMid})` }, labels)
    .textContent = "y";
  el("text", { x: LEFT - 6, y: BOTTOM[1] + 4, "text-anchor": "end" }, labels).textContent = "0";
  // The weight panel's scale: its top tick is the largest weight of the current query.
  // With every weight 0 (no point in reach) there is no largest weight: tick and label are hidden.
  const wTick = el("text", { x: LEFT - 6, y: BOTTOM[0] + 16, "text-anchor": "end", class: "ab-live-wmax" }, labels);
  const wTickLine = el("line", { x1: LEFT - 3, x2: LEFT, y1: BOTTOM[0] + 12, y2: BOTTOM[0] + 12 }, axes);
  el("path", {
    d: pathOf(data.x_val, data.y_val, sx, sy), fill: "none", stroke: "#7b3294",
    "stroke-dasharray": "5 4", "stroke-width": 1.5,
  }, svg);
  // Every training point is outlined, so that one with weight 0 (out of the kernel's reach) is a
  // hollow ring, not a faint dot (a phone reader could not see them, issue 38).
  const points = el("g", { fill: "#1f77b4", stroke: "#1f77b4", "stroke-width": 1.2 }, svg);
  const stems = el("g", { stroke: "#d62728", "stroke-width": 1.5 }, svg);
  const curve = el("path", { fill: "none", stroke: "#d62728", "stroke-width": 2 }, svg);
  const cursor = el("line", { y1: TOP[0], y2: BOTTOM[1], stroke: "#555", "stroke-width": 1 }, svg);
  const marker = el("circle", { r: 5, fill: "#d62728", stroke: "white", "stroke-width": 1.5 }, svg);
  marker.style.display = "none"; // until the first result
  cursor.setAttribute("x1", sx(d.query));
  cursor.setAttribute("x2", sx(d.query));
  const legend = el("g", { "font-size": 12 }, svg);
  el("rect", { x: LEFT + 6, y: TOP[0] + 1, width: 214, height: 66, fill: "white", "fill-opacity": 0.75 }, legend);
  [["#1f77b4", "training points (size: weight)", "dot"], ["#1f77b4", "training point, weight 0", "ring"],
    ["#7b3294", "2 sin x + x", "box"], ["#d62728", "estimate", "box"]]
    .forEach(([colour, text, kind], i) => {
      const y = TOP[0] + 4 + 16 * i;
      if (kind === "box") el("rect", { x: LEFT + 10, y, width: 10, height: 10, fill: colour }, legend);
      else {
        el("circle", {
          cx: LEFT + 15, cy: y + 5, r: kind === "dot" ? 4.5 : 3, fill: kind === "dot" ? colour : "white",
          stroke: colour, "stroke-width": 1.2, class: `ab-live-key-${kind}`,
        }, legend);
      }
      el("text", { x: LEFT + 26, y: y + 9, fill: "#333" }, legend).textContent = text;
    });

  const settings = () => ({
    kernel: kernel.value,
    sigma: 10 ** Number(sigma.value),
    n: Math.round(Number(count.value)),
    query: Math.min(Math.max(Number(query.value), 0), data.x_max),
  });

  async function compute(s) {
    const session = await ctx.session(s.kernel);
    const queries = new Float32Array(curveX.length + 1);
    queries.set(curveX);
    queries[curveX.length] = s.query;
    const T = ctx.ort.Tensor;
    const feeds = {
      keys: new T("float32", xs.slice(0, s.n), [s.n]),
      values: new T("float32", ys.slice(0, s.n), [s.n]),
      queries: new T("float32", queries, [queries.length]),
      sigma: new T("float32", Float32Array.of(s.sigma), []),
    };
    const out = await session.run(feeds);
    const estimate = out.estimate.data;
    const weights = out.weights.data;
    const q = curveX.length;
    return {
      curve: estimate.slice(0, q),
      at: estimate[q],
      weights: Array.from(weights.slice(q * s.n, (q + 1) * s.n)),
    };
  }

  // The sentence starts with what the reader just moved, so that each move is heard as news: moving
  // "points n" repeated the same sentence (accessibility reader, issue 38: "40 points: at x = ...").
  let moved = query;
  function lead(s) {
    const news = moved === count ? `${s.n} points` : moved === sigma ? `σ = ${s.sigma.toPrecision(3)}`
      : moved === kernel ? `${s.kernel} kernel` : "";
    return news ? `${news}: at` : "At";
  }

  function draw(s, r) {
    sigmaOut.textContent = s.sigma.toPrecision(3);
    sigma.setAttribute("aria-valuetext", `σ = ${s.sigma.toPrecision(3)}`);
    countOut.textContent = String(s.n);
    queryOut.textContent = s.query.toFixed(2);
    // As σ's: the slider's raw value has up to 17 digits (accessibility reader, issue 38).
    query.setAttribute("aria-valuetext", `x = ${s.query.toFixed(2)}`);
    curve.setAttribute("d", pathOf(curveX, r.curve, sx, sy));
    const largest = Math.max(...r.weights);
    const wMax = Math.max(largest, 1e-12);
    wTick.textContent = largest > 0 ? wMax.toFixed(3) : "";
    wTickLine.style.display = largest > 0 ? "" : "none";
    const sw = (w) => BOTTOM[1] - ((BOTTOM[1] - BOTTOM[0] - 12) * w) / wMax;
    points.replaceChildren();
    stems.replaceChildren();
    for (let i = 0; i < s.n; i++) {
      const w = r.weights[i];
      const at = { cx: sx(xs[i]), cy: sy(ys[i]) };
      if (w > 0) el("circle", { ...at, r: 2.5 + 9 * Math.sqrt(w / wMax), "fill-opacity": 0.3 + 0.6 * (w / wMax) }, points);
      else el("circle", { ...at, r: 3, fill: "white", class: "ab-live-zero" }, points);
      if (w > 0) el("line", { x1: sx(xs[i]), x2: sx(xs[i]), y1: BOTTOM[1], y2: sw(w) }, stems);
    }
    cursor.setAttribute("x1", sx(s.query));
    cursor.setAttribute("x2", sx(s.query));
    const truth = 2 * Math.sin(s.query) + s.query;
    if (Number.isFinite(r.at)) {
      marker.setAttribute("cx", sx(s.query));
      marker.setAttribute("cy", sy(r.at));
      marker.style.display = "";
      // Points whose weights agree to float32 rounding tie (the boxcar and constant kernels
      // give every point in reach the same weight): say how many, not one of them.
      const tied = [];
      r.weights.forEach((w, i) => {
        if (w >= largest * (1 - 1e-5)) tied.push(i);
      });
      const top = tied.reduce((a, i) => (Math.abs(xs[i] - s.query) < Math.abs(xs[a] - s.query) ? i : a));
      const who = tied.length === 1
        ? `goes to the point at x = ${xs[top].toFixed(2)}`
        : `is shared by ${tied.length === s.n ? "all " : ""}${tied.length} points that tie ` +
          `(the nearest at x = ${xs[top].toFixed(2)})`;
      readout.textContent = `${lead(s)} x = ${s.query.toFixed(2)} the estimate is ${r.at.toFixed(3)} ` +
        `(2 sin x + x = ${truth.toFixed(3)}). The largest weight, ${largest.toFixed(3)}, ${who}.`;
    } else {
      marker.style.display = "none";
      readout.textContent = `${lead(s)} x = ${s.query.toFixed(2)} no training point is within the ${s.kernel} ` +
        `kernel's reach (σ = ${s.sigma.toPrecision(3)}): the estimate is undefined, every weight is 0.`;
    }
    svg.setAttribute("aria-label", readout.textContent);
    Object.assign(view.dataset, {
      kernel: s.kernel, sigma: String(s.sigma), n: String(s.n), query: String(s.query),
      estimate: String(r.at), weights: JSON.stringify(r.weights),
    });
  }

  // One run at a time; moves made meanwhile are folded into the next run.
  let running = false;
  let pending = false;
  async function update(first = false) {
    if (running) {
      pending = true;
      return;
    }
    running = true;
    try {
      do {
        pending = false;
        const s = settings();
        const t = performance.now();
        const r = await compute(s);
        const ms = performance.now() - t;
        draw(s, r);
        ctx.status(`Computed in your browser in ${ms.toFixed(1)} ms (onnxruntime-web).`);
        ctx.result(ms);
      } while (pending);
    } catch (err) {
      if (first) throw err; // live.mjs keeps the frames and says what failed
      ctx.status(`The pooling could not run: ${err && err.message ? err.message : err}`);
    } finally {
      running = false;
    }
  }

  for (const input of [kernel, sigma, count, query]) {
    const moves = () => {
      moved = input;
      update();
    };
    input.addEventListener("input", moves);
    input.addEventListener("change", moves);
  }
  const moveQuery = (event) => {
    const box = svg.getBoundingClientRect();
    const x = (((event.clientX - box.left) / box.width) * W - LEFT) / (RIGHT - LEFT) * data.x_max;
    query.value = String(Math.min(Math.max(x, 0), data.x_max));
    moved = query;
    update();
  };
  svg.addEventListener("pointerdown", (event) => {
    svg.setPointerCapture(event.pointerId);
    moveQuery(event);
  });
  svg.addEventListener("pointermove", (event) => {
    if (svg.hasPointerCapture(event.pointerId)) moveQuery(event);
  });
  // Built on load (live.py: build_on_load), so that Tab meets the controls before the reader
  // scrolls here; the first result, which loads the model, waits until the reader comes.
  if (ctx.arrived) {
    ctx.status("The model loads and runs when you come to the view or use a control.");
    await ctx.arrived;
    ctx.status("Running the model in your browser…");
  }
  try {
    await update(true);
  } catch (err) {
    view.remove();
    if (fallback) fallback.hidden = false;
    throw err; // live.mjs says what failed, under the frames
  }
}
