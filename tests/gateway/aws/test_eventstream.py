"""The vnd.amazon.eventstream codec against botocore's decoder and test vectors."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway._aws.eventstream import (
    EventStreamDecoder,
    EventStreamError,
    HeaderValue,
    Int8,
    Int16,
    Int64,
    encode_message,
    encode_payload_part,
    internal_stream_failure,
    model_stream_error,
)

# Encoded messages from botocore's own unit tests (tests/unit/test_eventstream.py).
BOTOCORE_VECTORS: list[tuple[bytes, dict[str, object], bytes]] = [
    (b"\x00\x00\x00\x10\x00\x00\x00\x00\x05\xc2H\xeb}\x98\xc8\xff", {}, b""),
    (b"\x00\x00\x00\x17\x00\x00\x00\x07)\x86\x01X\x04byte\x02\xff\xc2\xf8i\xdc", {"byte": -1}, b""),
    (
        b"\x00\x00\x00\x19\x00\x00\x00\tq\x0e\x92>\x05short\x03\xff\xff\xb2|\xb6\xcc",
        {"short": -1},
        b"",
    ),
    (
        b"\x00\x00\x00\x1d\x00\x00\x00\r\x83\xe3\xf0\xe7\x07integer\x04\xff\xff\xff\xff"
        b"\x8b\x8e\x12\xeb",
        {"integer": -1},
        b"",
    ),
    (
        b"\x00\x00\x00\x1e\x00\x00\x00\x0e]J\xdb\x8d\x04long\x05\xff\xff\xff\xff\xff\xff"
        b"\xff\xffK\xc22\xda",
        {"long": -1},
        b"",
    ),
    (
        b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96",
        {},
        b"{'foo':'bar'}",
    ),
    (
        b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10"
        b"application/json{'foo':'bar'}\x8d\x9c\x08\xb1",
        {"content-type": "application/json"},
        b"{'foo':'bar'}",
    ),
    (
        b"\x00\x00\x00R\x00\x00\x00B\xbf#c~\r:message-type\x07\x00\x05error"
        b"\x0b:error-code\x07\x00\x04code\x0e:error-message\x07\x00\x07messagekl\xea=",
        {":message-type": "error", ":error-code": "code", ":error-message": "message"},
        b"",
    ),
]

ALL_TYPES_VECTOR = (
    b"\x00\x00\x00\x62\x00\x00\x00\x52\x03\xb5\xcb\x9c"
    b"\x010\x00\x011\x01\x012\x02\x02\x013\x03\x00\x03"
    b"\x014\x04\x00\x00\x00\x04\x015\x05\x00\x00\x00\x00\x00\x00\x00\x05"
    b"\x016\x06\x00\x05bytes\x017\x07\x00\x04utf8"
    b"\x018\x08\x00\x00\x00\x00\x00\x00\x00\x08\x019\x090123456789abcdef"
    b"\x63\x35\x36\x71"
)


def _botocore_decode(data: bytes) -> list[tuple[dict[str, object], bytes]]:
    buffer = EventStreamBuffer()
    buffer.add_data(data)
    return [(message.headers, message.payload) for message in buffer]


@pytest.mark.parametrize(("encoded", "headers", "payload"), BOTOCORE_VECTORS)
def test_decodes_botocore_vectors(
    encoded: bytes, headers: dict[str, object], payload: bytes
) -> None:
    (message,) = EventStreamDecoder().feed(encoded)
    assert message.headers == headers
    assert message.payload == payload


@pytest.mark.parametrize(("encoded", "headers", "payload"), BOTOCORE_VECTORS)
def test_reencodes_botocore_vectors_byte_for_byte(
    encoded: bytes, headers: dict[str, object], payload: bytes
) -> None:
    (message,) = EventStreamDecoder().feed(encoded)
    assert encode_message(list(message.headers.items()), message.payload) == encoded


def test_decodes_every_header_type() -> None:
    (message,) = EventStreamDecoder().feed(ALL_TYPES_VECTOR)
    assert message.headers == {
        "0": True,
        "1": False,
        "2": 2,
        "3": 3,
        "4": 4,
        "5": 5,
        "6": b"bytes",
        "7": "utf8",
        "8": datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=8),
        "9": uuid.UUID(bytes=b"0123456789abcdef"),
    }
    assert encode_message(list(message.headers.items()), b"") == ALL_TYPES_VECTOR


def test_all_vectors_in_one_stream_fed_byte_by_byte() -> None:
    stream = b"".join(vector[0] for vector in BOTOCORE_VECTORS)
    decoder = EventStreamDecoder()
    messages = [
        message
        for index in range(len(stream))
        for message in decoder.feed(stream[index : index + 1])
    ]
    assert [(m.headers, m.payload) for m in messages] == [(h, p) for _, h, p in BOTOCORE_VECTORS]
    assert decoder.buffered == 0


def test_botocore_decodes_sagemaker_events() -> None:
    stream = (
        encode_payload_part(b"hello ")
        + encode_payload_part(b"")
        + model_stream_error("boom", "StreamBroken")
        + internal_stream_failure("oops")
    )
    decoded = _botocore_decode(stream)
    assert decoded[0] == (
        {
            ":event-type": "PayloadPart",
            ":content-type": "application/octet-stream",
            ":message-type": "event",
        },
        b"hello ",
    )
    assert decoded[1][1] == b""
    assert decoded[2][0][":exception-type"] == "ModelStreamError"
    assert decoded[2][0][":message-type"] == "exception"
    assert json.loads(decoded[2][1]) == {"Message": "boom", "ErrorCode": "StreamBroken"}
    assert decoded[3][0][":exception-type"] == "InternalStreamFailure"
    assert json.loads(decoded[3][1]) == {"Message": "oops"}


# -- corruption -------------------------------------------------------------

PAYLOAD_MESSAGE = BOTOCORE_VECTORS[6][0]


@pytest.mark.parametrize(
    "corrupt",
    [
        # botocore's negative vectors: bad header length, header bytes, length, payload.
        b"\x00\x00\x00=\xff\x00\x01\x02\x07\xfd\x83\x96\x0ccontent-type\x07\x00\x10"
        b"application/json{'foo':'bar'}\x8d\x9c\x08\xb1",
        b"\x00\x00\x00=\x00\x00\x00 \x07\xfd\x83\x96\x0ccontent+type\x07\x00\x10"
        b"application/json{'foo':'bar'}\x8d\x9c\x08\xb1",
        b"\x01\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'}\xc3e96",
        b"\x00\x00\x00\x1d\x00\x00\x00\x00\xfdR\x8cZ{'foo':'bar'\x8d\xc3e96",
        b"\x00\x00\x00\x24\x00\x00\x00\x14\x4b\xb9\x82\xd0\x04test\x04asdf\x04test\x04asdf"
        b"\xf3\xf4\x75\x63",
    ],
)
def test_rejects_botocore_negative_vectors(corrupt: bytes) -> None:
    with pytest.raises(EventStreamError):
        EventStreamDecoder().feed(corrupt)


def test_rejects_any_flipped_bit() -> None:
    for position in range(len(PAYLOAD_MESSAGE)):
        damaged = bytearray(PAYLOAD_MESSAGE)
        damaged[position] ^= 0x10
        decoder = EventStreamDecoder()
        try:
            messages = decoder.feed(bytes(damaged))
        except EventStreamError:
            continue
        # A flipped length bit may only make the decoder wait for more bytes.
        assert messages == [] and decoder.buffered == len(damaged)


def test_bounds_message_size_instead_of_waiting() -> None:
    big = encode_payload_part(b"x" * 1000)
    with pytest.raises(EventStreamError, match="out of bounds"):
        EventStreamDecoder(max_message_size=500).feed(big[:12])


def test_failed_decoder_stays_failed() -> None:
    decoder = EventStreamDecoder()
    with pytest.raises(EventStreamError):
        decoder.feed(b"\x00" * 16)
    with pytest.raises(EventStreamError):
        decoder.feed(PAYLOAD_MESSAGE)


def test_encoder_rejects_out_of_range_values() -> None:
    with pytest.raises(ValueError):
        encode_message([("x", Int8(300))], b"")
    with pytest.raises(ValueError):
        encode_message([("", "empty name")], b"")


# -- round trips ------------------------------------------------------------

_names = st.text(min_size=1, max_size=20).filter(lambda name: len(name.encode()) < 256)
_values: st.SearchStrategy[HeaderValue] = st.one_of(
    st.booleans(),
    st.integers(-(2**7), 2**7 - 1).map(Int8),
    st.integers(-(2**15), 2**15 - 1).map(Int16),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1).map(Int64),
    st.binary(max_size=64),
    st.text(max_size=64),
    st.integers(-(2**40), 2**40).map(
        lambda ms: datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    ),
    st.uuids(),
)
_headers = st.dictionaries(_names, _values, max_size=8)


@settings(max_examples=150, deadline=None)
@given(headers=_headers, payload=st.binary(max_size=2048), split=st.integers(1, 64))
def test_round_trip_through_both_decoders(
    headers: dict[str, HeaderValue], payload: bytes, split: int
) -> None:
    encoded = encode_message(list(headers.items()), payload) * 2
    decoder = EventStreamDecoder()
    messages = []
    for start in range(0, len(encoded), split):
        messages += decoder.feed(encoded[start : start + split])
    assert [(m.headers, m.payload) for m in messages] == [(headers, payload)] * 2
    assert decoder.buffered == 0
    # types aside (botocore returns ints and raw bytes), botocore sees the same message
    (botocore_headers, botocore_payload), _ = _botocore_decode(encoded)
    assert botocore_payload == payload
    assert set(botocore_headers) == set(headers)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=300))
def test_garbage_never_hangs_or_crashes(data: bytes) -> None:
    decoder = EventStreamDecoder(max_message_size=1024)
    try:
        decoder.feed(data)
    except EventStreamError:
        return
    assert decoder.buffered <= max(len(data), 0)


def test_messages_before_a_corrupt_one_are_delivered_then_it_raises() -> None:
    decoder = EventStreamDecoder()
    damaged = bytearray(PAYLOAD_MESSAGE)
    damaged[-1] ^= 0x01  # the message CRC
    messages = decoder.feed(PAYLOAD_MESSAGE + bytes(damaged))
    assert len(messages) == 1
    with pytest.raises(EventStreamError, match="CRC"):
        decoder.end()
    with pytest.raises(EventStreamError):
        decoder.feed(PAYLOAD_MESSAGE)


def test_end_refuses_a_stream_stopped_mid_message() -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(PAYLOAD_MESSAGE + PAYLOAD_MESSAGE[:-3]) != []
    with pytest.raises(EventStreamError, match="unfinished message"):
        decoder.end()
    complete = EventStreamDecoder()
    complete.feed(PAYLOAD_MESSAGE)
    complete.end()  # a whole stream ends quietly
