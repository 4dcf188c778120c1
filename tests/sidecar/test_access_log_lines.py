"""The access log writes, for the JSON stream set-up, exactly the line ``logging`` would.

``AccessLog.write`` skips the LogRecord when every handler its record would
reach is a plain ``StreamHandler`` with a ``JsonFormatter``; any other set-up
goes through ``logging`` itself. Both must give the same line.
"""

from __future__ import annotations

import datetime
import io
import logging

import orjson
import pytest

from gateway.sidecar._logging import AccessLog, JsonFormatter, _json_stream_handlers

_CALLS = [
    ("POST", "/endpoints/m/invocations", "m", 200, None, 0.0001234567, 35, 24, None),
    ("POST", "/endpoints/a%07b/invocations", "a\x07b", 400, "ValidationError", 0.5, 2, 80, "ab"),
    ("GET", "/ping", None, 200, None, 1e-7, 0, None, "0af7651916cd43dd8448eb211c80319c"),
    ("POST", "/x" + "\x1b" * 600, None, 404, "UnknownOperationException", 2.0, 0, 61, None),
]


@pytest.fixture
def loggers() -> tuple[logging.Logger, logging.Logger]:
    """A logger the direct path serves, and one whose handler has a filter (logging's path)."""
    # Loggers of their own, outside logging's tree (no parent, nobody else's handlers).
    direct, filtered = logging.Logger("test.access.direct"), logging.Logger("test.access.f")
    for logger in (direct, filtered):
        handler = logging.StreamHandler(io.StringIO())
        handler.setFormatter(JsonFormatter())
        logger.addHandler(handler)
        logger.propagate = False
    filtered.handlers[0].addFilter(lambda record: True)
    return direct, filtered


def _lines(logger: logging.Logger) -> list[dict[str, object]]:
    stream = logger.handlers[0].stream  # type: ignore[attr-defined]
    text = stream.getvalue()
    assert text.endswith("\n")
    return [orjson.loads(line) for line in text.splitlines()]


def test_the_direct_line_is_the_line_logging_writes(
    loggers: tuple[logging.Logger, logging.Logger],
) -> None:
    direct, filtered = loggers
    assert _json_stream_handlers(direct) == direct.handlers
    assert _json_stream_handlers(filtered) is None
    for logger in loggers:
        access = AccessLog(logger=logger)
        for call in _CALLS:
            access.write(*call)
    fast, slow = _lines(direct), _lines(filtered)
    assert len(fast) == len(slow) == len(_CALLS)
    for one, other in zip(fast, slow, strict=True):
        assert list(one) == list(other)  # the same fields, in the same order
        # Both RFC 3339 in UTC, a moment apart.
        first, second = (
            datetime.datetime.fromisoformat(str(line.pop("ts")).replace("Z", "+00:00"))
            for line in (one, other)
        )
        assert abs((first - second).total_seconds()) < 5
        assert one == {**other, "logger": direct.name}


@pytest.mark.parametrize(
    "set_up",
    [
        pytest.param(lambda h: h.setFormatter(logging.Formatter()), id="another-formatter"),
        pytest.param(lambda h: h.setLevel(logging.WARNING), id="handler-above-info"),
        pytest.param(lambda h: h.addFilter(lambda record: True), id="handler-filter"),
    ],
)
def test_any_other_handler_set_up_goes_through_logging(
    loggers: tuple[logging.Logger, logging.Logger], set_up: object
) -> None:
    direct, _ = loggers
    set_up(direct.handlers[0])  # type: ignore[operator]
    assert _json_stream_handlers(direct) is None


def test_a_filtered_disabled_or_quiet_logger_goes_through_logging(
    loggers: tuple[logging.Logger, logging.Logger],
) -> None:
    direct, _ = loggers
    direct.setLevel(logging.WARNING)
    assert _json_stream_handlers(direct) is None
    direct.setLevel(logging.NOTSET)
    direct.addFilter(lambda record: True)
    assert _json_stream_handlers(direct) is None
    direct.filters.clear()
    direct.handlers.clear()  # no handler anywhere up the chain: logging's last resort
    assert _json_stream_handlers(direct) is None
