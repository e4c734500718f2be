"""One module per chapter experiment: the data it draws, the runs it trains, its figures.

Imports from ``core``, ``data`` and ``models``."""

from . import layer_comparison, lm_tasks, long_context, long_inputs, lookup, offset_task, reversal, scaling, translation  # noqa: F401
