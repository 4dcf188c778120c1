"""Structured logs: one JSON object per line.

Fields passed with ``extra=`` become top-level keys. Any key that looks
like a credential is replaced, so even a careless ``extra={"authorization":
...}`` cannot leak a header or a secret into the logs.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, TextIO

import orjson

__all__ = ["JsonFormatter", "configure_logging"]

_SECRET_KEY = re.compile(r"(?i)authori[sz]ation|secret|token|password|credential|signature")
# Attributes every LogRecord has; anything else came in through ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = "<redacted>" if _SECRET_KEY.search(key) else value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """JSON lines on stderr for the ``gateway`` loggers (the sidecar command only)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("gateway")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
