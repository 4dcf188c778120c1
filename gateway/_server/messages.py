# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py): keep it compilable.
"""What a handler sees and returns: the request, the responses, the server's limits.

Re-exported by :mod:`gateway._server.http`, the public import path. Also the
refusal record (:class:`_Reject`) that the connection's reader produces and its
writer encodes: here, so the two need not import each other.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "AbortConnection",
    "Answered",
    "BodyLimits",
    "Handler",
    "HeadCheck",
    "Relay",
    "Request",
    "Response",
    "ServerLimits",
    "StreamingResponse",
    "UnsafeHeader",
]


class AbortConnection(Exception):
    """Raise from a handler to reset the connection (RST, no response)."""


class UnsafeHeader(ValueError):
    """A response header name or value holds CR, LF or NUL: never written."""


class Request:
    """One parsed request, as the handler sees it.

    A plain class rather than a dataclass: compiled, it is a native class
    built without a Python-level ``__init__`` (one per request).
    """

    __slots__ = (
        "_pairs",
        "body",
        "client",
        "headers",
        "http_version",
        "keep_alive",
        "method",
        "path",
        "query",
    )

    def __init__(
        self,
        method: str,
        path: str,
        query: str,
        headers: dict[str, str],
        header_pairs: list[tuple[str, str]] | None,
        body: bytes,
        client: tuple[str, int] | None,
        http_version: str = "1.1",
        keep_alive: bool = True,
    ) -> None:
        self.method = method
        self.path = path  # as received: still percent-encoded, without the query
        self.query = query  # the text after '?', or ""
        self.headers = headers  # lower-case names; repeated names joined with ","
        # None where no field came twice: they are the headers' items then, in order
        # (made only if asked for: only SigV4 verification reads them).
        self._pairs = header_pairs
        self.body = body
        self.client = client
        self.http_version = http_version
        self.keep_alive = keep_alive

    @property
    def header_pairs(self) -> list[tuple[str, str]]:
        """The fields as they came: lower-case names, in arrival order."""
        pairs = self._pairs
        if pairs is None:
            pairs = self._pairs = list(self.headers.items())
        return pairs

    def __repr__(self) -> str:
        return f"Request({self.method} {self.path}, {len(self.body)} bytes)"


class Response:
    """A complete response. The server adds Content-Length, Date, Connection.

    ``head_lines`` are header lines already encoded, each ending in CRLF, sent
    before ``headers``: a relay copies an upstream's lines there unchanged.
    Unlike ``headers`` they are sent unchecked, so whoever builds them checks
    them (``InvokeResult.field_lines`` does: no bare CR or LF, no NUL, no
    folded line).
    """

    __slots__ = ("body", "head_lines", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
        head_lines: bytes = b"",
    ) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.head_lines = head_lines


class StreamingResponse:
    """A response whose body is sent as it is produced (chunked encoding)."""

    __slots__ = ("chunks", "headers", "status")

    def __init__(
        self,
        chunks: AsyncIterable[bytes],
        status: int = 200,
        headers: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.status = status
        self.headers = headers
        self.chunks = chunks


Handler = Callable[[Request], Awaitable[Response | StreamingResponse]]
# Called with each request's head (an empty body) before its body is read: a
# Response refuses it there and then (the connection closes after it); None
# lets it through. For checks the head alone decides, such as authentication.
HeadCheck = Callable[[Request], Response | None]


# How a relay hands back a request it took: its answer, or an awaitable of it.
Answered = Callable[[Request, "Response | Awaitable[Response]"], None]


class Relay:
    """Answers some requests from the server's protocol callbacks, without a task.

    Set as ``Server.relay``. A connection with nothing queued or in flight
    offers each complete request to :meth:`take` before its worker task sees
    it. A plain class: compiled, a call through it is a direct native call.
    """

    __slots__ = ()

    def take(self, request: Request, answered: Answered) -> bool:
        """Take ``request`` (True) or leave it to the handler (False).

        A request taken is answered by calling ``answered`` exactly once,
        later, from a callback (never from inside ``take``): with its
        ``Response``, or with an awaitable of it (a task) that the
        connection awaits as it awaits the handler.
        """
        raise NotImplementedError


class BodyLimits(Protocol):
    """Body limits per request path, at most the server's ``max_body_size``, and the
    refusal each path answers a body over its limit with.

    Consulted only for a body that may be larger than ``floor`` (a declared
    length over it, or a chunked one), so the common small request pays nothing.
    """

    @property
    def floor(self) -> int:
        """No path's limit is below this."""
        ...

    def limit(self, path: str) -> int:
        """The largest body ``path`` takes."""
        ...

    def refusal(self, path: str, limit: int) -> Response | None:
        """The 413 for ``path``; None: the server's plain one."""
        ...


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_header_size: int = 64 * 1024  # request line + all header lines
    max_headers: int = 128
    max_body_size: int = 8 * 1024 * 1024
    # After a 413 (sent at once), what the client still sends is read and
    # dropped up to this much (and for 2 s at most), so it gets to read the
    # 413 instead of a reset while it is still sending.
    max_discard_size: int = 16 * 1024 * 1024
    header_timeout: float = 10.0  # first byte of a request to end of headers
    body_timeout: float = 60.0  # end of headers to end of body
    keepalive_timeout: float = 75.0  # idle between requests
    max_pipelined: int = 16  # queued requests before reading pauses
    # Request bodies waiting behind the one being answered: past this, reading
    # pauses, so a client that pipelines and never reads pins little memory.
    max_queued_bytes: int = 1024 * 1024
    # A peer that reads none of its answers for this long is cut off.
    write_timeout: float = 30.0
    shutdown_timeout: float = 5.0  # in-flight grace on close()
    server_header: str | None = None


@dataclass(frozen=True, slots=True)
class _Reject:
    """A request refused by the parser or the limits: answered instead of handled."""

    status: int
    message: str
    # Sent instead of the plain-text message: a head check's own refusal.
    response: Response | None = None
    # The client may still be sending a body that is never read: half-close and
    # drop what it sends for a while, so it reads the answer instead of a reset.
    linger: bool = False
