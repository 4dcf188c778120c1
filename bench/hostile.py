"""A hostile upstream: a proxy in front of the emulator that sometimes misbehaves.

Requests are forwarded to the emulator one at a time per connection and its
answers relayed back; with probability ``rate`` (0 by default; the soak
raises it during ``hostile`` spells) an exchange goes wrong in one of these
ways instead:

- ``twice``:        the answer is sent twice (a second response nobody asked for)
- ``unsolicited``:  the answer followed by a stray response with a body no request sent
- ``endless_error``: a 503 whose chunked body never ends (cut off at ``ENDLESS_CAP`` bytes)
- ``truncated``:    half of the answer (mid event stream for streams), then FIN
- ``reset``:        no answer, an RST

The stray responses carry bodies that no request sent (``unsolicited-N``) or
that belong to an earlier request, so a client that delivers one to a
caller hands it somebody else's prediction: the soak counts that as a wrong
answer. A stray is written together with the answer, so it reaches the
client before the connection could be reused: one that arrives after the
client has sent its next request is, in HTTP/1.1, indistinguishable from
that request's answer, and no client can be held to catch it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from collections import Counter

__all__ = ["MISBEHAVIOURS", "HostileUpstream"]

MISBEHAVIOURS = ("twice", "unsolicited", "endless_error", "truncated", "reset")
ENDLESS_CAP = 16 * 1024 * 1024
_FILLER = b"x" * 65536
_ERROR_HEAD = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"x-amzn-errortype: ServiceUnavailable:http://internal.amazon.com/coral/com.amazon.coral/\r\n"
    b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
)


class HostileUpstream:
    """``await start()``, point a Gateway at ``url``, set ``rate``; ``await close()``."""

    def __init__(self, upstream_port: int, seed: int) -> None:
        self._upstream_port = upstream_port
        self._rng = random.Random(seed)
        self.rate = 0.0  # now
        self.spell_rate = 0.2  # what a hostile spell sets ``rate`` to
        self.done: Counter[str] = Counter()  # misbehaviours carried out
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._strays = 0

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def start(self) -> HostileUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await self._server.wait_closed()

    def _pick(self) -> str | None:
        if not self.rate or self._rng.random() >= self.rate:
            return None
        return self._rng.choice(MISBEHAVIOURS)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        up_reader: asyncio.StreamReader | None = None
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
            while True:
                request = await _read_message(reader, is_request=True)
                up_writer.write(request)
                answer = await _read_message(up_reader, is_request=False)
                if not await self._answer(writer, answer):
                    return
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            for each in (writer, up_writer):
                if each is not None:
                    each.close()

    async def _answer(self, writer: asyncio.StreamWriter, answer: bytes) -> bool:
        """Relay ``answer`` (or misbehave); False once the connection is done for."""
        kind = self._pick()
        if kind is not None:
            self.done[kind] += 1
        if kind is None:
            writer.write(answer)
        elif kind == "twice":
            writer.write(answer + answer)
        elif kind == "unsolicited":
            writer.write(answer + self._stray())
        elif kind == "endless_error":
            await _endless_error(writer)
            return False
        elif kind == "truncated":
            writer.write(answer[: max(1, len(answer) // 2)])
            await writer.drain()
            return False
        else:  # reset
            _reset(writer)
            return False
        await writer.drain()
        return True

    def _stray(self) -> bytes:
        self._strays += 1
        body = b"unsolicited-%d" % self._strays
        return (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(body), body)
        )


async def _endless_error(writer: asyncio.StreamWriter) -> None:
    """A 503 whose body goes on until the client gives up (or ENDLESS_CAP)."""
    writer.write(_ERROR_HEAD)
    sent = 0
    while sent < ENDLESS_CAP and not writer.is_closing():
        writer.write(b"%x\r\n%b\r\n" % (len(_FILLER), _FILLER))
        sent += len(_FILLER)
        await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _read_message(reader: asyncio.StreamReader, *, is_request: bool) -> bytes:
    """One HTTP/1.1 message, raw: head plus a Content-Length or chunked body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        return head + await reader.readexactly(length)
    parts = [head]
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";")[0].strip(), 16)
        parts.append(size_line)
        parts.append(await reader.readexactly(size + 2))
        if size == 0:
            return b"".join(parts)
