"""Shared fixtures for the gateway tests: the emulator, small real servers, transports."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway import Gateway
from gateway._http.httpx_transport import HttpxTransport
from gateway._http.message import Origin
from gateway._http.native import NativeTransport
from gateway._http.options import PoolConfig
from gateway._http.request import PreparedRequest
from gateway.emulator import Emulator, EmulatorConfig
from tests._faultproxy import FaultProxy

ACCESS_KEY = "AKIDGATEWAYTEST"
SECRET_KEY = "gateway-test-secret"
ROTATED_ACCESS_KEY = "AKIDGATEWAYROTATED"
ROTATED_SECRET_KEY = "gateway-rotated-secret"

EMULATOR_CONFIG: dict[str, Any] = {
    "seed": 11,
    "auth": {
        "credentials": {ACCESS_KEY: SECRET_KEY, ROTATED_ACCESS_KEY: ROTATED_SECRET_KEY},
    },
    "endpoints": {
        "echo": {},
        "constant": {"model": {"type": "constant", "body": "0.25", "content_type": "text/csv"}},
        "mme": {"mme": {"models": ["a.tar.gz", "b.tar.gz"], "cold_load_ms": 1, "max_loaded": 2}},
        "ab": {"variants": [{"name": "blue", "weight": 1}, {"name": "green", "weight": 1}]},
        "streamer": {"stream_parts": 4},
        "dribble": {"stream_parts": 3, "stream_interval_ms": 3000},
    },
}

TRANSPORTS = ("native", "httpx")


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(EMULATOR_CONFIG)) as emu:
        yield emu


@pytest.fixture
async def proxy(emulator: Emulator) -> AsyncIterator[FaultProxy]:
    async with FaultProxy("127.0.0.1", emulator.port) as fault_proxy:
        yield fault_proxy


@pytest.fixture(autouse=True)
def _clean_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may pick up the machine's AWS configuration by accident."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# -- transports ---------------------------------------------------------------

AnyTransport = NativeTransport | HttpxTransport
TransportFactory = Callable[..., AnyTransport]


@pytest.fixture
async def make_transport() -> AsyncIterator[TransportFactory]:
    """``make_transport(kind, **PoolConfig)``, no prewarm unless asked; all closed afterwards."""
    made: list[AnyTransport] = []

    def make(kind: str, **options: Any) -> AnyTransport:
        opts = PoolConfig(**{"prewarm": 0, **options})
        transport: AnyTransport = (
            NativeTransport(opts) if kind == "native" else HttpxTransport(opts)
        )
        made.append(transport)
        return transport

    yield make
    for transport in made:
        await transport.aclose()


def prepared(url: str, path: str = "/x", body: bytes = b"", **headers: str) -> PreparedRequest:
    """An unsigned request (the stub servers do not check signatures)."""
    origin = Origin.from_url(url)
    pairs = sorted([("host", origin.host_header), *headers.items()])
    return PreparedRequest(origin, path, "", pairs, body, None)


# -- leak checks ----------------------------------------------------------------

# Tasks that belong to servers started by the tests, not to the client under test.
_SERVER_FILES = ("_server/http.py", "_faultproxy.py", "conftest.py", "emulator")


def source_of(task: asyncio.Task[Any]) -> str:
    """The file of the coroutine a task runs, as a path relative to the repository."""
    coroutine = task.get_coro()
    code = getattr(coroutine, "cr_code", None)
    if code is not None:
        return str(code.co_filename)
    # A mypyc-compiled coroutine has no code object; its class names its module.
    return type(coroutine).__module__.replace(".", "/") + ".py"


def server_task(task: asyncio.Task[Any]) -> bool:
    """A task of a server the test started, not of the client under test."""
    filename = source_of(task)
    return any(part in filename for part in _SERVER_FILES)


def client_tasks() -> list[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return [
        task
        for task in asyncio.all_tasks()
        if task is not current and not task.done() and not server_task(task)
    ]


async def settle(transport: AnyTransport, expected_open: int | None = None) -> None:
    """Wait (bounded) for the client side to quiesce; assert nothing is left running."""
    for _ in range(100):
        open_now = transport.open_connections()
        if not client_tasks() and (expected_open is None or open_now == expected_open):
            break
        await asyncio.sleep(0.01)
    assert client_tasks() == []
    if expected_open is not None:
        assert transport.open_connections() == expected_open


# -- a small scripted HTTP/1.1 server -----------------------------------------------


@dataclass
class StubRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # 1-based index of the connection it arrived on
    index: int  # 1-based index of the request on that connection


Reply = Callable[[StubRequest, asyncio.StreamWriter], Awaitable[bool]]


@dataclass
class StubServer:
    """Answers each request with ``reply(request, writer)``; False from reply closes."""

    reply: Reply
    ssl: Any = None
    accepted: int = 0
    requests: list[StubRequest] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    async def start(self) -> StubServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def open_count(self) -> int:
        return len(self._writers)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        number = self.accepted
        self._writers.add(writer)
        index = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError, OSError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                index += 1
                request = StubRequest(method, path, headers, body, number, index)
                self.requests.append(request)
                if not await self.reply(request, writer):
                    return
                await writer.drain()
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    def close_idle(self) -> None:
        for writer in list(self._writers):
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for _ in range(100):
            if not self._writers:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)


@pytest.fixture
async def stub_server() -> AsyncIterator[Callable[..., Awaitable[StubServer]]]:
    servers: list[StubServer] = []

    async def start(reply: Reply, ssl: Any = None) -> StubServer:
        server = await StubServer(reply, ssl).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


def response(
    body: bytes = b"ok", status: int = 200, *, headers: tuple[tuple[str, str], ...] = ()
) -> bytes:
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers)
    return f"HTTP/1.1 {status} X\r\ncontent-length: {len(body)}\r\n{lines}\r\n".encode() + body


def gateway_for(url: str, *, transport: str = "native", **kwargs: Any) -> Gateway:
    """A Gateway aimed at ``url`` with the emulator's test credentials; use with ``async with``."""
    kwargs.setdefault("credentials", (ACCESS_KEY, SECRET_KEY))
    return Gateway("us-east-1", endpoint_url=url, transport=transport, **kwargs)
