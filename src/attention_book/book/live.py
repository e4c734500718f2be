"""Live views: one declaration, the chapter's own model running in Jupyter and in the web page.

An explorer (:func:`attention_book.explore`) shows frames drawn in advance; a
live view runs the model itself, so a reader can type any sentence, draw any
digit or stop a slider between grid points. A chapter writes one line::

    ab.live(ab.ch02_live_view(data))

- In Jupyter, JupyterLab and Colab (``ATTENTION_BOOK_EXPLORERS=live``, the
  default) this returns the view's ipywidgets form, which runs the PyTorch model.
- When the website is built (``ATTENTION_BOOK_EXPLORERS=static``) it exports
  each of the view's models, just as the notebook left them, to ONNX in the
  folder ``ATTENTION_BOOK_LIVE`` (``make book`` sets it to ``_stage/_live/live/models``,
  copied to ``_static/live/models/`` of the site), writes the data the page needs
  as ``<name>.json`` beside them, and shows a small HTML block: the view's
  precomputed frames and a script that loads ``_static/live/live.mjs``. That
  loader waits until the reader comes to the view, loads onnxruntime-web (the
  wasm build, one thread, vendored by ``scripts/vendor_js.py``), and hands the
  sessions to the view's own module (``_static/live/<module>``), which draws
  its form and runs the graphs in the page.

Opened from ``file://`` the page cannot load modules or wasm, so the frames stay
and a note says how to serve the site. The export needs the packages ``onnx``
and ``onnxscript`` (the ``dev`` extra), imported only when a website is built;
``onnxruntime``, used by :func:`run_onnx`, is needed only by the tests.
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import logging
import re
import warnings
from pathlib import Path
from typing import Any

from ..core.config import LIVE_ENV, live_dir, static_explorers  # noqa: F401  (LIVE_ENV: for tests)

__all__ = [
    "MAX_MODEL_BYTES",
    "SERVE_COMMAND",
    "LiveView",
    "figure_img",
    "export_onnx",
    "live",
    "run_onnx",
]

"""The folder where a website build writes the live views' models and data."""

MAX_MODEL_BYTES = 2_000_000
"""The largest model file a page may fetch (2 MB)."""

SERVE_COMMAND = "python -m http.server -d _build/html"

_NAME = re.compile(r"^ch\d\d\.[a-z0-9_]+$")
_MODULE = re.compile(r"^[a-z0-9_]+\.mjs$")
_MODEL = re.compile(r"^[a-z0-9_]+$")

# (folder, view name, model name) of every graph exported by this process: a notebook
# that shows a view twice exports its graphs once.
_EXPORTED: dict[tuple[str, str, str], dict] = {}


class LiveView:
    """One live view. A chapter's view subclasses this and fills in the five parts.

    ``name`` is ``chNN.what`` (unique in the book; the page's files are named after it);
    ``module`` is the view's JavaScript file under ``book/_static/live/`` (``.mjs``),
    which exports ``mount(root, ctx)``.
    """

    name: str = ""
    module: str = ""
    # Built as the page loads (its data and module; the model runtime still waits for the
    # reader), so that a keyboard user who Tabs past it before scrolling meets its controls.
    build_on_load: bool = False

    def models(self) -> dict[str, tuple]:
        """The graphs the page runs: ``{model: (module, example_args, dynamic_shapes)}``.

        A fourth item, a list of output names, is optional. Each module returns
        plain tensors (attention weights as extra outputs); ``dynamic_shapes`` is
        as :func:`torch.export.export` takes it, or None for fixed shapes.
        """
        return {}

    def data(self) -> dict:
        """JSON-able data the page needs: vocabularies, example inputs, settings."""
        return {}

    def widget(self):
        """The ipywidgets form that runs the PyTorch model (Jupyter, Colab)."""
        raise NotImplementedError(f"{type(self).__name__} has no widget()")

    def fallback_html(self) -> str:
        """What the page shows before the model runs, and from ``file://``: precomputed frames."""
        return ""


@contextlib.contextmanager
def _quiet():
    """The exporter's warnings and progress lines would print under the notebook cell."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


PHONE_MEDIA = "(max-width: 600px)"  # where a figure's phone copy replaces it (= book_site.PHONE_MEDIA)


def figure_img(fig, alt: str, dpi: int = 100, style: str = "") -> str:
    """A matplotlib figure as an inline PNG ``<img>`` (closed after drawing): a view's fallback frames.

    Legible on a phone (issue 36) as the book's figures are: where the figure's text would shrink
    below 9 px in a phone's column, the ``<img>`` sits in a ``<picture>`` whose phone source is the
    figure's phone copy (:func:`attention_book.core.plot.phone_png`: its plots restacked for a
    390 px column); a figure without one is never shown narrower than the width at which its
    smallest text is 9 px (``--ab-phone-width``; book.css lets the fallback scroll sideways).
    """
    import base64
    import io

    import matplotlib.pyplot as plt

    from ..core.plot import page_png_metadata, phone_png
    from .explorer import phone_width

    fig.set_dpi(dpi)  # the copy's text is measured at the dpi the page shows
    try:
        fig.canvas.draw()  # lays out the tick labels, which the text size counts
        phone = phone_png(fig)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", metadata=page_png_metadata(fig, dpi))
    finally:
        plt.close(fig)
    png = buffer.getvalue()
    styles = [style] if style else []
    width = phone_width(phone if phone is not None else png)
    if width:
        styles.append(f"--ab-phone-width: {width}px")
    data = base64.b64encode(png).decode()
    style = f' style="{"; ".join(styles)}"' if styles else ""
    img = f'<img src="data:image/png;base64,{data}"{style} alt="{alt}">'
    if phone is None:
        return img
    return (f'<picture class="ab-phone-picture"><source media="{PHONE_MEDIA}" '
            f'srcset="data:image/png;base64,{base64.b64encode(phone).decode()}">{img}</picture>')


def _strip_debug_info(path: Path) -> None:
    """Drop what the exporter records for debugging (each node's source location and stack in
    ``metadata_props`` and ``doc_string``): about half of a small model's file, and no part of
    the computation. Every reader downloads the file."""
    import onnx

    model = onnx.load(str(path))
    model.doc_string = ""
    graphs = [model.graph] + [f for f in model.functions]
    for graph in graphs:
        for node in graph.node:
            del node.metadata_props[:]
            node.doc_string = ""
    onnx.save(model, str(path))


def export_onnx(
    module, args: tuple, path, dynamic_shapes=None, output_names=None
) -> int:
    """Export ``module(*args)`` to one ONNX file at ``path`` (weights inside); returns its size in bytes.

    Uses ``torch.onnx.export(..., dynamo=True, external_data=False)``. Refuses
    (ValueError, and no file left behind) a file over :data:`MAX_MODEL_BYTES`:
    every reader downloads it.
    """
    import torch

    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as err:
        raise ImportError(
            "exporting a live view needs the packages onnx and onnxscript: "
            "pip install onnx onnxscript (or `make venv`, whose dev extra has them)"
        ) from err
    if not isinstance(args, tuple):
        raise TypeError(
            f"example args must be a tuple of tensors, got {type(args).__name__}"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    was_training = getattr(module, "training", False)
    module.eval()
    try:
        with _quiet(), torch.no_grad():
            torch.onnx.export(
                module,
                args,
                str(path),
                dynamo=True,
                external_data=False,
                dynamic_shapes=dynamic_shapes,
                output_names=output_names,
                verbose=False,
            )
    finally:
        module.train(was_training)
    _strip_debug_info(path)
    size = path.stat().st_size
    if size > MAX_MODEL_BYTES:
        path.unlink()
        raise ValueError(
            f"{path.name}: the exported model is {size / 1e6:.2f} MB; a live view's model "
            f"may be at most {MAX_MODEL_BYTES / 1e6:.0f} MB (every reader downloads it)"
        )
    return size


def run_onnx(path, feeds: dict[str, Any]) -> list:
    """Run an exported graph with onnxruntime (PyPI) on CPU; returns its outputs as NumPy arrays."""
    import numpy as np
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, {k: np.asarray(v) for k, v in feeds.items()})


def _check(view) -> LiveView:
    if not isinstance(view, LiveView):
        raise TypeError(
            f"ab.live needs a LiveView (a chapter's view), got {type(view).__name__}"
        )
    if not isinstance(view.name, str) or not _NAME.match(view.name):
        raise ValueError(
            f"a live view's name must look like 'ch02.pooling', got {view.name!r}"
        )
    if not isinstance(view.module, str) or not _MODULE.match(view.module):
        raise ValueError(
            f"a live view's module must be a file name like 'ch02.mjs', got {view.module!r}"
        )
    return view


def _export_all(view: LiveView, folder: Path | None) -> dict:
    """Export the view's graphs and write ``<name>.json``; returns its manifest."""
    models = {}
    for model, spec in view.models().items():
        if not _MODEL.match(model):
            raise ValueError(
                f"{view.name}: model names are lower-case words, got {model!r}"
            )
        module, args, dynamic_shapes, *rest = spec
        file = f"{view.name}.{model}.onnx"
        key = (str(folder), view.name, model)
        if folder is None:
            models[model] = {"file": file, "bytes": None}
            continue
        if key not in _EXPORTED:
            size = export_onnx(
                module, args, folder / file, dynamic_shapes, rest[0] if rest else None
            )
            _EXPORTED[key] = {"file": file, "bytes": size}
        models[model] = _EXPORTED[key]
    manifest = {
        "name": view.name,
        "module": view.module,
        "models": models,
        "data": view.data(),
    }
    if folder is not None:
        try:
            text = json.dumps(manifest, allow_nan=False, separators=(",", ":"))
        except ValueError as err:
            raise ValueError(
                f"{view.name}: data() holds a NaN or an infinity, which JSON cannot carry"
            ) from err
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{view.name}.json").write_text(text, encoding="utf-8")
    return manifest


FILE_NOTE = (
    "The live model runs only when the site is served over http (browsers refuse to load "
    f"its files from file://). To run it: {SERVE_COMMAND}, then open http://localhost:8000/."
)

# Finds live.mjs beside the page's Sphinx files (data-content_root, or documentation_options.js),
# so the same block works on every page; from file:// it leaves the frames and shows the note.
_BOOT_JS = """
(function (root) {
  var status = root.querySelector(".ab-live-status");
  if (location.protocol === "file:") {
    root.setAttribute("data-state", "file");
    status.textContent = root.getAttribute("data-file-note");
    return;
  }
  var base = document.documentElement.getAttribute("data-content_root");
  var opts = document.querySelector('script[src*="documentation_options.js"]');
  var url = base !== null ? new URL(base + "_static/live/live.mjs", location.href)
    : new URL("live/live.mjs", opts ? opts.src : new URL("_static/", location.href));
  import(url.href).then(function (m) { m.boot(root); }).catch(function (err) {
    root.setAttribute("data-state", "error");
    status.textContent = "The live model could not be loaded (" + err.message + "); the frames stay.";
  });
})(document.currentScript.parentElement);
"""


class LivePage:
    """The website's form of a live view: the HTML block a notebook cell shows."""

    def __init__(self, view: LiveView, manifest: dict):
        self.view = view
        self.manifest = manifest
        self.sizes = {m: info["bytes"] for m, info in manifest["models"].items()}

    def _repr_html_(self) -> str:
        attrs = (
            f'class="ab-live" data-live="{html.escape(self.view.name)}" '
            f'data-module="{html.escape(self.view.module)}" data-state="waiting" '
            f'data-file-note="{html.escape(FILE_NOTE)}"'
            + (' data-build="load"' if self.view.build_on_load else "")
        )
        return (
            f"<div {attrs}>"
            f'<div class="ab-live-fallback">{self.view.fallback_html()}</div>'
            '<p class="ab-live-status" role="status">This view runs the chapter\'s model in your browser; '
            "it starts when you scroll to it or touch it.</p>"
            f"<script>{_BOOT_JS}</script></div>"
        )

    def __repr__(self) -> str:
        sizes = ", ".join(
            f"{m} {b / 1e3:.0f} kB" if b else f"{m} (not written)"
            for m, b in self.sizes.items()
        )
        return f"<live view {self.view.name}: {sizes or 'no models'}>"


def live(view: LiveView):
    """Show a live view; see the module docstring.

    Returns the view's ipywidgets form in a notebook, or, when the website is
    built, a :class:`LivePage` after exporting the view's models to
    ``ATTENTION_BOOK_LIVE`` (nothing is written when it is unset).
    """
    view = _check(view)
    if not static_explorers():
        return view.widget()
    return LivePage(view, _export_all(view, live_dir()))
