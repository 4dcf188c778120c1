"""The ``application/vnd.amazon.eventstream`` framing, both ways.

A message on the wire::

    total length (u32) | headers length (u32) | prelude CRC32 (u32)
    headers (name: u8 length + bytes, type: u8, value)
    payload
    message CRC32 (u32, over everything before it)

SageMaker's ``InvokeEndpointWithResponseStream`` sends ``PayloadPart``
events (raw bytes of the model's response) and, on failure mid-stream,
``ModelStreamError`` / ``InternalStreamFailure`` exceptions with a JSON
payload. The decoder is incremental (feed bytes as they arrive), checks
both CRCs and every length before trusting it, and bounds the size of a
message so that a corrupt length can neither hang it nor make it buffer
gigabytes.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zlib import crc32

import orjson

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "EventStreamDecoder",
    "EventStreamError",
    "HeaderValue",
    "Int8",
    "Int16",
    "Int64",
    "Message",
    "encode_exception",
    "encode_message",
    "encode_payload_part",
    "internal_stream_failure",
    "model_stream_error",
]

# botocore refuses headers over 128 KiB and payloads over 24 MiB; we bound
# the whole message by the same order of magnitude.
DEFAULT_MAX_MESSAGE_SIZE = 24 * 1024 * 1024 + 128 * 1024 + 16
_MAX_HEADERS_LENGTH = 128 * 1024
_PRELUDE_LENGTH = 12
_MIN_MESSAGE_LENGTH = _PRELUDE_LENGTH + 4

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)

_PRELUDE = struct.Struct("!II")
_U32 = struct.Struct("!I")
_U16 = struct.Struct("!H")
_I8 = struct.Struct("!b")
_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_I64 = struct.Struct("!q")

# Header value type codes of the format.
_TRUE, _FALSE, _BYTE, _SHORT, _INT, _LONG, _BYTES, _STRING, _TIMESTAMP, _UUID = range(10)


class Int8(int):
    """An int sent as the 1-byte header type (``int`` alone means 4 bytes)."""

    __slots__ = ()


class Int16(int):
    """An int sent as the 2-byte header type."""

    __slots__ = ()


class Int64(int):
    """An int sent as the 8-byte header type."""

    __slots__ = ()


HeaderValue = bool | int | str | bytes | datetime | uuid.UUID


class EventStreamError(ValueError):
    """The stream is corrupt: bad CRC, impossible length, bad header."""


@dataclass(frozen=True, slots=True)
class Message:
    headers: dict[str, HeaderValue]
    payload: bytes

    @property
    def message_type(self) -> str | None:
        value = self.headers.get(":message-type")
        return value if isinstance(value, str) else None

    @property
    def event_type(self) -> str | None:
        value = self.headers.get(":event-type")
        return value if isinstance(value, str) else None

    @property
    def exception_type(self) -> str | None:
        value = self.headers.get(":exception-type")
        return value if isinstance(value, str) else None


# -- encoding ---------------------------------------------------------------


def _encode_value(value: HeaderValue) -> bytes:
    # Order matters: bool is an int, and the int subclasses pick a width.
    if value is True:
        return b"\x00"
    if value is False:
        return b"\x01"
    if isinstance(value, str):
        data = value.encode()
        return bytes((_STRING,)) + _U16.pack(len(data)) + data
    if isinstance(value, bytes):
        return bytes((_BYTES,)) + _U16.pack(len(value)) + value
    if isinstance(value, Int8):
        return bytes((_BYTE,)) + _I8.pack(value)
    if isinstance(value, Int16):
        return bytes((_SHORT,)) + _I16.pack(value)
    if isinstance(value, Int64):
        return bytes((_LONG,)) + _I64.pack(value)
    if isinstance(value, int):
        return bytes((_INT,)) + _I32.pack(value)
    if isinstance(value, datetime):
        # Naive datetimes are taken as UTC; integer arithmetic keeps it exact.
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        millis = (aware - _EPOCH) // _MILLISECOND
        return bytes((_TIMESTAMP,)) + _I64.pack(millis)
    if isinstance(value, uuid.UUID):
        return bytes((_UUID,)) + value.bytes
    raise TypeError(f"unsupported event stream header value {type(value).__name__}")


def _encode_headers(headers: Sequence[tuple[str, HeaderValue]]) -> bytes:
    parts: list[bytes] = []
    for name, value in headers:
        raw_name = name.encode()
        if not 0 < len(raw_name) < 256:
            raise ValueError(f"header name length must be 1..255 bytes: {name!r}")
        parts.append(bytes((len(raw_name),)))
        parts.append(raw_name)
        try:
            parts.append(_encode_value(value))
        except struct.error as exc:
            raise ValueError(f"header {name!r} value out of range: {exc}") from None
    return b"".join(parts)


def encode_message(headers: Sequence[tuple[str, HeaderValue]], payload: bytes) -> bytes:
    """One complete event stream message."""
    header_bytes = _encode_headers(headers)
    total = _MIN_MESSAGE_LENGTH + len(header_bytes) + len(payload)
    prelude = _PRELUDE.pack(total, len(header_bytes))
    head = prelude + _U32.pack(crc32(prelude))
    body_crc = crc32(payload, crc32(header_bytes, crc32(head)))
    return b"".join((head, header_bytes, payload, _U32.pack(body_crc)))


# Header bytes of the common events are constant: encode them once.
_PAYLOAD_PART_HEADERS = _encode_headers(
    [
        (":event-type", "PayloadPart"),
        (":content-type", "application/octet-stream"),
        (":message-type", "event"),
    ]
)


def encode_payload_part(data: bytes) -> bytes:
    """A SageMaker ``PayloadPart`` event carrying ``data``."""
    total = _MIN_MESSAGE_LENGTH + len(_PAYLOAD_PART_HEADERS) + len(data)
    prelude = _PRELUDE.pack(total, len(_PAYLOAD_PART_HEADERS))
    head = prelude + _U32.pack(crc32(prelude))
    body_crc = crc32(data, crc32(_PAYLOAD_PART_HEADERS, crc32(head)))
    return b"".join((head, _PAYLOAD_PART_HEADERS, data, _U32.pack(body_crc)))


def encode_exception(exception_type: str, fields: dict[str, object]) -> bytes:
    """An exception event: botocore raises it as ``EventStreamError``."""
    return encode_message(
        [
            (":exception-type", exception_type),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        orjson.dumps(fields),
    )


def model_stream_error(message: str, error_code: str = "ModelInvocationTimeExceeded") -> bytes:
    """``ModelStreamError``; SageMaker's codes: ModelInvocationTimeExceeded, StreamBroken."""
    return encode_exception("ModelStreamError", {"Message": message, "ErrorCode": error_code})


def internal_stream_failure(message: str) -> bytes:
    return encode_exception("InternalStreamFailure", {"Message": message})


# -- decoding ---------------------------------------------------------------


def _decode_headers(data: bytes) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    view = memoryview(data)
    end = len(data)
    pos = 0
    try:
        while pos < end:
            name_length = data[pos]
            name = bytes(view[pos + 1 : pos + 1 + name_length]).decode()
            pos += 1 + name_length
            value, pos = _decode_value(data, view, pos)
            if name in headers:
                raise EventStreamError(f"duplicate header {name!r}")
            headers[name] = value
    except (IndexError, OverflowError, struct.error, UnicodeDecodeError) as exc:
        raise EventStreamError(f"malformed headers: {exc}") from None
    if pos != end:
        raise EventStreamError("header value runs past the headers block")
    return headers


def _decode_value(data: bytes, view: memoryview, pos: int) -> tuple[HeaderValue, int]:
    kind = data[pos]
    pos += 1
    if kind == _TRUE:
        return True, pos
    if kind == _FALSE:
        return False, pos
    if kind == _BYTE:
        return Int8(_I8.unpack_from(data, pos)[0]), pos + 1
    if kind == _SHORT:
        return Int16(_I16.unpack_from(data, pos)[0]), pos + 2
    if kind == _INT:
        return _I32.unpack_from(data, pos)[0], pos + 4
    if kind == _LONG:
        return Int64(_I64.unpack_from(data, pos)[0]), pos + 8
    if kind in (_BYTES, _STRING):
        length = _U16.unpack_from(data, pos)[0]
        start = pos + 2
        raw = bytes(view[start : start + length])
        if len(raw) != length:
            raise EventStreamError("header value runs past the headers block")
        return (raw.decode() if kind == _STRING else raw), start + length
    if kind == _TIMESTAMP:
        millis = _I64.unpack_from(data, pos)[0]
        return _EPOCH + millis * _MILLISECOND, pos + 8
    if kind == _UUID:
        raw = bytes(view[pos : pos + 16])
        if len(raw) != 16:
            raise EventStreamError("header value runs past the headers block")
        return uuid.UUID(bytes=raw), pos + 16
    raise EventStreamError(f"unknown header type {kind}")


class EventStreamDecoder:
    """Incremental decoder: ``feed`` bytes, get the complete messages back.

    Raises :class:`EventStreamError` on the first corrupt message; the
    decoder is unusable after that (the framing is lost). Messages that
    arrived intact before the corrupt one, in the same bytes, are returned
    first: the error is raised by the next ``feed`` or by ``end``.
    """

    __slots__ = ("_buffer", "_error", "_max_message_size")

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self._buffer = bytearray()
        self._max_message_size = max_message_size
        self._error: EventStreamError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a message not yet complete (non-zero at EOF = truncated)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Message]:
        if self._error is not None:
            raise EventStreamError(f"decoder already failed: {self._error}")
        self._buffer += data
        messages: list[Message] = []
        try:
            while len(self._buffer) >= _PRELUDE_LENGTH:
                total = self._check_prelude()
                if len(self._buffer) < total:
                    break
                messages.append(self._take_message(total))
        except EventStreamError as exc:
            self._error = exc
            if not messages:
                raise
        return messages

    def end(self) -> None:
        """Every byte of the stream was fed: raise if it was corrupt or stopped mid-message."""
        if self._error is not None:
            raise self._error
        if self._buffer:
            raise EventStreamError(
                f"stream ended {len(self._buffer)} bytes into an unfinished message"
            )

    def _check_prelude(self) -> int:
        buffer = self._buffer
        total, headers_length = _PRELUDE.unpack_from(buffer)
        (prelude_crc,) = _U32.unpack_from(buffer, 8)
        if crc32(memoryview(buffer)[:8]) != prelude_crc:
            raise EventStreamError("prelude CRC mismatch")
        if total < _MIN_MESSAGE_LENGTH or total > self._max_message_size:
            raise EventStreamError(f"message length {total} out of bounds")
        if headers_length > _MAX_HEADERS_LENGTH or headers_length > total - _MIN_MESSAGE_LENGTH:
            raise EventStreamError(f"headers length {headers_length} out of bounds")
        return int(total)

    def _take_message(self, total: int) -> Message:
        buffer = self._buffer
        (message_crc,) = _U32.unpack_from(buffer, total - 4)
        view = memoryview(buffer)
        try:
            if crc32(view[: total - 4]) != message_crc:
                raise EventStreamError("message CRC mismatch")
            (headers_length,) = _U32.unpack_from(buffer, 4)
            headers_end = _PRELUDE_LENGTH + headers_length
            headers = _decode_headers(bytes(view[_PRELUDE_LENGTH:headers_end]))
            payload = bytes(view[headers_end : total - 4])
        finally:
            view.release()
        del buffer[:total]
        return Message(headers, payload)
