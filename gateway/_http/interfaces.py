# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""What the client needs from a transport, and the settings and counters every transport shares.

The native transport (``native.py``, over ``pool.py`` and ``connection.py``) and
the httpx transport (``httpx_transport.py``) both provide :class:`Transport`.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from gateway._http.message import Origin, RawResponse
from gateway._http.request import PreparedRequest

# Of an error response only this much body is read, by every transport and
# both call paths: enough for any error document SageMaker or a load balancer
# sends. The rest is never buffered; the connection is closed instead.
MAX_ERROR_BODY_BYTES = 64 * 1024


@dataclass(slots=True)
class TransportStats:
    connections_opened: int = 0
    connections_closed: int = 0
    requests: int = 0
    reused: int = 0
    stale_retries: int = 0
    drained_after_cancel: int = 0


class StreamingResponse(Protocol):
    status: int
    headers: dict[str, str]

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    async def aclose(self) -> None: ...


class Transport(Protocol):
    """What the client needs from a transport; native and httpx both provide it."""

    stats: TransportStats

    async def start(self, origins: list[Origin]) -> None: ...

    async def request(self, request: PreparedRequest, deadline: float) -> RawResponse: ...

    async def stream(self, request: PreparedRequest, deadline: float) -> StreamingResponse: ...

    async def aclose(self) -> None: ...


def make_ssl_context(verify: bool) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
