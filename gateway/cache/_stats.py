"""Counters of the prediction cache, cheap enough to bump on the hot path."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["CacheStats"]


@dataclass(slots=True)
class CacheStats:
    """Live counters (monotonic since start) and the Redis circuit state.

    The object is updated in place; read it, or ``as_dict()`` it for export.
    """

    near_hits: int = 0
    redis_hits: int = 0
    misses: int = 0
    stale_served: int = 0
    coalesced: int = 0
    loads: int = 0
    load_errors: int = 0
    redis_errors: int = 0
    redis_timeouts: int = 0
    redis_skipped: int = 0  # lookups not sent because the circuit was open
    redis_pool_exhausted: int = 0  # no connection slot within the short wait
    redis_bad_replies: int = 0  # replies of the wrong type or shape for their command
    writes: int = 0
    writes_dropped: int = 0
    decode_errors: int = 0  # values that are not cache entries at all
    corrupt_entries: int = 0  # checksum, length, timestamp or header-value check failed
    oversize_entries: int = 0  # values above max_value_bytes, refused unread
    unknown_format: int = 0  # entries written by another codec version (also misses)
    # "closed", "open", "half_open"; "partial" when some Cluster nodes' circuits are open.
    circuit_state: str = "closed"
    circuit_opens: int = 0
    circuit_open_nodes: int = 0  # Cluster nodes whose circuit is open or half-open

    def as_dict(self) -> dict[str, int | str]:
        return asdict(self)
