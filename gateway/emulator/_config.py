"""Emulator configuration: ``EmulatorConfig.from_dict`` takes the shape of the TOML file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, fields
from pathlib import Path
from typing import Any, Literal

from gateway._config.reader import fail, http_url, load_toml, read, section, setting
from gateway.emulator._errors import ERROR_CODES
from gateway.emulator._latency_config import LatencyConfig
from gateway.emulator._runtime_config import GlobalInferenceGatewayConfig, InferenceRouterConfig
from gateway.errors import ConfigError

# The limits on a request body of an inference router (6 MB) and a Global Inference
# Gateway (10 MiB).
ROUTER_MAX_BODY = 6 * 1024 * 1024
GLOBAL_GATEWAY_MAX_BODY = 10 * 1024 * 1024


@section("model")
class ModelConfig:
    type: Literal["echo", "constant", "xgboost", "container"] = "echo"
    body: bytes = b""  # constant
    content_type: str = "application/json"  # constant
    # container: the base URL of a SageMaker-contract container, and its timeout
    url: str | None = setting(default=None, check=http_url)
    timeout_s: float = setting(default=60.0, ge=0)
    # The whole table as given: the xgboost loader reads its own keys.
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type == "container" and self.url is None:
            raise fail(self, "url", "required for a container model")


def _model(value: Any, key: str) -> Any:
    if not isinstance(value, Mapping):
        return value
    # xgboost options belong to its loader; the other types are checked here.
    known = {item.name for item in fields(ModelConfig)} - {"options"}
    own = {k: v for k, v in value.items() if k in known or value.get("type") != "xgboost"}
    return read(ModelConfig, own, key, options=dict(value))


@section()
class VariantConfig:
    name: str = "AllTraffic"
    weight: float = setting(default=1.0, ge=0)


@section("mme")
class MmeConfig:
    models: tuple[str, ...] = ()
    allow_any: bool = False
    cold_load_ms: float = setting(default=200.0, ge=0)
    max_loaded: int = setting(default=4, ge=1)
    # Answer 429 ModelNotReadyException to calls that arrive while their
    # model is still loading, instead of letting them wait for the load.
    not_ready_if_loading: bool = False

    def __post_init__(self) -> None:
        if not self.models and not self.allow_any:
            raise fail(self, "models", "list the models or set allow_any = true")


@section("faults")
class FaultConfig:
    error_rates: Mapping[str, float] = setting(factory=dict, ge=0, le=1)
    # Abort the connection with RST, no answer; hold the answer stall_ms longer.
    reset_rate: float = setting(default=0.0, ge=0, le=1)
    stall_rate: float = setting(default=0.0, ge=0, le=1)
    stall_ms: float = setting(default=1000.0, ge=0)
    # Response streams: probability of a ModelStreamError after the first part.
    stream_error_rate: float = setting(default=0.0, ge=0, le=1)
    # ...and the ErrorCode that event carries (SageMaker's: StreamBroken,
    # ModelInvocationTimeExceeded).
    stream_error_code: str = "StreamBroken"

    def __post_init__(self) -> None:
        for code in self.error_rates:
            if code not in ERROR_CODES:
                choices = ", ".join(ERROR_CODES)
                raise fail(self, f"error_rates.{code}", f"unknown error; one of {choices}")
        if sum(self.error_rates.values()) > 1.0:
            raise fail(self, "error_rates", "the rates add up to more than 1")


def _endpoint_name(name: str) -> None:
    if len(name) > 63 or not all(c.isalnum() or c == "-" for c in name):
        raise ValueError(f"endpoint names are 1-63 letters, digits and '-', got {name!r}")


@section(lambda endpoint: f"endpoints.{endpoint.name}")
class EndpointConfig:
    name: str = setting(check=_endpoint_name)
    model: ModelConfig = setting(factory=ModelConfig, before=_model)
    variants: tuple[VariantConfig, ...] = (VariantConfig(),)
    mme: MmeConfig | None = None
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    # Response streams split the answer into this many events, this far apart.
    stream_parts: int = setting(default=3, ge=1)
    stream_interval_ms: float = setting(default=0.0, ge=0)

    def __post_init__(self) -> None:
        names = [variant.name for variant in self.variants]
        if not names:
            raise fail(self, "variants", "must list at least one variant")
        for index, name in enumerate(names):
            if name in names[:index]:
                raise fail(self, f"variants[{index}].name", f"duplicate variant {name!r}")
        if sum(variant.weight for variant in self.variants) <= 0:
            raise fail(self, "variants", "the weights must not all be 0")


@section("auth")
class AuthConfig:
    # access key id -> secret key. Empty: accept any well-formed signature.
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    # With no credentials, whether unsigned requests are refused.
    required: bool = True
    max_skew_s: float = setting(default=300.0, ge=0)
    # Host names a signature may name besides this machine's own names and
    # addresses (e.g. a DNS name clients use to reach the emulator).
    hosts: tuple[str, ...] = ()


@section()
class EmulatorConfig:
    endpoints: Mapping[str, EndpointConfig] = field(default_factory=dict)
    auth: AuthConfig = field(default_factory=AuthConfig)
    seed: int | None = None
    account_id: str = "123456789012"
    region: str = "us-east-1"
    max_body_size: int = setting(default=6 * 1024 * 1024, ge=1)  # SageMaker's 6 MB payload limit
    inference_routers: Mapping[str, InferenceRouterConfig] = field(default_factory=dict)
    global_inference_gateways: Mapping[str, GlobalInferenceGatewayConfig] = field(
        default_factory=dict
    )

    def __post_init__(self) -> None:
        for router in self.inference_routers.values():
            for target in router.routing_targets.values():
                for index, destination in enumerate(target.destinations):
                    if destination.endpoint not in self.endpoints:
                        key = (
                            f"inference_routers.{router.name}.routing_targets.{target.name}"
                            f".destinations[{index}].endpoint"
                        )
                        raise ConfigError.at(key, f"no endpoint {destination.endpoint!r}")

    def server_body_limit(self) -> int:
        """The HTTP server's cap on a body: 1 MiB past the largest runtime limit, so a body
        a little over a runtime's limit gets that runtime's own typed 413 (an inference
        router's over 6 MB, a Global Inference Gateway's over 10 MiB); SageMaker Runtime's
        limit (``max_body_size``) is then checked by the service, with the same answer."""
        limits = [self.max_body_size]
        if self.inference_routers:
            limits.append(ROUTER_MAX_BODY + 1024 * 1024)
        if self.global_inference_gateways:
            limits.append(GLOBAL_GATEWAY_MAX_BODY + 1024 * 1024)
        return max(limits)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EmulatorConfig:
        return read(cls, data, "")

    @classmethod
    def from_toml(cls, path: str | Path) -> EmulatorConfig:
        return cls.from_dict(load_toml(path))

    @classmethod
    def default(cls, seed: int | None = None) -> EmulatorConfig:
        """Endpoints for demos and tests (echo, constant, mme, bid-filter, bid-filter-eu, slow,
        flaky), the inference router bid-router and the Global Inference Gateway demo."""
        data = load_toml(Path(__file__).with_name("data") / "default.toml")
        return cls.from_dict(data if seed is None else {**data, "seed": seed})
