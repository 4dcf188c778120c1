from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache import FORMAT_VERSION, CodecError, Entry, UnknownFormatError, decode_entry, encode_entry

text = st.text(max_size=40)
entries = st.builds(
    Entry,
    body=st.binary(max_size=2048),
    content_type=text,
    meta=st.lists(st.tuples(text, text), max_size=5).map(tuple),
    stored_at=st.floats(allow_nan=False, allow_infinity=False),
    expires_at=st.floats(allow_nan=False, allow_infinity=False),
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
        decode_entry(b"\xa7C\x01\x00" + tail)


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
