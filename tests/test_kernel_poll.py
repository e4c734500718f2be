"""book/_ext/kernel_poll.py: sliced polling returns a waiting message and keeps the timeout."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from queue import Empty

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))
import kernel_poll  # noqa: E402
from jupyter_client.channels import AsyncZMQSocketChannel  # noqa: E402


class FakeSocket:
    """A socket whose poll never wakes up (the missed wake-up), but whose events say a message waits."""

    def __init__(self, ready_after: float | None):
        self.ready_at = None if ready_after is None else time.monotonic() + ready_after

    def _ready(self) -> bool:
        return self.ready_at is not None and time.monotonic() >= self.ready_at

    async def poll(self, timeout_ms):
        await asyncio.sleep(timeout_ms / 1000)
        return 0  # never reports the message: only the check of the socket's events finds it

    def get(self, option):
        import zmq

        return zmq.POLLIN if self._ready() else 0


class FakeChannel:
    get_msg = kernel_poll._sliced_get_msg

    def __init__(self, socket):
        self.socket = socket

    async def _recv(self):
        return {"msg": "reply"}


def test_installed_on_the_client_channel():
    assert getattr(AsyncZMQSocketChannel.get_msg, "book_sliced", False)


def test_a_waiting_message_is_found_within_a_slice_even_when_poll_misses_it():
    start = time.monotonic()
    msg = asyncio.run(FakeChannel(FakeSocket(ready_after=0.2)).get_msg(timeout=30))
    assert msg == {"msg": "reply"}
    assert time.monotonic() - start < 2 * kernel_poll.SLICE_SECONDS + 0.5


def test_the_timeout_still_raises_empty():
    start = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(FakeChannel(FakeSocket(ready_after=None)).get_msg(timeout=1.2))
    assert 1.1 < time.monotonic() - start < 2.5
