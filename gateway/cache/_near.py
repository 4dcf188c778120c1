"""The near tier: an in-process LRU bounded by entries and bytes, with TTL.

A hit is one dict lookup, one float compare and ``move_to_end``; nothing is
allocated. Slots keep monotonic deadlines computed when they are stored:

* ``fresh_until``: before it the entry is served as a hit. It is the
  entry's own expiry, or earlier if ``near_ttl_s`` is shorter (a near copy
  may be kept for less time than the shared Redis copy).
* ``stale_until``: until then an expired entry may still be served while it
  is refreshed (stale-while-revalidate). A copy cut short by ``near_ttl_s``
  has no stale window: the fresher shared copy should be read instead.
"""

from __future__ import annotations

from collections import OrderedDict

from ._codec import Entry

__all__ = ["NearTier"]

# Rough per-slot cost beyond the payload: the slot, the key string, the
# Entry tuple and the OrderedDict links. Only the order of magnitude matters.
_SLOT_OVERHEAD = 240


class _Slot:
    __slots__ = ("entry", "fresh_until", "size", "stale_until")

    def __init__(self, entry: Entry, fresh_until: float, stale_until: float, size: int) -> None:
        self.entry = entry
        self.fresh_until = fresh_until
        self.stale_until = stale_until
        self.size = size


class NearTier:
    __slots__ = ("_grace_s", "_max_bytes", "_max_entries", "_ttl_s", "nbytes", "slots")

    def __init__(self, max_entries: int, max_bytes: int, ttl_s: float, stale_grace_s: float):
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._grace_s = stale_grace_s
        self.slots: OrderedDict[str, _Slot] = OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.slots)

    def lookup(self, key: str, now: float) -> _Slot | None:
        """The slot if it is fresh or still within its stale window."""
        slot = self.slots.get(key)
        if slot is None:
            return None
        if now < slot.stale_until:
            self.slots.move_to_end(key)
            return slot
        self._remove(key, slot)
        return None

    def put(self, key: str, entry: Entry, fresh_for_s: float, now: float) -> None:
        """Store ``entry``, fresh for ``fresh_for_s`` more seconds (may be <= 0)."""
        if self._max_entries == 0 or self._ttl_s <= 0:
            return
        size = _SLOT_OVERHEAD + len(key) + len(entry.body) + len(entry.content_type)
        for name, value in entry.meta:
            size += len(name) + len(value)
        if size > self._max_bytes:
            self.discard(key)
            return
        expires = now + fresh_for_s
        if fresh_for_s <= self._ttl_s:
            fresh_until, stale_until = expires, expires + self._grace_s
        else:
            fresh_until = stale_until = now + self._ttl_s
        old = self.slots.pop(key, None)
        if old is not None:
            self.nbytes -= old.size
        self.slots[key] = _Slot(entry, fresh_until, stale_until, size)
        self.nbytes += size
        self._evict()

    def discard(self, key: str) -> None:
        slot = self.slots.get(key)
        if slot is not None:
            self._remove(key, slot)

    def clear(self) -> None:
        self.slots.clear()
        self.nbytes = 0

    def _remove(self, key: str, slot: _Slot) -> None:
        del self.slots[key]
        self.nbytes -= slot.size

    def _evict(self) -> None:
        slots = self.slots
        while len(slots) > self._max_entries or self.nbytes > self._max_bytes:
            _, slot = slots.popitem(last=False)
            self.nbytes -= slot.size
