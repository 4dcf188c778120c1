# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py): keep it compilable
# (no async generators, no monkeypatching, re-check attributes narrowed before an await).
"""Answers written at the end of the event loop's pass: one wake-up per burst, not per answer.

Writing to a loopback socket does the reader's side of TCP in the writer's
system call, and wakes the reader if it sleeps in ``epoll_wait``: under load,
that wake-up (an inter-processor interrupt, a VM exit on a virtual machine)
costs the writer more CPU than the write itself. The answers of one pass of
the loop (the upstream answers read in one poll, say) written one by one, a
few microseconds apart, wake a client process once each; written together
after the pass's callbacks, they wake it once. Envoy writes at the end of its
dispatcher's pass for the same reason.

What it costs: an answer waits for the rest of its pass (nothing when it is
the only one; the other callbacks' time when the loop is busy), and a
connection with several answers in one pass writes them in one system call.
Only the server's client side coalesces: a request to an upstream across the
network wakes nobody on this host, so it goes out at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["AnswerBatch", "CoalescedTransport"]


class AnswerBatch:
    """The connections with answers waiting for the end of this loop pass (one per server)."""

    __slots__ = ("_loop", "_pending", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: list[CoalescedTransport] = []
        self._scheduled = False

    def add(self, transport: CoalescedTransport) -> None:
        self._pending.append(transport)
        if not self._scheduled:
            # A ready callback runs after the I/O callbacks of the pass in which it
            # was scheduled, before the loop sleeps again.
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write every waiting answer (each connection's in one write)."""
        self._scheduled = False
        pending = self._pending
        if pending:
            self._pending = []
            for transport in pending:
                transport.flush()


class CoalescedTransport:
    """A client connection's transport whose writes wait for its :class:`AnswerBatch`.

    Every write on the connection goes through it, in order, and whatever ends
    the connection (``close``, ``write_eof``) writes what waits first; ``abort``
    drops it with the connection. The rest is the transport's own.
    """

    __slots__ = ("_batch", "_out", "transport")

    def __init__(self, transport: asyncio.Transport, batch: AnswerBatch) -> None:
        self.transport = transport
        self._batch = batch
        self._out: list[bytes] = []

    def write(self, data: bytes) -> None:
        out = self._out
        if not out:
            self._batch.add(self)
        out.append(data)

    def flush(self) -> None:
        out = self._out
        if not out:
            return  # flushed already (the connection closed meanwhile)
        self._out = []
        transport = self.transport
        if transport.is_closing():
            return  # the client is gone: nothing to read these
        transport.write(out[0] if len(out) == 1 else b"".join(out))

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def write_eof(self) -> None:
        self.flush()
        self.transport.write_eof()

    def can_write_eof(self) -> bool:
        return bool(self.transport.can_write_eof())

    def abort(self) -> None:
        self._out = []
        self.transport.abort()

    def is_closing(self) -> bool:
        return bool(self.transport.is_closing())

    def pause_reading(self) -> None:
        self.transport.pause_reading()

    def resume_reading(self) -> None:
        self.transport.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)
