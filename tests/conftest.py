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
