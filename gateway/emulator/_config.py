"""Emulator configuration: TOML or a dict, validated with errors naming the key.

A configuration is a tree of frozen dataclasses; ``EmulatorConfig.from_dict``
accepts the same shape as the TOML file, so tests can write either.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "ERROR_CODES",
    "AuthConfig",
    "ConfigError",
    "EmulatorConfig",
    "EndpointConfig",
    "FaultConfig",
    "LatencyConfig",
    "MmeConfig",
    "ModelConfig",
    "VariantConfig",
]

# Errors that fault injection may produce, with SageMaker's HTTP status.
ERROR_CODES: dict[str, int] = {
    "ValidationError": 400,
    "ThrottlingException": 400,
    "ModelError": 424,
    "ModelNotReadyException": 429,
    "InternalFailure": 500,
    "ServiceUnavailable": 503,
    "InternalDependencyException": 530,
}

MODEL_TYPES = ("echo", "constant", "xgboost", "container")


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range; names the key."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    type: str = "echo"
    body: bytes = b""  # constant
    content_type: str = "application/json"  # constant
    url: str = ""  # container: base URL of a SageMaker-contract container
    timeout_s: float = 60.0  # container
    # The whole table as given: the xgboost loader reads its own keys.
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VariantConfig:
    name: str = "AllTraffic"
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class MmeConfig:
    models: tuple[str, ...] = ()
    allow_any: bool = False
    cold_load_ms: float = 200.0
    max_loaded: int = 4
    # Answer 429 ModelNotReadyException to calls that arrive while their
    # model is still loading, instead of letting them wait for the load.
    not_ready_if_loading: bool = False


@dataclass(frozen=True, slots=True)
class LatencyConfig:
    base_ms: float = 0.0
    jitter_ms: float = 0.0  # uniform in [-jitter, +jitter], floored at 0
    tail_share: float = 0.0  # probability that a response is stalled tail_ms more
    tail_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class FaultConfig:
    error_rates: Mapping[str, float] = field(default_factory=dict)
    reset_rate: float = 0.0  # abort the connection with RST, no answer
    stall_rate: float = 0.0  # hold the answer stall_ms longer
    stall_ms: float = 1000.0
    # Response streams: probability of a ModelStreamError after the first part.
    stream_error_rate: float = 0.0


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    name: str
    model: ModelConfig = field(default_factory=ModelConfig)
    variants: tuple[VariantConfig, ...] = (VariantConfig(),)
    mme: MmeConfig | None = None
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    stream_parts: int = 3  # response streams split the answer into this many events
    stream_interval_ms: float = 0.0  # pause between stream events


@dataclass(frozen=True, slots=True)
class AuthConfig:
    # access key id -> secret key. Empty: accept any well-formed signature.
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    # With no credentials, whether unsigned requests are refused.
    required: bool = True
    max_skew_s: float = 300.0


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    endpoints: Mapping[str, EndpointConfig] = field(default_factory=dict)
    auth: AuthConfig = field(default_factory=AuthConfig)
    seed: int | None = None
    account_id: str = "123456789012"
    region: str = "us-east-1"
    max_body_size: int = 6 * 1024 * 1024  # SageMaker's 6 MB payload limit

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EmulatorConfig:
        return _parse_root(data)

    @classmethod
    def from_toml(cls, path: str | Path) -> EmulatorConfig:
        try:
            with open(path, "rb") as file:
                data = tomllib.load(file)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        return _parse_root(data)

    @classmethod
    def default(cls, seed: int | None = None) -> EmulatorConfig:
        """Endpoints for demos and tests: echo, constant, mme, bid-filter, slow, flaky."""
        return _parse_root({"seed": seed, "endpoints": _DEFAULT_ENDPOINTS})

    def with_endpoint(self, endpoint: EndpointConfig) -> EmulatorConfig:
        endpoints = dict(self.endpoints)
        endpoints[endpoint.name] = endpoint
        return replace(self, endpoints=endpoints)


_DEFAULT_ENDPOINTS: dict[str, Any] = {
    "echo": {"model": {"type": "echo"}},
    "constant": {
        "model": {"type": "constant", "body": '{"score": 0.5}', "content_type": "application/json"}
    },
    "mme": {
        "model": {"type": "echo"},
        "mme": {
            "models": ["model-a.tar.gz", "model-b.tar.gz", "model-c.tar.gz", "model-d.tar.gz"],
            "cold_load_ms": 200,
            "max_loaded": 2,
        },
    },
    "bid-filter": {
        "model": {"type": "xgboost"},
        "latency": {"base_ms": 1.0, "jitter_ms": 0.2},
    },
    "slow": {
        "model": {"type": "echo"},
        "latency": {"base_ms": 20.0, "jitter_ms": 5.0, "tail_share": 0.05, "tail_ms": 200.0},
    },
    "flaky": {
        "model": {"type": "echo"},
        "variants": [{"name": "primary", "weight": 0.8}, {"name": "canary", "weight": 0.2}],
        "latency": {"base_ms": 2.0, "jitter_ms": 0.5, "tail_share": 0.02, "tail_ms": 50.0},
        "faults": {
            "error_rates": {"InternalFailure": 0.05, "ServiceUnavailable": 0.02},
            "reset_rate": 0.01,
        },
    },
}


# -- parsing ----------------------------------------------------------------


class _Table:
    """A mapping being read: typed getters, and unknown keys reported."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a table, got {type(data).__name__}")
        self.data: Mapping[str, Any] = data
        self.where = where
        self._seen: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def get(self, name: str) -> Any:
        self._seen.add(name)
        return self.data.get(name)

    def number(
        self, name: str, default: float, low: float = 0.0, high: float | None = None
    ) -> float:
        value = self.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{self.key(name)}: expected a number, got {value!r}")
        # TOML has nan and inf: neither is a usable latency, rate or size.
        if not math.isfinite(value):
            raise ConfigError(f"{self.key(name)}: must be a finite number, got {value!r}")
        if value < low or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise ConfigError(f"{self.key(name)}: must be {bounds}, got {value!r}")
        return float(value)

    def integer(self, name: str, default: int, low: int = 0) -> int:
        value = self.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{self.key(name)}: expected an integer >= {low}, got {value!r}")
        return value

    def string(self, name: str, default: str) -> str:
        value = self.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise ConfigError(f"{self.key(name)}: expected a string, got {value!r}")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self.key(name)}: expected true or false, got {value!r}")
        return value

    def table(self, name: str) -> _Table | None:
        value = self.get(name)
        return None if value is None else _Table(value, self.key(name))

    def done(self, allow_extra: bool = False) -> None:
        unknown = sorted(set(self.data) - self._seen)
        if unknown and not allow_extra:
            raise ConfigError(f"{self.key(unknown[0])}: unknown key")


def _parse_root(data: Mapping[str, Any]) -> EmulatorConfig:
    root = _Table(data, "")
    seed = root.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed: expected an integer, got {seed!r}")
    endpoints_table = root.table("endpoints")
    endpoints: dict[str, EndpointConfig] = {}
    if endpoints_table is not None:
        for name in endpoints_table.data:
            endpoints[name] = _parse_endpoint(name, endpoints_table.get(name))
    auth_table = root.table("auth")
    config = EmulatorConfig(
        endpoints=endpoints,
        auth=_parse_auth(auth_table) if auth_table else AuthConfig(),
        seed=seed,
        account_id=root.string("account_id", "123456789012"),
        region=root.string("region", "us-east-1"),
        max_body_size=root.integer("max_body_size", 6 * 1024 * 1024, low=1),
    )
    root.done()
    return config


def _parse_auth(table: _Table) -> AuthConfig:
    credentials_table = table.table("credentials")
    credentials: dict[str, str] = {}
    if credentials_table is not None:
        for access_key in credentials_table.data:
            credentials[access_key] = credentials_table.string(access_key, "")
            if not credentials[access_key]:
                raise ConfigError(f"{credentials_table.key(access_key)}: empty secret")
    auth = AuthConfig(
        credentials=credentials,
        required=table.boolean("required", True),
        max_skew_s=table.number("max_skew_s", 300.0),
    )
    table.done()
    return auth


def _parse_endpoint(name: str, data: object) -> EndpointConfig:
    where = f"endpoints.{name}"
    if not name or len(name) > 63 or not all(c.isalnum() or c == "-" for c in name):
        raise ConfigError(f"{where}: endpoint names are 1-63 letters, digits and '-'")
    table = _Table(data, where)
    model_table = table.table("model")
    mme_table = table.table("mme")
    latency_table = table.table("latency")
    faults_table = table.table("faults")
    endpoint = EndpointConfig(
        name=name,
        model=_parse_model(model_table) if model_table else ModelConfig(),
        variants=_parse_variants(table.get("variants"), table.key("variants")),
        mme=_parse_mme(mme_table) if mme_table else None,
        latency=parse_latency(latency_table) if latency_table else LatencyConfig(),
        faults=parse_faults(faults_table) if faults_table else FaultConfig(),
        stream_parts=table.integer("stream_parts", 3, low=1),
        stream_interval_ms=table.number("stream_interval_ms", 0.0),
    )
    table.done()
    return endpoint


def _parse_model(table: _Table) -> ModelConfig:
    kind = table.string("type", "echo")
    if kind not in MODEL_TYPES:
        raise ConfigError(f"{table.key('type')}: one of {', '.join(MODEL_TYPES)}; got {kind!r}")
    body = table.get("body")
    if body is not None and not isinstance(body, str | bytes):
        raise ConfigError(f"{table.key('body')}: expected a string, got {body!r}")
    model = ModelConfig(
        type=kind,
        body=body.encode() if isinstance(body, str) else (body or b""),
        content_type=table.string("content_type", "application/json"),
        url=table.string("url", ""),
        timeout_s=table.number("timeout_s", 60.0),
        options=dict(table.data),
    )
    if kind == "container" and not model.url:
        raise ConfigError(f"{table.key('url')}: required for a container model")
    # xgboost options belong to its loader; the other types are checked here.
    table.done(allow_extra=kind == "xgboost")
    return model


def _parse_variants(value: object, where: str) -> tuple[VariantConfig, ...]:
    if value is None:
        return (VariantConfig(),)
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: expected a non-empty list of tables")
    variants: list[VariantConfig] = []
    for index, item in enumerate(value):
        table = _Table(item, f"{where}[{index}]")
        variant = VariantConfig(
            name=table.string("name", "AllTraffic"), weight=table.number("weight", 1.0)
        )
        table.done()
        if any(existing.name == variant.name for existing in variants):
            raise ConfigError(f"{table.key('name')}: duplicate variant {variant.name!r}")
        variants.append(variant)
    if sum(variant.weight for variant in variants) <= 0:
        raise ConfigError(f"{where}: the weights must not all be 0")
    return tuple(variants)


def _parse_mme(table: _Table) -> MmeConfig:
    models = table.get("models")
    if models is not None and (
        not isinstance(models, list) or not all(isinstance(m, str) for m in models)
    ):
        raise ConfigError(f"{table.key('models')}: expected a list of strings")
    mme = MmeConfig(
        models=tuple(models or ()),
        allow_any=table.boolean("allow_any", False),
        cold_load_ms=table.number("cold_load_ms", 200.0),
        max_loaded=table.integer("max_loaded", 4, low=1),
        not_ready_if_loading=table.boolean("not_ready_if_loading", False),
    )
    table.done()
    if not mme.models and not mme.allow_any:
        raise ConfigError(f"{table.key('models')}: list the models or set allow_any = true")
    return mme


def parse_latency(table: _Table) -> LatencyConfig:
    latency = LatencyConfig(
        base_ms=table.number("base_ms", 0.0),
        jitter_ms=table.number("jitter_ms", 0.0),
        tail_share=table.number("tail_share", 0.0, high=1.0),
        tail_ms=table.number("tail_ms", 0.0),
    )
    table.done()
    return latency


def parse_faults(table: _Table) -> FaultConfig:
    rates_table = table.table("error_rates")
    rates: dict[str, float] = {}
    if rates_table is not None:
        for code in rates_table.data:
            if code not in ERROR_CODES:
                raise ConfigError(
                    f"{rates_table.key(code)}: unknown error; one of {', '.join(ERROR_CODES)}"
                )
            rates[code] = rates_table.number(code, 0.0, high=1.0)
        if sum(rates.values()) > 1.0:
            raise ConfigError(f"{rates_table.where}: the rates add up to more than 1")
    faults = FaultConfig(
        error_rates=rates,
        reset_rate=table.number("reset_rate", 0.0, high=1.0),
        stall_rate=table.number("stall_rate", 0.0, high=1.0),
        stall_ms=table.number("stall_ms", 1000.0),
        stream_error_rate=table.number("stream_error_rate", 0.0, high=1.0),
    )
    table.done()
    return faults


def faults_from_dict(data: Mapping[str, Any], where: str = "faults") -> FaultConfig:
    return parse_faults(_Table(data, where))


def latency_from_dict(data: Mapping[str, Any], where: str = "latency") -> LatencyConfig:
    return parse_latency(_Table(data, where))
