"""Fixtures shared by every test package."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from gateway._aws.sigv4 import NATIVE_SIGNING
from gateway._host.build import build_kind, missing_helpers, stale_modules
from gateway._invoke.api import NATIVE_FIELD_LINES
from tests._redis_procs import RedisServer, shared_redis_available

# Generated inputs are checked for what they find, not for how fast this machine makes
# them: under a loaded CI run, the time a strategy takes says nothing about the code.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Two workers per core for `-n auto`: most tests wait on sockets and child processes."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if chosen:
        return int(chosen)
    return 2 * (os.cpu_count() or 1)


# The xdist groups on the suite's critical path: the wheel's build (tests/deploy/conftest.py)
# is one long serial chain, mypyc and a C compiler, scheduled first as the biggest group.
# Every other worker lowers its own priority when it starts a test outside these groups,
# so the chain gets a whole core and ends with the rest instead of minutes after it.
CRITICAL_PATH_GROUPS = frozenset({"built-wheel"})
YIELDING_NICENESS = 5
_yielded_to_the_critical_path = False


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    global _yielded_to_the_critical_path
    if _yielded_to_the_critical_path or "PYTEST_XDIST_WORKER" not in os.environ:
        return
    group = item.get_closest_marker("xdist_group")
    if group is not None and group.args and group.args[0] in CRITICAL_PATH_GROUPS:
        return
    os.nice(YIELDING_NICENESS)  # once: a process may raise its niceness, not lower it
    _yielded_to_the_critical_path = True


def pytest_report_header() -> str:
    return f"sagemaker-gateway hot path: {build_kind()}"


def pytest_sessionstart(session: pytest.Session) -> None:
    # CI names the build it means to test, so a failed compile cannot pass as one.
    expected = os.environ.get("SAGEMAKER_GATEWAY_EXPECT_BUILD")
    if expected and build_kind() != expected:
        pytest.exit(f"expected the {expected} build, found {build_kind()}", returncode=3)
    missing = missing_helpers()
    if expected == "compiled" and (missing or not (NATIVE_SIGNING and NATIVE_FIELD_LINES)):
        # The compiled build carries the C helpers too (setup.py builds them all).
        pytest.exit(f"expected the compiled build's C helpers, missing: {missing}", returncode=3)
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


@pytest.fixture(scope="session")
def shared_redis_url() -> Iterator[str]:
    """The machine's Redis on 6379 when it is up (read/write only, never killed), else our own.

    So the suite runs where no Redis does: it starts ``redis-server`` from PATH once per
    session (per xdist worker). Tests that kill or slow Redis start private servers instead.
    """
    if shared_redis_available():
        yield "redis://127.0.0.1:6379/0"
        return
    with RedisServer.running() as server:
        yield server.url


@pytest.fixture
def redis_url(shared_redis_url: str) -> str:
    return shared_redis_url
