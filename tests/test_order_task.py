"""Chapter 6's order task: without positions self-attention stays at the ceiling 1/(n-1); with them it learns."""

import torch

from attention_book.core.train import IGNORE
from attention_book.experiments import order_task


def test_batches_are_orderings_labelled_with_the_left_neighbour():
    X, Y = order_task.previous_token_batch(50, 7, torch.Generator().manual_seed(0))
    assert torch.equal(X.sort(dim=1).values, torch.arange(7).expand(50, 7))
    assert torch.all(Y[:, 0] == IGNORE)
    assert torch.equal(Y[:, 1:], X[:, :-1])


def test_without_positions_the_output_at_a_token_ignores_where_it_sits():
    torch.manual_seed(0)
    model = order_task.PreviousTokenModel(
        6, num_hiddens=16, num_heads=2, positions=False
    ).eval()
    X = torch.randperm(6)[None]
    perm = torch.randperm(6)
    torch.testing.assert_close(model(X[:, perm]), model(X)[:, perm])
    with_positions = order_task.PreviousTokenModel(
        6, num_hiddens=16, num_heads=2, positions=True
    ).eval()
    assert (with_positions(X[:, perm]) - with_positions(X)[:, perm]).abs().max() > 1e-3


def test_positions_make_the_task_learnable_and_their_absence_caps_accuracy():
    kwargs = {
        "seq_len": 6,
        "num_hiddens": 16,
        "steps": 200,
        "eval_every": 100,
        "num_val": 500,
        "seed": 3,
    }
    blind = order_task.train_previous_token(False, **kwargs)
    seeing = order_task.train_previous_token(True, **kwargs)
    assert blind["steps"] == seeing["steps"] == [0, 100, 200]
    assert blind["val_accuracy"][-1] < 1 / 5 + 0.05
    assert seeing["val_accuracy"][-1] > 0.9
    assert order_task.accuracy_curves_figure([blind, seeing], seq_len=6) is not None
