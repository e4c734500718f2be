"""Explorers: live ipywidgets controls in a notebook, a kernel-free player on the website."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import attention_book as ab  # noqa: E402
from attention_book.core.config import EXPLORERS_ENV, FRAMES_ENV  # noqa: E402


def draw_line(slope, label):
    """A figure that depends on ``slope`` only, and a printed line that depends on both."""
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [0, slope])
    print(f"slope {slope} </script> {label}")
    return fig


def draw_plain(slope, label):
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [0, slope])


@pytest.fixture
def static(monkeypatch, tmp_path):
    monkeypatch.setenv(EXPLORERS_ENV, "static")
    monkeypatch.setenv(FRAMES_ENV, str(tmp_path / "frames"))
    return tmp_path / "frames"


def test_controls_reject_bad_declarations():
    with pytest.raises(ValueError, match="not one of the options"):
        ab.Choice(["a", "b"], value="c")
    with pytest.raises(ValueError, match="outside"):
        ab.Slider(0, 10, 1, value=11)
    with pytest.raises(ValueError, match="give grid="):
        ab.Slider(0, 100, 1, value=5)
    with pytest.raises(ValueError, match="outside"):
        ab.Slider(0, 10, 1, value=5, grid=[0, 20])
    with pytest.raises(ValueError, match="0 < min < max"):
        ab.LogSlider(0, 10, value=1)
    with pytest.raises(ValueError, match="Steps value"):
        ab.Steps([1, 2], value=3)
    with pytest.raises(ValueError, match="name must look like"):
        ab.explore(draw_plain, name="kernels", slope=ab.Steps([1, 2]))
    with pytest.raises(ValueError, match="must be ab.Choice"):
        ab.explore(draw_plain, name="ch01.x", slope=[1, 2])
    with pytest.raises(ValueError, match="at least one control"):
        ab.explore(draw_plain, name="ch01.x")


def test_grids_hold_the_default_and_stay_in_range():
    log = ab.LogSlider(0.01, 3.16, value=0.5, grid=8)
    assert 0.5 in log.points and all(0.01 <= p <= 3.16 for p in log.points)
    ratios = [b / a for a, b in zip(log.points, log.points[1:])]
    assert max(ratios) / min(ratios) < 1.02, "log grid steps are even in the logarithm"
    lin = ab.Slider(0, 100, 10, value=30, grid=3)
    assert lin.points == (0, 30, 100)
    assert all(isinstance(p, int) for p in lin.points)
    assert ab.Slider(0.0, 1.0, 0.25, value=0.5).points == (0.0, 0.25, 0.5, 0.75, 1.0)
    text = ab.Text("hello", choices=["bye", "hello"])
    assert [v for _, v in text.grid()] == ["hello", "bye"]


@pytest.mark.parametrize("grid", range(2, 16))
def test_controls_offer_exactly_the_values_the_code_names(grid):
    """``grid=13`` offers 13 values, ``grid=8`` eight (issue 36: they offered 12 and 7)."""
    for low, high, value in [(0.01, 3.16, 0.5), (0.01, 10, 0.3), (0.01, 10, 0.01), (0.1, 10, 10), (1, 2, 1.7)]:
        points = ab.LogSlider(low, high, value=value, grid=grid).points
        assert len(points) == grid and value in points, (low, high, value, points)
        assert all(low <= p <= high for p in points)
    for low, high, step, value in [(0, 500, 10, 120), (0, 100, 10, 30), (5, 200, 5, 40), (0.0, 2.0, 0.1, 1.3)]:
        if grid <= round((high - low) / step) + 1:
            points = ab.Slider(low, high, step, value=value, grid=grid).points
            assert len(points) == grid and value in points and low <= points[0] <= points[-1] <= high
    assert ab.Slider(5, 200, 5, value=40, grid=[10, 40, 200]).points == (10, 40, 200)
    assert ab.Steps([1, 2, 4, 8], value=2).points == (1, 2, 4, 8)


def test_a_grid_must_hold_the_default_and_fit_the_steps():
    with pytest.raises(ValueError, match="must hold the default"):
        ab.Slider(5, 200, 5, value=45, grid=[10, 40, 200])
    with pytest.raises(ValueError, match="fewer than grid"):
        ab.Slider(0, 3, 1, value=1, grid=5)


def test_live_explorer_is_an_interactive_that_recomputes(monkeypatch):
    monkeypatch.delenv(EXPLORERS_ENV, raising=False)
    import ipywidgets as widgets

    calls = []

    def record(slope, label):
        calls.append((slope, label))

    w = ab.explore(record, name="ch01.live", slope=ab.Slider(0.0, 2.0, 0.1, value=1.0),
                   label=ab.Choice(["a", "b"], value="b"))
    assert isinstance(w, widgets.interactive)
    slider, menu = w.children[:2]
    assert isinstance(slider, widgets.FloatSlider) and isinstance(menu, widgets.Dropdown)
    w.update()
    slider.value = 1.3  # continuous values, not only the grid's
    menu.value = "a"
    assert (1.0, "b") in calls and calls[-1] == (pytest.approx(1.3), "a")


def test_static_explorer_draws_every_setting_and_records_it(static):
    player = ab.explore(draw_line, name="ch01.lines", slope=ab.Steps([1, 2, 3], value=2, label="slope"),
                        label=ab.Choice([("first", "a"), ("second", "b")], value="a", label="label"))
    assert len(player.index) == 6
    assert len(player.images) == 3, "the figure does not depend on label: one image per slope"
    assert len(player.frames) == 6, "the printed text does"
    assert plt.get_fignums() == [], "every figure the explorer drew is closed"
    record = json.loads((static / "ch01.lines.json").read_text())
    assert record["settings"] == 6 and record["images"] == 3
    assert [c["values"] for c in record["controls"]] == [["1", "2", "3"], ["first", "second"]]
    assert record["default"] == 2  # slope index 1 of 3, label index 0 of 2: 1 * 2 + 0
    for flat, (ids, text) in enumerate(player.frames[i] for i in player.index):
        assert record["digests"][flat] == ab.book.explorer.frame_digest([player.images[i] for i in ids], text)
    assert player.frames[player.index[5]][1] == "slope 3 </script> b\n", "settings run row-major, last control fastest"


def test_static_html_is_a_self_contained_accessible_player(static):
    player = ab.explore(draw_line, name="ch01.lines", slope=ab.Steps([1, 2, 3], value=2, label="slope"),
                        label=ab.Choice(["a", "b"], value="a", label="label"))
    page = player._repr_html_()
    assert page.count('type="range"') == 1 and page.count("<select") == 1
    assert re.search(r'<label for="(ab-[0-9a-f]+-0)">slope</label><input type="range" id="\1"', page)
    assert "</script> a" not in page, "printed text cannot close the player's script early"
    data = json.loads(re.search(r'class="ab-explorer-data">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    assert data["labels"] == [["1", "2", "3"], ["a", "b"]]
    first = re.search(r'<img src="data:image/png;base64,([^"]+)"', page).group(1)
    assert base64.b64decode(first) == player.images[player.frames[player.index[player.default_setting]][0][0]]
    assert "drawn when the book was built: slope 1, 2 or 3; label a or b." in page
    assert "any value" not in page, "a fixed-step control does not take any value in the notebook"
    assert 'min="0" max="2" step="1"' in page, "the slider offers the three values the code names"
    # one live region says each move (a keyboard reader heard every move twice: the slider's
    # <output>, a live region of its own, then the status line)
    assert re.findall(r"<output [^>]*>", page) == [re.search(r'<output for="ab-[0-9a-f]+-0" aria-live="off">', page).group(0)]
    assert page.count('aria-live="polite"') == 1


def test_a_slider_says_a_value_in_words(static):
    """Issue 38: chapter 9's top-k slider said "top-k 0" where 0 keeps every token: ``names``
    gives such a value a word, shown and said (aria-valuetext) instead of the number."""
    top_k = ab.Slider(0, 50, 1, value=0, label="top-k", grid=[0, 5, 20], names={0: "all"})
    assert top_k.grid() == [("all", 0), ("5", 5), ("20", 20)] and top_k.points == (0, 5, 20)
    player = ab.explore(draw_plain, name="ch09.words", slope=top_k, label=ab.Choice(["a"], label="label"))
    page = player._repr_html_()
    assert 'aria-valuetext="all"' in page and '<output for="' in page and 'aria-live="off">all</output>' in page
    assert "top-k all, 5 or 20" in page
    data = json.loads(re.search(r'class="ab-explorer-data">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    assert data["labels"][0] == ["all", "5", "20"]


def draw_labelled(slope):
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [0, slope])
    ax.set(title=f"A line of slope {slope}", xlabel="time", ylabel="distance")
    return fig


def test_static_explorer_frames_say_what_they_show(static):
    """Issue 38: each frame's alt text is its figure's titles and labels plus the setting shown
    (never the explorer's id), and a live region says the same in words at every move."""
    player = ab.explore(draw_labelled, name="ch01.alt", slope=ab.Steps([1, 2], value=2, label="slope"))
    page = player._repr_html_()
    alt = re.search(r'<img src="data:[^"]+" alt="([^"]+)"', page).group(1)
    assert alt == "Figure: A line of slope 2; x: time; y: distance (slope 2)"
    assert 'alt="ch01.alt"' not in page
    data = json.loads(re.search(r'class="ab-explorer-data">(.*?)</script>', page, re.S).group(1).replace("<\\/", "</"))
    assert data["alts"] == ["Figure: A line of slope 1; x: time; y: distance",
                            "Figure: A line of slope 2; x: time; y: distance"]
    assert '<p class="ab-explorer-status" role="status" aria-live="polite"></p>' in page
    import io

    from PIL import Image

    png = Image.open(io.BytesIO(player.images[0]))
    assert png.text["ab-alt"] == data["alts"][0], "the PNG carries its text equivalent too"


def test_static_explorer_refuses_a_grid_too_large(static):
    with pytest.raises(ValueError, match="coarser grids"):
        ab.explore(draw_plain, name="ch01.big", slope=ab.Slider(0, 40, 1, value=0),
                   label=ab.Slider(0, 40, 1, value=0))


def test_static_explorer_of_a_function_that_only_prints(static):
    def say(n):
        print("n =", n)

    player = ab.explore(say, name="ch01.say", n=ab.Steps([1, 2]))
    assert player.images == [] and [t for _, t in player.frames] == ["n = 1\n", "n = 2\n"]
    assert "<pre>n = 1\n</pre>" in player._repr_html_()


def test_explorers_mode_must_be_known(monkeypatch):
    monkeypatch.setenv(EXPLORERS_ENV, "sometimes")
    with pytest.raises(ValueError, match="'live' or 'static'"):
        ab.explore(draw_plain, name="ch01.x", slope=ab.Steps([1, 2]))


def test_fit_prints_nothing_when_building_the_site(static, capsys):
    """A built page states results in prose: no bar, no "100%|" line (issue 36)."""
    import torch

    model = torch.nn.Linear(2, 1)
    data = [(torch.ones(4, 2), torch.zeros(4, 1))]
    ab.fit(model, data, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(), epochs=2, device="cpu", desc="demo")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_fit_draws_tqdms_bar_in_a_notebook(monkeypatch, capsys):
    import torch

    from attention_book.book.explorer import page_progress_bar

    monkeypatch.setenv(EXPLORERS_ENV, "live")
    bar = page_progress_bar(2, "demo")
    assert not bar.disable and type(bar).__module__.startswith("tqdm")
    bar.close()
    model = torch.nn.Linear(2, 1)
    data = [(torch.ones(4, 2), torch.zeros(4, 1))]
    ab.fit(model, data, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(), epochs=2, device="cpu", desc="demo")
    err = capsys.readouterr().err  # outside Jupyter, tqdm.auto draws text on stderr
    assert "demo: 100%" in err and "2/2" in err


def test_live_explorer_works_with_ipywidgets_7(tmp_path):
    """Colab ships ipywidgets 7.x; the package's lower bound (7.7) must really work."""
    target = tmp_path / "w7"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                          "ipywidgets==7.7.5", "ipython_genutils==0.2.0"], capture_output=True, text=True)
    assert pip.returncode == 0, f"could not install ipywidgets 7.7.5 from the package registry:\n{pip.stderr}"
    code = textwrap.dedent("""
        import ipywidgets, attention_book as ab
        assert ipywidgets.__version__.startswith("7."), ipywidgets.__version__
        calls = []
        w = ab.explore(lambda a, b, c, d, e: calls.append((a, b, c, d, e)), name="ch01.seven",
                       a=ab.Slider(0, 10, 1, value=3), b=ab.LogSlider(0.1, 10, value=1.0),
                       c=ab.Choice(["x", "y"]), d=ab.Steps([1, 2, 4], value=2), e=ab.Text("hi"))
        w.update()
        w.children[0].value = 7
        print([type(c).__name__ for c in w.children], calls[-1])
    """)
    env = {"PYTHONPATH": str(target), "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert "['IntSlider', 'FloatLogSlider', 'Dropdown', 'SelectionSlider', 'Text', 'Output'] (7, 1.0, 'x', 2, 'hi')" \
        in run.stdout


def test_frames_record_their_smallest_text_and_are_legible_in_the_column(static):
    """Each frame's PNG says how tall its smallest text is (tEXt ab-min-text-px, in the PNG's
    pixels); fit_page enlarges text that the column would shrink below 9 px (issue 36)."""
    import io

    from PIL import Image

    from attention_book.core.plot import MIN_TEXT_PX, PAGE_COLUMN_PX, TEXT_SIZE_KEY

    def tiny(width):
        fig, ax = plt.subplots(figsize=(width, 2))
        ax.plot([0, 1], [0, 1])
        ax.text(0.5, 0.5, "note", fontsize=5)
        return fig

    for width, dpi in [(4, 75), (12, 100)]:
        player = ab.explore(tiny, name="ch01.tiny", dpi=dpi, width=ab.Steps([width]))
        image = Image.open(io.BytesIO(player.images[0]))
        px = float(image.text[TEXT_SIZE_KEY])
        shown = min(1.0, PAGE_COLUMN_PX / image.width)
        assert px * shown >= MIN_TEXT_PX, (width, dpi, px, image.width)
        assert image.width <= 9.0 * dpi * 1.05, "a figure wider than the page's 9 inches is narrowed"


def test_inline_figures_go_through_fit_page_in_ipython():
    """In IPython, use_book_style wraps the inline PNG formatter: the PNG carries the text size."""
    import io

    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.pylabtools import select_figure_formats
    from PIL import Image

    from attention_book.core.plot import TEXT_SIZE_KEY

    shell = InteractiveShell.instance()
    try:
        select_figure_formats(shell, set())  # as in a kernel before its first figure
        ab.use_book_style()
        ab.use_book_style()  # idempotent: wrapped once
        select_figure_formats(shell, {"png"})  # the inline backend, loaded by the first figure
        shell.events.trigger("post_execute")  # the cell ends: wrapped before its figures show
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.set_title("title", fontsize=4)
        data, _ = shell.display_formatter.format(fig, include={"image/png"})
        image = Image.open(io.BytesIO(base64.b64decode(data["image/png"])))
        assert float(image.text[TEXT_SIZE_KEY]) >= 9.0
        assert ax.title.get_fontsize() > 4
    finally:
        InteractiveShell.clear_instance()


def test_frames_keep_the_width_their_text_needs_on_a_phone(static):
    """Issue 38: each frame carries the narrowest width at which its smallest text is still
    9 px (--ab-phone-width; book.css never shows it narrower), in the player's data too."""
    import io

    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    from attention_book.book.explorer import phone_width
    from attention_book.core.plot import TEXT_SIZE_KEY

    def png(width: int, text_px: str | None) -> bytes:
        info = PngInfo()
        if text_px is not None:
            info.add_text(TEXT_SIZE_KEY, text_px)
        buf = io.BytesIO()
        Image.new("RGB", (width, 10)).save(buf, format="png", pnginfo=info)
        return buf.getvalue()

    assert phone_width(png(600, "18.00")) == 300  # text 18 px: legible down to half the width
    assert phone_width(png(600, "6.00")) == 600  # never wider than drawn
    assert phone_width(png(600, "none")) == 0 and phone_width(png(600, None)) == 0
    player = ab.explore(draw_labelled, name="ch01.phone", slope=ab.Steps([1, 2], value=2, label="slope"))
    page = player._repr_html_()
    data = json.loads(re.search(r'class="ab-explorer-data">(.*?)</script>', page).group(1))
    assert data["phone"] == [phone_width(base64.b64decode(b)) for b in data["images"]]
    assert all(0 < w for w in data["phone"])
    assert re.search(r'<img src="data:[^"]+" alt="[^"]+" style="--ab-phone-width: [1-9]\d*px">', page)


def test_frames_keep_every_line_colour_of_their_figure():
    """A palette PNG keeps each line's colour exactly, however few pixels it has beside a
    colour map's shades (ch06's legend: octree's 64 colours turned its red swatch brick, issue 38)."""
    import io

    import numpy as np
    from PIL import Image

    from attention_book.book.explorer import _png

    fig, (left, right) = plt.subplots(1, 2, figsize=(6, 2.5))
    left.imshow(np.linspace(0, 1, 400).reshape(20, 20), cmap="Reds")
    reds = ["#c44e52", "#d1495b", "#b5403f", "#dd8452", "#e07b39", "#4c72b0"]
    for k, colour in enumerate(reds):
        right.plot([0, 1], [k, k + 0.5], color=colour, label=colour)
    right.legend()
    png = _png(fig, 75)
    plt.close(fig)
    with Image.open(io.BytesIO(png)) as image:
        drawn = {colour for _, colour in image.convert("RGB").getcolors(1 << 20)}
    for colour in reds:
        rgb = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
        assert rgb in drawn, colour


def heatmap_with_numbers(n):
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(0.6 * n + 3, 0.4 * n + 1.5), layout="constrained")
    ax.imshow(np.full((n, n), 0.16), vmin=0, vmax=1, aspect="auto")
    bars.barh(range(n), np.full(n, 0.16))
    for i in range(n):
        for j in range(n):
            ax.text(j, i, "0.16", ha="center", va="center", fontsize=9)
    fig.colorbar(ax.images[0], ax=ax)
    return fig


def test_phone_copies_write_numbers_in_cells_apart_or_not_at_all():
    """Numbers in a map's cells that run together on the phone copy (ch01's 6 x 6 weights,
    "0.160.16", issue 38) are shortened (".16") or left out; a map whose numbers fit keeps them."""
    from attention_book.book.explorer import _cell_numbers, _cramped, _phone_numbers

    crowded = heatmap_with_numbers(12)
    assert _cramped(crowded)
    copy = _phone_numbers(crowded)
    assert copy is not None and not _cramped(copy)
    assert all(t.get_text() == ".16" for texts in _cell_numbers(copy) for t in texts)
    plt.close(copy)
    plt.close(crowded)
    roomy = heatmap_with_numbers(2)
    assert _phone_numbers(roomy) is None
    plt.close(roomy)


def four_panels(d=64):
    """A 2 x 2 figure like chapter 3's d-explorer: every plot its own title and axis labels."""
    fig, axes = plt.subplots(2, 2, figsize=(7.6, 6.4))
    for k, ax in enumerate(axes.flat):
        ax.plot([1, 2, 3], [k, k + 1, d])
        ax.set(title=f"panel {k} title", xlabel=f"panel {k} x", ylabel=f"panel {k} y")
    return fig


def panels_shown(copy):
    """(title as one line, y label, x label) of each plot of a phone copy, in reading order."""
    from attention_book.core import plot

    return [(" ".join(ax.get_title().split()), ax.get_ylabel(), ax.get_xlabel())
            for ax, _, _ in plot._grid_axes(copy)]


def test_a_phone_copy_keeps_each_plots_own_title_and_labels(static, monkeypatch):
    """Issue 36: chapter 3's d-explorer at 390 px titled its top-right plot "variance of the
    scores, One query's softmax..." and dropped its y label "attention weight": the phone copy,
    restacking the 2 x 2 grid into one column, took each first-column y label for a row's name.
    Every plot that has its own labels keeps them, in the explorer's phone copies too."""
    from attention_book.core import plot

    want = [(f"panel {k} title", f"panel {k} y", f"panel {k} x") for k in range(4)]
    for cols in (2, 1):  # as laid out in two columns, and restacked into one
        copy, _ = plot._phone_layout(four_panels(), max_cols=cols)
        assert panels_shown(copy) == want
    seen = []
    original = plot.phone_figure

    def recording(fig):
        copy = original(fig)
        seen.append(panels_shown(copy))
        return copy

    monkeypatch.setattr(plot, "phone_figure", recording)
    player = ab.explore(four_panels, name="ch03.panels", d=ab.Steps([4, 64], value=64, label="d"))
    assert all(player.phone_images) and seen == [want, want]
    # a grid whose first column names its rows keeps doing so (exercise 11.5.1's maps)
    fig, axes = plt.subplots(2, 3, figsize=(6.8, 3.6), sharex=True, sharey=True)
    for i in range(2):
        axes[i, 0].set_ylabel(f"example {i}\nquery")
        for j in range(3):
            axes[i, j].plot([0, 1], [0, j])
            axes[0, j].set_title(f"head {j}")
    titles = [t for t, _, _ in panels_shown(plot.phone_figure(fig))]
    assert titles == [f"example {e}, head {h}" for e in range(2) for h in range(3)]
    plt.close("all")


def test_a_few_maps_whose_key_names_would_turn_are_stacked_with_level_names():
    """Issue 36: chapter 3's four 2 x 10 maps (keys named 1 to 10) kept two columns on a phone,
    80 px per map, their key names turned on end (the page's code had thinned them by hand to
    every second key). The copy stacks them in one column with every name level."""
    from attention_book.core import plot

    maps = np.random.default_rng(0).random((2, 2, 2, 10))
    fig = ab.heatmaps_figure(maps, xlabel="Keys", ylabel="Queries", xticklabels=[str(j + 1) for j in range(10)],
                             yticklabels=["example 1", "example 2"], titles=["a", "b", "c", "d"],
                             figsize=(7.5, 4.2))
    copy = plot.phone_figure(fig)
    cells = plot._grid_axes(copy)
    assert [(r, c) for _, r, c in cells] == [(k, 0) for k in range(4)]
    assert [" ".join(ax.get_title().split()) for ax, _, _ in cells] == ["a", "b", "c", "d"]
    bottom = cells[-1][0]
    assert [t.get_text() for t in bottom.get_xticklabels()] == [str(j + 1) for j in range(10)]
    assert all(t.get_rotation() == 0 for t in bottom.get_xticklabels())
    assert plot.phone_png(fig) is not None
    # names that fit under two columns (or under none) keep the two columns
    short = ab.heatmaps_figure(maps[:, :, :, :4], xlabel="Keys", ylabel="Queries", xticklabels="abcd",
                               figsize=(7.5, 4.2))
    assert max(c for _, _, c in plot._grid_axes(plot.phone_figure(short))) == 1
    plt.close("all")
