"""Reading the project's sources as syntax trees, for tests that check code without running it."""

from __future__ import annotations

import ast
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["parse_file"]

_PARSER = ThreadPoolExecutor(1, thread_name_prefix="ast-parse")


def parse_file(path: Path) -> ast.Module:
    """``ast.parse`` of ``path``, in a thread of its own.

    CPython 3.11 can leave a thread's C recursion count off after a RecursionError
    raised inside a C extension (the RTB tests decode requests nested thousands
    deep); ``ast.parse`` in that thread then fails with "AST constructor recursion
    depth mismatch". A thread that runs nothing else keeps a clean count.
    """
    return _PARSER.submit(ast.parse, path.read_text(), str(path)).result()
