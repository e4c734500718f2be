"""Architecture diagrams: the models of the chapters, drawn from their sizes.

One function per chapter architecture. Each takes the sizes of the model the
chapter builds (defaults: the sizes it trains, or d2l's where the chapter has
two), writes them into the labels, and returns the
:class:`matplotlib.figure.Figure`:

* :func:`attention_pooling_diagram` (ch 1): an exact lookup next to attention pooling;
* :func:`bahdanau_diagram` (ch 4): the RNN encoder–decoder with additive attention;
* :func:`multihead_attention_diagram` (ch 5): h heads, concatenated, mixed by W_o;
* :func:`layer_comparison_diagram` (ch 6): what a CNN, an RNN and self-attention connect, and their costs;
* :func:`transformer_diagram` (ch 7): the encoder–decoder Transformer;
* :func:`vit_diagram` (ch 8): the vision Transformer (also from a :class:`~attention_book.ViT`);
* :func:`pretraining_modes_diagram` (ch 9): BERT, T5 and GPT with the masks their models build
  (from an :class:`~attention_book.models.language_models.LMConfig`).

All of them use one small drawing kit (:class:`_Sketch`: boxes, arrows, "× N"
frames, mask matrices) whose coordinates are inches, and the book's style and
palette (:func:`attention_book.use_book_style`): attention is red, feed-forward
layers blue, normalisation yellow, embeddings green, recurrent cells purple,
outputs orange and data grey.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

from ..core.checks import check_heads, check_int, check_positive_int
from ..experiments.layer_comparison import LAYER_COSTS
from ..models.language_models import DecoderOnlyLM, EncoderDecoderLM, EncoderOnlyLM, LMConfig
from ..core.plot import ensure_style, set_alt_text
from ..core.checks import check_divisible, check_size_pair
from ..models.vit import ViT

__all__ = [
    "attention_pooling_diagram",
    "bahdanau_diagram",
    "multihead_attention_diagram",
    "layer_comparison_diagram",
    "transformer_diagram",
    "vit_diagram",
    "pretraining_modes_diagram",
]

# --------------------------------------------------------------------------------------
# The drawing kit
# --------------------------------------------------------------------------------------

FONT = 11.5      # labels inside boxes (points)
SMALL = 10.5     # shapes and notes
TITLE = 12.5     # panel titles
INK = "0.2"      # text and arrows
MUTED = "0.4"    # secondary notes

# One colour per kind of part, taken from the book's palette (matplotlib's C0..C9 under use_book_style).
_ROLES = {"data": "C7", "attention": "C3", "ffn": "C0", "norm": "C8", "embed": "C2", "rnn": "C4",
          "output": "C1", "match": "C2"}


def _tint(colour: str, amount: float = 0.78) -> tuple[float, float, float]:
    """``colour`` mixed with white (``amount`` of white)."""
    r, g, b = to_rgb(colour)
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


@dataclass(frozen=True)
class _Box:
    """A drawn box: centre (cx, cy), width w, height h, in inches."""

    cx: float
    cy: float
    w: float
    h: float

    @property
    def left(self) -> float:
        return self.cx - self.w / 2

    @property
    def right(self) -> float:
        return self.cx + self.w / 2

    @property
    def bottom(self) -> float:
        return self.cy - self.h / 2

    @property
    def top(self) -> float:
        return self.cy + self.h / 2

    def at(self, side: str, shift: float = 0.0) -> tuple[float, float]:
        """The middle of a side ('top', 'bottom', 'left', 'right'), moved ``shift`` along it."""
        return {"top": (self.cx + shift, self.top), "bottom": (self.cx + shift, self.bottom),
                "left": (self.left, self.cy + shift), "right": (self.right, self.cy + shift)}[side]


class _Sketch:
    """A blank figure of ``width`` x ``height`` inches whose data coordinates are inches, (0, 0) bottom left."""

    def __init__(self, width: float, height: float, phone: bool = False):
        ensure_style()
        # a phone's drawing (phone_drawing) is no pyplot figure: a notebook never shows it by itself
        self.fig = Figure(figsize=(width, height)) if phone else plt.figure(figsize=(width, height))
        if phone:
            FigureCanvasAgg(self.fig)  # measured as drawn (get_renderer) like a pyplot figure
        self.ax = self.fig.add_axes((0, 0, 1, 1))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_axis_off()

    def box(self, cx: float, cy: float, w: float, h: float, text: str = "", role: str = "data",
            size: float = FONT, edge: str | None = None) -> _Box:
        """A rounded box of the colour of ``role`` (a key of ``_ROLES``), centred at (cx, cy), with ``text``
        in it; ``edge`` draws its outline thicker in that colour (to point at it)."""
        colour = _ROLES[role]
        self.ax.add_patch(FancyBboxPatch(
            (cx - w / 2, cy - h / 2), w, h, boxstyle="round,pad=0,rounding_size=0.06", facecolor=_tint(colour),
            edgecolor=edge or colour, linewidth=1.6 if edge else 1.2, zorder=2))
        if text:
            self.text(cx, cy, text, size=size)
        return _Box(cx, cy, w, h)

    def text(self, x: float, y: float, s: str, size: float = SMALL, ha: str = "center", va: str = "center",
             color: str = INK, bold: bool = False, rotation: float = 0.0):
        return self.ax.text(x, y, s, fontsize=size, ha=ha, va=va, color=color, zorder=4, rotation=rotation,
                            fontweight="bold" if bold else "normal", linespacing=1.25)

    def arrow(self, start, end, color: str = INK, lw: float = 1.2, dashed: bool = False) -> None:
        """A straight arrow from ``start`` to ``end`` (its head touches ``end``)."""
        self.ax.add_patch(FancyArrowPatch(
            start, end, arrowstyle="-|>,head_length=5,head_width=2.6", color=color, linewidth=lw,
            linestyle="--" if dashed else "-", shrinkA=0, shrinkB=0, zorder=3, mutation_scale=1))

    def path(self, points, color: str = INK, lw: float = 1.2, dashed: bool = False) -> None:
        """A polyline through ``points``, with an arrow head on its last segment."""
        xs, ys = zip(*points)
        self.ax.plot(xs[:-1], ys[:-1], color=color, lw=lw, ls="--" if dashed else "-", zorder=3,
                     solid_capstyle="butt")
        self.arrow(points[-2], points[-1], color=color, lw=lw, dashed=dashed)

    def plus(self, cx: float, cy: float, r: float = 0.11) -> _Box:
        """A residual sum: a circled plus."""
        self.ax.add_patch(Circle((cx, cy), r, facecolor="white", edgecolor=INK, linewidth=1.1, zorder=3))
        self.ax.plot([cx - 0.6 * r, cx + 0.6 * r], [cy, cy], color=INK, lw=1.1, zorder=4)
        self.ax.plot([cx, cx], [cy - 0.6 * r, cy + 0.6 * r], color=INK, lw=1.1, zorder=4)
        return _Box(cx, cy, 2 * r, 2 * r)

    def repeat(self, left: float, bottom: float, right: float, top: float, count: int, side: str = "right",
               at: float | None = None, label: str | None = None) -> None:
        """A dashed frame around a block that is stacked (or run in parallel) ``count`` times, labelled
        "count ×" (or ``label``) on its ``side``, at height ``at`` (default: the middle)."""
        self.ax.add_patch(FancyBboxPatch(
            (left, bottom), right - left, top - bottom, boxstyle="round,pad=0,rounding_size=0.1",
            facecolor="none", edgecolor=MUTED, linewidth=1.1, linestyle=(0, (4, 3)), zorder=1))
        x, ha = (right + 0.1, "left") if side == "right" else (left - 0.1, "right")
        y = (bottom + top) / 2 if at is None else at
        self.text(x, y, f"{count} ×" if label is None else label, size=FONT, ha=ha)

    def matrix(self, left: float, bottom: float, mask, cell: float, color: str = "C3") -> _Box:
        """A boolean (rows, columns) matrix with square cells of side ``cell``, row 0 on top: filled cells
        are True."""
        mask = np.asarray(mask, dtype=bool)
        rows, cols = mask.shape
        for i in range(rows):
            for j in range(cols):
                self.ax.add_patch(Rectangle(
                    (left + j * cell, bottom + (rows - 1 - i) * cell), cell, cell,
                    facecolor=_tint(color, 0.15) if mask[i, j] else "white", edgecolor="0.7", linewidth=0.6,
                    zorder=2))
        self.ax.add_patch(Rectangle((left, bottom), cols * cell, rows * cell, facecolor="none", edgecolor=MUTED,
                                    linewidth=0.9, zorder=3))
        return _Box(left + cols * cell / 2, bottom + rows * cell / 2, cols * cell, rows * cell)

    def fit_height(self, top: float) -> None:
        """Cut (or extend) the figure at height ``top``, keeping one unit one inch."""
        width = self.fig.get_figwidth()
        self.fig.set_size_inches(width, top)
        self.ax.set_ylim(0, top)

    def done(self, alt: str, phone=None):
        """The finished figure, with ``alt``, what it shows in words, as its text equivalent
        (the website's alt text: core/plot.py's :func:`set_alt_text`). ``phone``: a function of no
        arguments that draws the same diagram in one column for a phone (core/plot.py's phone_png
        draws it for the website, issue 36)."""
        if phone is not None:
            self.fig._ab_phone_drawing = phone
        return set_alt_text(self.fig, alt)


def _shown(count: int, limit: int) -> list[int | None]:
    """Which of ``count`` items (1-based) to draw in at most ``limit`` places: all of them, or the first
    ``limit - 2``, ``None`` (an ellipsis) and the last."""
    if count <= limit:
        return list(range(1, count + 1))
    return list(range(1, limit - 1)) + [None, count]


def _slots(items: Sequence[int | None], first: float, step: float, narrow: float) -> list[float]:
    """x centres of columns: ``step`` apart, or ``narrow`` next to an ellipsis (``None``) column."""
    xs = [first]
    for a, b in zip(items, items[1:]):
        xs.append(xs[-1] + (narrow if a is None or b is None else step))
    return xs


def _check_at_most(name: str, value, maximum: int, minimum: int = 1, why: str = "") -> int:
    """A whole number in [minimum, maximum] (checked with :func:`check_int`), or ``ValueError`` naming ``name``."""
    value = check_int(name, value, minimum=minimum)
    if value > maximum:
        raise ValueError(f"{name} must be at most {maximum}" + (f" ({why})" if why else "") + f", got {value}")
    return value


def _fmt(n: int) -> str:
    """1234 -> '1,234'."""
    return f"{n:,}"


def _columns(count: int, left: float, right: float) -> list[float]:
    """``count`` x positions spread evenly from ``left`` to ``right`` (the middle for one)."""
    if count == 1:
        return [(left + right) / 2]
    step = (right - left) / (count - 1)
    return [left + k * step for k in range(count)]


# --------------------------------------------------------------------------------------
# Chapter 1: a lookup, exact and soft
# --------------------------------------------------------------------------------------

def attention_pooling_diagram(num_pairs: int = 4, value_size: int = 2):
    """Chapter 1: an exact lookup above attention pooling, over the same ``num_pairs`` (m) pairs.

    Top: the query is compared with every key and only an equal key returns its
    value (or nothing). Bottom: every key gets a weight α(q, k_i) (drawn to scale:
    a softmax of example scores peaking at key 2, so the weights sum to one) and
    the output is the weighted sum of all values, each of size ``value_size``.
    At most six pairs are drawn (1, 2, 3, 4, ⋯, m). Returns the figure.
    """
    m = check_positive_int("num_pairs", num_pairs)
    d_v = check_positive_int("value_size", value_size)
    return _attention_pooling(m, d_v)


def _attention_pooling(m: int, d_v: int, phone: bool = False):
    """:func:`attention_pooling_diagram`'s drawing: the query on the left of each panel and the output on
    the right, or, for a phone (``phone``), in one column: at most four pairs (1, 2, ⋯, m), each
    output under its panel and the titles and sums on two lines."""
    match = min(2, m)
    scores = torch.tensor([1.8 * math.cos(1.1 * (i - match)) for i in range(1, m + 1)])
    weights = torch.softmax(scores, dim=0).tolist()
    shown = _shown(m, 4 if phone else 6)
    s = _Sketch(3.3, 8.45, phone=True) if phone else _Sketch(6.6, 5.85)
    xs = _columns(len(shown), 1.3, 2.95) if phone else _columns(len(shown), 1.85, 4.85)
    widest = 0.44 if phone else 0.62
    bw = min(widest, 0.8 * (xs[1] - xs[0])) if len(xs) > 1 else widest
    out_x = 5.95
    left = 0.5 if phone else 0.7  # the query and the notes on the left

    def database(y_keys: float, y_vals: float, marks: bool):
        """q, the keys and the values; q reaches every key through a line above them."""
        q = s.box(left, y_keys, 0.62, 0.42, r"$\mathbf{q}$", role="attention")
        bus = y_keys + 0.5
        s.ax.plot([q.cx, q.cx, xs[-1]], [q.top, bus, bus], color=INK, lw=1.1, zorder=3)
        keys, vals = {}, {}
        for i, x in zip(shown, xs):
            if i is None:
                s.text(x, y_keys, "⋯", size=FONT)
                s.text(x, y_vals, "⋯", size=FONT)
                continue
            hit = marks and i == match
            edge = _ROLES["match"] if hit else None
            keys[i] = s.box(x, y_keys, bw, 0.42, rf"$\mathbf{{k}}_{{{i}}}$", edge=edge)
            vals[i] = s.box(x, y_vals, bw, 0.42, rf"$\mathbf{{v}}_{{{i}}}$", edge=edge)
            s.arrow((x, bus), keys[i].at("top"))
            if marks:
                s.text(x + 0.08, (bus + keys[i].top) / 2, "=" if hit else "≠", size=FONT, ha="left",
                       color=_ROLES["match"] if hit else MUTED, bold=hit)
        s.text(left, y_vals, f"$m = {m}$ pairs\n" + rf"$\mathbf{{v}}_i \in \mathbb{{R}}^{{{d_v}}}$", size=SMALL)
        return keys, vals

    # Exact lookup (on a phone, above: the panels are placed from the bottom up).
    y0 = 4.95 if phone else 0.0
    if phone:
        s.text(0.1, y0 + 3.2, "Exact lookup: only a key\nequal to the query answers", size=TITLE, ha="left",
               bold=True)
        keys, vals = database(y0 + 2.3, y0 + 1.45, marks=True)
    else:
        s.text(0.15, 5.6, "Exact lookup: only a key equal to the query answers", size=TITLE, ha="left", bold=True)
        keys, vals = database(4.65, 3.8, marks=True)
    s.arrow(keys[match].at("bottom"), vals[match].at("top"), color=_ROLES["match"])
    hit = vals[match]
    if phone:  # the answer under the values, on the left; the note under it
        out = s.box(left, y0 + 0.8, 0.62, 0.42, rf"$\mathbf{{v}}_{{{match}}}$", role="output")
        s.path([hit.at("bottom"), (hit.cx, out.cy), out.at("right")], color=_ROLES["match"])
        s.text(0.1, y0 + 0.25, rf"$\mathbf{{q}} = \mathbf{{k}}_{{{match}}}$ returns it;" + "\nno equal key: no answer",
               size=SMALL, ha="left", color=MUTED)
    else:
        out = s.box(out_x, 3.8, 0.95, 0.42, rf"$\mathbf{{v}}_{{{match}}}$", role="output")
        s.path([hit.at("bottom"), (hit.cx, 3.38), (out_x, 3.38), out.at("bottom")], color=_ROLES["match"])
        s.text(out_x, 4.38, rf"$\mathbf{{q}} = \mathbf{{k}}_{{{match}}}$ returns it;" + "\nno equal key:\nno answer",
               size=SMALL, color=MUTED)

    # Attention pooling.
    if phone:
        s.text(0.1, 4.4, "Attention pooling: every key\n" + r"gets a weight $\alpha(\mathbf{q}, \mathbf{k}_i)$",
               size=TITLE, ha="left", bold=True)
        keys, vals = database(3.3, 2.15, marks=False)
        base = 2.5
    else:
        s.text(0.15, 3.0, r"Attention pooling: every key gets a weight $\alpha(\mathbf{q}, \mathbf{k}_i)$",
               size=TITLE, ha="left", bold=True)
        keys, vals = database(2.05, 0.9, marks=False)
        base = 1.25
    tallest = 0.36
    for i, k in keys.items():
        a = weights[i - 1]
        s.ax.add_patch(Rectangle((k.cx - 0.14, base), 0.28, max(tallest * a / max(weights), 0.01),
                                 facecolor=_tint("C3", 0.3), edgecolor=_ROLES["attention"], linewidth=1.0,
                                 zorder=2))
        s.text(k.cx, base + max(tallest * a / max(weights), 0.01) + 0.03, f"{a:.2f}", size=SMALL, va="bottom",
               color=MUTED)
    s.text(left, base + 0.2, r"$\alpha(\mathbf{q}, \mathbf{k}_i)$", size=FONT)
    bus = 1.7 if phone else 0.45
    for v in vals.values():
        s.ax.plot([v.cx, v.cx], [v.bottom, bus], color=INK, lw=1.1, zorder=3)
    total = r"output $= \sum_{i=1}^{m} \alpha(\mathbf{q}, \mathbf{k}_i)\,\mathbf{v}_i$,"
    if phone:  # the weighted sum under the values; the output's formula on two lines under it
        out_x = (xs[0] + xs[-1]) / 2
        out = s.box(out_x, 1.2, 1.4, 0.42, rf"output $\in \mathbb{{R}}^{{{d_v}}}$", role="output", size=SMALL)
        s.ax.plot([xs[0], xs[-1]], [bus, bus], color=INK, lw=1.1, zorder=3)
        s.arrow((out_x, bus), out.at("top"))
        s.text(left, 1.2, "weighted\nsum", size=SMALL, color=MUTED)
        # two texts: in one, the second line's sum ran into the first's (mathtext sets its limits under it)
        s.text(1.65, 0.62, total, size=FONT)
        s.text(1.65, 0.17, r"with $\sum_i \alpha(\mathbf{q}, \mathbf{k}_i) = 1$", size=FONT)
    else:
        out = s.box(out_x, 0.9, 0.95, 0.42, rf"$\in \mathbb{{R}}^{{{d_v}}}$", role="output")
        s.path([(min(v.cx for v in vals.values()), bus), (out_x, bus), out.at("bottom")])
        s.text(out_x, 1.5, "weighted\nsum", size=SMALL, color=MUTED)
        s.text((xs[0] + out_x) / 2, 0.16, total + r"  with $\sum_i \alpha(\mathbf{q}, \mathbf{k}_i) = 1$", size=FONT)
    return s.done(f"Diagram: an exact lookup, where a query returns the value of the one equal key among {m} key-value pairs, above attention pooling, where every key gets a weight from its similarity to the query, the weights sum to one, and the output is the weighted sum of all {m} values of size {d_v}",
                  phone=None if phone else functools.partial(_attention_pooling, m, d_v, phone=True))


# --------------------------------------------------------------------------------------
# Chapter 4: Bahdanau attention
# --------------------------------------------------------------------------------------

def bahdanau_diagram(embed_size: int = 256, num_hiddens: int = 256, num_layers: int = 2, num_steps: int = 9,
                  tgt_vocab_size: int | None = None):
    """Chapter 4: one decoding step of the GRU encoder–decoder with additive attention.

    The encoder reads ``num_steps`` (T) source tokens (embeddings of
    ``embed_size``, a GRU of ``num_layers`` layers and ``num_hiddens`` units) and
    keeps every last-layer state h_t. At step t' the decoder's previous state
    s_{t'-1} is the query, the h_t are keys and values; the context c_{t'} is
    concatenated with the embedded previous token and fed to the decoder GRU,
    whose recurrent state is s_{t'-1} too (s_0: the encoder's final states of
    every layer); its new state s_{t'} goes through the output layer (to ``tgt_vocab_size``
    scores, or "|V|" when it is not given). Defaults: d2l's sizes. Returns the figure.
    """
    e = check_positive_int("embed_size", embed_size)
    h = check_positive_int("num_hiddens", num_hiddens)
    layers = check_positive_int("num_layers", num_layers)
    T = check_positive_int("num_steps", num_steps)
    vocab = r"|V|" if tgt_vocab_size is None else _fmt(check_positive_int("tgt_vocab_size", tgt_vocab_size))
    return _bahdanau(e, h, layers, T, vocab)


def _bahdanau(e: int, h: int, layers: int, T: int, vocab: str, phone: bool = False):
    """:func:`bahdanau_diagram`'s drawing: the encoder and the attention on the left, the decoder on the
    right, or, for a phone (``phone``), in one column read upwards: the encoder (four of its T steps at
    most), the attention, then the decoder, its query and state beside it; s_0 named in the
    encoder's note instead of drawn as a path."""
    s = _Sketch(3.3, 11.0, phone=True) if phone else _Sketch(6.6, 6.0)
    shown = _shown(T, 4 if phone else 5)
    xs = _columns(len(shown), 0.35, 1.85) if phone else _columns(len(shown), 0.5, 2.9)
    bw = 0.42 if phone else 0.5
    note_x = 2.15 if phone else 3.2  # the encoder's notes, right of it

    # Encoder: tokens, embedding, GRU chain, states.
    s.text(1.1 if phone else 1.7, 0.12, "encoder", size=TITLE, bold=True)
    cells, states = [], []
    if phone:  # on two lines: on one it is wider than the encoder's four columns
        emb = s.box(1.1, 1.25, 1.95, 0.5, f"embedding,\n{e} per token", role="embed", size=SMALL)
    else:
        emb = s.box(1.7, 1.25, 3.0, 0.42, f"embedding, {e} per token", role="embed", size=SMALL)
    y_cell, y_state = (2.1, 2.9) if phone else (2.0, 2.8)
    for i, x in zip(shown, xs):
        if i is None:
            for y in (0.55, y_cell, y_state):
                s.text(x, y, "⋯", size=FONT)
            cells.append(None)
            continue
        name = "T" if i == T and T > 1 else str(i)
        tok = s.box(x, 0.55, bw, 0.4, f"$x_{{{name}}}$")
        s.arrow(tok.at("top"), (x, emb.bottom))
        cell = s.box(x, y_cell, bw, 0.4, "GRU", role="rnn", size=SMALL - 1)
        s.arrow((x, emb.top), cell.at("bottom"))
        state = s.box(x, y_state, bw, 0.4, rf"$\mathbf{{h}}_{{{name}}}$")
        s.arrow(cell.at("top"), state.at("bottom"))
        cells.append(cell)
        states.append(state)
    for a, b in zip(cells, cells[1:]):
        if a is not None and b is not None:
            s.arrow(a.at("right"), b.at("left"))
    s.text(note_x, 0.55, f"$T = {T}$\nsource tokens", size=SMALL, ha="left")
    gru_note = f"GRU: {layers} layer{'s' if layers > 1 else ''},\n{h} units"
    if phone:  # s_0, the decoder's first state, named here in the state's colour (a path to the decoder
        # would cross the attention, which spans the column)
        s.text(note_x, y_cell + 0.23, gru_note, size=SMALL, ha="left")
        s.text(note_x, y_cell - 0.23, "last step's\n" + r"states: $\mathbf{s}_0$", size=SMALL, ha="left",
               color=_ROLES["rnn"])
    else:
        s.text(note_x, 1.66, gru_note, size=SMALL, ha="left")
    s.text(note_x, y_state + (0.3 if phone else 0.0), rf"$\mathbf{{h}}_t \in \mathbb{{R}}^{{{h}}}$" + "\n(last layer)",
           size=SMALL, ha="left")

    # Additive attention: keys and values h_t, query s_{t'-1}.
    score = r"$a(\mathbf{s}, \mathbf{h}) = \mathbf{w}_v^\top \tanh(\mathbf{W}_q \mathbf{s} + \mathbf{W}_k \mathbf{h})$"
    sizes = (rf"$\mathbf{{W}}_q, \mathbf{{W}}_k \in \mathbb{{R}}^{{{h} \times {h}}}$,",
             rf"$\mathbf{{w}}_v \in \mathbb{{R}}^{{{h}}}$")
    context = r"$\mathbf{c}_{t'} = \sum_t \alpha(\mathbf{s}_{t'-1}, \mathbf{h}_t)\, \mathbf{h}_t$"
    if phone:  # the parameters' sizes on two lines
        att = s.box(1.65, 4.8, 3.1, 1.75, "", role="attention")
        s.text(att.cx, 5.45, "additive attention", size=FONT, bold=True)
        for y, line in ((5.13, score), (4.83, sizes[0]), (4.53, sizes[1]), (4.2, context)):
            s.text(att.cx, y, line, size=SMALL)
        s.text(note_x, 3.65, "keys = values\n" + r"$= \mathbf{h}_1, \ldots, \mathbf{h}_T$", size=SMALL, ha="left",
               color=MUTED)
    else:
        att = s.box(1.9, 4.25, 3.5, 1.35, "", role="attention")
        s.text(att.cx, 4.72, "additive attention", size=FONT, bold=True)
        s.text(att.cx, 4.43, score, size=SMALL)
        s.text(att.cx, 4.1, sizes[0] + " " + sizes[1], size=SMALL)
        s.text(att.cx, 3.77, context, size=SMALL)
    for state in states:
        s.arrow(state.at("top"), (state.cx, att.bottom))

    # Decoder: previous token, embedding, [c; e], GRU, s_t', output layer.
    if phone:  # above the attention, its query beside its first box
        dx, dw, y = 1.45, 1.65, att.top + 0.75
        query = s.box(2.8, y, 0.8, 0.42, r"$\mathbf{s}_{t'-1}$", role="rnn")
        s.arrow(query.at("bottom"), (query.cx, att.top))
        s.text(query.cx - 0.08, (query.bottom + att.top) / 2, "query", size=SMALL, ha="right", color=MUTED)
        s.text(0.45, (query.bottom + att.top) / 2, "decoder, step $t'$", size=TITLE, ha="left", bold=True)
        ys = [y + 0.05 + k * 0.75 for k in range(7)]
    else:
        query = s.box(att.cx, 5.6, 1.1, 0.42, r"$\mathbf{s}_{t'-1}$", role="rnn")
        s.arrow(query.at("bottom"), att.at("top"))
        s.text(att.cx + 0.12, (query.bottom + att.top) / 2, "query", size=SMALL, ha="left", color=MUTED)
        s.text(0.05, 5.6, "keys = values\n" + r"$= \mathbf{h}_1, \ldots, \mathbf{h}_T$", size=SMALL, ha="left",
               color=MUTED)
        dx, dw = 5.6, 1.75
        s.text(dx, 0.12, "decoder, step $t'$", size=TITLE, bold=True)
        ys = [0.6, 1.25, 2.05, 2.85, 3.6, 4.4, 5.2]
    # two lines: on one, enlarged for a phone (core/plot.py's fit_page), it ran over its box
    prev = s.box(dx, ys[0], dw, 0.52, "previous token\n" + r"$y_{t'-1}$", size=SMALL)
    demb = s.box(dx, ys[1], dw, 0.42, rf"$\mathbf{{e}}(y_{{t'-1}}) \in \mathbb{{R}}^{{{e}}}$", role="embed",
                 size=SMALL)
    cat = s.box(dx, ys[2], dw, 0.5, "", size=SMALL)
    s.text(dx, ys[2], r"$[\mathbf{c}_{t'};\, \mathbf{e}(y_{t'-1})]$" + "\n" + rf"$\in \mathbb{{R}}^{{{h + e}}}$",
           size=SMALL)
    gru = s.box(dx, ys[3], dw, 0.42, f"GRU: {layers} × {h}", role="rnn", size=SMALL)
    new = s.box(dx, ys[4], dw, 0.42, rf"$\mathbf{{s}}_{{t'}} \in \mathbb{{R}}^{{{h}}}$", role="rnn", size=SMALL)
    # on a phone on two lines: "dense: 1024 → 37,000" is wider than its column
    dense = s.box(dx, ys[5], dw, 0.52 if phone else 0.42, ("dense:\n" if phone else "dense: ") + f"{h} → {vocab}",
                  role="ffn", size=SMALL)
    out = s.box(dx, ys[6], dw, 0.42, "next-token scores", role="output", size=SMALL)
    for a, b in ((prev, demb), (demb, cat), (cat, gru), (gru, new), (new, dense), (dense, out)):
        s.arrow(a.at("top"), b.at("bottom"))
    if phone:
        # The context goes up the left side to the concatenation.
        cx = 0.3
        s.path([(cx, att.top), (cx, cat.cy), cat.at("left")], color=_ROLES["attention"])
        s.text(cx - 0.06, demb.cy, r"$\mathbf{c}_{t'}$", size=FONT, ha="right", color=_ROLES["attention"])
        # s_{t'-1} is also the GRU's recurrent state; s_{t'} becomes the next step's s_{t'-1}.
        sx, top = 2.5, 3.1
        s.path([(sx, query.top), (sx, gru.cy), gru.at("right")], color=_ROLES["rnn"])
        s.text(sx + 0.06, cat.cy, "state", size=SMALL, ha="left", color=_ROLES["rnn"])
        s.path([new.at("right"), (top, new.cy), (top, query.top)], dashed=True, color=_ROLES["rnn"])
        s.text(dx + dw / 2 + 0.06, new.cy + 0.08, "next step", size=SMALL, ha="left", va="bottom",
               color=_ROLES["rnn"])
        s.fit_height(out.top + 0.1)
    else:
        # The context goes down to the concatenation.
        cx = 4.45
        s.path([att.at("right", 0.25), (cx, att.cy + 0.25), (cx, cat.cy), cat.at("left")], color=_ROLES["attention"])
        s.text(cx - 0.06, 3.3, r"$\mathbf{c}_{t'}$", size=FONT, ha="right", color=_ROLES["attention"])
        # s_{t'-1} is also the GRU's recurrent state; at the first step it is s_0, the encoder's final states.
        sx = 4.6
        s.path([query.at("right"), (sx, query.cy), (sx, gru.cy + 0.08), gru.at("left", 0.08)], color=_ROLES["rnn"])
        s.text(sx - 0.06, 5.72, "state", size=SMALL, ha="right", color=_ROLES["rnn"])
        last = next(c for c in reversed(cells) if c is not None)
        s.path([last.at("right", 0.1), (3.3, last.cy + 0.1), (3.3, 2.42), (4.55, 2.42), (4.55, gru.cy - 0.1),
                gru.at("left", -0.1)], dashed=True, color=_ROLES["rnn"])
        s.text(3.36, 2.35, r"$\mathbf{s}_0$, all layers", size=SMALL, ha="left", va="top", color=_ROLES["rnn"])
        # s_t' becomes the next step's s_{t'-1}.
        top = 6.12
        s.path([new.at("right"), (6.54, new.cy), (6.54, top), (query.cx, top), query.at("top")],
               dashed=True, color=_ROLES["rnn"])
        s.text(3.6, top + 0.12, "next step", size=SMALL, color=_ROLES["rnn"])
        s.fit_height(6.4)
    return s.done(f"Diagram: one decoding step of the GRU encoder-decoder with additive attention: embeddings of size {e}, a {layers}-layer GRU of {h} units, the decoder state as query scores all {T} encoder states, their weighted sum (the context) enters the decoder GRU, and a dense layer gives the next token's scores",
                  phone=None if phone else functools.partial(_bahdanau, e, h, layers, T, vocab, phone=True))


# --------------------------------------------------------------------------------------
# Chapter 5: multi-head attention
# --------------------------------------------------------------------------------------

def multihead_attention_diagram(num_hiddens: int = 100, num_heads: int = 5, query_size: int | None = None,
                             key_size: int | None = None, value_size: int | None = None):
    """Chapter 5: h heads, each with its own projections and scaled dot-product attention, concatenated
    and mixed by W_o.

    The sizes are :class:`~attention_book.MultiHeadAttention`'s: ``num_hiddens``
    is p_o, ``num_heads`` is h, each head gets p_q = p_k = p_v = p_o / h features;
    ``query_size``, ``key_size`` and ``value_size`` (d_q, d_k, d_v) default to
    ``num_hiddens``. At most four heads are drawn (1, 2, ⋯, h). Defaults: the
    chapter's shape check (d2l's). Returns the figure.
    """
    p_o, h = check_heads(num_hiddens, num_heads)
    given = {"q": ("query_size", query_size), "k": ("key_size", key_size), "v": ("value_size", value_size)}
    sizes = {name: p_o if size is None else check_positive_int(arg, size) for name, (arg, size) in given.items()}
    return _multihead(p_o, h, sizes)


def _multihead(p_o: int, h: int, sizes: dict, phone: bool = False):
    """:func:`multihead_attention_diagram`'s drawing: up to four heads side by side, or, for a phone
    (``phone``), head 1 alone in its "h heads" frame, the notes around it."""
    p = p_o // h
    s = _Sketch(3.3, 6.1, phone=True) if phone else _Sketch(6.4, 6.1)
    shown = [1] if phone else _shown(h, 4)
    # A head's three projection boxes hold W^(q)_i, W^(k)_i, W^(v)_i: wide enough for their labels
    # enlarged for a phone (core/plot.py's fit_page), with a gap between neighbouring heads.
    pw, pstep, half = 0.43, 0.46, 0.72
    xs = [2.35] if phone else _slots(shown, 2.2, 1.45, 0.95)
    colours = {"q": "C3", "k": "C0", "v": "C2"}

    # The three inputs, as lines every head taps.
    bus_y = {"q": 1.0, "k": 0.7, "v": 0.4}
    for name, y in bus_y.items():
        s.ax.plot([1.45, xs[-1] + half - 0.04], [y, y], color=colours[name], lw=1.6, zorder=3)
        s.text(1.35, y, rf"$\mathbf{{{name}}} \in \mathbb{{R}}^{{{sizes[name]}}}$", size=SMALL, ha="right")

    heads = []
    for i, x in zip(shown, xs):
        if i is None:
            for y in (1.75, 2.65, 3.45):
                s.text(x, y, "⋯", size=FONT)
            continue
        projections = []
        for k, name in enumerate("qkv"):
            px = x + (k - 1) * pstep
            box = s.box(px, 1.75, pw, 0.42, rf"$\mathbf{{W}}^{{({name})}}_{{{i}}}$", role="ffn", size=SMALL)
            s.ax.plot([px], [bus_y[name]], marker="o", markersize=3.5, color=colours[name], zorder=4)
            s.arrow((px, bus_y[name]), box.at("bottom"), color=colours[name])
            projections.append(box)
        att = s.box(x, 2.65, 2 * pstep + pw, 0.52, "scaled\ndot-product", role="attention", size=SMALL)
        for box in projections:
            s.arrow(box.at("top"), (box.cx, att.bottom))
        out = s.box(x, 3.45, 0.9, 0.42, rf"$\mathbf{{o}}_{{{i}}}$", size=FONT)
        s.arrow(att.at("top"), out.at("bottom"))
        heads.append(out)
    s.repeat(xs[0] - half, 1.35, xs[-1] + half, 3.8, h, side="left", at=3.45, label=f"$h = {h}$\nheads")
    s.text(0.1, 2.65, f"each head:\n$p_q = p_k = p_v$\n$= p_o / h = {p}$", size=SMALL, ha="left")
    # on a phone, under the inputs: beside them it would run into head 1's boxes
    s.text(0.1, 0.1 if phone else 1.75, rf"$\mathbf{{W}}^{{(q)}}_i \in \mathbb{{R}}^{{{p} \times {sizes['q']}}}$",
           size=SMALL, ha="left")

    centre, wide = (1.65, 3.0) if phone else ((xs[0] + xs[-1]) / 2, max(xs[-1] - xs[0] + 2 * pstep + pw, 2.9))
    cat = s.box(centre, 4.35, wide, 0.45, rf"concatenate: $h\, p_v = {h} \times {p} = {h * p}$", size=SMALL)
    for out in heads:
        s.arrow(out.at("top"), (out.cx, cat.bottom))
    wo = s.box(cat.cx, 5.05, 2.3, 0.45, rf"$\mathbf{{W}}_o \in \mathbb{{R}}^{{{p_o} \times {h * p}}}$",
               role="ffn", size=SMALL)
    s.arrow(cat.at("top"), wo.at("bottom"))
    # on a phone without R^{p_o}, whose o (a script's script) would show at 7 px
    final = s.box(cat.cx, 5.75, 2.3, 0.45, rf"output $\in \mathbb{{R}}^{{{p_o}}}$" if phone else
                  rf"output $\in \mathbb{{R}}^{{p_o}}$, $p_o = {p_o}$", role="output", size=SMALL)
    s.arrow(wo.at("top"), final.at("bottom"))
    return s.done(f"Diagram of multi-head attention: queries, keys and values each projected by {h} heads, scaled dot-product attention in every head, the {h} outputs concatenated and mixed by W_o into {p_o} features",
                  phone=None if phone else functools.partial(_multihead, p_o, h, sizes, phone=True))


# --------------------------------------------------------------------------------------
# Chapter 6: CNN, RNN and self-attention
# --------------------------------------------------------------------------------------

def layer_comparison_diagram(num_tokens: int = 8, kernel_size: int = 3, num_hiddens: int = 64):
    """Chapter 6: which inputs each output of one layer sees, for a convolution, an RNN and self-attention.

    ``num_tokens`` (n, at most 12) inputs at the bottom, outputs on top; the
    connections into the last output are coloured. Beside each layer, its three
    costs from the chapter (:data:`~attention_book.experiments.layer_comparison.LAYER_COSTS`). A convolution
    of width ``kernel_size`` (k) sees its k nearest inputs, the RNN reaches the
    first input through a chain of n steps, self-attention links all n² pairs.
    ``num_hiddens`` (d) is the token size printed with the costs. Defaults: the
    sizes the chapter times. Returns the figure.
    """
    n = _check_at_most("num_tokens", num_tokens, 12, minimum=2, why="to keep the tokens apart")
    k = _check_at_most("kernel_size", kernel_size, n, why=f"the number of tokens, num_tokens={n}")
    d = check_positive_int("num_hiddens", num_hiddens)
    return _layer_comparison(n, k, d)


def _layer_comparison(n: int, k: int, d: int, phone: bool = False):
    """:func:`layer_comparison_diagram`'s drawing: each layer's costs beside it, or, for a phone
    (``phone``), under it, in one column."""
    s = _Sketch(3.3, 8.85, phone=True) if phone else _Sketch(6.6, 5.95)
    # desktop: the costs' labels start at 3.65, room for a phone's larger text
    xs = _columns(n, 0.25, 2.8) if phone else _columns(n, 0.4, 3.05)
    r = 0.085
    header = f"$n = {n}$ tokens of size $d = {d}$;" + ("\n" if phone else " ") + f"convolution kernel $k = {k}$"
    s.text(0.1, 8.55 if phone else 5.8, header, size=TITLE, ha="left", bold=True)
    titles = ["convolution (CNN)", "recurrent layer (RNN)", "self-attention"]
    rows = ("computational cost", "sequential operations", "maximum path length")  # the chapter's table
    hot = {"CNN": "C0", "RNN": "C4", "self-attention": "C3"}
    for panel, ((name, *costs), title) in enumerate(zip(LAYER_COSTS, titles)):
        kind = name.split(" ")[0]
        base = 0.95 + (2 - panel) * 2.75 if phone else 3.75 - panel * 1.8
        y_in, y_out = base + 0.3, base + 1.15
        colour = hot.get(kind, hot["self-attention"])
        s.text(0.1, base + 1.58, title, size=FONT, ha="left", bold=True)
        # Connections (drawn first, under the nodes): (input j -> output i) pairs, 1-based.
        if kind == "CNN":
            lo = -(k // 2)
            pairs = [(j, i) for i in range(1, n + 1) for j in range(i + lo, i + lo + k) if 1 <= j <= n]
        elif kind == "RNN":
            pairs = [(i, i) for i in range(1, n + 1)]
        else:
            pairs = [(j, i) for i in range(1, n + 1) for j in range(1, n + 1)]
        for j, i in pairs:
            last = i == n
            s.ax.plot([xs[j - 1], xs[i - 1]], [y_in + r, y_out - r], color=colour if last else "0.72",
                      lw=1.5 if last else 0.8, zorder=2 if last else 1)
        if kind == "RNN":  # the chain of states
            for i in range(1, n):
                s.arrow((xs[i - 1] + r, y_out), (xs[i] - r, y_out), color=colour)
        for x in xs:
            for y, fill in ((y_in, "white"), (y_out, _tint(colour))):
                s.ax.add_patch(Circle((x, y), r, facecolor=fill, edgecolor=INK, linewidth=1.0, zorder=3))
        s.text(xs[0], y_in - 0.24, r"$\mathbf{x}_1$", size=SMALL)
        s.text(xs[-1], y_in - 0.24, rf"$\mathbf{{x}}_{{{n}}}$", size=SMALL)
        s.text(xs[-1] + 0.3, y_out, rf"$\mathbf{{y}}_{{{n}}}$", size=SMALL, color=colour)
        for row, (label, cost) in enumerate(zip(rows, costs)):
            y = base - 0.15 - row * 0.3 if phone else base + 1.12 - row * 0.36
            s.text(0.1 if phone else 3.65, y, label, size=SMALL, ha="left", color=MUTED)
            s.text(3.2 if phone else 6.5, y, cost, size=FONT, ha="right")
    return s.done(f"Diagram comparing which of {n} inputs one output sees: a convolution of kernel size {k} sees its neighbours, an RNN sees the inputs before it through a chain of states, self-attention connects every output to every input directly",
                  phone=None if phone else functools.partial(_layer_comparison, n, k, d, phone=True))


# --------------------------------------------------------------------------------------
# Chapter 7: the Transformer
# --------------------------------------------------------------------------------------

def _residual_block(s: _Sketch, cx: float, width: float, bottom: float, sublayers, rail: float,
                    pre_norm: bool = False) -> tuple[float, list[_Box]]:
    """Stack ``sublayers`` ((text, role) pairs) upwards from ``bottom``, each inside a residual connection.

    Post-norm (chapter 7): sublayer, then an "add & norm" box fed by a bypass along
    the rail at x = ``rail``. Pre-norm (chapters 8 and 9): a "norm" box, the
    sublayer, then a circled plus fed by the bypass. Returns the top y and the
    sublayer boxes (0.52 high for two lines of text, 0.2 higher for each further line).
    """
    y, boxes = bottom, []
    for text, role in sublayers:
        start = y
        if pre_norm:
            norm = s.box(cx, y + 0.2, width, 0.3, "layer norm", role="norm", size=SMALL)
            s.arrow((cx, y), norm.at("bottom"))
            y = norm.top + 0.15
            s.arrow(norm.at("top"), (cx, y))
        if not pre_norm:
            y += 0.22
        high = 0.52 + 0.2 * max(0, text.count("\n") - 1)
        box = s.box(cx, y + high / 2, width, high, text, role=role, size=SMALL)
        if not pre_norm:
            s.arrow((cx, start), box.at("bottom"))
        boxes.append(box)
        if pre_norm:
            plus = s.plus(cx, box.top + 0.28)
            s.arrow(box.at("top"), plus.at("bottom"))
            s.path([(cx, start + 0.08), (rail, start + 0.08), (rail, plus.cy), plus.at("right")])
            y = plus.top + 0.12
            s.arrow(plus.at("top"), (cx, y))
        else:
            add = s.box(cx, box.top + 0.32, width, 0.3, "add & norm", role="norm", size=SMALL)
            s.arrow(box.at("top"), add.at("bottom"))
            s.path([(cx, start + 0.08), (rail, start + 0.08), (rail, add.cy), add.at("right")])
            y = add.top + 0.15
            s.arrow(add.at("top"), (cx, y))
    return y, boxes


def transformer_diagram(num_hiddens: int = 256, ffn_num_hiddens: int = 64, num_heads: int = 4, num_blks: int = 2,
                     num_steps: int = 9, tgt_vocab_size: int | None = None):
    """Chapter 7: the encoder–decoder Transformer with its sizes.

    Token embeddings (× √d, d = ``num_hiddens``) plus the sinusoidal positional
    encoding; ``num_blks`` (N) encoder blocks (multi-head self-attention with
    ``num_heads`` heads, position-wise FFN d → ``ffn_num_hiddens`` → d, each
    followed by add & norm) and N decoder blocks (masked self-attention,
    encoder–decoder attention, FFN); a linear layer to ``tgt_vocab_size`` ("|V|"
    if not given) and a softmax. Sequences of ``num_steps`` (n) tokens keep the
    shape (n, d) through the stacks. Defaults: the chapter's translator (d2l's
    sizes). Returns the figure.
    """
    d, h = check_heads(num_hiddens, num_heads)
    d_ff = check_positive_int("ffn_num_hiddens", ffn_num_hiddens)
    N = check_positive_int("num_blks", num_blks)
    n = check_positive_int("num_steps", num_steps)
    vocab = "|V|" if tgt_vocab_size is None else _fmt(check_positive_int("tgt_vocab_size", tgt_vocab_size))
    return _transformer(d, h, d_ff, N, n, vocab)


def _transformer(d: int, h: int, d_ff: int, N: int, n: int, vocab: str, phone: bool = False):
    """:func:`transformer_diagram`'s drawing: encoder and decoder side by side, or, for a phone
    (``phone``), in one column, the decoder above the encoder, its labels as large in points."""
    s = _Sketch(3.3, 14.0, phone=True) if phone else _Sketch(6.4, 7.5)
    width = 2.15
    if phone:  # one column; the encoder's output reaches the decoder along its left side
        enc_x = dec_x = 1.45
    else:
        enc_x, dec_x = 1.75, 4.6
    enc_rail, dec_rail = enc_x + width / 2 + 0.17, dec_x + width / 2 + 0.17
    attention = f"$h = {h}$ heads, $d = {d}$"
    ffn = ("position-wise FFN\n" + f"${d} \\to {d_ff} \\to {d}$", "ffn")

    def embed(cx: float, what: str, pe_side: str, y0: float = 0.0) -> float:
        ids = s.box(cx, y0 + 0.3, width, 0.4, f"{what} ids: $n = {n}$", size=SMALL)
        emb = s.box(cx, y0 + 0.95, width, 0.42, rf"embedding $\times \sqrt{{{d}}}$", role="embed", size=SMALL)
        s.arrow(ids.at("top"), emb.at("bottom"))
        plus = s.plus(cx, y0 + 1.55)
        s.arrow(emb.at("top"), plus.at("bottom"))
        sign = -1 if pe_side == "left" else 1
        s.text(cx + sign * 0.22, y0 + 1.55, "positional\nencoding", size=SMALL, ha="right" if sign < 0 else "left",
               color=MUTED)
        s.arrow((cx + sign * 0.22, y0 + 1.55), plus.at(pe_side))
        s.arrow(plus.at("top"), (cx, y0 + 1.95))
        s.text(cx + 0.2, y0 + 1.55, f"$(n, d) = ({n}, {d})$", size=SMALL, ha="left", color=MUTED)
        return y0 + 1.95

    # Encoder (on a phone, its name under it: the drawing reads upwards).
    base = 0.4 if phone else 0.0
    bottom = embed(enc_x, "source", "left", base)
    top, _ = _residual_block(s, enc_x, width, bottom, [("multi-head self-attention\n" + attention, "attention"),
                                                       ffn], enc_rail)
    s.repeat(enc_x - width / 2 - 0.1, bottom - 0.05, enc_rail + 0.08, top - 0.05, N,
             side="right" if phone else "left")
    memory = s.box(enc_x, top + 0.5, width, 0.6, f"encoder output $({n}, {d})$\n= keys and values", size=SMALL)
    s.arrow((enc_x, top), memory.at("bottom"))

    # Decoder.
    base = memory.top + 0.75 if phone else 0.0
    bottom = embed(dec_x, "target", "left", base)
    top, (masked, cross, _) = _residual_block(
        s, dec_x, width, bottom,
        [("masked self-attention\n" + attention, "attention"),
         # on three lines: on two, enlarged for a phone (core/plot.py's fit_page), it ran over its box
         ("encoder–decoder\nattention\n" + attention, "attention"), ffn], dec_rail)
    s.repeat(dec_x - width / 2 - 0.1, bottom - 0.05, dec_rail + 0.08, top - 0.05, N, side="right")
    linear = s.box(dec_x, top + 0.4, width, 0.42, f"linear: ${d} \\to$ {vocab}", role="ffn", size=SMALL)
    s.arrow((dec_x, top), linear.at("bottom"))
    soft = s.box(dec_x, linear.top + 0.45, width, 0.42, "softmax: next token", role="output", size=SMALL)
    s.arrow(linear.at("top"), soft.at("bottom"))
    if phone:
        s.text(enc_x, 0.15, "encoder", size=TITLE, bold=True)
        s.text(dec_x, base - 0.22, "decoder", size=TITLE, bold=True)
        s.fit_height(soft.top + 0.15)
        # Keys and values of the encoder–decoder attention: up the left side, past the decoder's input.
        gap = dec_x - width / 2 - 0.27
        s.path([memory.at("left"), (gap, memory.cy), (gap, cross.cy), cross.at("left")], color=_ROLES["attention"])
    else:
        for x, name in ((enc_x, "encoder"), (dec_x, "decoder")):
            s.text(x, soft.top + 0.28, name, size=TITLE, bold=True)
        s.fit_height(soft.top + 0.5)
        # Keys and values of the encoder–decoder attention: the encoder's output.
        gap = (enc_rail + 0.08 + dec_x - width / 2 - 0.1) / 2
        s.path([memory.at("right"), (gap, memory.cy), (gap, cross.cy), cross.at("left")], color=_ROLES["attention"])
    return s.done(f"Diagram of the encoder-decoder Transformer: an encoder of {N} blocks (multi-head self-attention with {h} heads and an FFN of {d_ff} units, each with add and norm) and a decoder of {N} blocks (masked self-attention, encoder-decoder attention, FFN), width {d}, then a linear layer to the vocabulary",
                  phone=None if phone else functools.partial(_transformer, d, h, d_ff, N, n, vocab, phone=True))


# --------------------------------------------------------------------------------------
# Chapter 8: the vision Transformer
# --------------------------------------------------------------------------------------

def _vit_sizes(model) -> dict:
    """The sizes :func:`vit_diagram` needs, read from a :class:`~attention_book.ViT`."""
    if not isinstance(model, ViT):
        raise ValueError(f"model must be an ab.ViT (or None, to give the sizes one by one), got {type(model).__name__}")
    blk = model.blks[0]
    emb = model.patch_embedding
    return dict(img_size=emb.img_size, patch_size=emb.patch_size, num_hiddens=emb.num_hiddens,
                mlp_num_hiddens=blk.ffn.dense1.out_features, num_heads=blk.attention.num_heads,
                num_blks=len(model.blks), in_channels=emb.in_channels, num_classes=model.num_classes,
                pool=model.pool)


def vit_diagram(model=None, *, img_size=96, patch_size=16, num_hiddens: int = 512, mlp_num_hiddens: int = 2048,
             num_heads: int = 8, num_blks: int = 2, in_channels: int = 1, num_classes: int = 10, pool: str = "cls"):
    """Chapter 8: the vision Transformer, from pixels to class scores, with its sizes.

    Pass a :class:`~attention_book.ViT` (its sizes are read from it) or the sizes
    (defaults: the chapter's full-size model, d2l's). The image (c × h × w,
    ``in_channels`` × ``img_size``) is cut into m = hw/p² patches of
    ``patch_size`` (p), each flattened to cp² numbers and projected by E to d =
    ``num_hiddens``; a ``<cls>`` token is put in front (``pool='cls'``) and learned
    positions added; ``num_blks`` pre-norm blocks (``num_heads`` heads, MLP d →
    ``mlp_num_hiddens`` → d with GELU) follow, and a head (layer norm, linear)
    maps the final ``<cls>`` vector (or the mean of the patch vectors) to
    ``num_classes`` scores. Returns the figure.
    """
    if model is not None:
        return vit_diagram(**_vit_sizes(model))
    H, W = check_size_pair("img_size", img_size)
    ph, pw = check_size_pair("patch_size", patch_size)
    check_divisible((H, W), (ph, pw))
    d, heads = check_heads(num_hiddens, num_heads)
    d_mlp = check_positive_int("mlp_num_hiddens", mlp_num_hiddens)
    N = check_positive_int("num_blks", num_blks)
    c = check_positive_int("in_channels", in_channels)
    classes = check_positive_int("num_classes", num_classes)
    if pool not in ("cls", "mean"):
        raise ValueError(f"pool must be 'cls' or 'mean', got {pool!r}")
    return _vit(H, W, ph, pw, d, heads, d_mlp, N, c, classes, pool)


def _vit(H: int, W: int, ph: int, pw: int, d: int, heads: int, d_mlp: int, N: int, c: int, classes: int,
         pool: str, phone: bool = False):
    """:func:`vit_diagram`'s drawing: the patches on the left, the encoder on the right, or, for a
    phone (``phone``), in one column read upwards, from the image at the bottom to the scores."""
    rows, cols = H // ph, W // pw
    m = rows * cols
    tokens = m + (pool == "cls")
    s = _Sketch(3.3, 12.0, phone=True) if phone else _Sketch(6.45, 6.5)
    lx, lw = (1.45, 2.7) if phone else (1.7, 2.9)

    # Left column, top down (on a phone, bottom up): the image, its patches, the projection, <cls>, the positions.
    side = 1.15
    scale = side / max(H, W)
    iw, ih = W * scale, H * scale
    left, bottom = (0.2, 0.1) if phone else (0.3, 5.05)
    up = 1 if phone else -1  # the direction the column reads in
    s.ax.add_patch(Rectangle((left, bottom), iw, ih, facecolor="0.93", edgecolor=INK, linewidth=1.1, zorder=2))
    first = min(4, m)
    for k in range(first):  # the first patches, in reading order
        r, q = divmod(k, cols)
        s.ax.add_patch(Rectangle((left + q * pw * scale, bottom + ih - (r + 1) * ph * scale), pw * scale, ph * scale,
                                 facecolor=_tint("C2", 0.45), edgecolor="none", zorder=2))
    if max(rows, cols) <= 32:
        for r in range(1, rows):
            s.ax.plot([left, left + iw], [bottom + r * ph * scale] * 2, color="0.45", lw=0.6, zorder=3)
        for q in range(1, cols):
            s.ax.plot([left + q * pw * scale] * 2, [bottom, bottom + ih], color="0.45", lw=0.6, zorder=3)
    grid = "\n" if phone else "; "  # on a phone, the patch's size on a line of its own
    s.text(left + iw + 0.15, bottom + ih / 2,
           f"image $c \\times h \\times w$\n$= {c} \\times {H} \\times {W}$\npatch size $p = {ph}$"
           + ("" if ph == pw else f" × {pw}") + f"\n${rows} \\times {cols}$ grid"
           + grid + rf"$\mathbf{{x}}_i \in \mathbb{{R}}^{{{c * ph * pw}}}$", size=SMALL, ha="left")
    shown = _shown(m, 4 if phone else 5)
    xs = _columns(len(shown) + 1, lx - lw / 2 + 0.2, lx + lw / 2 - 0.2)
    patch_y = bottom + ih + 0.55 if phone else 4.45
    for i, x in zip(shown, xs[1:]):
        if i is None:
            s.text(x, patch_y, "⋯", size=FONT)
            continue
        s.box(x, patch_y, 0.32, 0.32, str(i), role="embed" if i <= first else "data", size=SMALL - 1)
    s.text(xs[0], patch_y, f"$m = {m}$", size=SMALL)
    image_edge = bottom + ih if phone else bottom
    # the arrows through the rows of patches and tokens pass between two of them
    via = (xs[-2] + xs[-3]) / 2 if phone and len(xs) > 2 else lx
    s.arrow((left + iw / 2, image_edge), (left + iw / 2, patch_y - up * 0.25))
    proj = s.box(lx, patch_y + up * 0.7, lw, 0.42, rf"linear $\mathbf{{E}}$: ${c * ph * pw} \to {d}$", role="embed",
                 size=SMALL)
    s.arrow((via, patch_y + up * 0.16), (via, proj.bottom) if phone else proj.at("top"))
    token_y = proj.cy + up * 0.7
    # a subscript is drawn at 0.7 of its label: at 9.7 pt, 9.4 px high on a phone
    token_size = SMALL - 0.8 if phone else SMALL - 1.5
    for i, x in zip(shown, xs[1:]):
        if i is None:
            s.text(x, token_y, "⋯", size=FONT)
            continue
        # 0.44 wide: "x_36 E" and "<cls>" fill their boxes once enlarged for a phone
        s.box(x, token_y, 0.46 if phone else 0.44, 0.36, rf"$\mathbf{{x}}_{{{i}}}\mathbf{{E}}$", role="embed",
              size=token_size)
    if pool == "cls":
        s.box(xs[0] - 0.03, token_y, 0.54, 0.36, "<cls>", role="output", size=token_size)
    s.arrow((via, proj.top) if phone else proj.at("bottom"), (via, token_y - up * 0.19))
    pos = s.box(lx, token_y + up * 0.75, lw, 0.5,
                "+ learned positions\n" + rf"$\mathbf{{E}}_{{\mathrm{{pos}}}}$: $({tokens}, {d})$",
                role="embed", size=SMALL)
    s.arrow((via, token_y + up * 0.19), (via, pos.bottom) if phone else pos.at("top"))

    # Right column (on a phone, above), bottom up: the encoder blocks, then the head.
    rx, rw = (lx, 2.1) if phone else (4.6, 2.2)
    rail = rx + rw / 2 + 0.17
    if phone:
        start = pos.top + 0.5
        s.arrow(pos.at("top"), (rx, start))
        s.text(rx + 0.12, (pos.top + start) / 2, rf"$\mathbf{{Z}}_0$: $({tokens}, {d})$", size=SMALL, color=MUTED,
               ha="left")
    else:
        start = 0.65
        s.path([pos.at("bottom"), (lx, 0.4), (rx, 0.4), (rx, start)])
        s.text((lx + rx) / 2, 0.23, rf"$\mathbf{{Z}}_0$: $({tokens}, {d})$", size=SMALL, color=MUTED)
    top, _ = _residual_block(s, rx, rw, start, [(f"multi-head attention\n$h = {heads}$ heads", "attention"),
                                                (f"MLP (GELU)\n${d} \\to {d_mlp} \\to {d}$", "ffn")],
                             rail, pre_norm=True)
    s.repeat(rx - rw / 2 - 0.1, start - 0.05, rail + 0.08, top - 0.05, N, side="right")
    summary = "<cls> output" if pool == "cls" else "mean over patches"
    pick = s.box(rx, top + 0.4, rw, 0.42, summary + rf" $\in \mathbb{{R}}^{{{d}}}$", size=SMALL)
    s.arrow((rx, top), pick.at("bottom"))
    head = s.box(rx, pick.top + 0.45, rw, 0.42, f"norm + linear: ${d} \\to {classes}$", role="ffn", size=SMALL)
    s.arrow(pick.at("top"), head.at("bottom"))
    scores = s.box(rx, head.top + 0.45, rw, 0.42, f"{classes} class scores", role="output", size=SMALL)
    s.arrow(head.at("top"), scores.at("bottom"))
    s.fit_height(scores.top + 0.1 if phone else max(scores.top, bottom + ih) + 0.2)
    return s.done(f"Diagram of the vision Transformer: an image of {H} by {W} pixels cut into patches of {ph} by {pw}, each embedded in {d} features with a position embedding, {N} Transformer encoder blocks with {heads} heads and an MLP of {d_mlp} units, then a head giving {classes} class scores from the {pool} vector",
                  phone=None if phone else functools.partial(_vit, H, W, ph, pw, d, heads, d_mlp, N, c, classes, pool,
                                                             phone=True))


# --------------------------------------------------------------------------------------
# Chapter 9: three pretraining modes
# --------------------------------------------------------------------------------------

def _pretraining_masks(config, seq_len: int, target_len: int) -> dict[str, np.ndarray]:
    """The masks the three chapter-9 models build (their ``attention_masks``), for one unpadded example.

    The models are made on the ``meta`` device (no memory, no random numbers):
    only their mask construction runs, on token ids that hold no ``<pad>``.
    """
    token = 0 if config.pad_id != 0 else 1
    if token >= config.vocab_size:
        raise ValueError("the vocabulary needs a token besides <pad> to draw a mask, "
                         f"got vocab_size={config.vocab_size}")
    ids = torch.full((1, seq_len), token)
    targets = torch.full((1, target_len), token)
    with torch.device("meta"):
        bert, t5, gpt = EncoderOnlyLM(config), EncoderDecoderLM(config), DecoderOnlyLM(config)
    t5_masks = t5.attention_masks(ids, targets)
    as_array = lambda mask: mask[0].numpy().astype(bool)  # noqa: E731
    combined = np.zeros((seq_len + target_len, seq_len + target_len), dtype=bool)
    combined[:seq_len, :seq_len] = as_array(t5_masks["encoder self-attention"])
    combined[seq_len:, :seq_len] = as_array(t5_masks["cross-attention"])
    combined[seq_len:, seq_len:] = as_array(t5_masks["decoder self-attention"])
    return {"bert": as_array(bert.attention_masks(ids)["encoder self-attention"]), "t5": combined,
            "gpt": as_array(gpt.attention_masks(ids)["decoder self-attention"])}


def pretraining_modes_diagram(config=None, seq_len: int = 6, target_len: int = 4):
    """Chapter 9: BERT (encoder-only), T5 (encoder–decoder) and GPT (decoder-only) side by side, each with
    the attention mask its model builds.

    ``config`` is the :class:`~attention_book.models.language_models.LMConfig` the three models share
    (``None``: the chapter's CI sizes, d = 64, 4 heads, 2 blocks, FFN 128, with the
    vocabulary left as |V|). The masks come from the models' own
    ``attention_masks`` for a ``seq_len``-token input (T5: ``seq_len`` inputs and
    ``target_len`` targets, drawn as one matrix: encoder self-attention top left,
    cross-attention bottom left, causal decoder self-attention bottom right). A
    filled cell (row = query, column = key) means "may attend". Returns the figure.
    """
    if config is None:
        config, vocab = LMConfig(vocab_size=2, num_hiddens=64, num_heads=4, num_blks=2, ffn_num_hiddens=128), "|V|"
    elif isinstance(config, LMConfig):
        vocab = _fmt(config.vocab_size)
    else:
        raise ValueError(f"config must be a models.language_models.LMConfig or None, got {type(config).__name__}")
    n = _check_at_most("seq_len", seq_len, 10, why="to keep the mask cells readable")
    T = _check_at_most("target_len", target_len, 6, why="to keep the mask cells readable")
    if n > config.max_len or T > config.max_len:
        raise ValueError(f"seq_len={n} and target_len={T} must fit the models' max_len={config.max_len}")
    masks = _pretraining_masks(config, n, T)
    return _pretraining_modes(config, vocab, n, T, masks)


_PRETRAINING_CAPTIONS = {"bert": "every token sees\nevery token",
                         "t5": "encoder: all inputs;\ndecoder: its past + all inputs",
                         "gpt": "every token sees\nits past only"}


def _pretraining_stack(s: _Sketch, key: str, cx: float, width: float, N: int, d: int, vocab: str,
                       rise: float = 0.0) -> None:
    """One model's stack, embedding to output head, centred at ``cx`` (T5: its two stacks side by
    side), its embedding at height 3.33 + ``rise``."""
    if key == "t5":
        ex, dx, w = cx - 0.6, cx + 0.6, 1.05
        for x, what in ((ex, "inputs"), (dx, "targets")):
            # on two lines: side by side, one line each ran together in a phone's larger text
            s.box(x, 3.33 + rise, w, 0.5, f"embed\n{what}", role="embed", size=SMALL - 1)
        # "block × N" on the second line: "N × encoder" on one ran over its box on a phone
        enc = s.box(ex, 4.05 + rise, w, 0.6, f"encoder\nblock × {N}", role="attention", size=SMALL - 1)
        dec = s.box(dx, 4.05 + rise, w, 0.6, f"decoder\nblock × {N}", role="attention", size=SMALL - 1)
        for x, box in ((ex, enc), (dx, dec)):
            s.arrow((x, 3.58 + rise), box.at("bottom"))
        s.arrow(enc.at("right"), dec.at("left"), color=_ROLES["attention"])
        # the task and the projection on two lines: on one they ran over the box on a phone
        head = s.box(dx, 4.78 + rise, w, 0.5, f"spans:\n${d} \\to$ {vocab}", role="output", size=SMALL - 1)
        s.arrow(dec.at("top"), head.at("bottom"))
    else:
        emb = s.box(cx, 3.35 + rise, width, 0.4, "embed tokens", role="embed", size=SMALL - 1)
        kind = "encoder" if key == "bert" else "decoder"
        detail = "bidirectional" if key == "bert" else "causal"
        block = s.box(cx, 4.05 + rise, width, 0.6, f"{N} × {kind} block\n{detail}", role="attention",
                      size=SMALL - 1)
        s.arrow(emb.at("top"), block.at("bottom"))
        task = "masked" if key == "bert" else "next token"
        head = s.box(cx, 4.78 + rise, width, 0.5, f"{task}:\n${d} \\to$ {vocab}", role="output", size=SMALL - 1)
        s.arrow(block.at("top"), head.at("bottom"))


def _pretraining_mask(s: _Sketch, key: str, mask, cx: float, top: float, cell: float, n: int, T: int) -> _Box:
    """One model's mask, centred at ``cx`` under ``top`` (T5's split into inputs and targets)."""
    rows, cols = mask.shape
    grid = s.matrix(cx - cols * cell / 2, top - rows * cell, mask, cell)
    if key == "t5":
        split = grid.left + n * cell
        s.ax.plot([split, split], [grid.bottom, grid.top], color=INK, lw=1.2, zorder=4)
        s.ax.plot([grid.left, grid.right], [grid.top - n * cell] * 2, color=INK, lw=1.2, zorder=4)
        s.text(grid.left + n * cell / 2, grid.top + 0.12, "inputs", size=SMALL - 1.5, color=MUTED)
        s.text(split + T * cell / 2, grid.top + 0.12, "targets", size=SMALL - 1.5, color=MUTED)
        s.text(grid.left - 0.12, grid.top - n * cell / 2, "inputs", size=SMALL - 1.5, color=MUTED, rotation=90)
        s.text(grid.left - 0.12, grid.bottom + T * cell / 2, "targets", size=SMALL - 1.5, color=MUTED,
               rotation=90)
    return grid


def _pretraining_modes(config, vocab: str, n: int, T: int, masks: dict, phone: bool = False):
    """:func:`pretraining_modes_diagram`'s drawing: BERT, T5 and GPT side by side, or, for a phone
    (``phone``), one under another, BERT's and GPT's masks beside their stacks, T5's under its two."""
    d, N = config.num_hiddens, config.num_blks
    norm = "pre-norm" if config.norm_first else "post-norm"
    cell = min(0.16, 1.6 / (n + T))  # T5's matrix, (n + T) cells a side, fits in 1.6 inches
    blocks = f"{N} block{'s' if N > 1 else ''} per stack"
    sizes = (f"shared sizes: $d = {d}$, $h = {config.num_heads}$ heads,", f"FFN {config.ffn_hiddens}, {blocks}, {norm}")
    legend = ("mask: row = query, column = key;", "a filled cell = may attend")
    alt = f"Diagram of three pretraining modes side by side with their attention masks: BERT, encoder-only, every token attends to every token; T5, encoder-decoder, with cross-attention and a causal decoder; GPT, decoder-only, each token attends to itself and earlier tokens; width {d}, {N} blocks"
    if phone:
        return _pretraining_modes_phone(masks, d, N, vocab, n, T, cell, sizes, legend, alt)
    s = _Sketch(6.6, 6.0)
    s.text(3.3, 5.85, " ".join(sizes), size=SMALL, color=MUTED)
    columns = [("bert", 1.05, 1.8, "BERT", "encoder-only"), ("t5", 3.35, 2.3, "T5", "encoder–decoder"),
               ("gpt", 5.65, 1.8, "GPT", "decoder-only")]
    matrix_top = 2.75
    for key, cx, width, name, mode in columns:
        s.text(cx, 5.45, name, size=TITLE, bold=True)
        s.text(cx, 5.15, mode, size=SMALL, va="baseline")
        _pretraining_stack(s, key, cx, width, N, d, vocab)
        _pretraining_mask(s, key, masks[key], cx, matrix_top, cell, n, T)
        s.text(cx, matrix_top - 1.72, _PRETRAINING_CAPTIONS[key], size=SMALL - 1, va="top")
    s.text(3.3, 0.3, " ".join(legend), size=SMALL, color=MUTED)
    return s.done(alt, phone=functools.partial(_pretraining_modes, config, vocab, n, T, masks, phone=True))


def _pretraining_modes_phone(masks: dict, d: int, N: int, vocab: str, n: int, T: int, cell: float,
                             sizes: tuple, legend: tuple, alt: str):
    """The phone's drawing, 3.3 inches wide, placed from the bottom up: the mask's legend, GPT, T5,
    BERT, the shared sizes; each text as large in points as on the desktop."""
    s = _Sketch(3.3, 14.0, phone=True)
    s.text(0.1, 0.1, "\n".join(legend), size=SMALL, color=MUTED, ha="left", va="bottom")
    y = 0.75  # the bottom of the next panel

    def side_by_side(key: str, name: str, mode: str) -> None:
        """BERT or GPT: the stack on the left, the mask and its caption on the right."""
        nonlocal y
        rows = masks[key].shape[0]
        # the stack's embedding at y, its head's top 1.68 above it; the mask's caption under the mask
        rise = y + 0.2 - 3.15
        _pretraining_stack(s, key, 0.95, 1.7, N, d, vocab, rise=rise)
        stack_top = 4.78 + rise + 0.25
        top = max(stack_top, y + 0.55 + rows * cell)
        _pretraining_mask(s, key, masks[key], 2.6, top, cell, n, T)
        s.text(2.6, top - rows * cell - 0.08, _PRETRAINING_CAPTIONS[key], size=SMALL - 1, va="top")
        s.text(0.1, top + 0.3, name, size=TITLE, bold=True, ha="left", va="baseline")
        s.text(0.85, top + 0.3, mode, size=SMALL, ha="left", va="baseline")
        y = top + 0.75

    side_by_side("gpt", "GPT", "decoder-only")
    # T5: its caption, its mask (labels on its left and top), then its two stacks above
    s.text(1.65, y, _PRETRAINING_CAPTIONS["t5"], size=SMALL - 1, va="bottom")
    top = y + 0.5 + (n + T) * cell
    _pretraining_mask(s, "t5", masks["t5"], 1.75, top, cell, n, T)
    rise = top + 0.45 - 3.08
    _pretraining_stack(s, "t5", 1.65, 2.3, N, d, vocab, rise=rise)
    top = 4.78 + rise + 0.25
    s.text(0.1, top + 0.3, "T5", size=TITLE, bold=True, ha="left", va="baseline")
    s.text(0.55, top + 0.3, "encoder–decoder", size=SMALL, ha="left", va="baseline")
    y = top + 0.75
    side_by_side("bert", "BERT", "encoder-only")
    s.text(0.1, y - 0.05, "\n".join(sizes), size=SMALL, color=MUTED, ha="left", va="bottom")
    s.fit_height(y + 0.55)
    return s.done(alt)
