"""The pre-filter's keep/drop policy: the ``[rtb]`` table's threshold keys.

A config section (read and checked like every other) kept apart from
``filter``, which mypyc compiles: the config reader reads a section's
annotations, which a compiled class does not keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gateway._config.reader import section, setting
from gateway.rtb.request import BidRequest
from gateway.rtb.rules import Rule

__all__ = ["SEGMENT_DIMENSIONS", "FilterPolicy"]

# Segment dimensions a threshold can be set on, and how each is read.
SEGMENT_DIMENSIONS: Final = ("format", "country", "channel", "device")


def _segment_value(request: BidRequest, dimension: str) -> str | None:
    if dimension == "format":
        return request.imp[0].kind
    if dimension == "channel":
        return "site" if request.site is not None else "app" if request.app is not None else None
    device = request.device
    if device is None:
        return None
    if dimension == "country":
        return device.geo.country if device.geo is not None else None
    return str(device.devicetype) if device.devicetype is not None else None


def _dimensions(segments: Mapping[str, object]) -> None:
    unknown = sorted(set(segments) - set(SEGMENT_DIMENSIONS))
    if unknown:
        allowed = ", ".join(SEGMENT_DIMENSIONS)
        raise ValueError(f"unknown segment dimension {unknown[0]!r} (allowed: {allowed})")


@section("rtb")
class FilterPolicy:
    """Keep/drop rules.

    The threshold is the first match of: `route_thresholds[route]`, then
    each dimension of `segment_thresholds` in its order (e.g.
    ``{"format": {"video": 0.005}, "country": {"USA": 0.02}}``; dimensions
    are format, country, channel (site/app), device (OpenRTB devicetype)),
    then `threshold`. `explore_share` of below-threshold requests are kept
    anyway (a seeded draw) so the model keeps seeing what it would drop.
    `shadow` scores and records but never drops.

    `rules` (``[rtb.rules.<name>]``, see `gateway.rtb.rules`) are tried in
    order before any scoring: the first that matches drops the request,
    keeps it unscored, or has it scored against a threshold of its own
    (which wins over the thresholds above). In shadow mode a rule's drop is
    kept too.
    """

    threshold: float = setting(default=0.01, ge=0, le=1)
    route_thresholds: Mapping[str, float] = setting(factory=dict, ge=0, le=1)
    segment_thresholds: Mapping[str, Mapping[str, float]] = setting(
        factory=dict, ge=0, le=1, check=_dimensions
    )
    explore_share: float = setting(default=0.0, ge=0, le=1)
    shadow: bool = False
    seed: int | None = setting(default=None, ge=0)
    rules: Mapping[str, Rule] = setting(factory=dict)

    def threshold_for(self, request: BidRequest | None, route: str | None = None) -> float:
        """The threshold that applies to `request` (sent on `route`).

        `request` is only read for segment thresholds: None will do without them.
        """
        if route is not None and route in self.route_thresholds:
            return self.route_thresholds[route]
        if self.segment_thresholds:
            if request is None:
                raise ValueError("segment thresholds need the request")
            for dimension, by_value in self.segment_thresholds.items():
                value = _segment_value(request, dimension)
                if value is not None and value in by_value:
                    return by_value[value]
        return self.threshold
