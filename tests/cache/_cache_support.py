"""Helpers shared by the cache tests."""

from __future__ import annotations

import asyncio

from cache import Entry

__all__ = ["CountingLoader"]


class CountingLoader:
    """A loader that counts calls and can be held on an Event until released."""

    def __init__(self, body: bytes = b'{"p":0.5}', *, fail: Exception | None = None) -> None:
        self.calls = 0
        self.body = body
        self.fail = fail
        self.release: asyncio.Event | None = None  # set to hold loads until released
        self.started = asyncio.Event()  # set by the first call

    async def __call__(self) -> Entry:
        self.calls += 1
        self.started.set()
        if self.release is not None:
            await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return Entry(self.body, "application/json", (("variant", "v1"),))
