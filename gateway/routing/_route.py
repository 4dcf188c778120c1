# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Runtime state of one route: balancing, ejection, hedge and retry budgets.

Weights are traffic shares. Targets of equal weight form a class; each
class gets the share of calls its healthy weight is of the route's (smooth
weighted round-robin: exact at any concurrency, no randomness), and inside
a class peak-EWMA picks the cheapest target. A route whose targets all
weigh the same (the default) is one class: pure latency-aware balancing. A
canary at 0.1 next to a primary at 0.9 gets 10% of calls, however few are
in flight, instead of only the overflow once the primary is loaded.

Priorities are Envoy's priority levels: each level's health is its up
share times the overprovisioning factor (at most 1), priority 0 takes that
share of calls and the next levels take what is left, in order (normalised
when the levels' healths add up to less than 1). Ejected, probing and
cooling-down targets are down. A hedge or a retry whose loaded levels hold
only targets it already tried goes to the next level with an up target,
the fallback. A throttled answer's ``Retry-After`` cools its target down:
out of picks until then, as if ejected, without counting as an ejection.

Gateway calls :meth:`Route.pick`, :meth:`Route.start` and
:meth:`Route.finish` on every attempt, so those three are written for
CPU: attributes read once into locals, no allocation on the common path,
and rare work (ejection expiry, percentile refresh) gated behind a single
time comparison.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import Final

from ._affinity import _Ranker
from ._config import RouteConfig
from ._hedge_policy import HedgeBudget, HedgeDelay
from ._stats import LatencyWindow, RetryBudget
from ._target_state import INV_TAU, Outcome, TargetHealth, TargetState

__all__ = ["HealthObserver", "Route"]

Clock = Callable[[], float]
# Told about every ejection and re-admission, after the change: the route and
# the target (whose ``state`` says which it was). Rare, so a plain callable.
HealthObserver = Callable[["Route", TargetState], None]

# Final: compiled, C statics (or inlined literals) rather than a module look-up each.
_INV_TAU: Final = INV_TAU
# Latency samples are clamped so 0.0 can mean "never sampled".
_MIN_SAMPLE_S: Final = 1e-6
# Cost of each in-flight request on a never-sampled target: a new target
# costs 0 while idle (so it is tried at once) and a lot while its first
# request is out (so it is not flooded before we know how fast it is).
_UNSAMPLED_PENALTY_S = 1e3
# A failure before the route has any latency to compare it with counts as this
# slow: slow for real-time inference, and a target that answers slower still
# shows it with its first answer, after which failures count against that.
_UNKNOWN_FAILURE_S = 0.1
# At most this many targets are scanned; above it, power of two choices.
_FULL_SCAN_MAX = 4
# Hedge delay before the window holds enough samples to find the tail:
# below ceil(_WARMUP_SAMPLES_PER_HEDGE / max_extra_load) samples (100 at
# 5%) it is the configured initial delay. Refreshed often while warming up
# or not hedging, every refresh_s after.
_WARMUP_SAMPLES_PER_HEDGE = 5
_WARMUP_REFRESH_S = 0.1

_HEALTHY: Final = TargetHealth.HEALTHY
_EJECTED: Final = TargetHealth.EJECTED
_PROBING: Final = TargetHealth.PROBING
_SUCCESS: Final = Outcome.SUCCESS
_FAILURE: Final = Outcome.FAILURE


def _cost(state: TargetState, now: float) -> float:
    """Peak-EWMA load: latency x (in flight + 1) / weight.

    While a target is idle its EWMA also decays toward zero (tau 10 s), as
    in Finagle and tower, so a target once avoided for a slow spike gets
    tried again instead of starved forever. Once it has a request in
    flight the undecayed value counts again, so a long-idle target takes
    its share, not a flood, until answers tell us how fast it is now.
    """
    ewma = state._ewma
    outstanding = state._outstanding
    if outstanding:
        load = ewma * (outstanding + 1) if ewma else outstanding * _UNSAMPLED_PENALTY_S
    elif ewma:
        load = ewma * math.exp((state._stamp - now) * _INV_TAU)
    else:
        load = 0.0
    return load * state._inv_weight


def _up(state: TargetState, now: float) -> bool:
    """Takes traffic: healthy, and no Retry-After cooldown running."""
    return state._state is _HEALTHY and state._cool_until <= now


class _WeightClass:
    """The targets sharing one weight, and their running smooth-WRR credit."""

    __slots__ = ("credit", "healthy", "members", "share")

    def __init__(self, members: tuple[TargetState, ...]) -> None:
        self.members = members
        self.healthy: list[TargetState] = list(members)
        # The class's weight in the route: the sum of its healthy members'.
        self.share = sum(state.target.weight for state in members)
        self.credit = 0.0

    def regroup(self, now: float) -> None:
        self.healthy = [s for s in self.members if _up(s, now)]
        self.share = sum(state.target.weight for state in self.healthy)


class _Level:
    """The targets of one priority: its up members, weight classes and share of calls."""

    __slots__ = ("classes", "credit", "healthy", "load", "members", "priority")

    def __init__(self, priority: int, members: tuple[TargetState, ...]) -> None:
        self.priority = priority
        self.members = members
        self.healthy: list[TargetState] = list(members)
        self.classes = _weight_classes(members)
        # The share of primary picks this level takes (0.0 to 1.0).
        self.load = 0.0
        self.credit = 0.0

    def regroup(self, now: float) -> None:
        self.healthy = [s for s in self.members if _up(s, now)]
        if self.classes is not None:
            for weight_class in self.classes:
                weight_class.regroup(now)

    def candidates(self, exclude: Collection[TargetState]) -> list[TargetState]:
        if self.classes is not None:
            return _take_share(self.classes, exclude)
        if exclude:
            return [state for state in self.healthy if state not in exclude]
        return self.healthy


def _priority_levels(targets: tuple[TargetState, ...]) -> tuple[_Level, ...] | None:
    """Targets grouped by priority, lowest first; None when all share one priority."""
    groups: dict[int, list[TargetState]] = {}
    for state in targets:
        groups.setdefault(state.target.priority, []).append(state)
    if len(groups) < 2:
        return None
    return tuple(_Level(priority, tuple(groups[priority])) for priority in sorted(groups))


def _spread(levels: tuple[_Level, ...], factor: float) -> None:
    """Each level's load, as Envoy spreads calls over priority levels."""
    healths = [min(1.0, factor * len(level.healthy) / len(level.members)) for level in levels]
    total = min(1.0, sum(healths))
    remaining = 1.0
    for level, health in zip(levels, healths, strict=True):
        load = min(remaining, health / total) if total > 0 else 0.0
        level.load = load
        remaining -= load


def _take_level(levels: tuple[_Level, ...], exclude: Collection[TargetState]) -> _Level | None:
    """The loaded level whose turn it is (smooth WRR on the loads), skipping levels
    whose up targets are all excluded."""
    chosen: _Level | None = None
    total = 0.0
    for level in levels:
        if level.load <= 0.0:
            continue
        if exclude and all(state in exclude for state in level.healthy):
            continue
        level.credit += level.load
        total += level.load
        if chosen is None or level.credit > chosen.credit:
            chosen = level
    if chosen is not None:
        chosen.credit -= total
    return chosen


def _weight_classes(targets: tuple[TargetState, ...]) -> tuple[_WeightClass, ...] | None:
    """Targets grouped by weight, in config order; None when all weigh the same."""
    groups: dict[float, list[TargetState]] = {}
    for state in targets:
        groups.setdefault(state.target.weight, []).append(state)
    if len(groups) < 2:
        return None
    return tuple(_WeightClass(tuple(members)) for members in groups.values())


def _take_share(
    classes: tuple[_WeightClass, ...], exclude: Collection[TargetState]
) -> list[TargetState]:
    """The candidates of the class whose turn it is (smooth weighted round-robin).

    Each class with a candidate earns its share; the one with most credit
    is chosen and pays the total back, so over any run of picks each class
    is chosen in proportion to its share, within one pick.
    """
    chosen: _WeightClass | None = None
    chosen_members: list[TargetState] = []
    total = 0.0
    for weight_class in classes:
        members = weight_class.healthy
        if exclude:
            members = [state for state in members if state not in exclude]
        if not members:
            continue
        weight_class.credit += weight_class.share
        total += weight_class.share
        if chosen is None or weight_class.credit > chosen.credit:
            chosen = weight_class
            chosen_members = members
    if chosen is not None:
        chosen.credit -= total
    return chosen_members


def _least_cost(candidates: Sequence[TargetState], now: float) -> TargetState:
    # _cost inlined: this loop is the hot path for routes of 2-4 targets.
    best = candidates[0]
    best_cost = math.inf
    for state in candidates:
        ewma = state._ewma
        outstanding = state._outstanding
        if outstanding:
            load = ewma * (outstanding + 1) if ewma else outstanding * _UNSAMPLED_PENALTY_S
        elif ewma:
            load = ewma * math.exp((state._stamp - now) * _INV_TAU)
        else:
            load = 0.0
        cost = load * state._inv_weight
        if cost < best_cost:
            best = state
            best_cost = cost
    return best


class Route:
    """One logical endpoint: its targets and what we have learned about them.

    Not thread-safe; like the event loop that drives it, it expects one
    thread. ``clock`` and ``rng`` are injectable so tests are deterministic.
    """

    __slots__ = (
        "_classes",
        "_clock",
        "_config",
        "_healthy",
        "_hedge_budget",
        "_hedge_delay",
        "_hedge_policy",
        "_latency",
        "_level_of",
        "_levels",
        "_max_out",
        "_mme_preferred",
        "_name",
        "_next_hedge_refresh",
        "_next_wake",
        "_observer",
        "_probing",
        "_random",
        "_ranker",
        "_retry_budget",
        "_sole",
        "_targets",
        "_timeout_s",
        "_window_s",
        "hedging",
        "routers",
    )

    def __init__(
        self,
        config: RouteConfig,
        *,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
        ranking_cache_size: int = 16_384,
        observer: HealthObserver | None = None,
    ) -> None:
        self._config = config
        # Read per call: native fields, where the config (a dataclass) is read by name.
        self._name = config.name
        self._timeout_s = None if config.timeout_ms is None else config.timeout_ms / 1000.0
        self._clock = clock
        self._observer = observer
        self._random = (rng if rng is not None else random.Random()).random
        self._targets = tuple(TargetState(target) for target in config.targets)
        self._healthy: list[TargetState] = list(self._targets)
        self._probing: list[TargetState] = []
        # Read-only: the inference router targets (no stream goes to one).
        self.routers = tuple(s for s in self._targets if s.target.inference_router is not None)
        self._levels = _priority_levels(self._targets)
        self._level_of: dict[TargetState, _Level] = {
            state: level for level in self._levels or () for state in level.members
        }
        # With priorities, weights are shares inside each level.
        self._classes = _weight_classes(self._targets) if self._levels is None else None
        self._next_wake = math.inf
        self._max_out = _max_out_of_rotation(len(self._targets), config.ejection.max_ejected_share)
        if self._levels is not None:
            _spread(self._levels, config.overprovisioning_factor)
        self._window_s = config.ejection.success_rate_window_s
        self._mme_preferred = config.mme_preferred
        self._ranker = (
            _Ranker(self._targets, ranking_cache_size) if len(self._targets) > 1 else None
        )
        now = clock()
        hedge = config.hedge
        self._hedge_budget = HedgeBudget(hedge.max_extra_load)
        self._retry_budget = RetryBudget(
            config.retry.budget_ratio, config.retry.min_per_second, clock=clock
        )
        # The latency window only feeds the hedge delay: skip it when off.
        self._latency = (
            LatencyWindow(hedge.window_s, max(1, round(hedge.window_s / hedge.refresh_s)), now)
            if hedge.enabled
            else None
        )
        # Read-only: whether hedge_delay can ever say "hedge" (saves the call when not).
        self.hedging = self._latency is not None
        # A one-target route never ejects its target (see _max_out_of_rotation),
        # so a primary pick there is always that target.
        self._sole = self._targets[0] if len(self._targets) == 1 else None
        self._hedge_policy = (
            HedgeDelay(
                self._latency,
                initial_s=hedge.initial_delay_ms / 1000.0,
                floor_s=hedge.min_delay_ms / 1000.0,
                win_share=hedge.win_share,
                warmup_samples=math.ceil(_WARMUP_SAMPLES_PER_HEDGE / hedge.max_extra_load),
                quantile=hedge.quantile,
            )
            if self._latency is not None
            else None
        )
        self._hedge_delay: float | None = None
        self._next_hedge_refresh = now

    # --- introspection -----------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def config(self) -> RouteConfig:
        return self._config

    @property
    def targets(self) -> tuple[TargetState, ...]:
        return self._targets

    @property
    def timeout_s(self) -> float | None:
        return self._timeout_s

    @property
    def retry_budget(self) -> RetryBudget:
        return self._retry_budget

    @property
    def hedge_budget(self) -> HedgeBudget:
        return self._hedge_budget

    @property
    def hedge_policy(self) -> HedgeDelay | None:
        """The hedge delay's state and the hedges' record (fired, won); None when off."""
        return self._hedge_policy

    def level_loads(self) -> dict[int, float]:
        """Each priority's share of primary picks now (one level: ``{priority: 1.0}``)."""
        self.refresh_health()
        if self._levels is None:
            return {self._targets[0].target.priority: 1.0}
        return {level.priority: level.load for level in self._levels}

    def preferred_targets(self, model: str) -> tuple[TargetState, ...]:
        """The model's rendezvous ranking, best first (health ignored)."""
        if self._ranker is None:
            return self._targets
        return self._ranker.ranking(model)

    # --- the hot path ------------------------------------------------------

    def pick(
        self,
        model: str | None = None,
        exclude: Collection[TargetState] = (),
        *,
        reuse_excluded: bool = False,
    ) -> TargetState | None:
        """Choose the target for the next attempt, or None for "no target".

        ``model`` (a multi-model endpoint's target model) restricts the choice
        to the model's ``mme_preferred`` best-ranked healthy targets.
        ``exclude`` holds targets this call already tried, so a hedge or a
        retry goes elsewhere. When every healthy candidate is excluded, the
        result is None unless ``reuse_excluded`` is set, in which case the
        least-loaded excluded one is returned: a SageMaker endpoint has
        several instances behind it, so trying the same endpoint again is
        often still worth it (gateway decides, per error kind).

        A primary pick (nothing excluded) never returns None: ejection
        always leaves at least one target healthy. Ejected targets are never
        returned; a PROBING one is offered to one attempt at a time, and
        ahead of healthy ones, so it gets its probe promptly.

        Call :meth:`start` right after, without awaiting in between: the
        probe slot is taken by ``start``.
        """
        sole = self._sole
        if sole is not None and not exclude:
            return sole
        now = self._clock()
        if now >= self._next_wake:
            self._wake(now)
        if self._levels is not None:
            return self._pick_by_priority(model, exclude, reuse_excluded, now)
        if model is not None and self._ranker is not None:
            return self._pick_for_model(model, exclude, reuse_excluded, now)
        if self._probing:
            probe = _idle_probe(self._probing, exclude)
            if probe is not None:
                return probe
        candidates = self._healthy
        classes = self._classes
        if classes is not None:
            candidates = _take_share(classes, exclude)
        elif exclude:
            candidates = [state for state in candidates if state not in exclude]
        return self._cheapest(candidates, self._healthy, exclude, reuse_excluded, now)

    def pick_outside(self, exclude: Collection[TargetState]) -> TargetState | None:
        """A primary pick among the targets outside ``exclude`` (the call cannot go to
        those): the least loaded of them, whatever its health, when none is up;
        None when there are none."""
        state = self.pick(None, exclude)
        if state is not None:
            return state
        rest = [s for s in self._targets if s not in exclude]
        return _least_cost(rest, self._clock()) if rest else None

    def start(self, target: TargetState) -> float:
        """Mark a primary attempt in flight; returns the start time for ``finish``.

        Each primary attempt earns hedge and retry tokens. Use
        :meth:`start_backup` for hedges and retries, which earn none.
        """
        now = self._clock()
        target.begin()
        if self.hedging:  # the hedge budget is only ever spent when hedging is on
            self._hedge_budget.deposit()
        self._retry_budget.deposit_at(now)
        return now

    def start_backup(self, target: TargetState) -> float:
        """Mark a hedge or retry attempt in flight (it earns no budget tokens)."""
        target.begin()
        return self._clock()

    def finish(self, target: TargetState, started_at: float, outcome: Outcome) -> None:
        """Record how an attempt started with ``start``/``start_backup`` ended.

        Only a success is a latency sample. A failure counts toward ejection and
        can only raise the target's cost; a neutral answer (the caller's mistake)
        and a cancelled attempt leave the target as it was.
        """
        now = self._clock()
        target.end()
        if outcome is not _SUCCESS:
            if outcome is _FAILURE:
                self._record_failure(target, max(now - started_at, _MIN_SAMPLE_S), now)
            return
        elapsed = now - started_at
        if elapsed < _MIN_SAMPLE_S:
            elapsed = _MIN_SAMPLE_S
        target.record_answer(elapsed, now, self._window_s)
        if self._latency is not None:
            self._latency.record(elapsed, now)
        if target._state is not _HEALTHY:
            self._on_late_success(target, elapsed, now)

    def target_up(self, target: TargetState) -> bool:
        """Whether ``target`` counts as healthy for readiness and monitoring: in
        rotation (neither ejected nor probing), and not failing as many calls in a
        row as would eject it.

        Ejection never takes a route's last targets (never all of them, never a
        lone one), so ejection alone would never show a route whose every target
        fails; the failure streak does, until a success.
        """
        return (
            target._state is _HEALTHY
            and target._consecutive_failures < self._config.ejection.consecutive_failures
        )

    def untried(self, exclude: Collection[TargetState]) -> bool:
        """Whether a target outside ``exclude`` takes traffic now (up, or an idle
        probe): where a retry can go that must not return to a target it tried."""
        now = self._clock()
        if now >= self._next_wake:
            self._wake(now)
        if any(state not in exclude for state in self._healthy):
            return True
        return _idle_probe(self._probing, exclude) is not None

    # --- hedging -----------------------------------------------------------

    def hedge_delay(self) -> float | None:
        """Seconds to wait before hedging, or None for "do not hedge".

        ``initial_delay_ms`` while the route has seen few answers, then where
        the tail of its latencies over ``window_s`` starts (see
        :class:`HedgeDelay`), recomputed every ``refresh_s`` and never below
        ``min_delay_ms``. None when hedging is off or there is no tail.
        """
        if self._latency is None:
            return None
        now = self._clock()
        if now >= self._next_hedge_refresh:
            self._refresh_hedge_delay(now)
        return self._hedge_delay

    def observe_superseded(self, started_at: float) -> None:
        """A primary attempt lost to its hedge: count its elapsed time as a latency.

        It would have taken longer, and leaving it out (as CANCELLED does)
        hides exactly the slow tail the hedge delay must see. It is recorded
        as its elapsed time plus the median: the least that still counts it
        as a win for a hedge fired at the delay in force (the hedge's own
        answer took about the median). Only the hedge window sees it, not
        health or balancing. It also counts as a won hedge.
        """
        policy = self._hedge_policy
        if self._latency is not None and policy is not None:
            now = self._clock()
            elapsed = max(now - started_at, _MIN_SAMPLE_S)
            self._latency.record(elapsed + policy.median_s, now)
            policy.on_won()

    def try_acquire_hedge(self) -> bool:
        """Spend a hedge token; False means "do not send this hedge".

        Like Finagle's BackupRequestFilter, a hedge must also fit the retry
        budget (it is extra load all the same), so hedges and retries
        together stay within the retry budget.
        """
        policy = self._hedge_policy
        if policy is None or not self._hedge_budget.can_spend():
            return False
        if not self._retry_budget.try_withdraw():
            return False
        self._hedge_budget.spend()
        if policy.on_fired():
            self._next_hedge_refresh = 0.0  # enough hedges to judge: refresh on the next call
        return True

    # --- retries -----------------------------------------------------------

    def try_acquire_retry(self, attempts_made: int) -> bool:
        """Whether one more attempt is allowed after ``attempts_made``.

        Checks ``max_attempts`` first, then withdraws from the retry budget.
        Gateway still decides whether the error is retryable at all and
        whether the deadline leaves room.
        """
        if attempts_made >= self._config.retry.max_attempts:
            return False
        return self._retry_budget.try_withdraw()

    def backoff(self, attempt: int) -> float:
        """Seconds to sleep before retry number ``attempt`` (1 = first retry).

        Exponential with full jitter: uniform in [base, min(max, base * 2**attempt)].
        """
        retry = self._config.retry
        base = retry.backoff_base_ms / 1000.0
        ceiling = min(retry.backoff_max_ms / 1000.0, base * 2.0 ** min(max(attempt, 1), 32))
        return base + self._random() * (ceiling - base)

    # --- Retry-After ---------------------------------------------------------

    def cool_down(self, target: TargetState, seconds: float) -> None:
        """A throttled answer asked for ``seconds`` of rest: ``target`` is out of picks
        that long (at most ``retry.max_retry_after_s``), traffic goes elsewhere."""
        seconds = min(seconds, self._config.retry.max_retry_after_s)
        if not seconds > 0.0:  # also NaN
            return
        now = self._clock()
        target.cool_down(now + seconds)
        self._regroup(now)

    def ready_in(self, exclude: Collection[TargetState] = ()) -> float:
        """Seconds until a retry has a target that is not cooling down: 0.0 when a
        target outside ``exclude`` takes traffic now, or when no cooldown runs."""
        now = self._clock()
        if now >= self._next_wake:
            self._wake(now)
        if any(s not in exclude for s in self._healthy):
            return 0.0
        if _idle_probe(self._probing, exclude) is not None:
            return 0.0
        ends = [s._cool_until for s in self._targets if s._cool_until > now]
        return min(ends) - now if ends else 0.0

    # --- active health checks ---------------------------------------------

    def due_for_health_check(self, target: TargetState) -> bool:
        """Whether gateway should send ``target`` an active check now."""
        check = self._config.health_check
        return check.enabled and self._clock() - target._last_check >= check.interval_s

    def needs_probe(self, target: TargetState) -> bool:
        """Whether ``target`` is PROBING with no probe in flight.

        Gateway may answer that with an active check instead of waiting for
        a real request to be routed there.
        """
        return target._state is _PROBING and target._outstanding == 0

    def refresh_health(self) -> None:
        """Move targets whose ejection ran out to PROBING now.

        ``pick`` does this on the way; an active health checker calls it so a
        route with no traffic still gets its ejected targets probed.
        """
        now = self._clock()
        if now >= self._next_wake:
            self._wake(now)

    def record_health_check(self, target: TargetState, healthy: bool) -> None:
        """Record an active check: a failure counts like a FAILURE outcome
        (without a latency sample); a success re-admits a PROBING target."""
        now = self._clock()
        target.mark_checked(now)
        if not healthy:
            self._count_failure(target, now)
            return
        target.clear_failures()
        if target._state is _PROBING:
            self._readmit(target, now)

    # --- internals: picking ------------------------------------------------

    def _pick_by_priority(
        self,
        model: str | None,
        exclude: Collection[TargetState],
        reuse_excluded: bool,
        now: float,
    ) -> TargetState | None:
        levels = self._levels
        assert levels is not None
        if self._probing:
            probe = _idle_probe(self._probing, exclude)
            if probe is not None:
                return probe
        level = _take_level(levels, exclude)
        if level is None:
            # The loaded levels hold only tried targets (a hedge or a retry): the
            # first level with an untried up target is the fallback.
            level = next((lv for lv in levels if any(s not in exclude for s in lv.healthy)), None)
        if level is None:
            first = next((lv.healthy for lv in levels if lv.healthy), self._healthy)
            return self._fallback(first, exclude, reuse_excluded, now)
        if model is not None and self._ranker is not None:
            return self._pick_for_model(model, exclude, reuse_excluded, now, level.members)
        candidates = level.candidates(exclude)
        return self._cheapest(candidates, level.healthy, exclude, reuse_excluded, now)

    def _cheapest(
        self,
        candidates: Sequence[TargetState],
        healthy: Sequence[TargetState],
        exclude: Collection[TargetState],
        reuse_excluded: bool,
        now: float,
    ) -> TargetState | None:
        """The least-cost candidate (two random choices past a full scan's size); with
        none, what ``_fallback`` leaves of ``healthy``."""
        count = len(candidates)
        if count > _FULL_SCAN_MAX:
            return self._power_of_two(candidates, count, now)
        if count > 1:
            return _least_cost(candidates, now)
        if count == 1:
            return candidates[0]
        return self._fallback(healthy, exclude, reuse_excluded, now)

    def _pick_for_model(
        self,
        model: str,
        exclude: Collection[TargetState],
        reuse_excluded: bool,
        now: float,
        within: Collection[TargetState] | None = None,
    ) -> TargetState | None:
        assert self._ranker is not None
        wanted = self._mme_preferred
        chosen: list[TargetState] = []
        # Walk the ranking: the first `wanted` healthy targets are the model's
        # preferred set; an ejected one is replaced by the next in rank.
        for state in self._ranker.ranking(model):
            if within is not None and state not in within:
                continue
            health = state._state
            if health is _HEALTHY:
                if (exclude and state in exclude) or state._cool_until > now:
                    continue
                chosen.append(state)
                if len(chosen) >= wanted:
                    break
            elif health is _PROBING and state._outstanding == 0 and state not in exclude:
                return state
        if len(chosen) > 1:
            return _least_cost(chosen, now)
        if chosen:
            return chosen[0]
        preferred = [
            s
            for s in self._ranker.ranking(model)
            if _up(s, now) and (within is None or s in within)
        ][:wanted]
        return self._fallback(preferred, exclude, reuse_excluded, now)

    def _power_of_two(
        self, candidates: Sequence[TargetState], count: int, now: float
    ) -> TargetState:
        rand = self._random
        first = int(rand() * count)
        second = int(rand() * (count - 1))
        if second >= first:
            second += 1
        a, b = candidates[first], candidates[second]
        return a if _cost(a, now) <= _cost(b, now) else b

    def _fallback(
        self,
        healthy: Sequence[TargetState],
        exclude: Collection[TargetState],
        reuse_excluded: bool,
        now: float,
    ) -> TargetState | None:
        # Every healthy candidate is excluded.
        if healthy:
            return _least_cost(healthy, now) if reuse_excluded else None
        # No healthy target at all: the ejection invariant makes this
        # unreachable, but if it ever broke, serving beats refusing (Envoy's
        # panic mode): take the least loaded target whatever its state.
        pool = (
            list(self._targets)
            if reuse_excluded
            else [s for s in self._targets if s not in exclude]
        )
        return _least_cost(pool, now) if pool else None

    # --- internals: health -------------------------------------------------

    def _record_failure(self, target: TargetState, elapsed: float, now: float) -> None:
        target.record_failed_latency(elapsed, now, self._failure_floor(target))
        self._count_failure(target, now)

    def _failure_floor(self, target: TargetState) -> float:
        """The least a failure of ``target`` counts as: the fastest latency of the
        route's other up targets, so a failing target never looks cheaper than one
        that answers (peak-EWMA would send it more calls for failing fast)."""
        fastest = math.inf
        for state in self._healthy:
            ewma = state._ewma
            if ewma and ewma < fastest and state is not target:
                fastest = ewma
        if fastest < math.inf:
            return fastest
        return 0.0 if target._ewma else _UNKNOWN_FAILURE_S

    def _count_failure(self, target: TargetState, now: float) -> None:
        health = target._state
        if health is _EJECTED:
            return  # a late answer from before the ejection: already handled
        if health is _PROBING:
            self._eject(target, now)  # the probe failed: out again, for longer
            return
        target.count_failure(now, self._window_s)
        if target.failing(now, self._config.ejection) and self._may_eject(target):
            self._eject(target, now)

    def _may_eject(self, target: TargetState) -> bool:
        """Within ``max_ejected_share`` (per priority level when there are levels), and
        never the route's last healthy target."""
        if self._max_out == 0:
            return False
        level = self._level_of.get(target)
        if level is None:
            return self._out_of_rotation(self._targets) < self._max_out
        share = self._config.ejection.max_ejected_share
        cap = min(len(level.members), max(1, int(share * len(level.members))))
        others_up = any(s._state is _HEALTHY for s in self._targets if s is not target)
        return others_up and self._out_of_rotation(level.members) < cap

    @staticmethod
    def _out_of_rotation(targets: Sequence[TargetState]) -> int:
        # Ejected or probing; a Retry-After cooldown is no ejection.
        return sum(1 for s in targets if s._state is not _HEALTHY)

    def _eject(self, target: TargetState, now: float) -> None:
        target.eject(now, self._config.ejection, self._random())
        self._regroup(now)
        self._tell(target)

    def _readmit(self, target: TargetState, now: float, probe_latency: float | None = None) -> None:
        target.readmit(now, probe_latency)
        self._regroup(now)
        self._tell(target)

    def _tell(self, target: TargetState) -> None:
        observer = self._observer
        if observer is not None:
            observer(self, target)

    def _on_late_success(self, target: TargetState, elapsed: float, now: float) -> None:
        if target._state is _PROBING:
            # The probe answered: its latency, not the stale pre-ejection
            # EWMA, is what we know about this target now.
            self._readmit(target, now, elapsed)
        # EJECTED: an answer to a request sent before the ejection; the
        # ejection stands until its time is up.

    def _wake(self, now: float) -> None:
        for state in self._targets:
            state.start_probing_if_due(now)
        self._regroup(now)

    def _regroup(self, now: float) -> None:
        # Rebuilt on state changes only (rare), so pick can read plain lists.
        targets = self._targets
        self._healthy = [s for s in targets if _up(s, now)]
        self._probing = [s for s in targets if s._state is _PROBING]
        if self._classes is not None:
            for weight_class in self._classes:
                weight_class.regroup(now)
        if self._levels is not None:
            self._regroup_levels(now)
        wakes = [s._ejected_until for s in targets if s._state is _EJECTED]
        wakes.extend(s._cool_until for s in targets if s._cool_until > now)
        self._next_wake = min(wakes, default=math.inf)

    def _regroup_levels(self, now: float) -> None:
        levels = self._levels
        assert levels is not None
        for level in levels:
            level.regroup(now)
        _spread(levels, self._config.overprovisioning_factor)
        # A probe goes out from a level that takes calls or comes before one that
        # does (it is recovering); a fallback left idle waits until it is needed.
        loaded = [index for index, level in enumerate(levels) if level.load > 0.0]
        deepest = loaded[-1] if loaded else len(levels) - 1
        allowed = {s for level in levels[: deepest + 1] for s in level.members}
        self._probing = [s for s in self._probing if s in allowed]

    # --- internals: hedging ------------------------------------------------

    def _refresh_hedge_delay(self, now: float) -> None:
        policy = self._hedge_policy
        assert policy is not None
        refresh_s = self._config.hedge.refresh_s
        delay = self._hedge_delay = policy.refresh(now)
        # While warming up, or while no tail is seen, look again soon: a tail
        # that appears should be hedged within a fraction of a second.
        if delay is None or policy.warming_up:
            refresh_s = min(refresh_s, _WARMUP_REFRESH_S)
        self._next_hedge_refresh = now + refresh_s


def _idle_probe(
    probing: Sequence[TargetState], exclude: Collection[TargetState]
) -> TargetState | None:
    for state in probing:
        if state._outstanding == 0 and not (exclude and state in exclude):
            return state
    return None


def _max_out_of_rotation(targets: int, share: float) -> int:
    """How many targets may be ejected or probing at once.

    ``share`` of them rounded down, but at least one once there are two
    targets (so a small route can still shed a bad one), and never all.
    ``share == 0`` disables ejection.
    """
    if targets < 2 or share <= 0:
        return 0
    return min(targets - 1, max(1, int(share * targets)))
