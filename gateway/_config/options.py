"""Gateway configuration: one TOML file, the same keys as the constructor."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import astuple, field
from pathlib import Path
from typing import Any, Literal

from gateway._aws.sigv4 import Credentials
from gateway._config.reader import fail, http_url, load_toml, read, section, setting
from gateway._http.options import PoolConfig
from gateway.errors import ConfigError

__all__ = ["GatewayConfig", "PoolConfig"]

# Sections owned by other parts; validated there (routing, cache, sidecar, rtb).
# [defaults] is the route template for bare endpoint names (routing validates it).
_DELEGATED_SECTIONS = (
    "routes",
    "defaults",
    "cache",
    "sidecar",
    "rtb",
    # Global Inference Gateway routes: a model name over gateways (gateway._invoke.runtimes).
    "global_gateway_routes",
)
# AWS region names, as botocore validates them.
_REGION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?")


def _region(value: str) -> None:
    if not _REGION.fullmatch(value):
        raise ValueError(f"not a valid AWS region name: {value!r}")


def _endpoint_url(value: str) -> None:
    from gateway._http.message import Origin

    http_url(value)
    Origin.from_url(value)


@section()
class _CredentialsTable:
    access_key_id: str
    secret_access_key: str = setting(repr=False)
    session_token: str | None = setting(default=None, repr=False)


def _credentials(value: Any, key: str) -> Any:
    if value is None or isinstance(value, Credentials):
        return value
    return Credentials(*astuple(read(_CredentialsTable, value, key)))  # in Credentials' order


@section()
class GatewayConfig:
    """Everything ``Gateway`` needs; build with ``from_mapping`` or ``from_toml``."""

    region: str | None = setting(default=None, check=_region)
    endpoint_url: str | None = setting(default=None, check=_endpoint_url)
    credentials: Credentials | None = setting(default=None, before=_credentials)
    profile: str | None = None
    transport: Literal["native", "httpx"] = "native"
    # None: botocore decides (environment, profile); True/False only when set.
    use_fips_endpoint: bool | None = None
    use_dualstack_endpoint: bool | None = None
    # None: botocore decides (AWS_IGNORE_CONFIGURED_ENDPOINT_URLS, profile).
    ignore_configured_endpoint_urls: bool | None = None
    # A CA bundle (PEM file) to verify TLS with; unset: AWS_CA_BUNDLE or the profile's.
    ca_bundle: str | None = None
    # Appended to the User-Agent, as botocore's Config options of these names do.
    user_agent_extra: str | None = None
    user_agent_appid: str | None = None
    pool: PoolConfig = field(default_factory=PoolConfig)
    default_timeout_ms: float | None = setting(default=None, ge=0.001)
    # Seconds before credentials expire that a background refresh starts /
    # that calls wait for one; None scales them with the credentials' lifetime.
    credential_refresh_advisory_s: float | None = setting(default=None, ge=0)
    credential_refresh_mandatory_s: float | None = setting(default=None, ge=0)
    # Raw tables validated by the parts that own them.
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_toml(cls, path: str | Path) -> GatewayConfig:
        return cls.from_mapping(load_toml(path))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> GatewayConfig:
        if not isinstance(mapping, Mapping):
            raise ConfigError.at("(root)", f"must be a table, got {mapping!r}")
        own = {key: value for key, value in mapping.items() if key not in _DELEGATED_SECTIONS}
        sections = {key: mapping[key] for key in _DELEGATED_SECTIONS if key in mapping}
        for key, table in sections.items():
            if not isinstance(table, Mapping):
                raise ConfigError.at(key, f"must be a table, got {table!r}")
        return read(cls, own, "", sections=sections)

    def __post_init__(self) -> None:
        advisory = self.credential_refresh_advisory_s
        mandatory = self.credential_refresh_mandatory_s
        if advisory is not None and mandatory is not None and mandatory > advisory:
            raise fail(
                self, "credential_refresh_mandatory_s", "must not exceed the advisory window"
            )
