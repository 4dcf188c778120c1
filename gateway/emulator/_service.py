"""The emulated SageMaker Runtime: routes, headers, faults, latency, errors."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict, dataclass
from itertools import accumulate
from typing import Any

import orjson

from gateway._aws.eventstream import encode_payload_part, model_stream_error
from gateway._config.reader import read
from gateway._invoke.api import (
    INVOKE,
    INVOKE_ASYNC,
    INVOKE_STREAM,
    MAX_ASYNC_BODY_BYTES,
    Member,
    Operation,
)
from gateway._server.http import AbortConnection, Request, Response, StreamingResponse
from gateway.emulator._auth import SignatureVerifier
from gateway.emulator._config import (
    EmulatorConfig,
    EndpointConfig,
    FaultConfig,
)
from gateway.emulator._errors import SageMakerError, error_response
from gateway.emulator._latency_config import LatencyConfig
from gateway.emulator._models import Model, ModelCache, ModelFailure, build_model
from gateway.emulator._runtime_config import RUNTIME_PREFIXES
from gateway.emulator._runtimes import RuntimeServices
from gateway.emulator._stats import EmulatorStats

__all__ = ["CLOSE_SESSION", "EmulatorService", "RecordedRequest"]

_SESSION_TTL_S = 20 * 60
# The CustomAttributes token that asks the emulated container to end the session.
CLOSE_SESSION = "close-session"
# Requests kept for inspection (``recorded``, ``GET /_emulator/requests``).
_RECORDED = 256
_STREAM_CONTENT_TYPE = "application/vnd.amazon.eventstream"

_INJECTED_MESSAGES = {
    "ValidationError": "Injected validation error.",
    "ThrottlingException": "Rate exceeded",
    "ModelNotReadyException": "Model is not ready yet. Please retry the request later.",
    "InternalFailure": "An exception occurred while sending request to model. "
    "Please contact customer support regarding request {request_id}.",
    "ServiceUnavailable": "The service is unavailable. Try your call again.",
    "InternalDependencyException": "Your request caused an exception with an internal "
    "dependency. Contact customer support.",
}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One SageMaker Runtime request as it arrived: what a test compares across clients."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]  # lower-case names, in arrival order
    body: bytes

    def as_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "path": self.path,
            "headers": [list(pair) for pair in self.headers],
            "body": self.body.decode("latin-1"),
        }


@dataclass(slots=True)
class _Invocation:
    """What one request resolved to before the model runs."""

    endpoint: _EndpointState
    variant: str
    target_model: str | None
    request_id: str
    headers: list[tuple[str, str]]  # response headers common to every answer


class _EndpointState:
    """An endpoint's live state: its model, loaded MME models, RNG and knobs."""

    def __init__(self, config: EndpointConfig, seed: int | None, stats: EmulatorStats) -> None:
        self.config = config
        self.name = config.name
        self.model: Model = build_model(config.model)
        self.latency = config.latency
        self.faults = config.faults
        # One RNG per endpoint, seeded from (seed, name): reproducible runs.
        self.rng = random.Random(f"{seed}:{config.name}") if seed is not None else random.Random()
        self.variant_names = [variant.name for variant in config.variants]
        self._cumulative = list(accumulate(variant.weight for variant in config.variants))
        self.cache: ModelCache | None = None
        if config.mme is not None:
            self.cache = ModelCache(
                config.mme,
                on_load=lambda model: stats.cold_loads.update([(config.name, model)]),
                on_evict=lambda model: stats.evictions.update([(config.name, model)]),
            )

    def pick_variant(self, pinned: str | None) -> str:
        if pinned is not None:
            if pinned not in self.variant_names:
                raise SageMakerError(
                    "ValidationError",
                    f"Variant {pinned} not found for endpoint {self.name}.",
                )
            return pinned
        if len(self.variant_names) == 1:
            return self.variant_names[0]
        point = self.rng.random() * self._cumulative[-1]
        for name, bound in zip(self.variant_names, self._cumulative, strict=True):
            if point < bound:
                return name
        return self.variant_names[-1]

    def sample_delay_ms(self, stats: EmulatorStats) -> float:
        latency, faults, rng = self.latency, self.faults, self.rng
        delay = latency.base_ms
        if latency.jitter_ms:
            delay += rng.uniform(-latency.jitter_ms, latency.jitter_ms)
        if latency.tail_share and rng.random() < latency.tail_share:
            delay += latency.tail_ms
            stats.tails[self.name] += 1
        if faults.stall_rate and rng.random() < faults.stall_rate:
            delay += faults.stall_ms
            stats.stalls[self.name] += 1
        return max(delay, 0.0)

    def draw_error(self) -> str | None:
        rates = self.faults.error_rates
        if not rates:
            return None
        point = self.rng.random()
        for code, rate in rates.items():
            if point < rate:
                return code
            point -= rate
        return None


class EmulatorService:
    """The request handler behind the HTTP server, and the control surface."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.stats = EmulatorStats()
        self._verifier = SignatureVerifier(config.auth, config.region)
        self._endpoints = {
            name: _EndpointState(endpoint, config.seed, self.stats)
            for name, endpoint in config.endpoints.items()
        }
        self._sessions: dict[str, float] = {}
        self.recorded: deque[RecordedRequest] = deque(maxlen=_RECORDED)
        self._output_bucket = f"s3://sagemaker-emulator-{config.region}-{config.account_id}"
        self.runtimes = RuntimeServices(self)

    async def close(self) -> None:
        for state in self._endpoints.values():
            if state.cache is not None:
                await state.cache.close()
            await state.model.close()

    # -- control ------------------------------------------------------------

    def endpoint(self, name: str) -> _EndpointState:
        state = self._endpoints.get(name)
        if state is None:
            raise KeyError(f"no endpoint {name!r} in the emulator configuration")
        return state

    def set_faults(self, endpoint: str, changes: Mapping[str, Any]) -> FaultConfig:
        state = self.endpoint(endpoint)
        merged = {**_as_dict(state.faults), **changes}
        state.faults = read(FaultConfig, merged, f"faults[{endpoint}]")
        return state.faults

    def set_latency(self, endpoint: str, changes: Mapping[str, Any]) -> LatencyConfig:
        state = self.endpoint(endpoint)
        merged = {**_as_dict(state.latency), **changes}
        state.latency = read(LatencyConfig, merged, f"latency[{endpoint}]")
        return state.latency

    def restore(self, endpoint: str | None = None) -> None:
        """Back to the configured faults and latency (one endpoint or all)."""
        for state in self._endpoints.values():
            if endpoint is None or state.name == endpoint:
                state.faults = state.config.faults
                state.latency = state.config.latency

    # -- what the inference routers and Global Inference Gateways use ------------

    def verify(self, request: Request) -> None:
        self._verifier.verify(request)

    def record(self, request: Request) -> None:
        self.recorded.append(
            RecordedRequest(request.method, request.path, tuple(request.header_pairs), request.body)
        )

    async def run_endpoint(
        self, endpoint: str, body: bytes, content_type: str, accept: str | None, request_id: str
    ) -> tuple[bytes, str, str]:
        """``endpoint``'s faults, latency and model, as InvokeEndpoint: a router destination."""
        state = self.endpoint(endpoint)
        variant = state.pick_variant(None)
        invocation = _Invocation(state, variant, None, request_id, [])
        await self._prepare(invocation)
        answer, answer_type = await self._run_model(invocation, body, content_type, accept)
        return answer, answer_type, variant

    # -- HTTP ---------------------------------------------------------------

    async def handle(self, request: Request) -> Response | StreamingResponse:
        path = request.path
        request_id = str(uuid.uuid4())
        endpoint_name = ""
        if path.startswith(RUNTIME_PREFIXES):  # inference routers, Global Inference Gateways
            return await self.runtimes.handle(request, request_id)
        try:
            if path.startswith("/endpoints/"):
                if len(request.body) > self.config.max_body_size:
                    return _too_large(self.config.max_body_size)
                self.record(request)
                endpoint_name, _, action = path[11:].partition("/")
                if request.method == "POST":
                    if action == "invocations":
                        return await self._invoke(request, endpoint_name, request_id)
                    if action == "invocations-response-stream":
                        return await self._invoke_stream(request, endpoint_name, request_id)
                    if action == "async-invocations":
                        return self._invoke_async(request, endpoint_name, request_id)
            elif path == "/ping":
                return Response(200, (("Content-Type", "text/plain"),), b"")
            elif path.startswith("/_emulator/"):
                return self._control(request)
            raise SageMakerError("UnknownOperationException", "Unknown operation")
        except SageMakerError as error:
            self.stats.errors[(endpoint_name, error.code)] += 1
            return error_response(error, request_id)

    def _resolve(
        self, request: Request, endpoint_name: str, request_id: str, operation: Operation
    ) -> _Invocation:
        self._verifier.verify(request)
        _check_members(operation, request.headers)
        state = self._endpoints.get(endpoint_name)
        if state is None:
            raise SageMakerError(
                "ValidationError",
                f"Endpoint {endpoint_name} of account {self.config.account_id} not found.",
            )
        headers = request.headers
        variant = state.pick_variant(headers.get("x-amzn-sagemaker-target-variant"))
        target_model = headers.get("x-amzn-sagemaker-target-model")
        if state.cache is not None:
            if target_model is None:
                raise SageMakerError(
                    "ValidationError",
                    f"Endpoint {endpoint_name} is a multi-model endpoint: "
                    "the TargetModel header is required.",
                )
            state.cache.check_known(target_model)
        elif target_model is not None:
            raise SageMakerError(
                "ValidationError",
                f"Endpoint {endpoint_name} is not a multi-model endpoint "
                "and does not support target model header.",
            )
        response_headers = [
            ("x-Amzn-Invoked-Production-Variant", variant),
            ("x-amzn-RequestId", request_id),
        ]
        custom_attributes = headers.get("x-amzn-sagemaker-custom-attributes")
        if custom_attributes is not None:
            response_headers.append(("X-Amzn-SageMaker-Custom-Attributes", custom_attributes))
        return _Invocation(state, variant, target_model, request_id, response_headers)

    async def _prepare(self, invocation: _Invocation) -> bool:
        """Faults, latency and the MME load; True if the call paid a cold load."""
        state = invocation.endpoint
        stats = self.stats
        stats.invocations[(state.name, invocation.variant, invocation.target_model)] += 1
        if state.faults.reset_rate and state.rng.random() < state.faults.reset_rate:
            stats.resets[state.name] += 1
            raise AbortConnection
        error_code = state.draw_error()
        delay_ms = state.sample_delay_ms(stats)
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        if error_code is not None:
            raise self._injected_error(error_code, state.name, invocation.request_id)
        if state.cache is not None and invocation.target_model is not None:
            return await state.cache.ensure_loaded(invocation.target_model)
        return False

    def _injected_error(self, code: str, endpoint: str, request_id: str) -> SageMakerError:
        if code == "ModelError":
            return self._model_error(endpoint, ModelFailure(500, "Injected model failure"))
        return SageMakerError(code, _INJECTED_MESSAGES[code].format(request_id=request_id))

    def _model_error(self, endpoint: str, failure: ModelFailure) -> SageMakerError:
        log_group = f"/aws/sagemaker/Endpoints/{endpoint}"
        kind = "client" if failure.status < 500 else "server"
        return SageMakerError(
            "ModelError",
            f'Received {kind} error ({failure.status}) from primary with message "'
            f'{failure.message}". See https://{self.config.region}.console.aws.amazon.com/'
            f"cloudwatch/home?region={self.config.region}#logEventViewer:group={log_group} "
            f"in account {self.config.account_id} for more information.",
            {
                "OriginalStatusCode": failure.status,
                "OriginalMessage": failure.message,
                "LogStreamArn": f"arn:aws:logs:{self.config.region}:{self.config.account_id}:"
                f"log-group:{log_group}",
                "ErrorCode": f"{kind.upper()}_ERROR_FROM_MODEL",
            },
        )

    async def _run_model(
        self, invocation: _Invocation, body: bytes, content_type: str, accept: str | None
    ) -> tuple[bytes, str]:
        state = invocation.endpoint
        try:
            return await state.model.invoke(body, content_type, accept, invocation.target_model)
        except ModelFailure as failure:
            raise self._model_error(state.name, failure) from None

    def _close_session(self, session_id: str | None, custom_attributes: str | None) -> bool:
        """True if the call asked to end its (existing) session, which then ends."""
        if session_id is None or session_id == "NEW_SESSION" or custom_attributes is None:
            return False
        if CLOSE_SESSION not in custom_attributes.split(","):
            return False
        return self._sessions.pop(session_id, None) is not None

    def _session_header(self, session_id: str | None, allow_new: bool) -> str | None:
        if session_id is None:
            return None
        now = time.time()
        if session_id == "NEW_SESSION" and allow_new:
            new_id = uuid.uuid4().hex
            self._sessions[new_id] = now + _SESSION_TTL_S
            expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + _SESSION_TTL_S))
            return f"{new_id}; Expires={expires}"
        expiry = self._sessions.get(session_id)
        if expiry is None or expiry < now:
            self._sessions.pop(session_id, None)
            raise SageMakerError(
                "ValidationError", f"Session {session_id} is not found or has expired."
            )
        return None

    async def _invoke(self, request: Request, endpoint_name: str, request_id: str) -> Response:
        invocation = self._resolve(request, endpoint_name, request_id, INVOKE)
        headers = request.headers
        new_session = self._session_header(headers.get("x-amzn-sagemaker-session-id"), True)
        cold = await self._prepare(invocation)
        content_type = headers.get("content-type", "application/octet-stream")
        body, answer_type = await self._run_model(
            invocation, request.body, content_type, headers.get("accept")
        )
        response_headers = invocation.headers
        response_headers.append(("Content-Type", answer_type))
        if new_session is not None:
            response_headers.append(("X-Amzn-SageMaker-New-Session-Id", new_session))
        session_id = headers.get("x-amzn-sagemaker-session-id")
        if self._close_session(session_id, headers.get("x-amzn-sagemaker-custom-attributes")):
            response_headers.append(("X-Amzn-SageMaker-Closed-Session-Id", str(session_id)))
        if cold:
            response_headers.append(("x-emulator-cold-load", "1"))
        return Response(200, response_headers, body)

    async def _invoke_stream(
        self, request: Request, endpoint_name: str, request_id: str
    ) -> StreamingResponse:
        invocation = self._resolve(request, endpoint_name, request_id, INVOKE_STREAM)
        headers = request.headers
        self._session_header(headers.get("x-amzn-sagemaker-session-id"), False)
        state = invocation.endpoint
        self.stats.stream_invocations[state.name] += 1
        cold = await self._prepare(invocation)
        content_type = headers.get("content-type", "application/octet-stream")
        body, answer_type = await self._run_model(
            invocation, request.body, content_type, headers.get("x-amzn-sagemaker-accept")
        )
        fail_midway = bool(
            state.faults.stream_error_rate and state.rng.random() < state.faults.stream_error_rate
        )
        if fail_midway:
            self.stats.stream_errors[state.name] += 1
        response_headers = invocation.headers
        response_headers.append(("Content-Type", _STREAM_CONTENT_TYPE))
        response_headers.append(("X-Amzn-SageMaker-Content-Type", answer_type))
        if cold:
            response_headers.append(("x-emulator-cold-load", "1"))
        parts = _split(body, state.config.stream_parts)
        error_code = state.faults.stream_error_code if fail_midway else None
        events = _stream_events(parts, state.config.stream_interval_ms / 1000, error_code)
        return StreamingResponse(events, 200, response_headers)

    def _invoke_async(self, request: Request, endpoint_name: str, request_id: str) -> Response:
        self._verifier.verify(request)
        _check_members(INVOKE_ASYNC, request.headers)
        if endpoint_name not in self._endpoints:
            raise SageMakerError(
                "ValidationError",
                f"Endpoint {endpoint_name} of account {self.config.account_id} not found.",
            )
        headers = request.headers
        if not headers.get("x-amzn-sagemaker-inputlocation") and not request.body:
            raise SageMakerError("ValidationError", "InputLocation or Body is required.")
        if len(request.body) > MAX_ASYNC_BODY_BYTES:
            raise SageMakerError(
                "ValidationError",
                f"Body of {len(request.body)} bytes exceeds the limit of {MAX_ASYNC_BODY_BYTES}.",
            )
        inference_id = headers.get("x-amzn-sagemaker-inference-id") or str(uuid.uuid4())
        self.stats.async_invocations[endpoint_name] += 1
        output, failure = self._async_locations(headers, endpoint_name, inference_id)
        return Response(
            202,
            (
                ("Content-Type", "application/json"),
                ("x-amzn-RequestId", request_id),
                ("X-Amzn-SageMaker-OutputLocation", output),
                ("X-Amzn-SageMaker-FailureLocation", failure),
            ),
            orjson.dumps({"InferenceId": inference_id}),
        )

    def _async_locations(
        self, headers: Mapping[str, str], endpoint_name: str, inference_id: str
    ) -> tuple[str, str]:
        """Where the output and a failure go: S3OutputPathExtension and Filename shape the key."""
        extension = headers.get("x-amzn-sagemaker-s3outputpathextension")
        filename = headers.get("x-amzn-sagemaker-filename")
        prefix = self._output_bucket
        output_dir = f"{prefix}/async-endpoint-outputs/{endpoint_name}"
        if extension:
            output_dir = f"{output_dir}/{extension.strip('/')}"
        output_name = filename or f"{inference_id}.out"
        failure = f"{prefix}/async-endpoint-failures/{endpoint_name}/{inference_id}-error.out"
        return f"{output_dir}/{output_name}", failure

    # -- control over HTTP (for an emulator in another process) -------------

    def _control(self, request: Request) -> Response:
        action = request.path[len("/_emulator/") :]
        try:
            if action == "stats" and request.method == "GET":
                return _json_response(self.stats.snapshot())
            if action == "requests" and request.method == "GET":
                return _json_response([recorded.as_dict() for recorded in self.recorded])
            if action == "stats/reset" and request.method == "POST":
                self.stats.reset()
                return _json_response({})
            kind, _, endpoint = action.partition("/")
            if request.method == "POST" and kind in ("faults", "latency", "restore"):
                changes = orjson.loads(request.body) if request.body else {}
                if kind == "faults":
                    self.set_faults(endpoint, changes)
                elif kind == "latency":
                    self.set_latency(endpoint, changes)
                else:
                    self.restore(endpoint or None)
                return _json_response({})
        except (KeyError, ValueError, TypeError) as exc:
            return _json_response({"message": str(exc)}, 400)
        return _json_response({"message": "unknown control action"}, 404)


def _check_members(operation: Operation, headers: Mapping[str, str]) -> None:
    """SageMaker's validation of the request's header members against the model's bounds."""
    for member in operation.headers:
        value = headers.get(member.header)
        if value is not None:
            problem = _member_problem(member, value)
            if problem is not None:
                raise SageMakerError(
                    "ValidationError",
                    f"1 validation error detected: Value '{value[:64]}' at "
                    f"'{member.name[0].lower()}{member.name[1:]}' failed to satisfy "
                    f"constraint: {problem}",
                )


def _member_problem(member: Member, value: str) -> str | None:
    if member.kind == "integer":
        if not value.lstrip("-").isdigit():
            return "Member must be an integer"
        number = int(value)
        if number < member.min_length:
            return f"Member must have value greater than or equal to {member.min_length}"
        if member.max_length is not None and number > member.max_length:
            return f"Member must have value less than or equal to {member.max_length}"
        return None
    if len(value) < member.min_length:
        return f"Member must have length greater than or equal to {member.min_length}"
    if member.max_length is not None and len(value) > member.max_length:
        return f"Member must have length less than or equal to {member.max_length}"
    return None


def _too_large(limit: int) -> Response:
    # As the HTTP server answers a body past its own cap, which may be larger than
    # SageMaker Runtime's limit when a Global Inference Gateway (10 MiB) is configured.
    return Response(
        413,
        (("Content-Type", "text/plain"),),
        f"HTTP content length exceeded {limit} bytes.".encode(),
    )


def _as_dict(config: FaultConfig | LatencyConfig) -> dict[str, Any]:
    return asdict(config)


def _json_response(payload: object, status: int = 200) -> Response:
    return Response(status, (("Content-Type", "application/json"),), orjson.dumps(payload))


def _split(body: bytes, parts: int) -> list[bytes]:
    if len(body) <= 1 or parts <= 1:
        return [body]
    size = -(-len(body) // min(parts, len(body)))
    return [body[start : start + size] for start in range(0, len(body), size)]


async def _stream_events(
    parts: list[bytes], interval_s: float, error_code: str | None
) -> AsyncIterator[bytes]:
    """The payload parts; with an ``error_code``, a ModelStreamError after the first."""
    for index, part in enumerate(parts):
        if index and interval_s:
            await asyncio.sleep(interval_s)
        if error_code is not None and index == 1:
            break
        yield encode_payload_part(part)
    if error_code is not None:
        yield model_stream_error(
            "Model response was interrupted: the connection to the model was reset.",
            error_code,
        )
