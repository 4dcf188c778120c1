from __future__ import annotations

import contextlib
import math
import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.cache import (
    FORMAT_VERSION,
    CodecError,
    CorruptEntryError,
    Entry,
    UnknownFormatError,
    decode_entry,
    encode_entry,
)

# Header-safe text: anything but control characters (HTAB allowed).
text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters=[*map(chr, range(32)), "\x7f"])
    | st.just("\t"),
    max_size=40,
)
instants = st.floats(min_value=0, max_value=4e9)


def _entry(
    body: bytes, content_type: str, meta: tuple[tuple[str, str], ...], a: float, b: float
) -> Entry:
    return Entry(body, content_type, meta, min(a, b), max(a, b))


entries = st.builds(
    _entry,
    st.binary(max_size=2048),
    text,
    st.lists(st.tuples(text, text), max_size=5).map(tuple),
    instants,
    instants,
)


@given(entries)
def test_round_trip(entry: Entry) -> None:
    assert decode_entry(encode_entry(entry)) == entry


@given(entries, st.data())
def test_truncated_or_padded_values_are_rejected(entry: Entry, data: st.DataObject) -> None:
    blob = encode_entry(entry)
    cut = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
    with pytest.raises(CodecError):
        decode_entry(blob[:cut])
    with pytest.raises(CodecError):
        decode_entry(blob + b"\x00")


@given(st.binary(max_size=300))
def test_garbage_never_crashes(raw: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode_entry(raw)


@given(st.binary(min_size=30, max_size=300))
def test_garbage_behind_a_valid_header_prefix_never_crashes(tail: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode_entry(b"\xa7C" + bytes([FORMAT_VERSION]) + b"\x00" + tail)


def test_layout_starts_with_magic_and_version() -> None:
    blob = encode_entry(Entry(b"x", "text/csv"))
    assert blob[:2] == b"\xa7C"
    assert blob[2] == FORMAT_VERSION


def test_unknown_version_and_flags_are_their_own_error() -> None:
    blob = bytearray(encode_entry(Entry(b"x", "text/csv")))
    blob[2] = FORMAT_VERSION + 1
    with pytest.raises(UnknownFormatError):
        decode_entry(bytes(blob))
    blob[2] = FORMAT_VERSION
    blob[3] = 1
    with pytest.raises(UnknownFormatError):
        decode_entry(bytes(blob))


def test_pickle_is_not_a_cache_entry() -> None:
    import pickle

    with pytest.raises(CodecError):
        decode_entry(pickle.dumps(Entry(b"x", "t")))


def test_oversized_fields_are_a_value_error_on_encode() -> None:
    with pytest.raises(ValueError):
        encode_entry(Entry(b"", "t" * 70_000))
    assert not isinstance(struct.error(), ValueError)  # the codec must translate it


@given(entries, st.data())
def test_any_flipped_byte_is_a_corrupt_entry(entry: Entry, data: st.DataObject) -> None:
    blob = bytearray(encode_entry(entry))
    # Past magic, version and flags (those have errors of their own).
    index = data.draw(st.integers(min_value=4, max_value=len(blob) - 1))
    blob[index] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(CorruptEntryError):
        decode_entry(bytes(blob))


def test_a_flipped_body_byte_is_caught_by_the_checksum() -> None:
    blob = bytearray(encode_entry(Entry(b'{"p":0.91}', "application/json")))
    blob[-6] ^= 0x01  # inside the body: every length still adds up
    with pytest.raises(CorruptEntryError, match="checksum"):
        decode_entry(bytes(blob))


def _forge(content_type: str, stored_at: float = 0.0, expires_at: float = 1.0) -> bytes:
    """Bytes a faulty writer could store: our layout, a valid checksum, bad fields."""
    ct = content_type.encode()
    header = struct.pack(
        "<2sBBddHHI", b"\xa7C", FORMAT_VERSION, 0, stored_at, expires_at, len(ct), 0, 1
    )
    payload = header + ct + b"x"
    return payload + struct.pack("<I", zlib.crc32(payload))


@pytest.mark.parametrize(
    "bad", ["text/csv\r\nx-injected: 1", "text/csv\rx: 1", "a\nb", "a\x00b", "a\x7fb"]
)
def test_control_characters_in_header_fields_are_refused_both_ways(bad: str) -> None:
    with pytest.raises(CorruptEntryError, match="control character"):
        decode_entry(_forge(bad))
    with pytest.raises(ValueError, match="control character"):
        encode_entry(Entry(b"x", bad))
    with pytest.raises(ValueError, match="control character"):
        encode_entry(Entry(b"x", "text/csv", (("custom-attributes", bad),)))


@pytest.mark.parametrize(
    ("stored_at", "expires_at"),
    [(0.0, math.inf), (math.nan, 1.0), (10.0, 5.0), (-math.inf, 0.0)],
)
def test_impossible_timestamps_are_refused(stored_at: float, expires_at: float) -> None:
    with pytest.raises(CorruptEntryError, match="timestamps"):
        decode_entry(_forge("text/csv", stored_at, expires_at))
    with pytest.raises(ValueError):
        encode_entry(Entry(b"x", "t", (), stored_at, expires_at))
