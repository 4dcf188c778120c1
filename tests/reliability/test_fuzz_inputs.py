"""Bad input, property-based: the error decoder, the event-stream decoder (frames
with valid CRCs around arbitrary headers), the OpenRTB parser (size and depth),
and every config loader. Each input gives a result or the one specific error
type, never another exception."""

from __future__ import annotations

import binascii
import struct
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import errors
from gateway._aws.eventstream import EventStreamDecoder, EventStreamError
from gateway._config.options import GatewayConfig
from gateway._http.message import RawResponse
from gateway._invoke.api import decode_error
from gateway.cache import CacheConfig
from gateway.emulator import EmulatorConfig
from gateway.routing import parse_routes
from gateway.rtb.request import DEFAULT_MAX_REQUEST_BYTES, InvalidBidRequest, parse_bid_request
from gateway.sidecar import SidecarConfig

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- decode_error --------------------------------------------------------------------

_HEADER_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=60)
_ERROR_CODES = st.sampled_from(
    ["ValidationError", "ModelError", "ThrottlingException", "x#ModelError:http://a", "", "#", ":"]
)
_JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | _HEADER_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_HEADER_TEXT, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def _error_bodies(draw: st.DrawFn) -> bytes:
    choice = draw(st.integers(0, 2))
    if choice == 0:
        return draw(st.binary(max_size=400))
    fields = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "__type",
                    "code",
                    "Code",
                    "message",
                    "Message",
                    "OriginalStatusCode",
                    "OriginalMessage",
                    "LogStreamArn",
                ]
            ),
            _JSONISH | _ERROR_CODES,
            max_size=6,
        )
    )
    data = orjson.dumps(fields)
    return data[: draw(st.integers(0, len(data)))] if choice == 2 else data


@FUZZ
@given(
    status=st.integers(0, 999),
    headers=st.dictionaries(
        st.sampled_from(["x-amzn-errortype", "x-amzn-requestid", "content-type", "x"]),
        _HEADER_TEXT | _ERROR_CODES,
        max_size=3,
    ),
    body=_error_bodies(),
)
def test_decode_error_always_gives_a_service_error(
    status: int, headers: dict[str, str], body: bytes
) -> None:
    error = decode_error(RawResponse(status, headers, body))
    assert isinstance(error, errors.ServiceError)
    assert isinstance(error.retryable, bool)
    assert isinstance(str(error), str) and isinstance(error.code, str)
    if isinstance(error, errors.ModelError):
        assert error.original_status_code is None or isinstance(error.original_status_code, int)
    assert len(str(error)) < 2000 + len(body) + sum(len(v) for v in headers.values())


# -- event stream: valid CRCs, arbitrary insides ---------------------------------------


def _frame(headers: bytes, payload: bytes) -> bytes:
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    body = prelude + headers + payload
    return body + struct.pack(">I", binascii.crc32(body))


@FUZZ
@given(
    frames=st.lists(
        st.tuples(st.binary(max_size=200), st.binary(max_size=200)), min_size=1, max_size=4
    ),
    piece=st.integers(1, 97),
)
def test_frames_with_valid_crcs_and_garbage_headers(
    frames: list[tuple[bytes, bytes]], piece: int
) -> None:
    """Random bytes rarely pass a CRC; these do, so the header parser itself is tried."""
    data = b"".join(_frame(h, p) for h, p in frames)
    decoder = EventStreamDecoder(max_message_size=4096)
    messages = []
    try:
        for start in range(0, len(data), piece):
            messages += decoder.feed(data[start : start + piece])
        decoder.end()
    except EventStreamError:
        with pytest.raises(EventStreamError):
            decoder.feed(b"")  # a failed decoder stays failed
        return
    assert len(messages) == len(frames)
    for message, (_, payload) in zip(messages, frames, strict=True):
        assert message.payload == payload


# -- OpenRTB: bounded size, deep nesting ---------------------------------------------------


@pytest.mark.parametrize("depth", [10, 500, 1100, 20_000])
@pytest.mark.parametrize("where", ["root", "imp_ext", "device_ext", "user_ext"])
def test_deeply_nested_bid_requests_are_refused_or_parsed(depth: int, where: str) -> None:
    nested = "[" * depth + "]" * depth
    imp = '"imp":[{"id":"1","banner":{}}]'
    shells = {
        "root": f'{{"id":"1",{imp},"x":{nested}}}',
        "imp_ext": f'{{"id":"1","imp":[{{"id":"1","banner":{{}},"ext":{nested}}}]}}',
        "device_ext": f'{{"id":"1",{imp},"device":{{"ext":{nested}}}}}',
        "user_ext": f'{{"id":"1",{imp},"user":{{"ext":{nested}}}}}',
    }
    data = shells[where].encode()
    try:
        request = parse_bid_request(data, max_bytes=1 << 20)
    except InvalidBidRequest:
        return
    assert request.id == "1"


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_size_limit_is_exact(extra: int) -> None:
    shell = b'{"id":"1","imp":[{"id":"1","banner":{}}],"pad":""}'
    pad = DEFAULT_MAX_REQUEST_BYTES - len(shell) + extra
    data = shell[:-2] + b"a" * pad + b'"}'
    assert len(data) == DEFAULT_MAX_REQUEST_BYTES + extra
    if extra > 0:
        with pytest.raises(InvalidBidRequest, match="too large"):
            parse_bid_request(data)
    else:
        assert parse_bid_request(data).id == "1"


def test_a_huge_request_is_refused_before_it_is_decoded() -> None:
    with pytest.raises(InvalidBidRequest, match="too large"):
        parse_bid_request(b"[" * (50 * 1024 * 1024))


# -- config loaders --------------------------------------------------------------------------

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()  # nan and inf included: TOML has both
    | st.text(max_size=20)
)


def _mappings(keys: list[str]) -> st.SearchStrategy[Any]:
    key = st.sampled_from(keys) | st.text(max_size=8)
    return st.recursive(
        _SCALARS,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(key, inner, max_size=5),
        max_leaves=20,
    )


_GATEWAY_KEYS = [
    "region",
    "endpoint_url",
    "credentials",
    "profile",
    "transport",
    "pool",
    "timeout_ms",
    "default_timeout_ms",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "max_connections",
    "prewarm",
    "connect_timeout_ms",
    "tls_verify",
    "idle_timeout_s",
    "keepalive_count",
    "use_fips_endpoint",
    "routes",
    "cache",
    "sidecar",
    "rtb",
]
_ROUTE_KEYS = [
    "targets",
    "endpoint",
    "region",
    "url",
    "variant",
    "weight",
    "timeout_ms",
    "hedge",
    "enabled",
    "max_extra_load",
    "min_delay_ms",
    "window_s",
    "refresh_s",
    "quantile",
    "retry",
    "max_attempts",
    "budget_ratio",
    "ejection",
    "consecutive_failures",
    "base_ejection_s",
    "health_check",
    "mme_preferred",
]
_CACHE_KEYS = [f.name for f in CacheConfig.__dataclass_fields__.values()]
_SIDECAR_KEYS = [
    "listen",
    "max_in_flight",
    "shutdown_grace_s",
    "header_timeout_s",
    "body_timeout_s",
    "idle_timeout_s",
    "max_body_bytes",
    "default_timeout_ms",
    "auth",
    "mode",
    "credentials",
    "token",
    "max_skew_s",
]
_EMULATOR_KEYS = [
    "endpoints",
    "auth",
    "seed",
    "account_id",
    "region",
    "max_body_size",
    "model",
    "type",
    "body",
    "variants",
    "name",
    "weight",
    "mme",
    "models",
    "latency",
    "base_ms",
    "faults",
    "error_rates",
    "reset_rate",
    "credentials",
    "required",
    "stream_parts",
]


@FUZZ
@given(data=st.dictionaries(st.sampled_from(_GATEWAY_KEYS), _mappings(_GATEWAY_KEYS), max_size=6))
def test_gateway_config_gives_a_config_or_config_error(data: dict[str, Any]) -> None:
    try:
        GatewayConfig.from_mapping(data)
    except errors.ConfigError as exc:
        assert str(exc).startswith("config error at ")


@FUZZ
@given(data=_mappings(_ROUTE_KEYS))
def test_parse_routes_gives_routes_or_route_config_error(data: Any) -> None:
    try:
        parse_routes(data)
    except errors.ConfigError as exc:
        assert str(exc).startswith("config error at routes")


@FUZZ
@given(data=st.dictionaries(st.sampled_from(_CACHE_KEYS) | st.text(max_size=5), _SCALARS))
def test_cache_config_gives_a_config_or_cache_config_error(data: dict[str, Any]) -> None:
    try:
        CacheConfig.from_mapping(data)
    except errors.ConfigError as exc:
        assert str(exc).startswith("config error at cache")


@FUZZ
@given(data=_mappings(_SIDECAR_KEYS))
def test_sidecar_config_gives_a_config_or_config_error(data: Any) -> None:
    try:
        SidecarConfig.from_mapping(data)
    except errors.ConfigError as exc:
        assert str(exc).startswith("config error at sidecar")


@FUZZ
@given(data=_mappings(_EMULATOR_KEYS))
def test_emulator_config_gives_a_config_or_config_error(data: Any) -> None:
    try:
        EmulatorConfig.from_dict(data)
    except errors.ConfigError as exc:
        assert str(exc).startswith("config error at ")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize(
    "section", [("latency", "base_ms"), ("faults", "stall_ms"), ("faults", "reset_rate")]
)
def test_emulator_config_refuses_non_finite_numbers(value: float, section: tuple[str, str]) -> None:
    table, key = section
    where = rf"^config error at endpoints\.e\.{table}\.{key}:"
    with pytest.raises(errors.ConfigError, match=where):
        EmulatorConfig.from_dict({"endpoints": {"e": {table: {key: value}}}})
