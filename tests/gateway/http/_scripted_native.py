"""The native transport on scripted sockets, for tests on virtual time (tests/_virtual_time.py).

async with scripted_native(max_connections=1) as native:
    call = native.start(b"q", deadline=clock.now() + 0.25)
    sock = await native.network.next_socket()
    ...
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import gateway
from gateway._http.message import Origin, RawResponse
from gateway._http.native import NativeTransport
from gateway._http.options import PoolConfig
from gateway._http.pool import OriginPool
from tests.gateway._scripted_socket import ScriptedNetwork, ScriptedSocket, response
from tests.gateway.conftest import prepared

URL = "http://127.0.0.1:8080"
ORIGIN = Origin.from_url(URL)


def head(body_size: int) -> bytes:
    """The head the native transport writes for ``prepared(URL, body=...)``."""
    return (
        b"POST /x HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n"
        b"user-agent: sagemaker-gateway/" + gateway.__version__.encode() + b"\r\n"
        b"content-length: " + str(body_size).encode() + b"\r\n\r\n"
    )


@dataclass
class Native:
    network: ScriptedNetwork
    transport: NativeTransport

    @property
    def pool(self) -> OriginPool:
        return self.transport._pools[ORIGIN]

    def start(self, body: bytes = b"q", deadline: float | None = None) -> asyncio.Task[RawResponse]:
        """A request in a task of its own; the deadline defaults to a minute from now."""
        when = time.monotonic() + 60.0 if deadline is None else deadline
        return asyncio.ensure_future(self.transport.request(prepared(URL, body=body), when))

    async def sent(self, call: asyncio.Task[RawResponse]) -> ScriptedSocket:
        """The socket ``call``'s request went out on, its bytes read (a call just started)."""
        sock = await self.network.socket_with_request()
        await sock.next_request()
        assert not call.done()
        return sock

    async def serve(self, body: bytes = b"q") -> ScriptedSocket:
        """One request answered with an echo of ``body``; the socket it went out on."""
        call = self.start(body)
        sock = await self.network.socket_with_request()
        assert await sock.next_request() == head(len(body)) + body
        sock.feed(response(body))
        assert (await call).body == body
        return sock


@contextlib.asynccontextmanager
async def scripted_native(**options: Any) -> AsyncIterator[Native]:
    """A native transport (``PoolConfig(**options)``, no prewarm unless asked) on scripted
    sockets; closed at the end."""
    network = ScriptedNetwork()
    transport = NativeTransport(PoolConfig(**{"prewarm": 0, **options}), network.connect)
    try:
        yield Native(network, transport)
    finally:
        await transport.aclose()
