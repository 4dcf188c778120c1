"""CredentialSource: background refresh, advisory and mandatory windows, failures, rotation."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from gateway import Gateway, errors
from gateway._aws.sigv4 import Credentials
from gateway._config.options import GatewayConfig
from gateway._invoke.credentials import CredentialSource
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
            gateway._context.credentials = source  # before the first call binds the signer
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
            gateway._context.credentials = source
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


# -- windows that scale with the credentials' lifetime ---------------------------


async def test_five_minute_credentials_never_make_a_call_wait(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    fetcher = Fetcher(clock, ttl=300)
    source = sources(fetcher, clock)  # default windows
    await source.start()
    assert source.windows == (150.0, 75.0)  # half and a quarter of 5 minutes
    assert source.must_wait() is False  # fixed 10-minute windows said True here

    clock.now += 160  # 140 s left: the background refresh starts ...
    fetcher.gate = threading.Event()
    assert source.must_wait() is False
    await wait_for(lambda: fetcher.calls == 2)
    # ... and while it is stuck in its thread, calls sign with what they have.
    assert (await asyncio.wait_for(source.fresh(), 1.0)).access_key == "AKID1"
    fetcher.gate.set()
    await wait_for(lambda: source.current().access_key == "AKID2")
    assert source.must_wait() is False and source.windows == (150.0, 75.0)


async def test_long_lived_credentials_keep_botocores_windows(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    source = sources(Fetcher(clock, ttl=3600), clock)
    await source.start()
    assert source.windows == (900.0, 600.0)


async def test_windows_given_explicitly_are_used_as_given(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    fetcher = Fetcher(clock, ttl=300)
    source = sources(fetcher, clock, advisory_s=60.0, mandatory_s=20.0)
    await source.start()
    assert source.windows == (60.0, 20.0)
    clock.now += 200  # 100 s left: outside a 60 s advisory window
    assert source.must_wait() is False
    await asyncio.sleep(0.05)
    assert fetcher.calls == 1


async def test_the_same_credentials_again_do_not_shrink_the_windows(
    sources: Callable[..., CredentialSource],
) -> None:
    clock = Clock()
    expiry = clock.now + 300

    def same() -> Credentials:
        return Credentials("AKIDSAME", "secret", None, expiry)

    source = sources(same, clock)
    await source.start()
    clock.now += 200  # a refresh hands back the same credentials, 100 s left
    await source.fresh()
    await wait_for(lambda: source.refreshes == 2)
    assert source.windows == (150.0, 75.0)


def test_credential_windows_are_config_keys() -> None:
    config = GatewayConfig.from_mapping(
        {"credential_refresh_advisory_s": 120, "credential_refresh_mandatory_s": 30}
    )
    assert (config.credential_refresh_advisory_s, config.credential_refresh_mandatory_s) == (
        120.0,
        30.0,
    )
    with pytest.raises(errors.ConfigError, match="credential_refresh_mandatory_s: must not"):
        GatewayConfig.from_mapping(
            {"credential_refresh_advisory_s": 10, "credential_refresh_mandatory_s": 30}
        )
    with pytest.raises(errors.ConfigError, match="credential_refresh_advisory_s: must be a"):
        GatewayConfig.from_mapping({"credential_refresh_advisory_s": "soon"})


_CREDENTIAL_PROCESS = """\
import datetime, json, pathlib, sys
runs = pathlib.Path(sys.argv[1])
runs.write_text(str(int(runs.read_text() or 0) + 1) if runs.exists() else "1")
expiry = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=5)
print(json.dumps({{"Version": 1, "AccessKeyId": "{access}", "SecretAccessKey": "{secret}",
                  "Expiration": expiry.isoformat()}}))
"""


async def test_a_gateway_on_five_minute_role_credentials_does_not_refresh_per_call(
    emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # botocore's provider chain, through a credential_process handing out
    # 5-minute credentials: the kind an assumed role with a short session gives.
    script = tmp_path / "issue.py"
    script.write_text(_CREDENTIAL_PROCESS.format(access=ACCESS_KEY, secret=SECRET_KEY))
    runs = tmp_path / "runs"
    config = tmp_path / "config"
    config.write_text(f"[default]\ncredential_process = {sys.executable} {script} {runs}\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))

    async with Gateway("us-east-1", endpoint_url=emulator.url) as gateway:
        issued_at_start = int(runs.read_text())
        for _ in range(20):
            assert (await gateway.invoke("echo", b"abc", timeout=5)).body == b"abc"
        # No call went back to the provider: none waited for a refresh.
        assert int(runs.read_text()) == issued_at_start


# -- a container-credentials endpoint that hangs ------------------------------


class HangingContainerEndpoint:
    """A real HTTP server standing in for the container-credentials endpoint.

    The first request gets credentials (``ttl`` seconds from now); every later
    one is held open, unanswered, until :meth:`release`.
    """

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.requests = 0
        self.released = asyncio.Event()
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/creds"

    async def __aenter__(self) -> HangingContainerEndpoint:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    def release(self) -> None:
        self.released.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        self.requests += 1
        if self.requests > 1:
            await self.released.wait()  # hangs, as a broken endpoint does
            writer.close()
            return
        expiry = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + self.ttl))
        body = (
            f'{{"AccessKeyId": "{ACCESS_KEY}", "SecretAccessKey": "{SECRET_KEY}", '
            f'"Token": "token", "Expiration": "{expiry}"}}'
        ).encode()
        head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()
        writer.close()


def container_fetcher(url: str) -> Callable[[], Credentials]:
    """botocore's own container provider, through the gateway's fetcher."""
    from types import SimpleNamespace

    from botocore.credentials import ContainerProvider

    from gateway._invoke.credentials import botocore_fetcher

    def credentials() -> object:
        return ContainerProvider({"AWS_CONTAINER_CREDENTIALS_FULL_URI": url}).load()

    return botocore_fetcher(SimpleNamespace(get_credentials=credentials))


async def test_a_hanging_credentials_endpoint_never_holds_a_call_past_its_deadline(
    emulator: Emulator,
) -> None:
    # Credentials for 20 minutes, windows wider than that: every call is in the
    # mandatory window, and the refresh it starts hangs on the endpoint.
    async with HangingContainerEndpoint(ttl=20 * 60) as endpoint:
        source = CredentialSource(
            container_fetcher(endpoint.url), advisory_s=30 * 60, mandatory_s=25 * 60
        )
        await source.start()
        try:
            async with gateway_for(emulator.url) as gateway:
                gateway._context.credentials = source
                for _ in range(3):
                    # botocore gives up on a hanging endpoint after seconds; the
                    # call's own 1 s deadline is what bounds its wait.
                    result = await asyncio.wait_for(gateway.invoke("echo", b"x", timeout=1.0), 2.5)
                    assert result.body == b"x"
                # The refresh the first call started reaches the endpoint (in its
                # thread) and hangs there; later calls start no other.
                await wait_for(lambda: endpoint.requests == 2)
                result = await asyncio.wait_for(gateway.invoke("echo", b"y", timeout=1.0), 2.5)
                assert result.body == b"y" and endpoint.requests == 2
                assert source.usable()
        finally:
            await source.aclose()


async def test_expired_credentials_and_a_hanging_refresh_fail_by_the_deadline() -> None:
    async with HangingContainerEndpoint(ttl=20 * 60) as endpoint:
        clock = Clock(time.time())
        source = CredentialSource(container_fetcher(endpoint.url), retry_s=1, clock=clock)
        await source.start()
        try:
            clock.now += 21 * 60  # past expiry; the refresh this starts hangs
            assert not source.usable()
            with pytest.raises(errors.SignatureError) as caught:
                await asyncio.wait_for(source.fresh(time.monotonic() + 0.2), 2.0)
            assert caught.value.code == "ExpiredTokenException"
            await wait_for(lambda: endpoint.requests == 2)  # the refresh, hanging
        finally:
            await source.aclose()
