"""Chapter 2's live view: Nadaraya–Watson pooling with any width, any number of points, any query.

The chapter's explorer shows a grid of widths and three data sizes drawn in
advance. Here the page computes the pooling itself, with the package's
:func:`attention_book.nadaraya_watson` exported to ONNX (one small graph per
kernel), so the width, the number of points and the query move continuously.

The training points are the chapter's 40 (``ab.make_kernel_data(40)``) followed by
160 more from the same distribution (the book's seed + 1), each group in a fixed
shuffled order: ``n`` points are the first ``n`` of that list. So ``n = 40`` is
exactly the chapter's data, fewer points are a spread-out subset of it, and
moving the slider adds or removes points instead of drawing new data.
"""

from __future__ import annotations


import torch
from torch import nn

import attention_book as ab

from .live import LiveView, figure_img

__all__ = ["PoolingView", "ch02_live_view"]

_QUERY_GRID = 251  # points of the estimate curve over [0, x_max]
_WIDTH = 9.0  # inches: the page's column, as the chapter's figures


class _Pooling(nn.Module):
    """The graph the page runs: ``ab.nadaraya_watson`` with the width as an input.

    Every kernel depends on ``|q - k| / σ`` only, so dividing keys and queries by
    ``σ`` and pooling at width 1 is the same estimator, with ``σ`` a tensor the page
    can feed rather than a constant frozen into the graph.
    """

    def __init__(self, kernel: str):
        super().__init__()
        self.kernel = kernel

    def forward(self, keys, values, queries, sigma):
        return ab.nadaraya_watson(
            keys / sigma, values, queries / sigma, self.kernel, 1.0
        )


class PoolingView(LiveView):
    """Chapter 2's live view (see the module docstring)."""

    name = "ch02.pooling"
    module = "ch02.mjs"
    build_on_load = True  # a small view: its controls are there for Tab before the reader scrolls

    def __init__(
        self,
        data,
        extra: int = 160,
        seed: int | None = None,
        sigma: float = 0.5,
        n: int = 40,
        query: float = 2.5,
        kernel: str = "gaussian",
    ):
        if not all(hasattr(data, a) for a in ("x_train", "y_train", "x_val", "y_val")):
            raise TypeError(
                f"data must be the chapter's ab.make_kernel_data(...), got {type(data).__name__}"
            )
        more = (
            ab.make_kernel_data(n_train=extra, seed=ab.resolve_seed(seed, 1))
            if extra
            else None
        )
        gen = torch.Generator().manual_seed(ab.resolve_seed(seed, 2))
        first = torch.randperm(len(data.x_train), generator=gen)
        xs, ys = [data.x_train[first]], [data.y_train[first]]
        if more is not None:
            later = torch.randperm(extra, generator=gen)
            xs.append(more.x_train[later])
            ys.append(more.y_train[later])
        self.x = torch.cat(xs).float()
        self.y = torch.cat(ys).float()
        self.x_max = float(data.x_val[-1] + (data.x_val[1] - data.x_val[0]))
        self.x_val, self.y_val = (
            data.x_val.float(),
            data.y_val.float(),
        )  # the noise-free target
        self.defaults = {
            "kernel": kernel,
            "sigma": float(sigma),
            "n": int(n),
            "query": float(query),
        }
        self.estimate(**self.defaults)  # the defaults must be valid

    @property
    def n_max(self) -> int:
        return len(self.x)

    def points(self, n: int):
        """The first ``n`` training points and their labels."""
        if isinstance(n, bool) or not isinstance(n, int) or not 2 <= n <= self.n_max:
            raise ValueError(f"n must be an int from 2 to {self.n_max}, got {n!r}")
        return self.x[:n], self.y[:n]

    def curve_queries(self) -> torch.Tensor:
        return torch.linspace(0, self.x_max, _QUERY_GRID)

    def estimate(self, n: int, sigma: float, query: float, kernel: str = "gaussian"):
        """The package's answer: ``(estimate at the query, its weights over the n points)``."""
        x, y = self.points(n)
        y_hat, weights = ab.nadaraya_watson(
            x, y, torch.tensor([float(query)]), kernel, float(sigma)
        )
        return float(y_hat[0]), weights[0]

    # --- LiveView ---

    def models(self):
        x, y = self.points(40)
        args = (x, y, self.curve_queries()[:50], torch.tensor(0.5))
        n = torch.export.Dim("n", min=2, max=4096)
        q = torch.export.Dim("q", min=2, max=4096)
        shapes = ({0: n}, {0: n}, {0: q}, None)
        return {
            k: (_Pooling(k), args, shapes, ["estimate", "weights"])
            for k in ab.KERNEL_NAMES
        }

    def data(self) -> dict:
        return {
            "x": [float(v) for v in self.x],
            "y": [float(v) for v in self.y],
            "x_max": self.x_max,
            "x_val": [float(v) for v in self.x_val],
            "y_val": [float(v) for v in self.y_val],
            "curve_points": _QUERY_GRID,
            "kernels": list(ab.KERNEL_NAMES),
            "sigma_range": [0.01, 3.16],
            "defaults": self.defaults,
        }

    def figure(
        self,
        n: int = 40,
        sigma: float = 0.5,
        query: float = 2.5,
        kernel: str = "gaussian",
    ):
        """The fit over [0, x_max] with the query's weights below (the notebook's form of the view)."""
        import matplotlib.pyplot as plt

        x, y = self.points(n)
        grid = self.curve_queries()
        curve, _ = ab.nadaraya_watson(x, y, grid, kernel, float(sigma))
        at, weights = self.estimate(n, sigma, query, kernel)
        fig, (top, bottom) = plt.subplots(
            2,
            1,
            figsize=(_WIDTH, 4.6),
            sharex=True,
            layout="constrained",
            gridspec_kw={"height_ratios": [2, 1]},
        )
        top.scatter(
            x.numpy(),
            y.numpy(),
            s=10 + 200 * weights.numpy(),
            alpha=0.5,
            label="training points",
        )
        top.plot(
            self.x_val.numpy(),
            self.y_val.numpy(),
            "--",
            color="tab:purple",
            label="2 sin x + x",
        )
        top.plot(grid.numpy(), curve.numpy(), color="tab:red", label="estimate")
        top.axvline(query, color="0.4", linewidth=1)
        top.set_ylabel("y")
        top.set_title(
            f"{kernel}, σ={sigma:.3g}, n={n}: estimate {at:.3f} at x={query:.2f}"
        )
        top.legend(loc="upper left", fontsize=8)
        bottom.vlines(x.numpy(), 0, weights.numpy(), color="tab:red")
        bottom.axvline(query, color="0.4", linewidth=1)
        bottom.set_ylabel("weight")
        bottom.set_xlabel("x (the query is the grey line)")
        return fig

    def widget(self):
        import ipywidgets as widgets
        import matplotlib.pyplot as plt

        d = self.defaults

        def show(kernel, sigma, n, query):
            self.figure(n, sigma, query, kernel)
            plt.show()

        return widgets.interactive(
            show,
            kernel=widgets.Dropdown(
                options=list(ab.KERNEL_NAMES), value=d["kernel"], description="kernel"
            ),
            sigma=widgets.FloatLogSlider(
                value=d["sigma"],
                base=10,
                min=-2,
                max=0.5,
                step=0.01,
                description="width σ",
            ),
            n=widgets.IntSlider(
                value=d["n"], min=2, max=self.n_max, description="points"
            ),
            query=widgets.FloatSlider(
                value=d["query"],
                min=0.0,
                max=self.x_max,
                step=0.01,
                description="query x",
            ),
        )

    def fallback_html(self) -> str:
        d = self.defaults
        alt = f"Nadaraya–Watson estimate at σ={d['sigma']:g}, n={d['n']}, query x={d['query']:g}"
        return figure_img(self.figure(**d), alt, dpi=100, style="max-width:100%")


def ch02_live_view(data, **settings) -> PoolingView:
    """Chapter 2's live view over the chapter's ``data`` (``ab.make_kernel_data(40)``); see :class:`PoolingView`."""
    return PoolingView(data, **settings)
