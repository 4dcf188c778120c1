"""The native transport's deadline slots: a slot never expires its requests early."""

from __future__ import annotations

import asyncio
import time

from gateway._http.deadlines import DeadlineWheel


class _Recorder:
    """Stands in for a connection: records which owners timed out, and how."""

    def __init__(self) -> None:
        self.timed_out_owners: list[tuple[object, bool]] = []

    def timed_out(self, owner: object, deadline_bound: bool, read_timeout: float) -> None:
        self.timed_out_owners.append((owner, deadline_bound))


async def test_a_slot_fired_before_its_end_waits_and_fires_again() -> None:
    wheel = DeadlineWheel(asyncio.get_running_loop(), read_timeout=10.0)
    connection = _Recorder()
    owner = object()
    now = time.monotonic()
    slot = wheel.arm(connection, owner, now + 0.05, now)
    (key,) = wheel._slots
    # As if the loop's coarser clock fired the slot's timer early:
    wheel._expire(key)
    assert connection.timed_out_owners == []
    assert wheel._slots[key] is slot
    for _ in range(100):
        if connection.timed_out_owners:
            break
        await asyncio.sleep(0.005)
    assert time.monotonic() >= key / 1000  # not before the slot's end
    assert connection.timed_out_owners == [(owner, True)]
    assert key not in wheel._slots


async def test_finished_requests_leave_their_slot_and_the_read_timeout_bounds_long_deadlines() -> (
    None
):
    wheel = DeadlineWheel(asyncio.get_running_loop(), read_timeout=0.02)
    connection = _Recorder()
    done, waiting = object(), object()
    now = time.monotonic()
    # A 60 s deadline is bounded by the 20 ms read timeout: not deadline-bound.
    slot = wheel.arm(connection, done, now + 60.0, now)
    wheel.arm(connection, waiting, now + 60.0, now)
    slot.pop(done)  # its response came in
    for _ in range(100):
        if connection.timed_out_owners:
            break
        await asyncio.sleep(0.005)
    assert connection.timed_out_owners == [(waiting, False)]
    assert time.monotonic() >= now + 0.02
