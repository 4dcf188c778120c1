"""Cached values and their fixed binary layout in Redis.

Layout (little-endian), version 1::

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

Timestamps are wall-clock because entries are shared by processes (and
machines) through Redis. The version byte comes right after the magic so a
reader can reject a layout it does not know before touching anything else:
an unknown version is a miss, never a misread. Decoding never trusts a length
field; anything inconsistent raises :class:`CodecError`.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = [
    "FORMAT_VERSION",
    "CodecError",
    "Entry",
    "UnknownFormatError",
    "decode_entry",
    "encode_entry",
]

FORMAT_VERSION = 1
_MAGIC = b"\xa7C"
_HEADER = struct.Struct("<2sBBddHHI")
_PAIR = struct.Struct("<HH")
_VERSION_OFFSET = len(_MAGIC)


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


def encode_entry(entry: Entry) -> bytes:
    """Serialise ``entry``; ValueError if a field does not fit the layout."""
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
    return b"".join(parts)


def decode_entry(raw: bytes) -> Entry:
    """Parse bytes written by :func:`encode_entry`; CodecError on anything else."""
    if raw[:2] != _MAGIC or len(raw) <= _VERSION_OFFSET:
        raise CodecError("not a cache entry")
    if raw[_VERSION_OFFSET] != FORMAT_VERSION:
        raise UnknownFormatError(f"cache entry format {raw[_VERSION_OFFSET]}")
    if len(raw) < _HEADER.size:
        raise CodecError("truncated cache entry")
    try:
        return _decode_v1(raw)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CodecError(f"corrupt cache entry: {exc}") from None


def _decode_v1(raw: bytes) -> Entry:
    _, _, flags, stored_at, expires_at, ct_len, meta_count, body_len = _HEADER.unpack_from(raw)
    if flags:
        raise UnknownFormatError(f"cache entry flags {flags:#x}")
    pos = _HEADER.size
    content_type = raw[pos : pos + ct_len].decode()
    pos += ct_len
    meta: tuple[tuple[str, str], ...] = ()
    if meta_count:
        meta, pos = _decode_meta(raw, pos, meta_count)
    if pos + body_len != len(raw):
        raise CodecError("cache entry length mismatch")
    return Entry(raw[pos:], content_type, meta, stored_at, expires_at)


def _decode_meta(raw: bytes, pos: int, count: int) -> tuple[tuple[tuple[str, str], ...], int]:
    pairs = []
    for _ in range(count):
        name_len, value_len = _PAIR.unpack_from(raw, pos)
        pos += _PAIR.size
        name = raw[pos : pos + name_len].decode()
        pos += name_len
        value = raw[pos : pos + value_len].decode()
        pos += value_len
        pairs.append((name, value))
    if pos > len(raw):
        raise CodecError("cache entry metadata overruns the value")
    return tuple(pairs), pos
