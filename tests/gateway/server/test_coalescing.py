"""Answers written at the end of the loop's pass (gateway._server.coalescing), on real sockets."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from gateway._server.coalescing import AnswerBatch, CoalescedTransport
from gateway._server.http import Request, Response, ServerLimits, start_server


class _Recording:
    """A real transport, with the writes that reach it counted."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        self.transport.write(data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.transport, name)


@pytest.fixture
async def pair() -> AsyncIterator[tuple[_Recording, socket.socket]]:
    """A loop transport on one end of a socket pair, and the other end, non-blocking."""
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    recording = _Recording(transport)  # type: ignore[arg-type]
    try:
        yield recording, peer
    finally:
        transport.close()
        peer.close()


def _received(peer: socket.socket) -> bytes:
    try:
        return peer.recv(65536)
    except BlockingIOError:
        return b"(nothing)"


def _coalesced(recording: _Recording) -> CoalescedTransport:
    loop = asyncio.get_running_loop()
    return CoalescedTransport(recording, AnswerBatch(loop))  # type: ignore[arg-type]


async def test_writes_wait_for_the_end_of_the_pass_and_leave_in_one_write(
    pair: tuple[_Recording, socket.socket],
) -> None:
    recording, peer = pair
    transport = _coalesced(recording)
    transport.write(b"first ")
    transport.write(b"second")
    assert _received(peer) == b"(nothing)"
    await asyncio.sleep(0)  # the pass ends: its ready callbacks run
    assert recording.writes == [b"first second"]
    assert _received(peer) == b"first second"


async def test_one_batch_writes_every_connection_of_the_pass(
    pair: tuple[_Recording, socket.socket],
) -> None:
    recording, peer = pair
    other_ours, other_peer = socket.socketpair()
    other_peer.setblocking(False)
    loop = asyncio.get_running_loop()
    other, _ = await loop.connect_accepted_socket(asyncio.Protocol, other_ours)
    try:
        batch = AnswerBatch(loop)
        one = CoalescedTransport(recording, batch)  # type: ignore[arg-type]
        two = CoalescedTransport(other, batch)
        one.write(b"to one")
        two.write(b"to two")
        one.write(b", again")
        await asyncio.sleep(0)
        assert _received(peer) == b"to one, again"
        assert _received(other_peer) == b"to two"
        one.write(b"next pass")  # a new pass schedules its own flush
        await asyncio.sleep(0)
        assert _received(peer) == b"next pass"
    finally:
        other.close()
        other_peer.close()


async def test_close_and_half_close_write_what_waits_first(
    pair: tuple[_Recording, socket.socket],
) -> None:
    recording, peer = pair
    transport = _coalesced(recording)
    transport.write(b"the last answer")
    transport.write_eof()
    assert _received(peer) == b"the last answer"
    assert _received(peer) == b""  # then the end of the stream
    transport.close()
    await asyncio.sleep(0)
    assert recording.writes == [b"the last answer"]  # the batch's flush finds nothing more


async def test_abort_drops_what_waits(pair: tuple[_Recording, socket.socket]) -> None:
    recording, peer = pair
    transport = _coalesced(recording)
    transport.write(b"never sent")
    transport.abort()
    await asyncio.sleep(0.01)
    assert recording.writes == []
    assert _received(peer) == b""  # closed, with nothing before the end


async def test_pipelined_answers_of_a_real_server_come_back_in_order() -> None:
    """Answers ready in one pass leave in one write, in the order of their requests."""

    async def handler(request: Request) -> Response:
        return Response(200, [], request.path.encode())

    server = await start_server(handler, "127.0.0.1", 0, limits=ServerLimits())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"".join(f"GET /{n} HTTP/1.1\r\nhost: x\r\n\r\n".encode() for n in range(5)))
        bodies = []
        for _ in range(5):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            bodies.append(await reader.readexactly(length))
        assert bodies == [f"/{n}".encode() for n in range(5)]
        writer.close()
    finally:
        await server.close(grace=1.0)


async def test_a_client_that_half_closes_after_its_request_gets_the_answer() -> None:
    """The answer is written when the client's end of stream arrives in the same pass:
    the loop closes the connection then, and an answer left for the pass's end was lost."""

    async def handler(request: Request) -> Response:
        return Response(200, [], b"answered")

    server = await start_server(handler, "127.0.0.1", 0, limits=ServerLimits())
    try:
        for _ in range(20):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            writer.write_eof()
            answer = await asyncio.wait_for(reader.read(), 5)
            assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"answered")
            writer.close()
    finally:
        await server.close(grace=1.0)
