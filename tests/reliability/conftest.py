"""Shared pieces of the reliability tests: leak counting, hang checks, environments."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from gateway import errors
from tests.gateway.conftest import client_tasks

T = TypeVar("T")

# A call that has not finished this long after its own deadline is hung.
HANG_SLACK_S = 2.0


@pytest.fixture(autouse=True)
def _clean_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may pick up the machine's AWS configuration by accident."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def socket_fds() -> int:
    """Open sockets of this process, counted from /proc/self/fd (no psutil)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                count += 1
        except OSError:  # closed between listdir and readlink
            continue
    return count


class Hung(AssertionError):
    """A call outlived its deadline by more than HANG_SLACK_S."""


async def bounded(call: Awaitable[T], timeout: float, slack: float = HANG_SLACK_S) -> T:
    """Await ``call``; raise Hung if it is not done by ``timeout + slack``."""
    try:
        async with asyncio.timeout(timeout + slack):
            return await call
    except TimeoutError as exc:
        # The gateway's own timeouts are gateway.errors types, never the builtin.
        if isinstance(exc, errors.GatewayError):  # pragma: no cover - defensive
            raise
        raise Hung(f"call still running {slack} s after its {timeout} s deadline") from None


async def eventually(predicate: Callable[[], bool], what: str, limit_s: float = 5.0) -> None:
    """Poll until ``predicate()`` holds for five checks in a row, or fail naming ``what``."""
    stable = 0
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            stable += 1
            if stable == 5:
                return
        else:
            stable = 0
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached within {limit_s} s: {what}")


async def no_client_tasks() -> None:
    await eventually(lambda: not client_tasks(), "no client task left running")
    assert client_tasks() == []


def open_connections(transport: Any) -> int:
    count: int = transport.open_connections()
    return count


async def sockets_back_to(baseline: int) -> None:
    """No socket leaked: the count returns to ``baseline`` (servers close their ends too)."""
    await eventually(lambda: socket_fds() <= baseline, f"open sockets back to {baseline}")
