"""The full-size smoke run (``make test-smoke``: ``ATTENTION_BOOK_MAX_STEPS``) caps more than ``fit``.

Its results mean nothing: it shows that every full-size configuration builds, runs and fits.
So the package bounds, under the cap, the work around each capped training run too: the
batches an experiment draws, the seeds a study trains, the examples an evaluation decodes.
These tests count that work with the cap set and unset, so they fail when a loop stops
reading the cap (each loop still runs, at least once).
"""

from __future__ import annotations

import pytest
import torch

import attention_book as ab
from attention_book.core.config import MAX_STEPS_ENV, capped_count
from attention_book.experiments import long_inputs

TINY_COPY = {"vocab_size": 4, "min_len": 2, "max_len": 5, "embed_size": 8, "num_hiddens": 8, "num_layers": 1,
             "steps": 12, "batch_size": 4, "attention_steps": 6}


def test_capped_count_is_n_unless_the_cap_is_smaller(monkeypatch):
    monkeypatch.delenv(MAX_STEPS_ENV, raising=False)
    assert [capped_count(n) for n in (1, 5, 3000)] == [1, 5, 3000]
    monkeypatch.setenv(MAX_STEPS_ENV, "2")
    assert [capped_count(n) for n in (1, 5, 3000)] == [1, 2, 2]


def _set_cap(monkeypatch, cap):
    """Set ATTENTION_BOOK_MAX_STEPS to ``cap``, or unset it for None."""
    if cap is None:
        monkeypatch.delenv(MAX_STEPS_ENV, raising=False)
    else:
        monkeypatch.setenv(MAX_STEPS_ENV, str(cap))


def _count_copy_work(monkeypatch):
    """Record the batches the copy task draws and the sequences its evaluation decodes."""
    drawn, decoded = [], []
    draw, decode = long_inputs.copy_batches, long_inputs.greedy_search

    def counting_draw(num_batches, *args, **kwargs):
        drawn.append(num_batches)
        return draw(num_batches, *args, **kwargs)

    def counting_decode(model, src, *args, **kwargs):
        decoded.append(src.shape[0])
        return decode(model, src, *args, **kwargs)

    monkeypatch.setattr(long_inputs, "copy_batches", counting_draw)
    monkeypatch.setattr(long_inputs, "greedy_search", counting_decode)
    return drawn, decoded


@pytest.mark.parametrize("cap", [None, 2])
def test_the_long_input_study_draws_trains_and_decodes_only_what_the_cap_allows(monkeypatch, one_thread, cap):
    _set_cap(monkeypatch, cap)
    drawn, decoded = _count_copy_work(monkeypatch)  # decoded: the batch size of each greedy decoding
    ab.seed_everything()
    runs = long_inputs.long_input_experiment(num_seeds=3, per_length=5, progress=False, **TINY_COPY)
    limit = 10**9 if cap is None else cap
    assert len(runs) == min(3, limit)  # seeds studied
    assert drawn == [min(12, limit)] * (2 * len(runs))  # training batches drawn, per model
    # every length from 2 to 5 is still scored, on at most `cap` sequences each
    assert all(set(acc) == {2, 3, 4, 5} for run in runs for acc in run.accuracy.values())
    assert decoded == [min(5, limit)] * (4 * 2 * len(runs))
    for run in runs:
        assert run.histories["no attention"].steps == min(12, limit)
        assert run.histories["attention"].steps == min(6, limit)


def test_book_seeds_are_the_studys_seeds_at_most_the_cap(monkeypatch):
    monkeypatch.delenv(MAX_STEPS_ENV, raising=False)
    monkeypatch.setenv("ATTENTION_BOOK_SEED", "7")
    assert ab.book_seeds(5) == [7, 8, 9, 10, 11]
    assert ab.book_seeds(3, start=1) == [8, 9, 10]
    monkeypatch.setenv(MAX_STEPS_ENV, "2")
    assert ab.book_seeds(5, start=1) == [8, 9]
    assert ab.book_seeds(1) == [7]


@pytest.mark.parametrize("cap", [None, 2])
def test_the_label_efficiency_study_trains_at_most_cap_seeds(monkeypatch, one_thread, cap):
    from attention_book.experiments import lm_tasks

    _set_cap(monkeypatch, cap)
    runs = []
    monkeypatch.setattr(lm_tasks, "_finetune_once", lambda *args, **kwargs: runs.append(args[1]) or 0.5)
    tok = None  # the study only hands the tokenizer on (to the batch maker, replaced here)
    drawn = []  # passages drawn per call: the held-out set first, then each seed's labels
    monkeypatch.setattr(lm_tasks, "replaced_task_batch",
                        lambda ids, tok, n, **kw: drawn.append(n) or (torch.zeros(n, 4), torch.zeros(n)))
    curve = lm_tasks.label_efficiency(None, torch.zeros(10), torch.zeros(10), tok, counts=[2, 4], steps=[3, 3],
                                      num_seeds=3, seq_len=4, replace_prob=0.5, batch_size=2, lr=1e-3, num_val=4)
    seeds = 3 if cap is None else min(3, cap)
    assert len(curve.seeds) == seeds
    assert runs == ["pretrained", "from scratch"] * 2 * seeds  # both starts, both counts, every seed
    assert drawn == [4 if cap is None else min(4, cap)] + [4] * seeds  # num_val=4, max(counts)=4


@pytest.mark.parametrize("cap", [None, 2])
def test_the_order_task_trains_at_most_cap_steps(monkeypatch, one_thread, cap):
    from attention_book.experiments import order_task

    _set_cap(monkeypatch, cap)
    run = order_task.train_previous_token(True, seq_len=5, num_hiddens=8, steps=6, eval_every=3, num_val=8, seed=0)
    assert run["steps"] == ([0, 3, 6] if cap is None else [0, 2])  # evaluated at the start and at the last step


@pytest.mark.parametrize("cap", [None, 2])
def test_the_lm_evaluations_read_at_most_cap_examples(monkeypatch, cap):
    from types import SimpleNamespace

    from attention_book.experiments import lm_tasks

    _set_cap(monkeypatch, cap)
    decoded = []
    monkeypatch.setattr(lm_tasks, "greedy_decode",
                        lambda model, enc, *args: decoded.append(len(enc)) or [[5]] * len(enc))
    tok = SimpleNamespace(bos_id=1, eos_id=2, encode=lambda text: [3, 4], id=lambda word: 5)
    labels = torch.tensor([[5, 2]] * 7)
    assert lm_tasks.exact_match(None, (torch.zeros(7, 3), None, labels), tok) == 1.0
    read = []

    class Counting(torch.nn.Module):  # a decoder-only model that always predicts token 5
        max_len = 8

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, ids):
            read.append(ids)
            return torch.nn.functional.one_hot(torch.full(ids.shape, 5), 6).float()

    assert lm_tasks.next_word_accuracy(Counting(), tok, ["a :"] * 9, ["a"] * 9) == 1.0
    assert decoded == [7 if cap is None else cap]  # examples decoded
    assert len(read) == (9 if cap is None else cap)  # prompts read
