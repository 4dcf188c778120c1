"""Helpers shared by the cache tests."""

from __future__ import annotations

import asyncio
import struct
import zlib

from gateway.cache import FORMAT_VERSION, Entry, encode_entry

__all__ = ["CountingLoader", "faulty_writer_entry", "forge_entry"]


def forge_entry(
    body: bytes, content_type: str, stored_at: float, expires_at: float, *, crc: bool = True
) -> bytes:
    """Bytes in the cache's layout with any field values (a faulty or hostile writer).

    The checksum is valid unless ``crc`` is False: the fields, not the
    transport, are what is wrong.
    """
    ct = content_type.encode()
    header = struct.pack(
        "<2sBBddHHI", b"\xa7C", FORMAT_VERSION, 0, stored_at, expires_at, len(ct), 0, len(body)
    )
    payload = header + ct + body
    checksum = zlib.crc32(payload) if crc else zlib.crc32(payload) ^ 1
    return payload + struct.pack("<I", checksum)


def faulty_writer_entry(
    body: bytes, content_type: str, stored_at: float, expires_at: float
) -> bytes:
    """What a writer that skips field checks stores: the codec's bytes when it
    agrees to write the entry, else the same layout forged."""
    try:
        return encode_entry(Entry(body, content_type, (), stored_at, expires_at))
    except ValueError:
        return forge_entry(body, content_type, stored_at, expires_at)


class CountingLoader:
    """A loader that counts calls and can be held on an Event until released."""

    def __init__(self, body: bytes = b'{"p":0.5}', *, fail: Exception | None = None) -> None:
        self.calls = 0
        self.body = body
        self.fail = fail
        self.release: asyncio.Event | None = None  # set to hold loads until released
        self.started = asyncio.Event()  # set by the first call

    async def __call__(self) -> Entry:
        self.calls += 1
        self.started.set()
        if self.release is not None:
            await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return Entry(self.body, "application/json", (("variant", "v1"),))
