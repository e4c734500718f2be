"""ab.fit's precision, its step cap and the torchrun settings it reads (on the CPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book.core import train as train_module


def _problem(num_batches: int = 4):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(16 * num_batches, 8, generator=g)
    y = (X @ torch.randn(8, generator=g) > 0).long()
    return [(X[i:i + 16], y[i:i + 16]) for i in range(0, len(X), 16)]


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))


def _recording_loss(seen: list):
    def loss_fn(model, batch):
        X, y = batch
        logits = model(X)
        seen.append(logits.dtype)
        return nn.functional.cross_entropy(logits, y), len(y)

    return loss_fn


def test_bf16_autocast_trains_on_the_cpu(one_thread):
    seen = []
    history = ab.fit(_model(), _problem(), _recording_loss(seen), epochs=15, lr=0.01, precision="bf16",
                     progress=False, device="cpu")
    assert set(seen) == {torch.bfloat16}, "the forward pass should run under bfloat16 autocast"
    assert history.train_loss[-1] < 0.5 * history.train_loss[0]


def test_32_and_auto_on_the_cpu_stay_in_float32(one_thread):
    for precision in ("32", "auto"):
        seen = []
        model = _model()
        ab.fit(model, _problem(1), _recording_loss(seen), epochs=1, precision=precision, progress=False,
               device="cpu")
        assert set(seen) == {torch.float32}
        assert all(p.dtype == torch.float32 for p in model.parameters())


def test_fp16_without_a_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match=r"precision='fp16' needs a CUDA GPU.*'bf16'"):
        ab.fit(_model(), _problem(1), _recording_loss([]), epochs=1, precision="fp16", progress=False, device="cpu")


@pytest.mark.parametrize("bad", ["16", "fp32", "float16", 32, "BF16"])
def test_unknown_precisions_are_rejected(bad):
    with pytest.raises(ValueError, match=r"precision must be one of '32', 'bf16', 'fp16', 'auto', got"):
        ab.fit(_model(), _problem(1), _recording_loss([]), epochs=1, precision=bad, progress=False, device="cpu")


def test_auto_picks_by_device():
    assert train_module._precision("auto", torch.device("cpu")) == (None, False)
    assert train_module._precision("bf16", torch.device("cpu")) == (torch.bfloat16, False)
    if torch.cuda.is_available():
        dtype, scaled = train_module._precision("auto", torch.device("cuda"))
        assert (dtype, scaled) in ((torch.bfloat16, False), (torch.float16, True))


def test_the_loss_scaler_changes_neither_losses_nor_clipping(monkeypatch, one_thread):
    """The GradScaler path (what 'fp16' takes on a GPU), run on the CPU with bfloat16 autocast:
    the recorded losses are the unscaled ones, clipping sees the unscaled gradients, and the
    weights follow the run without a scaler."""
    norms = []
    clip = train_module.grad_clipping

    def recording_clip(model, max_norm):
        norm = clip(model, max_norm)
        norms.append(float(norm))
        return norm

    monkeypatch.setattr(train_module, "grad_clipping", recording_clip)
    runs = {}
    for scaled in (False, True):
        monkeypatch.setattr(train_module, "_precision", lambda p, dev, scaled=scaled: (torch.bfloat16, scaled))
        norms.clear()
        model = _model()
        history = ab.fit(model, _problem(), _recording_loss([]), epochs=3, lr=0.01, clip_grad=0.5,
                         optimizer=torch.optim.SGD(model.parameters(), lr=0.1), progress=False, device="cpu")
        runs[scaled] = (history.train_loss, list(norms), model.state_dict())
    (plain_loss, plain_norms, plain_state), (scaled_loss, scaled_norms, scaled_state) = runs[False], runs[True]
    assert scaled_loss == pytest.approx(plain_loss, rel=1e-5)
    assert scaled_norms == pytest.approx(plain_norms, rel=1e-4), "clipping must see unscaled gradients"
    for name, value in plain_state.items():
        torch.testing.assert_close(scaled_state[name], value)


def test_max_steps_caps_every_run(monkeypatch, one_thread):
    monkeypatch.setenv(ab.core.config.MAX_STEPS_ENV, "6")
    assert ab.core.config.max_steps() == 6
    evaluations = []
    history = ab.fit(_model(), _problem(4), _recording_loss([]), epochs=50, progress=False, device="cpu",
                     evaluate=lambda m: evaluations.append(1) or {"calls": len(evaluations)})
    assert history.steps == 6 and history.capped == 6 and len(history.lr) == 6
    assert len(history.train_loss) == 2 and history.metrics["calls"] == [1, 2]  # 4 steps, then 2 of the next epoch
    assert "stopped at the cap of 6 steps" in history.summary()
    monkeypatch.setenv(ab.core.config.MAX_STEPS_ENV, "100")
    assert ab.fit(_model(), _problem(4), _recording_loss([]), epochs=2, progress=False).capped is None


@pytest.mark.parametrize("bad", ["0", "-3", "two", "1.5"])
def test_max_steps_rejects_what_is_not_a_positive_integer(monkeypatch, bad):
    monkeypatch.setenv(ab.core.config.MAX_STEPS_ENV, bad)
    with pytest.raises(ValueError, match=ab.core.config.MAX_STEPS_ENV):
        ab.core.config.max_steps()
    monkeypatch.delenv(ab.core.config.MAX_STEPS_ENV)
    assert ab.core.config.max_steps() is None


def test_torchrun_settings_are_read_in_config(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert ab.distributed_run() is None and ab.is_main_process()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert ab.distributed_run() is None  # a job of one process runs alone
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert ab.distributed_run() == ab.core.config.DistributedRun(world_size=4, rank=3, local_rank=1)
    assert not ab.is_main_process()
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ValueError, match="RANK=4"):
        ab.distributed_run()
    monkeypatch.delenv("RANK")
    with pytest.raises(ValueError, match="RANK=''"):
        ab.distributed_run()


def test_training_precision_follows_the_size(monkeypatch):
    monkeypatch.setenv(ab.core.config.SIZE_ENV, "ci")
    assert ab.training_precision() == "32"
    monkeypatch.setenv(ab.core.config.SIZE_ENV, "full")
    assert ab.training_precision() == "auto"


def test_fit_defaults_to_the_sizes_precision(monkeypatch):
    """precision=None follows ab.training_precision(): '32' at ci size, 'auto' (float32 on a CPU) at full."""
    for size in ("ci", "full"):
        monkeypatch.setenv("ATTENTION_BOOK_SIZE", size)
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        data = [(torch.randn(8, 3), torch.randn(8, 1)) for _ in range(2)]
        history = ab.fit(model, data, lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]), epochs=1,
                         device="cpu", progress=False)
        assert len(history.train_loss) == 1
    assert ab.training_precision() == "auto"


def test_capped_batches_cuts_evaluation_only_under_the_cap(monkeypatch):
    batches = [(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))] * 5
    assert list(ab.core.train.capped_batches(batches)) == batches
    monkeypatch.setenv("ATTENTION_BOOK_MAX_STEPS", "2")
    assert len(list(ab.core.train.capped_batches(batches))) == 2
    model = nn.Linear(3, 4)
    assert 0.0 <= ab.accuracy(model, batches) <= 1.0


# --- what loss_fn and train_data may be (issue 28) -------------------------------------------

def _mse(model, batch):
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def _linear_batches(n=3):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 2, generator=g), torch.randn(4, 1, generator=g)) for _ in range(n)]


def test_fit_refuses_a_one_shot_iterator_for_several_epochs():
    batches = _linear_batches()
    with pytest.raises(ValueError, match="train_data is a generator, an iterator that can be iterated only once, "
                                         "but epochs=2 needs 2 passes"):
        ab.fit(nn.Linear(2, 1), (b for b in batches), _mse, epochs=2, progress=False, device="cpu")
    # One epoch over a generator is fine; a list or a DataLoader can be iterated again.
    assert ab.fit(nn.Linear(2, 1), (b for b in batches), _mse, epochs=1, progress=False, device="cpu").steps == 3
    assert ab.fit(nn.Linear(2, 1), batches, _mse, epochs=2, progress=False, device="cpu").steps == 6

    class OnceOnly:  # an iterable (not an iterator) that is empty the second time
        def __init__(self):
            self.left = list(batches)

        def __iter__(self):
            left, self.left = self.left, []
            return iter(left)

    with pytest.raises(ValueError, match="no batches in epoch 2, after 3 in the epochs before: it can be iterated "
                                         "only once"):
        ab.fit(nn.Linear(2, 1), OnceOnly(), _mse, epochs=2, progress=False, device="cpu")


def test_fit_counts_zero_negative_and_what_loss_fn_returns():
    batches = _linear_batches()
    fit = lambda loss_fn, data=batches: ab.fit(nn.Linear(2, 1), data, loss_fn, epochs=1, progress=False,
                                               device="cpu")
    with pytest.raises(ValueError, match="count of 0 for every batch of epoch 1") as err:
        fit(lambda m, b: (_mse(m, b), 0))
    assert "diverged" not in str(err.value)
    # A batch of count 0 adds nothing to the epoch's mean: with lr=0 (no update) the mean is that of the others.
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    with torch.no_grad():
        expected = (_mse(model, batches[0]) + _mse(model, batches[2])).item() / 2
    counted = ab.fit(model, batches, lambda m, b: (_mse(m, b), 0 if torch.equal(b[0], batches[1][0]) else 4), epochs=1, lr=0.0,
                     progress=False, device="cpu")
    assert counted.train_loss[0] == pytest.approx(expected, rel=1e-6)
    for bad, match in ((-1, "count must be at least 0, got -1"), (torch.tensor(-2.0), r"count must lie in \[0, inf\]"),
                       (torch.ones(2), "0-dim real tensor"), ("4", "must be a number"), (True, "must be a number")):
        with pytest.raises(ValueError, match=match):
            fit(lambda m, b, bad=bad: (_mse(m, b), bad))
    with pytest.raises(TypeError, match="loss_fn must return the loss as a torch.Tensor .* got float"):
        fit(lambda m, b: _mse(m, b).detach().item())
    with pytest.raises(ValueError, match="pair \\(loss, count\\), got a tuple of 3"):
        fit(lambda m, b: (_mse(m, b), 4, 1))
    with pytest.raises(ValueError, match="without a gradient"):
        fit(lambda m, b: _mse(m, b).detach())
    with pytest.raises(ValueError, match="scalar loss"):
        fit(lambda m, b: nn.functional.mse_loss(m(b[0]), b[1], reduction="none"))


def test_fit_learns_of_website_builds_only_through_its_progress_callback(monkeypatch, capsys):
    """Issue 29: the training loop never reads the build mode; the book's machinery hands it a bar."""
    import inspect

    assert "static_explorers" not in inspect.getsource(train_module)
    made = []

    class Bar:
        def __init__(self, total, desc):
            made.append((total, desc))

        def update(self, n):
            pass

        def set_postfix(self, post):
            pass

        def close(self):
            made.append("closed")

    model = torch.nn.Linear(2, 1)
    batches = [(torch.ones(4, 2), torch.zeros(4, 1))]
    loss = lambda m, b: (torch.nn.functional.mse_loss(m(b[0]), b[1]), len(b[0]))  # noqa: E731
    ab.fit(model, batches, loss, epochs=2, progress=Bar, desc="mine")
    assert made == [(2, "mine"), "closed"]
    # the installed default is the book's: on a website build it prints nothing (issue 36: the page
    # states results in prose, no progress bar)
    capsys.readouterr()
    monkeypatch.setenv("ATTENTION_BOOK_EXPLORERS", "static")
    ab.fit(model, batches, loss, epochs=2, desc="on a page")
    captured = capsys.readouterr()
    assert "on a page" not in captured.out + captured.err
    with pytest.raises(ValueError, match="callable"):
        train_module.use_progress_bar("tqdm")
