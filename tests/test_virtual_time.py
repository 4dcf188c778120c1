"""The virtual-time loop the scripted tests run on (tests/_virtual_time.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests._virtual_time import START, Deadlock, VirtualClock, virtual_time


@virtual_time
async def test_timers_fire_in_order_at_their_virtual_times(clock: VirtualClock) -> None:
    fired: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    for name, delay in (("b", 30.0), ("a", 0.25), ("c", 3600.0)):
        loop.call_later(delay, lambda name=name: fired.append((name, clock.now())))
    await clock.advance(3600.0)
    assert fired == [("a", START + 0.25), ("b", START + 30.0), ("c", START + 3600.0)]


@virtual_time
async def test_time_stands_still_while_a_task_can_run(clock: VirtualClock) -> None:
    async def busy() -> int:
        for _ in range(1000):
            await asyncio.sleep(0)
        return 1

    assert await busy() == 1
    assert clock.now() == START


@virtual_time
async def test_idle_returns_once_every_task_waits_without_moving_time(
    clock: VirtualClock,
) -> None:
    steps: list[int] = []

    async def worker() -> None:
        for step in range(5):
            steps.append(step)
            await asyncio.sleep(0)
        await asyncio.sleep(10)  # waits on a timer now
        steps.append(99)

    task = asyncio.ensure_future(worker())
    await clock.idle()
    assert (steps, clock.now()) == ([0, 1, 2, 3, 4], START)
    await clock.advance(10)
    assert steps[-1] == 99
    await task


@virtual_time
async def test_the_code_under_test_reads_the_same_clock(clock: VirtualClock) -> None:
    loop = asyncio.get_running_loop()
    assert time.monotonic() == loop.time() == clock.now()
    async with asyncio.timeout(5):
        await asyncio.sleep(4.5)
    assert time.monotonic() == START + 4.5
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.Event().wait(), 2)
    assert time.monotonic() == START + 6.5


@virtual_time
async def test_a_thread_is_waited_for_in_real_time_at_no_virtual_cost(
    clock: VirtualClock,
) -> None:
    loop = asyncio.get_running_loop()
    loop.call_later(1.0, lambda: None)  # a timer the loop could jump to meanwhile
    assert await asyncio.to_thread(lambda: "from a thread") == "from a thread"
    assert clock.now() == START


def test_a_loop_with_nothing_left_to_wake_it_is_a_deadlock() -> None:
    async def stuck() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(Deadlock):
        VirtualClock().run(stuck())


def test_the_real_clock_is_back_after_the_run() -> None:
    real = time.monotonic

    async def read() -> float:
        return time.monotonic()

    assert VirtualClock(start=5.0).run(read()) == 5.0
    assert time.monotonic is real
