"""Access-log lines stay one short line of printable text whatever path a caller sends."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import orjson
import pytest

from gateway import Gateway
from gateway.sidecar import Sidecar, SidecarConfig
from gateway.sidecar._logging import MAX_LOGGED_CHARS, JsonFormatter


@pytest.fixture
def access_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("gateway.access")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


async def _post(sidecar: Sidecar, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", sidecar.port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n".encode()
        + b"connection: close\r\n\r\n{}"
    )
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_control_characters_and_long_paths_are_escaped_and_cut(
    gateway: Gateway, access_lines: io.StringIO
) -> None:
    config = SidecarConfig.from_mapping({"access_log": True})
    # A 60 KB path of percent-encoded control characters: the route name is decoded.
    long_path = "/endpoints/" + "%1b%5b31m%0a" * 5000 + "/invocations"
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        assert (await _post(sidecar, long_path)).startswith(b"HTTP/1.1 4")
        assert (await _post(sidecar, "/endpoints/a%07b/invocations")).startswith(b"HTTP/1.1 4")
    text = access_lines.getvalue()
    lines = text.splitlines()
    assert len(lines) == 2
    # Before: about 180 KB for the long path, and the escape bytes in the route.
    assert all(len(line) < 4 * MAX_LOGGED_CHARS + 1000 for line in lines)
    long_entry, short_entry = (orjson.loads(line) for line in lines)
    for entry in (long_entry, short_entry):
        for field in ("path", "route"):
            assert entry[field].isascii() and entry[field].isprintable()
    assert long_entry["path"].endswith(f"...({len(long_path)} characters)")
    assert long_entry["route"].startswith("\\x1b[31m\\x0a\\x1b[31m")
    assert short_entry["route"] == "a\\x07b"
    assert short_entry["path"] == "/endpoints/a%07b/invocations"  # printable: unchanged


def test_a_value_past_64_bits_is_still_one_json_line() -> None:
    record = logging.LogRecord("gateway.sidecar", logging.INFO, "", 0, "started", None, None)
    record.max_in_flight = 10**30
    line = JsonFormatter().format(record)
    # Before: orjson raised, and logging printed a traceback instead of the line.
    assert "\n" not in line
    assert json.loads(line)["max_in_flight"] == 10**30
