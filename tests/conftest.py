"""Fixtures shared by every test package."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway._build import build_kind, stale_modules


def pytest_report_header() -> str:
    return f"sagemaker-gateway hot path: {build_kind()}"


def pytest_sessionstart(session: pytest.Session) -> None:
    # An editable install's compiled modules shadow their sources: testing
    # them after an edit would test the old code.
    stale = stale_modules()
    if stale:
        pytest.exit(
            f"compiled modules older than their sources: {', '.join(stale)}; "
            "run `pip install -e '.[dev]'` again (or install with SAGEMAKER_GATEWAY_PURE=1)",
            returncode=3,
        )


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
