"""A kept-alive socket is checked right before its reuse, over real sockets.

HTTP/1.1 cannot tell whose answer a response is. An answer that turns up on
an idle socket (a broken upstream answering twice, late) must never be read
as the next request's: the transport looks for unread bytes, or the server's
close, right before it reuses a socket, and opens a fresh one instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from tests.gateway.conftest import TRANSPORTS, TransportFactory, prepared, response

pytestmark = pytest.mark.parametrize("kind", TRANSPORTS)


@dataclass
class EchoServer:
    """Answers each request with its path; the test writes on a connection when it wants."""

    accepted: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> EchoServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.writers.append(writer)
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                writer.write(response(path))
                await writer.drain()
        writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self.writers:
            writer.close()
        await asyncio.sleep(0)


@pytest.fixture
async def server() -> AsyncIterator[EchoServer]:
    echo = await EchoServer().start()
    yield echo
    await echo.close()


def deadline() -> float:
    return time.monotonic() + 5.0


async def test_a_late_extra_answer_on_an_idle_socket_is_never_read_as_the_next_answer(
    kind: str, make_transport: TransportFactory, server: EchoServer
) -> None:
    transport = make_transport(kind)
    first = await transport.request(prepared(server.url, "/first"), deadline())
    assert first.body == b"/first"
    # The upstream answers /first a second time, late: the bytes are on the
    # client's socket now, and the loop has not looked at it since.
    server.writers[0].write(response(b"a second answer to /first"))
    second = await transport.request(prepared(server.url, "/second"), deadline())
    assert second.body == b"/second"
    assert server.accepted == 2  # the dirty socket was dropped, not reused
    third = await transport.request(prepared(server.url, "/third"), deadline())
    assert third.body == b"/third"
    assert transport.open_connections() == 1


async def test_a_socket_the_server_closed_while_idle_is_not_reused(
    kind: str, make_transport: TransportFactory, server: EchoServer
) -> None:
    transport = make_transport(kind)
    assert (await transport.request(prepared(server.url, "/first"), deadline())).body == b"/first"
    server.writers[0].write_eof()  # the server's FIN is on the client's socket now
    second = await transport.request(prepared(server.url, "/second"), deadline())
    assert second.body == b"/second"
    assert server.accepted == 2
    # Found before the request was written: no request went out on the closed socket.
    assert transport.stats.stale_retries == 0
