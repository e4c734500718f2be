"""Chapter 3's retrieval task and the helpers that read its learning curves."""

import pytest
import torch

from attention_book.experiments import scaling_training as st


def test_each_query_is_the_key_it_points_to_and_the_target_its_value():
    batch = st.retrieval_batch(5, 7, 4, 3, generator=torch.Generator().manual_seed(1))
    assert batch.queries.shape == (5, 1, 4)
    assert batch.keys.shape == (5, 7, 4) and batch.values.shape == (5, 7, 3)
    assert batch.index.shape == (5,) and batch.targets.shape == (5, 3)
    for i in range(5):
        j = int(batch.index[i])
        assert torch.equal(batch.queries[i, 0], batch.keys[i, j])
        assert torch.equal(batch.targets[i], batch.values[i, j])


def test_batches_repeat_with_the_generator_and_differ_without_reseeding():
    one = st.retrieval_batch(4, 6, 8, 2, generator=torch.Generator().manual_seed(3))
    two = st.retrieval_batch(4, 6, 8, 2, generator=torch.Generator().manual_seed(3))
    assert torch.equal(one.keys, two.keys) and torch.equal(one.index, two.index)
    g = torch.Generator().manual_seed(3)
    st.retrieval_batch(4, 6, 8, 2, generator=g)
    assert not torch.equal(st.retrieval_batch(4, 6, 8, 2, generator=g).keys, one.keys)


def test_an_exact_lookup_solves_the_task():
    # scores q.k with a large factor pick the key equal to the query (up to ties of random keys)
    batch = st.retrieval_batch(
        64, 16, 32, 4, generator=torch.Generator().manual_seed(0)
    )
    scores = batch.queries @ batch.keys.transpose(1, 2)
    assert torch.equal(scores.argmax(-1)[:, 0], batch.index)
    out = torch.softmax(10 * scores, -1) @ batch.values
    torch.testing.assert_close(out[:, 0], batch.targets)


@pytest.mark.parametrize("bad", [{"batch_size": 0}, {"num_keys": -1}, {"dim": 1.5}])
def test_bad_sizes_are_refused(bad):
    sizes = {"batch_size": 2, "num_keys": 3, "dim": 4, "value_size": 5} | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        st.retrieval_batch(**sizes)


def test_smoothed_is_a_running_mean():
    assert st.smoothed([4.0, 2.0, 0.0, 6.0], window=2) == [4.0, 3.0, 1.0, 3.0]
    assert st.smoothed([1.0, 3.0], window=5) == [1.0, 2.0]


def test_first_step_below_reads_the_smoothed_curve():
    losses = [1.0, 1.0, 0.0, 0.0, 0.0]
    assert st.first_step_below(losses, 0.5, window=2) == 4
    assert st.first_step_below(losses, 0.5, window=1) == 3
    assert st.first_step_below(losses, -1.0) is None


def test_statistics_table_lists_the_asked_sizes_in_a_phone_wide_table():
    import attention_book as ab

    stats = ab.scaling_statistics([1, 4, 64], num_keys=8, num_samples=50)
    lines = st.statistics_table(stats, dims=(4, 64)).splitlines()
    assert len(lines) == 4 and max(map(len, lines)) <= 43
    assert lines[2].split()[0] == "4" and lines[3].split()[0] == "64"
    raw_var = float(lines[3].split()[1])  # the raw variance at d = 64, about 64
    assert raw_var == pytest.approx(float(stats["var_raw"][2]), rel=1e-2)
    with pytest.raises(ValueError, match="no row for d"):
        st.statistics_table(stats, dims=(8,))
