"""The architecture diagrams: they draw, print the sizes they are given, refuse bad sizes, keep
their text apart and inside the figure, and stay narrow enough for a phone."""

import itertools

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.text import Text

import attention_book as ab
from attention_book.book.diagrams import _pretraining_masks

DIAGRAMS = {
    "attention pooling": (ab.attention_pooling_diagram, {}),
    "attention pooling, many pairs": (ab.attention_pooling_diagram, dict(num_pairs=9, value_size=16)),
    "bahdanau": (ab.bahdanau_diagram, {}),
    "bahdanau, short": (ab.bahdanau_diagram, dict(num_steps=2, num_layers=1, tgt_vocab_size=214)),
    "multi-head": (ab.multihead_attention_diagram, {}),
    "multi-head, one head": (ab.multihead_attention_diagram, dict(num_hiddens=12, num_heads=1, query_size=7)),
    "layer comparison": (ab.layer_comparison_diagram, {}),
    "layer comparison, widest": (ab.layer_comparison_diagram, dict(num_tokens=12, kernel_size=4)),
    "transformer": (ab.transformer_diagram, {}),
    "transformer, paper sizes": (ab.transformer_diagram, dict(num_hiddens=512, ffn_num_hiddens=2048, num_heads=8,
                                                           num_blks=6, tgt_vocab_size=37000)),
    "vit": (ab.vit_diagram, {}),
    "vit, ci sizes, mean pooling": (ab.vit_diagram, dict(img_size=24, patch_size=4, num_hiddens=64,
                                                      mlp_num_hiddens=128, num_heads=4, pool="mean")),
    "vit, 224 x 336 photo": (ab.vit_diagram, dict(img_size=(224, 336), patch_size=16, in_channels=3)),
    "pretraining modes": (ab.pretraining_modes_diagram, {}),
    "pretraining modes, longest": (ab.pretraining_modes_diagram, dict(
        config=ab.models.language_models.LMConfig(vocab_size=1234, num_hiddens=256, num_heads=8, num_blks=4), seq_len=10, target_len=6)),
}


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def label(fig) -> str:
    return "\n".join(texts(fig))


@pytest.mark.parametrize("name", DIAGRAMS)
def test_diagram_text_is_apart_inside_and_readable(name):
    draw, kwargs = DIAGRAMS[name]
    fig = draw(**kwargs)
    assert isinstance(fig, Figure)
    width, height = fig.get_size_inches()
    assert width <= 7.2, f"{name}: {width:.1f} in is wider than the book's column"
    assert width / height <= 2.0, f"{name}: aspect {width / height:.2f} is too wide for a phone"
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    shown = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in shown]
    assert all(t.get_fontsize() >= 8.5 for t in shown), f"{name}: a label is smaller than 8.5 pt"
    w_px, h_px = fig.get_size_inches() * fig.dpi
    for text, box in boxes:
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= w_px and box.y1 <= h_px, f"{name}: {text!r} is cut off"
    for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
        apart = (box_a.x1 <= box_b.x0 + 1 or box_b.x1 <= box_a.x0 + 1
                 or box_a.y1 <= box_b.y0 + 1 or box_b.y1 <= box_a.y0 + 1)
        assert apart, f"{name}: {a!r} overlaps {b!r}"


def test_diagrams_close_cleanly():
    before = set(plt.get_fignums())
    for draw, kwargs in DIAGRAMS.values():
        fig = draw(**kwargs)
        assert set(plt.get_fignums()) == before | {fig.number}, "a diagram opens one figure, its own"
        plt.close(fig)
        assert set(plt.get_fignums()) == before


def test_attention_pooling_labels_its_sizes_and_weights_sum_to_one():
    fig = ab.attention_pooling_diagram(num_pairs=5, value_size=3)
    words = label(fig)
    assert "$m = 5$" in words and r"\mathbb{R}^{3}" in words
    assert r"$\mathbf{k}_{5}$" in words and r"$\mathbf{k}_{6}$" not in words
    weights = [float(t) for t in texts(fig) if t.startswith("0.")]
    assert len(weights) == 5 and sum(weights) == pytest.approx(1.0, abs=0.03)
    many = label(ab.attention_pooling_diagram(num_pairs=30))
    assert "⋯" in many and r"$\mathbf{k}_{30}$" in many and r"$\mathbf{k}_{10}$" not in many


def test_bahdanau_labels_its_sizes():
    words = label(ab.bahdanau_diagram(embed_size=32, num_hiddens=48, num_layers=3, num_steps=7, tgt_vocab_size=99))
    for piece in ("$T = 7$", r"\mathbb{R}^{48}", r"\mathbb{R}^{32}", r"\mathbb{R}^{80}", "3 layers", "GRU: 3 × 48",
                  "48 → 99", r"\mathbb{R}^{48 \times 48}"):
        assert piece in words, piece
    assert "|V|" in label(ab.bahdanau_diagram())


def test_multihead_draws_the_heads_it_is_given():
    def heads_drawn(fig):
        return sum(1 for t in texts(fig) if t.startswith(r"$\mathbf{W}^{(q)}_{") and "in" not in t)

    three = ab.multihead_attention_diagram(num_hiddens=24, num_heads=3)
    assert heads_drawn(three) == 3
    assert "$h = 3$" in label(three) and "= p_o / h = 8$" in label(three)
    eight = ab.multihead_attention_diagram(num_hiddens=24, num_heads=8)
    assert heads_drawn(eight) == 3 and "⋯" in label(eight)  # heads 1, 2, ⋯, 8
    words = label(eight)
    assert "$h = 8$" in words and r"\mathbf{W}^{(q)}_{8}" in words and r"8 \times 3 = 24" in words
    assert r"\mathbb{R}^{9}" in label(ab.multihead_attention_diagram(num_hiddens=24, num_heads=8, key_size=9))


def test_layer_comparison_shows_the_chapter_costs_and_sizes():
    words = label(ab.layer_comparison_diagram(num_tokens=5, kernel_size=2, num_hiddens=32))
    for _, *costs in ab.experiments.layer_comparison.LAYER_COSTS:
        for cost in costs:
            assert cost in words
    assert "$n = 5$" in words and "$d = 32$" in words and "$k = 2$" in words
    assert r"\mathbf{x}_{5}" in words


def test_transformer_and_vit_label_their_sizes():
    words = label(ab.transformer_diagram(num_hiddens=96, ffn_num_hiddens=40, num_heads=6, num_blks=3, num_steps=11))
    for piece in ("3 ×", "$h = 6$ heads, $d = 96$", r"96 \to 40 \to 96", "$n = 11$", r"\sqrt{96}", "(11, 96)"):
        assert piece in words, piece
    words = label(ab.vit_diagram())
    for piece in ("$m = 36$", r"1 \times 96 \times 96", "$p = 16$", r"256 \to 512", "(37, 512)", "$h = 8$",
                  r"512 \to 2048 \to 512", "2 ×", "10 class scores"):
        assert piece in words, piece


def test_vit_is_drawn_from_a_model():
    model = ab.ViT(img_size=24, patch_size=6, num_hiddens=30, mlp_num_hiddens=50, num_heads=3, num_blks=4,
                   emb_dropout=0.0, blk_dropout=0.0, num_classes=7, in_channels=3)
    words = label(ab.vit_diagram(model))
    for piece in ("$m = 16$", r"3 \times 24 \times 24", r"108 \to 30", "(17, 30)", "$h = 3$", r"30 \to 50 \to 30",
                  "4 ×", "7 class scores"):
        assert piece in words, piece


def test_pretraining_masks_are_the_models_own():
    config = ab.models.language_models.LMConfig(vocab_size=20, num_hiddens=16, num_heads=2, num_blks=1)
    masks = _pretraining_masks(config, 5, 3)
    assert masks["bert"].all() and masks["bert"].shape == (5, 5)
    np.testing.assert_array_equal(masks["gpt"], ab.causal_mask(5, 5).numpy())
    t5 = masks["t5"]
    assert t5[:5, :5].all() and not t5[:5, 5:].any() and t5[5:, :5].all()
    np.testing.assert_array_equal(t5[5:, 5:], ab.causal_mask(3, 3).numpy())
    words = label(ab.pretraining_modes_diagram(config))
    assert "$d = 16$" in words and "$h = 2$" in words and "1 block per stack" in words and r"$16 \to$ 20" in words


@pytest.mark.parametrize("draw, kwargs, match", [
    (ab.attention_pooling_diagram, dict(num_pairs=0), "num_pairs"),
    (ab.attention_pooling_diagram, dict(value_size=2.0), "value_size"),
    (ab.bahdanau_diagram, dict(num_layers=True), "num_layers"),
    (ab.bahdanau_diagram, dict(tgt_vocab_size=-3), "tgt_vocab_size"),
    (ab.multihead_attention_diagram, dict(num_hiddens=100, num_heads=8), "not divisible"),
    (ab.multihead_attention_diagram, dict(query_size=0), "query_size"),
    (ab.layer_comparison_diagram, dict(num_tokens=1), "num_tokens"),
    (ab.layer_comparison_diagram, dict(num_tokens=13), "num_tokens must be at most 12"),
    (ab.layer_comparison_diagram, dict(num_tokens=4, kernel_size=5), "kernel_size"),
    (ab.transformer_diagram, dict(num_blks=0), "num_blks"),
    (ab.transformer_diagram, dict(num_hiddens=10, num_heads=4), "not divisible"),
    (ab.vit_diagram, dict(img_size=100), "not divisible"),
    (ab.vit_diagram, dict(pool="max"), "pool"),
    (ab.vit_diagram, dict(model="a ViT"), "model must be an ab.ViT"),
    (ab.pretraining_modes_diagram, dict(config=64), "config must be a models.language_models.LMConfig"),
    (ab.pretraining_modes_diagram, dict(seq_len=11), "seq_len must be at most 10"),
    (ab.pretraining_modes_diagram, dict(config=ab.models.language_models.LMConfig(vocab_size=9, max_len=4)), "max_len"),
])
def test_bad_sizes_are_refused(draw, kwargs, match):
    with pytest.raises(ValueError, match=match):
        draw(**kwargs)


def test_pretraining_modes_need_a_token_that_is_not_pad():
    with pytest.raises(ValueError, match="besides <pad>"):
        ab.pretraining_modes_diagram(ab.models.language_models.LMConfig(vocab_size=1, pad_id=0))


def test_drawing_leaves_torch_alone():
    """The meta-device models behind the chapter 9 masks draw no random numbers."""
    state = torch.get_rng_state()
    ab.pretraining_modes_diagram()
    assert torch.equal(state, torch.get_rng_state())


CHAPTER_FIGURES = {
    "ch01_queries_keys_values": "attention_pooling_diagram", "ch04_bahdanau": "bahdanau_diagram",
    "ch05_multihead_attention": "multihead_attention_diagram", "ch06_self_attention": "layer_comparison_diagram",
    "ch07_transformer": "transformer_diagram", "ch08_vision_transformer": "vit_diagram",
    "ch09_pretraining": "pretraining_modes_diagram",
}


@pytest.mark.parametrize("chapter, function", sorted(CHAPTER_FIGURES.items()))
def test_each_chapter_draws_its_architecture(chapter, function):
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "notebooks" / f"{chapter}.ipynb"
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert any(c["cell_type"] == "code" and f"ab.{function}(" in "".join(c["source"]) for c in cells), \
        f"{chapter} should show its architecture with ab.{function}(...)"


@pytest.mark.parametrize("name", DIAGRAMS)
def test_a_phone_drawing_keeps_its_text_apart_and_9_px_high_at_every_size(name):
    """Issue 36: a diagram drawn again in one column for a phone (``_Sketch.done(phone=...)``) keeps
    its labels apart and inside their boxes, and every text, subscripts at mathtext's 0.7, 9 px high
    at the phone's 100 dpi, for the chapters' other sizes too (many pairs, 30 steps, one head)."""
    from attention_book.core import plot

    draw, kwargs = DIAGRAMS[name]
    fig = draw(**kwargs)
    drawing = getattr(fig, "_ab_phone_drawing", None)
    plt.close(fig)
    assert drawing is not None, f"{name}: no phone drawing (its phone copy would be the desktop one, enlarged)"
    copy = drawing()
    copy.set_dpi(plot.PHONE_DPI)
    assert plot._overlapping_texts(copy) == [] and plot._texts_outside_boxes(copy) == []
    assert plot.smallest_glyph_px(copy) >= plot.MIN_TEXT_PX
    assert copy.get_figwidth() * plot.PHONE_DPI <= plot.PHONE_MAX_PX
