"""Gateway configuration: one TOML file, the same keys as the constructor.

Every value is validated when the config is built, and an error names the
key that is wrong (``pool.max_connections: must be an integer >= 1``).
Secrets never appear in ``repr``.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from gateway._signing import Credentials
from gateway._transport import TransportOptions
from gateway.errors import ConfigError

__all__ = ["GatewayConfig", "PoolConfig"]

# Sections owned by other parts; validated there (routing, cache, sidecar, rtb).
_DELEGATED_SECTIONS = ("routes", "cache", "sidecar", "rtb")


def _reject_unknown(section: str, mapping: Mapping[str, Any], allowed: set[str]) -> None:
    for key in mapping:
        if key not in allowed:
            where = f"{section}.{key}" if section else key
            raise ConfigError(f"{where}: unknown key (allowed: {', '.join(sorted(allowed))})")


def number_setting(
    where: str,
    value: Any,
    *,
    minimum: float = 0.0,
    maximum: float | None = None,
    integer: bool = False,
) -> Any:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise ConfigError(f"{where}: must be {kind}, got {value!r}")
    # TOML has nan and inf; neither is a usable timeout or size.
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: must be a finite number, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{where}: must be {kind} >= {minimum:g}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{where}: must be {kind} <= {maximum:g}, got {value!r}")
    return value


# Linux's limits for TCP_KEEPIDLE / TCP_KEEPINTVL (seconds) and TCP_KEEPCNT.
_KEEPALIVE_MAX = {"keepalive_idle_s": 32767, "keepalive_interval_s": 32767, "keepalive_count": 127}
# AWS region names, as botocore validates them.
_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")


@dataclass(frozen=True, slots=True)
class PoolConfig:
    max_connections: int = 64
    prewarm: int = 2
    connect_timeout_ms: float = 1000.0
    read_timeout_ms: float = 60000.0
    pool_timeout_ms: float = 1000.0
    idle_timeout_s: float = 50.0
    keepalive_idle_s: int = 30
    keepalive_interval_s: int = 10
    keepalive_count: int = 3
    tls_verify: bool = True

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], section: str = "pool") -> PoolConfig:
        names = {f.name: f for f in fields(cls)}
        _reject_unknown(section, mapping, set(names))
        values: dict[str, Any] = {}
        for key, value in mapping.items():
            where = f"{section}.{key}"
            if key == "tls_verify":
                if not isinstance(value, bool):
                    raise ConfigError(f"{where}: must be true or false")
                values[key] = value
            elif key in _KEEPALIVE_MAX:
                values[key] = number_setting(
                    where, value, minimum=1, maximum=_KEEPALIVE_MAX[key], integer=True
                )
            elif key == "max_connections":
                values[key] = number_setting(where, value, minimum=1, integer=True)
            elif key == "prewarm":
                values[key] = number_setting(where, value, minimum=0, integer=True)
            else:
                values[key] = float(number_setting(where, value, minimum=0.001))
        return cls(**values)

    def __post_init__(self) -> None:
        # Built directly (Gateway(pool=PoolConfig(...))) the values are checked too.
        for item in fields(self):
            value = getattr(self, item.name)
            where = f"pool.{item.name}"
            if item.name == "tls_verify":
                if not isinstance(value, bool):
                    raise ConfigError(f"{where}: must be true or false")
            elif item.name in _KEEPALIVE_MAX:
                number_setting(
                    where, value, minimum=1, maximum=_KEEPALIVE_MAX[item.name], integer=True
                )
            elif item.name == "max_connections":
                number_setting(where, value, minimum=1, integer=True)
            elif item.name == "prewarm":
                number_setting(where, value, minimum=0, integer=True)
            else:
                number_setting(where, value, minimum=0.001)
        if self.prewarm > self.max_connections:
            raise ConfigError("pool.prewarm: must not exceed max_connections")

    def transport_options(self) -> TransportOptions:
        return TransportOptions(
            max_connections=self.max_connections,
            prewarm=self.prewarm,
            connect_timeout=self.connect_timeout_ms / 1000,
            read_timeout=self.read_timeout_ms / 1000,
            pool_timeout=self.pool_timeout_ms / 1000,
            idle_timeout=self.idle_timeout_s,
            keepalive_idle=self.keepalive_idle_s,
            keepalive_interval=self.keepalive_interval_s,
            keepalive_count=self.keepalive_count,
            tls_verify=self.tls_verify,
        )


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Everything ``Gateway`` needs; build with ``from_mapping`` or ``from_toml``."""

    region: str | None = None
    endpoint_url: str | None = None
    credentials: Credentials | None = None
    profile: str | None = None
    transport: str = "native"
    use_fips_endpoint: bool = False
    use_dualstack_endpoint: bool = False
    pool: PoolConfig = field(default_factory=PoolConfig)
    default_timeout_ms: float | None = None
    # Raw sections validated by the parts that own them.
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_toml(cls, path: str | Path) -> GatewayConfig:
        try:
            with open(path, "rb") as handle:
                data = tomllib.load(handle)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        return cls.from_mapping(data)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> GatewayConfig:
        allowed = {
            "region",
            "endpoint_url",
            "credentials",
            "profile",
            "transport",
            "use_fips_endpoint",
            "use_dualstack_endpoint",
            "pool",
            "default_timeout_ms",
            *_DELEGATED_SECTIONS,
        }
        _reject_unknown("", mapping, allowed)
        values: dict[str, Any] = {}
        for key in ("region", "endpoint_url", "profile"):
            if key in mapping:
                values[key] = _string(key, mapping[key])
        if "transport" in mapping:
            values["transport"] = _choice("transport", mapping["transport"], ("native", "httpx"))
        for key in ("use_fips_endpoint", "use_dualstack_endpoint"):
            if key in mapping:
                values[key] = _bool(key, mapping[key])
        if "default_timeout_ms" in mapping:
            values["default_timeout_ms"] = float(
                number_setting("default_timeout_ms", mapping["default_timeout_ms"], minimum=0.001)
            )
        if "credentials" in mapping:
            values["credentials"] = _credentials(mapping["credentials"])
        if "pool" in mapping:
            values["pool"] = PoolConfig.from_mapping(_table("pool", mapping["pool"]))
        values["sections"] = {
            name: _table(name, mapping[name]) for name in _DELEGATED_SECTIONS if name in mapping
        }
        return cls(**values)

    def __post_init__(self) -> None:
        # Gateway(...) builds the config directly: validate here, not only in from_mapping.
        if self.region is not None:
            _string("region", self.region)
            if not _REGION.fullmatch(self.region):
                raise ConfigError(f"region: not a valid AWS region name: {self.region!r}")
        if self.profile is not None:
            _string("profile", self.profile)
        _choice("transport", self.transport, ("native", "httpx"))
        _bool("use_fips_endpoint", self.use_fips_endpoint)
        _bool("use_dualstack_endpoint", self.use_dualstack_endpoint)
        if self.default_timeout_ms is not None:
            number_setting("default_timeout_ms", self.default_timeout_ms, minimum=0.001)
        if self.endpoint_url is not None:
            from gateway._wire import Origin

            _string("endpoint_url", self.endpoint_url)
            Origin.from_url(self.endpoint_url)


def _table(where: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a table")
    return value


def _string(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: must be a non-empty string")
    return value


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: must be true or false")
    return value


def _choice(where: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{where}: must be one of {', '.join(choices)}, got {value!r}")
    return str(value)


def _credentials(value: Any) -> Credentials:
    table = _table("credentials", value)
    allowed = {"access_key_id", "secret_access_key", "session_token"}
    _reject_unknown("credentials", table, allowed)
    for key in ("access_key_id", "secret_access_key"):
        if key not in table:
            raise ConfigError(f"credentials.{key}: required when [credentials] is given")
    token = table.get("session_token")
    return Credentials(
        _string("credentials.access_key_id", table["access_key_id"]),
        _string("credentials.secret_access_key", table["secret_access_key"]),
        _string("credentials.session_token", token) if token is not None else None,
    )
