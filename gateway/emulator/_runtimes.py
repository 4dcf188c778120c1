"""The inference router and Global Inference Gateway runtimes beside SageMaker Runtime.

:class:`RuntimeServices` answers their paths for :class:`EmulatorService` (the same
port, signatures and recorded requests), runs router destinations on the
emulator's own endpoints, and serves their control API under
``/_emulator/runtimes/``:

* ``GET stats``, ``POST stats/reset``, ``GET forwarded`` (what the gateways' model
  servers received), ``POST restore``;
* ``POST router-faults/<router>`` ``{"error_rates": {...}}``;
* ``POST destination/<router>/<target>/<endpoint>`` ``{"healthy": false, "max_in_flight": 1}``;
* ``POST gateway-faults/<gateway>`` and ``POST gateway-latency/<gateway>`` (the keys of
  their config sections).
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import unquote

import orjson

from gateway._server.http import Request, Response, StreamingResponse
from gateway.emulator._config import EmulatorConfig
from gateway.emulator._errors import SageMakerError, error_response
from gateway.emulator._global_gateway import GlobalGatewayService
from gateway.emulator._router import RouterService
from gateway.emulator._runtime_config import (
    GATEWAY_PREFIX,
    ROUTER_PREFIX,
    RUNTIMES_CONTROL_PREFIX,
)
from gateway.emulator._runtime_errors import WireError, wire_error_response

__all__ = ["HostService", "RuntimeServices"]


class HostService(Protocol):
    """What the runtimes need of the SageMaker Runtime they share a port with.

    :class:`EmulatorService` provides it, and builds the runtimes itself.
    """

    config: EmulatorConfig

    def verify(self, request: Request) -> None:
        """Check the request's signature; raises `SageMakerError`."""
        ...

    def record(self, request: Request) -> None:
        """Keep the request for inspection, beside SageMaker Runtime's own."""
        ...

    async def run_endpoint(
        self, endpoint: str, body: bytes, content_type: str, accept: str | None, request_id: str
    ) -> tuple[bytes, str, str]:
        """Invoke ``endpoint`` as InvokeEndpoint would: (answer, its type, the variant)."""
        ...


class RuntimeServices:
    """The routers and gateways of one :class:`EmulatorService`."""

    def __init__(self, service: HostService) -> None:
        config = service.config
        self._service = service
        self.routers = RouterService(
            config.inference_routers,
            config.region,
            config.account_id,
            config.seed,
            self._call_endpoint,
        )
        self.gateways = GlobalGatewayService(config.global_inference_gateways, config.seed)

    async def _call_endpoint(
        self,
        endpoint: str,
        body: bytes,
        content_type: str,
        accept: str | None,
        custom_attributes: str | None,
        request_id: str,
    ) -> tuple[bytes, str, str, str | None]:
        """A router destination: the endpoint's faults, latency and model, as InvokeEndpoint."""
        answer, answer_type, variant = await self._service.run_endpoint(
            endpoint, body, content_type, accept, request_id
        )
        return answer, answer_type, variant, custom_attributes

    async def handle(self, request: Request, request_id: str) -> Response | StreamingResponse:
        path = request.path
        if path.startswith(RUNTIMES_CONTROL_PREFIX):
            return self._control(request)
        self._service.record(request)
        try:
            return await self._dispatch(request, path, request_id)
        except WireError as error:
            return wire_error_response(error, request_id)
        except SageMakerError as error:  # the signature check's
            return error_response(error, request_id)

    async def _dispatch(
        self, request: Request, path: str, request_id: str
    ) -> Response | StreamingResponse:
        if request.method == "POST" and path.startswith(ROUTER_PREFIX):
            name, _, action = path[len(ROUTER_PREFIX) :].partition("/")
            if action in ("invocations", "async-invocations"):
                if request.http_version != "1.1":
                    return _http_version_not_supported()
                self._service.verify(request)
                if action == "invocations":
                    return await self.routers.invoke(request, unquote(name), request_id)
                return self.routers.invoke_async(request, unquote(name), request_id)
        if request.method == "POST" and path.startswith(GATEWAY_PREFIX):
            gateway_id, _, action = path[len(GATEWAY_PREFIX) :].partition("/")
            if action in ("invocations", "invocations-response-stream"):
                self._service.verify(request)
                stream = action == "invocations-response-stream"
                return await self.gateways.invoke(request, unquote(gateway_id), request_id, stream)
        raise WireError(404, "UnknownOperationException", "Unknown operation")

    # -- control -------------------------------------------------------------

    def restore(self) -> None:
        self.routers.restore()
        self.gateways.restore()

    def stats(self) -> dict[str, Any]:
        routers, gateways = self.routers.stats, self.gateways.stats
        return {"routers": routers.snapshot(), "gateways": gateways.snapshot()}

    def reset_stats(self) -> None:
        self.routers.stats = type(self.routers.stats).empty()
        self.gateways.stats = type(self.gateways.stats).empty()

    def _control(self, request: Request) -> Response:
        action = request.path[len(RUNTIMES_CONTROL_PREFIX) :]
        try:
            if request.method == "GET" and action in ("stats", "forwarded"):
                return _json(self.stats() if action == "stats" else self._forwarded())
            if request.method == "POST":
                changes = orjson.loads(request.body) if request.body else {}
                if self._change(action, changes):
                    return _json({})
        except (KeyError, ValueError, TypeError) as exc:
            return _json({"message": str(exc)}, 400)
        return _json({"message": "unknown control action"}, 404)

    def _change(self, action: str, changes: dict[str, Any]) -> bool:
        kind, _, rest = action.partition("/")
        if kind == "stats" and rest == "reset":
            self.reset_stats()
        elif kind == "restore":
            self.restore()
        elif kind == "router-faults":
            self.routers.set_faults(
                rest, changes.get("error_rates", {}), changes.get("retry_after_s")
            )
        elif kind == "destination":
            router, target, endpoint = rest.split("/")
            self.routers.set_destination(router, target, endpoint, **changes)
        elif kind == "gateway-faults":
            self.gateways.set_faults(rest, changes)
        elif kind == "gateway-latency":
            self.gateways.set_latency(rest, changes)
        else:
            return False
        return True

    def _forwarded(self) -> list[dict[str, Any]]:
        return [
            {"gateway": f.gateway, "body": f.body, "identity_token": f.identity_token}
            for f in self.gateways.forwarded
        ]


def _json(payload: object, status: int = 200) -> Response:
    return Response(status, (("Content-Type", "application/json"),), orjson.dumps(payload))


def _http_version_not_supported() -> Response:
    # The inference router runtime speaks HTTP/1.1 only.
    return Response(
        505,
        (("Content-Type", "application/json"),),
        b'{"Message":"The inference router runtime supports HTTP/1.1 only."}',
    )
