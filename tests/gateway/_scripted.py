"""A scripted backend: a ``Transport`` that answers from a script instead of a socket.

Like httpcore's mock backend, it lets the call pipeline (route, attempt,
hedge, retry, record, deadline) be tested deterministically: each SageMaker
endpoint has a queue of cues, and a cue either answers, fails, or holds the
attempt until the test releases it (or the call's deadline passes, as the
native transport would). Nothing sleeps and no socket is opened.

    transport = ScriptedTransport()
    transport.on("a").fail(errors.ConnectError("refused"))
    transport.on_any().error(503, "ServiceUnavailable")  # whichever target is asked next
    held = transport.on("b").hold()
    ...
    held.release(b"late answer")
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from gateway import errors
from gateway._http.interfaces import StreamingResponse, TransportStats
from gateway._http.message import Origin, RawResponse
from gateway._http.request import PreparedRequest


@dataclass(frozen=True, slots=True)
class Sent:
    """One request as the transport received it, signature and all."""

    endpoint: str
    path: str
    headers: dict[str, str]
    body: bytes


class Held:
    """An attempt that waits until the test answers it (or its deadline passes)."""

    def __init__(self) -> None:
        self._answer: asyncio.Future[RawResponse] = asyncio.get_running_loop().create_future()
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    def release(self, body: bytes = b"released", status: int = 200) -> None:
        if not self._answer.done():
            self._answer.set_result(RawResponse(status, {}, body))

    def fail(self, error: BaseException) -> None:
        if not self._answer.done():
            self._answer.set_exception(error)

    async def wait(self, deadline: float) -> RawResponse:
        self.started.set()
        try:
            return await asyncio.wait_for(
                asyncio.shield(self._answer), max(0.0, deadline - time.monotonic())
            )
        except TimeoutError:
            raise errors.DeadlineExceeded("the call's deadline passed") from None
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


@dataclass(slots=True)
class _Cue:
    response: RawResponse | None = None
    error: BaseException | None = None
    held: Held | None = None


@dataclass(slots=True)
class Script:
    """The cues for one endpoint, used in order; an empty script echoes the body."""

    cues: deque[_Cue] = field(default_factory=deque)

    def answer(
        self, body: bytes = b"ok", status: int = 200, headers: dict[str, str] | None = None
    ) -> Script:
        self.cues.append(_Cue(response=RawResponse(status, dict(headers or {}), body)))
        return self

    def error(self, status: int, code: str, message: str = "scripted") -> Script:
        """A SageMaker rest-json error, as the service sends it."""
        body = f'{{"message": "{message}"}}'.encode()
        return self.answer(body, status, {"x-amzn-errortype": f"{code}:http://internal"})

    def fail(self, error: BaseException) -> Script:
        self.cues.append(_Cue(error=error))
        return self

    def hold(self) -> Held:
        held = Held()
        self.cues.append(_Cue(held=held))
        return held


class ScriptedTransport:
    """A ``gateway._http.interfaces.Transport`` driven by per-endpoint scripts."""

    def __init__(self) -> None:
        self.stats = TransportStats()
        self.sent: list[Sent] = []
        self._scripts: dict[str, Script] = {}
        self._any = Script()
        self.origins: list[Origin] = []

    def on(self, endpoint: str) -> Script:
        return self._scripts.setdefault(endpoint, Script())

    def on_any(self) -> Script:
        """Cues for the next requests whatever their endpoint, used before per-endpoint ones."""
        return self._any

    def sent_to(self, endpoint: str) -> int:
        return sum(1 for sent in self.sent if sent.endpoint == endpoint)

    async def start(self, origins: list[Origin]) -> None:
        self.origins = origins

    async def aclose(self) -> None:
        self._scripts.clear()

    async def request(self, request: PreparedRequest, deadline: float) -> RawResponse:
        endpoint = request.path.split("/")[2]
        headers = dict(request.final_headers())
        self.sent.append(Sent(endpoint, request.path, headers, request.body))
        self.stats.requests += 1
        cues = self._any.cues or self.on(endpoint).cues
        if not cues:
            return RawResponse(200, {}, request.body)
        cue = cues.popleft()
        if cue.held is not None:
            return await cue.held.wait(deadline)
        if cue.error is not None:
            raise cue.error
        assert cue.response is not None
        return cue.response

    async def stream(self, request: PreparedRequest, deadline: float) -> StreamingResponse:
        response = await self.request(request, deadline)
        return _WholeStream(response)


class _WholeStream:
    """A streaming response delivered as one chunk."""

    def __init__(self, response: RawResponse) -> None:
        self.status = response.status
        self.headers = response.headers
        self._body = response.body

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self._body

    async def read(self) -> bytes:
        return self._body

    async def aclose(self) -> None:
        return None
