"""Accessibility of the built site (issue 38): axe-core on every page, text for every image.

Same built site, server and Chromium as tests/test_site.py (its ``site`` and ``browser``
fixtures). axe-core is the pinned copy that scripts/vendor_js.py puts in the site's
``_static/axe-core/axe.min.js.txt`` (a ``.txt``, so no page loads it): the test reads it
from the built site and injects it into each page, offline.

Each page of ``_toc.yml`` is opened at desktop width, its explorers' first control is moved
once (so the checked page shows a frame a reader chose), and axe runs with the WCAG 2.0 and
2.1 level A and AA rules. Any violation that axe rates serious or critical fails the test,
listed by rule with its node count and one sample node.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_site import DESKTOP, HTML, PAGES, PHONE, browser, explorer_names, site  # noqa: F401 (fixtures)

AXE = HTML / "_static" / "axe-core" / "axe.min.js.txt"
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
FAILING = ("serious", "critical")

JS_RUN_AXE = """async (tags) => {
  const result = await axe.run(document, {runOnly: {type: 'tag', values: tags},
                                          resultTypes: ['violations']});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help, count: v.nodes.length,
    sample: v.nodes.length ? String(v.nodes[0].target) + ' ' + v.nodes[0].html.slice(0, 160) : '',
  }));
}"""

JS_MOVE_EXPLORERS = """() => {
  for (const control of document.querySelectorAll('.ab-explorer [data-ab-control]')) {
    const last = control.tagName === 'SELECT' ? control.options.length - 1 : Number(control.max);
    if (last > 0) {
      control.value = String(last);
      control.dispatchEvent(new Event('input', {bubbles: true}));
      control.dispatchEvent(new Event('change', {bubbles: true}));
    }
  }
}"""


@pytest.fixture(scope="module")
def axe_page(browser, site):  # noqa: F811 (fixture)
    if not AXE.is_file():
        pytest.fail(f"axe-core is missing from the built site ({AXE}): stage the book with "
                    "scripts/stage.py (it vendors axe-core) and build it again", pytrace=False)
    context = browser.new_context(viewport=DESKTOP)
    origin = site.rstrip("/")
    context.route(re.compile(r"^(?!" + re.escape(origin) + r"[/?#]|data:|blob:|about:).*"),
                  lambda route: route.abort())
    page = context.new_page()
    page.set_default_timeout(30_000)
    yield page
    context.close()


def format_violations(violations: list[dict]) -> str:
    return "\n".join(f"  {v['impact']:8} {v['id']} ({v['count']} nodes): {v['help']}\n"
                     f"           e.g. {v['sample']}" for v in violations)


def axe_violations(page, url: str) -> list[dict]:
    page.goto(url, wait_until="load")
    page.evaluate("""() => (window.MathJax && MathJax.startup && MathJax.startup.promise)
        ? MathJax.startup.promise.then(() => true) : true""")
    page.evaluate(JS_MOVE_EXPLORERS)
    page.wait_for_timeout(150)
    page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
    return page.evaluate(JS_RUN_AXE, WCAG_AA)


@pytest.mark.browser
@pytest.mark.parametrize("docname", PAGES)
def test_page_has_no_serious_accessibility_violation(axe_page, site, docname):  # noqa: F811
    if not (HTML / f"{docname}.html").is_file():
        pytest.fail(f"page not built: {docname}.html is missing from {HTML}", pytrace=False)
    url = f"{site}{docname}.html"
    violations = axe_violations(axe_page, url)
    failing = [v for v in violations if v["impact"] in FAILING]
    assert not failing, f"{url}: axe-core (WCAG 2.1 A/AA) finds\n{format_violations(failing)}"


# --------------------------------------------------------------------------- the fixes (no browser)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))


def test_navigation_folds_and_buttons_get_names(tmp_path):
    import book_site

    page = (
        '<li class="toctree-l1 current active has-children"><a class="current reference internal" '
        'href="#">2. Attention <em>Pooling</em></a><details open="open"><summary><span '
        'class="toctree-toggle" role="presentation"><i class="fa-solid fa-chevron-down"></i></span>'
        '</summary><ul></ul></details></li>\n'
        '<details class="hide above-input"><summary aria-label="Toggle hidden content">\n'
        '<p class="collapsed admonition-title">Show code</p></summary></details>\n'
        '<details><summary><i class="x"></i></summary></details>\n'
        '<button class="btn search-button-field search-button__button pst-js-only" title="Search" '
        'aria-label="Search" data-bs-toggle="tooltip">\n <i class="fa-solid fa-magnifying-glass"></i>\n'
        ' <span class="search-button__default-text">Search</span></button>\n'
        '<i class="theme-switch fa-solid fa-sun fa-lg" data-mode="light" title="Light"></i>\n'
        '<div class="citation" id="id3" role="doc-biblioentry">'
    )
    fixed = book_site.accessible_html(page, tmp_path / "page.html")
    assert '<summary aria-label="Sections of 2. Attention Pooling">' in fixed
    assert '<summary>\n<p class="collapsed admonition-title">Show code' in fixed
    assert '<summary aria-label="Show or hide more"><i class="x"></i></summary>' in fixed
    assert 'aria-label="Search"' not in fixed and 'title="Search"' in fixed
    assert 'title="Light"' not in fixed
    assert 'role="listitem"' in fixed and "doc-biblioentry" not in fixed
    assert book_site.accessible_html(fixed, tmp_path / "page.html") == fixed  # idempotent


def test_figures_say_what_they_show_in_their_png():
    """core/plot.py records a text equivalent with every figure (tEXt `ab-alt`), made from its
    titles and labels; the site build copies it into the image's alt attribute."""
    import io

    import matplotlib.pyplot as plt
    import torch
    from PIL import Image

    import attention_book as ab
    from attention_book.core.plot import (
        ALT_TEXT_CHARS,
        ALT_TEXT_KEY,
        figure_alt_text,
        page_png_metadata,
        set_alt_text,
    )

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0], label=r"$\alpha = 1$")
    ax.set(title="Training loss", xlabel="epoch", ylabel="loss")
    ax.legend()
    assert figure_alt_text(fig) == "Figure: Training loss; x: epoch; y: loss; lines: alpha = 1"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata=page_png_metadata(fig))
    assert Image.open(io.BytesIO(buf.getvalue())).text[ALT_TEXT_KEY] == figure_alt_text(fig)
    maps = ab.heatmaps_figure(torch.full((1, 2, 3, 4), 0.25), xlabel="Keys", ylabel="Queries",
                              titles=["head 1", "head 2"])
    assert figure_alt_text(maps) == ("2 heatmaps of 3 by 4 values, darker is larger (colour scale 0 to 0.25): "
                                     "head 1, head 2; x: Keys; y: Queries")
    assert figure_alt_text(set_alt_text(fig, "A falling  line")) == "A falling line"
    # a long text equivalent is cut between words, with an ellipsis: chapter 9's explorer's was cut
    # mid-word, "...should it was weena co" (issue 36)
    long = figure_alt_text(set_alt_text(fig, "the time traveller " * 40))
    assert len(long) <= ALT_TEXT_CHARS and long.endswith("…") and long[:-1].split()[-1] in {"the", "time", "traveller"}
    assert not long[:-1].endswith(" ")


def test_figures_get_the_width_their_text_needs(tmp_path):
    """book_site.py gives each PNG figure with a recorded text size the narrowest width at which
    that text is still 9 px (--ab-phone-width; book.css keeps it no narrower on a phone)."""
    import book_site
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("ab-min-text-px", "12.00")
    info.add_text("ab-alt", "Figure: loss")
    Image.new("RGB", (800, 100)).save(tmp_path / "f.png", pnginfo=info)
    fixed = book_site.accessible_html('<img alt="f.png" src="f.png" />', tmp_path / "page.html")
    assert fixed == '<img style="--ab-phone-width: 600px" alt="Figure: loss" src="f.png" />'
    assert book_site.accessible_html(fixed, tmp_path / "page.html") == fixed


def test_every_diagram_has_a_description():
    from attention_book.book import diagrams
    from attention_book.core.plot import figure_alt_text

    for name in [n for n in dir(diagrams) if n.endswith("_diagram")]:
        text = figure_alt_text(getattr(diagrams, name)())
        assert text.startswith("Diagram") and len(text) > 80, (name, text)


# Alt texts that say nothing: a file's path or name, an explorer's id ("ch05.heads"), the
# build's placeholder for a PNG without a recorded description.
MEANINGLESS_ALT = re.compile(r"(^|/)[\w.-]+\.(png|jpe?g|svg|gif)$|^ch\d\d\.\w+$|no description recorded")


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs))


@pytest.mark.browser
def test_every_image_of_the_site_has_a_text_equivalent():
    """Issue 38: no `<img>` of the built site is named by its file or an explorer's id."""
    pages = [p for p in HTML.rglob("*.html") if "_static" not in p.relative_to(HTML).parts]
    if not pages:
        pytest.skip(f"no built site at {HTML}: build it first with `make book`")
    bad, count = [], 0
    for page in pages:
        parser = _Images()
        parser.feed(page.read_text(encoding="utf-8"))
        for img in parser.images:
            count += 1
            alt = (img.get("alt") or "").strip()
            if not alt or MEANINGLESS_ALT.search(alt):
                bad.append(f"{page.relative_to(HTML)}: alt={alt!r} src={(img.get('src') or '')[:60]!r}")
    assert not bad, f"{len(bad)} of {count} images have no text equivalent:\n  " + "\n  ".join(bad[:20])


JS_FOCUSED = """() => {
  const el = document.activeElement;
  if (!el || !el.matches('.ab-explorer [data-ab-control]')) return null;
  const root = el.closest('.ab-explorer'), box = el.getBoundingClientRect(), style = getComputedStyle(el);
  const label = root.querySelector(`label[for="${el.id}"]`);
  return {explorer: root.dataset.explorer, id: el.id, kind: el.tagName.toLowerCase(), label: label ? label.textContent : '',
          width: box.width, height: box.height,
          outline: style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0,
          status: root.querySelector('.ab-explorer-status').textContent};
}"""


@pytest.mark.browser
@pytest.mark.parametrize("docname", [p for p in PAGES if explorer_names(p)])
def test_explorers_work_from_the_keyboard(axe_page, site, docname):  # noqa: F811
    """Issue 38: Tab reaches every explorer control in order; each has a label, a visible focus
    outline and a target at least 24 px high (WCAG 2.2); an arrow key moves it, and the live
    region says the new setting and what the figure shows, in words."""
    page = axe_page
    page.goto(f"{site}{docname}.html", wait_until="load")
    if not page.locator(".ab-explorer").count():  # tests/test_site.py fails a page that lost them
        pytest.skip(f"{docname}: built without its explorers (not executed)")
    page.evaluate("() => document.querySelector('.ab-explorer').scrollIntoView()")
    page.focus(".ab-explorer [data-ab-control]")  # the first control; then Tab onwards
    wanted = page.evaluate("() => Array.from(document.querySelectorAll('.ab-explorer [data-ab-control]'))"
                           ".map(c => c.id)")
    reached = []
    for _ in wanted:
        state = page.evaluate(JS_FOCUSED)
        assert state, f"{docname}: Tab left the explorers after {reached} (wanted {wanted})"
        where = f"{docname} explorer {state['explorer']} control {state['label']!r}"
        assert state["label"].strip(), f"{where}: no label"
        assert state["outline"], f"{where}: no visible focus outline"
        assert state["height"] >= 24 and state["width"] >= 24, f"{where}: target {state['width']:.0f}x{state['height']:.0f} px"
        before = state["status"]
        forward, back = ("ArrowDown", "ArrowUp") if state["kind"] == "select" else ("ArrowRight", "ArrowLeft")
        page.keyboard.press(forward)
        after = page.evaluate(JS_FOCUSED)
        if after["status"] == before:  # at the last value: go back one instead
            page.keyboard.press(back)
            after = page.evaluate(JS_FOCUSED)
        assert after["status"] != before and after["status"].startswith("Showing "), (
            f"{where}: the live region did not say the new setting ({before!r} -> {after['status']!r})")
        # the control moved comes first, then what changed (issue 38: moving ch02's points, a
        # reader heard the same long sentence each time, the new n deep inside it)
        assert after["status"].startswith(f"Showing {state['label']} "), (
            f"{where}: the live region does not begin with the control moved: {after['status']!r}")
        assert "data:" not in after["status"] and state["explorer"] not in after["status"]
        reached.append(state["id"])
        for _ in range(300):  # on to the next control, past the links of the prose between
            page.keyboard.press("Tab")
            if page.evaluate(JS_FOCUSED) or len(reached) == len(wanted):
                break
    assert reached == wanted, f"{docname}: Tab order {reached}, page order {wanted}"


def test_a_row_of_plots_gets_a_phone_copy_restacked_and_legible(tmp_path):
    """core/plot.py's phone_png redraws a 1 x 4 row of heatmaps as a 2 x 2 grid about 3.6 inches
    wide whose text is at least 9 px in a 390 px phone's column, with the same alt text; the
    notebook's own figure keeps its layout. book_site.py writes that copy next to the figure and
    shows it below 600 px wide in a <picture>, with the alt text on the desktop <img>."""
    import base64
    import io

    import book_site
    import matplotlib.pyplot as plt
    import torch
    from PIL import Image

    import attention_book as ab
    from attention_book.core.plot import (
        ALT_TEXT_KEY,
        MIN_TEXT_PX,
        PHONE_COLUMN_PX,
        PHONE_PNG_KEY,
        TEXT_SIZE_KEY,
        _phone_metadata,
        figure_alt_text,
        page_png_metadata,
        phone_figure,
        phone_png,
    )

    fig = ab.heatmaps_figure(torch.rand(1, 4, 5, 6), xlabel="Keys", ylabel="Queries",
                             titles=[f"head {i}" for i in range(4)])
    before = [ax.get_position().bounds for ax in fig.axes]
    size = tuple(fig.get_size_inches())
    copy = phone_figure(fig)
    plots = [ax for ax in copy.axes if not hasattr(ax, "_colorbar")]
    assert sorted(ax.get_subplotspec().get_geometry()[:2] for ax in plots) == [(2, 2)] * 4
    assert sorted(ax.get_subplotspec().num1 for ax in plots) == [0, 1, 2, 3]
    plt.close(copy)
    data = phone_png(fig)
    assert [ax.get_position().bounds for ax in fig.axes] == before and tuple(fig.get_size_inches()) == size
    phone = Image.open(io.BytesIO(data))
    # about 3.6 inches at 100 dpi, stacked: two rows of 5 x 6 maps that keep their shape (issue 38)
    assert phone.width <= 400 and phone.height > 0.8 * phone.width
    shown = min(phone.width, PHONE_COLUMN_PX)
    assert float(phone.text[TEXT_SIZE_KEY]) * shown / phone.width >= MIN_TEXT_PX
    assert phone.text[ALT_TEXT_KEY] == figure_alt_text(fig)
    # The desktop PNG would need about 580 px for 9 px text: that is why it gets a copy.
    desktop = tmp_path / "_images" / "maps.png"
    desktop.parent.mkdir()
    fig.savefig(desktop, format="png", metadata={**page_png_metadata(fig), **_phone_metadata(fig)})
    assert base64.b64decode(Image.open(desktop).text[PHONE_PNG_KEY]) == data
    page = tmp_path / "notebooks" / "page.html"
    page.parent.mkdir()
    html = '<div class="cell_output"><img src="../_images/maps.png" alt="../_images/maps.png"></div>'
    fixed = book_site.accessible_html(html, page)
    assert '<picture class="ab-phone-picture"><source media="(max-width: 600px)" ' \
           'srcset="../_images/maps-phone.png">' in fixed
    assert fixed.count("<img") == 1 and f'alt="{figure_alt_text(fig)}"' in fixed
    assert fixed.count("style=") == 1 and "--ab-phone-width:" in fixed and "--ab-phone-small-width:" in fixed
    assert (tmp_path / "_images" / "maps-phone.png").read_bytes() == data
    assert book_site.accessible_html(fixed, page) == fixed  # idempotent
    # One plot that already fits a phone's column, and hand-placed axes (a diagram): no copy.
    small, _ = plt.subplots(figsize=(3, 2))
    assert phone_png(small) is None
    diagram = plt.figure(figsize=(9, 3))
    diagram.add_axes([0.1, 0.1, 0.8, 0.8]).set_title("diagram")
    assert phone_figure(diagram) is None and phone_png(diagram) is None


# --------------------------------------------------------------------------- page furniture (issue 38)

class _Headings(HTMLParser):
    def __init__(self):
        super().__init__()
        self.h1 = 0

    def handle_starttag(self, tag, attrs):
        self.h1 += tag == "h1"


@pytest.mark.browser
def test_every_page_has_one_h1():
    """Issue 38: a reader found two <h1> on every page: the theme repeated the title in a block
    shown only in print (book/_templates/layout.html writes that one as a paragraph)."""
    if not HTML.is_dir():
        pytest.skip(f"no built site at {HTML}: build it first with `make book`")
    counts = {}
    for docname in PAGES:
        parser = _Headings()
        parser.feed((HTML / f"{docname}.html").read_text(encoding="utf-8"))
        counts[docname] = parser.h1
    assert all(n == 1 for n in counts.values()), {d: n for d, n in counts.items() if n != 1}


JS_BACK_TO_TOP = """() => {
  const b = document.getElementById('pst-back-to-top'), r = b.getBoundingClientRect();
  const head = document.querySelector('.bd-header-article').getBoundingClientRect();
  const controls = Array.from(document.querySelectorAll('.bd-header-article button, .bd-header-article a'))
    .map(c => c.getBoundingClientRect()).filter(q => q.width > 0);
  b.style.visibility = 'hidden';  // what is drawn under the button: the page header, not the text
  const under = [[r.left + 1, r.top + 1], [r.right - 1, r.top + 1], [r.left + 1, r.bottom - 1], [r.right - 1, r.bottom - 1]]
    .map(([x, y]) => { const e = document.elementFromPoint(x, y); return e && e.closest('.bd-header-article') ? 'header' : (e ? e.outerHTML.slice(0, 80) : ''); });
  b.style.visibility = '';
  return {shown: getComputedStyle(b).display !== 'none', box: [r.left, r.top, r.width, r.height].map(Math.round),
          inHeader: r.top >= head.top && r.bottom <= head.bottom,
          overControls: controls.filter(q => q.right > r.left && q.left < r.right && q.bottom > r.top && q.top < r.bottom).length,
          under, name: b.textContent.trim()};
}"""


@pytest.mark.browser
@pytest.mark.parametrize("docname", [p for p in PAGES if p.startswith("notebooks/")][:4])
def test_back_to_top_covers_no_text_on_a_phone(browser, site, docname):  # noqa: F811
    """Issue 38: at 390 px the theme's "Back to top" button floated over the page's text; it sits
    in the sticky page header (book.css), clear of the header's buttons, at least 24 px, named."""
    page = browser.new_page(viewport=PHONE)
    try:
        page.goto(f"{site}{docname}.html", wait_until="load")
        page.mouse.wheel(0, 4000)
        page.wait_for_timeout(300)
        page.mouse.wheel(0, -300)  # the theme shows the button when the reader scrolls back up
        page.wait_for_timeout(400)
        got = page.evaluate(JS_BACK_TO_TOP)
    finally:
        page.close()
    assert got["shown"], f"{docname}: the button did not show on scrolling up"
    assert got["inHeader"] and got["under"] == ["header"] * 4, f"{docname}: the button covers the page: {got}"
    assert got["overControls"] == 0, f"{docname}: the button covers a header button: {got}"
    assert min(got["box"][2:]) >= 24 and got["name"] == "Back to top", got


@pytest.mark.browser
def test_an_explorers_live_region_says_what_a_move_changed(browser, monkeypatch, tmp_path):  # noqa: F811
    """Issue 38: after a move the status line names the control moved and what is new in the
    figure, not the whole setting and every label again; the page's first frame is said whole."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import attention_book as ab
    from attention_book.core.config import EXPLORERS_ENV, FRAMES_ENV

    def draw(n, kind):
        fig, ax = plt.subplots(figsize=(2, 1.5))
        ax.plot([0, 1], [0, n])
        ax.set(title=f"{kind}, n={n}: error {1 / n:.2f}", xlabel="x", ylabel="y")
        return fig

    monkeypatch.setenv(EXPLORERS_ENV, "static")
    monkeypatch.setenv(FRAMES_ENV, str(tmp_path))
    player = ab.explore(draw, name="ch02.moves", n=ab.Steps([10, 40], value=10, label="points"),
                        kind=ab.Choice(["gaussian", "boxcar"], label="kernel"))
    page = browser.new_page(viewport=DESKTOP)
    try:
        page.set_content(f"<main>{player._repr_html_()}</main>")
        status = page.locator(".ab-explorer-status")
        assert status.text_content() == ("Showing points 10, kernel gaussian: Figure: gaussian, n=10: "
                                         "error 0.10; x: x; y: y")
        page.focus("input[type=range]")
        page.keyboard.press("ArrowRight")
        assert status.text_content() == "Showing points 40: n=40: error 0.03 (with kernel gaussian)"
        page.focus("select")
        page.keyboard.press("ArrowDown")
        assert status.text_content() == "Showing kernel boxcar: boxcar (with points 40)"
    finally:
        page.close()


@pytest.mark.browser
def test_a_new_sentence_is_said_without_the_titles_that_stayed(browser, monkeypatch, tmp_path):  # noqa: F811
    """A fresh reader (issue 38) changed the sentence of chapter 7's attention maps: each change
    said "...layer 2, head 1, layer 2, head 2, layer 2, head 3, layer 2, head 4" again. A move
    says what is new in the titles (the size, the sentence), each new title once; the image's
    text keeps them all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import attention_book as ab
    from attention_book.core.config import EXPLORERS_ENV, FRAMES_ENV

    def draw(sentence, layer):
        fig, axes = plt.subplots(1, 4, figsize=(4, 1.2))
        for head, ax in enumerate(axes, 1):
            ax.imshow([[0.1] * len(sentence)] * 2)
            ax.set_title(f"layer {layer}, head {head}")
        fig.suptitle(f"attention {sentence} → {sentence.upper()}")
        return fig

    monkeypatch.setenv(EXPLORERS_ENV, "static")
    monkeypatch.setenv(FRAMES_ENV, str(tmp_path))
    player = ab.explore(draw, name="ch07.sentences", sentence=ab.Choice(["go", "i lost"]),
                        layer=ab.Steps([1, 2], value=2, label="layer"))
    page = browser.new_page(viewport=DESKTOP)
    try:
        page.set_content(f"<main>{player._repr_html_()}</main>")
        status = page.locator(".ab-explorer-status")
        assert "layer 2, head 4" in status.text_content()  # the first frame: said whole
        page.focus("select")
        page.keyboard.press("ArrowDown")
        assert status.text_content() == "Showing sentence i lost: attention i lost → I LOST (with layer 2)"
        assert "layer 2, head 1, layer 2, head 2" in page.locator(".ab-explorer-frame img").get_attribute("alt")
        page.focus("input[type=range]")
        page.keyboard.press("ArrowLeft")
        assert status.text_content() == "Showing layer 1: layer 1 (with sentence i lost)"
    finally:
        page.close()
