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
import functools
import io
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from test_site import CHAPTER, DESKTOP, EXERCISES, HTML, PAGES, browser, by_page, site  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "attention_book"
LAYOUT_PAGES = [p for p in PAGES if CHAPTER.match(p) or EXERCISES.match(p)]
MIN_TICK_PX = 9.0
MAP_DRAWERS = {"imshow", "matshow", "pcolormesh", "heatmaps_figure"}


@functools.cache
def map_functions(package: Path = PACKAGE) -> frozenset[str]:
    """Names of the package's functions that draw a matrix as an image (an attention map).
    Parsed once per process (about 2 s), not once per chapter page."""
    names = set()
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                calls = {getattr(c.func, "attr", getattr(c.func, "id", None))
                         for c in ast.walk(node) if isinstance(c, ast.Call)}
                if calls & MAP_DRAWERS:
                    names.add(node.name)
    return frozenset(names)


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

    fig, _ax = plt.subplots(figsize=(2, 1))
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


def _open(page, url: str) -> None:
    page.goto(url, wait_until="load")
    page.evaluate("""() => (window.MathJax && MathJax.startup && MathJax.startup.promise)
        ? MathJax.startup.promise.then(() => true) : true""")
    page.wait_for_timeout(150)


# Every check below only reads the laid-out page (no script here changes it), so each page is
# loaded once at 1280 px and once at 390 px, all the checks of that width run on that load, and
# each test reads its own results from the record (a test fails alone, with its own message),
# instead of one load per check (ten per page). by_page keeps the tests of one page on one
# xdist worker, so no page is loaded by both workers.
_RECORDS: dict[tuple[str, int], dict] = {}


def _measured(browser, site: str, docname: str, viewport: dict, name: str):  # noqa: F811
    """What script ``name`` of _SCRIPTS[width] returned on ``docname`` loaded at ``viewport``
    (the page is loaded on the first call for that page and width); a script's error is raised."""
    key = (docname, viewport["width"])
    if key not in _RECORDS:
        page = browser.new_page(viewport=viewport)
        try:
            page.set_default_timeout(30_000)
            page.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/]).*"), lambda route: route.abort())
            _open(page, f"{site}{docname}.html")
            record = {}
            for script_name, js in _SCRIPTS[viewport["width"]].items():
                try:
                    record[script_name] = page.evaluate(js)
                except Exception as error:  # noqa: BLE001 - raised again in the test that reads it
                    record[script_name] = error
        finally:
            page.close()
        _RECORDS[key] = record
    # A result is read by one test only: dropping it keeps the explorers' frames out of memory.
    found = _RECORDS[key].pop(name)
    if isinstance(found, Exception):
        raise found
    return found


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_no_code_or_output_scrolls_sideways(browser, site, docname):  # noqa: F811
    wide = _measured(browser, site, docname, DESKTOP, "sideways")
    assert not wide, (
        f"{docname} at {DESKTOP['width']} px: {len(wide)} blocks scroll sideways (content px / "
        "box px):\n  " + "\n  ".join(f"{w['kind']} {w['scroll']}/{w['client']}: {w['text']!r}" for w in wide))


def _image_bytes(src: str, docname: str) -> bytes:
    if src.startswith("data:"):
        return base64.b64decode(src.split(",", 1)[1])
    path = (HTML / docname).parent / unquote(urlsplit(src).path)
    return path.resolve().read_bytes()


@pytest.mark.parametrize("docname", by_page([p for p in LAYOUT_PAGES if CHAPTER.match(p)]))
def test_attention_maps_have_legible_tick_labels(browser, site, docname):  # noqa: F811
    maps = map_functions()
    called = re.compile(r"\bab\.(" + "|".join(sorted(maps)) + r")\b")
    points = tick_label_points()
    small = []
    for cell in _measured(browser, site, docname, DESKTOP, "cell images"):
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


# --------------------------------------------------------------------------- issue 36: shown whole

PHONE = {"width": 390, "height": 844}
MIN_TEXT_PX = 9.0

JS_INNER_SCROLL = """() => {
  const blocks = document.querySelectorAll('#main-content pre, #main-content div.highlight');
  return Array.from(blocks).filter(b => b.getBoundingClientRect().width > 0).flatMap(b => {
    const what = b.closest('.ab-source') ? 'shown source' : b.closest('.cell_input') ? 'code'
        : b.closest('.cell_output') ? 'output' : 'code block';
    const out = [];
    if (b.scrollHeight > b.clientHeight + 1) {
      out.push({what, how: 'scrolls up and down', scroll: b.scrollHeight, client: b.clientHeight,
                text: b.innerText.trim().slice(0, 70)});
    }
    if (b.scrollWidth > b.clientWidth + 1) {
      out.push({what, how: 'scrolls sideways', scroll: b.scrollWidth, client: b.clientWidth,
                text: b.innerText.trim().slice(0, 70)});
    }
    return out;
  });
}"""


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_no_code_block_has_a_scroll_box_of_its_own(browser, site, docname):  # noqa: F811
    """Shown code is whole at 1280 px: no code block, shown source or output scrolls inside itself."""
    boxed = _measured(browser, site, docname, DESKTOP, "inner scroll")
    assert not boxed, (
        f"{docname} at {DESKTOP['width']} px: {len(boxed)} blocks have a scroll box of their own "
        "(content px / box px):\n  " + "\n  ".join(
            f"{b['what']} {b['how']} {b['scroll']}/{b['client']}: {b['text']!r}" for b in boxed))


JS_WRAPPED_OUT_OF_INDENT = """() => {
  const bad = [];
  for (const line of document.querySelectorAll('#main-content pre .ab-line')) {
    const text = line.textContent.replace(/\\n$/, '');
    const indent = text.length - text.replace(/^ +/, '').length;
    if (!text.trim() || line.getBoundingClientRect().width === 0) continue;
    const range = document.createRange();
    range.selectNodeContents(line);
    const rects = Array.from(range.getClientRects()).filter(r => r.width > 0);
    if (rects.length < 2) continue;
    const tops = [...new Set(rects.map(r => Math.round(r.top)))];
    if (tops.length < 2) continue;
    const charWidth = parseFloat(getComputedStyle(line).fontSize) * 0.6;
    const base = line.getBoundingClientRect().left;
    const firstText = base + indent * charWidth;
    const continuation = rects.filter(r => Math.round(r.top) > tops[0]);
    const left = Math.min(...continuation.map(r => r.left));
    if (left < firstText - 1) bad.push({text: text.trim().slice(0, 60), indent, left: left - base});
    if (bad.length >= 5) break;
  }
  return bad;
}"""


JS_LINES_SPLIT = ("() => document.querySelectorAll('#main-content div.cell_input pre').length === 0 "
                  "|| document.querySelectorAll('#main-content div.cell_input pre .ab-line').length > 0")


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_a_wrapped_code_line_keeps_its_indentation_on_a_phone(browser, site, docname):  # noqa: F811
    """At 390 px code lines wrap; the rest of a wrapped line hangs under its own indentation."""
    assert _measured(browser, site, docname, PHONE, "lines split"), (
        f"{docname}: code cells are not split into lines (book_site.py's script did not run)")
    bad = _measured(browser, site, docname, PHONE, "wrapped out of indent")
    assert not bad, (f"{docname} at {PHONE['width']} px: wrapped lines continue left of their indentation:\n  "
                     + "\n  ".join(f"{b['text']!r} (indent {b['indent']}, continues at {b['left']:.0f} px)"
                                   for b in bad))


JS_PAGE_WIDER = "() => document.documentElement.scrollWidth > window.innerWidth + 1"


JS_MID_TOKEN_WRAPS = """() => {
  // Where a narrow screen wraps a code line: the characters either side of each break.
  const bad = [];
  let wrapped = 0;
  for (const line of document.querySelectorAll('#main-content div.cell_input pre .ab-line, .ab-source pre .ab-line')) {
    if (line.getBoundingClientRect().width === 0 || line.getClientRects().length === 0) continue;
    const chars = [];
    const walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.data.length; i++) chars.push([node, i]);
    }
    let top = null, prev = '';
    for (const [node, i] of chars) {
      const ch = node.data[i];
      if (ch === '\\n') break;
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rect = Array.from(range.getClientRects()).find(r => r.width > 0);
      if (!rect || /\\s/.test(ch)) { prev = ch; continue; }
      const row = Math.round(rect.top);
      if (top !== null && row > top + 2) {
        wrapped += 1;
        // Inside a name or a number (`attention_weig|hts`, `1.|5`), or before a dot (`self|.x`);
        // after a dot between names (`self.|dropout`) is where book_site.py lets a long word wrap.
        if ((/\\w/.test(prev) && /[\\w.]/.test(ch)) || (prev === '.' && /[0-9]/.test(ch))) {
          bad.push({text: line.textContent.trim().slice(0, 70), at: prev + '|' + ch});
        }
      }
      top = row;
      prev = ch;
    }
    if (bad.length >= 5) break;
  }
  return {bad, wrapped};
}"""


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_code_wraps_only_between_words_on_a_phone(browser, site, docname):  # noqa: F811
    """Issue 38: at 390 px a code line that wraps breaks at a space, or inside a long word after
    its `.`, `(`, `[`, `,` or before its `=` (book_site.py's <wbr>), never inside a name or a
    number (`attention_weig|hts`)."""
    found = _measured(browser, site, docname, PHONE, "mid-token wraps")
    page_wider = _measured(browser, site, docname, PHONE, "page wider (code)")
    assert not found["bad"], (f"{docname} at {PHONE['width']} px: code lines wrapped inside a word "
                              f"(of {found['wrapped']} wraps):\n  " + "\n  ".join(
                                  f"{b['at']!r} in {b['text']!r}" for b in found["bad"]))
    assert not page_wider, f"{docname} at {PHONE['width']} px: the page scrolls sideways"


JS_PHONE_CODE_SCROLLS = """() => Array.from(document.querySelectorAll('#main-content div.cell_input pre'))
  .filter(b => b.getBoundingClientRect().width > 0 && b.scrollWidth > b.clientWidth + 1)
  .map(b => {
    const lines = b.textContent.split('\\n');
    const longest = lines.reduce((a, l) => (l.length > a.length ? l : a), '');
    return {scroll: b.scrollWidth, client: b.clientWidth, longest: longest.length, text: longest.trim().slice(0, 70)};
  })"""


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_no_code_cell_scrolls_on_a_phone(browser, site, docname):  # noqa: F811
    """Issue 36: at 390 px no code cell's box scrolls sideways: a notebook line (at most 88
    characters, tests/test_notebook_layout.py) wraps at its spaces and inside its long words
    (`torch.bmm(self.dropout(self.attention_weights),`) after `.`, `(`, `[`, `,` and before `=`."""
    wide = [c for c in _measured(browser, site, docname, PHONE, "code scrolls") if c["longest"] <= 88]
    assert not wide, (f"{docname} at {PHONE['width']} px: code cells that scroll sideways (content px / "
                      "box px, longest line):\n  " + "\n  ".join(
                          f"{c['scroll']}/{c['client']}: {c['text']!r}" for c in wide))


# What the copy button copies (sphinx-copybutton: the innerText of a detached clone of the
# <pre>) against the code as the server sent it (the page's HTML parsed without running its
# scripts): the spans and <wbr> that book_site.py's script adds change no character.
JS_COPIED_CODE = """async () => {
  const sent = new DOMParser().parseFromString(await (await fetch(location.href)).text(), 'text/html');
  const source = Array.from(sent.querySelectorAll('#main-content div.cell_input pre')).map(p => p.textContent);
  const shown = Array.from(document.querySelectorAll('#main-content div.cell_input pre'));
  return {source, copied: shown.map(p => p.cloneNode(true).innerText),
          wbr: document.querySelectorAll('#main-content div.cell_input pre wbr').length};
}"""


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_copying_code_gives_its_source(browser, site, docname):  # noqa: F811
    """Issue 36: the break opportunities in long words add no text: each code cell's copied
    text is its source, character for character."""
    found = _measured(browser, site, docname, PHONE, "copied code")
    assert len(found["copied"]) == len(found["source"]), f"{docname}: {found}"
    differ = [(s, c) for s, c in zip(found["source"], found["copied"]) if s != c]
    assert not differ, (f"{docname}: {len(differ)} of {len(found['source'])} code cells copy other text "
                        f"({found['wbr']} <wbr> on the page); first:\n  source {differ[0][0][:200]!r}\n"
                        f"  copied {differ[0][1][:200]!r}")


def test_the_copy_check_sees_a_changed_character(browser, site):  # noqa: F811
    """The copy check fails when the script changes a cell's text (a space for a <wbr>)."""
    page = browser.new_page(viewport=PHONE)
    try:
        page.route(re.compile(r"^https?://(?!127\.0\.0\.1[:/]).*"), lambda route: route.abort())
        docname = next(p for p in LAYOUT_PAGES if CHAPTER.match(p))
        _open(page, f"{site}{docname}.html")
        page.evaluate("""() => { const w = document.querySelector('#main-content div.cell_input pre wbr');
                               if (w) w.replaceWith(' '); }""")
        found = page.evaluate(JS_COPIED_CODE)
    finally:
        page.close()
    assert found["wbr"] > 0, f"{docname}: no <wbr> in any code cell (book_site.py's script did not run)"
    assert any(s != c for s, c in zip(found["source"], found["copied"]))


JS_GLUED_WEIGHT = """() => Array.from(document.querySelectorAll('#main-content span.pasted-text'))
  .filter(s => getComputedStyle(s).fontWeight !== getComputedStyle(s.parentElement).fontWeight)
  .map(s => ({text: s.textContent.slice(0, 30), weight: getComputedStyle(s).fontWeight,
              around: getComputedStyle(s.parentElement).fontWeight}))"""


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_glued_numbers_read_as_ordinary_text(browser, site, docname):  # noqa: F811
    """Issue 36: a number glued into the prose ({glue:text}) has the weight of the text around it
    (myst-nb's CSS sets it bold, which draws the eye to bookkeeping)."""
    bold = _measured(browser, site, docname, DESKTOP, "glued weight")
    assert not bold, f"{docname}: glued numbers in another weight than their sentence: {bold[:5]}"


# --------------------------------------------------------------------------- issue 36: rendering

JS_EQUATIONS = """() => {
  const vw = window.innerWidth;
  const column = document.querySelector('#main-content article, #main-content');
  const columnWidth = column ? column.clientWidth : vw;
  return Array.from(document.querySelectorAll('#main-content mjx-container[display="true"]'))
    .filter(c => c.getBoundingClientRect().width > 0).map(c => {
      const math = c.querySelector('mjx-math') || c;
      const content = Math.max(math.getBoundingClientRect().width, c.scrollWidth);
      const box = c.getBoundingClientRect();
      const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
      const scroller = scrolls(c) ? c : (c.parentElement && scrolls(c.parentElement) ? c.parentElement : null);
      return {tex: (c.getAttribute('aria-label') || c.textContent || '').slice(0, 60),
              content: Math.round(content), box: Math.round(box.width), right: Math.round(box.right),
              scrolls: !!scroller, viewport: vw, column: columnWidth};
    });
}"""


def _equation_problems(equations: list[dict], desktop_width: bool) -> list[str]:
    problems = []
    for eq in equations:
        if eq["right"] > eq["viewport"] + 1:
            problems.append(f"reaches past the screen (right edge {eq['right']} px): {eq['tex']!r}")
        elif eq["content"] > eq["box"] + 1 and not eq["scrolls"]:
            problems.append(f"cut: {eq['content']} px of maths in a {eq['box']} px box that does not "
                            f"scroll: {eq['tex']!r}")
        elif desktop_width and eq["content"] > eq["box"] + 1:
            problems.append(f"wider than the column ({eq['content']} px in {eq['box']} px): {eq['tex']!r}")
    return problems


def test_the_equation_check_catches_cut_and_wide_equations():
    fits = {"tex": "a", "content": 300, "box": 600, "right": 700, "scrolls": True, "viewport": 1280}
    cut = dict(fits, content=700, scrolls=False)
    scrolls = dict(fits, content=700)
    off = dict(fits, right=1400)
    assert _equation_problems([fits], True) == []
    assert [p.split(":")[0] for p in _equation_problems([cut, scrolls, off], True)] == [
        "cut", "wider than the column (700 px in 600 px)", "reaches past the screen (right edge 1400 px)"]
    assert _equation_problems([scrolls], False) == [], "on a phone a wide equation may scroll in its box"


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
@pytest.mark.parametrize("width", [DESKTOP["width"], PHONE["width"]])
def test_display_equations_are_never_cut(browser, site, docname, width):  # noqa: F811
    """At 1280 px every display equation fits its column; at 390 px one too wide scrolls inside
    its own box (book.css) and is never cut or pushed past the screen."""
    viewport = DESKTOP if width == DESKTOP["width"] else PHONE
    problems = _equation_problems(_measured(browser, site, docname, viewport, "equations"),
                                  width == DESKTOP["width"])
    assert not problems, (f"{docname} at {width} px: split the equation (aligned lines or several "
                          "$$ blocks):\n  " + "\n  ".join(problems))


JS_TABLES_AND_RAW_PIPES = """() => {
  const wide = Array.from(document.querySelectorAll('#main-content table'))
    .filter(t => t.getBoundingClientRect().width > 0).map(t => {
      const holder = t.closest('.pst-scrollable-table-container') || t.parentElement;
      const box = holder.clientWidth;
      const columnBox = document.querySelector('#main-content').clientWidth;
      return {text: t.innerText.trim().slice(0, 60), width: Math.round(t.scrollWidth),
              box: Math.min(box, columnBox)};
    }).filter(t => t.width > t.box + 1);
  const raw = Array.from(document.querySelectorAll('#main-content p'))
    .filter(p => p.textContent.split('\\n').some(l => /^\\s*\\|.*\\|\\s*$/.test(l) && l.split('|').length > 3))
    .map(p => p.textContent.trim().slice(0, 80));
  return {wide, raw};
}"""


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_tables_fit_the_column_and_none_is_raw_text(browser, site, docname):  # noqa: F811
    """At 1280 px no table is wider than the column; no paragraph shows a raw `| a | b |` row (a
    markdown table needs a blank line before it)."""
    found = _measured(browser, site, docname, DESKTOP, "tables")
    problems = [f"table {t['width']} px wide in a {t['box']} px column: {t['text']!r}" for t in found["wide"]]
    problems += [f"raw markdown table in a paragraph: {text!r}" for text in found["raw"]]
    assert not problems, f"{docname} at {DESKTOP['width']} px:\n  " + "\n  ".join(problems)


def png_text_px(data: bytes) -> float | None | str:
    """The smallest text a PNG drawn by the book holds, in its own pixels (tEXt ab-min-text-px);
    "none" for a figure without text; None when the PNG carries no record."""
    from PIL import Image

    from attention_book.core.plot import TEXT_SIZE_KEY

    value = getattr(Image.open(io.BytesIO(data)), "text", {}).get(TEXT_SIZE_KEY)
    if value is None or value == "none":
        return value
    return float(value)


# Wait (up to 10 s) while an explorer's player is loading a phone copy (explorer.py: on a phone it
# shows the desktop frame until the copy of the frame on show has loaded from the site's _static).
JS_COPIES_SETTLED = """
  for (let t = 0; t < 100 && document.querySelector('.ab-explorer-frame img[data-ab-shows="loading"]'); t++) {
    await new Promise(r => setTimeout(r, 100));
  }
"""

JS_FIGURES = """async () => {""" + JS_COPIES_SETTLED + """
  const column = document.querySelector('#main-content').clientWidth;
  const shown = (img) => { const w = img.getBoundingClientRect().width;
                           return w > 0 ? w : Math.min(img.naturalWidth, column); };
  // A <picture>'s phone copy (book_site.py) is what a phone shows: measure that one.
  const shownSrc = (i) => (i.closest('picture') && i.currentSrc && i.currentSrc !== i.src)
    ? i.closest('picture').querySelector('source').getAttribute('srcset') : i.getAttribute('src');
  const cells = Array.from(document.querySelectorAll('#main-content div.cell_output img'))
    .filter(i => !i.closest('.ab-explorer') && !i.closest('.ab-live') && i.complete && i.naturalWidth > 0)
    .map(i => ({where: 'figure', src: shownSrc(i), natural: i.naturalWidth, shown: shown(i)}));
  // Below 600 px the player shows a frame's phone copy where it has one (explorer.py): a file of
  // the site (book_site.py wrote it), or inline where the page was not built by the site's build.
  const narrow = window.matchMedia('(max-width: 600px)').matches;
  const explorers = Array.from(document.querySelectorAll('.ab-explorer')).map(e => {
    const data = JSON.parse(e.querySelector('script.ab-explorer-data').textContent);
    const blob = e.querySelector('script.ab-explorer-phone');
    const copies = blob ? JSON.parse(blob.textContent) : {};
    const small = data.images.map((_, k) => !narrow ? ''
      : copies.files && copies.files[k] ? copies.base + copies.files[k]
      : copies.copies && copies.copies[k] ? 'data:image/png;base64,' + copies.copies[k] : '');
    const frame = e.querySelector('.ab-explorer-frame');
    const style = getComputedStyle(frame);
    const box = (frame.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight)) || column;
    const ids = data.frames[data.index[Number(e.getAttribute('data-setting'))]][0];
    const shown = Array.from(frame.querySelectorAll('img')).filter(i => !i.hidden)
      .map((i, j) => ({id: ids[j], width: i.getBoundingClientRect().width,
                       small: i.getAttribute('data-ab-shows') === 'phone' && i.getAttribute('src') === small[ids[j]]}));
    return {where: 'explorer ' + e.getAttribute('data-explorer'), images: data.images,
            phone: data.phone || [], small, smallPhone: copies.widths || [], box, shown};
  });
  return {cells, explorers};
}"""


def _figure_text_problems(images: list[tuple[str, bytes, float | None]]) -> list[str]:
    """(where, PNG, shown width or None for 'as wide as the box allows') -> the ones too small."""
    from PIL import Image

    problems = []
    for where, data, box in images:
        natural = Image.open(io.BytesIO(data)).width
        px = png_text_px(data)
        if px is None:
            problems.append(f"{where}: the PNG has no text-size record (drawn outside the book's style?)")
            continue
        if px == "none":
            continue
        shown = min(natural, box)
        size = px * shown / natural
        if size < MIN_TEXT_PX:
            problems.append(f"{where}: smallest text {size:.1f} px ({px:.1f} px in a {natural} px PNG "
                            f"shown {shown:.0f} px wide)")
    return problems


def test_figure_text_is_read_from_the_png_and_scaled_to_its_shown_width():
    import matplotlib.pyplot as plt
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    from attention_book.core.plot import page_png_metadata

    fig, ax = plt.subplots(figsize=(4, 2))
    ax.set_title("t", fontsize=9)  # the tick labels (9 pt) and the title: 9 pt at 100 dpi = 12.5 px
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata=page_png_metadata(fig, 100))
    plt.close(fig)
    data = buf.getvalue()
    assert png_text_px(data) == pytest.approx(12.5)
    assert _figure_text_problems([("fits", data, 10_000)]) == []
    natural = Image.open(io.BytesIO(data)).width
    assert _figure_text_problems([("shrunk", data, natural * 0.5)])[0].startswith("shrunk: smallest text 6.2 px")
    plain = io.BytesIO()
    Image.new("RGB", (10, 10)).save(plain, format="png", pnginfo=PngInfo())
    assert "no text-size record" in _figure_text_problems([("plain", plain.getvalue(), 100)])[0]


def _explorer_image_widths(explorer: dict, docname: str) -> list[tuple[bytes, float]]:
    """Each frame image of an explorer (on a phone, its phone copy where it has one) and the width
    the page shows it at: the frame's width, or its natural width if narrower, but never under its
    legible width (--ab-phone-width, book.css). The images on show are measured, and must agree
    with that rule: on a phone, each one with a copy shows it (loaded from its file)."""
    from PIL import Image

    out = []
    for k, b64 in enumerate(explorer["images"]):
        small = explorer["small"][k] if k < len(explorer["small"]) else ""
        # on a phone, the frame's phone copy where it has one
        data = _image_bytes(small, docname) if small else base64.b64decode(b64)
        natural = Image.open(io.BytesIO(data)).width
        phone = (explorer["smallPhone"] if small else explorer["phone"])
        phone = phone[k] if k < len(phone) else 0
        out.append((data, max(min(natural, explorer["box"]), phone)))
    for shown in explorer["shown"]:
        small = explorer["small"][shown["id"]] if shown["id"] < len(explorer["small"]) else ""
        assert shown["small"] == bool(small), (
            f"{explorer['where']}: image {shown['id'] + 1} shows the "
            f"{'phone copy' if shown['small'] else 'desktop frame'}, the page's width calls for the other"
            + (f" (its copy {small} did not load?)" if small else ""))
        assert abs(out[shown["id"]][1] - shown["width"]) <= 2, (
            f"{explorer['where']}: image {shown['id'] + 1} is shown {shown['width']:.0f} px wide, "
            f"the page's rule says {out[shown['id']][1]:.0f} px")
    return out


@pytest.mark.parametrize("width", [DESKTOP["width"], PHONE["width"]])
@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_figure_and_explorer_text_is_at_least_9_px(browser, site, docname, width):  # noqa: F811
    """At 1280 and at 390 px the smallest text of every figure and of every explorer frame renders
    at least 9 px high: the PNG's recorded text size (core/plot.py writes it) × shown width /
    natural width. On a phone a figure keeps the width its text needs and scrolls in its box."""
    viewport = DESKTOP if width == DESKTOP["width"] else PHONE
    found = _measured(browser, site, docname, viewport, "figures")
    page_wider = _measured(browser, site, docname, viewport, "page wider (figures)")
    images = [(f"figure {i + 1} ({c['src'][:40]})", _image_bytes(c["src"], docname), c["shown"])
              for i, c in enumerate(found["cells"])]
    for explorer in found["explorers"]:
        images += [(f"{explorer['where']} image {k + 1}", data, shown)
                   for k, (data, shown) in enumerate(_explorer_image_widths(explorer, docname))]
    problems = _figure_text_problems(images)
    assert not problems, (f"{docname} at {width} px: figure text below {MIN_TEXT_PX:g} px "
                          "(draw the figure narrower or its text larger):\n  " + "\n  ".join(problems))
    assert not page_wider, f"{docname} at {width} px: a figure pushes the page sideways"


JS_FIGURE_WIDTHS = """() => Array.from(document.querySelectorAll('#main-content div.cell_output img'))
  .filter(i => !i.closest('.ab-explorer') && !i.closest('.ab-live') && i.complete && i.naturalWidth > 0)
  .map(i => ({alt: i.getAttribute('alt') || '', src: i.currentSrc.split('/').pop(),
              phone: !!i.closest('picture.ab-phone-picture'),
              width: i.getBoundingClientRect().width,
              column: i.closest('div.cell_output').clientWidth}))"""

# Figures that keep their desktop layout on a phone and scroll sideways in their own box (book.css):
# docname -> the start of each such figure's alt text. Diagrams (book/diagrams.py) have phone copies
# with their labels enlarged (core/plot.py's _diagram_png); what is left cannot be restacked or
# enlarged without its text running together. Keep this list in step with book.css's comment.
PHONE_SCROLL_EXCEPTIONS: dict[str, tuple[str, ...]] = {
    # four category labels side by side under one plot do not fit a phone's width
    "notebooks/ch07_exercises": ("Figure: Post-norm reversal model",),
    # the patch figure's cost plot spans both columns of its grid
    "notebooks/ch08_vision_transformer": ("Figure of 3 plots: ",),
}


JS_EXPLORER_WIDTHS = """async () => {""" + JS_COPIES_SETTLED + """
  return Array.from(document.querySelectorAll('.ab-explorer')).map(e => {
    const frame = e.querySelector('.ab-explorer-frame');
    return {name: e.getAttribute('data-explorer'), box: frame.clientWidth,
            widths: Array.from(frame.querySelectorAll('img')).filter(i => !i.hidden)
              .map(i => i.getBoundingClientRect().width),
            controls: Array.from(e.querySelectorAll('[data-ab-control]')).map(c => {
              const r = c.getBoundingClientRect(); return {id: c.id, width: r.width, height: r.height}; })};
  });
}"""


@pytest.mark.parametrize("docname", by_page([p for p in LAYOUT_PAGES if CHAPTER.match(p)]))
def test_explorer_frames_fit_a_phones_column(browser, site, docname):  # noqa: F811
    """Issue 38: at 390 px an explorer's frame shows its phone copy (explorer.py; a file of the
    site the player loads, so every explorer has copies whatever their bytes), no wider than the
    frame's box, so the point of the explorer is on screen without scrolling; its controls are
    targets at least 24 px high and wide (WCAG 2.2)."""
    problems = []
    for e in _measured(browser, site, docname, PHONE, "explorer widths"):
        wide = [w for w in e["widths"] if w > e["box"] + 1]
        if wide:
            problems.append(f"{e['name']}: frame images {[round(w) for w in wide]} px wide in a {e['box']} px box")
        problems += [f"{e['name']} control {c['id']}: target {c['width']:.0f}x{c['height']:.0f} px"
                     for c in e["controls"] if c["width"] < 24 or c["height"] < 24]
    assert not problems, f"{docname} at {PHONE['width']} px:\n  " + "\n  ".join(problems)


JS_PHONE_OUTPUTS = """() => Array.from(document.querySelectorAll('#main-content div.cell_output pre'))
  .filter(p => p.getBoundingClientRect().width > 0).map(p => {
    const lines = p.textContent.split('\\n').filter(l => l.trim());
    const style = getComputedStyle(p);
    return {columns: lines.length >= 2 && lines.filter(l => /\\S {2,}\\S/.test(l)).length >= 2,
            white: style.whiteSpace, overflow: style.overflowX, wrap: style.overflowWrap,
            text: p.innerText.trim().slice(0, 60)};
  })"""


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_printed_tables_keep_their_columns_on_a_phone(browser, site, docname):  # noqa: F811
    """Issue 38: at 390 px a printed output whose lines line up in columns (a table, a tensor)
    keeps each line whole and scrolls inside its own box, instead of wrapping a row's numbers
    under the next row's names; prose-like output wraps (book.css, book_site.py)."""
    outputs = _measured(browser, site, docname, PHONE, "outputs")
    bad = [o for o in outputs if o["columns"] and (o["white"] != "pre" or o["overflow"] not in ("auto", "scroll"))]
    assert not bad, (f"{docname} at {PHONE['width']} px: tables that wrap:\n  "
                     + "\n  ".join(f"{o['white']}/{o['overflow']}: {o['text']!r}" for o in bad))
    # Issue 36: prose-like output wraps at its spaces, so a number (1.2e-07) is not cut in two
    # ("1.2e-" / "07", as overflow-wrap: anywhere did); only a word longer than a line is cut.
    cut = [o for o in outputs if not o["columns"] and o["wrap"] not in ("break-word", "normal")]
    assert not cut, (f"{docname} at {PHONE['width']} px: outputs that may break inside a word:\n  "
                     + "\n  ".join(f"overflow-wrap {o['wrap']}: {o['text']!r}" for o in cut))


JS_VALUES_TABLES = """() => {
  // Opens every values fold (core/plot.py's values_html), measures each table against the fold's
  // width, and checks that each value cell shows its column's name: its column header above it
  // (a table), or the name as its visible label (book.css's ::before, a restacked row). The folds
  // are closed again, so the page is left as it was loaded.
  const folds = Array.from(document.querySelectorAll('details.ab-values'));
  const closed = folds.filter(d => !d.open);
  closed.forEach(d => { d.open = true; });
  const found = folds.flatMap(d => Array.from(d.querySelectorAll('table')).map(t => {
    const heads = Array.from(t.querySelectorAll('thead th'));
    const cells = Array.from(t.querySelectorAll('tbody td'))
      .filter(td => td.textContent.trim() && td.getClientRects().length);
    const unlabelled = cells.filter(td => {
      const head = heads[td.cellIndex], name = head ? head.textContent.trim() : '';
      // the label shown: the column's name, or a map's "keys 3" for its column "3"
      const label = (getComputedStyle(td, '::before').content.match(/^"(.*):\\s"/) || [])[1];
      const h = head ? head.getBoundingClientRect() : null, c = td.getBoundingClientRect();
      const above = h && h.width > 1 && h.bottom <= c.top + 1 && h.left < c.right && h.right > c.left;
      return !(name && (label === name || (label || '').endsWith(' ' + name) || above));
    }).map(td => td.textContent.trim());
    return {caption: t.caption ? t.caption.textContent.slice(0, 70) : '', column: d.clientWidth,
            width: Math.max(t.scrollWidth, t.getBoundingClientRect().width),
            right: t.getBoundingClientRect().right - d.getBoundingClientRect().right,
            cells: cells.length, unlabelled: unlabelled.slice(0, 5),
            rowLayout: getComputedStyle(t.querySelector('tbody tr')).display};
  }));
  closed.forEach(d => { d.open = false; });
  return found;
}"""


def _wide_values(tables: list[dict]) -> list[str]:
    """The values tables wider than their fold's column, or with value cells that do not show
    their column's name (JS_VALUES_TABLES's records)."""
    return [f"{t['caption']!r}: {t['width']:.0f} px in a {t['column']} px column"
            + (f", cells without their column's name: {t['unlabelled']}" if t["unlabelled"] else "")
            for t in tables if t["width"] > t["column"] + 1 or t["right"] > 1 or t["unlabelled"]]


def test_values_tables_restack_on_a_phone_and_stay_tables(browser, tmp_path):  # noqa: F811
    """Issues 36, 38: on a phone the figure's values as a table (12 keys a row, or the top keys'
    pairs) was wider than the column and scrolled sideways, so a row could not be read at once.
    In Chromium at 390 px no values table is now wider than its column, every value cell shows
    its column's name, and the accessibility tree still holds a table of rows, cells and
    headers; at 1280 px the tables are laid out as tables, as before."""
    import torch

    import attention_book as ab
    from attention_book.core.plot import values_html

    folds = [values_html(ab.heatmaps_figure(torch.rand(1, 1, 12, 12), "keys", "queries")),
             values_html(ab.heatmaps_figure(torch.rand(1, 1, 40, 30), "keys", "queries")),
             values_html(ab.curves_figure({"train": [1.0, 0.5, 0.25], "val": [1.2, 0.7]}))]
    outputs = "".join(f'<div class="cell_output"><div class="output text_html">{f}</div></div>' for f in folds)
    css = (ROOT / "book" / "_static" / "book.css").read_text(encoding="utf-8")
    page_file = tmp_path / "values.html"
    page_file.write_text('<!doctype html><html lang="en"><head><meta name="viewport" '
                         f'content="width=device-width"><style>{css}</style></head><body>'
                         f'<main id="main-content" style="padding: 0 16px">{outputs}</main></body></html>',
                         encoding="utf-8")
    # the module's Chromium (test_site.browser): a second sync Playwright in the same worker
    # fails ("Sync API inside the asyncio loop") once another test of the module has started one
    tab = desk = None
    try:
        tab = browser.new_page(viewport=PHONE)
        tab.goto(page_file.as_uri(), wait_until="load")
        tables = tab.evaluate(JS_VALUES_TABLES)
        assert len(tables) == 3 and all(t["cells"] for t in tables), tables
        assert not _wide_values(tables), _wide_values(tables)
        assert [t["rowLayout"] for t in tables] == ["grid", "grid", "table-row"]  # the narrow one fits
        tab.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
        nodes = tab.context.new_cdp_session(tab).send("Accessibility.getFullAXTree")["nodes"]
        roles = [n.get("role", {}).get("value") for n in nodes if not n.get("ignored")]
        assert roles.count("table") == 3 and roles.count("cell") == 12 * 12 + 12 * 3 + 3 * 2
        assert roles.count("columnheader") == 13 + 4 + 3 and roles.count("rowheader") == 12 + 12 + 3
        desk = browser.new_page(viewport=DESKTOP)
        desk.goto(page_file.as_uri(), wait_until="load")
        tables = desk.evaluate(JS_VALUES_TABLES)
        assert not _wide_values(tables) and {t["rowLayout"] for t in tables} == {"table-row"}
    finally:
        for page in (tab, desk):
            if page is not None:
                page.close()


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_values_tables_fit_a_phones_column(browser, site, docname):  # noqa: F811
    """At 390 px no figure's values table is wider than its column, and each value cell shows
    its column's name (issues 36, 38; test_values_tables_restack_on_a_phone_and_stay_tables)."""
    wide = _wide_values(_measured(browser, site, docname, PHONE, "values tables"))
    assert not wide, f"{docname} at {PHONE['width']} px: values tables that do not fit:\n  " + "\n  ".join(wide)


# What each test reads from the one load of a page at each width (see _measured).
_SCRIPTS = {
    DESKTOP["width"]: {"sideways": JS_SIDEWAYS, "cell images": JS_CELL_IMAGES, "inner scroll": JS_INNER_SCROLL,
                       "equations": JS_EQUATIONS, "tables": JS_TABLES_AND_RAW_PIPES, "figures": JS_FIGURES,
                       "page wider (figures)": JS_PAGE_WIDER, "glued weight": JS_GLUED_WEIGHT},
    PHONE["width"]: {"figure widths": JS_FIGURE_WIDTHS, "lines split": JS_LINES_SPLIT, "wrapped out of indent": JS_WRAPPED_OUT_OF_INDENT,
                     "mid-token wraps": JS_MID_TOKEN_WRAPS, "page wider (code)": JS_PAGE_WIDER,
                     "code scrolls": JS_PHONE_CODE_SCROLLS, "copied code": JS_COPIED_CODE,
                     "equations": JS_EQUATIONS, "figures": JS_FIGURES, "page wider (figures)": JS_PAGE_WIDER,
                     "explorer widths": JS_EXPLORER_WIDTHS, "outputs": JS_PHONE_OUTPUTS,
                     "values tables": JS_VALUES_TABLES},
}


@pytest.mark.parametrize("docname", by_page(LAYOUT_PAGES))
def test_figures_fit_a_phones_column(browser, site, docname):  # noqa: F811
    """At 390 px no figure (a cell's image, not an explorer's frame) is wider than its column, so
    none sits in a sideways scroll box: figures with several plots show their phone copy
    (core/plot.py's phone_png, wrapped in a <picture> by book_site.py), except the figures listed
    in PHONE_SCROLL_EXCEPTIONS."""
    allowed = PHONE_SCROLL_EXCEPTIONS.get(docname, ())
    wide = [f for f in _measured(browser, site, docname, PHONE, "figure widths")
            if f["width"] > f["column"] + 1 and not f["alt"].startswith(allowed or ("\0",))]
    assert not wide, (f"{docname} at {PHONE['width']} px: figures wider than the column "
                      "(they scroll sideways; give them a phone copy or list them):\n  "
                      + "\n  ".join(f"{f['src']} ({f['width']:.0f} > {f['column']} px, phone copy: {f['phone']}): "
                                     f"{f['alt'][:80]}" for f in wide))
