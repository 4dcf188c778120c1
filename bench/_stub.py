"""A local keep-alive HTTP stub that answers every POST with a 24-byte JSON body.

It is the fixed point the comparison measures clients against: uvloop plus
httptools, no SigV4 verification, one write per response. Two paths answer
in their operation's own shape instead: ``.../async-invocations`` a 202 with
the output and failure locations (InvokeEndpointAsync, InvokeInferenceRouterAsync),
``.../invocations-response-stream`` the same 24 bytes as two ``PayloadPart``
events of an ``application/vnd.amazon.eventstream`` body, chunked as AWS sends it. Run it in its own
process (``start_stub``) so its CPU is not charged to the client under test.
``StubServer(tls=make_certificate(directory))`` serves HTTPS instead, with a
freshly generated self-signed certificate for 127.0.0.1 and localhost.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import multiprocessing
import random
import socket
import ssl
from dataclasses import dataclass
from ipaddress import IPv4Address
from multiprocessing.connection import Connection
from pathlib import Path
from typing import cast

import httptools

from gateway._aws.eventstream import encode_payload_part
from gateway._server.processes import die_with_parent

BODY = b'{"score": 0.0123456789}\n'
assert len(BODY) == 24
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    b"x-amzn-invoked-production-variant: AllTraffic\r\n"
    b"x-amzn-requestid: 00000000-0000-0000-0000-000000000000\r\n"
    b"content-length: 24\r\n\r\n" + BODY
)
# The async operations' answer: where the output and a failure will be written.
OUTPUT_LOCATION = "s3://bench-bucket/output/00000000.out"
FAILURE_LOCATION = "s3://bench-bucket/failure/00000000.out"
_ASYNC_BODY = b'{"InferenceId":"00000000-0000-0000-0000-000000000000"}'
ASYNC_RESPONSE = (
    b"HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\n"
    b"x-amzn-sagemaker-outputlocation: " + OUTPUT_LOCATION.encode() + b"\r\n"
    b"x-amzn-sagemaker-failurelocation: " + FAILURE_LOCATION.encode() + b"\r\n"
    b"x-amzn-requestid: 00000000-0000-0000-0000-000000000000\r\n"
    b"content-length: %d\r\n\r\n" % len(_ASYNC_BODY) + _ASYNC_BODY
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


# The stream operations' answer: BODY in two PayloadPart events, one chunk each.
STREAM_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\n"
    b"x-amzn-sagemaker-content-type: application/json\r\n"
    b"x-amzn-requestid: 00000000-0000-0000-0000-000000000000\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
    + _chunk(encode_payload_part(BODY[:12]))
    + _chunk(encode_payload_part(BODY[12:]))
    + b"0\r\n\r\n"
)


def _response_for(url: bytes) -> bytes:
    """The answer for a request target: by its last path segment."""
    if url.endswith(b"/invocations"):
        return RESPONSE
    if url.endswith(b"/async-invocations"):
        return ASYNC_RESPONSE
    if url.endswith(b"/invocations-response-stream"):
        return STREAM_RESPONSE
    return RESPONSE


@dataclass(frozen=True, slots=True)
class Latency:
    """How long one endpoint takes: ``base_ms`` +- ``jitter_ms`` (uniform), and
    ``tail_share`` of its answers ``tail_ms`` later still."""

    base_ms: float
    jitter_ms: float = 0.0
    tail_share: float = 0.0
    tail_ms: float = 0.0

    def draw(self, rng: random.Random) -> float:
        """One answer's delay in seconds."""
        ms = self.base_ms + rng.uniform(-self.jitter_ms, self.jitter_ms)
        if self.tail_share and rng.random() < self.tail_share:
            ms += self.tail_ms
        return max(ms, 0.0) / 1000.0


class _StubProtocol(asyncio.Protocol):
    def __init__(
        self,
        stats: dict[str, int],
        latencies: dict[bytes, Latency] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._stats = stats
        self._latencies = latencies
        self._rng = rng or random.Random(0)
        self._url = b""

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

    def on_url(self, url: bytes) -> None:
        self._url = url

    def on_message_complete(self) -> None:
        assert self._transport is not None
        self._stats["requests"] += 1
        response = _response_for(self._url)
        latencies = self._latencies
        if latencies:
            # /endpoints/NAME/invocations: the endpoint picks the latency.
            latency = latencies.get(self._url.split(b"/")[2] if self._url.count(b"/") > 2 else b"")
            if latency is not None:
                asyncio.get_running_loop().call_later(
                    latency.draw(self._rng), self._answer_later, self._transport, response
                )
                return
        self._transport.write(response)

    @staticmethod
    def _answer_later(transport: asyncio.Transport, response: bytes) -> None:
        if not transport.is_closing():
            transport.write(response)


@dataclass(frozen=True, slots=True)
class Certificate:
    """A self-signed certificate (PEM files): the server's, and the one clients trust."""

    cert_file: str
    key_file: str

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def client_context(self) -> ssl.SSLContext:
        """What a client verifying the stub uses: only this certificate is trusted."""
        return ssl.create_default_context(cafile=self.cert_file)


def make_certificate(directory: Path) -> Certificate:
    """A fresh P-256 self-signed certificate for 127.0.0.1 and localhost, valid a day.

    ECDSA P-256 with ECDHE is what AWS endpoints negotiate for most clients, so
    the handshake and record costs resemble production's.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(IPv4Address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "stub-cert.pem", directory / "stub-key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Certificate(str(cert_file), str(key_file))


async def _serve(
    port_out: Connection,
    host: str,
    tls: Certificate | None,
    latencies: dict[str, Latency],
    port: int = 0,
    reuse_port: bool = False,
) -> None:
    stats = {"connections": 0, "requests": 0}
    by_name = {name.encode(): latency for name, latency in latencies.items()}
    rng = random.Random(5)  # seeded: the same stalls run after run
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _StubProtocol(stats, by_name, rng),
        host,
        port,
        backlog=1024,
        ssl=tls.server_context() if tls else None,
        reuse_port=reuse_port or None,
    )
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


def _main(
    port_out: Connection,
    host: str,
    tls: Certificate | None,
    latencies: dict[str, Latency],
    port: int = 0,
    reuse_port: bool = False,
) -> None:
    die_with_parent()  # a stub outliving a killed benchmark would skew the next one
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(_serve(port_out, host, tls, latencies, port, reuse_port))


class StubServer:
    """A stub in a child process; ``url`` to call it, ``stats()`` to read its counters."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        tls: Certificate | None = None,
        latencies: dict[str, Latency] | None = None,
        processes: int = 1,
    ) -> None:
        """``latencies``: per endpoint name, how long its answers take (others: at once).

        ``processes`` > 1: that many stub processes share the port (SO_REUSEPORT),
        so that the stub keeps up with a sidecar of many workers; ``stats()`` is
        the first one's.
        """
        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        shared = processes > 1
        self._process = context.Process(
            target=_main, args=(child, host, tls, latencies or {}, 0, shared), daemon=True
        )
        self._process.start()
        self.port: int = self._pipe.recv()
        self._more: list[tuple[Connection, multiprocessing.process.BaseProcess]] = []
        for _ in range(processes - 1):
            pipe, other = context.Pipe()
            process = context.Process(
                target=_main,
                args=(other, host, tls, latencies or {}, self.port, True),
                daemon=True,
            )
            process.start()
            pipe.recv()
            self._more.append((pipe, process))
        self.tls = tls
        self.url = f"{'https' if tls else 'http'}://{host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def stats(self) -> dict[str, int]:
        self._pipe.send("stats")
        stats: dict[str, int] = self._pipe.recv()
        return stats

    @property
    def pids(self) -> list[int]:
        """Every stub process's id."""
        processes = [self._process, *(process for _, process in self._more)]
        return [process.pid for process in processes if process.pid is not None]

    def stop(self) -> None:
        for pipe, process in [(self._pipe, self._process), *self._more]:
            pipe.close()
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()

    def __enter__(self) -> StubServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
