"""An InvokeEndpointWithResponseStream answer: ``InvokeStream`` and its parts' async generator.

It lives in a module of its own because the client's module is compiled with
mypyc, which does not compile async generators; this one stays Python.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence

import orjson

from gateway import errors
from gateway._aws.eventstream import EventStreamDecoder, EventStreamError, Message
from gateway._http.interfaces import MAX_ERROR_BODY_BYTES, StreamingResponse
from gateway._http.message import RawResponse
from gateway._invoke.api import (
    decode_error,
    error_origin,
    redact,
    redacted,
    safe_code,
    safe_request_id,
)

__all__ = ["InvokeStream", "OpenedStream", "error_body_prefix", "payload_parts"]

# The call's accounting: told the error that ended the stream, or None.
Finish = Callable[[BaseException | None], None]
OpenedStream = tuple[StreamingResponse, Finish]


class InvokeStream:
    """The parts of a response stream, and its response headers once they arrived.

    Iterate it (``async for part in stream``). A failure event mid-stream raises
    ``InternalStreamFailure`` or ``ModelError`` (``ModelStreamError``); an error
    answer raises its class, its text free of the call's secrets.
    """

    __slots__ = ("_parts", "response_headers", "secrets", "target")

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        self._parts: AsyncGenerator[bytes, None] | None = None
        # The values of the call's sensitive members: kept out of every error's text.
        self.secrets = secrets
        # Lower-case names; empty until the response head has arrived.
        self.response_headers: Mapping[str, str] = {}
        self.target: str | None = None

    def __aiter__(self) -> InvokeStream:
        return self

    async def __anext__(self) -> bytes:
        assert self._parts is not None
        try:
            return await self._parts.__anext__()
        except errors.GatewayError as error:
            redacted(error, self.secrets)
            raise

    async def aclose(self) -> None:
        """Stop early; the connection is closed (it is mid-response)."""
        if self._parts is not None:
            await self._parts.aclose()

    @property
    def content_type(self) -> str | None:
        # The stream API carries the model's content type in its own header.
        return self.response_headers.get("x-amzn-sagemaker-content-type")

    @property
    def invoked_variant(self) -> str | None:
        return self.response_headers.get("x-amzn-invoked-production-variant")

    @property
    def custom_attributes(self) -> str | None:
        return self.response_headers.get("x-amzn-sagemaker-custom-attributes")

    @property
    def request_id(self) -> str | None:
        """The answer's ``x-amzn-RequestId``; ``other`` when it is not well-formed."""
        return safe_request_id(self.response_headers.get("x-amzn-requestid"))


async def payload_parts(
    open_stream: Callable[[], Awaitable[OpenedStream]],
    decode: Callable[[RawResponse, Sequence[str]], errors.ServiceError] = decode_error,
    secrets: Sequence[str] = (),
) -> AsyncGenerator[bytes, None]:
    """Open the stream on first iteration, then yield each PayloadPart's bytes.

    ``decode`` reads an error answer (the runtime's model decides its shapes);
    ``secrets`` (the call's, see ``_api.secrets_in``) never reach an error it raises.
    """
    stream, finish = await open_stream()
    error: BaseException | None = None
    parts = 0
    try:
        try:
            if stream.status != 200:
                body = await error_body_prefix(stream)
                raise decode(RawResponse(stream.status, stream.headers, body), secrets)
            decoder = EventStreamDecoder()
            async for chunk in stream.chunks():
                try:
                    messages = decoder.feed(chunk)
                except EventStreamError as exc:
                    raise _broken(f"corrupt response stream: {exc}", parts) from exc
                for message in messages:
                    payload = payload_or_raise(message, secrets)
                    if payload is not None:
                        parts += 1
                        yield payload
            try:
                # A body that ended cleanly may still stop mid-message: parts are missing.
                decoder.end()
            except EventStreamError as exc:
                raise _broken(f"corrupt response stream: {exc}", parts) from exc
        finally:
            await stream.aclose()
    except BaseException as exc:
        error = exc
        raise
    finally:
        finish(error)  # the target's health sees the error as it came
        if parts and isinstance(error, errors.GatewayError):
            # Parts were delivered: the stream cannot be replayed, whatever broke it.
            error.retryable = False


def _broken(message: str, parts: int) -> errors.ResponseStreamError:
    return errors.ResponseStreamError(f"{message} (after {parts} part(s))", parts=parts)


async def error_body_prefix(stream: StreamingResponse) -> bytes:
    """At most MAX_ERROR_BODY_BYTES of an error body; the caller closes the stream after.

    An error document is small; a body past that is a broken or hostile peer,
    and reading it whole would buffer without bound.
    """
    chunks: list[bytes] = []
    size = 0
    async for chunk in stream.chunks():
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_ERROR_BODY_BYTES:
            break
    return b"".join(chunks)[:MAX_ERROR_BODY_BYTES]


def payload_or_raise(message: Message, secrets: Sequence[str] = ()) -> bytes | None:
    """PayloadPart bytes, None for other events, or the error a stream carries (its
    fields redacted as they are decoded, as ``_api.decode_error`` does)."""
    if message.message_type == "event":
        return message.payload if message.event_type == "PayloadPart" else None
    code = safe_code(message.exception_type, secrets) or "InternalStreamFailure"
    try:
        detail = orjson.loads(message.payload) if message.payload else {}
    except orjson.JSONDecodeError:
        detail = {}
    if not isinstance(detail, dict):
        detail = {}
    raw_text = str(detail.get("Message") or detail.get("message") or "")
    origin = error_origin(raw_text)  # a Global Inference Gateway's prefix, if any
    text = redact(raw_text, secrets) or ""
    if code == "ModelStreamError":
        error_code = detail.get("ErrorCode")
        raise errors.ModelError(
            text or "model stream error",
            code=code,
            status=200,
            error_code=safe_code(error_code, secrets) if isinstance(error_code, str) else None,
            origin=origin,
        )
    if code == "InternalStreamFailure":
        raise errors.InternalStreamFailure(
            text or "internal stream failure", status=200, origin=origin
        )
    raise errors.InternalFailure(text or "internal stream failure", code=code, status=200)
