# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The timeouts of the requests in flight, grouped into slots of a millisecond.

Each origin's pool (``pool.py``) keeps a :class:`DeadlineWheel`; the transport
arms it for every request, and a connection (``connection.py``) takes its
entry out of the slot when the request ends.
"""

from __future__ import annotations

import asyncio
from time import monotonic
from typing import Final, Protocol

__all__ = ["DeadlineWheel", "Slot"]

# Deadlines of requests and of whole response streams are grouped into slots
# of this many seconds; uvloop's own timers have a 1 ms resolution, so a
# request times out no later than it would with a timer of its own.
_SLOT_S = 0.001
_SLOTS_PER_S: Final = 1000  # (Final: compiled, inlined)

# What a slot holds per request in flight: the waiter (its owner) ->
# (its connection, whether the call's deadline or the read timeout is the bound).
Slot = dict[object, tuple["_TimesOut", bool]]


class _TimesOut(Protocol):
    """What a slot times out: a connection, told which of its requests ran out."""

    def timed_out(self, owner: object, deadline_bound: bool, read_timeout: float) -> None: ...


class DeadlineWheel:
    """Every in-flight request's timeout, with one loop timer per 1 ms slot.

    A timer per request (``call_later`` then ``cancel``) costs about 2 us in
    uvloop, a tenth of a whole call; a slot entry costs a dict insert and a
    pop. Entries are removed when their request ends, so a slot that fires
    finds only the requests that truly ran out of time.
    """

    __slots__ = ("_loop", "_read_timeout", "_slots")

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float) -> None:
        self._loop = loop
        self._read_timeout = read_timeout
        self._slots: dict[int, Slot] = {}

    def arm(self, connection: _TimesOut, owner: object, deadline: float, now: float) -> Slot:
        """Time ``owner`` out at ``deadline``; pop it from the slot when done.

        ``deadline`` and ``now`` are time.monotonic() values; ``now`` is the
        caller's, read just before, so arming costs no clock call.
        """
        deadline_bound = deadline - now <= self._read_timeout
        if not deadline_bound:
            deadline = now + self._read_timeout
        key = int(deadline * _SLOTS_PER_S) + 1  # the slot's end: never early
        slot = self._slots.get(key)
        if slot is None:
            slot = self._new_slot(key, now)
        slot[owner] = (connection, deadline_bound)
        return slot

    def _new_slot(self, key: int, now: float) -> Slot:
        slot: Slot = {}
        self._slots[key] = slot
        self._loop.call_later(key * _SLOT_S - now, self._expire, key)
        return slot

    def _expire(self, key: int) -> None:
        # uvloop's timers run on its own, coarser clock: one can fire a little
        # before time.monotonic() reaches the slot's end. Come back then.
        remaining = key * _SLOT_S - monotonic()
        if remaining > 0:
            self._loop.call_later(remaining, self._expire, key)
            return
        slot = self._slots.pop(key, None)
        if not slot:
            return
        read_timeout = self._read_timeout
        for owner, (connection, deadline_bound) in list(slot.items()):
            connection.timed_out(owner, deadline_bound, read_timeout)
