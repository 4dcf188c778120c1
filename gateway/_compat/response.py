"""The response dicts botocore returns, built from the Gateway's results and the model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Self

from gateway import errors
from gateway._compat.request import MethodSpec
from gateway._invoke.api import AsyncInvocation, InvokeResult
from gateway._invoke.streaming import InvokeStream

__all__ = ["EventStream", "StreamingBody", "answer", "metadata", "stream_answer"]


class StreamingBody:
    """``response["Body"]`` of a body answer: aiobotocore's AioStreamingBody API over bytes."""

    __slots__ = ("_data", "_position")
    _DEFAULT_CHUNK_SIZE = 1024

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._position = 0

    def readable(self) -> bool:
        return self._position < len(self._data)

    async def read(self, amt: int | None = None) -> bytes:
        start = self._position
        end = len(self._data) if amt is None or amt < 0 else min(start + amt, len(self._data))
        self._position = end
        # The common case, one read() of everything, returns the bytes without a copy.
        return self._data if start == 0 and end == len(self._data) else self._data[start:end]

    async def readinto(self, buffer: bytearray) -> int:
        chunk = await self.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)

    async def iter_chunks(self, chunk_size: int = _DEFAULT_CHUNK_SIZE) -> AsyncIterator[bytes]:
        while chunk := await self.read(chunk_size):
            yield chunk

    async def iter_lines(
        self, chunk_size: int = _DEFAULT_CHUNK_SIZE, keepends: bool = False
    ) -> AsyncIterator[bytes]:
        for line in (await self.read()).splitlines(keepends):
            yield line

    async def readlines(self) -> list[bytes]:
        return [line async for line in self.iter_lines()]

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.iter_chunks(self._DEFAULT_CHUNK_SIZE)

    def tell(self) -> int:
        return self._position

    def close(self) -> None:
        self._position = len(self._data)

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class EventStream:
    """``response["Body"]`` of a stream call: ``{"PayloadPart": {"Bytes": ...}}`` events.

    ``first`` is the part the call already took (the request is sent on the first
    step); ``pending`` an error event met there, raised when iteration reaches it.
    ``translate`` turns the gateway's errors into botocore's.
    """

    def __init__(
        self,
        parts: AsyncIterator[bytes],
        first: bytes | None,
        pending: errors.GatewayError | None,
        translate: Callable[[errors.GatewayError], Exception],
    ) -> None:
        self._parts = parts
        self._first = first
        self._pending = pending
        self._translate = translate
        self._closing: set[asyncio.Task[None]] = set()

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._events()

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        if self._first is not None:
            first, self._first = self._first, None
            yield {"PayloadPart": {"Bytes": first}}
        try:
            if self._pending is not None:
                raise self._pending
            async for part in self._parts:
                yield {"PayloadPart": {"Bytes": part}}
        except errors.GatewayError as exc:
            raise self._translate(exc) from exc

    async def aclose(self) -> None:
        """Release the connection without reading the rest of the stream."""
        aclose = getattr(self._parts, "aclose", None)
        if aclose is not None:
            await aclose()

    def close(self) -> None:
        # botocore's EventStream.close() is synchronous; closing an async
        # generator is not, so it is scheduled (and referenced until done).
        task = asyncio.get_running_loop().create_task(self.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


def metadata(request_id: str | None, status: int, headers: Any, attempts: int) -> dict[str, Any]:
    """``ResponseMetadata``; ``attempts`` counts the requests sent after the first."""
    found: dict[str, Any] = {"RequestId": request_id} if request_id is not None else {}
    found["HTTPStatusCode"] = status
    found["HTTPHeaders"] = headers
    found["RetryAttempts"] = attempts
    return found


def _add_members(response: dict[str, Any], spec: MethodSpec, source: object) -> None:
    # botocore includes a header-bound member only when the header was sent.
    for member, attribute in spec.answer_members:
        value = getattr(source, attribute, None)
        if value is not None:
            response[member] = value


def answer(spec: MethodSpec, result: InvokeResult | AsyncInvocation) -> dict[str, Any]:
    """The response to a call answered whole: a body answer, or a queued (async) one."""
    response: dict[str, Any] = {}
    headers: Mapping[str, str]
    if isinstance(result, InvokeResult):
        response["Body"] = StreamingBody(result.body)
        headers = result.headers
        attempts = result.attempts - 1
    else:
        # Only the request id is known of an async answer's headers.
        headers = {"x-amzn-requestid": result.request_id} if result.request_id else {}
        attempts = 0
    _add_members(response, spec, result)
    status = spec.operation.success_status
    plain_headers = headers if type(headers) is dict else dict(headers)
    response["ResponseMetadata"] = metadata(result.request_id, status, plain_headers, attempts)
    return response


def stream_answer(spec: MethodSpec, parts: InvokeStream, body: EventStream) -> dict[str, Any]:
    """The response to a stream call whose first step was taken (its head has arrived)."""
    response: dict[str, Any] = {"Body": body}
    _add_members(response, spec, parts)
    headers = dict(parts.response_headers)
    status = spec.operation.success_status
    response["ResponseMetadata"] = metadata(parts.request_id, status, headers, 0)
    return response
