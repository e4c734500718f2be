"""ab.record_attention: one map per attention module per recorded call, for every model in the book;
outside it, train and eval mode both take the fused path."""

from __future__ import annotations

import pytest
import torch

import attention_book as ab


def _ids(batch, length, vocab, seed=0):
    return torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _bahdanau(attention):
    model = ab.make_seq2seq(11, 13, 8, 16, 2, attention=attention).eval()
    return model, lambda: model(_ids(2, 5, 11), _ids(2, 4, 13), torch.tensor([5, 3])), [("cross", (2, 1, 4, 5))]


def _transformer():
    model = ab.make_transformer(11, 13, 16, 32, 2, 3, 0.0).eval()
    run = lambda: model(_ids(2, 6, 11), _ids(2, 4, 13), torch.tensor([6, 2]))  # noqa: E731
    return model, run, [("self", (2, 2, 6, 6))] * 3 + [("self", (2, 2, 4, 4)), ("cross", (2, 2, 4, 6))] * 3


def _reverser(scoring):
    heads = 2 if scoring == "dot" else 1
    model = ab.experiments.reversal.SequencePredictor(10, num_hiddens=16, num_heads=heads, num_blks=2, scoring=scoring).eval()
    return model, lambda: model(_ids(3, 7, 10)), [("self", (3, heads, 7, 7))] * 2


def _vit():
    model = ab.ViT(img_size=28, patch_size=14, num_hiddens=16, mlp_num_hiddens=32, num_heads=4, num_blks=2,
                   emb_dropout=0.0, blk_dropout=0.0, in_channels=1).eval()
    return model, lambda: model(torch.randn(2, 1, 28, 28)), [("self", (2, 4, 5, 5))] * 2


def _encoder_only():
    model = ab.EncoderOnlyLM(20, num_hiddens=16, num_heads=2, num_blks=2).eval()
    return model, lambda: model(_ids(2, 6, 20)), [("self", (2, 2, 6, 6))] * 2


def _decoder_only():
    model = ab.DecoderOnlyLM(20, num_hiddens=16, num_heads=2, num_blks=3).eval()
    return model, lambda: model(_ids(2, 6, 20)), [("self", (2, 2, 6, 6))] * 3


def _encoder_decoder():
    model = ab.EncoderDecoderLM(20, num_hiddens=16, num_heads=2, num_blks=2).eval()
    run = lambda: model(_ids(2, 6, 20), _ids(2, 4, 20))  # noqa: E731
    return model, run, [("self", (2, 2, 6, 6))] * 2 + [("self", (2, 2, 4, 4)), ("cross", (2, 2, 4, 6))] * 2


def _heads_model():
    model = ab.experiments.offset_task.OffsetTaskModel(num_heads=4).eval()
    return model, lambda: model(_ids(3, 8, 8)), [("self", (3, 4, 8, 8))]


MODELS = {"bahdanau-additive": lambda: _bahdanau("additive"), "bahdanau-dot": lambda: _bahdanau("dot"),
          "transformer": _transformer, "reverser-dot": lambda: _reverser("dot"),
          "reverser-additive": lambda: _reverser("additive"), "vit": _vit, "bert": _encoder_only,
          "gpt": _decoder_only, "t5": _encoder_decoder, "heads": _heads_model}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_map_per_attention_module_per_call(name):
    torch.manual_seed(0)
    model, run, expected = MODELS[name]()
    with torch.no_grad(), ab.record_attention(model) as maps:
        run()
    assert [(m.kind, tuple(m.weights.shape)) for m in maps] == expected, maps
    for kind in ("self", "cross"):
        layers = [m.layer for m in maps if m.kind == kind]
        assert layers == list(range(len(layers)))
    for m in maps:  # rows are distributions (or all zero for a query with nothing to see)
        sums = m.weights.sum(-1)
        assert torch.all(((sums - 1).abs() < 1e-5) | (sums == 0)), m.name


@pytest.mark.parametrize("name", sorted(MODELS))
def test_outside_the_recorder_eval_mode_takes_the_fused_path(name):
    model, run, _ = MODELS[name]()
    attention = [m for m in model.modules() if isinstance(m, (ab.MultiHeadAttention, ab.DotProductAttention))]
    with torch.no_grad():
        run()
    assert all(m.attention_weights is None for m in attention), "an eval-mode pass kept explicit weights"


def test_a_cached_decoder_gives_the_causal_map_of_the_whole_decoding():
    """Step-by-step decoding with the key/value cache: one map per module, queries stacked, keys padded."""
    torch.manual_seed(0)
    model = ab.make_transformer(11, 13, 16, 32, 2, 2, 0.0).eval()
    src, lens = _ids(1, 5, 11), torch.tensor([5])
    with torch.no_grad(), ab.record_attention(model.decoder) as maps:
        (ids,), _ = ab.greedy_search(model, src, lens, 1, 2, max_steps=4)
    self_maps = maps.tensors("self")
    steps = self_maps[0].shape[-2]
    assert len(self_maps) == 2 and self_maps[0].shape[-1] == steps
    assert torch.all(self_maps[0][0, 0].triu(1) == 0)
    # The same maps as one teacher-forced pass over the decoder's inputs (<bos>, then each prediction).
    inputs = torch.tensor([([1] + ids + [2])[:steps]])
    with torch.no_grad(), ab.record_attention(model.decoder) as forced:
        model.decoder(inputs, model.decoder.init_state(model.encoder(src, lens), lens))
    torch.testing.assert_close(maps.stacked("self"), forced.stacked("self"), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(maps.stacked("cross"), forced.stacked("cross"), atol=1e-5, rtol=1e-4)


def test_the_recorder_restores_everything_and_rejects_non_models():
    model, run, _ = _transformer()
    with ab.record_attention(model):
        pass
    assert all(not m._forward_hooks for m in model.modules())
    with pytest.raises(ValueError, match="nn.Module"):
        with ab.record_attention("model"):
            pass
    with pytest.raises(ValueError, match="no attention module"):
        with ab.record_attention(torch.nn.Linear(2, 2)):
            pass
    with ab.record_attention(model) as maps:
        run()
    with pytest.raises(ValueError, match="kind must be"):
        maps.tensors("both")
    with pytest.raises(ValueError, match="no attention of kind"):
        maps.stacked("cross", under="encoder")


class HostSync(AssertionError):
    pass


@pytest.mark.parametrize("name", sorted(MODELS))
def test_forward_reads_no_tensor_value_on_the_host(name):
    model, run, _ = MODELS[name]()
    with pytest.MonkeyPatch.context() as patch:
        def refuse(self, *args, **kwargs):
            raise HostSync("a tensor value was read on the host")

        for method in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
            patch.setattr(torch.Tensor, method, refuse)
        with torch.no_grad():
            run()
