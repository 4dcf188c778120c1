"""Structured logs: one JSON object per line.

Fields passed with ``extra=`` become top-level keys. Any key that looks
like a credential is replaced, so even a careless ``extra={"authorization":
...}`` cannot leak a header or a secret into the logs.
"""

from __future__ import annotations

import datetime
import json
import logging
import random
import re
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import orjson

from gateway._observe.logs import RateLimiter

__all__ = ["AccessLog", "JsonFormatter", "configure_logging", "worker_restarted"]

_SECRET_KEY = re.compile(r"(?i)authori[sz]ation|secret|token|password|credential|signature")
# Attributes every LogRecord has; anything else came in through ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def rfc3339(seconds: float) -> str:
    """An epoch time as RFC 3339 in UTC, to the microsecond: ``2026-11-24T07:39:12.123456Z``."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = "<redacted>" if _SECRET_KEY.search(key) else value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(entry, default=str).decode()
        except orjson.JSONEncodeError:
            # A value orjson cannot write (an integer past 64 bits): the line
            # is still written, with such values as text.
            return json.dumps(entry, default=str)


def configure_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """JSON lines on stderr for the ``gateway`` loggers (the sidecar command only)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("gateway")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


# -- access log ---------------------------------------------------------------------

access_logger = logging.getLogger("gateway.access")

# A path (and the route name decoded from it) is the caller's text,
# unauthenticated: logged at most this long, and with anything but printable
# ASCII written as \xNN (a control character is otherwise a 6-character JSON
# escape, or, decoded, text a log viewer interprets).
MAX_LOGGED_CHARS = 512
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def _escape(match: re.Match[str]) -> str:
    return f"\\x{ord(match.group()):02x}"


def loggable(text: str) -> str:
    """A caller's ``text`` for a log line: printable ASCII, at most MAX_LOGGED_CHARS of it."""
    if len(text) <= MAX_LOGGED_CHARS and text.isascii() and text.isprintable():
        return text  # the usual case, unchanged
    shown = _UNPRINTABLE.sub(_escape, text[:MAX_LOGGED_CHARS])
    if len(text) > MAX_LOGGED_CHARS:
        shown += f"...({len(text)} characters)"
    return shown


class AccessLog:
    """One JSON line per request (logger ``gateway.access``), a sampled share of them.

    Fields (besides the formatter's ``ts``, RFC 3339): method, path, route,
    status, error_code, duration_s, bytes_in, bytes_out, client (the peer's
    ``host:port``), request_id (the answer's ``x-amzn-RequestId``), trace_id.
    Names and numbers only: never a header value but the request id, so never
    an ``Authorization`` or a secret.
    """

    def __init__(
        self,
        sample: float = 1.0,
        logger: logging.Logger | None = None,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._sample = sample
        self._logger = logger or access_logger
        self._random = rng
        if self._logger.level == logging.NOTSET or self._logger.level > logging.INFO:
            # Enabled explicitly: not hidden by a --log-level of WARNING.
            self._logger.setLevel(logging.INFO)

    def sampled(self) -> bool:
        return self._sample >= 1.0 or self._random() < self._sample

    def write(
        self,
        method: str,
        path: str,
        route: str | None,
        status: int,
        error_code: str | None,
        duration_s: float,
        bytes_in: int,
        bytes_out: int | None,
        trace_id: str | None,
        client: str | None = None,
        request_id: str | None = None,
    ) -> None:
        fields = {
            "method": method,
            "path": loggable(path),
            "route": None if route is None else loggable(route),
            "status": status,
            "error_code": error_code,
            "duration_s": round(duration_s, 6),
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "client": client,
            "request_id": None if request_id is None else loggable(request_id),
            "trace_id": trace_id,
        }
        handlers = _json_stream_handlers(self._logger)
        if handlers is None:
            self._logger.info("request", extra=fields)
            return
        # The line JsonFormatter would write for this record, without the record:
        # building a LogRecord (it looks up its caller's frame) and the formatter's
        # pass over its attributes cost about as much as relaying the request
        # (docs/explanation/sidecar-cost.md).
        entry: dict[str, Any] = {
            "ts": rfc3339(time.time()),
            "level": logging.getLevelName(logging.INFO),
            "logger": self._logger.name,
            "message": "request",
        }
        entry.update(fields)
        try:
            line = orjson.dumps(entry, default=str).decode()
        except orjson.JSONEncodeError:  # a caller's text orjson refuses: the usual path
            self._logger.info("request", extra=fields)
            return
        for handler in handlers:
            handler.acquire()
            try:
                handler.stream.write(line + handler.terminator)
                handler.flush()
            except Exception:
                handler.handleError(
                    self._logger.makeRecord(
                        self._logger.name, logging.INFO, "", 0, "request", (), None, extra=fields
                    )
                )
            finally:
                handler.release()


def _json_stream_handlers(logger: logging.Logger) -> list[logging.StreamHandler[Any]] | None:
    """The handlers an INFO record of ``logger`` reaches, when each of them is a plain
    ``StreamHandler`` writing ``JsonFormatter`` lines (as ``configure_logging`` sets
    up), so that writing its line to their streams is all that logging would do.
    None for any other set-up (a filter, another handler or formatter, no handler):
    then the record goes through ``logging`` itself.
    """
    if logger.disabled or logger.filters or not logger.isEnabledFor(logging.INFO):
        return None
    found: list[logging.StreamHandler[Any]] = []
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if (
                type(handler) is not logging.StreamHandler
                or type(handler.formatter) is not JsonFormatter
                or handler.filters
                or handler.level > logging.INFO
            ):
                return None
            found.append(handler)
        current = current.parent if current.propagate else None
    return found or None


# -- worker restarts --------------------------------------------------------------

_workers = RateLimiter()
worker_logger = logging.getLogger("gateway.state")


def worker_restarted(
    worker: int,
    pid: int | None,
    exit_code: int | None,
    reason: str = "exited",
    restart_in_s: float | None = None,
) -> None:
    """The supervisor's WARNING line when it restarts a worker (rate-limited per worker).

    ``worker`` is the slot number, ``pid`` the process that ended,
    ``exit_code`` its status (negative: killed by that signal).
    """
    suppressed = _workers.allow(worker)
    if suppressed is None:
        return
    fields: dict[str, Any] = {
        "event": "worker_restarted",
        "worker": worker,
        "pid": pid,
        "exit_code": exit_code,
        "reason": reason,
    }
    if restart_in_s is not None:
        fields["restart_in_s"] = restart_in_s
    if suppressed:
        fields["suppressed"] = suppressed
    worker_logger.warning("worker restarted", extra=fields)
