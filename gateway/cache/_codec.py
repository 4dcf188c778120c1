"""Cached values and their fixed binary layout in Redis.

Layout (little-endian), version 2::

    magic      2 bytes   b"\\xa7C"
    version    u8        FORMAT_VERSION
    flags      u8        0 (reserved: compression, ...); unknown flags are rejected
    stored_at  f64       wall-clock seconds since the epoch
    expires_at f64       wall-clock seconds since the epoch
    ct_len     u16       length of content_type (UTF-8)
    meta_count u16       number of (name, value) pairs
    body_len   u32       length of body
    content_type
    meta_count x (u16 name_len, u16 value_len, name, value)
    body
    crc32      u32       CRC-32 of every byte before it

Timestamps are wall-clock because entries are shared by processes (and
machines) through Redis. The version byte comes right after the magic so a
reader can reject a layout it does not know before touching anything else:
an unknown version is a miss, never a misread. Decoding never trusts
Redis: the checksum catches flipped or truncated bytes, the timestamps must
be finite and in order, and the content type and metadata are relayed as
HTTP header values, so a control character in them (CR, LF, NUL, DEL...)
makes the entry corrupt rather than an injected header. Anything
inconsistent raises :class:`CodecError`.
"""

from __future__ import annotations

import math
import re
import struct
import zlib
from typing import NamedTuple

__all__ = [
    "FORMAT_VERSION",
    "CodecError",
    "CorruptEntryError",
    "Entry",
    "UnknownFormatError",
    "decode_entry",
    "encode_entry",
]

FORMAT_VERSION = 2
_MAGIC = b"\xa7C"
_HEADER = struct.Struct("<2sBBddHHI")
_PAIR = struct.Struct("<HH")
_CHECKSUM = struct.Struct("<I")
_CRC_RESIDUE = 0x2144DF1C
_VERSION_OFFSET = len(_MAGIC)
_FLAGS_OFFSET = _VERSION_OFFSET + 1
# Control characters have no place in an HTTP header value (HTAB aside).
_isfinite = math.isfinite
_HEADER_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class Entry(NamedTuple):
    """One cached prediction: what a cache hit hands back to the caller.

    ``meta`` holds the few response attributes a cached result must still
    report (the invoked variant, a custom attribute...). ``stored_at`` and
    ``expires_at`` are set by the cache when the entry is stored; loaders
    leave them at 0.
    """

    body: bytes
    content_type: str
    meta: tuple[tuple[str, str], ...] = ()
    stored_at: float = 0.0
    expires_at: float = 0.0

    def meta_value(self, name: str, default: str | None = None) -> str | None:
        for key, value in self.meta:
            if key == name:
                return value
        return default


class CodecError(ValueError):
    """Bytes that are not a cache entry this codec can read."""


class UnknownFormatError(CodecError):
    """An entry written by a codec version this one does not know."""


class CorruptEntryError(CodecError):
    """An entry of this format whose bytes or fields cannot be trusted."""


def encode_entry(entry: Entry) -> bytes:
    """Serialise ``entry``; ValueError if a field does not fit the layout or is unsafe."""
    _check_fields(entry.content_type, entry.meta, ValueError)
    content_type = entry.content_type.encode()
    parts = [b"", content_type]
    for name, value in entry.meta:
        name_bytes, value_bytes = name.encode(), value.encode()
        parts += (_PAIR.pack(len(name_bytes), len(value_bytes)), name_bytes, value_bytes)
    parts.append(entry.body)
    try:
        parts[0] = _HEADER.pack(
            _MAGIC,
            FORMAT_VERSION,
            0,
            entry.stored_at,
            entry.expires_at,
            len(content_type),
            len(entry.meta),
            len(entry.body),
        )
    except struct.error as exc:
        raise ValueError(f"entry does not fit the cache layout: {exc}") from None
    if not _timestamps_ok(entry.stored_at, entry.expires_at):
        raise ValueError("entry timestamps must be finite and stored_at <= expires_at")
    payload = b"".join(parts)
    return payload + _CHECKSUM.pack(zlib.crc32(payload))


def decode_entry(raw: bytes) -> Entry:
    """Parse bytes written by :func:`encode_entry`; CodecError on anything else."""
    if raw[:2] != _MAGIC or len(raw) <= _VERSION_OFFSET:
        raise CodecError("not a cache entry")
    if raw[_VERSION_OFFSET] != FORMAT_VERSION:
        raise UnknownFormatError(f"cache entry format {raw[_VERSION_OFFSET]}")
    if len(raw) > _FLAGS_OFFSET and raw[_FLAGS_OFFSET]:
        # A feature (compression...) this reader lacks; checked before the
        # checksum, which such a writer may compute differently.
        raise UnknownFormatError(f"cache entry flags {raw[_FLAGS_OFFSET]:#x}")
    if len(raw) < _HEADER.size + _CHECKSUM.size:
        raise CorruptEntryError("truncated cache entry")
    # A CRC-32 over the bytes followed by that CRC (little-endian) always
    # comes out as the same residue: one pass, no slice of the value.
    if zlib.crc32(raw) != _CRC_RESIDUE:
        raise CorruptEntryError("cache entry checksum mismatch")
    end = len(raw) - _CHECKSUM.size
    try:
        entry = _decode_v2(raw, end)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptEntryError(f"corrupt cache entry: {exc}") from None
    _check_fields(entry.content_type, entry.meta, CorruptEntryError)
    return entry


def _decode_v2(raw: bytes, end: int) -> Entry:
    _, _, _, stored_at, expires_at, ct_len, meta_count, body_len = _HEADER.unpack_from(raw)
    if not (stored_at <= expires_at and _isfinite(stored_at) and _isfinite(expires_at)):
        raise CorruptEntryError("cache entry timestamps out of order or not finite")
    pos = _HEADER.size
    content_type = raw[pos : pos + ct_len].decode()
    pos += ct_len
    meta: tuple[tuple[str, str], ...] = ()
    if meta_count:
        meta, pos = _decode_meta(raw, pos, meta_count, end)
    if pos + body_len != end:
        raise CorruptEntryError("cache entry length mismatch")
    return Entry(raw[pos:end], content_type, meta, stored_at, expires_at)


def _decode_meta(
    raw: bytes, pos: int, count: int, end: int
) -> tuple[tuple[tuple[str, str], ...], int]:
    pairs = []
    for _ in range(count):
        name_len, value_len = _PAIR.unpack_from(raw, pos)
        pos += _PAIR.size
        name = raw[pos : pos + name_len].decode()
        pos += name_len
        value = raw[pos : pos + value_len].decode()
        pos += value_len
        pairs.append((name, value))
    if pos > end:
        raise CorruptEntryError("cache entry metadata overruns the value")
    return tuple(pairs), pos


def _timestamps_ok(stored_at: float, expires_at: float) -> bool:
    return math.isfinite(stored_at) and math.isfinite(expires_at) and stored_at <= expires_at


def _check_fields(
    content_type: str, meta: tuple[tuple[str, str], ...], error: type[ValueError]
) -> None:
    """Content type and metadata are relayed as header values: no control characters."""
    # isprintable() is False for every character the pattern matches, and is
    # a fast C loop: the pattern only runs on the rare value it rejects (a
    # tab, a non-printable non-ASCII character) to decide.
    search = _HEADER_CONTROL.search
    if not content_type.isprintable() and search(content_type):
        raise error("cache entry content type holds a control character")
    for name, value in meta:
        if (not name.isprintable() and search(name)) or (not value.isprintable() and search(value)):
            raise error(f"cache entry metadata {name!r} holds a control character")
