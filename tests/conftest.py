"""Fixtures shared by every test package."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture
def restore_gc() -> Iterator[None]:
    """Undo any gc.freeze() / gc.set_threshold() a test (or what it runs) did."""
    thresholds = gc.get_threshold()
    assert gc.get_freeze_count() == 0, "a frozen heap leaked in from elsewhere"
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
