"""Model affinity for multi-model endpoints: rendezvous (HRW) hashing.

Every process must rank targets identically for a model, so the hash is
spelled out and stable (not Python's per-process randomized ``hash``)::

    score(model, key) = int.from_bytes(
        blake2b(key.encode() + b"\\0" + model.encode(), digest_size=8).digest(), "big")

Targets are ranked by descending score (a tie, odds 2**-64, goes to the
later-listed target). With unequal weights
the score becomes ``weight / -ln(u)`` with ``u = (score + 0.5) / 2**64``,
weighted rendezvous hashing, which is the same order when weights are equal.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from ._target_state import TargetState

__all__ = ["rendezvous_score"]

_TWO_64 = float(2**64)


def rendezvous_score(model: str, target_key: str) -> int:
    """The documented, process-independent 64-bit rendezvous score."""
    digest = hashlib.blake2b(target_key.encode() + b"\0" + model.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class _Ranker:
    """Ranks a route's targets per model, with a bounded cache of rankings.

    Cache hits are one dict lookup, so cost is flat in the number of models;
    a miss costs one blake2b per target. Eviction is FIFO (oldest inserted),
    which is cheaper than LRU on the hit path and just as correct: a ranking
    is a pure function of the model name, so an evicted one is recomputed.
    """

    __slots__ = ("_cache", "_capacity", "_prefixes", "_targets", "_weights")

    def __init__(self, targets: Sequence[TargetState], capacity: int) -> None:
        self._targets = tuple(targets)
        # Hashing a copy of "key\0" then the model gives the same digest as
        # hashing the concatenation, without re-hashing the key every time.
        self._prefixes = tuple(
            hashlib.blake2b(state.key.encode() + b"\0", digest_size=8) for state in targets
        )
        weights = [state.target.weight for state in targets]
        self._weights = None if len(set(weights)) <= 1 else tuple(weights)
        self._capacity = max(1, capacity)
        self._cache: dict[str, tuple[TargetState, ...]] = {}

    def ranking(self, model: str) -> tuple[TargetState, ...]:
        ranked = self._cache.get(model)
        if ranked is None:
            ranked = self._rank(model)
            cache = self._cache
            if len(cache) >= self._capacity:
                del cache[next(iter(cache))]
            cache[model] = ranked
        return ranked

    def _rank(self, model: str) -> tuple[TargetState, ...]:
        encoded = model.encode()
        # Big-endian digests compare as bytes exactly as their integers do.
        digests: list[tuple[bytes, int]] = []
        for index, prefix in enumerate(self._prefixes):
            hasher = prefix.copy()
            hasher.update(encoded)
            digests.append((hasher.digest(), index))
        if self._weights is None:
            digests.sort(reverse=True)
            order = [index for _, index in digests]
        else:
            weights = self._weights
            weighted = [
                (weights[index] / -math.log((int.from_bytes(digest, "big") + 0.5) / _TWO_64), index)
                for digest, index in digests
            ]
            weighted.sort(reverse=True)
            order = [index for _, index in weighted]
        targets = self._targets
        return tuple([targets[index] for index in order])
