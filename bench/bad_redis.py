"""A misbehaving Redis: a small asyncio server speaking RESP that answers data commands wrongly.

Connection set-up (``HELLO``, ``CLIENT``, ``SELECT``, ``PING``...) is answered as
Redis would, so a client connects and warms up. Data commands (``GET``,
``MGET``, ``HGETALL``, ``SET``, ``DEL``, ``HSET``) are answered according to
``mode``, which may be changed at any time:

- ``ok``:          like Redis (values are kept in a dict; ``PX`` is ignored)
- ``integer``:     an integer reply (``:7``) to every data command
- ``short``:       ``MGET`` gets one item fewer than it asked for, ``GET`` an empty array
- ``wrong_items``: ``MGET`` items are integers and nested arrays, ``GET`` a map
- ``garbage``:     bytes that are no RESP at all
- ``error``:       an error reply (``-ERR``)
- ``hang``:        no answer, ever (the connection stays open)
- ``mixed``:       one of the above at random for each command

``done`` counts the misbehaviours carried out, by mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Callable

__all__ = ["MODES", "MisbehavingRedis"]

MODES = ("ok", "integer", "short", "wrong_items", "garbage", "error", "hang")
_DATA = frozenset({b"GET", b"MGET", b"HGETALL", b"SET", b"DEL", b"HSET"})
_MAX_ARGS = 100_000
_MAX_BULK = 64 * 1024 * 1024


def _bulk(value: bytes | None) -> bytes:
    return b"$-1\r\n" if value is None else b"$%d\r\n%s\r\n" % (len(value), value)


def _array(items: list[bytes]) -> bytes:
    return b"*%d\r\n%s" % (len(items), b"".join(items))


class MisbehavingRedis:
    """``await start()``, point a client at ``url``, set ``mode``; ``await close()``."""

    def __init__(self, mode: str = "ok", seed: int = 0) -> None:
        if mode not in (*MODES, "mixed"):
            raise ValueError(f"unknown mode {mode!r}")
        self.mode = mode
        self.done: Counter[str] = Counter()
        self.commands: Counter[str] = Counter()  # data commands received, by name
        self._rng = random.Random(seed)
        self._data: dict[bytes, bytes] = {}
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._changed = asyncio.Event()  # replaced on each connection or command

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def connections(self) -> int:
        """Client connections open now."""
        return len(self._writers)

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait until ``predicate()`` holds, checked after each connection change or command."""
        while not predicate():
            await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def start(self) -> MisbehavingRedis:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> MisbehavingRedis:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self._notify()
        try:
            while True:
                command = await _read_command(reader)
                if command is None:
                    return
                answer = self._answer(command)
                self._notify()
                if answer is not None:
                    writer.write(answer)
                    await writer.drain()
        except (ConnectionError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            self._notify()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _answer(self, command: list[bytes]) -> bytes | None:
        name = command[0].upper()
        if name not in _DATA:
            return _setup_answer(name)
        self.commands[name.decode()] += 1
        mode = self._rng.choice(MODES) if self.mode == "mixed" else self.mode
        if mode == "ok":
            return self._like_redis(name, command[1:])
        self.done[mode] += 1
        return _wrong_answer(mode, name, len(command) - 1)

    def _like_redis(self, name: bytes, args: list[bytes]) -> bytes:
        if name == b"GET":
            return _bulk(self._data.get(args[0]))
        if name == b"MGET":
            return _array([_bulk(self._data.get(key)) for key in args])
        if name == b"SET":
            self._data[args[0]] = args[1]
            return b"+OK\r\n"
        if name == b"DEL":
            return b":%d\r\n" % sum(self._data.pop(key, None) is not None for key in args)
        if name == b"HGETALL":
            return b"*0\r\n"  # no version tags
        return b":%d\r\n" % (len(args) // 2)  # HSET: fields added


def _setup_answer(name: bytes) -> bytes:
    if name == b"PING":
        return b"+PONG\r\n"
    if name == b"HELLO":  # redis-py speaks RESP3; every reply below is valid RESP3 too
        return b"%3\r\n+server\r\n+redis\r\n+version\r\n+7.2.0\r\n+proto\r\n:3\r\n"
    return b"+OK\r\n"  # CLIENT SETINFO, SELECT, AUTH ...


def _wrong_answer(mode: str, name: bytes, nargs: int) -> bytes | None:
    if mode == "integer":
        return b":7\r\n"
    if mode == "short":
        if name == b"MGET":
            return _array([_bulk(None)] * max(0, nargs - 1))
        return b"*0\r\n"
    if mode == "wrong_items":
        if name == b"MGET":
            return _array([b":1\r\n" if i % 2 else b"*1\r\n:2\r\n" for i in range(nargs)])
        return b"%1\r\n+x\r\n,1.5\r\n"
    if mode == "garbage":
        return b"?\x00\xff not RESP\r\n"
    if mode == "error":
        return b"-ERR misbehaving on purpose\r\n"
    return None  # hang: never answer


async def _read_command(reader: asyncio.StreamReader) -> list[bytes] | None:
    """One command as redis-py sends it (an array of bulk strings); None at EOF."""
    line = await reader.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.split() or [b"PING"]  # an inline command
    count = int(line[1:])
    if not 0 < count <= _MAX_ARGS:
        raise ValueError("bad command")
    args = []
    for _ in range(count):
        head = await reader.readline()
        size = int(head[1:]) if head.startswith(b"$") else -1
        if not 0 <= size <= _MAX_BULK:
            raise ValueError("bad bulk string")
        args.append((await reader.readexactly(size + 2))[:-2])
    return args
