"""Micro-batching of CSV rows into one scoring call, bounded by every row's deadline.

A batch is sent when it is full, when the oldest row has waited `max_wait`,
or as soon as some row's deadline is closer than one expected call
(`call_time`): a deadline-near row flushes the batch early rather than
waiting for company. Each row also carries its own expiry timer, so
whatever the scorer does, nobody waits past their deadline: an expired
row resolves to `None` (failed: the filter keeps it) and a late answer is
ignored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

# (body, row count, timeout in seconds) -> one score per row, in row order
ScoreBatch = Callable[[bytes, int, float], Awaitable[Sequence[float]]]


@dataclass(slots=True)
class BatchCounters:
    batches: int = 0
    timeouts: int = 0  # rows that reached their deadline unanswered
    errors: int = 0  # rows whose batch call failed or answered malformed
    batch_sizes: dict[int, int] = field(default_factory=dict)  # size -> batches


class _Pending:
    __slots__ = ("deadline", "future", "row", "timer")

    def __init__(self, row: bytes, future: asyncio.Future[float | None], deadline: float) -> None:
        self.row = row
        self.future = future
        self.deadline = deadline
        self.timer: asyncio.TimerHandle | None = None


class MicroBatcher:
    def __init__(
        self,
        score_batch: ScoreBatch,
        *,
        max_batch: int,
        max_wait: float,
        call_time: float,
        counters: BatchCounters,
    ) -> None:
        if max_batch < 1 or max_wait < 0 or call_time < 0:
            raise ValueError("max_batch must be >= 1; max_wait and call_time >= 0")
        self._score_batch = score_batch
        self._max_batch = max_batch
        self._max_wait = max_wait
        self._call_time = call_time
        self._counters = counters
        self._pending: list[_Pending] = []
        self._flush_at = 0.0
        self._flush_timer: asyncio.TimerHandle | None = None
        self._in_flight: set[asyncio.Task[None]] = set()

    def submit(self, row: bytes, deadline: float) -> asyncio.Future[float | None]:
        """Queue one row; the future resolves to its score, or None on failure/timeout.

        `deadline` is in the running loop's clock (`loop.time()`).
        """
        loop = asyncio.get_running_loop()
        now = loop.time()
        future: asyncio.Future[float | None] = loop.create_future()
        if deadline <= now:
            self._counters.timeouts += 1
            future.set_result(None)
            return future
        entry = _Pending(row, future, deadline)
        entry.timer = loop.call_at(deadline, self._expire, entry)
        self._pending.append(entry)
        if len(self._pending) >= self._max_batch:
            self._flush()
            return future
        batch_due = now + self._max_wait if len(self._pending) == 1 else self._flush_at
        flush_at = min(batch_due, deadline - self._call_time)
        if flush_at <= now:
            self._flush()
        elif self._flush_timer is None or flush_at < self._flush_at:
            self._schedule_flush(loop, flush_at)
        return future

    async def aclose(self) -> None:
        """Fail queued rows (they are kept) and cancel calls in flight."""
        self._cancel_flush_timer()
        for entry in self._pending:
            self._resolve(entry, None)
        self._pending = []
        for task in list(self._in_flight):
            task.cancel()
        await asyncio.gather(*self._in_flight, return_exceptions=True)

    def _schedule_flush(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._cancel_flush_timer()
        self._flush_at = when
        self._flush_timer = loop.call_at(when, self._flush)

    def _cancel_flush_timer(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None

    def _flush(self) -> None:
        self._cancel_flush_timer()
        batch = [entry for entry in self._pending if not entry.future.done()]
        self._pending = []
        if not batch:
            return
        counters = self._counters
        counters.batches += 1
        counters.batch_sizes[len(batch)] = counters.batch_sizes.get(len(batch), 0) + 1
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _send(self, batch: list[_Pending]) -> None:
        body = b"\n".join([entry.row for entry in batch])
        last_deadline = max(entry.deadline for entry in batch)
        loop = asyncio.get_running_loop()
        try:
            # The scorer gets the timeout, but is not trusted to honour it.
            async with asyncio.timeout_at(last_deadline):
                scores = await self._score_batch(body, len(batch), last_deadline - loop.time())
            if len(scores) != len(batch):
                raise ValueError(f"{len(scores)} scores for {len(batch)} rows")
        except asyncio.CancelledError:
            self._fail(batch, timed_out=False)
            raise
        except TimeoutError:
            self._fail(batch, timed_out=True)
            return
        except Exception:  # any scorer failure: fail open, never propagate
            self._fail(batch, timed_out=False)
            return
        for entry, score in zip(batch, scores, strict=True):
            self._resolve(entry, score)

    def _fail(self, batch: list[_Pending], *, timed_out: bool) -> None:
        unanswered = [entry for entry in batch if not entry.future.done()]
        if timed_out:
            self._counters.timeouts += len(unanswered)
        else:
            self._counters.errors += len(unanswered)
        for entry in batch:
            self._resolve(entry, None)

    def _expire(self, entry: _Pending) -> None:
        if not entry.future.done():
            self._counters.timeouts += 1
            entry.future.set_result(None)

    @staticmethod
    def _resolve(entry: _Pending, score: float | None) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
        if not entry.future.done():
            entry.future.set_result(score)
