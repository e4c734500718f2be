"""Chapter 7's recurrent baseline for reversal: the bidirectional GRU tagger and accuracy by position."""

import pytest
import torch

import attention_book as ab
from attention_book.experiments import reversal


def count(model):
    return sum(p.numel() for p in model.parameters())


def test_recurrent_tagger_gives_one_score_row_per_position():
    model = reversal.RecurrentTagger(10, 8)
    assert model(torch.randint(0, 10, (3, 7))).shape == (3, 7, 10)
    assert model(torch.randint(0, 10, (1, 1))).shape == (1, 1, 10)


def test_recurrent_tagger_has_about_the_transformers_parameter_count():
    """The chapter compares it with the one-block one-head SequencePredictor, d = 32."""
    gru, transformer = count(reversal.RecurrentTagger(10, 26)), count(reversal.SequencePredictor(10, 32))
    assert abs(gru - transformer) / transformer < 0.05
    # embedding, two directions of a GRU (3 gates, input and hidden weights, 2 biases), output network
    h = e = 26
    gru_weights = 2 * 3 * (h * e + h * h + 2 * h)
    assert gru == 10 * e + gru_weights + (2 * h * h + h) + 2 * h + (h * 10 + 10)
    with pytest.raises(TypeError):  # the embedding is num_hiddens wide, as the chapter's class
        reversal.RecurrentTagger(10, 26, embed_size=4)


def test_recurrent_tagger_sees_both_sides():
    """Changing the last input moves the first output, and the first input the last output."""
    ab.seed_everything(0)
    model = reversal.RecurrentTagger(10, 8).eval()
    X = torch.randint(0, 10, (1, 6))
    for changed, watched in ((5, 0), (0, 5)):
        Y = X.clone()
        Y[0, changed] = (Y[0, changed] + 1) % 10
        assert not torch.allclose(model(X)[0, watched], model(Y)[0, watched])


def test_recurrent_tagger_rejects_bad_sizes():
    with pytest.raises(ValueError):
        reversal.RecurrentTagger(0, 8)
    with pytest.raises(ValueError):
        reversal.RecurrentTagger(10, 0)


@pytest.mark.slow
def test_recurrent_tagger_learns_a_four_digit_reversal_quickly():
    """400 steps: at n = 4 the state holds two digits at most (seeds 0-3 gave 99.3-100%)."""
    ab.seed_everything(0)
    train, val, _ = reversal.reverse_loaders(64, num_train=6400, num_val=500, num_test=1, seq_len=4, seed=0)
    model = reversal.RecurrentTagger(10, 26)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = ab.warmup_cosine_schedule(opt, 20, 4 * len(train))
    with ab.single_thread():
        ab.fit(model, train, reversal.token_loss, epochs=4, optimizer=opt, scheduler=sched, clip_grad=5.0,
               progress=False, device="cpu")
    assert ab.accuracy(model, val) > 0.95
    assert reversal.accuracy_by_position(model, val).min() > 0.9


class Echo(torch.nn.Module):
    """Scores that predict the input itself."""

    def __init__(self):
        super().__init__()
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, X):
        return torch.nn.functional.one_hot(X, 10).float()


def test_accuracy_by_position_counts_each_position_on_its_own():
    X = torch.tensor([[1, 2, 3], [4, 5, 6]])
    Y = torch.tensor([[1, 0, 3], [4, 0, 0]])
    batches = [(X[:1], Y[:1]), (X[1:], Y[1:])]
    assert reversal.accuracy_by_position(Echo(), batches).tolist() == [1.0, 0.0, 0.5]
    assert reversal.accuracy_by_position(Echo(), batches).shape == (3,)
    with pytest.raises(ValueError):
        reversal.accuracy_by_position(Echo(), [])
    assert ab.accuracy(Echo(), batches) == pytest.approx(3 / 6)


def test_accuracy_by_position_honours_the_smoke_runs_cap(monkeypatch):
    """With ATTENTION_BOOK_MAX_STEPS set it reads as many batches as ab.accuracy does."""
    X = torch.tensor([[1, 2], [3, 4]])
    batches = [(X[:1], X[:1]), (X[1:], torch.zeros_like(X[1:]))]  # all right, then all wrong
    monkeypatch.setenv("ATTENTION_BOOK_MAX_STEPS", "1")
    assert reversal.accuracy_by_position(Echo(), batches).tolist() == [1.0, 1.0]
    assert ab.accuracy(Echo(), batches) == 1.0
    monkeypatch.delenv("ATTENTION_BOOK_MAX_STEPS")
    assert reversal.accuracy_by_position(Echo(), batches).tolist() == [0.5, 0.5]
