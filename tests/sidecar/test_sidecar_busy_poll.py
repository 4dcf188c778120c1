"""``busy_poll_us``: after a request the sidecar's loop polls instead of sleeping, for a while."""

from __future__ import annotations

import asyncio
import resource

import httpx
import pytest

from gateway import Gateway
from gateway.errors import ConfigError
from gateway.sidecar import Sidecar, SidecarConfig
from gateway.sidecar._app import BusyPoll


def test_busy_poll_is_off_by_default_and_bounded() -> None:
    assert SidecarConfig().busy_poll_us == 0
    assert SidecarConfig.from_mapping({"busy_poll_us": 200}).busy_poll_us == 200
    for bad in (-1, 1_000_001):
        with pytest.raises(ConfigError, match="busy_poll_us"):
            SidecarConfig.from_mapping({"busy_poll_us": bad})


# Short waits in a quiet period; a loop that sleeps blocks once for each.
_WAITS = 20
# A polling loop blocks only when it hands the GIL to another thread of the process
# (a test runner's I/O thread, say), a few times at most: far from once per wait.
_POLLING_MAX_SLEEPS = _WAITS // 4


async def _sleeps_during_quiet() -> int:
    """How often this thread slept in the kernel over 0.2 s of quiet, in ``_WAITS`` waits.

    A loop with nothing to do sleeps in epoll_wait once per wait (a voluntary
    context switch each); a polling loop does not. Counted per thread, so
    the figure does not depend on how busy the machine is, unlike CPU shares.
    """
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    for _ in range(_WAITS):
        await asyncio.sleep(0.01)
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before


async def _sleeps_after_a_request(gateway: Gateway, busy_poll_us: int) -> tuple[int, bool]:
    """The loop's sleeps in the quiet after one invocation, and whether it still polled after."""
    config = SidecarConfig(busy_poll_us=busy_poll_us)
    async with (
        Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url) as http,
    ):
        response = await http.post("/endpoints/echo/invocations", content=b"x")
        assert response.status_code == 200
        sleeps = await _sleeps_during_quiet()
        busy_poll = sidecar.app.busy_poll
        return sleeps, busy_poll is not None and busy_poll.spinning


async def test_the_loop_polls_through_the_window_then_sleeps(gateway: Gateway) -> None:
    # Off: the loop sleeps while nothing happens.
    idle_sleeps, _ = await _sleeps_after_a_request(gateway, 0)
    assert idle_sleeps >= _WAITS // 2
    # A window longer than the quiet period: the loop never slept.
    polling_sleeps, still_polling = await _sleeps_after_a_request(gateway, 1_000_000)
    assert polling_sleeps <= _POLLING_MAX_SLEEPS and still_polling
    # A window shorter than the quiet period: polling stopped once it ended.
    _, still_polling = await _sleeps_after_a_request(gateway, 20_000)
    assert not still_polling


async def test_answers_are_the_same_with_busy_polling(gateway: Gateway) -> None:
    config = SidecarConfig(busy_poll_us=50_000)
    async with (
        Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar,
        httpx.AsyncClient(base_url=sidecar.url) as http,
    ):
        answers = await asyncio.gather(
            *(http.post("/endpoints/echo/invocations", content=b"%d" % n) for n in range(20))
        )
    assert [answer.content for answer in answers] == [b"%d" % n for n in range(20)]


def test_polling_starts_again_on_a_new_event_loop() -> None:
    """A sidecar's loop closed mid-window leaves no chain behind that blocks the next loop's."""
    busy_poll = BusyPoll(window_s=1.0)

    async def sleeps_after_touch() -> int:
        busy_poll.touch()
        return await _sleeps_during_quiet()

    assert asyncio.run(sleeps_after_touch()) <= _POLLING_MAX_SLEEPS
    # The first loop closed while polling; the second polls too.
    assert asyncio.run(sleeps_after_touch()) <= _POLLING_MAX_SLEEPS
