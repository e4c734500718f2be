"""Makes ``pytest -n N --dist loadgroup`` honour ``@pytest.mark.xdist_group`` again under pytest 9.2.

pytest-xdist (3.8) groups tests by renaming each marked test in its workers: it sets
``item._nodeid`` to ``"<nodeid>@<group>"`` and its ``loadgroup`` scheduler sends every id
with the same ``@<group>`` to one worker. pytest 9.2 keeps a node's id in ``item._id`` (a
``NodeId``) and no longer reads ``_nodeid``, so the rename is lost: every test becomes its
own group and tests of one group land on different workers. A session fixture is then built
once per worker: the graded class of tests/test_grade.py (about 220 s) was graded twice in
one ``make test-unit``, and the browser tests' per-page groups were split alike.

This plugin (loaded by the Makefile with ``-p tests.xdist_group_ids`` from the repository's root,
run last among the collection hooks) copies xdist's intended id into ``item._id``. Where xdist sets nothing,
or pytest already shows the id xdist set, it does nothing; tests/test_xdist_groups.py
checks that two tests of one group share one session fixture.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        wanted = getattr(item, "_nodeid", None)
        current = getattr(item, "_id", None)
        if isinstance(wanted, str) and current is not None and wanted != item.nodeid:
            item._id = type(current).parse(wanted)
