"""Chapter 1's live view: a soft lookup of any name the reader types, at any temperature.

The chapter's explorer shows its six queries only. Here the page computes the soft lookup
itself: the Dice overlap of the padded character pairs (:func:`lookup.string_similarity`,
case ignored), the weights ``softmax(a / T)`` over the six keys and the pooled one-hot
values, a probability for each first name. The score is a few lines of string code, so the
page's module (``book/_static/live/ch01.mjs``) writes it in JavaScript from the keys and
values this view exports; no model file is needed.
"""

from __future__ import annotations

import html
import math

from ..experiments import lookup
from .live import LiveView

__all__ = ["SoftLookupView", "ch01_live_view"]


class SoftLookupView(LiveView):
    """Chapter 1's live view (see the module docstring)."""

    name = "ch01.soft_lookup"
    module = "ch01.mjs"
    temperature_range = (0.01, 10.0)

    def __init__(self, database=lookup.NAME_DATABASE, query: str = "Smolar", temperature: float = 0.3):
        self.database = tuple((str(k), str(v)) for k, v in database)
        self.keys = [k for k, _ in self.database]
        self.values = [v for _, v in self.database]
        self.defaults = {"query": query, "temperature": float(temperature)}
        self.lookup(query, temperature)  # the defaults must be valid

    def lookup(self, query: str, temperature: float) -> dict:
        """The package's answer: each key's score and weight, and the pooled value
        (``{first name: probability}``, most likely first, as :func:`lookup.soft_lookup`)."""
        scores = lookup.similarity_scores([query], self.keys)[0]
        weights = lookup.lookup_weights([query], self.keys, temperature)[0]
        return {
            "scores": [float(s) for s in scores],
            "weights": [float(w) for w in weights],
            "pooled": lookup.soft_lookup(query, self.database, temperature),
        }

    def said(self, query: str, temperature: float, pooled: dict | None = None) -> str:
        """The sentence the page's live region says: every first name with weight of at least 0.005.
        ``pooled``: the lookup's pooled value when the caller has it (else it is computed)."""
        if pooled is None:
            pooled = self.lookup(query, temperature)["pooled"]
        shown = [f"{name} {p:.2f}" for name, p in pooled.items() if p >= 0.005]
        return f"soft lookup of '{query.strip()}' at T = {temperature:.3g}: " + ", ".join(shown)

    # --- LiveView ---

    def data(self) -> dict:
        return {
            "keys": self.keys,
            "values": self.values,
            "temperature_range": list(self.temperature_range),
            "defaults": self.defaults,
        }

    def _table(self, query: str, temperature: float) -> str:
        got = self.lookup(query, temperature)
        rows = "".join(
            f"<tr><th scope=\"row\">{html.escape(k)}</th><td>{html.escape(v)}</td>"
            f"<td>{s:.3f}</td><td>{w:.3f}</td></tr>"
            for k, v, s, w in zip(self.keys, self.values, got["scores"], got["weights"])
        )
        return (
            f"<table class=\"ab-live-table\"><caption>{html.escape(self.said(query, temperature, got['pooled']))}</caption>"
            "<thead><tr><th scope=\"col\">key</th><th scope=\"col\">value</th>"
            "<th scope=\"col\">score a</th><th scope=\"col\">weight α</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )

    def widget(self):
        import ipywidgets as widgets
        from IPython.display import HTML, display

        d = self.defaults
        low, high = (math.log10(t) for t in self.temperature_range)

        def show(query, temperature):
            if not query.strip():
                print("type a name")
                return
            display(HTML(self._table(query, temperature)))

        return widgets.interactive(
            show,
            query=widgets.Text(value=d["query"], description="name", continuous_update=False),
            temperature=widgets.FloatLogSlider(
                value=d["temperature"], base=10, min=low, max=high, step=0.01, description="temperature T"
            ),
        )

    def fallback_html(self) -> str:
        d = self.defaults
        return self._table(d["query"], d["temperature"])


def ch01_live_view(**settings) -> SoftLookupView:
    """Chapter 1's live view over the chapter's database (``lookup.NAME_DATABASE``); see :class:`SoftLookupView`."""
    return SoftLookupView(**settings)
