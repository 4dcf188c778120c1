"""Virtual time for asyncio tests: deadlines and delays tested without waiting for them.

Like trio's ``MockClock`` with ``autojump_threshold=0``: a test runs on an
event loop of its own whose clock stands still while any task can run, and
jumps straight to the next timer once every task waits. A 30-second deadline
passes in a few loop turns, exactly on time, the same way on a loaded machine
as on an idle one; nothing sleeps. The clock is ``time.monotonic`` itself for
the test's duration (the gateway reads it directly, compiled or not), so the
loop's timers and the code's own readings agree.

    @virtual_time
    async def test_the_pool_wait_ends_at_the_deadline(clock: VirtualClock) -> None:
        call = asyncio.ensure_future(transport.request(request, clock.now() + 0.25))
        await clock.advance(0.249)
        assert not call.done()
        await clock.advance(0.002)
        assert isinstance(call.exception(), errors.DeadlineExceeded)

Only for tests whose peers are scripted (``tests/gateway/_scripted*.py``): a
real socket's bytes arrive in real time, which this loop does not wait for
while a timer is due. Work handed to a thread (``asyncio.to_thread``,
``getaddrinfo``) is waited for in real time and costs no virtual time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import inspect
import selectors
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["VirtualClock", "VirtualTimeLoop", "virtual_time"]

T = TypeVar("T")

# Where virtual time starts: far from zero, as a monotonic clock is.
START = 1000.0
# How long (real seconds) one wait for a thread's answer lasts; the loop waits again
# while the thread works.
REAL_WAIT_S = 1.0


class Deadlock(RuntimeError):
    """Every task waits, no timer is due and no thread is working: nothing can happen."""


class VirtualClock:
    """The time a :class:`VirtualTimeLoop` runs on; it moves only by jumps."""

    def __init__(self, start: float = START) -> None:
        self._now = start
        self._idle_waiters: list[asyncio.Future[None]] = []

    def now(self) -> float:
        return self._now

    def jump(self, seconds: float) -> None:
        """Move time forward; the loop runs what fell due on its next turn."""
        if seconds < 0:
            raise ValueError("virtual time never goes back")
        self._now += seconds

    async def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass, running every timer due on the way in
        order, then until every task waits (see :meth:`idle`)."""
        await asyncio.sleep(seconds)
        await self.idle()

    async def advance_to(self, when: float) -> None:
        await self.advance(max(0.0, when - self._now))

    async def idle(self) -> None:
        """Return once every other task waits (on I/O, a future or a timer), with
        no time passing: whatever can happen now has happened."""
        waiter = asyncio.get_running_loop().create_future()
        self._idle_waiters.append(waiter)
        await waiter

    @contextlib.contextmanager
    def installed(self) -> Iterator[VirtualClock]:
        """``time.monotonic`` reads this clock inside the block, and so does each of the
        package's modules that imported it by name (``from time import monotonic``)."""
        real = time.monotonic
        importers = [
            module
            for name, module in list(sys.modules.items())
            if name.startswith("gateway") and getattr(module, "monotonic", None) is real
        ]
        time.monotonic = self.now
        for module in importers:
            module.monotonic = self.now  # type: ignore[attr-defined]
        try:
            yield self
        finally:
            time.monotonic = real
            for module in importers:
                module.monotonic = real  # type: ignore[attr-defined]

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run ``main`` to its end on a new virtual-time loop, then close the loop."""
        runner = asyncio.Runner(loop_factory=lambda: VirtualTimeLoop(self))
        try:
            with self.installed(), runner:
                return runner.run(main)
        except BaseException:
            # A failed test leaves tasks whose errors nobody read; their finalizers
            # log them. Run those now: in the middle of pytest's report (it parses
            # source), they trip CPython 3.11's "AST constructor recursion depth
            # mismatch" and stop the session.
            gc.collect()
            raise

    def _wake_idle_waiters(self) -> bool:
        waiters, self._idle_waiters = self._idle_waiters, []
        woken = False
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
                woken = True
        return woken


class _VirtualSelector(selectors.BaseSelector):
    """A real selector (the loop's self-pipe, threads' wake-ups) that never blocks
    on a timer: asked to wait for one, it moves the clock to it instead."""

    def __init__(self, clock: VirtualClock, loop: VirtualTimeLoop) -> None:
        self._clock = clock
        self._loop = loop
        self._real = selectors.DefaultSelector()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        # The loop would block: every task waits.
        if self._loop.threads_working:
            return self._real.select(REAL_WAIT_S)  # a thread's answer comes in real time
        if self._clock._wake_idle_waiters():
            return []  # a test waiting for this moment runs first, at the same time
        if timeout is None:
            raise Deadlock("every task waits, and no timer or thread can wake one")
        self._clock.jump(timeout)
        return []

    def register(
        self, fileobj: selectors._FileObject, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: selectors._FileObject) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(
        self, fileobj: selectors._FileObject, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Any:
        return self._real.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a :class:`VirtualClock`."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.threads_working = 0
        super().__init__(selector=_VirtualSelector(clock, self))

    def time(self) -> float:
        return self.clock.now()

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self.threads_working += 1

        def done(_: asyncio.Future[T]) -> None:
            self.threads_working -= 1

        future.add_done_callback(done)
        return future

    async def shutdown_default_executor(self, *args: Any) -> None:
        self.threads_working += 1  # it waits on a thread of its own
        try:
            await super().shutdown_default_executor(*args)
        finally:
            self.threads_working -= 1


def virtual_time(
    test: Callable[..., Awaitable[None]],
) -> Callable[..., None]:
    """Run an ``async def`` test on virtual time; a ``clock`` parameter receives the clock.

    The other parameters are pytest's as usual (fixtures, parametrize); the
    test's async fixtures would live on another loop, so it makes its own
    objects inside.
    """
    signature = inspect.signature(test)
    wants_clock = "clock" in signature.parameters

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        clock = VirtualClock()
        if wants_clock:
            kwargs["clock"] = clock
        clock.run(_as_coroutine(test(*args, **kwargs)))

    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for name, p in signature.parameters.items() if name != "clock"]
    )
    return run


async def _as_coroutine(awaitable: Awaitable[None]) -> None:
    await awaitable
