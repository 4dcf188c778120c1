"""Configuration of the emulated inference routers and Global Inference Gateways.

::

    [inference_routers.bid-router]            # region: the emulator's unless given
    [inference_routers.bid-router.routing_targets.bid-filter]
    destinations = [
      { endpoint = "bid-filter" },                          # in the router's Region
      { endpoint = "bid-filter-eu", region = "eu-west-1" }, # in another simulated Region
    ]

    [global_inference_gateways.demo]          # the GatewayId
    models = ["echo"]
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import field
from typing import Literal

from gateway._config.reader import fail, section, setting
from gateway.emulator._latency_config import LatencyConfig

__all__ = [
    "GATEWAY_OWN_ERROR_CODES",
    "GATEWAY_PREFIX",
    "ROUTER_ERROR_CODES",
    "ROUTER_PREFIX",
    "RUNTIMES_CONTROL_PREFIX",
    "RUNTIME_PREFIXES",
    "DestinationConfig",
    "GlobalGatewayFaultConfig",
    "GlobalInferenceGatewayConfig",
    "InferenceRouterConfig",
    "RouterFaultConfig",
    "RoutingTargetConfig",
]

# The paths of the two runtimes, and of their control API.
ROUTER_PREFIX = "/inference-routers/"
GATEWAY_PREFIX = "/global-inference-gateway/"
RUNTIMES_CONTROL_PREFIX = "/_emulator/runtimes/"
RUNTIME_PREFIXES = (ROUTER_PREFIX, GATEWAY_PREFIX, RUNTIMES_CONTROL_PREFIX)

_RESOURCE_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")
_GATEWAY_ID = re.compile(r"[a-z0-9]+")

# The router's modeled errors (sagemaker-inference-router-runtime) and their status.
ROUTER_ERROR_CODES: dict[str, int] = {
    "ValidationException": 400,
    "AccessDeniedException": 403,
    "RequestTimeoutException": 408,
    "ModelError": 424,
    "ThrottlingException": 429,
    "ModelNotReadyException": 429,
    "InternalFailure": 500,
    "ServiceUnavailableException": 503,
    "InternalDependencyException": 530,
}

# The Global Inference Gateway's own errors (message prefix "Global Inference Gateway:").
GATEWAY_OWN_ERROR_CODES: dict[str, int] = {
    "AccessDeniedException": 403,
    "ThrottlingException": 429,
    "InternalServerException": 500,
    "BadGatewayException": 502,
    "ServiceUnavailableException": 503,
    "GatewayTimeoutException": 504,
}


def _resource_name(name: str) -> None:
    if len(name) > 63 or not _RESOURCE_NAME.fullmatch(name):
        raise ValueError(f"names are 1-63 letters, digits and inner '-', got {name!r}")


def _gateway_id(name: str) -> None:
    if len(name) > 64 or not _GATEWAY_ID.fullmatch(name):
        raise ValueError(f"gateway ids are 1-64 lowercase letters and digits, got {name!r}")


def _rates(rates: Mapping[str, float], known: Mapping[str, object], where: object) -> None:
    for code in rates:
        if code not in known:
            raise fail(where, f"error_rates.{code}", f"unknown error; one of {', '.join(known)}")
    if sum(rates.values()) > 1.0:
        raise fail(where, "error_rates", "the rates add up to more than 1")


@section()
class DestinationConfig:
    """One destination of a routing target: an emulator endpoint, placed in a Region."""

    endpoint: str = setting(check=_resource_name)
    region: str | None = None  # the router's Region unless given
    account_id: str | None = None  # the emulator's account unless given
    # Served by this inference component on the endpoint (the ARN is the component's).
    inference_component: str | None = setting(default=None, check=_resource_name)
    # Requests it takes at once (0: no limit); past it the router looks elsewhere.
    max_in_flight: int = setting(default=0, ge=0)
    # An unhealthy destination is passed over while another can take the request.
    healthy: bool = True


@section(lambda target: f"routing_targets.{target.name}")
class RoutingTargetConfig:
    name: str = setting(check=_resource_name)
    destinations: tuple[DestinationConfig, ...] = ()
    # "async": for InvokeInferenceRouterAsync only; "real-time": InvokeInferenceRouter only.
    mode: Literal["real-time", "async"] = "real-time"

    def __post_init__(self) -> None:
        if not self.destinations:
            raise fail(self, "destinations", "must list at least one destination")


@section("faults")
class RouterFaultConfig:
    """Errors the router answers itself, before any destination (codes: ROUTER_ERROR_CODES)."""

    error_rates: Mapping[str, float] = setting(factory=dict, ge=0, le=1)
    # Retry-After (seconds) on the router's own ThrottlingException.
    retry_after_s: int = setting(default=1, ge=0)

    def __post_init__(self) -> None:
        _rates(self.error_rates, ROUTER_ERROR_CODES, self)


@section(lambda router: f"inference_routers.{router.name}")
class InferenceRouterConfig:
    name: str = setting(check=_resource_name)
    region: str | None = None  # the emulator's Region unless given
    routing_targets: Mapping[str, RoutingTargetConfig] = field(default_factory=dict)
    # Each attempt's limit (AWS: 60 s); an attempt past it is not retried: 503.
    attempt_timeout_s: float = setting(default=60.0, gt=0)
    faults: RouterFaultConfig = field(default_factory=RouterFaultConfig)


@section("faults")
class GlobalGatewayFaultConfig:
    """Failures of a Global Inference Gateway, drawn per request."""

    # The gateway's own errors ("Global Inference Gateway: ..."): GATEWAY_OWN_ERROR_CODES.
    error_rates: Mapping[str, float] = setting(factory=dict, ge=0, le=1)
    # Error statuses of the inference gateway behind it ("inference gateway: <status> ..."),
    # keyed by status, e.g. {"429" = 0.1, "503" = 0.05}.
    upstream_error_rates: Mapping[str, float] = setting(factory=dict, ge=0, le=1)
    # The component an upstream error names: "inference gateway (<component>): ...".
    upstream_component: Literal["", "config", "scheduler", "model selector", "model server"] = ""
    # Streams: probability of a failure event after the first part, and which: AWS sends
    # InternalStreamFailure; ModelStreamError is modeled but reserved (not sent today).
    stream_failure_rate: float = setting(default=0.0, ge=0, le=1)
    stream_failure_event: Literal["InternalStreamFailure", "ModelStreamError"] = (
        "InternalStreamFailure"
    )
    # Retry-After (seconds) on a 429.
    retry_after_s: int = setting(default=1, ge=0)

    def __post_init__(self) -> None:
        _rates(self.error_rates, GATEWAY_OWN_ERROR_CODES, self)
        for status in self.upstream_error_rates:
            if not (status.isdigit() and 400 <= int(status) <= 599):
                raise fail(self, f"upstream_error_rates.{status}", "must be a 4xx or 5xx status")
        if sum(self.error_rates.values()) + sum(self.upstream_error_rates.values()) > 1.0:
            raise fail(self, "upstream_error_rates", "the rates add up to more than 1")


@section(lambda gateway: f"global_inference_gateways.{gateway.name}")
class GlobalInferenceGatewayConfig:
    name: str = setting(check=_gateway_id)  # the GatewayId
    # Chat models it serves; each answers by echoing the last message (OpenAI's format).
    models: tuple[str, ...] = ("echo",)
    # Served, but with no capacity now: 503 ServiceUnavailableException.
    unavailable_models: tuple[str, ...] = ()
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    faults: GlobalGatewayFaultConfig = field(default_factory=GlobalGatewayFaultConfig)
    # Streamed answers: one PayloadPart per SSE event, this far apart.
    stream_interval_ms: float = setting(default=0.0, ge=0)
