"""Keep notebook execution from stalling on a missed wake-up of a kernel socket.

Executing a notebook (nbmake, the book build, ``make claims``) waits for the
kernel's replies with ``jupyter_client``'s ``AsyncZMQSocketChannel.get_msg``,
which makes a single ``poll`` for the whole timeout. Here, with widget cells
(many comm messages), that poll sometimes misses the reply's wake-up: the kernel
is idle, the reply sits in the socket, and the client waits until its timeout
ends (300 s under nbmake; forever when there is none) — a slow or a stuck test
(nbclient#312 and nbconvert#2029 describe the same stall). Polling in short
slices, and checking the socket itself after each, finds such a reply within
half a second; behaviour is otherwise unchanged (same messages, same timeout).

Loaded by the site build (``book_site.py``), by nbmake (``pytest -p kernel_poll``
in the Makefile), by ``scripts/claims.py`` and by the grader's worker (``scripts/grade.py``).
"""

from __future__ import annotations

from queue import Empty
from time import monotonic

import zmq
from jupyter_client.channels import AsyncZMQSocketChannel

SLICE_SECONDS = 0.5


async def _sliced_get_msg(self, timeout: float | None = None):
    """``get_msg`` that polls in slices of at most SLICE_SECONDS until ``timeout``."""
    assert self.socket is not None
    deadline = None if timeout is None else monotonic() + timeout
    while True:
        wait = SLICE_SECONDS if deadline is None else max(0.0, min(SLICE_SECONDS, deadline - monotonic()))
        if await self.socket.poll(int(wait * 1000)) or self.socket.get(zmq.EVENTS) & zmq.POLLIN:
            return await self._recv()
        if deadline is not None and monotonic() >= deadline:
            raise Empty


_sliced_get_msg.book_sliced = True


def install() -> None:
    """Patch ``AsyncZMQSocketChannel.get_msg`` (once)."""
    if not getattr(AsyncZMQSocketChannel.get_msg, "book_sliced", False):
        AsyncZMQSocketChannel.get_msg = _sliced_get_msg


install()


def pytest_configure(config) -> None:  # as a pytest plugin (pytest -p kernel_poll)
    install()


def setup(app):  # as a Sphinx extension
    install()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
