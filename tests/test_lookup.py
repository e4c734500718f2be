"""Chapter 1: the soft database lookup, attention pooling and its checker."""

import matplotlib.figure
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attention_book as ab

KEYS = [k for k, _ in ab.experiments.lookup.NAME_DATABASE]
WITHOUT_LI = tuple(pair for pair in ab.experiments.lookup.NAME_DATABASE if pair[0] != "Li")

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=10)


# --- similarity and lookups -----------------------------------------------------------

@given(names, names)
def test_similarity_is_symmetric_bounded_and_one_for_equal(a, b):
    s = ab.experiments.lookup.string_similarity(a, b)
    assert 0.0 <= s <= 1.0
    assert s == pytest.approx(ab.experiments.lookup.string_similarity(b, a))
    assert ab.experiments.lookup.string_similarity(a, a) == 1.0
    assert ab.experiments.lookup.string_similarity(a, a.upper()) == 1.0  # case is ignored


def test_similarity_ranks_typos_above_unrelated_names():
    assert ab.experiments.lookup.string_similarity("Smolla", "Smola") > 0.8
    assert ab.experiments.lookup.string_similarity("Smolla", "Zhang") == 0.0
    assert ab.experiments.lookup.string_similarity("Li", "Lipton") > ab.experiments.lookup.string_similarity("Li", "Hu")


def test_exact_approximate_and_soft_lookup():
    assert ab.experiments.lookup.exact_lookup("Li") == "Mu" and ab.experiments.lookup.exact_lookup("li") == "Mu"
    assert ab.experiments.lookup.exact_lookup("Li", WITHOUT_LI) is None  # no record, no answer
    assert ab.experiments.lookup.approximate_lookup("Li", WITHOUT_LI) == "Zachary"  # the closest key is Lipton
    assert ab.experiments.lookup.approximate_lookup("Wernes") == "Brent"
    soft = ab.experiments.lookup.soft_lookup("Li", temperature=0.05)
    assert list(soft)[:2] == ["Mu", "Zachary"] and soft["Mu"] > 0.99
    assert sum(soft.values()) == pytest.approx(1.0)


def test_soft_lookup_adds_weights_of_equal_values():
    db = (("Smith", "Alex"), ("Smyth", "Alex"), ("Jones", "Sam"))
    soft = ab.experiments.lookup.soft_lookup("Smith", db, temperature=1e3)  # nearly uniform weights
    assert soft["Alex"] == pytest.approx(2 / 3, abs=1e-3) and soft["Sam"] == pytest.approx(1 / 3, abs=1e-3)


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=0.01, max_value=100.0))
def test_lookup_weights_are_a_distribution(temperature):
    w = ab.experiments.lookup.lookup_weights(list(ab.experiments.lookup.LOOKUP_QUERIES), KEYS, temperature)
    assert w.shape == (len(ab.experiments.lookup.LOOKUP_QUERIES), len(KEYS))
    assert (w >= 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(len(ab.experiments.lookup.LOOKUP_QUERIES)))


def test_temperature_limits_are_lookup_and_average():
    cold = ab.experiments.lookup.lookup_weights(["Li", "Smolla"], KEYS, 1e-3)
    torch.testing.assert_close(cold, torch.nn.functional.one_hot(torch.tensor([2, 3]), 6).float())
    hot = ab.experiments.lookup.lookup_weights(["Li"], KEYS, 1e4)
    torch.testing.assert_close(hot, torch.full((1, 6), 1 / 6), atol=1e-4, rtol=0)


def test_soft_lookup_gets_sharper_as_temperature_drops():
    tops = [ab.experiments.lookup.soft_lookup("Hue", temperature=t)["Rachel"] for t in (3.0, 1.0, 0.3, 0.1)]
    assert tops == sorted(tops) and tops[-1] > 0.9


# --- attention pooling -------------------------------------------------------------------

def test_attention_pool_special_cases():
    values = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    one_hot = torch.tensor([[0.0, 1.0, 0.0]])
    torch.testing.assert_close(ab.experiments.lookup.attention_pool(one_hot, values), values[1:2])
    uniform = torch.full((1, 3), 1 / 3)
    torch.testing.assert_close(ab.experiments.lookup.attention_pool(uniform, values), values.mean(0, keepdim=True))
    batched = ab.experiments.lookup.attention_pool(torch.rand(4, 5, 3), values.expand(4, 3, 2))
    assert batched.shape == (4, 5, 2)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 10_000))
def test_normalised_nonnegative_weights_give_convex_combinations(m, d, seed):
    gen = torch.Generator().manual_seed(seed)
    weights = ab.experiments.lookup.normalize_weights(torch.rand(3, m, generator=gen) + 1e-3)
    values = torch.randn(m, d, generator=gen)
    out = ab.experiments.lookup.attention_pool(weights, values)
    assert (out >= values.min(0).values - 1e-5).all() and (out <= values.max(0).values + 1e-5).all()


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="temperature"):
        ab.experiments.lookup.lookup_weights(["Li"], KEYS, 0.0)
    with pytest.raises(ValueError, match="temperature"):
        ab.experiments.lookup.soft_lookup("Li", temperature=-1)
    with pytest.raises(ValueError, match="empty"):
        ab.experiments.lookup.exact_lookup("Li", ())
    with pytest.raises(ValueError, match="non-empty"):
        ab.experiments.lookup.string_similarity("", "Li")
    with pytest.raises(TypeError):
        ab.experiments.lookup.similarity_scores("Li", KEYS)
    with pytest.raises(ValueError, match=r"weights \(2, 3\).*values \(4, 1\)"):
        ab.experiments.lookup.attention_pool(torch.rand(2, 3), torch.rand(4, 1))
    with pytest.raises(ValueError, match="nonnegative"):
        ab.experiments.lookup.normalize_weights(torch.tensor([[1.0, -1.0]]))
    with pytest.raises(ValueError, match="sums to zero"):
        ab.experiments.lookup.normalize_weights(torch.zeros(1, 3))


def test_lookup_figure_draws():
    fig = ab.experiments.lookup.lookup_figure(temperature=0.1, query="Smolla")
    assert isinstance(fig, matplotlib.figure.Figure)
    assert "Alex" in fig.axes[1].get_title()
    assert isinstance(ab.experiments.lookup.pooling_regions_figure(n_samples=20), matplotlib.figure.Figure)
    with pytest.raises(ValueError, match=r"\(m, 2\)"):
        ab.experiments.lookup.pooling_regions_figure(torch.rand(4, 3))


# --- the assignment checker --------------------------------------------------------------

def _good(scores, values, temperature):
    t = temperature[..., None]
    safe = torch.where(t > 0, t, torch.ones_like(t))
    ties = (scores == scores.max(-1, keepdim=True).values).to(scores.dtype)
    weights = torch.where(t > 0, torch.softmax(scores / safe, dim=-1), ties / ties.sum(-1, keepdim=True))
    return weights @ values, weights


def _naive_exp(scores, values, temperature):
    e = torch.exp(scores / temperature.clamp_min(1e-6)[..., None])
    weights = e / e.sum(-1, keepdim=True)
    return weights @ values, weights


def _wrong_axis(scores, values, temperature):
    weights = torch.softmax(scores / temperature.clamp_min(1e-6)[..., None], dim=-2)
    return weights @ values, weights


def _no_temperature(scores, values, temperature):
    weights = torch.softmax(scores, dim=-1)  # the chapter's pooling, the temperature left out
    return weights @ values, weights


def test_checker_accepts_reference_and_rejects_wrong_solutions(capsys):
    report = ab.assignments.check_softmax_pool(_good)
    assert report and report.score == 1.0
    for wrong in (_naive_exp, _wrong_axis, _no_temperature):
        bad = ab.assignments.check_softmax_pool(wrong, verbose=False)
        assert not bad and bad.score < 1.0, wrong.__name__


def test_checker_reports_not_implemented(capsys):
    def todo(scores, values, temperature):
        raise NotImplementedError

    report = ab.assignments.check_softmax_pool(todo)
    assert report.not_implemented and report.score == 0.0
    assert "not implemented" in capsys.readouterr().out


def test_checker_says_which_tensor_each_set_of_values_belongs_to(capsys):
    def scaled(scores, values, temperature):  # right weights, pooled values 10% too large
        weights = _good(scores, values, temperature)[1]
        return 1.1 * (weights @ values), weights

    ab.assignments.check_softmax_pool(scaled)
    lines = [line for line in capsys.readouterr().out.splitlines() if "✘" in line]
    assert lines and all("the pooled values: expected [" in line and "got [" in line for line in lines)
    # only the wrong tensor is shown: the weights are right
    assert not any("the weights: expected" in line for line in lines), lines
    both = ab.assignments.check_softmax_pool(_no_temperature)
    assert "the weights: expected [" in capsys.readouterr().out and not both
