"""Counters a test reads to prove what reached the emulated SageMaker."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = ["OTHER_ENDPOINT", "EmulatorStats"]

# Where errors for an endpoint name that is not configured are counted: the
# name comes from the request path, so keying by it would let any caller grow
# the statistics without bound.
OTHER_ENDPOINT = "(not configured)"


class _ErrorCounts(Counter[tuple[str, str]]):
    """(endpoint, code) counts; once endpoints are named, any other name counts as one."""

    def __init__(self) -> None:
        super().__init__()
        self.endpoints: frozenset[str] | None = None  # None: every name as given

    def _key(self, key: tuple[str, str]) -> tuple[str, str]:
        name, code = key
        known = self.endpoints
        if known is None or not name or name in known:
            return key
        return (OTHER_ENDPOINT, code)

    def __getitem__(self, key: tuple[str, str]) -> int:
        return super().__getitem__(self._key(key))

    def __setitem__(self, key: tuple[str, str], value: int) -> None:
        super().__setitem__(self._key(key), value)


class EmulatorStats:
    """Counts per endpoint / variant / target model; ``reset()`` zeroes them.

    ``invocations`` counts every request that passed authentication and
    validation and was routed to a variant, whatever happened next (an
    injected fault included): that is an "upstream call" for the client.
    """

    def __init__(self) -> None:
        self.invocations: Counter[tuple[str, str, str | None]] = Counter()
        self.stream_invocations: Counter[str] = Counter()
        self.async_invocations: Counter[str] = Counter()
        # (endpoint or "", code); see name_endpoints for the endpoint part.
        self.errors: Counter[tuple[str, str]] = _ErrorCounts()
        self.cold_loads: Counter[tuple[str, str]] = Counter()  # (endpoint, model)
        self.evictions: Counter[tuple[str, str]] = Counter()
        self.resets: Counter[str] = Counter()
        self.stalls: Counter[str] = Counter()
        self.tails: Counter[str] = Counter()  # responses given the latency tail
        self.stream_errors: Counter[str] = Counter()

    def name_endpoints(self, endpoints: Iterable[str]) -> None:
        """Count errors for these endpoints by name, for any other under OTHER_ENDPOINT."""
        errors = self.errors
        assert isinstance(errors, _ErrorCounts)
        errors.endpoints = frozenset(endpoints)

    def count(
        self, endpoint: str | None = None, variant: str | None = None, model: str | None = None
    ) -> int:
        """Invocations matching every filter given (None matches anything)."""
        return sum(
            number
            for (name, invoked_variant, target), number in self.invocations.items()
            if (endpoint is None or name == endpoint)
            and (variant is None or invoked_variant == variant)
            and (model is None or target == model)
        )

    def error_count(self, endpoint: str | None = None, code: str | None = None) -> int:
        return sum(
            number
            for (name, error_code), number in self.errors.items()
            if (endpoint is None or name == endpoint) and (code is None or error_code == code)
        )

    def reset(self) -> None:
        for counter in self._counters().values():
            counter.clear()

    def _counters(self) -> dict[str, Counter[Any]]:
        return {name: value for name, value in vars(self).items() if isinstance(value, Counter)}

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """A JSON-able copy: per counter, a list of {"key": [...], "count": n}."""
        result: dict[str, list[dict[str, Any]]] = {}
        for name, counter in self._counters().items():
            result[name] = [
                {"key": list(key) if isinstance(key, tuple) else [key], "count": number}
                for key, number in counter.items()
            ]
        return result

    @classmethod
    def from_snapshot(cls, data: dict[str, list[dict[str, Any]]]) -> EmulatorStats:
        stats = cls()
        counters = stats._counters()
        for name, rows in data.items():
            counter = counters.get(name)
            if counter is None:
                continue
            for row in rows:
                key = row["key"]
                counter[tuple(key) if len(key) > 1 else key[0]] = row["count"]
        return stats
