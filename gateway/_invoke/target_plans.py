# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Target planning: where each target's requests go and who signs them.

Resolved once at start, with botocore (region, runtime URLs, credential
chain), then per target on first use: its origin, its region's signer, its
request paths. The pipeline asks this module for a plan; nothing
here calls back into ``Gateway``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from gateway import errors
from gateway._aws.models import service_model
from gateway._aws.sigv4 import PresignedHead, SigV4Signer
from gateway._config.options import GatewayConfig
from gateway._http.message import Origin, user_agent
from gateway._http.request import RequestSigner
from gateway._invoke.api import (
    SERVICE_NAME,
    Operation,
    check_endpoint_name,
    check_gateway_id,
    check_header_value,
    check_router_name,
    operation_table,
)
from gateway._invoke.credentials import CredentialSource, botocore_fetcher
from gateway.routing import Route, TargetState
from gateway.routing._config import parse_routes

__all__ = ["TargetPlan", "TargetPlanner", "router_takes"]


# Presigned heads a target keeps for relayed calls, by their members.
_MAX_RELAY_HEADS: Final = 256


class TargetPlan:
    """Everything about one target computed once: where, which paths, which signer."""

    __slots__ = (
        "_last_relay_head",
        "_last_relay_members",
        "endpoint",
        "host",
        "origin",
        "paths",
        "relay_heads",
        "routing_target",
        "signer",
        "variant",
    )

    def __init__(
        self,
        endpoint: str,
        origin: Origin,
        signer: RequestSigner,
        variant: str | None,
    ) -> None:
        self.endpoint = endpoint
        self.origin = origin
        self.host = origin.host_header
        self.signer = signer
        self.variant = variant
        # An inference router target: ``endpoint`` is the router, this its routing
        # target, and InvokeEndpoint goes out as InvokeInferenceRouter.
        self.routing_target: str | None = None
        # Operation name -> (path, its SigV4 canonical-request prefix), filled by path_of.
        self.paths: dict[str, tuple[str, str]] = {}
        # A relayed call's members -> (its caller's user agent, its presigned head): see
        # gateway._invoke.call's _relay_head.
        self.relay_heads: dict[tuple[object, ...], tuple[str | None, PresignedHead]] = {}
        # The members last found or kept there, and what they found: see relay_head_of.
        self._last_relay_members: tuple[object, ...] | None = None
        self._last_relay_head: tuple[str | None, PresignedHead] | None = None

    def relay_head_of(self, members: tuple[object, ...]) -> tuple[str | None, PresignedHead] | None:
        """``relay_heads.get(members)``, the last tuple found by identity: a relay hands
        the same tuple again while its values repeat (``SidecarApp._members``)."""
        if members is self._last_relay_members:
            return self._last_relay_head
        kept = self.relay_heads.get(members)
        if kept is not None:
            self._last_relay_members = members
            self._last_relay_head = kept
        return kept

    def keep_relay_head(
        self, members: tuple[object, ...], kept: tuple[str | None, PresignedHead]
    ) -> None:
        heads = self.relay_heads
        if len(heads) >= _MAX_RELAY_HEADS:
            heads.clear()  # members that change every call (an inference id) pile up otherwise
        heads[members] = kept
        self._last_relay_members = members
        self._last_relay_head = kept

    def path_of(self, operation: Operation) -> tuple[str, str]:
        """The request path of ``operation`` on this target, and its signing prefix."""
        path = self.paths.get(operation.name)
        if path is None:
            if self.routing_target is not None:
                operation = _router_operation(operation)
            url_path = operation.path(self.endpoint)
            path = (url_path, SigV4Signer.request_prefix("POST", url_path))
            self.paths[operation.name] = path
        return path

    def routed_headers(
        self, operation: Operation, after_host: list[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        """An InvokeEndpoint call's headers after ``host`` as InvokeInferenceRouter takes them.

        The routing target joins them; a member the router does not take
        (a target model, a session...) is refused rather than dropped, since
        dropping it would silently change the call.
        """
        accepted = _router_operation(operation).by_header
        headers = [(_ROUTING_TARGET, self.routing_target or "")]
        for name, value in after_host:
            if name not in accepted:
                raise errors.InvalidRequest(
                    f"{name}: not taken by inference router target {self.endpoint}"
                )
            headers.append((name, value))
        headers.sort()
        return headers


_ROUTING_TARGET = "x-amzn-sagemaker-routing-target-name"
ROUTER_SERVICE = "sagemaker-inference-router-runtime"
# SageMaker Runtime's operations an inference router has a counterpart of (it has no stream).
_ROUTER_OPERATIONS = {
    "InvokeEndpoint": "InvokeInferenceRouter",
    "InvokeEndpointAsync": "InvokeInferenceRouterAsync",
}


def _router_operation(operation: Operation) -> Operation:
    """The inference router's counterpart of ``operation``, for a call to a router target."""
    name = _ROUTER_OPERATIONS.get(operation.name)
    if name is None:
        raise errors.InvalidRequest(
            f"{operation.name} cannot go to an inference router target "
            "(InvokeEndpoint and InvokeEndpointAsync can)"
        )
    router = operation_table().get((ROUTER_SERVICE, name))
    if router is None:
        service_model(ROUTER_SERVICE)  # an older botocore: names the release it needs
        raise AssertionError(f"unreachable: the model has {name}")
    return router


def router_takes(operation: Operation, after_host: list[tuple[str, str]], body: bytes) -> bool:
    """Whether a call of ``operation`` maps onto the inference router's counterpart:
    one exists, takes every member the call sets, has each member it requires
    (the routing target aside), and takes the body, if any."""
    if operation.name not in _ROUTER_OPERATIONS:
        return False
    router = _router_operation(operation)
    accepted = router.by_header
    if any(name not in accepted for name, _ in after_host):
        return False
    given = {name for name, _ in after_host}
    for member in router.headers:
        if member.required and member.header != _ROUTING_TARGET and member.header not in given:
            return False
    return not body or "Body" in router.by_name


class TargetPlanner:
    """Origins and signers per region, resolved with botocore at start."""

    def __init__(self, config: GatewayConfig, service: str = SERVICE_NAME) -> None:
        self.config = config
        # The runtime whose hosts this planner resolves (botocore's service name).
        self.service = service
        self._endpoint_prefix = next(
            (
                op.service.endpoint_prefix
                for (name, _), op in operation_table().items()
                if name == service
            ),
            "runtime.sagemaker",
        )
        # A Global Inference Gateway is named by its id; every other resource as an endpoint.
        self._check_name: Callable[[str], None] = _NAME_CHECKS.get(service, check_endpoint_name)
        self.origin: Origin | None = None
        self.region = ""
        self._region_urls: dict[str, str] = {}
        # Inference router runtime URLs per region, for routes' router targets.
        self._router_urls: dict[str, str] = {}
        self._origins: dict[str, Origin] = {}
        self._signers: dict[str, RequestSigner] = {}
        self.credentials: CredentialSource | None = None
        self.user_agent = _user_agent(config.user_agent_appid, config.user_agent_extra)

    def start(
        self, region: str, url: str, region_urls: dict[str, str], credentials: CredentialSource
    ) -> None:
        self.region, self._region_urls = region, region_urls
        self.origin = Origin.from_url(url)
        self.credentials = credentials

    def all_origins(self, routes: Iterable[Route]) -> list[Origin]:
        assert self.origin is not None
        origins = {self.origin}
        for route in routes:
            for state in route.targets:
                target = state.target
                if target.inference_router is not None:
                    origins.add(self.router_origin(target.url, target.region))
                else:
                    origins.add(self.target_origin(target.url, target.region))
        return list(origins)

    def resolve_with_botocore(self, regions: set[str]) -> tuple[str, str, dict[str, str], Any]:
        """Region, runtime URLs and credential chain, resolved as botocore would.

        Runs once, in a thread: building a botocore client costs tens of
        milliseconds, which is fine at start and never acceptable per call.
        """
        import botocore.session

        session = botocore.session.get_session()
        if self.config.profile:
            session.set_config_variable("profile", self.config.profile)
        region = self.config.region or session.get_config_variable("region")
        # AWS_SDK_UA_APP_ID or the profile's sdk_ua_app_id, unless given.
        appid = self.config.user_agent_appid or session.get_config_variable("user_agent_appid")
        self.user_agent = _user_agent(appid, self.config.user_agent_extra)
        if not region:
            raise errors.ConfigError(
                "region: not set (pass region=, set it in the config, or set AWS_DEFAULT_REGION)"
            )
        # botocore applies AWS_ENDPOINT_URL(_<SERVICE>), the profile's endpoint_url
        # and AWS_IGNORE_CONFIGURED_ENDPOINT_URLS itself, per service.
        url = self.config.endpoint_url or self._botocore_endpoint(session, region)
        # TargetPlanner in other regions need their own regional runtime host.
        region_urls = {r: self._botocore_endpoint(session, r) for r in regions if r != region}
        self._router_urls = self._router_endpoints(session, region)
        fetch = botocore_fetcher(session) if self.config.credentials is None else None
        return region, url, region_urls, fetch

    def _router_endpoints(self, session: Any, region: str) -> dict[str, str]:
        """The inference router runtime's URL in each region a route's router target names."""
        if self.service != SERVICE_NAME:
            return {}
        routes = self.config.sections.get("routes")
        router_targets = [
            target
            for route in (parse_routes(routes).values() if routes else ())
            for target in route.targets
            if target.inference_router is not None
        ]
        if router_targets:
            # A route names an inference router: the installed botocore must have its
            # model (ServiceModelUnavailable names the release), or no call could go there.
            service_model(ROUTER_SERVICE)
        regions = {target.region or region for target in router_targets if target.url is None}
        if not regions:
            return {}
        urls = {r: self._botocore_endpoint(session, r, ROUTER_SERVICE) for r in regions}
        if self.config.endpoint_url and region in urls:
            urls[region] = self.config.endpoint_url  # one endpoint_url serves every runtime
        return urls

    def _botocore_endpoint(self, session: Any, region: str, service: str = "") -> str:
        import botocore.config

        # Only what the user set: unset options stay botocore's to resolve from
        # the environment (AWS_USE_FIPS_ENDPOINT, ...) and the profile.
        options = {
            key: value
            for key, value in (
                ("use_fips_endpoint", self.config.use_fips_endpoint),
                ("use_dualstack_endpoint", self.config.use_dualstack_endpoint),
                ("ignore_configured_endpoint_urls", self.config.ignore_configured_endpoint_urls),
            )
            if value is not None
        }
        client = session.create_client(
            service or self.service,
            region_name=region,
            aws_access_key_id="unused",
            aws_secret_access_key="unused",
            config=botocore.config.Config(**options),
        )
        return str(client.meta.endpoint_url)

    def target_origin(self, url: str | None, region: str | None) -> Origin:
        assert self.origin is not None
        if url is None and (region is None or region == self.region):
            return self.origin
        if url is None:
            assert region is not None
            url = (
                self._region_urls.get(region)
                or f"https://{self._endpoint_prefix}.{region}.amazonaws.com"
            )
        origin = self._origins.get(url)
        if origin is None:
            origin = self._origins[url] = Origin.from_url(url)
        return origin

    def signer_for(self, region: str | None) -> RequestSigner:
        region = region or self.region
        signer = self._signers.get(region)
        if signer is None:
            assert self.credentials is not None
            signer = RequestSigner(SigV4Signer(region), self.credentials.current, self.user_agent)
            self._signers[region] = signer
        return signer

    def router_origin(self, url: str | None, region: str | None) -> Origin:
        """Where an inference router target's calls go: its url, else its region's host."""
        if url is None:
            region = region or self.region
            url = (
                self._router_urls.get(region)
                or f"https://inferencerouter-runtime.sagemaker.{region}.amazonaws.com"
            )
        origin = self._origins.get(url)
        if origin is None:
            origin = self._origins[url] = Origin.from_url(url)
        return origin

    def plan_for(self, route: Route, state: TargetState) -> TargetPlan:
        target = state.target
        if target.inference_router is not None:
            check_router_name(target.inference_router)
            plan = TargetPlan(
                target.inference_router,
                self.router_origin(target.url, target.region),
                self.signer_for(target.region),
                None,
            )
            plan.routing_target = target.routing_target
            return plan
        assert target.endpoint is not None  # a target is an endpoint or a router
        self._check_name(target.endpoint)
        return TargetPlan(
            target.endpoint,
            self.target_origin(target.url, target.region),
            self.signer_for(target.region),
            target.variant,
        )


# What a runtime's default route names: a gateway id, a router name, else an endpoint.
_NAME_CHECKS: Final[dict[str, Callable[[str], None]]] = {
    "sagemaker-gateway-runtime": check_gateway_id,
    "sagemaker-inference-router-runtime": check_router_name,
}


def _user_agent(appid: str | None, extra: str | None) -> str:
    try:
        return check_header_value("user-agent", user_agent(appid, extra))
    except errors.InvalidRequest as exc:
        raise errors.ConfigError(f"user_agent_appid / user_agent_extra: {exc}") from None
