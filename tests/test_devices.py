"""Package helpers that take a trained model and inputs move the inputs to the model's device.

A reader on a GPU trains a model there and then hands the helpers batches straight from a
DataLoader, which sit on the CPU. These tests put the model on PyTorch's ``meta`` device (a
second device every machine has; it holds shapes, no numbers), hand the helper CPU inputs and
stop the run at the model's first module call, recording the device the input arrived on.
Before the fix, ``reversal_attention_figure`` handed the CPU batch to a model on ``cuda:0``.
"""

import pytest
import torch
from torch.nn.modules.module import register_module_forward_pre_hook

import attention_book as ab
from attention_book.experiments import offset_task, reversal


class Reached(Exception):
    """Raised by the hook: the input reached the model, on the device stored in ``args``."""


@pytest.fixture
def input_device():
    """Run a call; return the device of the first tensor the first module call received."""

    def hook(_module, args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        raise Reached(tensors[0].device if tensors else None)

    def run(call):
        handle = register_module_forward_pre_hook(hook)
        try:
            with pytest.raises(Reached) as reached:
                call()
        finally:
            handle.remove()
        return reached.value.args[0]

    return run


def reverser_on(device):
    torch.manual_seed(0)
    return reversal.SequencePredictor(num_classes=10, num_hiddens=16).to(device)


@pytest.mark.parametrize(
    "helper",
    [
        lambda model, X: model.attention_maps(X),
        lambda model, X: reversal.reversal_attention_figure(model, X, index=1),
        lambda model, X: reversal.reversal_attention_profile(model, X),
    ],
    ids=["attention_maps", "reversal_attention_figure", "reversal_attention_profile"],
)
def test_reversal_helpers_move_cpu_inputs_to_the_models_device(input_device, helper):
    model, X = reverser_on("meta"), torch.randint(0, 10, (3, 16))
    assert input_device(lambda: helper(model, X)) == torch.device("meta")


def test_head_importance_moves_cpu_inputs_to_the_models_device(input_device):
    model = offset_task.OffsetTaskModel(vocab_size=16, seq_len=8, num_heads=2).to(
        "meta"
    )
    X, Y = torch.randint(0, 16, (4, 8)), torch.randint(0, 16, (4, 8, 4))

    def call():
        return offset_task.head_importance(model, model.attention, X, Y)

    assert input_device(call) == torch.device("meta")


def test_vit_attention_maps_move_cpu_inputs_to_the_models_device(input_device):
    torch.manual_seed(0)
    model = ab.ViT(
        img_size=16,
        patch_size=8,
        num_hiddens=16,
        mlp_num_hiddens=32,
        num_heads=2,
        num_blks=1,
        emb_dropout=0.0,
        blk_dropout=0.0,
    )
    X = torch.randn(2, 1, 16, 16)
    assert input_device(lambda: model.to("meta").attention_maps(X)) == torch.device(
        "meta"
    )


def test_reversal_maps_come_back_on_the_cpu_as_recorded():
    """The maps are the recorded attention weights, as float32 CPU tensors ready to plot."""
    model, X = reverser_on("cpu"), torch.randint(0, 10, (2, 16))
    maps = model.attention_maps(X)
    with ab.evaluating(model), torch.no_grad(), ab.record_attention(model) as record:
        model(X)
    assert [m.device.type for m in maps] == ["cpu"]
    assert [m.dtype for m in maps] == [torch.float32]
    torch.testing.assert_close(maps, record.tensors())
    assert torch.allclose(maps[0].sum(-1), torch.ones(2, 1, 16))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_reversal_figure_and_profile_with_the_model_on_the_gpu():
    """The failure a GPU reader met in chapter 7: a model on cuda, a validation batch on the CPU."""
    model, X = reverser_on("cuda"), torch.randint(0, 10, (4, 16))
    profile = reversal.reversal_attention_profile(model, X)
    assert set(profile) == {"argmax_on_target", "on_target", "on_neighbours"}
    assert all(0.0 <= value <= 1.0 for value in profile.values())
    reversal.reversal_attention_figure(model, X, index=2)
