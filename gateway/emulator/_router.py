"""Emulated inference routers (``sagemaker-inference-router-runtime``).

A router sends each call to one destination of the named routing target: a
destination in its own Region first (``local-preferred``); when none there can
take it, one elsewhere (``capacity-available`` with two or more candidates,
``only-healthy`` with one; ``failover`` when the local ones are unhealthy or
none is healthy). After a retryable error of a destination, before the model
answered, it tries once more on another destination (``failover``); an attempt
that runs out of time is not retried. Destinations are the emulator's own
endpoints: their models, latency and faults apply.
"""

from __future__ import annotations

import asyncio
import random
import re
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import orjson

from gateway._config.reader import read
from gateway._server.http import AbortConnection, Request, Response
from gateway.emulator._config import ROUTER_MAX_BODY
from gateway.emulator._errors import SageMakerError
from gateway.emulator._runtime_config import (
    ROUTER_ERROR_CODES,
    DestinationConfig,
    InferenceRouterConfig,
    RouterFaultConfig,
)
from gateway.emulator._runtime_errors import WireError

__all__ = ["MAX_ROUTER_BODY", "RouterService", "RouterStats"]

MAX_ROUTER_BODY = ROUTER_MAX_BODY  # 6 MB
_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")
_INPUT_LOCATION = re.compile(r"(https|s3)://([^/]+)/?(.*)")
_PATH_EXTENSION = re.compile(r"(?!s3:|https:)[a-zA-Z0-9!_.*'()/-]+")
_FILENAME = re.compile(r"(?!.*\..*\.)[a-zA-Z0-9][a-zA-Z0-9-_\.]*")

# Destination errors the router retries once elsewhere: the model has not answered.
_RETRYABLE = frozenset(
    {
        "ThrottlingException",
        "ModelNotReadyException",
        "InternalFailure",
        "ServiceUnavailableException",
        "InternalDependencyException",
    }
)
# An endpoint's (SageMaker Runtime) error code -> the router's.
_FROM_ENDPOINT = {
    "ValidationError": "ValidationException",
    "ThrottlingException": "ThrottlingException",
    "ModelNotReadyException": "ModelNotReadyException",
    "ModelError": "ModelError",
    "InternalFailure": "InternalFailure",
    "ServiceUnavailable": "ServiceUnavailableException",
    "InternalDependencyException": "InternalDependencyException",
}
_INJECTED = {
    "ValidationException": "Injected validation error.",
    "AccessDeniedException": "User is not authorized to invoke the inference router and "
    "every destination of the routing target.",
    "RequestTimeoutException": "The inference router did not receive the complete request "
    "within 300 seconds.",
    "ModelError": "Injected model failure",
    "ThrottlingException": "Rate exceeded for the inference router.",
    "ModelNotReadyException": "The destination is not ready to serve the model.",
    "InternalFailure": "An internal error occurred.",
    "ServiceUnavailableException": "The service is unavailable. Try your call again.",
    "InternalDependencyException": "An internal dependency failed.",
}


def router_error(code: str, message: str, fields: Mapping[str, object] | None = None) -> WireError:
    return WireError(ROUTER_ERROR_CODES[code], code, message, fields)


class _AttemptTimedOut(WireError):
    """An attempt past its time limit: not retried, the model may still be running it."""


def _printable(value: str) -> bool:
    return all(" " <= char <= "~" for char in value)


@dataclass(frozen=True, slots=True)
class _Rule:
    """One header member's bounds, as the router's model gives them."""

    member: str
    low: int
    high: int
    check: Callable[[str], bool] | None = None
    integer: bool = False


def _id_check(value: str) -> bool:
    return _printable(value) and not value[:1].isspace()


_COMMON_RULES = {
    "x-amzn-sagemaker-routing-target-name": _Rule(
        "routingTargetName", 1, 63, lambda v: bool(_NAME.fullmatch(v))
    ),
    "x-amzn-sagemaker-inference-id": _Rule("inferenceId", 1, 64, _id_check),
    "x-amzn-sagemaker-custom-attributes": _Rule("customAttributes", 0, 1024, str.isascii),
}
_INVOKE_RULES = {
    **_COMMON_RULES,
    "content-type": _Rule("contentType", 0, 1024, str.isascii),
    "accept": _Rule("accept", 0, 1024, str.isascii),
    "x-amzn-sagemaker-prefix-aware-id": _Rule("prefixAwareId", 1, 64, _id_check),
}
_ASYNC_RULES = {
    **_COMMON_RULES,
    "x-amzn-sagemaker-content-type": _Rule("contentType", 0, 1024, str.isascii),
    "x-amzn-sagemaker-accept": _Rule("accept", 0, 1024, str.isascii),
    "x-amzn-sagemaker-inputlocation": _Rule(
        "inputLocation", 1, 1024, lambda v: bool(_INPUT_LOCATION.fullmatch(v))
    ),
    "x-amzn-sagemaker-s3outputpathextension": _Rule(
        "s3OutputPathExtension", 1, 512, lambda v: bool(_PATH_EXTENSION.fullmatch(v))
    ),
    "x-amzn-sagemaker-filename": _Rule("filename", 1, 64, lambda v: bool(_FILENAME.fullmatch(v))),
    "x-amzn-sagemaker-requestttlseconds": _Rule("requestTTLSeconds", 60, 21600, integer=True),
    "x-amzn-sagemaker-invocationtimeoutseconds": _Rule(
        "invocationTimeoutSeconds", 1, 3600, integer=True
    ),
}


def _rule_problem(rule: _Rule, value: str) -> str | None:
    if rule.integer:
        if not (value.isascii() and value.isdigit()):
            return "Member must be an integer"
        if not rule.low <= int(value) <= rule.high:
            return f"Member must have value between {rule.low} and {rule.high}"
        return None
    if not rule.low <= len(value) <= rule.high:
        return f"Member must have length between {rule.low} and {rule.high}"
    if rule.check is not None and not rule.check(value):
        return "Member must satisfy the pattern of its model"
    return None


def _check_headers(rules: Mapping[str, _Rule], headers: Mapping[str, str]) -> None:
    for header, rule in rules.items():
        value = headers.get(header)
        if value is None:
            continue
        problem = _rule_problem(rule, value)
        if problem is not None:
            # The value is not quoted: CustomAttributes is sensitive.
            raise router_error(
                "ValidationException",
                f"1 validation error detected: Value at '{rule.member}' failed to satisfy "
                f"constraint: {problem}",
            )


class _Destination:
    """A routing target's destination and its live state (in flight, health)."""

    def __init__(self, config: DestinationConfig, router_region: str, account_id: str) -> None:
        self.endpoint = config.endpoint
        self.region = config.region or router_region
        self.local = self.region == router_region
        account = config.account_id or account_id
        if config.inference_component is not None:
            resource = f"inference-component/{config.inference_component.lower()}"
        else:
            resource = f"endpoint/{config.endpoint.lower()}"
        self.arn = f"arn:aws:sagemaker:{self.region}:{account}:{resource}"
        self.max_in_flight = config.max_in_flight
        self.healthy = config.healthy
        self.in_flight = 0

    def can_take(self) -> bool:
        return self.healthy and (not self.max_in_flight or self.in_flight < self.max_in_flight)


class _Router:
    def __init__(
        self, config: InferenceRouterConfig, region: str, account_id: str, seed: int | None
    ) -> None:
        self.config = config
        self.name = config.name
        self.region = config.region or region
        self.account_id = account_id
        self.faults = config.faults
        self.targets = {
            name: [_Destination(d, self.region, account_id) for d in target.destinations]
            for name, target in config.routing_targets.items()
        }
        self.modes = {name: target.mode for name, target in config.routing_targets.items()}
        self.rng = random.Random(f"{seed}:{config.name}") if seed is not None else random.Random()

    def draw_error(self) -> str | None:
        point = self.rng.random()
        for code, rate in self.faults.error_rates.items():
            if point < rate:
                return code
            point -= rate
        return None

    def choose(
        self, destinations: list[_Destination], tried: list[_Destination]
    ) -> tuple[_Destination, str] | None:
        """The destination for the next attempt, and the routing reason."""
        candidates = [d for d in destinations if d not in tried]
        local = [d for d in candidates if d.local and d.can_take()]
        if local and not tried:
            return self.rng.choice(local), "local-preferred"
        if local:
            return self.rng.choice(local), "failover"
        remote = [d for d in candidates if not d.local and d.can_take()]
        if remote:
            unhealthy_here = any(d.local and not d.healthy for d in destinations)
            if tried or unhealthy_here:
                reason = "failover"
            else:
                reason = "capacity-available" if len(remote) > 1 else "only-healthy"
            return self.rng.choice(remote), reason
        # None is healthy: try one that has room anyway.
        room = [d for d in candidates if not d.max_in_flight or d.in_flight < d.max_in_flight]
        return (self.rng.choice(room), "failover") if room else None


@dataclass(slots=True)
class RouterStats:
    """What the routers did: routed calls by (router, target, resource ARN, reason)."""

    routed: Counter[tuple[str, str, str, str]]
    retries: Counter[tuple[str, str]]
    errors: Counter[tuple[str, str]]
    async_routed: Counter[tuple[str, str, str]]

    @classmethod
    def empty(cls) -> RouterStats:
        return cls(Counter(), Counter(), Counter(), Counter())

    def snapshot(self) -> dict[str, list[list[object]]]:
        return {
            "routed": [[*key, count] for key, count in self.routed.items()],
            "retries": [[*key, count] for key, count in self.retries.items()],
            "errors": [[*key, count] for key, count in self.errors.items()],
            "async_routed": [[*key, count] for key, count in self.async_routed.items()],
        }


# Runs an endpoint's model as InvokeEndpoint would (faults, latency, the model):
# (endpoint, body, content type, accept, custom attributes, request id)
#   -> (body, content type, variant, custom attributes).
EndpointCall = Callable[
    [str, bytes, str, str | None, str | None, str],
    Awaitable[tuple[bytes, str, str, str | None]],
]


class RouterService:
    """The routers of one emulator; ``call_endpoint`` runs a destination endpoint."""

    def __init__(
        self,
        routers: Mapping[str, InferenceRouterConfig],
        region: str,
        account_id: str,
        seed: int | None,
        call_endpoint: EndpointCall,
    ) -> None:
        self._routers = {
            name: _Router(config, region, account_id, seed) for name, config in routers.items()
        }
        self._call_endpoint = call_endpoint
        self._region = region
        self._account_id = account_id
        self.stats = RouterStats.empty()

    # -- control -------------------------------------------------------------

    def set_destination(
        self,
        router: str,
        target: str,
        endpoint: str,
        *,
        healthy: bool | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        """Mark a destination (un)healthy or change its capacity, e.g. to force a failover."""
        matched = [d for d in self._target(router, target) if d.endpoint == endpoint]
        if not matched:
            raise KeyError(f"no destination {endpoint!r} in {router}/{target}")
        for destination in matched:
            if healthy is not None:
                destination.healthy = healthy
            if max_in_flight is not None:
                destination.max_in_flight = max_in_flight

    def set_faults(
        self, router: str, error_rates: Mapping[str, float], retry_after_s: int | None = None
    ) -> None:
        state = self._router(router)
        changes: dict[str, object] = {"error_rates": dict(error_rates)}
        changes["retry_after_s"] = (
            state.faults.retry_after_s if retry_after_s is None else retry_after_s
        )
        state.faults = read(RouterFaultConfig, changes, f"{router}")

    def restore(self) -> None:
        for state in self._routers.values():
            state.faults = state.config.faults
            for name, target in state.config.routing_targets.items():
                for destination, config in zip(
                    state.targets[name], target.destinations, strict=True
                ):
                    destination.healthy = config.healthy
                    destination.max_in_flight = config.max_in_flight

    def _router(self, name: str) -> _Router:
        state = self._routers.get(name)
        if state is None:
            raise KeyError(f"no inference router {name!r} in the emulator configuration")
        return state

    def _target(self, router: str, target: str) -> list[_Destination]:
        destinations = self._router(router).targets.get(target)
        if destinations is None:
            raise KeyError(f"no routing target {target!r} in inference router {router!r}")
        return destinations

    # -- requests ------------------------------------------------------------

    def _resolve(self, request: Request, name: str, mode: str) -> tuple[_Router, str]:
        router = self._routers.get(name)
        if router is None:
            raise router_error(
                "ValidationException",
                f"Inference router {name} of account {self._account_id} not found.",
            )
        target = request.headers.get("x-amzn-sagemaker-routing-target-name")
        if not target:
            raise router_error(
                "ValidationException",
                "The X-Amzn-SageMaker-Routing-Target-Name header is required.",
            )
        if target not in router.targets:
            raise router_error(
                "ValidationException",
                f"Routing target {target} not found in inference router {name}.",
            )
        if router.modes[target] != mode:
            kind = "asynchronous" if mode == "async" else "real-time"
            raise router_error(
                "ValidationException",
                f"Routing target {target} is not configured for {kind} inference.",
            )
        injected = router.draw_error()
        if injected is not None:
            error = router_error(injected, _INJECTED[injected])
            if injected == "ThrottlingException":
                error.headers = (("Retry-After", str(router.faults.retry_after_s)),)
            raise error
        return router, target

    async def invoke(self, request: Request, name: str, request_id: str) -> Response:
        try:
            return await self._invoke(request, name, request_id)
        except WireError as error:
            self.stats.errors[(name, error.code)] += 1
            raise

    async def _invoke(self, request: Request, name: str, request_id: str) -> Response:
        _check_headers(_INVOKE_RULES, request.headers)
        if len(request.body) > MAX_ROUTER_BODY:
            raise WireError(
                413,
                "PayloadTooLargeException",
                f"The request body of {len(request.body)} bytes exceeds the inference router's "
                f"limit of {MAX_ROUTER_BODY} bytes.",
            )
        if not request.body:
            raise router_error("ValidationException", "The request body can't be empty.")
        router, target = self._resolve(request, name, "real-time")
        return await self._route(router, target, request, request_id)

    async def _route(
        self, router: _Router, target: str, request: Request, request_id: str
    ) -> Response:
        destinations = router.targets[target]
        tried: list[_Destination] = []
        while True:
            chosen = router.choose(destinations, tried)
            if chosen is None:
                raise router_error(
                    "ServiceUnavailableException",
                    f"No destination of routing target {target} could serve the request.",
                )
            destination, reason = chosen
            tried.append(destination)
            try:
                answer = await self._attempt(router, destination, request, request_id)
            except WireError as error:
                retryable = error.code in _RETRYABLE and not isinstance(error, _AttemptTimedOut)
                if len(tried) == 1 and retryable and len(destinations) > 1:
                    self.stats.retries[(router.name, target)] += 1
                    continue
                raise
            self.stats.routed[(router.name, target, destination.arn, reason)] += 1
            body, content_type, variant, custom_attributes = answer
            headers = [
                ("x-amzn-RequestId", request_id),
                ("Content-Type", content_type),
                ("X-Amzn-SageMaker-Invoked-Routed-Resource-Arn", destination.arn),
                ("X-Amzn-SageMaker-Invoked-Routing-Reason", reason),
                ("X-Amzn-Invoked-Production-Variant", variant),
            ]
            if custom_attributes is not None:
                headers.append(("X-Amzn-SageMaker-Custom-Attributes", custom_attributes))
            return Response(200, headers, body)

    async def _attempt(
        self, router: _Router, destination: _Destination, request: Request, request_id: str
    ) -> tuple[bytes, str, str, str | None]:
        headers = request.headers
        destination.in_flight += 1
        try:
            async with asyncio.timeout(router.config.attempt_timeout_s):
                return await self._call_endpoint(
                    destination.endpoint,
                    request.body,
                    headers.get("content-type", "application/octet-stream"),
                    headers.get("accept"),
                    headers.get("x-amzn-sagemaker-custom-attributes"),
                    request_id,
                )
        except TimeoutError:
            raise _AttemptTimedOut(
                ROUTER_ERROR_CODES["ServiceUnavailableException"],
                "ServiceUnavailableException",
                f"The destination {destination.arn} did not respond within "
                f"{router.config.attempt_timeout_s:g} seconds.",
            ) from None
        except AbortConnection:
            raise router_error(
                "ServiceUnavailableException",
                f"The destination {destination.arn} closed the connection.",
            ) from None
        except SageMakerError as error:
            raise _from_endpoint(error) from None
        finally:
            destination.in_flight -= 1

    def invoke_async(self, request: Request, name: str, request_id: str) -> Response:
        try:
            return self._invoke_async(request, name, request_id)
        except WireError as error:
            self.stats.errors[(name, error.code)] += 1
            raise

    def _invoke_async(self, request: Request, name: str, request_id: str) -> Response:
        headers = request.headers
        _check_headers(_ASYNC_RULES, headers)
        if not headers.get("x-amzn-sagemaker-inputlocation"):
            raise router_error("ValidationException", "InputLocation is required.")
        router, target = self._resolve(request, name, "async")
        chosen = router.choose(router.targets[target], [])
        if chosen is None:
            raise router_error(
                "ServiceUnavailableException",
                f"No destination of routing target {target} could take the request.",
            )
        self.stats.async_routed[(name, target, chosen[0].arn)] += 1
        inference_id = headers.get("x-amzn-sagemaker-inference-id") or str(uuid.uuid4())
        prefix = f"s3://sagemaker-emulator-{router.region}-{self._account_id}"
        output_dir = f"{prefix}/inference-router-outputs/{name}/{target}"
        extension = headers.get("x-amzn-sagemaker-s3outputpathextension")
        if extension:
            output_dir = f"{output_dir}/{extension.strip('/')}"
        output = f"{output_dir}/{headers.get('x-amzn-sagemaker-filename') or inference_id + '.out'}"
        failure = f"{prefix}/inference-router-failures/{name}/{target}/{inference_id}-error.out"
        return Response(
            202,
            (
                ("x-amzn-RequestId", request_id),
                ("Content-Type", "application/json"),
                ("X-Amzn-SageMaker-OutputLocation", output),
                ("X-Amzn-SageMaker-FailureLocation", failure),
            ),
            orjson.dumps({"InferenceId": inference_id}),
        )


def _from_endpoint(error: SageMakerError) -> WireError:
    """A destination endpoint's error as the router answers it."""
    code = _FROM_ENDPOINT.get(error.code, "InternalFailure")
    fields: dict[str, object] = {}
    if code == "ModelError":
        fields = {
            key: error.fields[key]
            for key in ("OriginalStatusCode", "OriginalMessage", "LogStreamArn")
            if key in error.fields
        }
    return router_error(code, error.message, fields)
