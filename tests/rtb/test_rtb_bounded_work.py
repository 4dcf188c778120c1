"""Bounded work per input byte: the worst input each reader's limit allows costs time and
memory in proportion to its size, never more.

The RTB parser reads one bid request on the event loop, so a request that costs
quadratic time holds every other caller of that worker. Each shape here is filled up to
the body limit; the bounds are far above what a linear pass costs (a few milliseconds)
and far below what the quadratic one did (tens of seconds at this size).
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import pytest

from gateway.rtb.request import (
    DEFAULT_MAX_REQUEST_BYTES,
    InvalidBidRequest,
    parse_record,
    refuse_duplicate_keys,
)
from gateway.rtb.synth import sample_bodies

LIMIT = DEFAULT_MAX_REQUEST_BYTES
BASE = sample_bodies(1, seed=9)[0]
CPU_SECONDS = 1.0  # a linear pass over 64 KiB takes ~1-20 ms on a loaded machine
BYTES_PER_BYTE = 128  # Python memory per input byte (measured: at most ~45)


def filled(head: bytes, unit: bytes, tail: bytes = b"") -> bytes:
    """``head`` + ``unit`` repeated + ``tail``, as long as the limit allows."""
    return head + unit * ((LIMIT - len(head) - len(tail)) // len(unit)) + tail


# 65 opening brackets pass the one-pass count, so the exact depth pass reads the rest.
DEEP = b'{"a":' + b"[" * 65
WORST_REQUESTS = {
    "an unterminated string of escaped quotes": filled(DEEP + b'"', b'\\"'),
    "an unterminated string of backslashes": filled(DEEP + b'"', b"\\"),
    "an unterminated string of text and escapes": filled(DEEP + b'"', b'a\\"b'),
    "quotes alone": filled(DEEP, b'"'),
    "empty strings": filled(DEEP, b'"",'),
    "opening brackets alone": b"[" * LIMIT,
    "brackets inside strings": filled(b'{"a":[', b'"[{",'),
    "a request with a string of escapes": filled(BASE[:-1] + b',"x":"', b'\\"', b'"}'),
    "a request with many keys": filled(BASE[:-1] + b',"x":{', b'"k":1,', b'"z":1}}'),
}


def cpu_seconds(call: Callable[[], object]) -> float:
    started = time.process_time()
    call()
    return time.process_time() - started


def peak_bytes(call: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def read_request(body: bytes | str) -> None:
    """What the proxy does with a body: parse it, then look for a repeated key."""
    try:
        parse_record(body)
        refuse_duplicate_keys(body)
    except InvalidBidRequest:
        pass


def test_the_quadratic_shape_at_the_body_limit_is_read_in_linear_time() -> None:
    """``{"a":`` + 65 x ``[`` + ``"`` + ``\\"`` repeated: the nesting-depth pass rescanned
    the rest of the body from every quote (16 KiB took 1.3 s, 32 KiB 5.8 s)."""
    body = WORST_REQUESTS["an unterminated string of escaped quotes"]
    assert LIMIT - 2 <= len(body) <= LIMIT
    with pytest.raises(InvalidBidRequest) as refused:
        parse_record(body)
    assert refused.value.reason == "too_deep"  # 66 levels before the string
    assert cpu_seconds(lambda: read_request(body)) < CPU_SECONDS
    assert cpu_seconds(lambda: read_request(body.decode())) < CPU_SECONDS


@pytest.mark.parametrize("shape", list(WORST_REQUESTS))
def test_the_parser_bounds_time_and_memory_per_byte(shape: str) -> None:
    body = WORST_REQUESTS[shape]
    assert LIMIT - 8 <= len(body) <= LIMIT
    assert cpu_seconds(lambda: read_request(body)) < CPU_SECONDS
    assert peak_bytes(lambda: read_request(body)) < BYTES_PER_BYTE * LIMIT
