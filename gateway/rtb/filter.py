# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The RTB pre-filter: score bid requests in micro-batches, keep or drop them.

    bid_filter = BidFilter(gateway, "bid-filter")      # gateway: any Scorer
    decision = await bid_filter.decide(raw_request)   # Decision(keep, score, reason)
    if not decision.keep: answer "no bid" (HTTP 204) at once
    future = bid_filter.submit(raw_request)           # the same, as a Future[Decision]

Scoring goes through the `Scorer` protocol (the signature of
`Gateway.invoke`), one multi-row text/csv call per batch. The policy fails
open: a timeout, an error or a malformed answer keeps the request, because
a lost bid costs revenue while a scored-out request only saves compute.

Cached scores (opt-in: ``BidFilter(gw, route, cache=gw.prediction_cache)``,
or any `ScoreCache`): identical feature rows share a score. A row's key is
the cache's ``key_for(route, None, None, "text/csv", "text/csv", tag, row)``
where the tag is ``model_version`` (if given), the spec's version and its
fingerprint, so a new model or spec never reads old scores. A row found in
the near tier at submit is decided at once (no batch, no await); a batch
then looks up its rows again in the near tier and sends ONE `get_many`
(a single MGET) for the rest, resolving hits as soon as they are found;
only the misses are scored upstream, each distinct row once (also across
batches in flight), and their scores are `put` (near now, Redis in the
background) with the cache's TTL. The cache fails open: Redis down or slow
is a miss, and the lookup is bounded (`cache_timeout`) so it never eats the
scoring call's time. With a cache, the Gateway's own whole-body cache is
bypassed for the scoring calls (a batch body never repeats).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol

from gateway.cache import Entry, PredictionCacheProtocol
from gateway.rtb._batcher import Batch, BatchCounters, MicroBatcher
from gateway.rtb.features import FeatureSpec, load_bundled_spec
from gateway.rtb.policy import FilterPolicy
from gateway.rtb.request import (
    DEFAULT_MAX_REQUEST_BYTES,
    MAX_TMAX,
    BidRequest,
    InvalidBidRequest,
    parse_record,
    record_index,
    record_view,
    refuse_duplicate_keys,
)
from gateway.rtb.rules import DROP, KEEP, Rule, RuleSet, compile_rules
from gateway.rtb.xgb import BUNDLED_MODEL_PATH, XGBoostModel

__all__ = [
    "BidFilter",
    "Decision",
    "FilterStats",
    "InProcessResult",
    "InProcessScorer",
    "Reason",
    "ScoreCache",
    "Scorer",
]

CSV: Final = "text/csv"


class Scorer(Protocol):
    """What BidFilter needs from a client: `Gateway.invoke`'s signature.

    The result must have a `.body: bytes` with one score per input row.
    """

    async def invoke(
        self,
        endpoint: str,
        body: bytes,
        *,
        content_type: str,
        accept: str,
        timeout: float | None,
    ) -> Any: ...


# What BidFilter needs from a prediction cache: the cache package's own interface.
ScoreCache = PredictionCacheProtocol


class Reason(enum.Enum):
    SCORED_KEEP = "scored_keep"  # score >= threshold
    SCORED_DROP = "scored_drop"  # score < threshold: answer "no bid"
    EXPLORED = "explored"  # below threshold, kept by the exploration draw
    FAILED_OPEN = "failed_open"  # no score in time (timeout, error): kept
    SHADOW = "shadow"  # below threshold, kept because the filter only observes
    UNREADABLE = "unreadable"  # not scored: unreadable or over the size limit; kept
    RULE_DROP = "rule_drop"  # a rule dropped it, unscored: answer "no bid"
    RULE_KEEP = "rule_keep"  # a rule kept it, unscored
    HOLDBACK = "holdback"  # a rule matched; kept unscored anyway by its holdback draw


class Decision:
    """What the filter decided for one bid request. Immutable; equal by value.

    ``rule`` names the rule that decided it (drop, keep or holdback), else None.

    A plain class with read-only properties rather than a frozen dataclass:
    compiled, it is built natively (one per request), where a frozen
    dataclass's ``__init__`` is Python that sets each field through
    ``object.__setattr__``, about seven times slower.
    """

    __slots__ = ("_keep", "_reason", "_rule", "_score")
    # ClassVar: compiled, a bare class attribute would become a slot.
    __match_args__: ClassVar[tuple[str, ...]] = ("keep", "score", "reason", "rule")

    def __init__(
        self, keep: bool, score: float | None, reason: Reason, rule: str | None = None
    ) -> None:
        self._keep = keep
        self._score = score
        self._reason = reason
        self._rule = rule

    @property
    def keep(self) -> bool:
        return self._keep

    @property
    def score(self) -> float | None:
        return self._score

    @property
    def reason(self) -> Reason:
        return self._reason

    @property
    def rule(self) -> str | None:
        return self._rule

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Decision):
            return NotImplemented
        return (self._keep, self._score, self._reason, self._rule) == (
            other._keep,
            other._score,
            other._reason,
            other._rule,
        )

    def __hash__(self) -> int:
        return hash((self._keep, self._score, self._reason, self._rule))

    def __repr__(self) -> str:
        rule = "" if self._rule is None else f", rule={self._rule!r}"
        return (
            f"Decision(keep={self._keep!r}, score={self._score!r}, reason={self._reason!r}{rule})"
        )


_FAILED_OPEN: Final = Decision(True, None, Reason.FAILED_OPEN)
_UNREADABLE: Final = Decision(True, None, Reason.UNREADABLE)
_log = logging.getLogger("gateway.rtb")


@dataclass(slots=True)
class FilterStats:
    """Counters. `kept` counts every keep, including failed_open, explored and shadowed."""

    kept: int = 0
    dropped: int = 0
    failed_open: int = 0
    explored: int = 0
    shadowed: int = 0  # shadow mode: would have been dropped
    unreadable: int = 0  # kept unscored: unreadable, or over max_request_bytes
    unreadable_reasons: dict[str, int] = field(default_factory=dict)  # InvalidBidRequest.reason
    rows: int = 0  # feature rows computed by the filter's spec
    out_of_vocabulary: dict[str, int] = field(default_factory=dict)  # feature -> rows unknown
    cache_near_hits: int = 0  # rows scored from the in-process tier (at submit or in a batch)
    cache_redis_hits: int = 0  # rows scored from Redis (one MGET per batch)
    cache_misses: int = 0  # rows the cache did not answer: scored upstream (or shared)
    batches: int = 0
    timeouts: int = 0
    errors: int = 0
    batch_sizes: dict[int, int] = field(default_factory=dict)
    rule_dropped: int = 0  # dropped unscored by a rule (not in `dropped`)
    rule_kept: int = 0  # kept unscored by a rule
    held_back: int = 0  # a rule matched; kept unscored by its holdback draw
    rule_hits: dict[str, int] = field(default_factory=dict)  # rule -> requests it matched


class BidFilter:
    """Library entry point of the RTB pre-filter.

    Deadline per request: `budget` if given, else the request's `tmax` less
    a margin (the part of the auction left to the bidder itself), else
    `default_budget`. The margin is `tmax_margin`, but at most
    `tmax_margin_share` of `tmax`, so a short auction (`tmax` 30 ms, say)
    is still scored in what the share leaves, not failed open unscored. No
    request is held past its deadline: the batch is flushed early for
    deadline-near requests, and unanswered ones fail open.

    Batching: at most `max_batch` rows a scoring call; a batch goes at the
    end of the loop turn in which it reaches `min_batch` rows, else when its
    oldest row has waited `max_wait` (see `gateway.rtb._batcher`).

    A body the filter cannot read (see the README's coercion table for
    what it reads), one that repeats a key in an object, or one over
    `max_request_bytes`, is kept unscored
    (`Reason.UNREADABLE`, counted by reason, logged at most once a minute
    per reason): a pre-filter must not throw away an auction the bidder
    might read. With `strict`, `InvalidBidRequest` is raised instead.

    Drift: the spec counts, per categorical or target feature, the rows
    whose value it did not know (`stats.out_of_vocabulary`, against
    `stats.rows`). Every `oov_window` rows the filter checks the window's
    shares and logs a warning naming each feature past `oov_warning_share`.

    `cache` (e.g. ``gateway.prediction_cache``; never picked up implicitly)
    shares scores between identical feature rows, see the module docstring;
    `model_version` goes into every key, `cache_timeout` bounds a batch's
    Redis lookup.

    Rules (``policy.rules``, see `gateway.rtb.rules`) are tried before any
    scoring; `set_policy` and `set_rules` replace them (and the thresholds)
    for the requests submitted afterwards, without a restart.
    """

    def __init__(
        self,
        scorer: Scorer,
        endpoint: str,
        *,
        spec: FeatureSpec | None = None,
        policy: FilterPolicy | None = None,
        max_batch: int = 32,
        min_batch: int = 8,
        max_wait: float = 0.001,
        call_time: float = 0.002,
        default_budget: float = 0.020,
        tmax_margin: float = 0.050,
        tmax_margin_share: float = 0.5,
        cache: ScoreCache | None = None,
        model_version: str | None = None,
        cache_timeout: float = 0.005,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        strict: bool = False,
        oov_warning_share: float = 0.5,
        oov_window: int = 10_000,
    ) -> None:
        if max_request_bytes < 1:
            raise ValueError("max_request_bytes must be >= 1")
        self._max_request_bytes = max_request_bytes
        self._strict = strict
        self._unreadable_logged: dict[str, float] = {}  # reason -> when last logged
        self._scorer = scorer
        self._endpoint = endpoint
        self._spec = spec if spec is not None else load_bundled_spec()
        if oov_window < 1:
            raise ValueError("oov_window must be >= 1")
        self._oov_warning_share = oov_warning_share
        self._oov_window = oov_window
        self._spec_counters: list[int] = self._spec.counters
        self._oov_next = self._spec_counters[0] + oov_window
        self._oov_seen = list(self._spec_counters)  # the counters when the window began
        self._invoke: Callable[..., Any] = scorer.invoke
        self._cache = cache
        self._cache_timeout = cache_timeout
        self._cache_tag = ""
        self._inflight: dict[str, asyncio.Future[dict[str, float]]] = {}
        self._keys: dict[bytes, str] = {}  # row -> cache key: hashing costs more than a hit
        if cache is not None:
            tag = f"{self._spec.version}.{self._spec.fingerprint()}"
            self._cache_tag = tag if model_version is None else f"{model_version}.{tag}"
        if getattr(scorer, "prediction_cache", None) is not None:
            # A Gateway with a cache would cache each whole batch body, which
            # never repeats (a Redis GET and SET per batch for nothing); rows
            # are cached here instead, when this filter has a cache.
            invoke: Any = scorer.invoke
            self._invoke = functools.partial(invoke, cache=False)
        self._policy = policy if policy is not None else FilterPolicy()
        self._rules: RuleSet | None = compile_rules(self._policy.rules)
        self._default_budget = default_budget
        if not 0.0 <= tmax_margin_share < 1.0:
            raise ValueError("tmax_margin_share must be within [0, 1)")
        self._tmax_margin = tmax_margin
        self._tmax_margin_share = tmax_margin_share
        self._rng = random.Random(self._policy.seed)
        self._counts = FilterStats()
        self._batch_counters = BatchCounters()
        self._batcher: MicroBatcher[Decision] = MicroBatcher(
            self._score_batch if cache is None else self._score_batch_cached,
            self._apply,
            max_batch=max_batch,
            min_batch=min_batch,
            max_wait=max_wait,
            call_time=call_time,
            counters=self._batch_counters,
        )

    @property
    def spec(self) -> FeatureSpec:
        return self._spec

    @property
    def policy(self) -> FilterPolicy:
        return self._policy

    def set_policy(self, policy: FilterPolicy) -> None:
        """Decide the requests submitted from now on by ``policy`` (thresholds, rules, ...).

        Requests already waiting for a score keep the threshold they were given.
        The exploration draw goes on with its own sequence (``seed`` is read once).
        """
        rules = compile_rules(policy.rules)
        self._policy = policy
        self._rules = rules

    def set_rules(self, rules: Mapping[str, Rule]) -> None:
        """The policy as it is, with these rules (name -> `Rule`, tried in order)."""
        self.set_policy(dataclasses.replace(self._policy, rules=rules))

    @property
    def strict(self) -> bool:
        return self._strict

    @property
    def max_request_bytes(self) -> int:
        return self._max_request_bytes

    @property
    def cache_tag(self) -> str | None:
        """The version tag of this filter's cache keys (None without a cache)."""
        return self._cache_tag if self._cache is not None else None

    @property
    def stats(self) -> FilterStats:
        """A snapshot of the counters."""
        counters = self._batch_counters
        snapshot = FilterStats(**{n: getattr(self._counts, n) for n in _OWN_COUNTERS})
        snapshot.unreadable_reasons = dict(self._counts.unreadable_reasons)
        snapshot.rule_hits = dict(self._counts.rule_hits)
        snapshot.rows, snapshot.out_of_vocabulary = self._spec.out_of_vocabulary()
        snapshot.batches = counters.batches
        snapshot.timeouts = counters.timeouts
        snapshot.errors = counters.errors
        snapshot.batch_sizes = dict(counters.batch_sizes)
        return snapshot

    def budget_for(self, tmax_ms: int | float | None) -> float:
        """Seconds a request with this ``tmax`` (ms; 0 or None: absent) may spend scoring.

        A ``tmax`` past `MAX_TMAX` (which the parser refuses) counts as `MAX_TMAX`.
        """
        if not tmax_ms:
            return self._default_budget
        if tmax_ms > MAX_TMAX:
            tmax_ms = MAX_TMAX
        tmax = tmax_ms / 1000.0
        share = tmax * self._tmax_margin_share
        return tmax - (self._tmax_margin if self._tmax_margin < share else share)

    def submit(
        self,
        request: BidRequest | bytes,
        *,
        now: float | None = None,
        route: str | None = None,
        budget: float | None = None,
    ) -> asyncio.Future[Decision]:
        """Queue one request; the future resolves to its Decision (it never fails).

        For callers that are callbacks rather than coroutines (a protocol's
        data handler, a load generator): no task is needed per request.
        Parsing happens here: an unreadable body is decided at once (kept
        unscored), or with `strict` raises `InvalidBidRequest` at once.
        """
        spec = self._spec
        policy = self._policy
        segmented = bool(policy.segment_thresholds)
        if isinstance(request, BidRequest):
            view: BidRequest | None = request
            row = spec.to_csv_row(request, now)
            tmax = request.tmax
        else:
            # Raw bytes stop at the record: the row and tmax are read from it,
            # and the view is built only if a segment threshold has to look.
            try:
                record = parse_record(request, max_bytes=self._max_request_bytes)
                # The caller may forward these bytes: a bidder must read what was scored.
                refuse_duplicate_keys(request)
            except InvalidBidRequest as problem:
                if self._strict:
                    raise
                return self._decided(self.unreadable(problem))
            row = spec.record_csv_row(record, now)
            tmax = record[_TMAX]
            view = record_view(record) if segmented else None
        if self._spec_counters[0] >= self._oov_next:
            self._check_out_of_vocabulary()
        if budget is None:
            budget = self.budget_for(tmax)
        if route is None and not segmented:
            threshold = policy.threshold
        else:
            threshold = policy.threshold_for(view, route)
        rules = self._rules
        if rules is not None:
            if isinstance(request, BidRequest):
                index = rules.match_view(request)
            else:
                index = rules.match_record(record)
            if index >= 0:
                ruled = self._ruled(rules, index)
                if ruled is not None:
                    return self._decided(ruled)
                threshold = rules.thresholds[index]  # action "score": the rule's own
        cache = self._cache
        if cache is None:
            return self._batcher.submit(row, budget, threshold)
        key = self._keys.get(row)
        if key is None:
            key = cache.key_for(self._endpoint, None, None, CSV, CSV, self._cache_tag, row)
            if len(self._keys) >= _KEY_MEMO_LIMIT:
                self._keys.clear()  # rows change every hour; stay bounded
            self._keys[row] = key
        entry = cache.peek_near(key)
        if entry is not None:
            score = _cached_score(entry)
            if score is not None:  # decided at once, whatever the budget left
                self._counts.cache_near_hits += 1
                future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
                future.set_result(self._apply(score, threshold))
                return future
        return self._batcher.submit(row, budget, threshold, key)

    async def decide(
        self,
        request: BidRequest | bytes,
        *,
        now: float | None = None,
        route: str | None = None,
        budget: float | None = None,
    ) -> Decision:
        """Keep or drop one request. `now` (Unix time) drives the hour/day features.

        Raw bytes are parsed (and checked for repeated keys) first; an unreadable
        body is kept unscored (`Reason.UNREADABLE`), or with `strict` raises
        `InvalidBidRequest`. A `BidRequest` is taken as parsed.
        """
        return await self.submit(request, now=now, route=route, budget=budget)

    async def decide_many(
        self,
        requests: Iterable[BidRequest | bytes],
        *,
        now: float | None = None,
        route: str | None = None,
        budget: float | None = None,
    ) -> list[Decision]:
        """Decide a burst at once: all requests join batches before any is awaited."""
        futures = [self.submit(r, now=now, route=route, budget=budget) for r in requests]
        return [await future for future in futures]

    async def aclose(self) -> None:
        await self._batcher.aclose()

    def unreadable(self, problem: InvalidBidRequest) -> Decision:
        """Count (and log, at most once a minute per reason) a request kept unscored."""
        counts = self._counts
        counts.kept += 1
        counts.unreadable += 1
        reason = problem.reason
        reasons = counts.unreadable_reasons
        reasons[reason] = reasons.get(reason, 0) + 1
        now = time.monotonic()
        last = self._unreadable_logged.get(reason)
        if last is None or now - last >= _UNREADABLE_LOG_INTERVAL:
            self._unreadable_logged[reason] = now
            _log.warning(
                "bid request kept unscored (%s, %d so far): %s", reason, reasons[reason], problem
            )
        return _UNREADABLE

    def _check_out_of_vocabulary(self) -> None:
        """Warn about each feature whose unknown values passed the share in this window."""
        now = list(self._spec_counters)
        rows = now[0] - self._oov_seen[0]
        drifting = [
            f"{name} {(count - seen) / rows:.0%}"
            for name, count, seen in zip(
                self._spec.lookups, now[1:], self._oov_seen[1:], strict=True
            )
            if rows > 0 and (count - seen) / rows > self._oov_warning_share
        ]
        if drifting:
            _log.warning(
                "features out of vocabulary in the last %d rows (warning past %.0f%%): %s",
                rows,
                self._oov_warning_share * 100,
                ", ".join(drifting),
            )
        self._oov_seen = now
        self._oov_next = now[0] + self._oov_window

    def _ruled(self, rules: RuleSet, index: int) -> Decision | None:
        """Count rule ``index``'s match; its decision, or None when it has the request scored."""
        counts = self._counts
        name = rules.names[index]
        hits = counts.rule_hits
        hits[name] = hits.get(name, 0) + 1
        share = rules.holdbacks[index]
        if share and self._rng.random() < share:
            counts.kept += 1
            counts.held_back += 1
            return Decision(True, None, Reason.HOLDBACK, name)
        action = rules.actions[index]
        if action == DROP:
            if self._policy.shadow:
                counts.kept += 1
                counts.shadowed += 1
                return Decision(True, None, Reason.SHADOW, name)
            counts.rule_dropped += 1
            return Decision(False, None, Reason.RULE_DROP, name)
        if action == KEEP:
            counts.kept += 1
            counts.rule_kept += 1
            return Decision(True, None, Reason.RULE_KEEP, name)
        return None

    @staticmethod
    def _decided(decision: Decision) -> asyncio.Future[Decision]:
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        future.set_result(decision)
        return future

    def _apply(self, score: float | None, threshold: float) -> Decision:
        counts = self._counts
        if score is None:
            counts.failed_open += 1
            counts.kept += 1
            return _FAILED_OPEN
        if score >= threshold:
            counts.kept += 1
            return Decision(True, score, Reason.SCORED_KEEP)
        if self._policy.shadow:
            counts.kept += 1
            counts.shadowed += 1
            return Decision(True, score, Reason.SHADOW)
        share = self._policy.explore_share
        if share and self._rng.random() < share:
            counts.kept += 1
            counts.explored += 1
            return Decision(True, score, Reason.EXPLORED)
        counts.dropped += 1
        return Decision(False, score, Reason.SCORED_DROP)

    async def _score_batch(self, batch: Batch[Decision], budget: float) -> Sequence[float]:
        body = b"\n".join(batch.rows)
        result = await self._invoke(
            self._endpoint, body, content_type=CSV, accept=CSV, timeout=budget
        )
        return _parse_scores(_score_fields(bytes(result.body), len(batch)))

    async def _score_batch_cached(
        self, batch: Batch[Decision], budget: float
    ) -> Sequence[float | None]:
        """Near tier, then one get_many, then one upstream call for the distinct misses."""
        cache = self._cache
        assert cache is not None
        counts = self._counts
        keys = batch.keys
        scores: list[float | None] = [None] * len(keys)
        # 1. The near tier, again: an identical row may have been scored since submit.
        peek = cache.peek_near
        missing: list[int] = []
        for index, key in enumerate(keys):
            entry = peek(key)
            score = None if entry is None else _cached_score(entry)
            if score is None:
                missing.append(index)
            else:
                counts.cache_near_hits += 1
                batch.resolve(index, score)
        if not missing:
            return scores
        # 2. One lookup for the rest (near, then a single MGET), bounded so a slow
        #    Redis never spends the time the scoring call needs.
        lookup_s = min(self._cache_timeout, budget - self._batcher.call_time)
        if lookup_s > 0:
            try:
                async with asyncio.timeout(lookup_s):
                    found = await cache.get_many([keys[i] for i in missing])
            except TimeoutError:
                found = []
            if found:
                still: list[int] = []
                for index, entry in zip(missing, found, strict=True):
                    score = None if entry is None else _cached_score(entry)
                    if score is None:
                        still.append(index)
                    else:
                        counts.cache_redis_hits += 1
                        batch.resolve(index, score)
                missing = still
        counts.cache_misses += len(missing)
        if not missing:
            return scores
        # 3. Each distinct missing row once: a row already being scored by another
        #    batch waits for that batch's answer instead of being sent again.
        inflight = self._inflight
        mine: dict[str, int] = {}  # key -> position in this call's body
        send: list[bytes] = []
        followed: list[tuple[int, asyncio.Future[dict[str, float]]]] = []
        rows = batch.rows
        own: asyncio.Future[dict[str, float]] = asyncio.get_running_loop().create_future()
        for index in missing:
            key = keys[index]
            if key in mine:
                continue
            other = inflight.get(key)
            if other is not None:
                followed.append((index, other))
                continue
            mine[key] = len(send)
            send.append(rows[index])
            inflight[key] = own
        answered: dict[str, float] = {}
        try:
            if send:
                answered = await self._score_rows(send, mine, budget)
        finally:
            for key in mine:
                if inflight.get(key) is own:
                    del inflight[key]
            if not own.done():
                own.set_result(answered)  # {} when the call failed: followers fail open
        for index in missing:
            scores[index] = answered.get(keys[index])
        for index, other in followed:
            shared = await asyncio.shield(other)
            scores[index] = shared.get(keys[index])
        return scores

    async def _score_rows(
        self, rows: list[bytes], positions: dict[str, int], budget: float
    ) -> dict[str, float]:
        """Score distinct rows upstream and store each score; key -> score."""
        cache = self._cache
        assert cache is not None
        result = await self._invoke(
            self._endpoint, b"\n".join(rows), content_type=CSV, accept=CSV, timeout=budget
        )
        fields = _score_fields(bytes(result.body), len(rows))
        scores = _parse_scores(fields)
        put = cache.put
        answered: dict[str, float] = {}
        for key, position in positions.items():
            put(key, Entry(fields[position], CSV))
            answered[key] = scores[position]
        return answered


_KEY_MEMO_LIMIT: Final = 16384
_UNREADABLE_LOG_INTERVAL: Final = 60.0
_TMAX: Final = record_index(BidRequest, "tmax")

_OWN_COUNTERS: Final = (
    "kept",
    "dropped",
    "failed_open",
    "explored",
    "shadowed",
    "unreadable",
    "cache_near_hits",
    "cache_redis_hits",
    "cache_misses",
    "rule_dropped",
    "rule_kept",
    "held_back",
)


def _score_fields(body: bytes, rows: int) -> list[bytes]:
    """One score per line (commas also accepted, as older XGBoost containers answer)."""
    fields = body.replace(b",", b"\n").split()
    if len(fields) != rows:
        raise ValueError(f"model returned {len(fields)} scores for {rows} rows")
    return fields


def _parse_scores(fields: list[bytes]) -> list[float]:
    scores = list(map(float, fields))
    if not all(map(math.isfinite, scores)):
        raise ValueError("model returned a non-finite score")
    return scores


def _cached_score(entry: Entry) -> float | None:
    """The score a cache entry holds, or None if it holds none (then it is a miss)."""
    try:
        score = float(entry.body)
    except ValueError:
        return None
    return score if math.isfinite(score) else None


@dataclass(frozen=True, slots=True)
class InProcessResult:
    body: bytes


class InProcessScorer:
    """A `Scorer` that runs the pure-Python XGBoost evaluator in-process.

    For tests, benchmarks and trying the filter without SageMaker; it
    ignores `endpoint`, and scores on the event loop (~4-6 us per row).
    """

    def __init__(self, model: XGBoostModel | None = None) -> None:
        self._model = model if model is not None else XGBoostModel.load(BUNDLED_MODEL_PATH)
        self.calls = 0

    async def invoke(
        self,
        endpoint: str,
        body: bytes,
        *,
        content_type: str = CSV,
        accept: str = CSV,
        timeout: float | None = None,
    ) -> InProcessResult:
        self.calls += 1
        return InProcessResult(self._model.predict_csv(body))
