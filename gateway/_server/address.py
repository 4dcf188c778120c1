"""Listen addresses (``HOST:PORT``) for the sidecar and the emulator."""

from __future__ import annotations

import ipaddress

from gateway.errors import ConfigError

__all__ = ["host_port", "is_loopback", "parse_listen"]


def host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:80`` too; no host means 127.0.0.1); ValueError if malformed."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_listen(value: str, where: str = "--listen") -> tuple[str, int]:
    try:
        return host_port(value)
    except ValueError as exc:
        raise ConfigError.at(where, str(exc)) from None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; any other name counts as exposed."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
