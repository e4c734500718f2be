"""Chapter 6 helpers: permutation equivariance, layer timing, encoding figures, the encoding checker."""

import math

import numpy as np
import pytest
import torch

import attention_book as ab


def test_self_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(0)
    mha = ab.MultiHeadAttention(16, 4, bias=True).eval()
    X = torch.randn(3, 7, 16)
    for seed in range(5):
        perm = torch.randperm(7, generator=torch.Generator().manual_seed(seed))
        assert ab.experiments.layer_comparison.permutation_error(lambda Z: mha(Z, Z, Z), X, perm) < 1e-5
    # adding positions breaks it (for a permutation that moves tokens)
    pe = ab.PositionalEncoding(16)
    perm = torch.tensor([1, 0, 2, 3, 4, 5, 6])
    assert ab.experiments.layer_comparison.permutation_error(lambda Z: mha(pe(Z), pe(Z), pe(Z)), X, perm) > 1e-2
    rope = ab.RotaryAttention(16, 4).eval()
    assert ab.experiments.layer_comparison.permutation_error(lambda Z: rope(Z, Z, Z), X, perm) > 1e-3


def test_layers_keep_shape_and_timing_returns_one_number_per_length():
    for name, layer in ab.experiments.layer_comparison.sequence_layers(num_hiddens=8, num_heads=2).items():
        assert layer(torch.randn(2, 5, 8)).shape == (2, 5, 8), name
    lengths = [4, 8]
    times = ab.experiments.layer_comparison.time_sequence_layers(lengths, num_hiddens=8, batch_size=2, num_heads=2, repeats=1)
    assert set(times) == {"CNN", "RNN", "self-attention"}
    assert all(len(t) == 2 and all(x > 0 for x in t) for t in times.values())
    fig = ab.experiments.layer_comparison.layer_times_figure(lengths, times)
    assert len(fig.axes[0].lines) == 3


def test_cost_table_mentions_every_layer():
    table = ab.experiments.layer_comparison.layer_cost_table()
    assert table.count("\n") == 4 and "O(n² d)" in table and "O(n / k)" in table


def test_encoding_figures_draw_the_table():
    fig = ab.encoding_columns_figure(32, 60)
    line = fig.axes[0].lines[0]
    assert len(line.get_xdata()) == 60
    assert math.isclose(line.get_ydata()[10], math.sin(10 / 10000 ** (6 / 32)), abs_tol=1e-6)
    fig = ab.positional_encoding_figure(8, 20)  # the middle pair 4, 5 and the fast pair 6, 7
    assert len(fig.axes[0].lines) == 4 and fig.axes[0].get_title() == "columns 4, 5, 6, 7 of P"
    assert fig.axes[1].images[0].get_array().shape == (20, 8)
    fig = ab.positional_encoding_figure(128, 500)  # a fast and a slow pair: four lines, not a block
    assert fig.axes[0].get_title() == "columns 6, 7, 64, 65 of P"
    crossings = [int((np.diff(np.sign(line.get_ydata())) != 0).sum()) for line in fig.axes[0].lines]
    assert crossings[0] > 50 and crossings[2] <= 2  # fast: dozens of waves in 500 rows; slow: under one
    assert ab.positional_encoding_figure(2, 10).axes[0].get_title() == "columns 0, 1 of P"
    assert ab.encoding_heatmap_figure(16, 10).axes[0].images[0].get_array().shape == (10, 16)


def test_meta_device_forward():
    for layer in ab.experiments.layer_comparison.sequence_layers(num_hiddens=8, num_heads=2).values():
        out = layer.to("meta")(torch.randn(2, 5, 8, device="meta"))
        assert out.shape == (2, 5, 8) and out.device.type == "meta"


def test_bad_inputs():
    with pytest.raises(ValueError, match="permutation of 0..2"):
        ab.experiments.layer_comparison.permutation_error(lambda Z: Z, torch.randn(1, 3, 2), torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match=r"shape \(batch, n, d\)"):
        ab.experiments.layer_comparison.permutation_error(lambda Z: Z, torch.randn(3, 2), torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"columns must lie in \[0, 7\]"):
        ab.encoding_columns_figure(8, 10, columns=(6, 9))
    with pytest.raises(ValueError, match="encoding_dim must be at least 2, got 1"):
        ab.positional_encoding_figure(1, 10)
    with pytest.raises(ValueError, match="lengths"):
        ab.experiments.layer_comparison.time_sequence_layers([])
