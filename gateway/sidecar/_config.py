"""The ``[sidecar]`` table: validated once at start, errors name the bad key.

Lives in the same TOML file as the Gateway's own settings; ``GatewayConfig``
passes it through raw in ``config.sections["sidecar"]``. Secrets (inbound
SigV4 keys, the bearer token) never appear in ``repr``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway._config import number_setting
from gateway._gc import check_thresholds
from gateway.errors import ConfigError

__all__ = ["AuthSettings", "SidecarConfig", "is_loopback", "parse_listen"]

_MIB = 1024 * 1024
_AUTH_MODES = ("none", "sigv4", "bearer")


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """Inbound auth: ``none`` (loopback only), ``sigv4`` (keys) or ``bearer`` (token)."""

    mode: str = "none"
    credentials: Mapping[str, str] = field(default_factory=dict)  # access key id -> secret
    token: str | None = None
    max_skew_s: float = 300.0

    def __repr__(self) -> str:
        token = "None" if self.token is None else "'<redacted>'"
        return (
            f"AuthSettings(mode={self.mode!r}, credentials=<{len(self.credentials)} key(s)>, "
            f"token={token}, max_skew_s={self.max_skew_s!r})"
        )

    @classmethod
    def from_mapping(
        cls, mapping: Mapping[str, Any], section: str = "sidecar.auth"
    ) -> AuthSettings:
        _reject_unknown(section, mapping, {"mode", "credentials", "token", "max_skew_s"})
        mode = mapping.get("mode", "none")
        if mode not in _AUTH_MODES:
            raise ConfigError(
                f"{section}.mode: must be one of {', '.join(_AUTH_MODES)}, got {mode!r}"
            )
        credentials = _credentials(f"{section}.credentials", mapping.get("credentials", {}))
        token = mapping.get("token")
        if token is not None and (not isinstance(token, str) or len(token) < 16):
            # Not echoing the value: it is a secret even when it is a bad one.
            raise ConfigError(f"{section}.token: must be a string of at least 16 characters")
        if mode == "sigv4" and not credentials:
            raise ConfigError(f"{section}.credentials: required when mode is 'sigv4'")
        if mode == "bearer" and token is None:
            raise ConfigError(f"{section}.token: required when mode is 'bearer'")
        skew = float(_number(f"{section}.max_skew_s", mapping.get("max_skew_s", 300.0), 1.0))
        return cls(mode, credentials, token, skew)


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """Settings of the sidecar proxy. ``_s`` are seconds, ``_ms`` milliseconds."""

    listen: str = "127.0.0.1:8081"
    max_in_flight: int = 1024
    shutdown_grace_s: float = 10.0
    header_timeout_s: float = 5.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 60.0
    max_body_bytes: int = 6 * _MIB
    # Per-call deadline when the client sends no x-gateway-timeout-ms header;
    # None: the Gateway's own default.
    default_timeout_ms: float | None = None
    auth: AuthSettings = field(default_factory=AuthSettings)
    # The command (a process of its own) runs gateway.tune_gc() once started:
    # gc.collect() + gc.freeze(), and gc.set_threshold(*gc_thresholds) if set.
    # An in-process ``Sidecar`` never touches its host's GC.
    gc_freeze: bool = True
    gc_thresholds: tuple[int, int, int] | None = None

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], section: str = "sidecar") -> SidecarConfig:
        if not isinstance(mapping, Mapping):
            raise ConfigError(f"{section}: must be a table")
        allowed = {
            "listen",
            "max_in_flight",
            "shutdown_grace_s",
            "header_timeout_s",
            "body_timeout_s",
            "idle_timeout_s",
            "max_body_bytes",
            "default_timeout_ms",
            "auth",
            "gc_freeze",
            "gc_thresholds",
        }
        _reject_unknown(section, mapping, allowed)
        values: dict[str, Any] = {}
        if "listen" in mapping:
            value = mapping["listen"]
            if not isinstance(value, str):
                raise ConfigError(f"{section}.listen: must be a 'HOST:PORT' string")
            parse_listen(value, f"{section}.listen")
            values["listen"] = value
        for key in ("max_in_flight", "max_body_bytes"):
            if key in mapping:
                values[key] = _number(f"{section}.{key}", mapping[key], 1, integer=True)
        for key in ("shutdown_grace_s", "header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            if key in mapping:
                values[key] = float(_number(f"{section}.{key}", mapping[key], 0.001))
        if "default_timeout_ms" in mapping:
            where = f"{section}.default_timeout_ms"
            values["default_timeout_ms"] = float(_number(where, mapping["default_timeout_ms"], 1))
        if "auth" in mapping:
            auth = mapping["auth"]
            if not isinstance(auth, Mapping):
                raise ConfigError(f"{section}.auth: must be a table")
            values["auth"] = AuthSettings.from_mapping(auth, f"{section}.auth")
        if "gc_freeze" in mapping:
            if not isinstance(mapping["gc_freeze"], bool):
                raise ConfigError(
                    f"{section}.gc_freeze: must be true or false, got {mapping['gc_freeze']!r}"
                )
            values["gc_freeze"] = mapping["gc_freeze"]
        if "gc_thresholds" in mapping:
            try:
                thresholds = check_thresholds(mapping["gc_thresholds"], f"{section}.gc_thresholds")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
            values["gc_thresholds"] = thresholds
        return cls(**values)

    def check_bind(self, host: str) -> None:
        """Refuse a non-loopback address without inbound auth (ConfigError)."""
        if self.auth.mode == "none" and not is_loopback(host):
            raise ConfigError(
                f"sidecar.auth.mode: refusing to listen on {host!r} without inbound auth; "
                "bind to 127.0.0.1 / ::1, or set sidecar.auth.mode to 'sigv4' or 'bearer'"
            )


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; any other name counts as exposed."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(value: str, where: str = "--listen") -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{where}: expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _reject_unknown(section: str, mapping: Mapping[str, Any], allowed: set[str]) -> None:
    for key in mapping:
        if key not in allowed:
            raise ConfigError(
                f"{section}.{key}: unknown key (allowed: {', '.join(sorted(allowed))})"
            )


def _number(where: str, value: Any, minimum: float, *, integer: bool = False) -> Any:
    # One validator for every config section: finite, typed, bounded.
    return number_setting(where, value, minimum=minimum, integer=integer)


def _credentials(where: str, value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a table of access key id = secret")
    for key, secret in value.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where}: access key ids must be non-empty strings")
        if not isinstance(secret, str) or not secret:
            raise ConfigError(f"{where}.{key}: must be a non-empty secret string")
    return dict(value)
