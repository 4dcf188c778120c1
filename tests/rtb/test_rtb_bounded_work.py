"""Bounded work per input byte: the worst input each reader's limits allow costs time and
memory in proportion to its size, never more.

The RTB parser reads one bid request on the event loop, so a request that costs
quadratic time holds every other caller of that worker. Each shape here is filled up to
the body limit; the bounds are far above what a linear pass costs (a few milliseconds)
and far below what the quadratic one did (tens of seconds at this size).

The trainer's readers take files: a JSON lines log is read a bounded line at a time
(gzip inflates at most ~1032x), and a Parquet file may hold no more rows than bytes nor
decode to more than `MAX_PARQUET_RATIO` times its size.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.rtb.request import (
    DEFAULT_MAX_REQUEST_BYTES,
    InvalidBidRequest,
    parse_record,
    refuse_duplicate_keys,
)
from gateway.rtb.synth import sample_bodies
from gateway.rtb.train import MAX_LINE_BYTES, MAX_PARQUET_RATIO

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


# --- the trainer's readers ---------------------------------------------------------------
#
# Each runs in a child process that reports how far its resident set grew past what it
# held once its imports were done (VmHWM after a reset). Arrow allocates from the system
# heap there, under an address-space cap, so a reader without bounds dies of MemoryError
# instead of taking the machine's memory.

READER = r"""
import json, resource, sys, time, zlib
from pathlib import Path
import pyarrow.parquet  # noqa: F401  (imported before the baseline)
from gateway.rtb.train import TrainingRefused, read_log, read_outcomes

def status(name):
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024

cap = status("VmSize") + (1 << 30)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # resets VmHWM, the peak resident set
base = status("VmRSS")
started = time.process_time()
lines, refused = 0, None
try:
    if sys.argv[2] == "outcomes":
        lines = len(read_outcomes(Path(sys.argv[1])))
    else:
        for line in read_log(Path(sys.argv[1])):
            zlib.crc32(line.body)  # the trainer's first look at a line: its part
            lines += 1
except TrainingRefused as exc:
    refused = str(exc)
print(json.dumps({"grew": status("VmHWM") - base, "cpu": time.process_time() - started,
                  "lines": lines, "refused": refused}))
"""
READER_MIB = 64  # resident growth allowed: the readers hold a line (<= 1 MiB) or a batch
READER_CPU_SECONDS = 30.0  # inflating 200 MB takes ~1 s


def read_in_child(path: Path, reader: str = "log") -> dict[str, Any]:
    environment = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
    done = subprocess.run(
        [sys.executable, "-c", READER, str(path), reader],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["grew"] < READER_MIB << 20, report
    assert report["cpu"] < READER_CPU_SECONDS, report
    return report


def gzip_bomb(path: Path, head: bytes, megabytes: int, tail: bytes = b"\n") -> Path:
    """``head``, ``megabytes`` MiB of one byte, ``tail``: ~1 KiB of gzip per MiB inflated."""
    with gzip.open(path, "wb", compresslevel=9) as log:
        log.write(head)
        chunk = b"a" * (1 << 20)
        for _ in range(megabytes):
            log.write(chunk)
        log.write(tail)
    return path


def test_a_gzip_line_bomb_is_read_a_bounded_line_at_a_time(tmp_path: Path) -> None:
    """~200 KB of gzip inflating to one 200 MB line: read whole, it peaked at 482 MB."""
    log = gzip_bomb(tmp_path / "bomb.jsonl.gz", b'{"request": "', 200, b'"}\n')
    assert log.stat().st_size < 300_000
    report = read_in_child(log)
    assert (report["lines"], report["refused"]) == (1, None)  # one line, unreadable


def test_gzip_lines_at_the_line_limit_are_read_one_at_a_time(tmp_path: Path) -> None:
    line = b'{"request": "' + b"a" * (MAX_LINE_BYTES - 20) + b'"}\n'
    log = tmp_path / "long.jsonl.gz"
    with gzip.open(log, "wb", compresslevel=9) as out:
        for _ in range(64):
            out.write(line)
    assert read_in_child(log)["lines"] == 64


def test_an_outcome_line_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    log = gzip_bomb(tmp_path / "outcomes.jsonl.gz", b'{"id": "', 200, b'", "bid": 1}\n')
    report = read_in_child(log, "outcomes")
    assert f"a line over {MAX_LINE_BYTES:,} bytes" in report["refused"]


def parquet_log(path: Path, requests: Any, **options: Any) -> Path:
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    parquet.write_table(pyarrow.table({"request": requests}), path, **options)
    return path


def test_a_parquet_integer_request_column_is_refused_unread(tmp_path: Path) -> None:
    """A 1 KB file of int64 200,000,000: each value became bytes(200_000_000)."""
    log = parquet_log(tmp_path / "int.parquet", [200_000_000] * 3)
    report = read_in_child(log)
    assert "column 'request' must hold text (the raw JSON), not int64" in report["refused"]


def test_a_parquet_file_of_more_rows_than_bytes_is_refused_unread(tmp_path: Path) -> None:
    """Two million rows of one dictionary entry: ~190 KB that decoded to ~2 GB of strings."""
    pyarrow = pytest.importorskip("pyarrow")
    rows = pyarrow.DictionaryArray.from_arrays(
        pyarrow.array([0] * 2_000_000, pyarrow.int32()), pyarrow.array([BASE.decode()])
    )
    log = parquet_log(tmp_path / "rows.parquet", rows, compression="zstd")
    report = read_in_child(log)
    assert "2,000,000 rows in" in report["refused"] and "more rows than bytes" in report["refused"]


def test_parquet_pages_past_the_ratio_are_refused_unread(tmp_path: Path) -> None:
    """64 plain-encoded MiB in ~3 KB of zstd: refused from the footer's page sizes."""
    log = parquet_log(
        tmp_path / "pages.parquet", ["x" * (1 << 20)] * 64, compression="zstd", use_dictionary=False
    )
    report = read_in_child(log)
    assert f"more than {MAX_PARQUET_RATIO}x its" in report["refused"]


def test_a_parquet_dictionary_value_repeated_past_the_ratio_is_refused(tmp_path: Path) -> None:
    """One 256 KiB entry for every row (100 MB decoded): one row at a time, stopped at the ratio.

    The file passes the footer's checks: no more rows than bytes, pages within the ratio.
    """
    pyarrow = pytest.importorskip("pyarrow")
    entry = 1 << 18
    rows = pyarrow.DictionaryArray.from_arrays(
        pyarrow.array([0] * 400, pyarrow.int32()), pyarrow.array(["x" * entry])
    )
    log = parquet_log(tmp_path / "entry.parquet", rows, compression="zstd")
    assert 400 <= log.stat().st_size < 400 * entry // MAX_PARQUET_RATIO
    report = read_in_child(log)
    assert "its requests decode to more than" in report["refused"]
    assert report["lines"] <= MAX_PARQUET_RATIO * log.stat().st_size // entry
