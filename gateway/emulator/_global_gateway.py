"""Emulated Global Inference Gateways (``sagemaker-gateway-runtime``).

A gateway takes one OpenAI-style JSON object, picks the model from its ``model``
key, forces its ``stream`` flag per operation (false for
InvokeGlobalInferenceGateway, true for ...WithResponseStream) and hands it to the
inference gateway serving that model: here an echo chat model that answers in
OpenAI's completion format, or with ``chat.completion.chunk`` server-sent events,
one per ``PayloadPart`` event, ending ``data: [DONE]``. Error messages start with
``Global Inference Gateway:`` (its own) or ``inference gateway:`` (the one behind
it), as the model documents.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
import uuid
from collections import Counter, deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from gateway._aws.eventstream import (
    encode_payload_part,
    internal_stream_failure,
    model_stream_error,
)
from gateway._config.reader import read
from gateway._server.http import Request, Response, StreamingResponse
from gateway.emulator._config import GLOBAL_GATEWAY_MAX_BODY
from gateway.emulator._latency_config import LatencyConfig
from gateway.emulator._runtime_config import (
    GATEWAY_OWN_ERROR_CODES,
    GlobalGatewayFaultConfig,
    GlobalInferenceGatewayConfig,
)
from gateway.emulator._runtime_errors import WireError

__all__ = ["MAX_GATEWAY_BODY", "ForwardedRequest", "GlobalGatewayService", "GlobalGatewayStats"]

MAX_GATEWAY_BODY = GLOBAL_GATEWAY_MAX_BODY  # 10 MiB
OWN = "Global Inference Gateway: "
_GATEWAY_ID = re.compile(r"[a-z0-9]{1,64}")
_JWT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_IDENTITY_HEADER = "x-amzn-sagemaker-customer-identity-token"
_STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"
_FORWARDED = 64

_OWN_MESSAGES = {
    "AccessDeniedException": "the caller is not authorized to invoke this gateway",
    "ThrottlingException": "rate exceeded for the gateway",
    "InternalServerException": "an internal error occurred",
    "BadGatewayException": "could not reach the inference gateway: connection refused",
    "ServiceUnavailableException": "no capacity is available for the model",
    "GatewayTimeoutException": "timed out waiting for the inference gateway",
}
_UPSTREAM_MESSAGES = {
    400: "bad request",
    401: "unauthorized",
    403: "forbidden",
    404: "model not found",
    408: "request timeout",
    429: "too many requests",
    500: "internal server error",
    502: "bad gateway",
    503: "service unavailable",
    504: "gateway timeout",
}


def own_error(code: str, message: str) -> WireError:
    return WireError(GATEWAY_OWN_ERROR_CODES[code], code, OWN + message)


def _validation(message: str) -> WireError:
    # The model's documentation says a bad body (not one JSON object, a repeated
    # "model" with different values) gets "a 400 validation error" and names no shape;
    # the operation lists none either. ValidationException is the name AWS's
    # rest-json services give a 400 of that kind: unmodeled here, so botocore raises a
    # plain ClientError with that code, status 400 and this Message, as it would for
    # AWS's own answer, whatever code AWS then names.
    return WireError(400, "ValidationException", OWN + message)


def upstream_error(status: int, message: str, component: str, retry_after_s: int) -> WireError:
    """The inference gateway's error status, typed as the model's table says."""
    origin = f"inference gateway ({component})" if component else "inference gateway"
    text = f"{origin}: {status} {message[:256]}"
    if status in (401, 403):
        return WireError(403, "AccessDeniedException", text)
    if status == 404:
        return WireError(404, "ResourceNotFoundException", text)
    if status in (408, 504):
        return WireError(504, "GatewayTimeoutException", text)
    if status == 429:
        return WireError(429, "ThrottlingException", text, None, _retry_after(retry_after_s))
    if status >= 500:
        return WireError(502, "BadGatewayException", text)
    return WireError(400, "ValidationException", text)


def _retry_after(seconds: int) -> tuple[tuple[str, str], ...]:
    return (("Retry-After", str(seconds)),)


@dataclass(frozen=True, slots=True)
class ForwardedRequest:
    """What the inference gateway behind a gateway received (for tests to inspect)."""

    gateway: str
    body: dict[str, Any]
    identity_token: str | None


@dataclass(slots=True)
class GlobalGatewayStats:
    invocations: Counter[tuple[str, str, bool]]  # (gateway, model, streamed)
    errors: Counter[tuple[str, str]]  # (gateway, code)
    stream_failures: Counter[str]

    @classmethod
    def empty(cls) -> GlobalGatewayStats:
        return cls(Counter(), Counter(), Counter())

    def snapshot(self) -> dict[str, list[list[object]]]:
        return {
            "invocations": [[*key, count] for key, count in self.invocations.items()],
            "errors": [[*key, count] for key, count in self.errors.items()],
            "stream_failures": [[key, count] for key, count in self.stream_failures.items()],
        }


class _Gateway:
    def __init__(self, config: GlobalInferenceGatewayConfig, seed: int | None) -> None:
        self.config = config
        self.name = config.name
        self.faults = config.faults
        self.latency = config.latency
        self.rng = random.Random(f"{seed}:{config.name}") if seed is not None else random.Random()

    def draw_fault(self) -> WireError | None:
        faults = self.faults
        point = self.rng.random()
        for code, rate in faults.error_rates.items():
            if point < rate:
                headers = (
                    _retry_after(faults.retry_after_s) if code == "ThrottlingException" else ()
                )
                error = own_error(code, _OWN_MESSAGES[code])
                error.headers = headers
                return error
            point -= rate
        for status_text, rate in faults.upstream_error_rates.items():
            if point < rate:
                status = int(status_text)
                message = _UPSTREAM_MESSAGES.get(status, "error")
                return upstream_error(
                    status, message, faults.upstream_component, faults.retry_after_s
                )
            point -= rate
        return None

    def delay_s(self) -> float:
        latency, rng = self.latency, self.rng
        delay = latency.base_ms
        if latency.jitter_ms:
            delay += rng.uniform(-latency.jitter_ms, latency.jitter_ms)
        if latency.tail_share and rng.random() < latency.tail_share:
            delay += latency.tail_ms
        return max(delay, 0.0) / 1000


class GlobalGatewayService:
    """The Global Inference Gateways of one emulator."""

    def __init__(
        self, gateways: Mapping[str, GlobalInferenceGatewayConfig], seed: int | None
    ) -> None:
        self._gateways = {name: _Gateway(config, seed) for name, config in gateways.items()}
        self.stats = GlobalGatewayStats.empty()
        self.forwarded: deque[ForwardedRequest] = deque(maxlen=_FORWARDED)

    # -- control -------------------------------------------------------------

    def gateway(self, name: str) -> _Gateway:
        state = self._gateways.get(name)
        if state is None:
            raise KeyError(f"no Global Inference Gateway {name!r} in the emulator configuration")
        return state

    def set_faults(self, name: str, changes: Mapping[str, Any]) -> GlobalGatewayFaultConfig:
        state = self.gateway(name)
        merged = {**asdict(state.faults), **changes}
        state.faults = read(GlobalGatewayFaultConfig, merged, f"faults[{name}]")
        return state.faults

    def set_latency(self, name: str, changes: Mapping[str, Any]) -> LatencyConfig:
        state = self.gateway(name)
        merged = {**asdict(state.latency), **changes}
        state.latency = read(LatencyConfig, merged, f"latency[{name}]")
        return state.latency

    def restore(self) -> None:
        for state in self._gateways.values():
            state.faults = state.config.faults
            state.latency = state.config.latency

    # -- requests ------------------------------------------------------------

    async def invoke(
        self, request: Request, gateway_id: str, request_id: str, stream: bool
    ) -> Response | StreamingResponse:
        try:
            return await self._invoke(request, gateway_id, request_id, stream)
        except WireError as error:
            self.stats.errors[(gateway_id, error.code)] += 1
            raise

    async def _invoke(
        self, request: Request, gateway_id: str, request_id: str, stream: bool
    ) -> Response | StreamingResponse:
        gateway = self._find(gateway_id)
        _check_content_type(request.headers.get("content-type"))
        if len(request.body) > MAX_GATEWAY_BODY:
            raise WireError(
                413,
                "PayloadTooLargeException",
                f"{OWN}the request body of {len(request.body)} bytes exceeds the 10 MiB limit",
            )
        body = _parse_body(request.body)
        model = body["model"]
        config = gateway.config
        if model not in config.models:
            raise WireError(
                404,
                "ResourceNotFoundException",
                f"{OWN}no target of gateway {gateway_id} serves model {model!r}",
                {"ResourceId": model, "ResourceType": "model"},
            )
        if model in config.unavailable_models:
            raise own_error(
                "ServiceUnavailableException", f"no capacity is available for model {model!r}"
            )
        fault = gateway.draw_fault()
        delay = gateway.delay_s()
        if delay:
            await asyncio.sleep(delay)
        if fault is not None:
            raise fault
        body["stream"] = stream  # forced per operation, whatever the caller sent
        token = request.headers.get(_IDENTITY_HEADER)
        self.forwarded.append(ForwardedRequest(gateway_id, body, token))
        _check_token_upstream(token, gateway.faults.upstream_component)
        self.stats.invocations[(gateway_id, model, stream)] += 1
        completion = _echo(body)
        headers = [("x-amzn-RequestId", request_id)]
        if not stream:
            headers.append(("Content-Type", "application/json"))
            return Response(200, headers, orjson.dumps(completion))
        headers.append(("Content-Type", _STREAM_CONTENT_TYPE))
        fail = bool(
            gateway.faults.stream_failure_rate
            and gateway.rng.random() < gateway.faults.stream_failure_rate
        )
        if fail:
            self.stats.stream_failures[gateway_id] += 1
        failure = gateway.faults.stream_failure_event if fail else None
        events = _sse_events(completion, config.stream_interval_ms / 1000, failure)
        return StreamingResponse(events, 200, headers)

    def _find(self, gateway_id: str) -> _Gateway:
        if not _GATEWAY_ID.fullmatch(gateway_id):
            raise _validation("the gateway ID must be 1 to 64 lowercase letters and digits")
        gateway = self._gateways.get(gateway_id)
        if gateway is None:
            raise WireError(
                404,
                "ResourceNotFoundException",
                f"{OWN}gateway {gateway_id} not found",
                {"ResourceId": gateway_id, "ResourceType": "gateway"},
            )
        return gateway


def _check_content_type(content_type: str | None) -> None:
    # The ContentType member's documentation: other content types than application/json
    # (parameters allowed) are rejected "with a 415 error"; no shape is named or modeled.
    # UnsupportedMediaTypeException is the usual name of a 415; unmodeled, botocore raises
    # a plain ClientError with that code, status 415 and the Message (no retry: a 4xx).
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise WireError(
            415,
            "UnsupportedMediaTypeException",
            f"{OWN}unsupported content type {content_type or '(none)'!r}: send application/json",
        )


def _check_token_upstream(token: str | None, component: str) -> None:
    """The inference gateway validates the token: a JWT's shape, here."""
    if token is not None and not _JWT.fullmatch(token):
        raise upstream_error(401, "invalid customer identity token", component, 0)


def _parse_body(raw: bytes) -> dict[str, Any]:
    """The top-level object; a repeated ``model`` with different values is refused."""
    models: list[object] = []

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        models.append([value for key, value in pairs if key == "model"])
        return dict(pairs)

    try:
        body = json.loads(raw, object_pairs_hook=pairs_hook)
    except (ValueError, UnicodeDecodeError):
        raise _validation("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _validation("the request body must be one JSON object")
    top_models = models[-1] if models else []  # the top-level object closes last
    if isinstance(top_models, list) and len({json.dumps(m) for m in top_models}) > 1:
        raise _validation('the request body repeats "model" with different values')
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _validation('the request body has no "model" string')
    return body


def _last_text(body: dict[str, Any]) -> tuple[str, str] | None:
    """("chat", text) of the last message, ("text", prompt), or None."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        content = messages[-1].get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if isinstance(content, str):
            return "chat", content
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return "text", prompt
    return None


def _echo(body: dict[str, Any]) -> dict[str, Any]:
    found = _last_text(body)
    if found is None:
        raise upstream_error(
            400, "the request has neither messages nor a prompt", "model server", 0
        )
    kind, text = found
    tokens = len(text.split())
    common = {
        "id": f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion" if kind == "chat" else "text_completion",
        "created": int(time.time()),
        "model": body["model"],
    }
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if kind == "chat":
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return {
        **common,
        "choices": [choice],
        "usage": {"prompt_tokens": tokens, "completion_tokens": tokens, "total_tokens": 2 * tokens},
    }


def _chunks(completion: dict[str, Any]) -> list[bytes]:
    """The completion as SSE events: one per word, a final one, then [DONE]."""
    choice = completion["choices"][0]
    chat = "message" in choice
    text = choice["message"]["content"] if chat else choice["text"]
    words = re.findall(r"\S+\s*|\s+", text) or [""]
    head = {key: completion[key] for key in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk" if chat else "text_completion"
    events = []
    for index, word in enumerate(words):
        if chat:
            delta: dict[str, Any] = {"content": word}
            if index == 0:
                delta["role"] = "assistant"
            part: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": None}
        else:
            part = {"index": 0, "text": word, "finish_reason": None}
        events.append({**head, "choices": [part]})
    final: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if chat:
        final["delta"] = {}
    else:
        final["text"] = ""
    events.append({**head, "choices": [final]})
    return [b"data: " + orjson.dumps(event) + b"\n\n" for event in events] + [b"data: [DONE]\n\n"]


async def _sse_events(
    completion: dict[str, Any], interval_s: float, failure: str | None
) -> AsyncIterator[bytes]:
    """The SSE chunks; with a ``failure``, that event after the first, and the end."""
    for index, chunk in enumerate(_chunks(completion)):
        if index and interval_s:
            await asyncio.sleep(interval_s)
        if failure is not None and index == 1:
            if failure == "ModelStreamError":
                yield model_stream_error("inference gateway: the stream broke", "StreamBroken")
            else:
                yield internal_stream_failure("inference gateway: response ended unexpectedly")
            return
        yield encode_payload_part(chunk)
