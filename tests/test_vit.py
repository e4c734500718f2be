"""Tests of the vision Transformer chapter: patches, ViT, rollout, IDX reader, data, checker."""

import gzip
import struct

import matplotlib.figure
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn import functional as F

import attention_book as ab
from attention_book.models import vit as abvit

TINY = dict(num_hiddens=16, mlp_num_hiddens=32, num_heads=4, num_blks=2, emb_dropout=0.1, blk_dropout=0.1)


# --- patches ---------------------------------------------------------------------------------

def _patchify_then_project(emb: ab.PatchEmbedding, X: torch.Tensor) -> torch.Tensor:
    W = emb.conv.weight.reshape(emb.num_hiddens, -1)
    return ab.patchify(X, emb.patch_size) @ W.T + emb.conv.bias


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 4), cols=st.integers(1, 4), ph=st.integers(1, 5), pw=st.integers(1, 5),
    channels=st.integers(1, 3), batch=st.integers(1, 3), seed=st.integers(0, 10_000),
)
def test_conv_patch_embedding_equals_patchify_plus_linear(rows, cols, ph, pw, channels, batch, seed):
    torch.manual_seed(seed)
    emb = ab.PatchEmbedding((rows * ph, cols * pw), (ph, pw), num_hiddens=7, in_channels=channels).double()
    X = torch.randn(batch, channels, rows * ph, cols * pw, dtype=torch.float64)
    torch.testing.assert_close(emb(X), _patchify_then_project(emb, X))


def test_patchify_numbers_patches_row_by_row():
    X = torch.arange(4 * 6, dtype=torch.float32).reshape(1, 1, 4, 6)
    P = ab.patchify(X, 2)  # a 2x3 grid of 2x2 patches
    assert P.shape == (1, 6, 4)
    assert P[0, 0].tolist() == [0, 1, 6, 7]     # top-left patch
    assert P[0, 1].tolist() == [2, 3, 8, 9]     # its right neighbour comes next
    assert P[0, 3].tolist() == [12, 13, 18, 19]  # then the second row of patches


def test_patch_embedding_shapes_square_and_seed_sizes():
    emb = ab.PatchEmbedding(96, 16, 512)
    X = torch.zeros(4, 1, 96, 96)
    assert emb(X).shape == (4, (96 // 16) ** 2, 512)
    assert emb.grid_size == (6, 6) and emb.num_patches == 36


def test_patch_embedding_non_square():
    emb = ab.PatchEmbedding((12, 20), (4, 5), 8, in_channels=3)
    assert emb.grid_size == (3, 4) and emb.num_patches == 12
    assert emb(torch.randn(2, 3, 12, 20)).shape == (2, 12, 8)


def test_indivisible_image_size_is_a_clear_error():
    with pytest.raises(ValueError, match=r"not divisible by patch_size.*patch heights that divide 30"):
        ab.PatchEmbedding(30, 16, 8)
    with pytest.raises(ValueError, match="not divisible"):
        ab.patchify(torch.zeros(1, 1, 10, 12), (5, 5))
    with pytest.raises(ValueError, match="patch_size must be an int or a pair"):
        ab.PatchEmbedding(32, (4, 4, 4), 8)
    with pytest.raises(ValueError, match="img_size must be positive"):
        ab.PatchEmbedding(0, 4, 8)


def test_patch_embedding_bad_input_names_shapes():
    emb = ab.PatchEmbedding(16, 4, 8, in_channels=1)
    with pytest.raises(ValueError, match=r"\(batch, 1, 16, 16\).*got \(2, 3, 16, 16\)"):
        emb(torch.zeros(2, 3, 16, 16))
    with pytest.raises(ValueError, match=r"got \(2, 1, 12, 16\)"):
        emb(torch.zeros(2, 1, 12, 16))
    with pytest.raises(ValueError, match=r"got \(1, 16, 16\)"):
        emb(torch.zeros(1, 16, 16))
    with pytest.raises(ValueError, match="height, width"):
        ab.patchify(torch.zeros(16, 16), 4)


# --- the model ----------------------------------------------------------------------------------

def test_vit_block_keeps_shape_and_is_pre_norm():
    blk = ab.ViTBlock(24, 24, 48, 8, 0.5).eval()
    X = torch.ones(2, 100, 24)
    assert blk(X).shape == X.shape
    with ab.record_attention(blk) as maps:
        blk(X)
    assert [tuple(m.weights.shape) for m in maps] == [(2, 8, 100, 100)]
    # Pre-norm: each sub-layer reads a normalised copy; the residual path is a plain sum.
    Xr = torch.randn(2, 5, 24)
    Y = blk.addnorm1.ln(Xr)
    H = Xr + blk.attention(Y, Y, Y)
    torch.testing.assert_close(blk(Xr), H + blk.ffn(blk.addnorm2.ln(H)))
    assert isinstance(blk, ab.TransformerEncoderBlock) and isinstance(blk.ffn.activation, torch.nn.GELU)


def test_vit_mlp_uses_gelu_and_dropout():
    mlp = ab.ViTMLP(32, 8, dropout=0.5)
    assert isinstance(mlp.activation, torch.nn.GELU)
    mlp.eval()
    X = torch.randn(3, 4, 8)
    expected = mlp.dense2(F.gelu(mlp.dense1(X)))
    torch.testing.assert_close(mlp(X), expected)
    mlp.train()
    assert not torch.allclose(mlp(X), mlp(X))  # dropout is active in training


@pytest.mark.parametrize("pool", ["cls", "mean"])
def test_vit_shapes_and_attention_maps(pool):
    model = ab.ViT((8, 12), (4, 3), **TINY, num_classes=7, pool=pool)
    X = torch.randn(5, 1, 8, 12)
    assert model(X).shape == (5, 7)
    model.train()
    maps = model.attention_maps(X)
    extra = 1 if pool == "cls" else 0
    n = 2 * 4 + extra
    assert maps.shape == (2, 5, 4, n, n)
    assert model.training, "attention_maps must restore training mode"
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 5, 4, n))
    assert model.grid_size == (2, 4)
    assert (model.cls_token is None) == (pool == "mean")


def test_vit_fast_path_and_weights_path_agree():
    torch.manual_seed(0)
    model = ab.ViT(8, 4, **TINY).eval()
    X = torch.randn(3, 1, 8, 8)
    with ab.keep_attention_weights(False):
        fast = model(X)
        assert model.blks[0].attention_weights is None
    with ab.keep_attention_weights():
        slow = model(X)
        assert model.blks[0].attention_weights is not None
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)


def test_vit_rejects_bad_arguments():
    with pytest.raises(ValueError, match="pool must be 'cls' or 'mean'"):
        ab.ViT(8, 4, **TINY, pool="max")
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        ab.ViT(8, 4, **{**TINY, "num_heads": 3})
    with pytest.raises(ValueError, match=r"got \(2, 1, 16, 16\)"):
        ab.ViT(8, 4, **TINY)(torch.zeros(2, 1, 16, 16))


@pytest.mark.parametrize("make", [
    lambda: ab.PatchEmbedding((8, 12), (4, 3), 16, in_channels=3),
    lambda: ab.ViTBlock(16, 16, 32, 4, 0.1),
    lambda: ab.ViT((8, 12), (4, 3), **TINY, in_channels=3),
    lambda: ab.ViT((8, 12), (4, 3), **TINY, in_channels=3, pool="mean"),
    lambda: ab.SmallCNN(in_channels=3),
])
@pytest.mark.parametrize("training", [True, False])
def test_meta_device_forward(make, training):
    module = make().to("meta").train(training)
    if isinstance(module, ab.ViTBlock):
        X = torch.empty(2, 7, 16, device="meta")
    else:
        X = torch.empty(2, 3, 8, 12, device="meta")
    out = module(X)
    assert out.device.type == "meta"


@pytest.mark.slow
def test_vit_learns_digits_quickly(one_thread):
    ab.seed_everything(0)
    (x, y), (tx, ty) = ab.data.images.load_digits_images(seed=0)
    train = ab.data.images.ImageBatches(x[:640], y[:640], batch_size=32, img_size=8, shuffle=True, seed=0)
    test = ab.data.images.ImageBatches(tx, ty, batch_size=360, img_size=8)
    model = ab.ViT(8, 2, num_hiddens=32, mlp_num_hiddens=64, num_heads=4, num_blks=1, emb_dropout=0.0,
                   blk_dropout=0.0, lr=3e-3)
    before = ab.accuracy(model, test)
    ab.fit(model, train, ab.image_classification_loss, epochs=4, lr=model.lr, progress=False, device="cpu")
    after = ab.accuracy(model, test)
    assert after > 0.45 and after > before + 0.25, (before, after)  # chance is 0.1


def test_digits_split_and_order_follow_the_book_seed(monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_SEED", "2")
    (x, y), _ = ab.data.images.load_digits_images()
    (x2, y2), _ = ab.data.images.load_digits_images(seed=2)
    (x0, _), _ = ab.data.images.load_digits_images(seed=0)
    assert torch.equal(x, x2) and torch.equal(y, y2) and not torch.equal(x, x0)
    data, pinned = ab.load_image_data("digits", 8, 16), ab.load_image_data("digits", 8, 16, seed=2)
    assert torch.equal(next(iter(data.train))[1], next(iter(pinned.train))[1])


# --- rollout ----------------------------------------------------------------------------------

def test_rollout_rows_sum_to_one_and_single_layer_without_residual_is_head_mean():
    torch.manual_seed(0)
    maps = torch.softmax(torch.randn(3, 2, 4, 5, 5), dim=-1)
    R = ab.models.vit.attention_rollout(maps)
    assert R.shape == (2, 5, 5)
    torch.testing.assert_close(R.sum(-1), torch.ones(2, 5))
    torch.testing.assert_close(ab.models.vit.attention_rollout(maps[:1], residual=False), maps[0].mean(1))


def test_rollout_chains_layers_in_order():
    A1 = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # layer 1: everyone copies token 0
    A2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]])  # layer 2: everyone reads token 1 (which holds token 0)
    maps = torch.stack([A1, A2])[:, None, None]  # (layers, batch, heads, n, n)
    R = ab.models.vit.attention_rollout(maps, residual=False)
    torch.testing.assert_close(R[0], A2 @ A1)
    assert R[0, :, 0].tolist() == [1.0, 1.0]


def test_cls_attention_shape_and_errors():
    maps = torch.softmax(torch.randn(2, 3, 4, 7, 7), dim=-1)
    att = ab.models.vit.cls_attention(maps, (2, 3))
    assert att.shape == (3, 2, 3)
    torch.testing.assert_close(att, maps[-1].mean(1)[:, 0, 1:].reshape(3, 2, 3))
    with pytest.raises(ValueError, match="needs 5"):
        ab.models.vit.cls_attention(maps, (2, 2))
    with pytest.raises(ValueError, match="layers, batch, heads"):
        ab.models.vit.attention_rollout(torch.zeros(3, 4, 4))


# --- the IDX reader -------------------------------------------------------------------------

def _idx_bytes(array: np.ndarray, type_code: int = 0x08) -> bytes:
    header = bytes([0, 0, type_code, array.ndim]) + b"".join(struct.pack(">I", n) for n in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def test_read_idx_round_trip_gzip_and_plain(tmp_path):
    images = np.arange(3 * 4 * 5, dtype=np.uint8).reshape(3, 4, 5)
    gz = tmp_path / "images-idx3-ubyte.gz"
    gz.write_bytes(gzip.compress(_idx_bytes(images)))
    np.testing.assert_array_equal(ab.data.images.read_idx(gz), images)
    plain = tmp_path / "values-idx1"
    ints = np.array([1, -2, 300000], dtype=np.int32)
    plain.write_bytes(_idx_bytes(ints, 0x0C))
    np.testing.assert_array_equal(ab.data.images.read_idx(plain), ints)


def test_read_idx_truncated_file_is_a_clear_error(tmp_path):
    images = np.zeros((10, 28, 28), dtype=np.uint8)
    short = tmp_path / "short.gz"
    short.write_bytes(gzip.compress(_idx_bytes(images)[:-100]))
    with pytest.raises(ValueError, match=r"shape \(10, 28, 28\).*7840 bytes.*7740.*truncated"):
        ab.data.images.read_idx(short)
    cut_stream = tmp_path / "cut.gz"
    cut_stream.write_bytes(gzip.compress(_idx_bytes(images))[:40])
    with pytest.raises(ValueError, match="damaged or cut short"):
        ab.data.images.read_idx(cut_stream)


def test_read_idx_wrong_magic_number(tmp_path):
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(b"\x00\x00\x07\x01" + struct.pack(">I", 2) + b"ab"))
    with pytest.raises(ValueError, match="not an IDX file — magic number 00 00 07 01"):
        ab.data.images.read_idx(bad)
    tiny = tmp_path / "tiny"
    tiny.write_bytes(b"\x00")
    with pytest.raises(ValueError, match="too short"):
        ab.data.images.read_idx(tiny)


def test_fashion_mnist_is_registered_with_md5_hashes():
    ds = ab.data.registry.DATA_HUB["fashion-mnist"]
    names = {f.fname: f for f in ds.files}
    assert set(names) == {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                          "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}
    assert names["train-images-idx3-ubyte.gz"].known_hash == "md5:8d4fb7e6c68d591d4c3dfef9ec88bf0d"
    assert all(len(f.urls) == 2 and f.known_hash.startswith("md5:") for f in ds.files)


def test_load_fashion_mnist_reads_the_four_files(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    files = {}
    for prefix, n in (("train", 5), ("t10k", 3)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            path = tmp_path / f"{prefix}-{kind}-ubyte.gz"
            path.write_bytes(gzip.compress(_idx_bytes(array)))
            files[path.name] = (path, array)
    monkeypatch.setattr(ab.data.images, "fetch", lambda name, fname: files[fname][0])
    X, y = ab.data.images.load_fashion_mnist(train=False)
    assert X.shape == (3, 1, 28, 28) and X.dtype == torch.uint8 and y.dtype == torch.int64
    np.testing.assert_array_equal(X[:, 0].numpy(), files["t10k-images-idx3-ubyte.gz"][1])
    data = ab.load_image_data("fashion-mnist", 32, 2)
    assert data.name == "fashion-mnist" and data.classes[9] == "ankle boot" and len(data.train) == 3
    assert next(iter(data.train))[0].shape == (2, 1, 32, 32)


def test_fashion_mnist_offline_falls_back_to_digits(monkeypatch, tmp_path):
    monkeypatch.setenv(ab.core.config.DATA_ENV, str(tmp_path / "nowhere"))

    def offline(*args, **kwargs):
        raise ab.data.registry.DataUnavailableError("no network in this test")

    monkeypatch.setattr(ab.data.images, "fetch", offline)
    data = ab.load_image_data("fashion-mnist", 16, 32)
    assert data.name == "digits" and "unavailable" in data.note
    with pytest.raises(ab.data.registry.DataUnavailableError):
        ab.load_image_data("fashion-mnist", 16, 32, fallback=False)
    with pytest.raises(ValueError, match="'digits' or 'fashion-mnist'"):
        ab.load_image_data("cifar", 16, 32)


# --- batches ---------------------------------------------------------------------------------

def test_image_batches_resize_on_the_fly_and_cover_every_example():
    (x, y), (tx, ty) = ab.data.images.load_digits_images()
    assert x.shape[1:] == (1, 8, 8) and x.dtype == torch.uint8 and len(x) + len(tx) == 1797
    batches = ab.data.images.ImageBatches(x, y, batch_size=100, img_size=(16, 24), shuffle=True)
    seen = []
    for X, Y in batches:
        assert X.shape[1:] == (1, 16, 24) and X.dtype == torch.float32
        seen.append(Y)
    assert len(seen) == len(batches) == 15
    assert sorted(torch.cat(seen).tolist()) == sorted(y.tolist())
    first, second = next(iter(batches))[1], next(iter(batches))[1]
    assert not torch.equal(first, second), "the order should change every epoch"
    with pytest.raises(ValueError, match="images must be"):
        ab.data.images.ImageBatches(x[:, 0], y, 10, 8)


def _resized_on_the_cpu(images: torch.Tensor, img_size) -> torch.Tensor:
    """How the batches were made before they moved to the training device: floats, resize, standardise."""
    X = images.float() / 255.0
    if tuple(X.shape[-2:]) != tuple(img_size):
        shrinking = X.shape[-2] > img_size[0] or X.shape[-1] > img_size[1]
        X = torch.nn.functional.interpolate(X, size=img_size, mode="bilinear", align_corners=False,
                                            antialias=shrinking)
    return (X - 0.5) / 0.5


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else []) + (
    ["mps"] if torch.backends.mps.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("img_size", [(16, 24), (4, 4), (8, 8)])  # growing, shrinking (anti-aliased), unchanged
def test_image_batches_on_the_device_match_the_cpu_resize(device, img_size):
    (x, y), _ = ab.data.images.load_digits_images(seed=0)
    batches = ab.data.images.ImageBatches(x[:300], y[:300], batch_size=64, img_size=img_size, shuffle=True, seed=1, device=device)
    order = torch.randperm(300, generator=torch.Generator().manual_seed(1))
    for k, (X, Y) in enumerate(batches):
        assert X.device.type == device and Y.device.type == device
        idx = order[64 * k: 64 * (k + 1)]
        tolerance = 0 if device == "cpu" else 1e-5  # another device's arithmetic may round differently
        torch.testing.assert_close(X.cpu(), _resized_on_the_cpu(x[idx], img_size), rtol=0, atol=tolerance)
        assert torch.equal(Y.cpu(), y[idx])


def test_image_batches_follow_the_training_device_by_default():
    data = ab.load_image_data("digits", 8, 16, seed=0)
    assert data.train.device == data.test.device == ab.device(verbose=False)
    X, y = next(iter(ab.load_image_data("digits", 12, 16, seed=0, device="meta").train))
    assert X.device.type == "meta" and X.shape == (16, 1, 12, 12) and y.device.type == "meta"


# --- the CNN and the figures ---------------------------------------------------------------

def test_small_cnn_shapes_and_bad_input():
    cnn = ab.SmallCNN()
    assert cnn(torch.randn(2, 1, 16, 16)).shape == (2, 10)
    assert cnn(torch.randn(2, 1, 96, 96)).shape == (2, 10)
    with pytest.raises(ValueError, match=r"got \(2, 16, 16\)"):
        cnn(torch.randn(2, 16, 16))


def test_patch_grid_figure_and_cost():
    assert ab.models.vit.attention_cost(10, 4) == 2 * 100 * 4 + 4 * 10 * 16
    fig = ab.patch_grid_figure(np.random.rand(24, 36, 3), 6, num_hiddens=32)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert "4x6 grid" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="not divisible"):
        ab.patch_grid_figure(np.random.rand(24, 36), 7)


def test_cls_attention_figure():
    model = ab.ViT(8, 4, **TINY)
    X = torch.randn(3, 1, 8, 8)
    fig = ab.cls_attention_figure(X, model.attention_maps(X), model.grid_size, labels=[1, 2, 3], preds=[1, 2, 0])
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 9
    # its text says where the attention goes, not only the titles (accessibility reader, issue 38)
    maps = torch.zeros(2, 3, 2, 5, 5)
    maps[..., 0, 4] = 1.0  # <cls> looks at the last patch: bottom right of the 2x2 grid
    maps[..., 1:, 1] = 1.0  # the patches look at the top left one: rollout still peaks bottom right
    alt = ab.core.plot.figure_alt_text(ab.cls_attention_figure(X, maps, (2, 2), labels=[1, 2, 3], preds=[1, 2, 0]))
    assert alt.startswith("<cls> attention on 3 images; largest patch weight in the last layer, then the rollout: ")
    assert "rollout: 1: both bottom right; 2: both bottom right; 3 (predicted 0): both bottom right" in alt, alt
    wide = torch.randn(6, 1, 8, 8)
    six = ab.cls_attention_figure(wide, model.attention_maps(wide), model.grid_size, labels=[7] * 6, preds=[1] * 6)
    said = ab.core.plot.figure_alt_text(six)  # the chapter shows 6: all of them fit the alt text's length
    assert said.count("; 7: ") == 5 and len(said) <= ab.core.plot.ALT_TEXT_CHARS, said  # predictions dropped
    with pytest.raises(ValueError, match="images must be"):
        ab.cls_attention_figure(X[:2], model.attention_maps(X), model.grid_size)


# --- the assignment checker -------------------------------------------------------------

def test_checker_accepts_reference_and_rejects_wrong_orders(capsys):
    assert ab.assignments.check_patchify(ab.patchify, verbose=False)

    def channel_last(X, patch_size):  # flattens each patch (row, column, channel): a classic slip
        ph, pw = ab.core.checks.check_size_pair("patch_size", patch_size)
        b, c, h, w = X.shape
        P = X.reshape(b, c, h // ph, ph, w // pw, pw).permute(0, 2, 4, 3, 5, 1)
        return P.reshape(b, -1, c * ph * pw)

    report = ab.assignments.check_patchify(channel_last)
    assert not report and 0 < report.score < 1  # right for one channel, wrong for several
    assert "different embedding" in capsys.readouterr().out

    def plain_reshape(X, patch_size):  # reshape without permute: the pixels end up in the wrong patches
        ph, pw = ab.core.checks.check_size_pair("patch_size", patch_size)
        b, c, h, w = X.shape
        return X.reshape(b, (h // ph) * (w // pw), c * ph * pw)

    assert ab.assignments.check_patchify(plain_reshape, verbose=False).score < 1


def test_checker_reports_not_implemented(capsys):
    def todo(X, patch_size):
        raise NotImplementedError

    report = ab.assignments.check_patchify(todo)
    assert report.not_implemented and report.score == 0
    out = capsys.readouterr().out
    assert "raise NotImplementedError" in out and "patchify" in out
