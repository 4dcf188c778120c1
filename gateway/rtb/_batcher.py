# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Micro-batching of CSV rows into one scoring call, bounded by every row's deadline.

A batch is sent when it is full, when the oldest row has waited `max_wait`,
as soon as it holds `min_batch` rows, or as soon as some row's deadline is
closer than one expected call (`call_time`): a deadline-near row flushes
the batch early rather than waiting for company. "As soon as" means at the
end of the current loop turn, so rows that arrive together (one burst, one
read of many requests) share the call even with `max_wait=0`.

`min_batch` is group commit: under load, rows arrive many to a loop turn
and a batch worth a call goes out at once instead of waiting out
`max_wait` (which only ever adds latency then); under light load a batch
still waits up to `max_wait` for company, so the number of calls stays
bounded by the row rate divided by `min_batch`.

Nobody waits past their deadline, whatever the scorer does: an expired row
resolves as a failure (the filter keeps it) and a late answer is ignored.

Cost per row is kept to a future and one append to each of a few parallel
lists (row, future, deadline, context, key): no object per row, and a batch
hands its rows to the scorer as the list it already is. There is no timer
per row either. A waiting row needs none, because the one flush timer fires
before any waiting row's deadline. A sent batch has one expiry timer at its
earliest unexpired deadline, re-armed as rows expire (rows of one batch
arrive within `max_wait` of each other, so that is one or two timers per
batch), plus the call's own timeout at its latest deadline. There is one
task per batch, never one per row.

A scorer may answer some rows before its call returns (`Batch.resolve`,
e.g. rows found in a cache) and may leave a row without a score (None): a
row left unanswered when the call returns fails open, counted as an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Result = TypeVar("Result")
# (score or None when it failed or came too late, the row's context) -> the row's result
Finish = Callable[[float | None, float], Result]


@dataclass(slots=True)
class BatchCounters:
    batches: int = 0
    timeouts: int = 0  # rows that reached their deadline unanswered
    errors: int = 0  # rows whose batch call failed or answered malformed
    batch_sizes: dict[int, int] = field(default_factory=dict)  # size -> batches


class Batch(Generic[Result]):
    """A batch in flight (what a `ScoreBatch` gets) and its one expiry timer.

    Row `i` is ``rows[i]``, with ``futures[i]``, ``deadlines[i]``,
    ``contexts[i]`` (passed to `finish`) and ``keys[i]`` ("" when none).
    """

    __slots__ = ("contexts", "deadlines", "expiry", "finish", "futures", "keys", "rows")

    def __init__(
        self,
        rows: list[bytes],
        futures: list[asyncio.Future[Result]],
        deadlines: list[float],
        contexts: list[float],
        keys: list[str],
        finish: Finish[Result],
    ) -> None:
        self.rows = rows
        self.futures = futures
        self.deadlines = deadlines
        self.contexts = contexts
        self.keys = keys
        self.finish = finish
        self.expiry: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def resolve(self, index: int, score: float) -> None:
        """Answer row `index` now, before the batch's call returns (no-op if already done)."""
        future = self.futures[index]
        if not future.done():
            future.set_result(self.finish(score, self.contexts[index]))


# (batch, timeout in seconds) -> one score per row, in row order; None for a row
# the scorer resolved itself (Batch.resolve) or could not score.
ScoreBatch = Callable[[Batch[Result], float], Awaitable[Sequence[float | None]]]


class MicroBatcher(Generic[Result]):
    """Rows in, one future per row out, resolved with ``finish(score, context)``."""

    def __init__(
        self,
        score_batch: ScoreBatch[Result],
        finish: Finish[Result],
        *,
        max_batch: int,
        max_wait: float,
        call_time: float,
        counters: BatchCounters,
        min_batch: int = 1,
    ) -> None:
        if max_batch < 1 or min_batch < 1 or max_wait < 0 or call_time < 0:
            raise ValueError("max_batch and min_batch must be >= 1; max_wait and call_time >= 0")
        self._score_batch = score_batch
        self._finish = finish
        self._max_batch = max_batch
        self._min_batch = min_batch
        self._max_wait = max_wait
        self._call_time = call_time
        self._counters = counters
        self._start_queue()
        self._flush_at = 0.0
        self._flush_timer: asyncio.Handle | None = None
        self._in_flight: set[asyncio.Task[None]] = set()

    @property
    def call_time(self) -> float:
        return self._call_time

    def submit(
        self, row: bytes, budget: float, context: float, key: str = ""
    ) -> asyncio.Future[Result]:
        """Queue one row with `budget` seconds to live; `context` is passed to `finish`.

        `key` travels with the row to the scorer (`Batch.keys`), e.g. its cache key.
        """
        loop = asyncio.get_running_loop()
        now = loop.time()
        future: asyncio.Future[Result] = loop.create_future()
        if budget <= 0:
            self._counters.timeouts += 1
            future.set_result(self._finish(None, context))
            return future
        deadline = now + budget
        rows = self._rows
        rows.append(row)
        self._futures.append(future)
        self._deadlines.append(deadline)
        self._contexts.append(context)
        self._keys.append(key)
        queued = len(rows)
        if queued >= self._max_batch:
            self._flush()
            return future
        flush_at = deadline - self._call_time
        if queued == self._min_batch:
            flush_at = now  # enough rows to be worth a call: no more waiting
        elif queued == 1:
            flush_at = min(flush_at, now + self._max_wait)
        elif flush_at >= self._flush_at:
            return future  # the batch is already due earlier
        # Due already (no wait allowed, or a deadline this near): still at the
        # end of this loop turn, not now, so the rows that arrive in the same
        # turn (one read of many requests, one burst) share the call.
        self._schedule_flush(loop, flush_at, now)
        return future

    async def aclose(self) -> None:
        """Fail queued rows (they are kept) and cancel calls in flight."""
        self._cancel_flush_timer()
        queued = self._take_batch()
        self._resolve_failed(queued.futures, queued.contexts)
        for task in list(self._in_flight):
            task.cancel()
        await asyncio.gather(*self._in_flight, return_exceptions=True)

    def _start_queue(self) -> None:
        """An empty queue: one list per row attribute, as a `Batch` holds them."""
        self._rows: list[bytes] = []
        self._futures: list[asyncio.Future[Result]] = []
        self._deadlines: list[float] = []
        self._contexts: list[float] = []
        self._keys: list[str] = []

    def _take_batch(self) -> Batch[Result]:
        """The queued rows as a Batch; the queue starts over empty."""
        batch = Batch(
            self._rows, self._futures, self._deadlines, self._contexts, self._keys, self._finish
        )
        self._start_queue()
        return batch

    def _schedule_flush(self, loop: asyncio.AbstractEventLoop, when: float, now: float) -> None:
        self._cancel_flush_timer()
        if when <= now:
            self._flush_at = now
            self._flush_timer = loop.call_soon(self._flush)
        else:
            self._flush_at = when
            self._flush_timer = loop.call_at(when, self._flush)

    def _cancel_flush_timer(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None

    def _flush(self) -> None:
        self._cancel_flush_timer()
        if not self._rows:
            return
        batch = self._take_batch()
        counters = self._counters
        size = len(batch)
        counters.batches += 1
        counters.batch_sizes[size] = counters.batch_sizes.get(size, 0) + 1
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _send(self, batch: Batch[Result]) -> None:
        deadlines = batch.deadlines
        first, last = min(deadlines), max(deadlines)
        loop = asyncio.get_running_loop()
        if first < last:
            batch.expiry = loop.call_at(first, self._expire_due, batch)
        try:
            # The scorer gets the timeout, but is not trusted to honour it.
            async with asyncio.timeout_at(last):
                # A late loop turn can put the deadline just behind us: a zero
                # timeout fails as a timeout, a negative one as a bad request.
                scores = await self._score_batch(batch, max(0.0, last - loop.time()))
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
        finally:
            if batch.expiry is not None:
                batch.expiry.cancel()
        finish = self._finish
        for future, context, score in zip(batch.futures, batch.contexts, scores, strict=True):
            if not future.done():
                if score is None:
                    self._counters.errors += 1
                future.set_result(finish(score, context))

    def _expire_due(self, batch: Batch[Result]) -> None:
        """Fail the rows whose deadline has come; re-arm for the next one."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        finish = self._finish
        next_deadline = None
        for future, deadline, context in zip(
            batch.futures, batch.deadlines, batch.contexts, strict=True
        ):
            if future.done():
                continue
            if deadline <= now:
                self._counters.timeouts += 1
                future.set_result(finish(None, context))
            elif next_deadline is None or deadline < next_deadline:
                next_deadline = deadline
        batch.expiry = None
        if next_deadline is not None:
            batch.expiry = loop.call_at(next_deadline, self._expire_due, batch)

    def _fail(self, batch: Batch[Result], *, timed_out: bool) -> None:
        unanswered = sum(not future.done() for future in batch.futures)
        if timed_out:
            self._counters.timeouts += unanswered
        else:
            self._counters.errors += unanswered
        self._resolve_failed(batch.futures, batch.contexts)

    def _resolve_failed(self, futures: list[asyncio.Future[Result]], contexts: list[float]) -> None:
        finish = self._finish
        for future, context in zip(futures, contexts, strict=True):
            if not future.done():
                future.set_result(finish(None, context))
