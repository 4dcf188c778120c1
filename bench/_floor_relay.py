"""The floor of an HTTP relay written in Python: uvloop and httptools, and nothing else.

    python -m bench._floor_relay --upstream http://127.0.0.1:8080 [--sign] [--listen 127.0.0.1:0]

What a relay in Python cannot do with less: parse each request with
httptools, write it to a kept-alive upstream socket, parse the answer, write
it back. One upstream socket per client connection, opened when the client
connects; one request at a time on each (wrk does not pipeline). Every step
is a protocol callback: no task, no future, no coroutine per request.

``--sign`` adds what signing costs and nothing more: each request is
SigV4-signed by the gateway's own signer, as the sidecar signs it (a head
presigned once per second, then the payload hash and the three hash
updates of :meth:`PresignedHead.head`, in C where the signing tail is built).

It relays the status and the body, not the fields (no request id, no
variant), refuses nothing and measures nothing: a reference row for
``bench.sidecar_vs_nginx --floors``, never a proxy to run. It prints
``floor relay listening on http://HOST:PORT`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
from urllib.parse import urlsplit

import httptools
import uvloop

from gateway._aws.sigv4 import (
    AmzDateClock,
    Credentials,
    PresignedHead,
    SigV4Signer,
    payload_sha256,
)

READY_PREFIX = "floor relay listening on "
_CONTENT_TYPE = "application/json"


class _Signing:
    """The sidecar's signing work for one upstream host: a presigned head per second."""

    def __init__(self, host: str) -> None:
        self._host = host
        self._signer = SigV4Signer("us-east-1")
        self._credentials = Credentials("AKIDBENCH", "bench-secret")
        self._clock = AmzDateClock()
        self._presigned: PresignedHead | None = None
        self._path = b""

    def head(self, path: bytes, body: bytes) -> bytes:
        amz_date = self._clock.now()
        presigned = self._presigned
        if presigned is None or presigned.amz_date != amz_date or path != self._path:
            presigned = self._presigned = self._presign(path.decode("latin-1"), amz_date)
            self._path = path
        return presigned.head(payload_sha256(body), len(body))

    def _presign(self, path: str, amz_date: str) -> PresignedHead:
        headers = [("content-type", _CONTENT_TYPE), ("host", self._host), ("x-amz-date", amz_date)]
        start = (
            f"POST {path} HTTP/1.1\r\nhost: {self._host}\r\ncontent-type: {_CONTENT_TYPE}\r\n"
            f"x-amz-date: {amz_date}\r\n"
        )
        prefix = SigV4Signer.request_prefix("POST", path)
        return self._signer.presign_head(prefix, headers, self._credentials, amz_date, start)


class _Upstream(asyncio.Protocol):
    """The kept-alive socket to the upstream of one client connection."""

    def __init__(self, client: _Client) -> None:
        self._client = client
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's, alike
        self._client.upstream_ready()

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._client.close()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self._body)
        self._body = []
        self._client.answer(self._parser.get_status_code(), body)


class _Client(asyncio.Protocol):
    """One client connection, relayed to its own upstream socket."""

    def __init__(self, upstream: tuple[str, int], signing: _Signing | None) -> None:
        self._upstream_address = upstream
        self._signing = signing
        self._parser = httptools.HttpRequestParser(self)
        self._upstream = _Upstream(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._body: list[bytes] = []
        self._waiting: bytes | None = None  # a request that came before the upstream socket
        self._opening: asyncio.Task[object] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's, alike
        loop = asyncio.get_running_loop()
        host, port = self._upstream_address
        self._opening = loop.create_task(loop.create_connection(lambda: self._upstream, host, port))
        self._opening.add_done_callback(self._opened)

    def _opened(self, opening: asyncio.Task[object]) -> None:
        if opening.cancelled() or opening.exception() is not None:
            self.close()  # no upstream: the client sees its connection close

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._upstream.transport is not None:
            self._upstream.transport.close()

    def on_url(self, url: bytes) -> None:
        self._url = url

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self._body)
        self._body = []
        if self._signing is not None:
            head = self._signing.head(self._url, body)
        else:
            head = b"POST %s HTTP/1.1\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (
                self._url,
                _CONTENT_TYPE.encode(),
                len(body),
            )
        transport = self._upstream.transport
        if transport is None:
            self._waiting = head + body
        else:
            transport.write(head + body)

    def upstream_ready(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None and self._upstream.transport is not None:
            self._upstream.transport.write(waiting)

    def answer(self, status: int, body: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return  # the client left while its request was upstream
        head = b"HTTP/1.1 %d OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n" % (
            status,
            _CONTENT_TYPE.encode(),
            len(body),
        )
        self._transport.write(head + body)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def serve(listen: str, upstream_url: str, sign: bool) -> None:
    upstream = urlsplit(upstream_url)
    if upstream.hostname is None or upstream.port is None:
        raise SystemExit(f"--upstream needs a host and a port: {upstream_url}")
    address = (upstream.hostname, upstream.port)
    signing = _Signing(upstream.netloc) if sign else None
    host, _, port = listen.rpartition(":")
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(address, signing), host, int(port))
    bound = server.sockets[0].getsockname()
    print(f"{READY_PREFIX}http://{bound[0]}:{bound[1]}", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._floor_relay", description=__doc__)
    parser.add_argument("--upstream", required=True, help="http://HOST:PORT to relay to")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0: any free)")
    parser.add_argument("--sign", action="store_true", help="SigV4-sign each request")
    args = parser.parse_args(argv)
    uvloop.run(serve(args.listen, args.upstream, args.sign))


if __name__ == "__main__":
    main()
