"""MkDocs hook: fills the generated reference into the pages at build time.

A page asks for a generated part with an HTML comment on a line of its own:

- ``<!-- reference: config FILE TABLE -->``: the keys of one table of a config file
  (FILE ``gateway`` or ``emulator``; TABLE ``top`` or the table's key, e.g. ``routes.NAME``);
- ``<!-- reference: operations -->``: every operation and its members;
- ``<!-- reference: metrics SOURCE -->``: metric families (``gateway``, ``sidecar``,
  ``rtb``, ``standard``);
- ``<!-- reference: cli -->``: every command's flags.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

import reference  # noqa: E402

MARKER = re.compile(r"^<!-- reference: (?P<kind>\w+)(?P<args>(?: [\w.\-]+)*) -->$", re.MULTILINE)


def expand(markdown: str) -> str:
    """``markdown`` with every reference marker replaced by what it asks for."""
    return MARKER.sub(lambda match: render(match["kind"], match["args"].split()), markdown)


def render(kind: str, args: list[str]) -> str:
    if kind == "config":
        file, table = args
        return reference.config_table(file, "" if table == "top" else table)
    if kind == "operations":
        return reference.operations_markdown()
    if kind == "metrics":
        return reference.metrics_markdown(args[0])
    if kind == "cli":
        return reference.cli_markdown()
    raise ValueError(f"unknown reference marker: {kind} {' '.join(args)}")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return expand(markdown)
