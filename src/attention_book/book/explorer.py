"""Explorers: one declaration, live controls in a notebook, a kernel-free player on the website.

A chapter declares an explorer once: a function that draws (matplotlib figures,
printed text, or both) from keyword arguments, and one control per argument::

    ab.explore(ab.kernel_explorer_figure, name="ch02.kernels",
               kernel=ab.Choice(ab.KERNEL_NAMES, value="gaussian", label="kernel"),
               sigma=ab.LogSlider(0.01, 3.16, value=0.5, label="width σ", grid=11))

- In Jupyter, JupyterLab and Colab (the default, ``ATTENTION_BOOK_EXPLORERS=live``)
  this is an ``ipywidgets.interactive``: every move of a control calls the
  function again, continuous values included.
- When the website is built (``ATTENTION_BOOK_EXPLORERS=static``, set by
  ``make book`` and ``make test``) it calls the function once for every setting
  on the controls' grids, and shows a small HTML player: native sliders and
  menus (keyboard accessible) that swap in the output computed for the chosen
  setting. The player needs no kernel, no server and no network, so it works
  from ``file://`` as well. Identical frames are stored once; figures are
  stored as palette PNGs, which keeps a page of frames small. Each frame's
  phone copy (its plots restacked for a 390 px column) is a file of the site,
  loaded only on a narrow screen for the frame on show (an ``<img>``
  load, which ``file://`` allows), the desktop frame standing in meanwhile.

Why our own player rather than a library: matplotlib's ``to_jshtml`` steps
through one sequence (one control), Panel's ``embed`` adds Bokeh and Panel's
JavaScript to every page (megabytes), and Vega-Lite or plotly would recompute in
the browser only what fits their chart grammar — the book's outputs are
matplotlib figures of real model runs. The player here is about seventy lines of
JavaScript inlined with its frames.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import hashlib
import html
import io
import itertools
import json
import math
import re
import time
from typing import Any, Callable, Sequence

from ..core.config import frames_dir, static_explorers
from ..core.plot import (MIN_TEXT_PX, PHONE_DPI, TEXT_SIZE_KEY, figure_alt_text, fit_page, page_png_metadata,
                         phone_figure, phone_png)
from ..core.train import notebook_progress_bar, use_progress_bar

__all__ = ["Choice", "Slider", "LogSlider", "Steps", "Text", "explore", "frame_digest", "MAX_SETTINGS"]

MAX_SETTINGS = 600
"""Most settings one explorer may precompute (the product of its grids' sizes)."""

PHONE_COPIES_CLASS = "ab-explorer-phone"
"""The class of the ``<script type="application/json">`` that carries an explorer's phone copies
(issue 38). The notebook's output holds them inline (base64); the website's build
(book/_ext/book_site.py) writes each copy to a file under the site's ``_static/explorers/`` and
leaves only the file names, so the copies add nothing to the page's weight: the player loads the
copy of the frame on show, and only below 600 px wide."""

_NAME = re.compile(r"^ch\d\d\.[a-z0-9_]+$")


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _values_said(grid) -> str:
    """A control's values for the explorer's note: all of a few, or the range of many."""
    shown = [html.escape(text) for text, _ in grid]
    if len(shown) == 1:
        return shown[0]
    if len(shown) <= 6:
        return ", ".join(shown[:-1]) + " or " + shown[-1]
    return f"{shown[0]} to {shown[-1]} in {len(shown)} steps"


class _Control:
    """A control: its label, its default ``value``, and the ``(shown, value)`` pairs of its grid."""

    slider = True  # drawn as a range input on the static page; False: a menu

    def __init__(self, label: str, value: Any, pairs: Sequence[tuple[str, Any]]):
        self.label, self.value, self.pairs = label, value, tuple(pairs)

    def grid(self) -> list[tuple[str, Any]]:
        """The (shown label, value) pairs a static page offers."""
        return list(self.pairs)

    @property
    def points(self) -> tuple:
        """The values the static page offers."""
        return tuple(v for _, v in self.pairs)

    def widget(self):  # pragma: no cover - every control defines it
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.label!r}, value={self.value!r}, grid={[v for _, v in self.pairs]!r})"


def _points(values: Sequence[Any]) -> list[tuple[str, Any]]:
    return [(_fmt(v), v) for v in values]


class Choice(_Control):
    """A menu: ``options`` are values, or ``(shown label, value)`` pairs."""

    slider = False

    def __init__(self, options: Sequence[Any], value: Any = None, label: str = ""):
        pairs = [tuple(o) if isinstance(o, (tuple, list)) and len(o) == 2 else (_fmt(o), o) for o in options]
        if not pairs:
            raise ValueError("Choice needs at least one option")
        values = [v for _, v in pairs]
        value = values[0] if value is None else value
        if value not in values:
            raise ValueError(f"Choice value {value!r} is not one of the options {values!r}")
        super().__init__(label, value, pairs)

    def widget(self):
        import ipywidgets as widgets

        return widgets.Dropdown(options=list(self.pairs), value=self.value, description=self.label)


class Steps(_Control):
    """A slider over a list of values (``ipywidgets.SelectionSlider``); the page offers all of them."""

    def __init__(self, values: Sequence[Any], value: Any = None, label: str = ""):
        values = tuple(values)
        if not values:
            raise ValueError("Steps needs at least one value")
        value = values[0] if value is None else value
        if value not in values:
            raise ValueError(f"Steps value {value!r} is not one of {values!r}")
        super().__init__(label, value, _points(values))

    def widget(self):
        import ipywidgets as widgets

        return widgets.SelectionSlider(options=list(self.pairs), value=self.value, description=self.label)


def _with_default(values: list, default: Any) -> list:
    if not any(math.isclose(v, default, rel_tol=1e-9, abs_tol=1e-12) for v in values):
        values = values + [default]
    return sorted(set(values))


class Slider(_Control):
    """A linear slider from ``min`` to ``max`` in steps of ``step`` (int when all four are ints).

    ``grid`` is what the static page offers: None for every step (at most 41), an int
    for exactly that many steps spread evenly over the range (the one nearest the
    default ``value`` moved onto it), or the list of values itself, which must hold
    the default. The page offers exactly these values. ``names`` gives some values a word
    that the page shows and a screen reader says instead of the number: ``{0: "all"}`` for
    a top-k whose 0 keeps every token (issue 38: the page said "top-k 0").
    """

    def __init__(self, min: float, max: float, step: float, value: float, label: str = "",
                 grid: int | Sequence[float] | None = None, names: dict | None = None):
        if not (max > min and step > 0):
            raise ValueError(f"Slider needs min < max and step > 0, got min={min!r}, max={max!r}, step={step!r}")
        if not min <= value <= max:
            raise ValueError(f"Slider value {value!r} is outside [{min!r}, {max!r}]")
        self.is_int = all(isinstance(x, int) and not isinstance(x, bool) for x in (min, max, step, value))
        count = int(round((max - min) / step)) + 1
        if grid is None:
            if count > 41:
                raise ValueError(f"Slider {label!r} has {count} steps: give grid= (a count or the values) "
                                 "for the static page")
            points = [min + i * step for i in range(count)]
        elif isinstance(grid, int):
            if grid < 2:
                raise ValueError(f"grid must be at least 2, got {grid!r}")
            if grid > count:
                raise ValueError(f"Slider {label!r} has {count} steps, fewer than grid={grid}")
            steps = [round(i * (count - 1) / (grid - 1)) for i in range(grid)]  # distinct: grid <= count
            nearest = builtins.min(range(grid), key=lambda i: abs(min + steps[i] * step - value))
            points = [value if i == nearest else min + k * step for i, k in enumerate(steps)]
        else:
            points = list(grid)
            bad = [p for p in points if not (min <= p <= max)]
            if bad:
                raise ValueError(f"Slider {label!r}: grid values {bad!r} are outside [{min!r}, {max!r}]")
            if not any(math.isclose(p, value, rel_tol=1e-9, abs_tol=1e-12) for p in points):
                raise ValueError(f"Slider {label!r}: grid {points!r} must hold the default value {value!r}")
        points = [int(round(p)) for p in points] if self.is_int else [round(float(p), 10) for p in points]
        self.min, self.max, self.step = min, max, step
        pairs = _points(_with_default(points, value))
        names = dict(names or {})
        super().__init__(label, value, [(names.get(v, shown), v) for shown, v in pairs])

    def widget(self):
        import ipywidgets as widgets

        kind = widgets.IntSlider if self.is_int else widgets.FloatSlider
        return kind(value=self.value, min=self.min, max=self.max, step=self.step, description=self.label)


class LogSlider(_Control):
    """A slider on a log scale (base 10) from ``min`` to ``max``. The static page offers
    exactly ``grid`` values in a geometric progression through the default ``value`` (3
    significant digits), so the default is on the grid and the steps are even in the
    logarithm; the progression reaches ``min`` or ``max`` and stays inside the range."""

    def __init__(self, min: float, max: float, value: float, label: str = "", grid: int = 9):
        if not (0 < min < max):
            raise ValueError(f"LogSlider needs 0 < min < max, got min={min!r}, max={max!r}")
        if not min <= value <= max:
            raise ValueError(f"LogSlider value {value!r} is outside [{min!r}, {max!r}]")
        if not isinstance(grid, int) or grid < 2:
            raise ValueError(f"grid must be an int of at least 2, got {grid!r}")
        # ``below`` steps under the default and ``grid - 1 - below`` above it, with the widest
        # step that keeps every value in [min, max] (the side that needs the smaller step sets
        # it); the split chosen is the one whose values cover most of the range
        low, high = math.log(value / min), math.log(max / value)

        def widest(below: int) -> float:
            above = grid - 1 - below
            return builtins.min(low / below if below else math.inf, high / above if above else math.inf)

        below = builtins.max(range(grid), key=widest)
        ratio = widest(below)
        above = grid - 1 - below
        points = [float(f"{value * math.exp(k * ratio):.3g}") for k in range(-below, above + 1)]
        points = [builtins.min(builtins.max(p, min), max) for p in points]
        self.min, self.max = min, max
        super().__init__(label, value, _points(_with_default(points, value)))

    def widget(self):
        import ipywidgets as widgets

        return widgets.FloatLogSlider(value=self.value, base=10, min=math.log10(self.min),
                                      max=math.log10(self.max), step=0.05, description=self.label)


class Text(_Control):
    """A text box in a notebook; on the static page, a menu of ``choices`` (the default first)."""

    slider = False

    def __init__(self, value: str, choices: Sequence[str] = (), label: str = ""):
        if not isinstance(value, str):
            raise ValueError(f"Text value must be a str, got {value!r}")
        super().__init__(label, value, [(c, c) for c in [value] + [c for c in choices if c != value]])

    def widget(self):
        import ipywidgets as widgets

        return widgets.Text(value=self.value, description=self.label, continuous_update=False)


def frame_digest(images: Sequence[bytes], text: str) -> str:
    """The hash the build records for one frame (its images' bytes, then its text)."""
    h = hashlib.sha256()
    for image in images:
        h.update(hashlib.sha256(image).digest())
    h.update(text.encode("utf-8"))
    return h.hexdigest()


def _png(fig, dpi: int) -> bytes:
    """A frame's PNG: legible in the page's column, its smallest text recorded (core/plot.py)."""
    fit_page(fig, dpi)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return _palette_png(buf.getvalue(), page_png_metadata(fig, dpi), _artist_colours(fig))


def _artist_colours(fig, most: int = 48) -> list[tuple[int, int, int]]:
    """The colours ``fig``'s plotted lines and its legends' swatches are drawn in (as 8-bit RGB, a
    translucent one as drawn over white): the colours a reader matches a legend's swatch to its
    line by, which the frame's palette must hold exactly (at most ``most``). Grid lines, ticks,
    and bars and points without a legend are left to the palette (ch01's frames, whose bars are
    in a colour map's shades: keeping those cost 10% of its bytes, and no reader anything)."""
    from matplotlib.collections import Collection
    from matplotlib.colors import to_rgba_array
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    found: dict[tuple[int, int, int], None] = {}

    def add(colours) -> None:
        try:
            rgba = to_rgba_array(colours)
        except (TypeError, ValueError):
            return
        for r, g, b, a in rgba:
            if a > 0:
                found.setdefault(tuple(int(round(255 * (a * c + 1 - a))) for c in (r, g, b)), None)

    legends = [ax.get_legend() for ax in fig.get_axes()] + list(fig.legends)
    swatches = [h for legend in legends if legend is not None for h in legend.legend_handles if h is not None]
    lines = [line for ax in fig.get_axes() for line in ax.get_lines()]  # plotted: not ticks or grid
    for artist in lines + swatches:
        if not artist.get_visible():
            continue
        if isinstance(artist, Line2D):
            add([artist.get_color(), artist.get_markerfacecolor(), artist.get_markeredgecolor()])
        elif isinstance(artist, Patch) and artist.get_fill():
            add([artist.get_facecolor()])
        elif isinstance(artist, Collection) and len(artist.get_facecolor()):
            add(artist.get_facecolor())
    return list(found)[:most]


def _palette_png(data: bytes, text: dict[str, str], keep: Sequence[tuple[int, int, int]] = ()) -> bytes:
    """``data`` as a palette PNG carrying the tEXt entries ``text``: 64 colours, and also each
    colour of ``keep`` that the image holds (its figure's line and legend colours) exactly."""
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    # 64 colours by octree keep the book's greys and colour maps (median cut shifted greys to
    # red) at a third of the size of a full-colour PNG. But octree merges a line's colour that few
    # pixels are drawn in with a neighbour (ch06's legend: the red swatch came out brick, issue 38):
    # such a colour joins the palette and every pixel goes to its nearest entry.
    rgb = Image.open(io.BytesIO(data)).convert("RGB")
    image = rgb.quantize(colors=64, method=Image.Quantize.FASTOCTREE)
    palette = image.getpalette()[: 3 * len(image.getcolors())]
    entries = {tuple(palette[i:i + 3]) for i in range(0, len(palette), 3)}
    drawn = {colour for _, colour in rgb.getcolors(rgb.width * rgb.height)}
    lost = [c for c in dict.fromkeys(map(tuple, keep)) if c in drawn and c not in entries]
    if lost:
        colours = (lost + sorted(entries))[:256]
        flat = [v for c in colours for v in c]
        lookup = Image.new("P", (1, 1))
        lookup.putpalette(flat + flat[:3] * (256 - len(colours)))
        image = rgb.quantize(palette=lookup, dither=Image.Dither.NONE)
    info = PngInfo()
    for key, value in text.items():
        info.add_text(key, value)
    out = io.BytesIO()
    image.save(out, format="png", optimize=True, pnginfo=info)
    return out.getvalue()


CELL_GAP_PX = 3.0
"""Least room (px, as drawn on the phone copy) between two numbers written in a map's cells."""

_LEADING_ZERO = re.compile(r"^(-?)0(\.\d+)$")


def _cell_numbers(fig) -> list[list]:
    """For each plot of ``fig`` that shows a map (an image), the texts written in its cells
    (placed in data coordinates inside the image): ch01's weights, one per cell."""
    found = []
    for ax in fig.get_axes():
        images = ax.get_images()
        if len(images) != 1:
            continue
        left, right, bottom, top = images[0].get_extent()
        xs, ys = sorted((left, right)), sorted((bottom, top))
        texts = [t for t in ax.texts if t.get_visible() and t.get_transform() == ax.transData
                 and xs[0] <= t.get_position()[0] <= xs[1] and ys[0] <= t.get_position()[1] <= ys[1]]
        if len(texts) > 1:
            found.append(texts)
    return found


def _cramped(fig) -> bool:
    """Whether the numbers in a map's cells, as ``fig``'s phone copy (core/plot.py's
    :func:`phone_figure`) draws them, are under :data:`MIN_TEXT_PX` high or nearer each other
    than :data:`CELL_GAP_PX` (they run together: "0.160.16", issue 38). False without a copy."""
    try:
        copy = phone_figure(fig)
    except Exception:  # noqa: BLE001 (no copy to measure: phone_png draws none either)
        return False
    if copy is None:
        return False
    try:
        renderer = copy.canvas.get_renderer()
        for texts in _cell_numbers(copy):
            if min(t.get_fontsize() for t in texts) * PHONE_DPI / 72 < MIN_TEXT_PX:
                return True
            boxes = [t.get_window_extent(renderer).expanded(1, 1) for t in texts]
            grown = [b.padded(CELL_GAP_PX / 2) for b in boxes]
            if any(a.overlaps(b) for i, a in enumerate(grown) for b in grown[i + 1:]):
                return True
        return False
    finally:
        import matplotlib.pyplot as plt

        plt.close(copy)


def _phone_numbers(fig):
    """``fig`` with numbers in its maps' cells that its phone copy can show apart and legible:
    ``fig`` itself when they are, else a copy with "0.16" written ".16", else a copy without the
    numbers (the colour and its bar say the value; the desktop frame keeps the numbers). None
    when ``fig`` has no such numbers."""
    import pickle

    if not _cell_numbers(fig) or not _cramped(fig):
        return None
    short = pickle.loads(pickle.dumps(fig))
    for texts in _cell_numbers(short):
        for t in texts:
            t.set_text(_LEADING_ZERO.sub(r"\1\2", t.get_text()))
    if not _cramped(short):
        return short
    for texts in _cell_numbers(short):
        for t in texts:
            t.remove()
    return short


def _phone_frame(fig) -> bytes | None:
    """A frame's phone copy (core/plot.py's :func:`phone_png`: its plots restacked for a 390 px
    phone's column, text at least 9 px), as a palette PNG; None when the frame needs none or
    cannot be re-laid out (then the phone shows the frame itself, scrolling in its box). Numbers
    written in a map's cells that would run together there are shortened or left out
    (:func:`_phone_numbers`)."""
    import matplotlib.pyplot as plt
    from PIL import Image

    try:
        numbers = _phone_numbers(fig)
        data = phone_png(numbers or fig)
    except Exception:  # noqa: BLE001 (a figure the re-layout does not understand: the frame itself)
        return None
    finally:
        if "numbers" in locals() and numbers is not None:
            plt.close(numbers)
    if data is None:
        return None
    with Image.open(io.BytesIO(data)) as image:
        text = dict(getattr(image, "text", {}))
    return _palette_png(data, text, _artist_colours(fig))


def _draw(fn: Callable, kwargs: dict, dpi: int,
          known=frozenset()) -> tuple[list[bytes], list[str], str, list]:
    """Call ``fn(**kwargs)``; return the PNGs of the figures it made, their text equivalents
    (core/plot.py's :func:`figure_alt_text`), the text it printed, and each figure's phone copy
    (:func:`_phone_frame`; None for a figure whose PNG's hash is in ``known``: drawn before)."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    before = set(plt.get_fignums())
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            result = fn(**kwargs)
        figures = [plt.figure(n) for n in plt.get_fignums() if n not in before]
        if isinstance(result, Figure) and result not in figures:
            figures.append(result)
        alts = [figure_alt_text(f) for f in figures]
        pngs = [_png(f, dpi) for f in figures]
        copies = [None if hashlib.sha256(png).hexdigest() in known else _phone_frame(f)
                  for f, png in zip(figures, pngs)]
        return pngs, alts, printed.getvalue(), copies
    finally:
        for n in set(plt.get_fignums()) - before:
            plt.close(n)


_PLAYER_JS = """
(function (root) {
  var data = JSON.parse(root.querySelector("script.ab-explorer-data").textContent);
  // Phone copies: file names under phone.base on the website (book_site.py wrote the files), or
  // inline base64 (phone.copies) where the notebook's output is shown as it is; "" where none.
  var blob = root.querySelector("script.ab-explorer-phone");
  var phone = blob ? JSON.parse(blob.textContent) : {};
  var controls = Array.prototype.slice.call(root.querySelectorAll("[data-ab-control]"));
  var view = root.querySelector(".ab-explorer-frame");
  // Below 600 px (book.css's phone width) a frame with a phone copy shows that copy instead.
  var narrow = window.matchMedia ? window.matchMedia("(max-width: 600px)") : null;
  var copies = {};  // a copy's address -> "loading", "loaded" or "failed"
  function copySrc(id) {
    if (phone.files && phone.files[id]) { return phone.base + phone.files[id]; }
    return phone.copies && phone.copies[id] ? "data:image/png;base64," + phone.copies[id] : "";
  }
  function frameIds() { return data.frames[data.index[Number(root.getAttribute("data-setting"))]][0]; }
  // The frame's images: on a phone each one's copy once it has loaded (fetched the first time it
  // is on show, by an <img> load, which file:// allows), the desktop frame until then or if the
  // copy cannot be loaded.
  function showImages() {
    var ids = frameIds(), imgs = view.querySelectorAll("img");
    ids.forEach(function (id, j) {
      var img = imgs[j], want = narrow && narrow.matches ? copySrc(id) : "";
      if (want && !copies[want]) {
        copies[want] = "loading";
        var probe = new Image();
        probe.onload = function () { copies[want] = "loaded"; showImages(); };
        probe.onerror = function () { copies[want] = "failed"; showImages(); };
        probe.src = want;
      }
      var small = want && copies[want] === "loaded";
      var src = small ? want : "data:image/png;base64," + data.images[id];
      if (img.getAttribute("src") !== src) { img.src = src; }
      img.style.setProperty("--ab-phone-width", (small ? phone.widths[id] : (data.phone ? data.phone[id] : 0)) + "px");
      // what the image shows: "phone" (its copy), "loading" (the frame, its copy on the way) or "desktop"
      img.setAttribute("data-ab-shows", small ? "phone" : (want && copies[want] === "loading" ? "loading" : "desktop"));
    });
  }
  // What a move changed, for the live region (issue 38: moving ch02's points said the same long
  // sentence each time, the new n and error deep inside it): the parts of an image's text
  // ("<kind>: <titles>; x: ...; y: ...", core/plot.py's figure_alt_text) that the image shown
  // before lacked; of its kind and titles only what is new (below).
  function changed(before, after) {
    var old = before.split("; "), parts = [];
    after.split("; ").forEach(function (part, i) {
      if (old.indexOf(part) >= 0) { return; }
      parts.push(i === 0 ? newPieces(old[0], part) : part);  // "x: ...", "y: ..." said whole
    });
    return parts.join("; ");
  }
  // The pieces of `part` (split at ", " and ": ") that `was` lacked, matched in order (their
  // longest common subsequence), each run of new pieces as written, a run said once; `part` whole
  // when it only lost pieces. A new sentence in ch07's maps said "layer 2, head 1, layer 2,
  // head 2, ..." again at every change (a fresh reader, issue 38); now the sentence and the size.
  function newPieces(was, part) {
    var a = was.split(/(, |: )/), b = part.split(/(, |: )/), n = (a.length + 1) / 2, m = (b.length + 1) / 2;
    var common = [], i, j, runs = [], run = "";
    for (i = n; i >= 0; i--) {
      common[i] = [];
      for (j = m; j >= 0; j--) {
        common[i][j] = i === n || j === m ? 0 : a[2 * i] === b[2 * j] ? common[i + 1][j + 1] + 1 :
          Math.max(common[i + 1][j], common[i][j + 1]);
      }
    }
    function end() { if (run && runs.indexOf(run) < 0) { runs.push(run); } run = ""; }
    for (i = 0, j = 0; j < m;) {
      if (i < n && a[2 * i] === b[2 * j]) { end(); i++; j++; }
      else if (i < n && common[i + 1][j] >= common[i][j + 1]) { i++; }
      else { run += (run ? b[2 * j - 1] : "") + b[2 * j]; j++; }
    }
    end();
    return runs.length ? runs.join(", ") : part;
  }
  var last = null;  // the setting shown: its index, each control's step, its frame's texts
  function update() {
    var flat = 0, said = [], steps = [];
    controls.forEach(function (c, i) {
      var k = Number(c.value), shown = data.labels[i][k];
      steps.push(k);
      flat = flat * data.labels[i].length + k;
      var out = root.querySelector('output[for="' + c.id + '"]');
      if (out) { out.textContent = shown; }
      if (c.type === "range") { c.setAttribute("aria-valuetext", shown); }
      said.push(data.names[i] + " " + shown);
    });
    if (last && last.flat === flat) { return; }  // the change event after a move's input: shown and said
    root.setAttribute("data-setting", String(flat));
    var frame = data.frames[data.index[flat]], imgs = view.querySelectorAll("img");
    frame[0].forEach(function (id, j) {
      var img = imgs[j];
      if (!img) { img = document.createElement("img"); view.insertBefore(img, view.querySelector("pre")); }
      img.alt = data.alts[id] + " (" + said.join(", ") + ")";
      img.hidden = false;
    });
    for (var j = frame[0].length; j < imgs.length; j++) { imgs[j].hidden = true; imgs[j].removeAttribute("src"); }
    showImages();
    var pre = view.querySelector("pre");
    pre.textContent = frame[1];
    pre.hidden = !frame[1];
    var status = root.querySelector(".ab-explorer-status");
    var alts = frame[0].map(function (id) { return data.alts[id]; });
    var moved = last ? said.filter(function (s, i) { return steps[i] !== last.steps[i]; }) : [];
    if (status && !moved.length) {  // the page's first frame: the whole setting and all it shows
      status.textContent = "Showing " + said.join(", ") + ": " + alts.join("; ") +
        (frame[1] ? (frame[0].length ? "; " : "") + "text: " + frame[1] : "");
    } else if (status) {  // a move: the control moved first, then what is new, then the rest
      var news = alts.map(function (alt, j) { return changed(last.alts[j] || "", alt); })
        .filter(function (part) { return part; });
      if (frame[1] && frame[1] !== last.text) { news.push("text: " + frame[1]); }
      var kept = said.filter(function (s, i) { return steps[i] === last.steps[i]; });
      status.textContent = "Showing " + moved.join(", ") + ": " +
        (news.length ? news.join("; ") : "the same result as before") +
        (kept.length ? " (with " + kept.join(", ") + ")" : "");
    }
    last = {flat: flat, steps: steps, alts: alts, text: frame[1]};
  }
  controls.forEach(function (c) { c.addEventListener("input", update); c.addEventListener("change", update); });
  if (narrow && narrow.addEventListener) { narrow.addEventListener("change", showImages); }
  update();
})(document.currentScript.parentElement);
"""


def phone_width(png: bytes) -> int:
    """The narrowest width (CSS px) at which a frame's smallest text is still :data:`MIN_TEXT_PX`
    high (its recorded text size scaled to the shown width); 0 when it has no text. The page
    never shows the frame narrower: on a phone the frame scrolls sideways in its own box
    (book.css) instead of shrinking its text below legibility (issue 38)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        px, natural = getattr(image, "text", {}).get(TEXT_SIZE_KEY), image.width
    if px in (None, "none") or float(px) <= 0:
        return 0
    return min(natural, math.ceil(natural * MIN_TEXT_PX / float(px)))


class StaticExplorer:
    """The website's form of an explorer: every setting drawn once, shown by a small player."""

    def __init__(self, fn: Callable, name: str, controls: dict[str, _Control], dpi: int = 75):
        self.name = name
        self.controls = controls
        grids = [c.grid() for c in controls.values()]
        settings = list(itertools.product(*[range(len(g)) for g in grids]))
        if len(settings) > MAX_SETTINGS:
            sizes = " × ".join(str(len(g)) for g in grids)
            raise ValueError(f"explorer {name!r} would precompute {sizes} = {len(settings)} settings "
                             f"(at most {MAX_SETTINGS}); give its controls coarser grids")
        start = time.perf_counter()
        images: dict[str, int] = {}
        image_data: list[bytes] = []
        alts: list[str] = []  # each image's text equivalent (its figure's titles and labels)
        small_data: list[bytes | None] = []  # each image's phone copy, None where it needs none
        frames: dict[tuple, int] = {}
        frame_list: list[tuple[list[int], str]] = []
        index: list[int] = []
        digests: list[str] = []
        for setting in settings:
            kwargs = {key: grids[i][k][1] for i, (key, k) in enumerate(zip(controls, setting))}
            pngs, png_alts, text, phones = _draw(fn, kwargs, dpi, images.keys())
            ids = []
            for png, alt, small in zip(pngs, png_alts, phones):
                h = hashlib.sha256(png).hexdigest()
                if h not in images:
                    images[h] = len(image_data)
                    image_data.append(png)
                    alts.append(alt)
                    small_data.append(small)
                ids.append(images[h])
            key = (tuple(ids), text)
            if key not in frames:
                frames[key] = len(frame_list)
                frame_list.append((ids, text))
            index.append(frames[key])
            digests.append(frame_digest(pngs, text))
        self.seconds = time.perf_counter() - start
        self.grids = grids
        self.index = index
        self.frames = frame_list
        self.images = image_data
        self.phone_images = small_data
        self.alts = alts
        self.digests = digests
        self.default_setting = self._flat([next(i for i, (_, v) in enumerate(g) if v == c.value)
                                           for g, c in zip(grids, controls.values())])
        self._record()

    def _flat(self, ks: Sequence[int]) -> int:
        flat = 0
        for k, g in zip(ks, self.grids):
            flat = flat * len(g) + k
        return flat

    @property
    def summary(self) -> str:
        sizes = " × ".join(f"{len(g)} {c.label or key}" for (key, c), g in zip(self.controls.items(), self.grids))
        return (f"{len(self.index)} settings ({sizes}), {len(self.images)} distinct images, "
                f"{sum(map(len, self.images)) / 1e3:.0f} kB, drawn in {self.seconds:.1f} s")

    def _record(self) -> None:
        where = frames_dir()
        if where is None:
            return
        where.mkdir(parents=True, exist_ok=True)
        record = {
            "name": self.name,
            "controls": [{"key": key, "label": c.label or key, "values": [shown for shown, _ in g]}
                         for (key, c), g in zip(self.controls.items(), self.grids)],
            "settings": len(self.index),
            "frames": len(self.frames),
            "images": len(self.images),
            "bytes": sum(map(len, self.images)),
            "phone_images": sum(1 for b in self.phone_images if b),
            "phone_bytes": sum(len(b) for b in self.phone_images if b),
            "seconds": round(self.seconds, 2),
            "default": self.default_setting,
            "digests": self.digests,
        }
        target = where / f"{self.name}.json"
        tmp = target.with_suffix(".json.part")
        tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        tmp.replace(target)

    def _repr_html_(self) -> str:
        uid = "ab-" + hashlib.sha1(self.name.encode()).hexdigest()[:10]
        defaults = []
        flat = self.default_setting
        for g in reversed(self.grids):
            defaults.append(flat % len(g))
            flat //= len(g)
        defaults.reverse()
        parts = [f'<div class="ab-explorer" id="{uid}" data-explorer="{html.escape(self.name)}">',
                 '<div class="ab-explorer-controls">']
        for i, ((key, control), g, k) in enumerate(zip(self.controls.items(), self.grids, defaults)):
            cid = f"{uid}-{i}"
            label = html.escape(control.label or key)
            if control.slider:
                field_html = (f'<input type="range" id="{cid}" data-ab-control min="0" max="{len(g) - 1}" step="1" '
                              f'value="{k}" aria-valuetext="{html.escape(g[k][0])}">'
                              # <output> is a live region of its own (role status): off, so a move is
                              # said once, by the status line (the slider's aria-valuetext names the value)
                              f'<output for="{cid}" aria-live="off">{html.escape(g[k][0])}</output>')
            else:
                options = "".join(f'<option value="{j}"{" selected" if j == k else ""}>{html.escape(shown)}</option>'
                                  for j, (shown, _) in enumerate(g))
                field_html = f'<select id="{cid}" data-ab-control>{options}</select>'
            parts.append(f'<span class="ab-explorer-control"><label for="{cid}">{label}</label>{field_html}</span>')
        parts.append("</div>")
        values = "; ".join(f"{html.escape(c.label or k)} {_values_said(g)}" for (k, c), g in
                           zip(self.controls.items(), self.grids))
        parts.append(f'<p class="ab-explorer-note">On this page the controls step through the {len(self.index)} '
                     f"settings drawn when the book was built: {values}.</p>")
        ids, text = self.frames[self.index[self.default_setting]]
        said = ", ".join(f"{c.label or key} {g[k][0]}" for (key, c), g, k in zip(self.controls.items(),
                                                                                 self.grids, defaults))
        phone = [phone_width(png) for png in self.images]
        imgs = "".join(f'<img src="data:image/png;base64,{base64.b64encode(self.images[i]).decode()}" '
                       f'alt="{html.escape(f"{self.alts[i]} ({said})", quote=True)}" '
                       f'style="--ab-phone-width: {phone[i]}px">' for i in ids)
        hidden = "" if text else " hidden"
        # The frame's images and text, and, for screen readers, the setting and what it shows in
        # words: a live region that the player rewrites at every move (book.css hides it).
        parts.append(f'<div class="ab-explorer-frame">{imgs}'
                     f"<pre{hidden}>{html.escape(text)}</pre></div>")
        parts.append('<p class="ab-explorer-status" role="status" aria-live="polite"></p>')
        data = {
            "title": self.name,
            "alts": self.alts,
            "names": [c.label or k for k, c in self.controls.items()],
            "labels": [[shown for shown, _ in g] for g in self.grids],
            "index": self.index,
            "frames": [[ids, text] for ids, text in self.frames],
            "images": [base64.b64encode(b).decode() for b in self.images],
            "phone": phone,
        }
        # Each image's phone copy (core/plot.py's phone_png; "" where it needs none), shown below
        # 600 px wide: inline here, a file of the site once book_site.py has built the page.
        copies = {
            "name": self.name,
            "copies": [base64.b64encode(b).decode() if b else "" for b in self.phone_images],
            "widths": [phone_width(b) if b else 0 for b in self.phone_images],
        }
        blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
        parts.append(f'<script type="application/json" class="ab-explorer-data">{blob}</script>')
        blob = json.dumps(copies, separators=(",", ":")).replace("</", "<\\/")
        parts.append(f'<script type="application/json" class="{PHONE_COPIES_CLASS}">{blob}</script>')
        parts.append(f"<script>{_PLAYER_JS}</script>")
        parts.append("</div>")
        return "".join(parts)

    def __repr__(self) -> str:
        return f"<explorer {self.name}: {self.summary}>"


def explore(fn: Callable[..., Any], *, name: str, dpi: int = 75, **controls: _Control):
    """Show ``fn`` with one control per keyword argument; see the module docstring.

    ``name`` is the explorer's key, ``chNN.what`` and unique in the book (the
    build's manifest and the browser test find it by this name). ``dpi`` sets
    the resolution of the website's frames. Returns the live
    ``ipywidgets.interactive`` or, when building the website, the static player.
    """
    if not callable(fn):
        raise ValueError(f"explore needs a function to call, got {fn!r}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"explorer name must look like 'ch02.kernels', got {name!r}")
    if not controls:
        raise ValueError("explore needs at least one control")
    bad = {k: c for k, c in controls.items() if not isinstance(c, _Control)}
    if bad:
        raise ValueError(f"explore controls must be ab.Choice, ab.Slider, ab.LogSlider, ab.Steps or ab.Text; "
                         f"got {bad!r}")
    if static_explorers():
        return StaticExplorer(fn, name, dict(controls), dpi=dpi)
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    def show(**kwargs):
        fn(**kwargs)
        plt.show()

    return widgets.interactive(show, **{key: c.widget() for key, c in controls.items()})


def page_progress_bar(total: int, desc: str):
    """``fit``'s bar, told of website builds: there it draws and prints nothing (the page
    states its results in prose, and a widget on a page without a kernel would show an empty
    box); in Jupyter or Colab it is tqdm's bar."""
    if not static_explorers():
        return notebook_progress_bar(total, desc)
    from tqdm.std import tqdm

    return tqdm(total=total, desc=desc, unit="epoch", disable=True)


use_progress_bar(page_progress_bar)  # the book's machinery tells the training loop how pages are built
