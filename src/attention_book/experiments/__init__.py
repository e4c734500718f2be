"""One module per chapter experiment: the data it draws, the runs it trains, its figures.

Imports from ``core``, ``data`` and ``models``."""

from . import (  # noqa: F401
    data_size,
    layer_comparison,
    lm_tasks,
    long_context,
    long_inputs,
    lookup,
    offset_task,
    order_task,
    reversal,
    scaling,
    scaling_training,
    translation,
)
