"""Bid logs and outcome files, as the trainer (``gateway.rtb.train``) and the report read them.

A log holds one bid request per line (JSON lines, optionally gzipped) or per row
(Parquet with a ``request`` column); an outcome file, one outcome per line, joined
to the requests by id. The trainer's docstring describes the formats, and the
bounds on the work per input byte, that this module applies.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_PARQUET_RATIO",
    "UNREADABLE_LINE",
    "LogLine",
    "Outcome",
    "TrainingRefused",
    "log_line",
    "read_log",
    "read_outcomes",
]

# The longest log line read (16x the filter's default request limit); a longer one is
# skipped in bounded reads and counted as unreadable.
MAX_LINE_BYTES: Final = 1 << 20
# Decoded request bytes a Parquet file may hold per byte of its own (gzip's ceiling is ~1032).
MAX_PARQUET_RATIO: Final = 1024
_PARQUET_BATCH: Final = 1024
_MS_EPOCH: Final = 1e11  # a timestamp past this is in milliseconds


class TrainingRefused(ValueError):
    """The trainer refuses its input: the message (one line) names the file and the problem."""


@dataclass(frozen=True, slots=True)
class LogLine:
    """One logged bid request: its bytes, and what the log says besides (if anything)."""

    body: bytes
    ts: float | None = None
    bid: bool | None = None


# A line read but unusable (over MAX_LINE_BYTES, or an envelope whose time or label is not
# a number): an empty body, which no parser reads, so it is counted as unreadable.
UNREADABLE_LINE: Final = LogLine(b"")


@dataclass(frozen=True, slots=True)
class Outcome:
    bid: bool
    ts: float | None = None


# --- reading logs ----------------------------------------------------------------


def read_log(path: str | Path) -> Iterator[LogLine]:
    """The lines of one log file: JSON lines (``.gz`` inflated) or Parquet.

    Raises `TrainingRefused` for a file it cannot read as what its name says.
    """
    path = Path(path)
    if path.suffix == ".parquet":
        yield from _read_parquet(path)
        return
    for line in _raw_lines(path):
        line = line.strip()
        if line:
            yield log_line(line) if len(line) <= MAX_LINE_BYTES else UNREADABLE_LINE


def _raw_lines(path: Path) -> Iterator[bytes]:
    """Each line of a JSON lines file (``.gz`` inflated), read at most `MAX_LINE_BYTES` at a time.

    A longer line comes out as its first ``MAX_LINE_BYTES + 1`` bytes (the rest is read
    and dropped), so a line bomb costs no more memory than a line at the limit.
    """
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as stream:
            readline = stream.readline
            while line := readline(MAX_LINE_BYTES + 1):
                if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                    rest = line
                    while rest and not rest.endswith(b"\n"):
                        rest = readline(MAX_LINE_BYTES)
                yield line
    except EOFError:
        raise TrainingRefused(f"{path}: truncated gzip (it ends before its end marker)") from None
    except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise TrainingRefused(f"{path}: cannot read: {_one_line(exc)}") from None


def log_line(line: bytes) -> LogLine:
    """A log line: an envelope (``request`` with ``ts``/``bid``/``price``), or a bare request.

    An envelope whose ``ts``, ``bid`` or ``price`` is not a number is `UNREADABLE_LINE`.
    """
    if b'"request"' not in line:
        return LogLine(line)
    try:
        envelope = orjson.loads(line)
    except orjson.JSONDecodeError:
        return LogLine(line)  # unreadable: counted later, like any other
    if not isinstance(envelope, dict) or "request" not in envelope or "imp" in envelope:
        return LogLine(line)  # a bid request with a "request" key somewhere
    request = envelope["request"]
    body = request.encode() if isinstance(request, str) else orjson.dumps(request)
    try:
        return LogLine(body, _timestamp(envelope.get("ts")), _label(envelope))
    except ValueError:
        return UNREADABLE_LINE


def read_outcomes(path: str | Path) -> dict[str, Outcome]:
    """Request id -> outcome, from JSON lines ``{"id", "bid" or "price", "ts"?}`` (``.gz`` too).

    Any line that is not such an outcome is refused (`TrainingRefused`, naming the line).
    """
    path = Path(path)
    outcomes: dict[str, Outcome] = {}
    for number, line in enumerate(_raw_lines(path), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        if len(line) > MAX_LINE_BYTES:
            raise TrainingRefused(f"{where}: a line over {MAX_LINE_BYTES:,} bytes")
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TrainingRefused(f"{where}: not JSON: {exc}") from None
        if not isinstance(item, dict) or "id" not in item:
            raise TrainingRefused(f"{where}: an outcome needs an 'id'")
        request_id = item["id"]
        if type(request_id) is not str and type(request_id) is not int:
            raise TrainingRefused(f"{where}: 'id' must be a string or an integer")
        try:
            label = _label(item)
            if label is None:
                raise ValueError("an outcome needs a 'bid' (0 or 1) or a 'price'")
            outcomes[str(request_id)] = Outcome(label, _timestamp(item.get("ts")))
        except ValueError as exc:
            raise TrainingRefused(f"{where}: {exc}") from None
    return outcomes


def _label(item: Mapping[str, Any]) -> bool | None:
    """``bid`` (0, 1, true or false), else ``price`` > 0 (a number), else None."""
    if "bid" in item:
        bid = item["bid"]
        if bid not in (0, 1):  # False == 0 and True == 1
            raise ValueError(f"'bid' must be 0 or 1, got {_shown(bid)}")
        return bool(bid)
    price = item.get("price")
    if price is None:
        return None
    return _number(price, "price") > 0


def _timestamp(value: Any) -> float | None:
    """Unix seconds (milliseconds past `_MS_EPOCH`): a finite number, or None."""
    if value is None:
        return None
    seconds = _number(value, "ts")
    return seconds / 1000 if seconds > _MS_EPOCH else seconds


def _number(value: Any, name: str) -> float:
    if (type(value) is not int and type(value) is not float) or not math.isfinite(value):
        raise ValueError(f"{name!r} must be a finite number, got {_shown(value)}")
    return float(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# --- Parquet --------------------------------------------------------------------------


def _read_parquet(path: Path) -> Iterator[LogLine]:
    try:
        import pyarrow
        import pyarrow.parquet as parquet
    except ImportError:
        raise TrainingRefused(
            f"{path}: reading Parquet needs pyarrow (pip install pyarrow)"
        ) from None
    try:
        size = path.stat().st_size
        log = parquet.ParquetFile(path, read_dictionary=["request"])
        columns = _parquet_columns(path, log.schema_arrow, pyarrow)
        outcome = columns[-1] if columns[-1] in ("bid", "price") else None
        _check_parquet_sizes(path, log.metadata, columns, size)
        decoded = 0
        for batch in log.iter_batches(batch_size=_PARQUET_BATCH, columns=columns):
            requests = batch.column(0)
            if not pyarrow.types.is_dictionary(requests.type):
                requests = requests.dictionary_encode()
            values = requests.dictionary
            ts, labels = (
                batch.column(columns.index(name)).to_pylist() if name in columns else None
                for name in ("ts", outcome)
            )
            for row, index in enumerate(requests.indices.to_pylist()):
                if index is None:
                    yield UNREADABLE_LINE
                    continue
                body = values[index].as_buffer()
                decoded += body.size
                if decoded > MAX_PARQUET_RATIO * size:
                    raise TrainingRefused(
                        f"{path}: its requests decode to more than {MAX_PARQUET_RATIO}x "
                        f"its {size:,} bytes"
                    )
                if body.size > MAX_LINE_BYTES:
                    yield UNREADABLE_LINE
                    continue
                yield _parquet_line(
                    body.to_pybytes(),
                    None if ts is None else ts[row],
                    None if labels is None else labels[row],
                )
    except pyarrow.ArrowException as exc:
        raise TrainingRefused(f"{path}: not a readable Parquet file: {_one_line(exc)}") from None
    except OSError as exc:
        raise TrainingRefused(f"{path}: cannot read: {_one_line(exc)}") from None


def _parquet_columns(path: Path, schema: Any, pyarrow: Any) -> list[str]:
    """The columns read (request, then ts and bid or price if present), their types checked."""
    types = pyarrow.types
    names = schema.names
    if "request" not in names:
        raise TrainingRefused(f"{path}: a Parquet log needs a 'request' column (the raw JSON)")
    numbers = (types.is_integer, types.is_floating, types.is_null)
    kinds: dict[str, tuple[Callable[[Any], bool], ...]] = {
        "request": (types.is_string, types.is_large_string, types.is_binary, types.is_large_binary),
        "ts": numbers,
        "bid": (types.is_boolean, *numbers),
        "price": numbers,
    }
    outcome = next((c for c in ("bid", "price") if c in names), None)
    columns = [c for c in ("request", "ts", outcome) if c is not None and c in names]
    for name in columns:
        kind = schema.field(name).type
        value_kind = kind.value_type if types.is_dictionary(kind) else kind
        if not any(test(value_kind) for test in kinds[name]):
            expected = "text (the raw JSON)" if name == "request" else "numbers"
            raise TrainingRefused(f"{path}: column {name!r} must hold {expected}, not {kind}")
    return columns


def _check_parquet_sizes(path: Path, metadata: Any, columns: list[str], size: int) -> None:
    """Refuse, before decoding, a file that claims more rows than bytes or pages past the ratio."""
    rows = metadata.num_rows
    if rows > size:
        raise TrainingRefused(f"{path}: {rows:,} rows in {size:,} bytes (more rows than bytes)")
    pages = 0
    for group in range(metadata.num_row_groups):
        chunks = metadata.row_group(group)
        for index in range(chunks.num_columns):
            chunk = chunks.column(index)
            if chunk.path_in_schema in columns:
                pages += chunk.total_uncompressed_size
    if pages > MAX_PARQUET_RATIO * size:
        raise TrainingRefused(
            f"{path}: its pages inflate to {pages:,} bytes, more than {MAX_PARQUET_RATIO}x "
            f"its {size:,} bytes"
        )


def _parquet_line(body: bytes, ts: Any, label: Any) -> LogLine:
    if ts is not None and not math.isfinite(ts):
        return UNREADABLE_LINE
    if label is not None:
        if not math.isfinite(label):
            return UNREADABLE_LINE
        label = label > 0
    return LogLine(body, _timestamp(ts), label)
