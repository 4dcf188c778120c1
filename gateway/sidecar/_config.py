"""The ``[sidecar]`` table of the gateway's TOML (``GatewayConfig.sections["sidecar"]``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal

from gateway._config.reader import fail, read, section, setting
from gateway._server.address import host_port, is_loopback
from gateway.errors import ConfigError

__all__ = ["ADMIN_OFF", "ADMIN_PORT", "AuthSettings", "SidecarConfig"]

_MIB = 1024 * 1024
_GC_MAX = 2**31 - 1  # gc.set_threshold takes C ints
_MAX_WORKERS = 1024
# The admin listener's conventional port (the image and the Kubernetes recipe set
# admin_listen to it); unset, there is no admin listener, so two sidecars on one
# host start with their defaults.
ADMIN_PORT = 9091
ADMIN_OFF = "off"


def _token(value: str) -> None:
    if len(value) < 16:
        # Not echoing the value: it is a secret even when it is a bad one.
        raise ValueError("must be a string of at least 16 characters")


@section("sidecar.auth")
class AuthSettings:
    """Inbound auth: ``none`` (loopback only), ``sigv4`` (keys) or ``bearer`` (token)."""

    mode: Literal["none", "sigv4", "bearer"] = "none"
    # access key id -> secret, and the bearer token: secrets, never in repr.
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    token: str | None = setting(default=None, check=_token, repr=False)
    max_skew_s: float = setting(default=300.0, ge=1)
    # sigv4: the region signatures must be scoped to (None: the Gateway's), and
    # Host names they may name besides this machine's own names and addresses.
    region: str | None = None
    hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.mode == "sigv4" and not self.credentials:
            raise fail(self, "credentials", "required when mode is 'sigv4'")
        if self.mode == "bearer" and self.token is None:
            raise fail(self, "token", "required when mode is 'bearer'")


def _admin_listen(value: str) -> None:
    if value != ADMIN_OFF:
        host_port(value)


def _workers(raw: Any, key: str) -> Any:
    # A count may come as text: the --workers flag, or a variable overriding "auto".
    if not isinstance(raw, str):
        return raw
    text = raw.strip().lower()
    # Past 19 digits it is no count (and past 4,300 int() itself refuses): the
    # reader's one-line error says what a count must be.
    return 0 if text == "auto" else int(text) if text.isdecimal() and len(text) < 20 else raw


@section("sidecar")
class SidecarConfig:
    """Settings of the sidecar proxy. ``_s`` are seconds, ``_ms`` milliseconds."""

    listen: str = setting(default="127.0.0.1:8081", check=host_port)
    max_in_flight: int = setting(default=1024, ge=1)
    shutdown_grace_s: float = setting(default=10.0, ge=0.001)
    # After SIGTERM: /readyz answers 503 at once, the listener keeps serving
    # this long (so load balancers and the co-located app stop sending), then
    # it closes and in-flight calls get shutdown_grace_s. 0: close at once.
    drain_s: float = setting(default=5.0, ge=0)
    # Worker processes sharing the port (SO_REUSEPORT); "auto" (read as 0):
    # as many as the cores this process may use. An in-process Sidecar ignores it.
    workers: int = setting(default=1, before=_workers, ge=0, le=_MAX_WORKERS)
    # With workers: one whose event loop answers none of the supervisor's
    # checks (every third of this) for this long is killed and replaced: a
    # stopped or wedged worker would keep its share of new connections.
    worker_liveness_s: float = setting(default=15.0, ge=0.3)
    header_timeout_s: float = setting(default=5.0, ge=0.001)
    body_timeout_s: float = setting(default=30.0, ge=0.001)
    idle_timeout_s: float = setting(default=60.0, ge=0.001)
    # A client that reads none of its answers for this long is disconnected.
    write_timeout_s: float = setting(default=30.0, ge=0.001)
    # A cap over every path's body limit (each operation's own: SageMaker Runtime's
    # and an inference router's 6 MiB, a Global Inference Gateway's 10 MiB);
    # None: those alone, and 6 MiB on other paths (OpenRTB).
    max_body_bytes: int | None = setting(default=None, ge=1)
    # Per-call deadline when the client sends no x-gateway-timeout-ms header;
    # None: the Gateway's own default.
    default_timeout_ms: float | None = setting(default=None, ge=1)
    auth: AuthSettings = field(default_factory=AuthSettings)
    # With inbound auth on, /metrics on the traffic port asks for it too;
    # false serves it to anyone.
    metrics_auth: bool = True
    # The admin listener: GET/HEAD /metrics, /livez, /readyz on a port of
    # their own, apart from traffic ("HOST:PORT"; port 0: any free port).
    # None or "off": none (the traffic port answers the same three paths).
    admin_listen: str | None = setting(default=None, check=_admin_listen)
    # Inbound auth ([sidecar.auth]) on the admin listener too; off by
    # default, so probes and Prometheus need no keys.
    admin_auth: bool = False
    # The command (a process of its own) runs gateway.tune_gc() once started:
    # gc.collect() + gc.freeze(), and gc.set_threshold(*gc_thresholds) if set.
    # An in-process ``Sidecar`` never touches its host's GC.
    gc_freeze: bool = True
    gc_thresholds: tuple[int, int, int] | None = setting(default=None, ge=1, le=_GC_MAX)
    # One JSON line per request on the ``gateway.access`` logger (a sampled
    # share of them when access_log_sample < 1).
    access_log: bool = False
    access_log_sample: float = setting(default=1.0, ge=0, le=1)
    # After each request, keep the event loop polling its sockets instead of
    # sleeping for this many microseconds: the next request or upstream answer
    # skips a wake-up, at the price of a core kept busy while traffic flows.
    # 0: off (the loop sleeps as soon as it has nothing to do).
    busy_poll_us: int = setting(default=0, ge=0, le=1_000_000)
    # InvokeEndpoint answered from the HTTP server's callbacks while a call goes
    # the plain way (no cache, no hedge, a warm socket, a first attempt that
    # succeeds): no task per request. The answers, retries and counters are the
    # same either way; false sends every request through the handler's task.
    relay_lane: bool = True
    # Per-request metrics: the sidecar's request counters and the gateway's
    # call, attempt and cache counters. Recording them costs every request;
    # false: none are recorded and /metrics keeps the build and process
    # families (and the OpenRTB proxy's, which it records itself).
    metrics: bool = True
    # Distinct route/target/error-code label values per family kept in
    # /metrics before new ones are counted under "other".
    metrics_label_cap: int = setting(default=100, ge=1)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> SidecarConfig:
        return read(cls, mapping, "sidecar")

    def admin_address(self, host: str, port: int) -> tuple[str, int] | None:
        """Where the admin listener listens, given the traffic listener's address."""
        if self.admin_listen is None or self.admin_listen == ADMIN_OFF:
            return None
        return host_port(self.admin_listen)

    def check_bind(self, host: str) -> None:
        """Refuse a non-loopback address without inbound auth (ConfigError)."""
        if self.auth.mode == "none" and not is_loopback(host):
            raise ConfigError.at(
                "sidecar.auth.mode",
                f"refusing to listen on {host!r} without inbound auth; bind to 127.0.0.1 / ::1, "
                "or set sidecar.auth.mode to 'sigv4' or 'bearer'",
            )
