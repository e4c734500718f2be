import os

import matplotlib

matplotlib.use("Agg")
os.environ.setdefault("ATTENTION_BOOK_SIZE", "ci")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.fixture
def one_thread():
    """Tiny models and tensors: one intra-op thread is faster, and far faster on a shared CPU."""
    import attention_book as ab

    with ab.single_thread():
        yield
