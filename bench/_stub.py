"""A local keep-alive HTTP stub that answers every POST with a 24-byte JSON body.

It is the fixed point the comparison measures clients against: uvloop plus
httptools, no SigV4 verification, one write per response. Run it in its own
process (``start_stub``) so its CPU is not charged to the client under test.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import socket
from multiprocessing.connection import Connection
from typing import cast

import httptools

from gateway._process import die_with_parent

BODY = b'{"score": 0.0123456789}\n'
assert len(BODY) == 24
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    b"x-amzn-invoked-production-variant: AllTraffic\r\n"
    b"x-amzn-requestid: 00000000-0000-0000-0000-000000000000\r\n"
    b"content-length: 24\r\n\r\n" + BODY
)


class _StubProtocol(asyncio.Protocol):
    def __init__(self, stats: dict[str, int]) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._stats = stats

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)
        self._stats["connections"] += 1
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            assert self._transport is not None
            self._transport.close()

    def on_message_complete(self) -> None:
        assert self._transport is not None
        self._stats["requests"] += 1
        self._transport.write(RESPONSE)


async def _serve(port_out: Connection, host: str) -> None:
    stats = {"connections": 0, "requests": 0}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _StubProtocol(stats), host, 0, backlog=1024)
    port_out.send(server.sockets[0].getsockname()[1])
    # The parent asks for stats (any message) and closes the pipe to stop us.
    while True:
        ready = await loop.run_in_executor(None, port_out.poll, 0.2)
        if ready:
            try:
                port_out.recv()
            except EOFError:
                break
            port_out.send(dict(stats))
    server.close()


def _main(port_out: Connection, host: str) -> None:
    die_with_parent()  # a stub outliving a killed benchmark would skew the next one
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(_serve(port_out, host))


class StubServer:
    """A stub in a child process; ``url`` to call it, ``stats()`` to read its counters."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        self._process = context.Process(target=_main, args=(child, host), daemon=True)
        self._process.start()
        self.port: int = self._pipe.recv()
        self.url = f"http://{host}:{self.port}"

    def stats(self) -> dict[str, int]:
        self._pipe.send("stats")
        stats: dict[str, int] = self._pipe.recv()
        return stats

    def stop(self) -> None:
        self._pipe.close()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def __enter__(self) -> StubServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
