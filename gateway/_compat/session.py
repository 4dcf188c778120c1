"""Sessions and ``create_client``: aiobotocore's arguments, a Gateway under each client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import botocore.exceptions
import botocore.session

from gateway._aws.models import SAGEMAKER_RUNTIME, service_model
from gateway._client import Gateway
from gateway._compat.client import ClientMeta, RuntimeClient, client_class
from gateway._invoke.api import SERVICE_NAMES

__all__ = ["Session", "create_client", "get_session"]

# botocore Config options compat applies, or that have no effect on
# the runtimes in botocore either (no host prefix, endpoint discovery,
# compression, checksums, S3 or account-id endpoints for these services).
_SUPPORTED_OPTIONS: Final = frozenset(
    {
        "region_name",
        "connect_timeout",
        "read_timeout",
        "max_pool_connections",
        "use_fips_endpoint",
        "use_dualstack_endpoint",
        "ignore_configured_endpoint_urls",
        "retries",
        "user_agent_extra",
        "user_agent_appid",
        "inject_host_prefix",
        "endpoint_discovery_enabled",
        "disable_request_compression",
        "request_min_compression_size_bytes",
        "request_checksum_calculation",
        "response_checksum_validation",
        "account_id_endpoint_mode",
        "s3",
        "s3_disable_express_session_auth",
    }
)
# Options with a value compat honours as botocore does.
_ACCEPTED_VALUES: Final[Mapping[str, tuple[object, ...]]] = {
    "signature_version": ("v4", "s3v4"),
    "parameter_validation": (True,),
    "tcp_keepalive": (True,),  # the gateway always sets TCP keepalive
    "defaults_mode": ("legacy",),
}


class Session:
    """Stands in for ``aiobotocore.session.AioSession`` for SageMaker runtime clients.

    Clients of one session share their exception classes, as in botocore.
    """

    def __init__(self, *, profile: str | None = None, botocore_session: Any = None) -> None:
        self._botocore = botocore_session or botocore.session.get_session()
        self._profile = profile
        if profile is not None:
            self._botocore.set_config_variable("profile", profile)
        self._exceptions: dict[str, Any] = {}

    @property
    def exceptions(self) -> Any:
        """botocore's modeled exception classes for sagemaker-runtime, built on first use."""
        return self.exceptions_of(SAGEMAKER_RUNTIME)

    def create_client(
        self,
        service_name: str,
        region_name: str | None = None,
        api_version: str | None = None,
        use_ssl: bool = True,
        verify: bool | str | None = None,
        endpoint_url: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        config: Any = None,
        aws_account_id: str | None = None,
        *,
        gateway: Gateway | None = None,
    ) -> RuntimeClient:
        """Same arguments as aiobotocore's; ``gateway=`` wraps a Gateway you own instead.

        ``service_name`` is one of the SageMaker runtimes: ``sagemaker-runtime``,
        ``sagemaker-inference-router-runtime`` or ``sagemaker-gateway-runtime``.
        ``api_version``, ``use_ssl`` and ``aws_account_id`` are accepted and
        ignored (each runtime has one API version and an https endpoint).
        ``verify``: False skips TLS verification, a path is a CA bundle.
        ``config`` (a botocore/aiobotocore ``Config``): see ``_SUPPORTED_OPTIONS``;
        any other option set explicitly raises ``InvalidConfigError``.
        """
        if service_name not in SERVICE_NAMES:
            raise botocore.exceptions.UnknownServiceError(
                service_name=service_name, known_service_names=", ".join(SERVICE_NAMES)
            )
        options = _explicit_options(config)
        region = (
            region_name
            or options.get("region_name")
            or (gateway.config.region if gateway is not None else None)
            or self._default_region()
        )
        owns_gateway = gateway is None
        if gateway is None:
            gateway = Gateway(
                region,
                endpoint_url=endpoint_url,
                credentials=_credentials(
                    aws_access_key_id, aws_secret_access_key, aws_session_token
                ),
                profile=self._profile,
                pool=_pool(options, verify),
                use_fips_endpoint=options.get("use_fips_endpoint"),
                use_dualstack_endpoint=options.get("use_dualstack_endpoint"),
                ignore_configured_endpoint_urls=options.get("ignore_configured_endpoint_urls"),
                ca_bundle=verify if isinstance(verify, str) else None,
                user_agent_extra=options.get("user_agent_extra"),
                user_agent_appid=options.get("user_agent_appid"),
                defaults=self._retry_template(options.get("retries")),
            )
        elif set(options) - {"region_name"} or verify is not None or endpoint_url is not None:
            raise botocore.exceptions.InvalidConfigError(
                error_msg="gateway.compat: a client that wraps a Gateway takes its settings "
                "from that Gateway; pass only region_name with gateway="
            )
        meta = ClientMeta(service_name, region, endpoint_url or gateway.config.endpoint_url)
        exceptions = self.exceptions_of(service_name)
        return client_class(service_name)(gateway, exceptions, meta, owns_gateway=owns_gateway)

    def exceptions_of(self, service_name: str) -> Any:
        """botocore's modeled exception classes of ``service_name``, built once per session."""
        built = self._exceptions.get(service_name)
        if built is None:
            factory = self._botocore.get_component("exceptions_factory")
            model = self._service_model(service_name)
            built = self._exceptions[service_name] = factory.create_client_exceptions(model)
        return built

    def _service_model(self, service_name: str) -> Any:
        try:
            return self._botocore.get_service_model(service_name)
        except botocore.exceptions.UnknownServiceError:
            return service_model(service_name)  # an older botocore: raises, naming the release

    def _default_region(self) -> str:
        region = self._botocore.get_config_variable("region")
        if not region:
            raise botocore.exceptions.NoRegionError()
        return str(region)

    def _retry_template(self, retries: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The route template's retry policy from Config(retries=...), else from botocore.

        botocore counts ``max_attempts`` after the first attempt and
        ``total_max_attempts`` (and AWS_MAX_ATTEMPTS, a profile's
        max_attempts) including it; the gateway's ``retry.max_attempts``
        includes it. Unset everywhere: the gateway's own default policy.
        """
        retries = dict(retries or {})
        mode = retries.get("mode") or self._botocore.get_config_variable("retry_mode")
        if mode == "adaptive":
            raise botocore.exceptions.InvalidConfigError(
                error_msg='gateway.compat: retry mode "adaptive" (client-side rate limiting) '
                'is not supported; use "standard" or "legacy" (the gateway budgets retries)'
            )
        total = retries.get("total_max_attempts")
        if total is None and retries.get("max_attempts") is not None:
            total = int(retries["max_attempts"]) + 1
        if total is None:
            total = self._botocore.get_config_variable("max_attempts")
        if total is None:
            return None
        return {"retry": {"max_attempts": max(1, int(total))}}


def _explicit_options(config: Any) -> dict[str, Any]:
    """The options the caller set on ``config``; refuses those compat cannot honour.

    botocore Config remembers which options the caller set; the others are
    botocore's defaults (10 connections, 60 s timeouts), not the user's wish.
    """
    if config is None:
        return {}
    options = dict(getattr(config, "_user_provided_options", {}))
    for name, value in options.items():
        accepted = _ACCEPTED_VALUES.get(name)
        if name in _SUPPORTED_OPTIONS or (accepted is not None and value in accepted):
            continue
        hint = f" (supported: {', '.join(map(repr, accepted))})" if accepted else ""
        raise botocore.exceptions.InvalidConfigError(
            error_msg=f"gateway.compat does not support Config({name}={value!r}){hint}"
        )
    return options


def _pool(options: Mapping[str, Any], verify: bool | str | None) -> dict[str, Any] | None:
    pool: dict[str, Any] = {}
    if options.get("connect_timeout") is not None:
        pool["connect_timeout_ms"] = float(options["connect_timeout"]) * 1000
    if options.get("read_timeout") is not None:
        pool["read_timeout_ms"] = float(options["read_timeout"]) * 1000
    if options.get("max_pool_connections") is not None:
        connections = int(options["max_pool_connections"])
        pool["max_connections"] = connections
        pool["prewarm"] = min(2, connections)
    if verify is False:
        pool["tls_verify"] = False
    return pool or None


def _credentials(
    access_key: str | None, secret_key: str | None, token: str | None
) -> tuple[str, str] | tuple[str, str, str] | None:
    if access_key is None and secret_key is None:
        return None  # the provider chain, as botocore
    if not access_key or not secret_key:
        missing = "aws_secret_access_key" if access_key else "aws_access_key_id"
        raise botocore.exceptions.PartialCredentialsError(provider="explicit", cred_var=missing)
    return (access_key, secret_key, token) if token else (access_key, secret_key)


_default_session: Session | None = None


def get_session() -> Session:
    """A process-wide :class:`Session`, like ``aiobotocore.session.get_session()``."""
    global _default_session
    if _default_session is None:
        _default_session = Session()
    return _default_session


def create_client(service_name: str, **kwargs: Any) -> RuntimeClient:
    """``get_session().create_client(...)``: use as ``async with create_client(...) as c``."""
    return get_session().create_client(service_name, **kwargs)
