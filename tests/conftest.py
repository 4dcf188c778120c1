"""Fixtures shared by every test package."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

from gateway._build import build_kind, stale_modules


def pytest_report_header() -> str:
    return f"sagemaker-gateway hot path: {build_kind()}"


def pytest_sessionstart(session: pytest.Session) -> None:
    # CI names the build it means to test, so a failed compile cannot pass as one.
    expected = os.environ.get("SAGEMAKER_GATEWAY_EXPECT_BUILD")
    if expected and build_kind() != expected:
        pytest.exit(f"expected the {expected} build, found {build_kind()}", returncode=3)
    # An editable install's compiled modules shadow their sources: testing
    # them after an edit would test the old code.
    stale = stale_modules()
    if stale:
        pytest.exit(
            f"compiled modules older than their sources: {', '.join(stale)}; "
            "run `pip install -e '.[dev]'` again (it installs plain Python)",
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
