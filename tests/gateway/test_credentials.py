"""CredentialSource: background refresh, advisory and mandatory windows, failures, rotation."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable

import pytest

from gateway import Gateway, errors
from gateway._credentials import CredentialSource
from gateway._signing import Credentials
from gateway.emulator import Emulator
from tests.gateway.conftest import (
    ACCESS_KEY,
    ROTATED_ACCESS_KEY,
    ROTATED_SECRET_KEY,
    SECRET_KEY,
    gateway_for,
)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Fetcher:
    """Hands out numbered credentials expiring ``ttl`` after the clock; can block or fail."""

    def __init__(self, clock: Clock, ttl: float) -> None:
        self.clock = clock
        self.ttl = ttl
        self.calls = 0
        self.fail = False
        self.gate: threading.Event | None = None

    def __call__(self) -> Credentials:
        self.calls += 1
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.fail:
            raise RuntimeError("provider down")
        return Credentials(
            f"AKID{self.calls}", f"secret{self.calls}", None, self.clock() + self.ttl
        )


@pytest.fixture
async def sources() -> AsyncIterator[Callable[..., CredentialSource]]:
    made: list[CredentialSource] = []

    def make(fetch: Callable[[], Credentials], clock: Clock, **windows: float) -> CredentialSource:
        source = CredentialSource(fetch, clock=clock, **windows)
        made.append(source)
        return source

    yield make
    for source in made:
        await source.aclose()


async def wait_for(predicate: Callable[[], bool]) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


WINDOWS = {"advisory_s": 50.0, "mandatory_s": 10.0, "retry_s": 5.0}


async def test_advisory_window_refreshes_in_the_background(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    fetcher = Fetcher(clock, ttl=100)
    source = sources(fetcher, clock, **WINDOWS)
    await source.start()
    assert source.current().access_key == "AKID1"
    clock.now += 60  # 40 s left: advisory, not mandatory
    fetcher.gate = threading.Event()
    assert source.must_wait() is False  # starts the refresh, does not wait for it
    await wait_for(lambda: fetcher.calls == 2)
    # the refresh is blocked in its thread; calls keep signing with the old keys
    for _ in range(3):
        assert source.must_wait() is False
        assert (await source.fresh()).access_key == "AKID1"
    assert fetcher.calls == 2  # one refresh at a time
    fetcher.gate.set()
    await wait_for(lambda: source.current().access_key == "AKID2")
    assert source.refreshes == 2


async def test_mandatory_window_waits_for_the_refresh(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    fetcher = Fetcher(clock, ttl=100)
    source = sources(fetcher, clock, **WINDOWS)
    await source.start()
    clock.now += 95  # 5 s left: inside the mandatory window
    fetcher.gate = threading.Event()
    assert source.must_wait() is True
    waiting = asyncio.create_task(source.fresh())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    fetcher.gate.set()
    assert (await waiting).access_key == "AKID2"
    assert source.must_wait() is False


async def test_failing_refresh_serves_old_credentials_and_retries_later(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    fetcher = Fetcher(clock, ttl=100)
    source = sources(fetcher, clock, **WINDOWS)
    await source.start()
    fetcher.fail = True
    clock.now += 60
    assert source.must_wait() is False
    await wait_for(lambda: source.refresh_failures == 1)
    assert source.current().access_key == "AKID1"
    # no new attempt before retry_s, however many calls ask
    for _ in range(20):
        assert source.must_wait() is False
    await asyncio.sleep(0.05)
    assert fetcher.calls == 2
    # in the mandatory window: one attempt (retry_s has passed), it fails, old keys serve
    clock.now += 32  # 8 s left
    assert (await source.fresh()).access_key == "AKID1"
    assert fetcher.calls == 3 and source.refresh_failures == 2
    clock.now += 1  # within retry_s of that failure: no fetch per call
    for _ in range(5):
        assert (await source.fresh()).access_key == "AKID1"
    assert fetcher.calls == 3
    clock.now += 5  # 2 s left, retry_s passed
    fetcher.fail = False
    assert (await source.fresh()).access_key == "AKID4"
    assert source.must_wait() is False


async def test_expired_and_failing_is_a_signature_error(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    fetcher = Fetcher(clock, ttl=100)
    source = sources(fetcher, clock, **WINDOWS)
    await source.start()
    fetcher.fail = True
    clock.now += 101
    with pytest.raises(errors.SignatureError) as caught:
        await source.fresh()
    assert caught.value.code == "ExpiredTokenException"
    # and again without a fetch per call while retry_s has not passed
    with pytest.raises(errors.SignatureError):
        await source.fresh()
    assert fetcher.calls == 2


async def test_failing_first_load_is_a_config_error(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    fetcher = Fetcher(clock, ttl=100)
    fetcher.fail = True
    source = sources(fetcher, clock, **WINDOWS)
    with pytest.raises(errors.ConfigError):
        await source.start()


async def test_no_timer_or_task_left_after_close(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    fetcher = Fetcher(clock, ttl=100)
    source = sources(fetcher, clock, **WINDOWS)
    await source.start()
    clock.now += 60
    fetcher.gate = threading.Event()
    source.must_wait()
    await wait_for(lambda: fetcher.calls == 2)
    await source.aclose()
    fetcher.gate.set()
    await asyncio.sleep(0.05)
    assert source._timer is None
    assert source._refresh is None or source._refresh.done()


def rotating_fetcher(clock: Callable[[], float], ttl: float) -> Callable[[], Credentials]:
    keys = [(ACCESS_KEY, SECRET_KEY), (ROTATED_ACCESS_KEY, ROTATED_SECRET_KEY)]
    state = {"n": 0}

    def fetch() -> Credentials:
        access, secret = keys[state["n"] % 2]
        state["n"] += 1
        return Credentials(access, secret, f"token-{state['n']}", clock() + ttl)

    return fetch


@pytest.mark.parametrize("kind", ["native", "httpx"])
async def test_calls_never_fail_while_credentials_rotate(kind: str, emulator: Emulator) -> None:
    # Real time, small windows: each set lives 1.2 s, refreshed 0.9 s before expiry.
    source = CredentialSource(
        rotating_fetcher(time.time, 1.2), advisory_s=0.9, mandatory_s=0.3, retry_s=0.05
    )
    await source.start()
    try:
        async with gateway_for(emulator.url, transport=kind) as gateway:
            gateway._credentials = source  # before the first call binds the signer
            used = set()
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                result = await gateway.invoke("echo", b"rotate", timeout=5)
                assert result.body == b"rotate"
                used.add(source.current().access_key)
                await asyncio.sleep(0.01)
            assert source.refreshes >= 3 and source.refresh_failures == 0
            assert used == {ACCESS_KEY, ROTATED_ACCESS_KEY}
    finally:
        await source.aclose()


async def _mandatory_case(emulator: Emulator, call: Callable[[Gateway], object]) -> None:
    """Old keys unknown to the emulator, inside the mandatory window; new ones take 0.2 s."""
    clock = Clock(time.time())
    first = {"done": False}

    def fetch() -> Credentials:
        if not first["done"]:
            first["done"] = True
            return Credentials("AKIDUNKNOWN", "nope", None, clock() + 5)
        time.sleep(0.2)
        return Credentials(ACCESS_KEY, SECRET_KEY, None, clock() + 3600)

    source = CredentialSource(fetch, advisory_s=60, mandatory_s=10, retry_s=1, clock=clock)
    await source.start()
    try:
        async with gateway_for(emulator.url) as gateway:
            gateway._credentials = source
            await call(gateway)  # type: ignore[misc]
    finally:
        await source.aclose()


async def test_stream_waits_in_the_mandatory_window(emulator: Emulator) -> None:
    async def call(gateway: Gateway) -> None:
        parts = [part async for part in gateway.invoke_stream("echo", b"abc")]
        assert b"".join(parts) == b"abc"

    await _mandatory_case(emulator, call)


async def test_invoke_waits_in_the_mandatory_window(emulator: Emulator) -> None:
    async def call(gateway: Gateway) -> None:
        assert (await gateway.invoke("echo", b"abc")).body == b"abc"

    await _mandatory_case(emulator, call)
