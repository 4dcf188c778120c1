"""Scripted sockets for the native transport: its connections and pool without a network.

Like httpcore's mock backend: ``ScriptedNetwork`` is the connection opener
handed to ``NativeTransport(connect=...)``; each connection it opens is a
``ScriptedSocket``, an asyncio transport that records every byte the client
writes and delivers response bytes to the client's protocol only when the
test says so, in whatever fragments the test chooses. Nothing sleeps and no
socket is opened: a test drives both sides in one event loop.

    network = ScriptedNetwork()
    transport = NativeTransport(PoolConfig(prewarm=0), connect=network.connect)
    call = asyncio.ensure_future(transport.request(request, deadline))
    sock = await network.next_socket()
    assert await sock.next_request() == b"POST /x HTTP/1.1\\r\\n..."
    sock.feed(b"HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\n", b"ok")
    assert (await call).body == b"ok"
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

# How long a test waits for the client to act before it fails rather than hangs.
GUARD_S = 5.0


class ScriptedSocket(asyncio.Transport):
    """One connection: what the client wrote, and the server's side on cue."""

    def __init__(self, network: ScriptedNetwork, protocol: asyncio.Protocol, index: int) -> None:
        super().__init__()
        self._network = network
        self._loop = asyncio.get_running_loop()
        self.protocol = protocol
        self.index = index  # 1-based, in the order connections were opened
        self.written = bytearray()  # everything the client wrote, in order
        self.writes: list[bytes] = []  # the same, one entry per write() call
        self._taken = 0  # how much of ``written`` next_request has handed out
        self._wrote: asyncio.Future[None] | None = None
        self.reading = True  # False while the client has paused reading
        self._held: list[bytes] = []  # fed while reading was paused
        self.closed_by_client = False
        self.lost = False  # connection_lost has been delivered
        self.client_closed = asyncio.Event()

    # -- asyncio.Transport, as the client sees it

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.lost or self.closed_by_client:
            return  # as a closing transport: the bytes go nowhere
        self.written += data
        self.writes.append(bytes(data))
        if self._wrote is not None and not self._wrote.done():
            self._wrote.set_result(None)
        self._network.wake()

    def close(self) -> None:
        if self.closed_by_client or self.lost:
            return
        self.closed_by_client = True
        self.client_closed.set()
        self._network.opened_now -= 1
        # As asyncio does: connection_lost arrives on a later loop turn.
        self._loop.call_soon(self._lose, None)

    def abort(self) -> None:
        self.close()

    def is_closing(self) -> bool:
        return self.closed_by_client or self.lost

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        held, self._held = self._held, []
        for chunk in held:
            self._deliver(chunk)

    def is_reading(self) -> bool:
        return self.reading

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default  # no OS socket: nothing for the client to tune

    # -- the server's side, driven by the test

    async def next_request(self, size: int | None = None) -> bytes:
        """The bytes written since the last call, once there are (at least ``size``)."""
        want = 1 if size is None else size
        while len(self.written) - self._taken < want:
            if self.lost or self.closed_by_client:
                raise AssertionError(f"socket {self.index} closed before the request was written")
            self._wrote = self._loop.create_future()
            await asyncio.wait_for(self._wrote, GUARD_S)
        data = bytes(self.written[self._taken :])
        self._taken = len(self.written)
        return data

    def unread(self) -> bytes:
        """Bytes the client wrote that no next_request has taken yet."""
        return bytes(self.written[self._taken :])

    def feed(self, *chunks: bytes) -> None:
        """Deliver each chunk to the client as one data_received, in order."""
        for chunk in chunks:
            if self.lost or self.closed_by_client:
                return  # the client closed it: later bytes never reach it
            if not self.reading:
                self._held.append(chunk)
                continue
            self._deliver(chunk)

    def feed_bytewise(self, data: bytes) -> None:
        """Deliver ``data`` one byte per data_received."""
        self.feed(*(data[i : i + 1] for i in range(len(data))))

    def close_from_server(self) -> None:
        """An orderly close (FIN): EOF, then the connection is lost without an error."""
        if self.lost:
            return
        self.protocol.eof_received()
        self._lose(None)

    def reset(self) -> None:
        """The peer resets the connection (RST)."""
        self._lose(ConnectionResetError(104, "Connection reset by peer"))

    def _deliver(self, chunk: bytes) -> None:
        self.protocol.data_received(chunk)

    def _lose(self, exc: Exception | None) -> None:
        if self.lost:
            return
        self.lost = True
        if not self.closed_by_client:
            self._network.opened_now -= 1
        self.protocol.connection_lost(exc)


class ScriptedNetwork:
    """The connection opener: a new ScriptedSocket per connect, or a scripted refusal."""

    def __init__(self) -> None:
        self.sockets: list[ScriptedSocket] = []
        self.connects: list[tuple[str, int, bool, str | None]] = []  # host, port, tls, SNI
        self.opened_now = 0  # connections made and neither closed by the client nor lost
        self.peak_open = 0
        self._refusals: deque[BaseException] = deque()
        self._hold: asyncio.Future[None] | None = None
        self._claimed = 0  # sockets handed to the test so far, in order
        self._activity: asyncio.Future[None] | None = None

    def refuse_next(self, error: BaseException) -> None:
        """The next connect attempt raises ``error`` (e.g. ConnectionRefusedError)."""
        self._refusals.append(error)

    def hold_connects(self) -> None:
        """Connect attempts wait (as a SYN that gets no answer) until release_connects."""
        if self._hold is None:
            self._hold = asyncio.get_running_loop().create_future()

    def release_connects(self) -> None:
        if self._hold is not None:
            self._hold.set_result(None)
            self._hold = None

    async def connect(
        self,
        protocol_factory: Callable[[], asyncio.Protocol],
        host: str,
        port: int,
        *,
        ssl: ssl.SSLContext | None,
        server_hostname: str | None,
    ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
        """``loop.create_connection``'s part the pool uses."""
        self.connects.append((host, port, ssl is not None, server_hostname))
        if self._hold is not None:
            await asyncio.shield(self._hold)
        if self._refusals:
            raise self._refusals.popleft()
        protocol = protocol_factory()
        sock = ScriptedSocket(self, protocol, len(self.sockets) + 1)
        self.sockets.append(sock)
        self.opened_now += 1
        self.peak_open = max(self.peak_open, self.opened_now)
        protocol.connection_made(sock)
        self.wake()
        return sock, protocol

    async def next_socket(self) -> ScriptedSocket:
        """The next connection the client opens (in order), once it has opened it."""
        await self._until(lambda: len(self.sockets) > self._claimed)
        self._claimed += 1
        return self.sockets[self._claimed - 1]

    async def socket_with_request(self) -> ScriptedSocket:
        """A live socket, new or reused, with bytes the client wrote that the test has not read."""
        await self._until(lambda: self._busy() is not None)
        sock = self._busy()
        assert sock is not None
        self._claimed = max(self._claimed, sock.index)
        return sock

    def _busy(self) -> ScriptedSocket | None:
        for sock in self.sockets:
            if sock.unread() and not sock.lost and not sock.closed_by_client:
                return sock
        return None

    async def _until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            if self._activity is None:
                self._activity = asyncio.get_running_loop().create_future()
            await asyncio.wait_for(asyncio.shield(self._activity), GUARD_S)

    def wake(self) -> None:
        """The client connected or wrote: wake a test waiting for it."""
        if self._activity is not None:
            self._activity.set_result(None)
            self._activity = None


def response(body: bytes = b"ok", status: int = 200, *headers: str) -> bytes:
    """An HTTP/1.1 response with a Content-Length."""
    reason = {200: "OK", 204: "No Content", 500: "Internal Server Error"}.get(status, "Status")
    lines = [f"HTTP/1.1 {status} {reason}", *headers, f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked_response(*parts: bytes) -> bytes:
    """An HTTP/1.1 response framed with chunked transfer coding."""
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for part in parts:
        out += b"%x\r\n%s\r\n" % (len(part), part)
    return out + b"0\r\n\r\n"
