// Chapter 8's live view: the reader draws a digit, the chapter's trained ViT classifies it
// in the page, and the view shows the class probabilities and where the <cls> token looks.
//
// From drawing to model input, the way scikit-learn's 8x8 digits were made: each digit was
// written on a 32x32 bitmap, size-normalised (it fills the height, or the width when wider
// than tall, centred in the other direction), and each 4x4 block of the bitmap became one
// pixel that counts its ink pixels (0..16). The book's loader rescales 0..16 to 0..255.
// So the page keeps the strokes as lists of points, fits their bounding box into a
// (block * h) x (block * w) bitmap the same way, draws the strokes there, takes a bitmap pixel
// as ink when its coverage is at least one half, and gives each pixel round(255 * ink / block²).
// No centre-of-mass shift: the data set centres the bounding box, and so does the page.
// The graph (src/attention_book/book/live_ch08.py) takes those pixels as the data set's
// images and does the rest (resize, standardise, ViT) exactly as the notebook does.
//
// The root element carries what it computed, for the browser test and the curious:
// data-pixels (h*w values, row by row), data-probs, data-cls-attention, data-rollout (JSON).
import { say } from "./live.mjs";

const INK_WIDTH = 0.12; // stroke width in the bitmap, as a fraction of its side (about 4 of 32)
const DRAW_WIDTH = 18; // stroke width on the drawing canvas, in canvas pixels
const PAD = 220; // side of the drawing canvas, in its own pixels

// The view's own look, added once per page (the class names are this view's).
const STYLE = `
.ab-live-ch08 .ab-live-row { display: flex; flex-wrap: wrap; gap: 1.2rem; align-items: flex-start; }
.ab-live-ch08 .ab-live-col { display: flex; flex-direction: column; gap: 0.4rem; }
.ab-live-ch08 canvas.ab-live-pad { width: 220px; height: 220px; border: 2px solid #888; border-radius: 4px;
  background: #fff; cursor: crosshair; touch-action: none; }
.ab-live-ch08 canvas.ab-live-map { width: 192px; height: 192px; image-rendering: pixelated; border: 1px solid #888; }
.ab-live-ch08 .ab-live-buttons { display: flex; flex-wrap: wrap; gap: 0.3rem; max-width: 240px; }
.ab-live-ch08 .ab-live-buttons button { font-size: 0.85rem; padding: 0.1rem 0.5rem; min-height: 24px; }
.ab-live-ch08 canvas.ab-live-pad:focus-visible { outline: 3px solid #0a58ca; outline-offset: 2px; }
.ab-live-ch08 .ab-live-keys { font-size: 0.8rem; max-width: 240px; margin: 0; }
.ab-live-ch08 .ab-live-pen { font-size: 0.8rem; max-width: 240px; margin: 0; min-height: 1.2em; }
.ab-live-ch08 .ab-live-choice input[type="radio"] { width: 24px; height: 24px; vertical-align: middle; }
.ab-live-ch08 .ab-live-caption { font-size: 0.9rem; }
.ab-live-ch08 .ab-live-choice label { margin: 0 0.9rem 0 0.25rem; }
.ab-live-ch08 .ab-live-bars { min-width: 220px; font-size: 0.85rem; }
.ab-live-ch08 .ab-live-bar { display: flex; align-items: center; gap: 0.4rem; height: 1.25rem; }
.ab-live-ch08 .ab-live-bar-label { width: 5.5rem; text-align: right; overflow: hidden; white-space: nowrap; }
.ab-live-ch08 .ab-live-bar-track { flex: 1; min-width: 100px; height: 0.8rem; background: #eee; }
.ab-live-ch08 .ab-live-bar-fill { display: block; height: 100%; width: 0; background: #1f77b4; }
.ab-live-ch08 .ab-live-best .ab-live-bar-fill { background: #d62728; }
.ab-live-ch08 .ab-live-best { font-weight: bold; }
.ab-live-ch08 .ab-live-bar-value { width: 3.5rem; text-align: right; font-variant-numeric: tabular-nums; }
`;

function addStyle() {
  if (document.getElementById("ab-live-ch08-style")) return;
  const style = document.createElement("style");
  style.id = "ab-live-ch08-style";
  style.textContent = STYLE;
  document.head.append(style);
}

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

// Round-capped strokes of the given width; a stroke of one point is a dot. `at` maps a point.
function drawStrokes(g, strokes, width, colour, at = (p) => p) {
  g.lineCap = "round";
  g.lineJoin = "round";
  g.lineWidth = width;
  g.strokeStyle = colour;
  g.fillStyle = colour;
  for (const stroke of strokes) {
    const points = stroke.map(at);
    g.beginPath();
    if (points.length === 1) {
      g.arc(points[0][0], points[0][1], width / 2, 0, 2 * Math.PI);
      g.fill();
      continue;
    }
    g.moveTo(...points[0]);
    for (const p of points.slice(1)) g.lineTo(...p);
    g.stroke();
  }
}

// The strokes' points (drawing-canvas units) -> the model's input pixels, 0..255, row by row.
export function strokesToPixels(strokes, native, block) {
  const points = strokes.flat();
  if (points.length === 0) return null;
  const [h, w] = native;
  const bh = h * block;
  const bw = w * block;
  const xs = points.map((p) => p[0]);
  const ys = points.map((p) => p[1]);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const ink = INK_WIDTH * Math.min(bh, bw);
  // Fit the box (one point counts as a box of size 1) into the bitmap less a stroke's width.
  const scale = Math.min((bh - ink) / Math.max(y1 - y0, 1), (bw - ink) / Math.max(x1 - x0, 1));
  const ox = bw / 2 - (scale * (x0 + x1)) / 2;
  const oy = bh / 2 - (scale * (y0 + y1)) / 2;
  const canvas = el("canvas", { width: bw, height: bh });
  const g = canvas.getContext("2d");
  drawStrokes(g, strokes, ink, "#000", ([x, y]) => [ox + scale * x, oy + scale * y]);
  const alpha = g.getImageData(0, 0, bw, bh).data;
  const pixels = new Array(h * w).fill(0);
  for (let r = 0; r < bh; r++) {
    for (let c = 0; c < bw; c++) {
      if (alpha[4 * (r * bw + c) + 3] >= 128) pixels[Math.floor(r / block) * w + Math.floor(c / block)] += 1;
    }
  }
  return pixels.map((count) => Math.round((255 * count) / (block * block)));
}

// A dark-to-bright colour ramp for the attention (close to matplotlib's "inferno").
const RAMP = [
  [0, 0, 4],
  [40, 11, 84],
  [101, 21, 110],
  [159, 42, 99],
  [212, 72, 66],
  [245, 125, 21],
  [250, 193, 39],
  [252, 255, 164],
];

function rampColour(t) {
  const x = Math.min(Math.max(t, 0), 1) * (RAMP.length - 1);
  const i = Math.min(Math.floor(x), RAMP.length - 2);
  const f = x - i;
  return RAMP[i].map((v, k) => Math.round(v + f * (RAMP[i + 1][k] - v)));
}

// The input pixels in grey with the attention grid stretched to its own range laid over them.
function drawMap(canvas, pixels, native, heat, grid) {
  const g = canvas.getContext("2d");
  const side = canvas.width;
  const [h, w] = native;
  g.clearRect(0, 0, side, side);
  for (let r = 0; r < h; r++) {
    for (let c = 0; c < w; c++) {
      const v = pixels[r * w + c];
      g.fillStyle = `rgb(${v},${v},${v})`;
      g.fillRect((c * side) / w, (r * side) / h, side / w + 1, side / h + 1);
    }
  }
  if (!heat) return;
  const lo = Math.min(...heat);
  const span = Math.max(...heat) - lo || 1;
  const [rows, cols] = grid;
  g.globalAlpha = 0.6;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const [R, G, B] = rampColour((heat[r * cols + c] - lo) / span);
      g.fillStyle = `rgb(${R},${G},${B})`;
      g.fillRect((c * side) / cols, (r * side) / rows, side / cols, side / rows);
    }
  }
  g.globalAlpha = 1;
}

/** Where the <cls> token looks, in words: the three patches with the largest weights, each with
 * its row and column in the grid (counted from the top left) and its share of the map's weight. */
export function whereClsLooks(heat, grid) {
  const [rows, cols] = grid;
  const total = heat.reduce((a, b) => a + b, 0) || 1;
  const top = heat.map((v, i) => [v, i]).sort((a, b) => b[0] - a[0]).slice(0, 3);
  const parts = top.map(([v, i]) =>
    `row ${Math.floor(i / cols) + 1}, column ${(i % cols) + 1} (${Math.round((100 * v) / total)}%)`);
  return `most on the patches at ${parts.join("; ")} of the ${rows} by ${cols} grid`;
}

export async function mount(root, ctx) {
  const { data } = ctx;
  // A model too big for a page was not exported: the loader keeps the frames and shows this.
  if (!ctx.manifest.models.vit) throw new Error(data.too_large || "the model was not exported");
  const native = data.native;
  const classes = data.classes;
  const digits = data.dataset === "digits";

  addStyle();
  const view = el("div", { class: "ab-live-ch08" });
  const intro = el(
    "p",
    { class: "ab-live-intro" },
    digits
      ? "Draw a digit (0–9) in the box with the mouse or a finger. The model sees it as the small " +
          `${native[0]}x${native[1]} grey image, under the colours of its attention, next to the box (below it on a ` +
          `narrow screen). It learnt from ${data.train_size.toLocaleString("en")} scanned digits: draw large and bold.`
      : `Draw a ${data.dataset} item in the box; the model sees it at ${native[0]}x${native[1]} pixels. It learnt ` +
          `from ${data.train_size.toLocaleString("en")} ${data.dataset} images, so expect a drawing, unlike any of them, to be misread.`,
  );
  const row = el("div", { class: "ab-live-row" });
  const left = el("div", { class: "ab-live-col" });
  // The box works without a pointer too (issue 38): it takes the keyboard's focus, the arrow
  // keys move a pen one cell of a PEN_CELLS x PEN_CELLS grid, Space puts the pen down or lifts
  // it (a lifted pen's stroke is classified), Delete clears. Each move is said in words.
  const pad = el("canvas", {
    width: PAD,
    height: PAD,
    class: "ab-live-pad",
    tabindex: "0",
    role: "application",
    "aria-roledescription": "drawing box",
    "aria-label": "drawing area: draw a digit with the mouse or a finger, or with the keyboard",
    "aria-describedby": "ab-live-ch08-keys",
  });
  const keys = el(
    "p",
    { class: "ab-live-keys", id: "ab-live-ch08-keys" },
    "Keyboard: arrow keys move the pen one cell, Space puts it down or lifts it (lifting shows the answer), " +
      "Delete clears; or pick one of the test images below.",
  );
  const penSays = el("p", { class: "ab-live-pen", role: "status", "aria-live": "polite" });
  const buttons = el("div", { class: "ab-live-buttons" });
  const clear = el("button", { type: "button", class: "ab-live-clear" }, "Clear");
  buttons.append(clear);
  const examples = (data.examples || []).map((ex) => {
    const b = el("button", { type: "button", class: "ab-live-example" }, `test image: ${ex.label}`);
    buttons.append(b);
    return [b, ex];
  });
  left.append(pad, keys, penSays, buttons);

  const middle = el("div", { class: "ab-live-col" });
  const map = el("canvas", { width: 192, height: 192, class: "ab-live-map", role: "img" });
  const choice = el("div", { class: "ab-live-choice" });
  const kinds = [
    ["cls_attention", "last layer"],
    ["rollout", "rollout"],
  ];
  const radios = kinds.map(([key, label], i) => {
    const id = `ab-live-ch08-${key}`;
    const input = el("input", { type: "radio", name: "ab-live-ch08-map", id, value: key });
    if (i === 0) input.checked = true;
    const lab = el("label", { for: id }, label);
    choice.append(input, lab);
    return input;
  });
  // the caption is read too (not only the live regions): <cls> said "class token" (issue 38)
  const caption = el("div", { class: "ab-live-caption" });
  say(caption, "<cls> attention over the patches");
  middle.append(caption, map, choice);

  const right = el("div", { class: "ab-live-col ab-live-bars" });
  const bars = classes.map((name) => {
    const line = el("div", { class: "ab-live-bar" });
    const label = el("span", { class: "ab-live-bar-label" }, name);
    const track = el("span", { class: "ab-live-bar-track" });
    const fill = el("span", { class: "ab-live-bar-fill" });
    const value = el("span", { class: "ab-live-bar-value" }, "");
    track.append(fill);
    line.append(label, track, value);
    right.append(line);
    return [line, fill, value];
  });
  const message = el("p", { class: "ab-live-message", "aria-live": "polite" });
  row.append(left, middle, right);
  view.append(intro, row, message);
  root.append(view);

  const g = pad.getContext("2d");
  let strokes = [];
  let current = null;
  let shown = null; // {pixels, probs, cls_attention, rollout}
  let running = false;
  let again = false;

  const PEN_CELLS = 11; // the keyboard pen's grid; cell centres spaced PAD / PEN_CELLS apart
  const pen = { col: Math.floor(PEN_CELLS / 2), row: 1, down: false };
  const penPoint = () => [((pen.col + 0.5) * PAD) / PEN_CELLS, ((pen.row + 0.5) * PAD) / PEN_CELLS];

  function paintPad() {
    g.fillStyle = "#fff";
    g.fillRect(0, 0, PAD, PAD);
    drawStrokes(g, strokes, DRAW_WIDTH, "#111");
    if (document.activeElement === pad) { // where the keyboard's pen is
      const [x, y] = penPoint();
      const side = PAD / PEN_CELLS;
      g.lineWidth = 2;
      g.strokeStyle = pen.down ? "#d62728" : "#0a58ca";
      g.strokeRect(x - side / 2, y - side / 2, side, side);
    }
  }

  function render() {
    const key = radios.find((r) => r.checked).value;
    if (!shown) {
      drawMap(map, new Array(native[0] * native[1]).fill(0), native, null, data.grid);
      for (const [line, fill, value] of bars) {
        fill.style.width = "0%";
        value.textContent = "";
        line.classList.remove("ab-live-best");
      }
      return;
    }
    drawMap(map, shown.pixels, native, shown[key], data.grid);
    const best = shown.probs.indexOf(Math.max(...shown.probs));
    shown.probs.forEach((p, k) => {
      const [line, fill, value] = bars[k];
      fill.style.width = `${(100 * p).toFixed(1)}%`;
      value.textContent = `${(100 * p).toFixed(1)}%`;
      line.classList.toggle("ab-live-best", k === best);
    });
    map.setAttribute("aria-label", `the model's input with the class token's attention (${key === "rollout" ? "rollout" : "last layer"}): ` +
      whereClsLooks(shown[key], data.grid));
  }
  // The map in words for the radio buttons' choice (empty while no result is shown).
  const mapInWords = () => {
    if (!shown) return "";
    const key = radios.find((r) => r.checked).value;
    return ` Its <cls> token looks ${whereClsLooks(shown[key], data.grid)}` +
      ` (${key === "rollout" ? "rollout" : "last layer"}).`;
  };

  function clearResult(text) {
    latest += 1;
    shown = null;
    for (const key of ["pixels", "probs", "clsAttention", "rollout"]) delete root.dataset[key];
    message.textContent = text;
    render();
  }

  let latest = 0; // the newest request; an answer to an older one is not shown
  async function classify(pixels, what) {
    const mine = ++latest;
    const session = await ctx.session("vit");
    const t0 = performance.now();
    const input = new ctx.ort.Tensor("float32", Float32Array.from(pixels), [1, 1, native[0], native[1]]);
    const out = await session.run({ [session.inputNames[0]]: input });
    const [probs, cls, roll] = session.outputNames.map((name) => Array.from(out[name].data));
    if (mine !== latest) return;
    if (ctx.result) ctx.result(performance.now() - t0);
    shown = { pixels, probs, cls_attention: cls, rollout: roll };
    root.dataset.pixels = JSON.stringify(pixels);
    root.dataset.probs = JSON.stringify(probs);
    root.dataset.clsAttention = JSON.stringify(cls);
    root.dataset.rollout = JSON.stringify(roll);
    const best = probs.indexOf(Math.max(...probs));
    render();
    say(message, `${what}: the model says ${classes[best]} (${(100 * probs[best]).toFixed(1)}%).` + mapInWords());
  }

  // One forward pass at a time; strokes that arrive meanwhile are classified right after it.
  async function update() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      do {
        again = false;
        const pixels = strokesToPixels(strokes, native, data.block);
        if (pixels === null) clearResult("The box is empty: draw a digit to see what the model makes of it.");
        else await classify(pixels, "Your drawing");
      } while (again);
    } catch (err) {
      message.textContent = `The model could not run: ${err.message || err}`;
    } finally {
      running = false;
    }
  }

  function point(event) {
    const box = pad.getBoundingClientRect();
    return [((event.clientX - box.left) * PAD) / box.width, ((event.clientY - box.top) * PAD) / box.height];
  }
  pad.addEventListener("pointerdown", (event) => {
    event.preventDefault();
    try {
      pad.setPointerCapture(event.pointerId); // keep the stroke when the pointer leaves the box
    } catch {
      // a synthetic event (a script, a test) has no pointer to capture
    }
    current = [point(event)];
    strokes.push(current);
    paintPad();
  });
  pad.addEventListener("pointermove", (event) => {
    if (!current) return;
    current.push(point(event));
    paintPad();
  });
  const finish = () => {
    if (!current) return;
    current = null;
    update();
  };
  pad.addEventListener("pointerup", finish);
  pad.addEventListener("pointercancel", finish);
  function sayPen(what) {
    penSays.textContent = `${what} Pen ${pen.down ? "down" : "up"} at column ${pen.col + 1} of ${PEN_CELLS}, ` +
      `row ${pen.row + 1} of ${PEN_CELLS}.`;
  }
  const MOVES = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };
  pad.addEventListener("keydown", (event) => {
    if (event.key in MOVES) {
      event.preventDefault();
      const [dc, dr] = MOVES[event.key];
      const col = Math.min(PEN_CELLS - 1, Math.max(0, pen.col + dc));
      const row = Math.min(PEN_CELLS - 1, Math.max(0, pen.row + dr));
      const moved = col !== pen.col || row !== pen.row;
      [pen.col, pen.row] = [col, row];
      if (moved && pen.down) current.push(penPoint());
      paintPad();
      sayPen(moved ? (pen.down ? "Drawn one cell." : "Moved.") : "At the edge.");
    } else if (event.key === " " || event.key === "Spacebar") {
      event.preventDefault();
      if (!pen.down) {
        pen.down = true;
        current = [penPoint()];
        strokes.push(current);
        paintPad();
        sayPen("Drawing:");
      } else {
        pen.down = false;
        paintPad();
        sayPen("Lifted, the model reads your drawing.");
        finish();
      }
    } else if (event.key === "Delete" || event.key === "Backspace") {
      event.preventDefault();
      pen.down = false;
      current = null;
      clear.click();
      sayPen("Cleared.");
    }
  });
  pad.addEventListener("focus", () => { paintPad(); sayPen("Drawing box."); });
  pad.addEventListener("blur", () => {
    if (pen.down) { pen.down = false; finish(); }
    paintPad();
  });
  clear.addEventListener("click", () => {
    strokes = [];
    paintPad();
    clearResult("Cleared: draw a digit in the box.");
  });
  for (const [button, ex] of examples) {
    button.addEventListener("click", async () => {
      strokes = [];
      paintPad();
      try {
        await classify(ex.pixels, `Test image of a ${ex.label}`);
      } catch (err) {
        message.textContent = `The model could not run: ${err.message || err}`;
      }
    });
  }
  for (const r of radios) {
    r.addEventListener("change", () => {
      render();
      const name = kinds.find(([key]) => key === r.value)[1];
      say(penSays, `The map now shows the <cls> attention of the ${name === "rollout" ? "rollout" : "last layer"}:` +
        (shown ? ` ${whereClsLooks(shown[r.value], data.grid)}.` : " draw a digit first."));
    });
  }

  paintPad();
  clearResult("Draw a digit in the box to see what the model makes of it.");
  // A first answer at once, on the first test image, so the reader sees what the view shows.
  if (examples.length) {
    const [, ex] = examples[0];
    await classify(ex.pixels, `Test image of a ${ex.label}`);
    message.append(" Now draw your own in the box.");
  }
  ctx.status("");
}
