"""A small training run for tests/test_distributed.py, alone or under ``torchrun``.

``train(kind, batch_size)`` fits a small regression MLP with :func:`attention_book.fit` on
a fixed data set and returns the history and the model. ``kind='loader'`` feeds a
``DataLoader`` (unshuffled, so that a single process with twice the batch sees exactly the
examples the two processes see together); ``kind='list'`` feeds a plain list of batches
(each process takes every second batch); ``kind='shuffled'`` a shuffled ``DataLoader``
(a new order every epoch). Run as a script under ``torchrun`` it trains every kind with
``batch_size`` per process and writes each process's losses and weights to
``<out>/<kind>-rank<r>.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

import attention_book as ab

EPOCHS = 3
NUM_EXAMPLES = 96


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    X = torch.randn(NUM_EXAMPLES, 5, generator=g)
    y = torch.sin(X @ torch.randn(5, generator=g)) + 0.1 * torch.randn(NUM_EXAMPLES, generator=g)
    return X, y


def loss_fn(model: nn.Module, batch) -> tuple[torch.Tensor, int]:
    X, y = batch
    return nn.functional.mse_loss(model(X).squeeze(-1), y), len(y)


class Net(nn.Module):
    """An MLP with a head its loss never uses (as a pretrained model's unused classifier)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(5, 32), nn.Tanh(), nn.Linear(32, 1))
        self.spare = nn.Linear(32, 2)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.body(X)


def train(kind: str, batch_size: int):
    X, y = make_data()
    torch.manual_seed(3)  # the same starting weights in every process (DDP also copies rank 0's)
    model = Net()
    if kind in ("loader", "shuffled"):
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=batch_size,
                                           shuffle=kind == "shuffled", generator=torch.Generator().manual_seed(5))
    elif kind == "list":
        data = [(X[i:i + batch_size], y[i:i + batch_size]) for i in range(0, NUM_EXAMPLES, batch_size)]
    else:
        raise ValueError(f"kind must be 'loader', 'shuffled' or 'list', got {kind!r}")
    history = ab.fit(model, data, loss_fn, epochs=EPOCHS, lr=0.02, clip_grad=1.0, progress=False, device="cpu",
                     evaluate=lambda m: {"mse": float(loss_fn(m, (X, y))[0])})
    return history, model


if __name__ == "__main__":
    out, batch_size = Path(sys.argv[1]), int(sys.argv[2])
    run = ab.distributed_run()
    for kind in ("loader", "list", "shuffled"):
        history, model = train(kind, batch_size)
        torch.save({"train_loss": history.train_loss, "mse": history.metrics["mse"], "steps": history.steps,
                    "world_size": run.world_size if run else 1, "state": model.state_dict()},
                   out / f"{kind}-rank{run.rank if run else 0}.pt")
