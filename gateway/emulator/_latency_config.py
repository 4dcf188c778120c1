"""The ``latency`` table: of an endpoint, an inference router or a Global Inference Gateway."""

from __future__ import annotations

from gateway._config.reader import section, setting

__all__ = ["LatencyConfig"]


@section("latency")
class LatencyConfig:
    base_ms: float = setting(default=0.0, ge=0)
    jitter_ms: float = setting(default=0.0, ge=0)  # uniform in [-jitter, +jitter], floored at 0
    tail_share: float = setting(default=0.0, ge=0, le=1)  # probability of a tail_ms longer answer
    tail_ms: float = setting(default=0.0, ge=0)
