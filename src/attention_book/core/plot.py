"""Figures: one style for the whole book, attention heatmaps and learning curves.

Every helper *returns* the :class:`matplotlib.figure.Figure` it draws, so a
chapter can show it, save it, or test it.
"""

from __future__ import annotations

import itertools
import math
import re
import warnings
from typing import Sequence

import matplotlib

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["use_book_style", "to_numpy", "heatmaps_figure", "curves_figure", "readable_log_axis", "chance_line",
           "BOOK_CMAP", "PAGE_FIGURE_WIDTH", "ensure_style", "PAGE_COLUMN_PX", "MIN_TEXT_PX", "TEXT_SIZE_KEY",
           "smallest_text_px", "fit_page", "page_png_metadata", "ALT_TEXT_KEY", "figure_alt_text",
           "set_alt_text", "values_html", "VALUES_MAX", "SERIES_ROWS_MAX", "PHONE_COLUMN_PX", "PHONE_PNG_KEY",
           "phone_figure", "phone_png", "plain_number"]

BOOK_CMAP = "Reds"
# The widest figure (inches) whose 9-pt tick labels still render at least 9 px high in the
# website's column (about 684 px at 1280 px): drawn inline at 100 dpi, a 9-inch figure is
# scaled to 0.76, its tick labels to 9.5 px. Wider figures shrink more (tests/test_site_layout.py).
PAGE_FIGURE_WIDTH = 9.0
# The website's text column at 1280 px (pixels): a wider image is scaled down to it.
PAGE_COLUMN_PX = 684
# The smallest text a reader should meet in a figure on the page, in CSS pixels at 1280 px.
MIN_TEXT_PX = 9.0
# The PNG tEXt key under which the book records a figure's smallest text, in the PNG's own
# pixels (tests/test_site_layout.py reads it to measure the text as shown).
TEXT_SIZE_KEY = "ab-min-text-px"
# The PNG tEXt key under which the book records a figure's short text equivalent; the site
# build copies it into the image's `alt` attribute (book/_ext/book_site.py, issue 38).
ALT_TEXT_KEY = "ab-alt"
ALT_TEXT_CHARS = 300
# The website's text column on a 390 px wide phone (pixels), with a margin: a phone copy of a
# figure (phone_figure) is drawn to be legible at this width.
PHONE_COLUMN_PX = 340
PHONE_FIGURE_WIDTH = 3.6  # inches: a phone copy drawn at PHONE_DPI is about as wide as that column
PHONE_DPI = 100
PHONE_MAX_PX = 350  # a phone copy's PNG is at most this wide: a 390 px phone's column is 358 px
# The PNG tEXt key under which the book records a figure's phone copy (a PNG, base64): the site
# build writes it next to the figure and shows it below 600 px wide (book/_ext/book_site.py).
PHONE_PNG_KEY = "ab-phone-png"
_PHONE_PNG_MAX = 700_000  # base64 characters: a larger copy is left out (Pillow refuses text over 1 MB)
_STYLED = False


def _drawn_texts(artist):
    """The visible, non-empty text artists under ``artist`` (hidden parents and axes turned off
    excluded): the texts a saved figure shows."""
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.text import Text

    if not artist.get_visible():
        return
    if isinstance(artist, Text):
        if artist.get_text().strip():
            yield artist
        return
    children = artist.get_children()
    if isinstance(artist, Axes) and not artist.axison:  # ax.axis("off"): no ticks, labels or spines
        children = [c for c in children if not isinstance(c, Axis)]
    for child in children:
        yield from _drawn_texts(child)


def smallest_text_px(fig, dpi: float | None = None) -> float | None:
    """The height of the figure's smallest text in the pixels of a PNG drawn at ``dpi``
    (the figure's own dpi when None); None for a figure without text."""
    sizes = [t.get_fontsize() for t in _drawn_texts(fig)]
    if not sizes:
        return None
    return min(sizes) * (fig.dpi if dpi is None else dpi) / 72.0


def fit_page(fig, dpi: float | None = None, column_px: float = PAGE_COLUMN_PX) -> None:
    """Make ``fig`` legible in the website's column before it is saved at ``dpi``.

    A figure wider than :data:`PAGE_FIGURE_WIDTH` inches is resized to that width (same
    aspect); then any text that would show smaller than :data:`MIN_TEXT_PX` once the page
    scales the image to ``column_px`` is enlarged to that size. Figures the book draws
    already meet both; this catches a chapter's own wide figure or tiny annotation.
    """
    dpi = fig.dpi if dpi is None else dpi
    width, height = fig.get_size_inches()
    if width > PAGE_FIGURE_WIDTH:
        fig.set_size_inches(PAGE_FIGURE_WIDTH, height * PAGE_FIGURE_WIDTH / width)
        width = PAGE_FIGURE_WIDTH
    shown = min(1.0, column_px / (width * dpi))  # how much the page shrinks the image
    needed = MIN_TEXT_PX * 72.0 / (dpi * shown) * 1.03  # in points, with a margin for rounding
    for text in _drawn_texts(fig):
        if text.get_fontsize() < needed:
            text.set_fontsize(needed)


def set_alt_text(fig, text: str):
    """Give ``fig`` the short text a screen reader says for it (what it shows); returns ``fig``."""
    fig._ab_alt_text = " ".join(str(text).split())
    return fig


def _words(text: str) -> str:
    """A label as words: mathtext's `$`, braces and backslashes dropped (`$\\alpha$` -> alpha)."""
    text = re.sub(r"\\(mathrm|mathbf|mathit|text|operatorname)\b", "", text)
    return " ".join(re.sub(r"[${}\\]", "", text).split())


def _unique(texts) -> list[str]:
    return list(dict.fromkeys(t for t in map(_words, texts) if t))


def figure_alt_text(fig) -> str:
    """A figure's short text equivalent: the one :func:`set_alt_text` gave it, else one made
    from what it shows in words: its title, its plots' titles, axis labels and legend entries
    ("Figure: <titles>; x: <xlabel>; y: <ylabel>; lines: <legend>")."""
    text = getattr(fig, "_ab_alt_text", None) or _described(fig)
    # cut between words, with an ellipsis ("...should it was weena co" was cut mid-word, issue 36)
    return text if len(text) <= ALT_TEXT_CHARS else text[: ALT_TEXT_CHARS - 1].rsplit(" ", 1)[0] + "…"


def _described(fig) -> str:
    """:func:`figure_alt_text` made from what ``fig`` shows in words."""
    axes = [ax for ax in fig.get_axes() if ax.get_visible() and not hasattr(ax, "_colorbar")]
    suptitle = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    titles = _unique([suptitle] + [ax.get_title(loc) for ax in axes for loc in ("left", "center", "right")])
    xlabels = _unique(ax.get_xlabel() for ax in axes)
    ylabels = _unique(ax.get_ylabel() for ax in axes)
    legends = _unique(t.get_text() for ax in axes if ax.get_legend() for t in ax.get_legend().get_texts())
    kind = getattr(fig, "_ab_alt_kind", None) or ("Figure" if len(axes) < 2 else f"Figure of {len(axes)} plots")
    parts = [f"{kind}: {', '.join(titles)}" if titles else kind]
    if xlabels:
        parts.append("x: " + ", ".join(xlabels))
    if ylabels:
        parts.append("y: " + ", ".join(ylabels))
    if legends:
        parts.append("lines: " + ", ".join(legends))
    return "; ".join(parts)


def page_png_metadata(fig, dpi: float | None = None) -> dict[str, str]:
    """The PNG tEXt entries the book writes with a figure: its smallest text (see TEXT_SIZE_KEY),
    ``"none"`` for a figure without text, and its text equivalent (see ALT_TEXT_KEY)."""
    px = smallest_text_px(fig, dpi)
    return {TEXT_SIZE_KEY: "none" if px is None else f"{px:.2f}", ALT_TEXT_KEY: figure_alt_text(fig)}


# ----------------------------------------------------------------------------- phone copies
def _grid_axes(fig):
    """The figure's plots in reading order as (axes, row, column) of their one shared grid (a plot
    spanning several cells at its top-left one), or None if it has hand-placed axes or several grids."""
    plots = [ax for ax in fig.get_axes() if ax.get_visible() and not hasattr(ax, "_colorbar")]
    specs = [ax.get_subplotspec() for ax in plots]
    if not plots or any(spec is None for spec in specs):
        return None
    grids = {id(spec.get_gridspec()) for spec in specs}
    if len(grids) != 1:
        return None
    # a plot spanning several cells (patch_grid_figure's cost plot under two panels) counts at its
    # top-left cell; phone_figure stacks such a figure in one column
    cells = sorted((spec.rowspan.start, spec.colspan.start, i) for i, spec in enumerate(specs))
    return [(plots[i], r, c) for r, c, i in cells]


def _legend_out_of_plots(fig) -> bool:
    """Move the one legend of ``fig``'s plots out of them, across the figure's full width
    (constrained layout's "outside" legends): above the plots when its plot is in the top row of
    several (the legend stays next to the plot it explains), a shared x label or the figure's own
    text sits at the bottom, else under them. False when there is not exactly one or the layout cannot."""
    axes = [ax for ax in fig.get_axes() if ax.get_legend() is not None]
    if len(axes) != 1 or not hasattr(fig.get_layout_engine(), "get"):
        return False
    legend = axes[0].get_legend()
    handles, labels = axes[0].get_legend_handles_labels()
    if not labels:
        return False
    size = legend.get_texts()[0].get_fontsize() if legend.get_texts() else None
    ncols = 2 if len(labels) > 1 and max(map(len, labels)) <= 18 else 1
    spec = axes[0].get_subplotspec()
    top_of_several = spec is not None and spec.rowspan.start == 0 and spec.get_gridspec().nrows > 1
    shared_xlabel = getattr(fig, "_supxlabel", None) is not None
    # a figure's own text under its plots (chapter 9's sample) is not laid out: a legend there covers it
    text_below = any(t.get_visible() and t.get_text().strip() and t.get_transform() == fig.transFigure
                     and t.get_position()[1] < 0.1 for t in fig.texts)
    where = "upper" if top_of_several or shared_xlabel or text_below else "lower"
    try:
        fig.legend(handles, labels, loc=f"outside {where} center", fontsize=size, frameon=False, ncols=ncols)
    except (ValueError, TypeError):
        return False
    legend.remove()
    w, h = fig.get_size_inches()
    fig.set_size_inches(w, h + 0.24 * -(-len(labels) // ncols))
    return True


def _legend_beside_plot(ax, renderer) -> bool:
    """Whether ``ax``'s legend stands right of its plot (``loc="center left", bbox_to_anchor=(1, 0.5)``):
    in a phone's column it takes the plot's width, and a plot stacked under it gets no more
    (chapter 6's explorer, issue 38: both plots 75 px wide in a 326 px copy)."""
    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return False
    return legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1 - 1


def _legend_covers_data(ax, renderer) -> bool:
    """Whether ``ax``'s legend (drawn inside the plot) lies over any of its data points: the
    vertices of its lines, the centres of its markers (scatter) and its bars, in display pixels."""
    from matplotlib.container import BarContainer

    legend = ax.get_legend()
    if legend is None or not legend.get_visible():
        return False
    box = legend.get_window_extent(renderer)
    if not ax.get_window_extent(renderer).overlaps(box):
        return False  # placed outside the plot
    points = [line.get_transform().transform(line.get_xydata()) for line in ax.get_lines()
              if line.get_visible() and len(line.get_xydata())]
    for collection in ax.collections:
        offsets = collection.get_offsets()
        if collection.get_visible() and len(offsets):
            points.append(collection.get_offset_transform().transform(offsets))
    for container in ax.containers:  # bars (chapter 9's next-token probabilities): any bar under it
        if isinstance(container, BarContainer) and any(
                bar.get_visible() and bar.get_height() and bar.get_window_extent(renderer).overlaps(box)
                for bar in container.patches):
            return True
    if not points:
        return False
    xy = np.concatenate(points)
    inside = (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)
    return bool(inside.any())


def _shared_labels(fig, cells) -> None:
    """One figure-level label for a label every plot of a grid repeats (``supxlabel`` / ``supylabel``):
    on a phone, a long label repeated under each of two narrow columns (or beside each row of
    short plots) runs into its neighbour ("training point (key)training point (key)")."""
    if len(cells) < 2:
        return
    axes = [ax for ax, _, _ in cells]
    for which in ("x", "y"):
        labels = [getattr(ax, f"get_{which}label")() for ax in axes]
        shown = {label for label in labels if label}
        if len(shown) != 1 or labels.count(next(iter(shown))) < 2:
            continue
        label = getattr(axes[0], f"{which}axis").label
        for ax in axes:
            getattr(ax, f"set_{which}label")("")
        getattr(fig, f"sup{which}label")(next(iter(shown)), fontsize=label.get_fontsize())


def _fewer_ticks(cells, cols: int) -> None:
    """At most about four numbered ticks per axis (three across a plot in two columns): the default
    locator's seven or eight numbers run together on a plot 150 px wide. Ticks a chapter placed
    itself (tokens, positions) are kept."""
    from matplotlib.ticker import AutoLocator, MaxNLocator

    for ax, _, _ in cells:
        for axis, bins in ((ax.xaxis, 4 if cols == 1 else 3), (ax.yaxis, 4)):
            locator = axis.get_major_locator()
            if isinstance(locator, AutoLocator):
                axis.set_major_locator(MaxNLocator(nbins=bins, steps=[1, 2, 2.5, 5, 10]))
            elif type(locator) is MaxNLocator:
                locator.set_params(nbins=bins)


def _tidy_text(fig, cells) -> bool:
    """Measure the copy as drawn and fix what runs together, in rounds (a fix moves the layout;
    one draw per round, at most three, and one more if the third changed anything):
    :func:`_thin_ticks` and :func:`_fit_titles`. The figure is left laid out as drawn last.
    True when constrained layout gave up on it (its plots' labels leave them no room: "axes
    sizes collapsed to zero"); that warning is caught here, never printed."""
    changed = True
    for _ in range(3):
        renderer = fig.canvas.get_renderer()
        if _layout_collapses(fig):
            return True
        changed = _thin_ticks(cells, renderer)
        changed = _fit_titles(fig, renderer) or changed
        if not changed:
            return False
    return _layout_collapses(fig)


def _thin_ticks(cells, renderer) -> bool:
    """Fewer numbered ticks on any axis whose tick labels, as drawn, touch each other (five-digit
    numbers under a plot 150 px wide): one bin fewer, down to two. Labels a chapter placed
    (tokens) are kept, and turned 90 degrees when, level under the narrower plot, they touch.
    True if any changed."""
    from matplotlib.ticker import FixedLocator, MaxNLocator

    changed = False
    for ax, _, _ in cells:
        for axis, along in ((ax.xaxis, 0), (ax.yaxis, 1)):
            locator = axis.get_major_locator()
            numbered = isinstance(locator, MaxNLocator)
            if not numbered and not (isinstance(locator, FixedLocator) and along == 0):
                continue
            low, high = sorted(axis.get_view_interval())
            labels = [t.label1 for t in axis.get_major_ticks()
                      if low <= t.get_loc() <= high and t.label1.get_visible() and t.label1.get_text()]
            if not numbered and all(label.get_rotation() != 0 for label in labels):
                continue  # placed labels already turned
            boxes = sorted((label.get_window_extent(renderer) for label in labels),
                           key=lambda b: b.x0 if along == 0 else b.y0)
            touch = any((b.x0 - a.x1 if along == 0 else b.y0 - a.y1) < 3 for a, b in itertools.pairwise(boxes))
            if not touch:
                continue
            if not numbered:
                ax.tick_params(axis="x", labelrotation=90)
                changed = True
                continue
            bins = locator._nbins if isinstance(locator._nbins, int) else 4
            if bins > 2:
                axis.set_major_locator(MaxNLocator(nbins=bins - 1, steps=[1, 2, 2.5, 5, 10]))
                changed = True
    return changed


def _fit_titles(fig, renderer) -> bool:
    """Wrap each plot's title that is wider than its room (measured as drawn), so that titles of
    neighbouring plots never run together ("layer 1, headlayer 1, head 2"): first at its commas,
    then between words, on as few lines as fit. True if any changed."""
    changed = False
    suptitle = getattr(fig, "_suptitle", None)
    titles = [(ax.title, ax) for ax in fig.get_axes()] + ([(suptitle, None)] if suptitle is not None else [])
    for title, ax in titles:
        text = title.get_text()
        if not text or not title.get_visible():
            continue
        # the figure's own title may take the figure's width
        room = fig.bbox.width - 6 if ax is None else _title_room(fig, ax, renderer)
        width = title.get_window_extent(renderer).width
        if width <= room:
            continue
        lines = text.split("\n")
        per_line = max(6, -(-max(map(len, lines)) // math.ceil(width / max(room, 1.0))))
        wrapped = "\n".join(_wrap_line(line, per_line) for line in lines)
        if wrapped != text:
            title.set_text(wrapped)
            changed = True
    return changed


def _title_room(fig, ax, renderer) -> float:
    """How wide (display px) ``ax``'s centred title may be: up to the nearest plot beside it in
    the same row (its neighbour's title sits there) or the figure's edge, on either side."""
    box = ax.get_window_extent(renderer)
    centre = (box.x0 + box.x1) / 2
    left, right = 0.0, fig.bbox.width
    for other in fig.get_axes():
        if other is ax or not other.get_visible() or hasattr(other, "_colorbar"):
            continue
        near = other.get_window_extent(renderer)
        if near.y1 < box.y0 or near.y0 > box.y1:
            continue  # another row
        if near.x1 <= centre:
            left = max(left, near.x1)
        elif near.x0 >= centre:
            right = min(right, near.x0)
    return 2 * min(centre - left, right - centre) - 6


def _wrap_line(line: str, per_line: int) -> str:
    """``line`` on lines of about ``per_line`` characters: after its commas when every part then
    fits ("layer 1,\nhead 1"), else between words."""
    import textwrap

    parts = line.split(", ")
    if len(parts) > 1 and all(len(part) <= per_line for part in parts):  # a comma may stand out
        out = [parts[0]]
        for part in parts[1:]:
            if len(out[-1]) + 2 + len(part) <= per_line:
                out[-1] += ", " + part
            else:
                out[-1] += ","
                out.append(part)
        return "\n".join(out)
    return "\n".join(textwrap.wrap(line, per_line, break_long_words=False)) or line


def _wrap_text(text, width_in: float) -> None:
    """Wrap a Text artist's string onto lines that fit ``width_in`` inches at its font size (after
    its commas where the parts fit: "example 1,\nhead 3", not "example\n1, head 3")."""
    content = text.get_text()
    if not content:
        return
    per_line = max(12, int(width_in * 72 / (0.55 * text.get_fontsize())))
    if len(content) > per_line:
        text.set_text(_wrap_line(" ".join(content.split()), per_line))


def _phone_width_in() -> float:
    """The widest copy (inches) whose PNG, padded by savefig.pad_inches on both sides, is at most
    PHONE_MAX_PX - 4 px at PHONE_DPI: phone_png's target, reached on the first layout when
    nothing sticks out of the figure."""
    pad = matplotlib.rcParams["savefig.pad_inches"]
    return min(PHONE_FIGURE_WIDTH, (PHONE_MAX_PX - 4) / PHONE_DPI - 2 * pad)


def _wrap_figure_texts(fig) -> None:
    """Wrap each of the figure's own texts (``fig.text``, not a plot's) that is wider than a phone
    copy's PNG may be, between words. A line too long for the phone continues a paragraph the
    desktop figure wrapped, so it is joined with the next line before wrapping; shorter lines (a
    heading such as "sample (seed 0):") keep their breaks. Chapter 9's sampled continuation (95
    monospace columns under the plot) kept every copy of its explorer's frames 736 px wide, so
    none was drawn; narrowing the figure does not narrow its text."""
    import textwrap

    pad = matplotlib.rcParams["savefig.pad_inches"] * fig.dpi
    room = 0.95 * (PHONE_MAX_PX - 2 * pad)  # display px: the PNG adds the pad on both sides
    renderer = fig.canvas.get_renderer()
    for text in fig.texts:
        content = text.get_text()
        if not text.get_visible() or not content.strip():
            continue
        width = text.get_window_extent(renderer).width
        if width <= room:
            continue
        lines = content.split("\n")
        per_line = max(12, int(max(map(len, lines)) * room / width))
        paragraphs = [lines[0]]
        for previous, line in itertools.pairwise(lines):
            if len(previous) > per_line:
                paragraphs[-1] += " " + line
            else:
                paragraphs.append(line)
        text.set_text("\n".join(textwrap.fill(p, per_line, break_long_words=False) or p for p in paragraphs))


_COLLAPSED = "constrained_layout not applied"


def _layout_collapses(fig) -> bool:
    """Draw ``fig`` (no pixels) and say whether constrained layout gave up because its plots'
    labels, titles and legends leave them no room ("axes sizes collapsed to zero"); the warning
    is caught here, never printed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.draw_without_rendering()
    return any(_COLLAPSED in str(w.message) for w in caught)


def phone_figure(fig):
    """A copy of ``fig`` laid out for a phone's column (about :data:`PHONE_FIGURE_WIDTH` inches),
    or None when it cannot be re-laid out (hand-placed axes: diagrams) or needs no copy.

    The copy (``fig`` itself is unchanged) restacks a grid with more than two columns of
    plots into rows of two (one row of two plots, or one wide plot, into one column), keeps each
    plot's shape, gives first-column plots back the tick labels and axis label that shared axes
    hid, is resized and laid out again with constrained layout, and has any text that would
    show under :data:`MIN_TEXT_PX` at :data:`PHONE_COLUMN_PX` enlarged. Plots whose labels leave
    them no room in two columns (constrained layout collapses them) are stacked in one column;
    None if even that collapses. No warning escapes."""
    if _grid_axes(fig) is None:
        return None
    copy, collapsed = _phone_layout(fig, max_cols=2)
    if collapsed:  # two columns leave the plots no room (found on the first draw): one column
        plt.close(copy)
        copy, collapsed = _phone_layout(fig, max_cols=1)
    if collapsed:
        plt.close(copy)
        return None
    return copy


def _panel_titles(cells) -> str:
    """Title every plot of a grid of several rows and columns with its row's and its column's
    labels, for a copy that restacks it: a column's title (on its top plot) and a row's label (the
    y label of its first plot) otherwise end up beside other rows' plots (exercise 11.5.1's 2 x 5
    maps in two columns: example 1's heads under "example 0 query", with no "head k", issue 38).
    A plot's own title is kept. Returns the y label to show beside the restacked column: the
    line every row's label ends with (the axis's name, "query"), or "" when they share none; None
    when the y labels name each plot's own axis, not its row (a plot right of the first column
    has one of its own: chapter 3's four panels, whose right-hand plots were titled with their
    left neighbour's label and lost their own, issue 36): then every plot keeps its y label."""
    top = {c: ax.get_title() for ax, r, c in cells if r == 0}
    if any(ax.get_ylabel() for ax, _, c in cells if c > 0):
        for ax, _, c in cells:
            full = getattr(ax, "_ab_panel_title", None)
            ax.set_title(full if full is not None else ax.get_title() or top.get(c, ""))
        return None
    side = {r: ax.get_ylabel() for ax, r, c in cells if c == 0}
    lines = {r: label.split("\n") for r, label in side.items()}
    common = {ls[-1] for ls in lines.values()}
    axis = common.pop() if len(common) == 1 and len(lines) > 1 else ""
    for ax, r, c in cells:
        full = getattr(ax, "_ab_panel_title", None)
        if full is None:
            row = " ".join(lines.get(r, [""])[:-1] if axis else lines.get(r, [""])).strip()
            own = ax.get_title() or top.get(c, "")
            full = ", ".join(part for part in (row, own) if part)
        ax.set_title(full)
    return axis


def _keys_need_one_column(cells) -> bool:
    """Whether a few maps (:func:`heatmaps_figure`) whose keys a chapter named would have those
    names turned 90 degrees in two columns (they touch under a map an inch wide) but not in one:
    then the copy stacks the maps in one column, names level (chapter 3's four 2 x 10 maps in two
    columns on a phone: 80 px each, keys 1 to 10 turned on end, issue 36)."""
    from matplotlib.ticker import FixedLocator

    if not all(len(ax.get_images()) == 1 for ax, _, _ in cells):
        return False
    axis = cells[0][0].xaxis
    locator = axis.get_major_locator()
    if not isinstance(locator, FixedLocator):
        return False
    names = [str(axis.get_major_formatter()(x, i)) for i, x in enumerate(locator.locs)]
    if not names or not all(names):
        return False
    one, two = PHONE_FIGURE_WIDTH - 1.3, (PHONE_FIGURE_WIDTH - 1.0) / 2 - 0.3  # as _phone_layout sizes maps
    return _labels_collide(names, two) and not _labels_collide(names, one)


def _phone_layout(fig, max_cols: int):
    """:func:`phone_figure`'s copy with at most ``max_cols`` columns of plots, laid out as drawn,
    and whether its layout collapsed (then it was not tidied further); (None, False) if ``fig``
    cannot be copied."""
    import pickle

    from matplotlib.gridspec import GridSpec

    try:
        copy = pickle.loads(pickle.dumps(fig))
    except Exception:  # noqa: BLE001 (an artist that cannot be copied: the desktop figure only)
        return None, False
    cells = _grid_axes(copy)
    rows0 = max(r for _, r, _ in cells) + 1
    cols0 = max(c for _, _, c in cells) + 1
    width, height = copy.get_size_inches()
    n = len(cells)
    spans = any(ax.get_subplotspec().num1 != ax.get_subplotspec().num2 for ax, _, _ in cells)
    cols = 1 if n <= 2 or cols0 == 1 or spans else min(2, max_cols)
    if cols == 2 and n <= 4 and _keys_need_one_column(cells):
        cols = 1
    if cols0 <= cols:  # already narrow enough: resize only
        cols, rows = cols0, rows0
    else:
        rows = -(-n // cols)
    panel_w, panel_h = width / cols0, height / rows0
    new_panel_w = PHONE_FIGURE_WIDTH / cols
    row_h = min(max(panel_h * new_panel_w / panel_w, 1.4), 4.0)
    images = [ax.get_images() for ax, _, _ in cells]
    if cols < cols0 and all(len(im) == 1 for im in images):  # maps: each keeps its data's shape, not a tall strip
        shape = images[0][0].get_array().shape
        map_w = (PHONE_FIGURE_WIDTH - 1.0) / cols - 0.3  # less the colour bar and tick labels
        row_h = min(max(map_w * shape[0] / shape[1] + 0.6, 1.4), 4.0)  # + title and ticks
    grid = GridSpec(rows, cols, figure=copy)
    first = cells[0][0]
    restacked = cols < cols0 and rows0 > 1
    ylabel = _panel_titles(cells) if restacked else first.get_ylabel()
    for k, (ax, _, _) in enumerate(cells):
        r, c = divmod(k, cols)
        ax.set_subplotspec(grid[r, c])
        if restacked and ylabel is not None:  # a row's label: with the row's first plot only
            ax.set_ylabel(ylabel if c == 0 else "")
        if c == 0 and ax is not first and first.get_shared_y_axes().joined(ax, first):
            ax.tick_params(labelleft=True)
            if not ax.get_ylabel():
                ax.set_ylabel(ylabel or "")
    xlabel = next((ax.get_xlabel() for ax, _, _ in reversed(cells) if ax.get_xlabel()), "")
    for k, (ax, _, _) in enumerate(cells):  # shared x: tick labels and label under the last row only
        if n > 1 and all(first.get_shared_x_axes().joined(other, first) for other, _, _ in cells):
            last = k // cols == rows - 1 or k + cols >= n
            ax.tick_params(labelbottom=last)
            ax.set_xlabel(xlabel if last else "")
    # A title longer than its plot's width on the phone is wrapped onto more lines (bbox "tight" would
    # otherwise widen the PNG past the column whatever the figure's width).
    for ax, _, _ in cells:
        _wrap_text(ax.title, PHONE_FIGURE_WIDTH / cols)
    if getattr(copy, "_suptitle", None) is not None:
        _wrap_text(copy._suptitle, PHONE_FIGURE_WIDTH)
    suptitle = 0.4 if getattr(copy, "_suptitle", None) is not None else 0.0
    copy.set_size_inches(PHONE_FIGURE_WIDTH, min(rows * row_h + suptitle + 0.3, 14.0))
    if copy.get_layout_engine() is None:
        copy.set_layout_engine("constrained")
    _shared_labels(copy, cells)
    _fewer_ticks(cells, cols)
    copy.set_dpi(PHONE_DPI)
    fit_page(copy, PHONE_DPI, PHONE_COLUMN_PX)
    # Laid out at the width its PNG will have (phone_png narrows a copy whose tight box, padded, is
    # wider than PHONE_MAX_PX, and lays it out again: every copy at PHONE_FIGURE_WIDTH was, at 0.2 to
    # 0.3 CPU s each); the text keeps the size fit_page gave it for PHONE_FIGURE_WIDTH.
    copy.set_size_inches(_phone_width_in(), copy.get_size_inches()[1])
    _wrap_figure_texts(copy)
    if _tidy_text(copy, cells):
        return copy, True
    renderer = copy.canvas.get_renderer()
    if any(_legend_covers_data(ax, renderer) or _legend_beside_plot(ax, renderer) for ax, _, _ in cells) \
            and _legend_out_of_plots(copy):
        # a legend over the points (ch05's accuracies), or beside its plot: under the figure instead
        return copy, _tidy_text(copy, cells)
    return copy, False


def phone_png(fig) -> bytes | None:
    """The PNG of :func:`phone_figure` (with its own :func:`page_png_metadata`, the same alt
    text), or None when ``fig`` needs no phone copy: it cannot be re-laid out, or its own PNG
    (drawn at the figure's dpi) is already legible at :data:`PHONE_COLUMN_PX`."""
    import io

    px = smallest_text_px(fig)
    natural = fig.get_size_inches()[0] * fig.dpi
    if px is None or px * min(1.0, PHONE_COLUMN_PX / natural) >= MIN_TEXT_PX:
        return None
    drawing = getattr(fig, "_ab_phone_drawing", None)
    if drawing is not None:  # a diagram that draws itself again for a phone's column (book/diagrams.py)
        return _drawn_phone_png(drawing(), fig)
    copy = phone_figure(fig)
    if copy is None:
        return _diagram_png(fig)
    meta = page_png_metadata(copy, PHONE_DPI)
    meta[ALT_TEXT_KEY] = figure_alt_text(fig)
    from PIL import Image

    # bbox_inches="tight" takes in what lies outside the axes (a legend, long labels), so the PNG can
    # come out wider than the figure: narrow the figure (the text keeps its size) until the PNG fits a
    # 390 px phone's column, shown at its natural width with nothing to scroll. The width is measured
    # on the copy as phone_figure last drew it (its tight box), and the PNG drawn once, at the end.
    pad = matplotlib.rcParams["savefig.pad_inches"]
    try:
        moved = False
        for _ in range(6):
            box = copy.get_tightbbox(copy.canvas.get_renderer()).padded(pad)
            width = math.ceil(box.width * PHONE_DPI - 1e-6)
            w, h = copy.get_size_inches()
            narrower = w - (width - PHONE_MAX_PX + 4) / PHONE_DPI
            if width <= PHONE_MAX_PX:
                break
            if narrower < 0.6 * PHONE_FIGURE_WIDTH:
                if moved or not _legend_out_of_plots(copy):
                    break
                moved = True  # one legend beside its plot (long labels) goes under the figure instead
            else:
                copy.set_size_inches(narrower, h)
            if _tidy_text(copy, _grid_axes(copy) or []):  # titles and ticks measured again
                return None  # the narrower plots lost their room: no copy
        if width > PHONE_MAX_PX:
            # still too wide (long tick labels side by side): no copy; the figure scrolls in its own box
            return None
        buf = io.BytesIO()
        copy.set_layout_engine("none")  # laid out when last drawn: the PNG is that layout, drawn once
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            copy.savefig(buf, format="png", dpi=PHONE_DPI, bbox_inches=box, metadata=meta)
    finally:
        plt.close(copy)
    return buf.getvalue() if Image.open(io.BytesIO(buf.getvalue())).width <= PHONE_MAX_PX else None


def _is_diagram(fig) -> bool:
    """A diagram: one visible plot area spanning the whole figure with its axes turned off,
    everything placed in it by hand (book/diagrams.py's drawing kit)."""
    axes = [ax for ax in fig.get_axes() if ax.get_visible()]
    return (len(axes) == 1 and not axes[0].axison
            and np.allclose(axes[0].get_position().bounds, (0, 0, 1, 1), atol=0.02))


def _overlapping_texts(fig) -> list[tuple[str, str]]:
    """Pairs of the figure's texts whose boxes, as drawn, overlap (more than 1 px both ways)."""
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in _drawn_texts(fig)]
    pairs = []
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        if min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 1 and \
                min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 1:
            pairs.append((a, b))
    return pairs


def _texts_outside_boxes(fig, margin: float = 0.0) -> list[str]:
    """The figure's texts that stick out of the box drawn around them, as drawn: a text whose
    centre lies in a patch (a diagram's rounded box) must keep ``margin`` px inside its sides (1 px of
    slack above and below: a line's descent)
    (chapter 9's "spans: 64 → |V|" ran over its box on a phone). Drawn first (no pixels)."""
    from matplotlib.patches import FancyBboxPatch

    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()
    boxes = [p.get_window_extent(renderer) for ax in fig.get_axes() for p in ax.patches
             if isinstance(p, FancyBboxPatch) and p.get_visible()]
    out = []
    for text in _drawn_texts(fig):
        t = text.get_window_extent(renderer)
        cx, cy = (t.x0 + t.x1) / 2, (t.y0 + t.y1) / 2
        around = [b for b in boxes if b.x0 <= cx <= b.x1 and b.y0 <= cy <= b.y1]
        if not around:
            continue
        b = min(around, key=lambda b: b.width * b.height)  # the innermost box
        if t.x0 < b.x0 + margin or t.x1 > b.x1 - margin or t.y0 < b.y0 - 1 or t.y1 > b.y1 + 1:
            out.append(text.get_text())
    return out


def _diagram_png(fig) -> bytes | None:
    """A diagram's phone copy: the same drawing with its small text enlarged so that, shown
    :data:`PHONE_COLUMN_PX` wide, every text is :data:`MIN_TEXT_PX` high (a diagram's labels are
    sized for the desktop column; their boxes have room to spare). None for a figure that is not
    a diagram, or whose enlarged labels would run into each other (measured as drawn): such a
    diagram keeps its desktop drawing, which scrolls in its box on a phone."""
    import io
    import pickle

    from PIL import Image

    if not _is_diagram(fig):
        return None
    try:
        copy = pickle.loads(pickle.dumps(fig))
    except Exception:  # noqa: BLE001 (an artist that cannot be copied: the desktop figure only)
        return None
    try:
        copy.set_dpi(PHONE_DPI)
        fit_page(copy, PHONE_DPI, PHONE_COLUMN_PX)
        if _overlapping_texts(copy):
            return None
        meta = page_png_metadata(copy, PHONE_DPI)
        meta[ALT_TEXT_KEY] = figure_alt_text(fig)
        buf = io.BytesIO()
        copy.savefig(buf, format="png", dpi=PHONE_DPI, bbox_inches="tight", metadata=meta)
    finally:
        plt.close(copy)
    width = Image.open(io.BytesIO(buf.getvalue())).width
    px = smallest_text_px(copy, PHONE_DPI)
    # legible at the phone's column: the page shows it no narrower than width * 9 / px (book_site.py)
    return buf.getvalue() if px and width * MIN_TEXT_PX / px <= PHONE_MAX_PX else None


# mathtext draws a sub- or superscript at 0.7 of its text's size (matplotlib's SHRINK_FACTOR)
_SCRIPT_SHRINK = 0.7
# a mathtext script, or a Unicode one ("d²": drawn smaller by the font, about as small)
_SCRIPT = re.compile(r"\$[^$]*[_^][^$]*\$|[⁰¹²³⁴-⁹⁺⁻⁽⁾ⁱⁿ₀-₉₊₋₍₎ᵀ]")
_SCRIPT_IN_SCRIPT = re.compile(r"\$[^$]*[_^]\{[^{}$]*[_^][^$]*\$")  # R^{p_o}: its o at 0.7 x 0.7


def smallest_glyph_px(fig, dpi: float | None = None) -> float | None:
    """:func:`smallest_text_px` with sub- and superscripts counted at the size mathtext draws them
    (``$\\mathbf{x}_i$``: its ``i`` at 0.7 of the label's size); None for a figure without text."""
    dpi = fig.dpi if dpi is None else dpi
    sizes = [t.get_fontsize() * (_SCRIPT_SHRINK ** 2 if _SCRIPT_IN_SCRIPT.search(t.get_text())
                                 else _SCRIPT_SHRINK if _SCRIPT.search(t.get_text()) else 1.0)
             for t in _drawn_texts(fig)]
    return min(sizes) * dpi / 72.0 if sizes else None


def _drawn_phone_png(copy, fig) -> bytes | None:
    """The PNG of ``copy``, a diagram drawn again for a phone's column (one column, its labels at
    their desktop size in points), at :data:`PHONE_DPI`: shown at its natural width in a 390 px
    phone's column, every text, sub- and superscripts included, is :data:`MIN_TEXT_PX` high or more
    (recorded as its smallest text, so the page never shows it narrower). ``fig``'s alt text. None
    when it is wider than :data:`PHONE_MAX_PX` or a text is smaller."""
    import io

    from PIL import Image

    try:
        copy.set_dpi(PHONE_DPI)
        px = smallest_glyph_px(copy, PHONE_DPI)
        meta = {TEXT_SIZE_KEY: "none" if px is None else f"{px:.2f}", ALT_TEXT_KEY: figure_alt_text(fig)}
        buf = io.BytesIO()
        copy.savefig(buf, format="png", dpi=PHONE_DPI, bbox_inches="tight", metadata=meta)
    finally:
        plt.close(copy)
    width = Image.open(io.BytesIO(buf.getvalue())).width
    return buf.getvalue() if width <= PHONE_MAX_PX and (px is None or px >= MIN_TEXT_PX) else None


def _phone_metadata(fig) -> dict[str, str]:
    """{PHONE_PNG_KEY: base64 PNG} for :func:`phone_png`, {} without a (small enough) copy."""
    import base64

    try:
        data = phone_png(fig)
    except Exception:  # noqa: BLE001 (a figure the re-layout does not understand: desktop only)
        return {}
    if data is None:
        return {}
    text = base64.b64encode(data).decode("ascii")
    return {PHONE_PNG_KEY: text} if len(text) <= _PHONE_PNG_MAX else {}


# ----------------------------------------------------------------------------- values as tables
# Figures whose numbers matter carry them as a table too (issue 38): the attention maps drawn by
# heatmaps_figure and every labelled line or bar series (learning curves, sweeps). Shown inline
# in IPython, the figure is followed by a folded <details> with those numbers, rounded.
VALUES_MAX = 12  # at most this many columns per table, and rows of a map; larger maps are summarised
# A line or bar series keeps every point up to this many rows (a row is cheap, a column is what
# a phone cannot fit): chapter 6's 13-point collapse curve showed "12 of 13 points" (issue 36).
SERIES_ROWS_MAX = 30
_TOP_KEYS = 3
_SUMMARY_MAX = 80  # characters of a fold's summary naming its figure (values_html)


def _num(value) -> str:
    value = float(value)
    if not np.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e7:  # counts (1437 training images), epochs: whole
        return str(int(value))
    return f"{value:.3g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def _spread(count: int, most: int = VALUES_MAX) -> list[int]:
    """Indices of at most ``most`` of ``count`` rows, evenly spread, first and last kept."""
    if count <= most:
        return list(range(count))
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)})


def _table(caption: str, corner: str, rows: Sequence[str], cols: Sequence[str], cells,
           across: str = "") -> dict:
    """``across``: what the columns count (a map's "keys"), put before a bare column name in the
    label a cell shows on a phone ("keys 3: 0.25", values_html)."""
    return {"caption": caption, "corner": corner, "rows": [str(r) for r in rows],
            "cols": [str(c) for c in cols], "cells": [[str(c) for c in row] for row in cells],
            "across": across}


def _singular(label: str) -> str:
    """'keys' -> 'key', 'queries' -> 'query' (a caption's "as key (value)"); other labels unchanged."""
    if label.endswith("ies") and len(label) > 4:
        return label[:-3] + "y"
    if label.endswith("s") and not label.endswith("ss") and len(label) > 3:
        return label[:-1]
    return label


def _map_tables(data: np.ndarray, titles: list[str], xlabel: str, ylabel: str,
                xticklabels, yticklabels) -> list[dict]:
    """One table per map: all values when it is at most VALUES_MAX square; all values turned on
    their side (keys down, queries across) when it has at most VALUES_MAX rows and at most
    SERIES_ROWS_MAX columns, since rows are cheap on a phone and columns are not; else each
    query's largest keys and their values (at most VALUES_MAX queries, evenly spread)."""
    num_rows, num_cols, n_q, n_k = data.shape
    # the labels the figure's ticks show: the given tick labels, else positions counted from 0 as
    # the default axes number them (a table counting from 1 had a "row 60" in a 60-row map)
    keys = [str(k) for k in xticklabels] if xticklabels is not None else [str(k) for k in range(n_k)]
    queries = [str(q) for q in yticklabels] if yticklabels is not None else [str(q) for q in range(n_q)]
    tables = []
    for flat in range(min(num_rows * num_cols, VALUES_MAX)):
        m = data[flat // num_cols, flat % num_cols]
        name = titles[flat] if flat < len(titles) and titles[flat] else ""
        if not name and num_rows * num_cols > 1:
            name = f"map {flat + 1}"  # a single untitled map needs no name (chapter 6 read "map 1")

        def caption(text: str) -> str:
            return f"{name}: {text}" if name else text[:1].upper() + text[1:]

        picked = _spread(n_q)
        shown = "" if len(picked) == n_q else f", {len(picked)} of {n_q} {ylabel} evenly spread"
        axes = f"{ylabel} by {xlabel}"  # the table's rows by its columns, as the fold's summary says
        if n_k <= VALUES_MAX:
            tables.append(_table(caption(f"rows {ylabel}, columns {xlabel}{shown}"), ylabel,
                                 [queries[q] for q in picked], keys, [[_num(v) for v in m[q]] for q in picked],
                                 across=xlabel))
        elif n_q <= VALUES_MAX and n_k <= SERIES_ROWS_MAX:
            # whole, turned: chapter 6's 4 heads x 15 offsets listed only each head's top 3 (issue 36)
            tables.append(_table(caption(f"rows {xlabel}, columns {ylabel}"), xlabel, keys, queries,
                                 [[_num(m[q, k]) for q in range(n_q)] for k in range(n_k)], across=ylabel))
            # summary in the table's order: said "head by offset" over "Rows offset" (issue 36)
            axes = f"{xlabel} by {ylabel}"
        else:
            # one cell per rank, "key (value)": a phone restacks a row into three short lines, not six
            top = min(_TOP_KEYS, n_k)
            cols = ["largest", "2nd largest", "3rd largest"][:top]
            cells = []
            for q in picked:
                order = np.argsort(-m[q], kind="stable")[:top]
                cells.append([f"{keys[k]} ({_num(m[q, k])})" for k in order])
            tables.append(_table(caption(f"each row's three largest values, as {_singular(xlabel)} (value), "
                                         f"of {n_k} {xlabel}{shown}"), ylabel, [queries[q] for q in picked],
                                 cols, cells))
        # what the fold's summary names it by (_values_summary)
        tables[-1].update(name=titles[flat] if flat < len(titles) else "", axes=axes,
                          maps=num_rows * num_cols)
    return tables


def _series_tables(fig) -> list[dict]:
    """Tables of the figure's labelled lines and bar series, one per plot (x down, series across)."""
    from matplotlib.container import BarContainer

    tables = []
    for ax in fig.get_axes():
        if not ax.get_visible() or hasattr(ax, "_colorbar"):
            continue
        xlabel, ylabel = _words(ax.get_xlabel()) or "x", _words(ax.get_ylabel())
        title = _words(ax.get_title()) or _words(fig._suptitle.get_text() if fig._suptitle else "")
        caption = ", ".join(t for t in (title, ylabel) if t) or "values"
        series, levels = {}, []
        for line in ax.get_lines():
            label = line.get_label()
            if not line.get_visible() or not label or label.startswith("_"):
                continue
            xs, ys = (np.asarray(v, dtype=float).ravel() for v in line.get_data())
            if line.get_transform() != ax.transData:  # axhline: a level across the plot
                if len(set(ys.tolist())) == 1:
                    levels.append(f"{_words(label)} at {_num(ys[0])}")
                continue
            series[_words(label)] = dict(zip(xs.tolist(), ys.tolist()))
        ticks = {round(float(t), 6): lab.get_text() for t, lab in zip(ax.get_xticks(), ax.get_xticklabels())}
        for container in ax.containers:
            label = container.get_label()
            if not isinstance(container, BarContainer) or not label or label.startswith("_"):
                continue
            points = {}
            for bar in container:
                x = bar.get_x() + bar.get_width() / 2
                points[ticks.get(round(x, 6)) or x] = bar.get_height()
            series[_words(label)] = points
        if not series:
            continue
        xs = list(dict.fromkeys(x for points in series.values() for x in points))
        if all(isinstance(x, float) for x in xs):
            xs.sort()
        picked = _spread(len(xs), SERIES_ROWS_MAX)
        names = list(series)[:VALUES_MAX]
        shown = "" if len(picked) == len(xs) else f"; {len(picked)} of {len(xs)} points, evenly spread"
        # the fold's summary names the plot by its title, else its y label, else its series
        name = title or ylabel or _and_more(names, len(names))
        caption += shown + ("; " + ", ".join(levels) if levels else "")
        rows = [_num(xs[i]) if isinstance(xs[i], float) else xs[i] for i in picked]
        cells = [[_num(series[n][xs[i]]) if xs[i] in series[n] else "" for n in names] for i in picked]
        tables.append(_table(caption, xlabel, rows, names, cells))
        tables[-1]["name"] = name
    return tables


def _fits_a_phone(table: dict) -> bool:
    """Whether ``table`` laid out as a table fits a phone's column (PHONE_COLUMN_PX), reckoned
    per column from its longest value or header word (a header wraps between its words) at
    9 px a character, plus 16 px of padding. Measured in Chromium at 390 px, where tables had
    358 px: chapter 10's tables of 379 to 484 px are reckoned 395 to 501 and restacked, the
    tables of chapters 2 and 10 that fitted are reckoned at most 334 and kept."""
    columns = [[table["corner"], *table["rows"]]] + [
        [c, *(row[i] for row in table["cells"])] for i, c in enumerate(table["cols"])]
    return sum(9 * max(max(map(len, col[0].split()), default=0), *map(len, col[1:])) + 16
               for col in columns) <= PHONE_COLUMN_PX


def _and_more(names: list[str], count: int) -> str:
    """``count`` things by their first names: "a", "a and b", "a, b and 3 more" ("a, x; b, y and
    3 more" when a name has a comma)."""
    comma = "; " if any("," in n for n in names[:2]) else ", "
    return (names[0] if count == 1 else f"{names[0]} and {names[1]}" if count == 2
            else f"{names[0]}{comma}{names[1]} and {count - 2} more")


def _values_summary(fig, tables: list[dict]) -> str:
    """The fold's summary, naming its figure: a page's folds all read "The figure's values as a
    table", so a screen reader's list of controls gave N identical entries (issue 38). "Values of"
    the figure's title, else its tables' names (a map's title, a plot's title, y label or series,
    a given table's caption up to its first ":" or ";"), with a map's axes; at most _SUMMARY_MAX
    characters, the old text when nothing names it."""
    title = _words(fig._suptitle.get_text()) if getattr(fig, "_suptitle", None) else ""
    if not title:
        names = list(dict.fromkeys(_words(t["name"] if "name" in t else re.split(r"[:;]", t["caption"])[0])
                                   for t in tables))
        named = [n for n in names if n and n != "values"]  # not "Values of values"
        count = max([len(named)] + [t.get("maps", 0) for t in tables])  # a map table each, at most 12
        title = "" if not named or len(named) < min(count, 2) else _and_more(named, count)
        axes = list(dict.fromkeys(t["axes"] for t in tables if t.get("axes")))
        if len(axes) == 1:
            maps = "the map" if count == 1 else f"{count} maps"
            title = f"{title} ({axes[0]})" if title else f"{maps} ({axes[0]})"
    if not title:
        return "The figure's values as a table"
    if len(title) > _SUMMARY_MAX:
        title = title[:_SUMMARY_MAX - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return f"Values of {title}"


def values_html(fig) -> str | None:
    """The numbers ``fig`` shows as a folded HTML table (`<details>`), None if it shows none:
    heatmaps_figure's maps, else its labelled lines and bar series. The fold's summary names
    the figure ("Values of loss", :func:`_values_summary`), so a page's folds differ.

    A table too wide for a phone's column gets the class ``ab-values-stack``: below 600 px
    book.css restacks each of its rows as a block of "column: value" lines (every cell carries
    its column's name in ``data-label``), with no sideways scroll. The explicit ARIA roles keep
    it a table for screen readers once CSS changes its display (issues 36, 38)."""
    tables = getattr(fig, "_ab_values", None) or _series_tables(fig)
    if not tables:
        return None
    import html

    def esc(text: str) -> str:
        return html.escape(text, quote=True)

    parts = [f'<details class="ab-values"><summary>{esc(_values_summary(fig, tables))}</summary>']
    for t in tables:
        corner, across = esc(t["corner"]), t.get("across")
        labels = [esc(f"{across} {c}" if across else c) for c in t["cols"]]
        head = "".join(f'<th scope="col" role="columnheader">{esc(c)}</th>' for c in t["cols"])
        body = "".join(
            f'<tr role="row"><th scope="row" role="rowheader" data-label="{corner}">{esc(r)}</th>'
            + "".join(f'<td role="cell" data-label="{c}">{esc(v)}</td>' for c, v in zip(labels, row))
            + "</tr>" for r, row in zip(t["rows"], t["cells"]))
        kind = "ab-values-table" if _fits_a_phone(t) else "ab-values-table ab-values-stack"
        parts.append(f'<table class="{kind}" role="table"><caption>{esc(t["caption"])}</caption>'
                     f'<thead role="rowgroup"><tr role="row"><th scope="col" role="columnheader">{corner}</th>'
                     f'{head}</tr></thead><tbody role="rowgroup">{body}</tbody></table>')
    parts.append("</details>")
    return "".join(parts)


def _page_figures_in_ipython() -> None:
    """In IPython (Jupyter, Colab, a website build's kernel), show figures through
    :func:`fit_page` and record :func:`page_png_metadata` in their PNG.

    The inline backend registers its PNG printer only when the first figure is drawn (and
    again if the backend is switched), so the wrap is also retried after every cell runs,
    before the backend shows that cell's figures (``post_execute`` callbacks run in the
    order they were registered, and this one comes first)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    # Load the backend now (pyplot loads it lazily, at the first figure), so that the inline
    # backend registers its PNG printer before a cell shows its first figure with plt.show().
    try:
        import matplotlib.pyplot as plt

        plt.switch_backend(matplotlib.get_backend())
    except Exception:  # a backend that cannot load here: figures are drawn as before
        pass
    _wrap_png_printer(shell)
    if not getattr(shell, "_ab_page_figures", False):
        shell.events.register("post_execute", lambda: _wrap_png_printer(shell))
        _values_after_figures(shell)
        shell._ab_page_figures = True


def _values_after_figures(shell) -> None:
    """Publish each shown figure's :func:`values_html` right after the figure's own output.

    The PNG printer queues the table while IPython formats the figure; the table goes out as
    soon as that output is published (a ``display_data`` through the display publisher, a
    cell's result through the display hook), and at the latest when the cell ends."""
    shell._ab_values_pending, shell._ab_values_shown = [], set()
    publisher = shell.display_pub
    shell.events.register("pre_run_cell", lambda *_: shell._ab_values_shown.clear())

    def flush():
        pending, shell._ab_values_pending = shell._ab_values_pending, []
        for table in pending:
            publish({"text/html": table, "text/plain": "(the figure's values as a table)"}, {})

    def publish(data, metadata=None, *args, **kwargs):
        result = inner_publish(data, metadata, *args, **kwargs)
        if shell._ab_values_pending and "image/png" in data:
            flush()
        return result

    inner_publish = publisher.publish
    publisher.publish = publish
    hook = shell.displayhook
    if hasattr(hook, "finish_displayhook"):
        inner_finish = hook.finish_displayhook

        def finish_displayhook(*args, **kwargs):
            result = inner_finish(*args, **kwargs)
            flush()
            return result

        hook.finish_displayhook = finish_displayhook
    shell.events.register("post_execute", flush)


def _wrap_png_printer(shell) -> None:
    from matplotlib.figure import Figure

    from .config import static_explorers

    formatter = shell.display_formatter.formatters.get("image/png")
    if formatter is None:
        return
    try:
        inner = formatter.lookup_by_type(Figure)
    except KeyError:  # no figure drawn yet, or the backend draws no PNG (an SVG setting, say)
        return
    if getattr(inner, "_ab_page_figure", False):
        return

    def png(fig):
        fit_page(fig)  # IPython draws inline figures at the figure's dpi
        # phone copies only for the website (ATTENTION_BOOK_EXPLORERS=static): 1-3 s a figure that a
        # reader in Jupyter or Colab never sees
        phone = _phone_metadata(fig) if static_explorers() else {}
        data = inner(fig, metadata={**page_png_metadata(fig), **phone})
        if data is not None and hasattr(shell, "_ab_values_pending"):
            try:
                table = values_html(fig)
            except Exception:  # noqa: BLE001 (a figure the table reader does not understand: the figure alone)
                table = None
            if table and id(fig) not in shell._ab_values_shown:  # once per cell
                shell._ab_values_shown.add(id(fig))
                shell._ab_values_pending.append(table)
        return data

    png._ab_page_figure = True
    formatter.for_type(Figure, png)


def use_book_style() -> None:
    """Apply the book's plotting style (seaborn's clean grid, readable fonts).

    In IPython it also routes inline figures through :func:`fit_page` (legible in the
    website's column) and records their smallest text in the PNG (:data:`TEXT_SIZE_KEY`).
    """
    global _STYLED
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="deep")
    matplotlib.rcParams.update(
        {
            "figure.dpi": 100,
            "savefig.dpi": 110,
            "savefig.bbox": "tight",
            "figure.autolayout": False,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "xtick.labelsize": 9,
            "ytick.labelsize": 9,
            "legend.fontsize": 9,
            "image.cmap": BOOK_CMAP,
        }
    )
    _page_figures_in_ipython()
    _STYLED = True


def ensure_style() -> None:
    """The book's figure style, set once (the package's figure functions call this first)."""
    if not _STYLED:
        use_book_style()


def to_numpy(x) -> np.ndarray:
    """A NumPy copy of a tensor on any device (or of anything array-like)."""
    if isinstance(x, torch.Tensor):
        x = x.detach()
        if x.device.type == "meta":
            raise ValueError("cannot plot a tensor on the 'meta' device: it has no values")
        if x.dtype in (torch.bfloat16, torch.float16):
            x = x.float()
        return x.cpu().numpy()
    return np.asarray(x)


def heatmaps_figure(
    matrices,
    xlabel: str,
    ylabel: str,
    titles: Sequence[str] | None = None,
    figsize: tuple[float, float] | None = None,
    cmap: str = BOOK_CMAP,
    xticklabels: Sequence[str] | None = None,
    yticklabels: Sequence[str] | None = None,
    row_titles: Sequence[str] | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
):
    """Draw a grid of heatmaps with one shared colour bar.

    ``matrices`` has four axes, as in d2l: (rows of plots, columns of plots,
    queries, keys). Each small matrix is drawn with queries down and keys across.
    ``titles`` label the columns of plots (or, with one entry per plot, every
    plot, row by row); ``row_titles`` the rows;
    ``xticklabels``/``yticklabels`` name the keys/queries (tokens, say).
    Returns the figure.
    """
    data = to_numpy(matrices)
    if data.ndim != 4:
        raise ValueError(
            "heatmaps_figure expects a 4-D input (rows of plots, columns of plots, "
            f"queries, keys), got shape {tuple(data.shape)}; for one matrix M use "
            "M.reshape(1, 1, *M.shape)"
        )
    if 0 in data.shape:
        raise ValueError(f"heatmaps_figure got an empty array of shape {tuple(data.shape)}")
    if not np.all(np.isfinite(data)):
        raise ValueError("heatmaps_figure got NaN or infinite values; check the attention weights")
    num_rows, num_cols, n_q, n_k = data.shape
    per_panel = titles is not None and num_rows > 1 and len(titles) == num_rows * num_cols
    if titles is not None and len(titles) != num_cols and not per_panel:
        raise ValueError(f"titles has {len(titles)} entries; give one per column of plots ({num_cols}) "
                         f"or one per plot ({num_rows * num_cols}, row by row)")
    if row_titles is not None and len(row_titles) != num_rows:
        raise ValueError(f"row_titles has {len(row_titles)} entries but there are {num_rows} rows of plots")
    if xticklabels is not None and len(xticklabels) != n_k:
        raise ValueError(f"xticklabels has {len(xticklabels)} entries but there are {n_k} keys")
    if yticklabels is not None and len(yticklabels) != n_q:
        raise ValueError(f"yticklabels has {len(yticklabels)} entries but there are {n_q} queries")
    ensure_style()
    if figsize is None:
        cell = 2.6 if max(n_q, n_k) < 30 else 3.2
        cell = min(cell, (PAGE_FIGURE_WIDTH - 1.0) / num_cols)  # many columns: smaller maps, same text
        aspect = n_q / n_k
        figsize = (1.0 + cell * num_cols, min(0.6 + cell * num_rows * min(max(aspect, 0.4), 2.0), 14.0))
    elif figsize[0] > PAGE_FIGURE_WIDTH:  # wider than the page's column: the same layout, scaled to fit
        figsize = (PAGE_FIGURE_WIDTH, figsize[1] * PAGE_FIGURE_WIDTH / figsize[0])
    if vmin is None:
        vmin = float(min(data.min(), 0.0))
    if vmax is None:
        vmax = float(data.max()) if data.max() > vmin else vmin + 1.0
    turn_keys = xticklabels is not None and _labels_collide(xticklabels, (figsize[0] - 1.0) / num_cols)
    fig, axes = plt.subplots(
        num_rows, num_cols, figsize=figsize, sharex=True, sharey=True, squeeze=False,
        layout="constrained",
    )
    image = None
    for i in range(num_rows):
        for j in range(num_cols):
            ax = axes[i, j]
            image = ax.imshow(data[i, j], cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
            ax.grid(False)
            if xticklabels is not None:
                ax.set_xticks(range(n_k))
                ax.set_xticklabels(xticklabels, rotation=90 if turn_keys else 0)
            if yticklabels is not None:
                ax.set_yticks(range(n_q))
                ax.set_yticklabels(yticklabels)
            if i == num_rows - 1:
                ax.set_xlabel(xlabel)
            if j == 0:
                ax.set_ylabel(ylabel if row_titles is None else f"{row_titles[i]}\n{ylabel}")
            if per_panel:
                ax.set_title(titles[i * num_cols + j])
            elif titles is not None and i == 0:
                ax.set_title(titles[j])
    fig.colorbar(image, ax=axes, shrink=0.7)
    maps = "one heatmap" if num_rows * num_cols == 1 else f"{num_rows * num_cols} heatmaps"
    fig._ab_alt_kind = (f"{maps} of {n_q} by {n_k} values, darker is larger "
                        f"(colour scale {vmin:.3g} to {vmax:.3g})")
    names = []
    for i in range(num_rows):
        for j in range(num_cols):
            name = titles[i * num_cols + j] if per_panel else (titles[j] if titles is not None else "")
            if row_titles is not None:
                name = f"{row_titles[i]}, {name}" if name else row_titles[i]
            names.append(_words(name))
            axes[i, j]._ab_panel_title = name  # its full title when a phone copy restacks the grid
    fig._ab_values = _map_tables(data, names, _words(xlabel) or "keys", _words(ylabel) or "queries",
                                 xticklabels, yticklabels)
    return fig


def _labels_collide(labels: Sequence[str], map_width_in: float) -> bool:
    """Whether ``labels`` written level, one under each of ``len(labels)`` equal columns of a map
    about ``map_width_in`` inches wide (the figure's share less its colour bar), would touch:
    each label's width at the tick font size against its column, with 2 pt between them.
    Then heatmaps_figure turns them 90 degrees; single digits and short words stay level."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    size = matplotlib.rcParams["xtick.labelsize"]
    size = size if isinstance(size, (int, float)) else FontProperties(size=size).get_size_in_points()
    font = FontProperties(size=size)
    measure = TextToPath()
    column = 0.85 * map_width_in * 72.0 / max(len(labels), 1)  # points: constrained layout's margins
    widest = max(measure.get_text_width_height_descent(str(label), font, ismath=False)[0] for label in labels)
    return widest + 2.0 > column


def plain_number(value, _pos) -> str:
    """A tick label as a plain number (a module-level function, so the figure can be pickled
    for its phone copy)."""
    return f"{value:g}"


def readable_log_axis(ax, axis: str = "y") -> None:
    """At least three labelled ticks on a log axis that spans less than a few decades.

    Matplotlib labels only powers of ten, so a log axis from 0.6 to 4 shows one
    label. Here the ticks step through 1, 2, 5 × 10ᵏ (or every 1…9 × 10ᵏ on a
    very short range) with plain numbers. Call it after the data are drawn.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', got {axis!r}")
    target = ax.yaxis if axis == "y" else ax.xaxis
    low, high = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    if low <= 0:
        return
    for subs in ((1.0,), (1.0, 2.0, 5.0), tuple(float(k) for k in range(1, 10))):
        ticks = [t for t in LogLocator(base=10, subs=subs).tick_values(low, high) if low <= t <= high]
        if len(ticks) >= 3:
            break
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_major_formatter(FuncFormatter(plain_number))
    target.set_minor_formatter(NullFormatter())


def curves_figure(
    curves: dict[str, Sequence[float]],
    xlabel: str = "epoch",
    ylabel: str = "",
    x: Sequence[float] | None = None,
    logy: bool = False,
    title: str | None = None,
    figsize: tuple[float, float] = (5.5, 3.5),
    ax=None,
):
    """Plot named curves (``{'train loss': [...], 'val loss': [...]}``) on one axis.

    Curves may have different lengths; each is drawn against 1..len unless ``x``
    is given. Returns the figure.
    """
    if not curves:
        raise ValueError("curves_figure needs at least one named curve")
    ensure_style()
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    else:
        fig = ax.figure
    for name, values in curves.items():
        ys = to_numpy(values).astype(float).ravel()
        xs = np.arange(1, len(ys) + 1) if x is None else to_numpy(x)[: len(ys)]
        ax.plot(xs, ys, label=name, marker="o" if len(ys) <= 12 else None, markersize=3)
    if x is None:  # epochs (or steps) counted 1, 2, ...: no fractional ticks
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
        readable_log_axis(ax, "y")
    if title:
        ax.set_title(title)
    ax.legend()
    return fig


def chance_line(ax, level: float, label: str = "chance"):
    """A dotted horizontal line at the score of guessing, named in the legend. Returns the line.

    Call ``ax.legend()`` afterwards (``curves_figure`` does) so the entry shows.
    """
    if not np.isfinite(level):
        raise ValueError(f"chance_line needs a finite level, got {level!r}")
    return ax.axhline(level, color="0.55", linestyle=":", linewidth=1.2, label=label)
