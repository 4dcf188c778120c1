"""A fault-injecting TCP proxy for tests: sits between a client and a server on loopback.

Modes (switch at runtime with ``proxy.mode = ...``):

- ``pass``: forward both ways.
- ``reset_before_head``: when a request arrives, reset the client connection (RST).
- ``reset_mid_body``: forward the response head and a few body bytes, then RST.
- ``stall``: swallow requests; never answer.
- ``half_close``: when a request arrives, shut down the write side to the client (FIN)
  and answer nothing, keeping the read side open.
- ``slow``: dribble response bytes a few at a time (``slow_chunk`` bytes every
  ``slow_delay`` seconds; the response head goes out at once, so a client is left
  mid-body for as long as the dribble lasts).
- ``close_on_reuse``: close a client connection (FIN) when its request number
  ``close_after + 1`` arrives: the stale keep-alive race, as the client sees it.
  Only connections that were open when the mode was set are affected, so the
  client's fresh connection afterwards gets through.
- ``refuse``: stop listening (new connections are refused); existing ones keep working.

Counters: ``accepted`` (client connections), ``requests`` (request lines seen),
``dribbled`` (bytes sent in ``slow`` mode). ``received`` keeps every byte clients
sent, to read what went on the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

__all__ = ["MODES", "FaultProxy"]

MODES = (
    "pass",
    "reset_before_head",
    "reset_mid_body",
    "stall",
    "half_close",
    "slow",
    "close_on_reuse",
    "refuse",
)


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Link:
    """One client connection and its upstream connection."""

    def __init__(
        self,
        proxy: FaultProxy,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
    ) -> None:
        self.proxy = proxy
        self.client_reader = client_reader
        self.client_writer = client_writer
        self.upstream_writer: asyncio.StreamWriter | None = None
        self.requests = 0
        self.dead = False
        self.serial = proxy.accepted

    async def run(self) -> None:
        proxy = self.proxy
        try:
            upstream_reader, self.upstream_writer = await asyncio.open_connection(
                proxy.upstream_host, proxy.upstream_port
            )
        except OSError:
            _reset(self.client_writer)
            return
        upstream = asyncio.create_task(self._pump_responses(upstream_reader), name="faultproxy-up")
        try:
            await self._pump_requests()
        finally:
            self.kill()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await upstream

    def kill(self, reset: bool = False) -> None:
        if not self.dead:
            self.dead = True
            if reset:
                _reset(self.client_writer)
            else:
                self.client_writer.close()
        if self.upstream_writer is not None:
            self.upstream_writer.close()

    async def _pump_requests(self) -> None:
        proxy = self.proxy
        assert self.upstream_writer is not None
        while not self.dead:
            try:
                data = await self.client_reader.read(65536)
            except (ConnectionError, OSError):
                return
            if not data:
                return
            proxy.received += data
            new_requests = data.count(b" HTTP/1.1\r\n")
            if new_requests:
                self.requests += new_requests
                proxy.requests += new_requests
                mode = proxy.mode
                if mode == "reset_before_head":
                    self.kill(reset=True)
                    return
                if (
                    mode == "close_on_reuse"
                    and self.serial <= proxy.stale_before
                    and self.requests > proxy.close_after
                ):
                    self.kill()
                    return
                if mode == "half_close":
                    with contextlib.suppress(OSError, RuntimeError):
                        self.client_writer.write_eof()
                    proxy.half_closed += 1
                    continue  # keep reading, never answer
                if mode == "stall":
                    continue
            elif proxy.mode in ("stall", "half_close"):
                continue
            self.upstream_writer.write(data)

    async def _pump_responses(self, reader: asyncio.StreamReader) -> None:
        proxy = self.proxy
        writer = self.client_writer
        while not self.dead:
            data = await reader.read(65536)
            if not data:
                if not self.dead:
                    self.dead = True
                    writer.close()
                return
            mode = proxy.mode
            if mode == "reset_mid_body":
                head_end = data.find(b"\r\n\r\n")
                cut = head_end + 4 + 10 if head_end >= 0 else len(data) // 2
                writer.write(data[:cut])
                await asyncio.sleep(0.05)  # let the head arrive on its own
                self.kill(reset=True)
                return
            if mode == "slow":
                chunk = proxy.slow_chunk
                for start in range(0, len(data), chunk):
                    if self.dead:
                        return
                    writer.write(data[start : start + chunk])
                    proxy.dribbled += min(chunk, len(data) - start)
                    await asyncio.sleep(proxy.slow_delay)
                continue
            writer.write(data)


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self._mode = "pass"
        self.close_after = 1
        self.stale_before = 0  # close_on_reuse affects connections up to this serial
        self.accepted = 0
        self.requests = 0
        self.half_closed = 0
        self.slow_chunk = 7  # "slow" mode: bytes per write ...
        self.slow_delay = 0.002  # ... and the pause after each
        self.dribbled = 0  # bytes sent to clients in "slow" mode
        self.received = bytearray()  # every byte clients sent
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mode(self) -> str:
        return self._mode

    async def set_mode(self, mode: str, *, close_after: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        if close_after is not None:
            self.close_after = close_after
        previous, self._mode = self._mode, mode
        self.stale_before = self.accepted
        if mode == "refuse" and previous != "refuse":
            await self._stop_listening()
        elif previous == "refuse" and mode != "refuse":
            await self._listen(self.port)

    async def start(self) -> FaultProxy:
        await self._listen(0)
        return self

    async def _listen(self, port: int) -> None:
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link(self, reader, writer)
        self._links.add(link)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await link.run()
        finally:
            self._links.discard(link)
            if task is not None:
                self._tasks.discard(task)

    def drop_all(self) -> None:
        """Close every client connection now (FIN), as a server's idle timeout would."""
        for link in list(self._links):
            link.kill()

    @property
    def open_links(self) -> int:
        return len(self._links)

    async def close(self) -> None:
        await self._stop_listening()
        for link in list(self._links):
            link.kill()
        for _ in range(100):
            if not self._tasks:
                break
            await asyncio.sleep(0.01)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.sleep(0)

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
