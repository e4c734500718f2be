"""Live views in Chromium (issue 31): time to the first result and latency per step.

Serves the built site (``_build/html``, from ``make book``) on 127.0.0.1 and, for each live
view listed in VIEWS whose page is built, opens the page in a fresh browser context (nothing
cached: the runtime's 14 MB of wasm is fetched and compiled each time), brings the view into
sight and reads how long the loader took from that moment to the view's first result
(``data-first-result-ms``, set by book/_static/live/live.mjs). Then it makes ``--steps``
moves (each view's ``step`` below: a slider, a typed word...) and times each from the move
to the next result shown (``data-results`` counts them), with the model's own share
(``data-last-step-ms``, what the view timed around its runs).

Usage::

    python benchmarks/live_views.py                 # every built view, 3 loads, 20 steps
    python benchmarks/live_views.py --repeats 1 --steps 5 --views ch02.pooling

A view helper adds its page with one VIEWS entry: the page, and a JavaScript function
``(root, i) => ...`` that makes move ``i`` inside the view's root element.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import statistics
import sys
import threading
from pathlib import Path

from interleave import processor_name

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import vendor_js

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]

VIEWS = {
    "ch02.pooling": {
        "page": "notebooks/ch02_attention_pooling",
        # the width σ sweeps its log scale back and forth
        "step": """(root, i) => { const s = root.querySelector('[name=sigma]');
            s.value = String(-1.5 + 1.8 * Math.abs(((i * 0.13) % 2) - 1));
            s.dispatchEvent(new Event('input', {bubbles: true})); }""",
    },
    "ch04.translate": {
        "page": "notebooks/ch04_bahdanau",
        # a typed sentence of 2 to 7 words submitted (encoder once, then greedy decoder steps)
        "step": """(root, i) => { const words = ['we', 'are', 'very', 'tired', 'and', 'sick', 'today'];
            root.querySelector('input[type=text]').value = words.slice(0, 2 + (i % 6)).join(' ') + ' .';
            root.querySelector('form').requestSubmit(); }""",
    },
    "ch07.translate": {
        "page": "notebooks/ch07_transformer",
        # a typed sentence of 2 to 7 words submitted (six block graphs, greedy decoding over the prefix)
        "step": """(root, i) => { const words = ['we', 'are', 'very', 'tired', 'and', 'sick', 'today'];
            root.querySelector('input[type=text]').value = words.slice(0, 2 + (i % 6)).join(' ') + ' .';
            root.querySelector('form').requestSubmit(); }""",
    },
    "ch08.draw": {
        "page": "notebooks/ch08_vision_transformer",
        # clear the box and draw one stroke, somewhat to the side each time (pointer events)
        "step": """(root, i) => { root.querySelector('.ab-live-clear').click();
            const c = root.querySelector('canvas.ab-live-pad'), b = c.getBoundingClientRect();
            const at = (fx, fy) => ({clientX: b.left + fx * b.width, clientY: b.top + fy * b.height,
                                     pointerId: 1, bubbles: true});
            const x = 0.3 + 0.4 * ((i * 0.37) % 1);
            c.dispatchEvent(new PointerEvent('pointerdown', at(x, 0.15)));
            c.dispatchEvent(new PointerEvent('pointermove', at(x + 0.1, 0.5)));
            c.dispatchEvent(new PointerEvent('pointermove', at(x, 0.85)));
            c.dispatchEvent(new PointerEvent('pointerup', at(x, 0.85))); }""",
    },
    "ch09.generate": {
        "page": "notebooks/ch09_pretraining",
        # the temperature moves (one forward pass of the prompt per move)
        "step": """(root, i) => { const t = root.querySelector('[name=temperature]');
            t.value = String(0.1 + 0.07 * (i % 25));
            t.dispatchEvent(new Event('input', {bubbles: true})); }""",
    },
}

JS_STEP = """async ([root, i]) => {
  const r = document.querySelector(root);
  const before = Number(r.dataset.results || 0);
  const done = new Promise((resolve) => {
    const seen = new MutationObserver(() => {
      if (Number(r.dataset.results || 0) > before) { seen.disconnect(); resolve(); }
    });
    seen.observe(r, {attributes: true, attributeFilter: ['data-results']});
  });
  const t = performance.now();
  (STEP)(r, i);
  await done;
  return [performance.now() - t, Number(r.dataset.lastStepMs)];
}"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(html: Path):
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/"


def first_result(browser, url: str, root: str):
    """Milliseconds from the view coming into sight to its first result, in a fresh context;
    returns them with the page and its context (still open, for the steps)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(120_000)
        page.goto(url, wait_until="load")
        page.locator(root).scroll_into_view_if_needed()
        page.wait_for_function(
            "(root) => { const r = document.querySelector(root);"
            " return r.dataset.state === 'error' || Number(r.dataset.results || 0) >= 1; }",
            arg=root,
        )
        data = page.evaluate(
            "(root) => ({...document.querySelector(root).dataset})", root
        )
        if data.get("state") == "error":
            raise RuntimeError(
                f"{url}: the live view failed: {page.locator(root + ' .ab-live-status').text_content()}"
            )
        return float(data["firstResultMs"]), page, context
    except BaseException:
        context.close()
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_build" / "html")
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="fresh page loads per view (first result)",
    )
    parser.add_argument(
        "--steps", type=int, default=20, help="moves per view (latency per step)"
    )
    parser.add_argument("--views", nargs="*", default=list(VIEWS))
    args = parser.parse_args(argv)
    if not args.site.is_dir():
        print(f"no built site at {args.site}: run `make book` first", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    (ort,) = [p for p in vendor_js.PINS if p.name == "onnxruntime-web"]
    server, base = serve(args.site)
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        print(f"machine: {processor_name()}; load average {os.getloadavg()[0]:.2f}")
        print(
            f"browser: Chromium {browser.version} (headless); {ort.spec} (wasm, 1 thread)"
        )
        for name in args.views:
            spec = VIEWS[name]
            html = args.site / f"{spec['page']}.html"
            if not html.is_file() or f'data-live="{name}"' not in html.read_text(
                encoding="utf-8"
            ):
                print(f"{name}: not in the built {spec['page']}.html, skipped")
                continue
            url, root = f"{base}{spec['page']}.html", f'.ab-live[data-live="{name}"]'
            firsts = []
            for _ in range(args.repeats):
                ms, page, context = first_result(browser, url, root)
                firsts.append(ms)
                if len(firsts) < args.repeats:
                    context.close()
            steps, model = [], []
            js = JS_STEP.replace("STEP", spec["step"])
            for i in range(args.steps):
                total, own = page.evaluate(js, [root, i])
                steps.append(total)
                model.append(own)
            context.close()
            rows.append((name, firsts, steps, model))
        browser.close()
    server.shutdown()
    print(
        f"{'view':<16} {'first result ms (median of loads)':>34} {'step ms median':>15} {'p90':>7} "
        f"{'model ms median':>16}"
    )
    for name, firsts, steps, model in rows:
        p90 = (
            sorted(steps)[max(0, round(0.9 * len(steps)) - 1)]
            if steps
            else float("nan")
        )
        print(
            f"{name:<16} {statistics.median(firsts):>34.0f} {statistics.median(steps) if steps else float('nan'):>15.1f} "
            f"{p90:>7.1f} {statistics.median(model) if model else float('nan'):>16.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
