"""The parts of an InvokeEndpointWithResponseStream answer, as an async generator.

It lives in a module of its own because the client's module is compiled with
mypyc, which does not compile async generators; this one stays Python.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable

import orjson

from gateway import errors
from gateway._eventstream import EventStreamDecoder, Message
from gateway._transport import StreamingResponse
from gateway._wire import RawResponse, decode_error

__all__ = ["OpenedStream", "payload_parts"]

# The call's accounting: told the error that ended the stream, or None.
Finish = Callable[[BaseException | None], None]
OpenedStream = tuple[StreamingResponse, Finish]


async def payload_parts(
    open_stream: Callable[[], Awaitable[OpenedStream]],
) -> AsyncGenerator[bytes, None]:
    """Open the stream on first iteration, then yield each PayloadPart's bytes."""
    stream, finish = await open_stream()
    error: BaseException | None = None
    try:
        try:
            if stream.status != 200:
                body = await stream.read()
                raise decode_error(RawResponse(stream.status, stream.headers, body))
            decoder = EventStreamDecoder()
            async for chunk in stream.chunks():
                for message in decoder.feed(chunk):
                    payload = payload_or_raise(message)
                    if payload is not None:
                        yield payload
        finally:
            await stream.aclose()
    except BaseException as exc:
        error = exc
        raise
    finally:
        finish(error)


def payload_or_raise(message: Message) -> bytes | None:
    """PayloadPart bytes, None for other events, or the error a stream carries."""
    if message.message_type == "event":
        return message.payload if message.event_type == "PayloadPart" else None
    code = message.exception_type or "InternalStreamFailure"
    try:
        detail = orjson.loads(message.payload) if message.payload else {}
    except orjson.JSONDecodeError:
        detail = {}
    if not isinstance(detail, dict):
        detail = {}
    text = str(detail.get("Message") or detail.get("message") or "")
    if code == "ModelStreamError":
        raise errors.ModelError(text or "model stream error", code=code, status=200)
    raise errors.InternalFailure(text or "internal stream failure", code=code, status=200)
