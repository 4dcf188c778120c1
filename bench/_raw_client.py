"""The floor: the least a Python client can do per InvokeEndpoint call.

One ``asyncio.Protocol`` per connection, ``httptools`` parsing the response,
HTTP/1.1 keep-alive, one connection per in-flight slot (no pool logic at
all), request bytes built once. ``RawFloorClient`` sends the same bytes
every call (no signing); ``signed=True`` signs each call with
``SigV4Signer.authorization_presorted`` (payload hash, ``x-amz-date`` and
``Authorization`` per call), which is the least a real client must do.
Given an ``ssl`` context, the sockets speak TLS (the TLS floor).

Used by ``python -m bench.compare`` (clients ``raw-floor`` and
``raw-floor+sign``) and nothing else.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import cast

import httptools

from gateway._aws.sigv4 import AmzDateClock, Credentials, SigV4Signer, payload_sha256

__all__ = ["RawConnection", "RawFloorClient"]


class RawConnection(asyncio.Protocol):
    """One keep-alive socket, one request at a time, body-only parsing."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[bytes] | None = None
        self._body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        waiter = self._waiter
        self._waiter = None
        body = b"".join(self._body)
        self._body = []
        if waiter is None or waiter.done():
            return
        status = self._parser.get_status_code()
        if status != 200:
            waiter.set_exception(RuntimeError(f"stub answered HTTP {status}"))
        else:
            waiter.set_result(body)

    def connection_lost(self, exc: Exception | None) -> None:
        waiter = self._waiter
        self._waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionError(f"connection lost: {exc}"))

    def request(self, data: bytes) -> asyncio.Future[bytes]:
        assert self._transport is not None
        waiter = self._waiter = self._loop.create_future()
        self._transport.write(data)
        return waiter

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class RawFloorClient:
    """``connections`` sockets to ``host:port``; ``call(slot)`` uses socket ``slot``."""

    def __init__(
        self,
        host: str,
        port: int,
        path: str,
        body: bytes,
        *,
        content_type: str,
        accept: str,
        signed: bool = False,
        region: str = "us-east-1",
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._ssl = ssl_context
        self._host = host
        self._port = port
        self._body = body
        self._connections: list[RawConnection] = []
        self._signer = SigV4Signer(region)
        self._credentials = credentials or Credentials("AK", "SK")
        self._clock = AmzDateClock()
        self._prefix = SigV4Signer.request_prefix("POST", path)
        self._host_header = f"{host}:{port}"
        self._accept = accept
        self._content_type = content_type
        self._signed = signed
        # Everything that does not change per call, as bytes.
        self._head_start = (
            f"POST {path} HTTP/1.1\r\naccept: {accept}\r\ncontent-type: {content_type}\r\n"
            f"host: {self._host_header}\r\n"
        ).encode("latin-1")
        self._head_end = (
            f"user-agent: raw-floor\r\ncontent-length: {len(body)}\r\n\r\n".encode("latin-1") + body
        )
        self._fixed = self._head_start + self._head_end

    async def connect(self, count: int) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(count - len(self._connections)):
            _, connection = await loop.create_connection(
                lambda: RawConnection(loop),
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._host if self._ssl else None,
            )
            self._connections.append(connection)

    def request_bytes(self) -> bytes:
        """The bytes of one request; signed ones carry a fresh signature."""
        if not self._signed:
            return self._fixed
        amz_date = self._clock.now()
        headers = [
            ("accept", self._accept),
            ("content-type", self._content_type),
            ("host", self._host_header),
            ("x-amz-date", amz_date),
        ]
        authorization = self._signer.authorization_presorted(
            self._prefix, headers, payload_sha256(self._body), self._credentials, amz_date
        )
        return b"".join(
            (
                self._head_start,
                f"x-amz-date: {amz_date}\r\nauthorization: {authorization}\r\n".encode("latin-1"),
                self._head_end,
            )
        )

    def call(self, slot: int) -> asyncio.Future[bytes]:
        return self._connections[slot].request(self.request_bytes())

    async def aclose(self) -> None:
        for connection in self._connections:
            connection.close()
        self._connections.clear()
        await asyncio.sleep(0)
