"""Pages a learner can read at desktop width: nothing hidden behind a scroll bar, maps legible.

Browser checks at 1280 px on every chapter and exercises page of the built site (same
server, Chromium and knobs as tests/test_site.py):

- no code cell and no output block scrolls sideways (its ``scrollWidth`` exceeds its
  ``clientWidth``): book/_static/book.css sets code in a size that holds 88 characters
  (tests/test_notebook_layout.py) and wraps outputs;
- the tick labels of every attention map render at least 9 px high. A map is a figure
  drawn by a package function that draws matrices (``imshow`` or ``ab.heatmaps_figure``),
  called or explored in the cell. The rendered size is the book style's tick-label size in
  points × the PNG's dpi (its pHYs chunk, written by matplotlib) / 72 × the shown width
  over the natural width.
"""

from __future__ import annotations

import ast
import base64
import io
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from test_site import CHAPTER, DESKTOP, EXERCISES, HTML, PAGES, browser, site  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "attention_book"
LAYOUT_PAGES = [p for p in PAGES if CHAPTER.match(p) or EXERCISES.match(p)]
MIN_TICK_PX = 9.0
MAP_DRAWERS = {"imshow", "matshow", "pcolormesh", "heatmaps_figure"}


def map_functions(package: Path = PACKAGE) -> set[str]:
    """Names of the package's functions that draw a matrix as an image (an attention map)."""
    names = set()
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                calls = {getattr(c.func, "attr", getattr(c.func, "id", None))
                         for c in ast.walk(node) if isinstance(c, ast.Call)}
                if calls & MAP_DRAWERS:
                    names.add(node.name)
    return names


def tick_label_points() -> float:
    import matplotlib

    import attention_book as ab

    ab.use_book_style()
    size = matplotlib.rcParams["xtick.labelsize"]
    from matplotlib.font_manager import FontProperties

    return float(FontProperties(size=size).get_size_in_points())


def png_dpi(data: bytes) -> float:
    """The dpi a PNG was drawn at (its pHYs chunk); 72 when it carries none."""
    from PIL import Image

    info = Image.open(io.BytesIO(data)).info
    return float(info.get("dpi", (72.0, 72.0))[0])


def test_map_functions_are_found_and_png_dpi_is_read():
    names = map_functions()
    assert {"heatmaps_figure", "length_attention_figure"} <= names
    assert "curves_figure" not in names
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1))
    for dpi in (75, 100):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
        assert png_dpi(buf.getvalue()) == pytest.approx(dpi, abs=0.01)
    plt.close(fig)


JS_SIDEWAYS = """() => {
  const blocks = document.querySelectorAll(
      '#main-content div.cell_input pre, #main-content div.cell_output pre, ' +
      '#main-content div.cell_output div.output, #main-content div.cell_output');
  return Array.from(blocks).filter(b => b.getBoundingClientRect().width > 0 && b.scrollWidth > b.clientWidth + 1)
    .map(b => ({kind: b.closest('.cell_input') ? 'code' : 'output', scroll: b.scrollWidth,
                client: b.clientWidth, text: b.innerText.trim().slice(0, 70)}));
}"""

JS_CELL_IMAGES = """() => Array.from(document.querySelectorAll('#main-content div.cell')).map(cell => {
  const input = cell.querySelector('.cell_input');
  const imgs = Array.from(cell.querySelectorAll('.cell_output img'))
      .filter(i => i.complete && i.naturalWidth > 0 && i.getBoundingClientRect().width > 0);
  return {code: input ? input.textContent : '',
          images: imgs.map(i => ({src: i.getAttribute('src'), natural: i.naturalWidth,
                                  shown: i.getBoundingClientRect().width}))};
}).filter(c => c.images.length)"""


@pytest.fixture(scope="module")
def desktop(browser):  # noqa: F811 (the fixture imported from test_site)
    page = browser.new_page(viewport=DESKTOP)
    page.set_default_timeout(30_000)
    page.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/]).*"), lambda route: route.abort())
    yield page
    page.close()


def _open(page, url: str) -> None:
    page.goto(url, wait_until="load")
    page.evaluate("""() => (window.MathJax && MathJax.startup && MathJax.startup.promise)
        ? MathJax.startup.promise.then(() => true) : true""")
    page.wait_for_timeout(150)


@pytest.mark.parametrize("docname", LAYOUT_PAGES)
def test_no_code_or_output_scrolls_sideways(desktop, site, docname):  # noqa: F811
    _open(desktop, f"{site}{docname}.html")
    wide = desktop.evaluate(JS_SIDEWAYS)
    assert not wide, (
        f"{docname} at {DESKTOP['width']} px: {len(wide)} blocks scroll sideways (content px / "
        "box px):\n  " + "\n  ".join(f"{w['kind']} {w['scroll']}/{w['client']}: {w['text']!r}" for w in wide))


def _image_bytes(src: str, docname: str) -> bytes:
    if src.startswith("data:"):
        return base64.b64decode(src.split(",", 1)[1])
    path = (HTML / docname).parent / unquote(urlsplit(src).path)
    return path.resolve().read_bytes()


@pytest.mark.parametrize("docname", [p for p in LAYOUT_PAGES if CHAPTER.match(p)])
def test_attention_maps_have_legible_tick_labels(desktop, site, docname):  # noqa: F811
    maps = map_functions()
    called = re.compile(r"\bab\.(" + "|".join(sorted(maps)) + r")\b")
    points = tick_label_points()
    _open(desktop, f"{site}{docname}.html")
    small = []
    for cell in desktop.evaluate(JS_CELL_IMAGES):
        found = called.search(cell["code"])
        if not found:
            continue
        for image in cell["images"]:
            dpi = png_dpi(_image_bytes(image["src"], docname))
            px = points * dpi / 72 * image["shown"] / image["natural"]
            if px < MIN_TICK_PX:
                small.append(f"ab.{found.group(1)}: {image['natural']} px wide at {dpi:.0f} dpi shown at "
                             f"{image['shown']:.0f} px -> {points:g}-pt tick labels {px:.1f} px high")
    assert not small, (
        f"{docname}: maps whose tick labels render below {MIN_TICK_PX:g} px (draw them narrower, "
        "or in more rows):\n  " + "\n  ".join(small))
