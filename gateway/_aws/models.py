"""botocore's models of the three SageMaker runtimes, and the botocore release each needs.

``sagemaker-runtime`` ships with every botocore this project supports; the inference
router runtime and the Global Inference Gateway runtime arrived later. With an older
botocore the library still imports and serves ``sagemaker-runtime``; asking for a newer
runtime's model raises :class:`~gateway.errors.ServiceModelUnavailable`, which names the
botocore release to install.
"""

from __future__ import annotations

import functools
from typing import Any

import botocore
import botocore.exceptions
import botocore.session

from gateway import errors

__all__ = [
    "GATEWAY_RUNTIME",
    "INFERENCE_ROUTER_RUNTIME",
    "MEMBER_SINCE",
    "MIN_BOTOCORE",
    "SAGEMAKER_RUNTIME",
    "member_since",
    "service_model",
]

SAGEMAKER_RUNTIME = "sagemaker-runtime"
INFERENCE_ROUTER_RUNTIME = "sagemaker-inference-router-runtime"
GATEWAY_RUNTIME = "sagemaker-gateway-runtime"

# The first botocore release that ships each runtime's model.
MIN_BOTOCORE: dict[str, str] = {
    SAGEMAKER_RUNTIME: "1.34.0",
    INFERENCE_ROUTER_RUNTIME: "1.44.4",
    GATEWAY_RUNTIME: "1.44.8",
}

# The first botocore release whose model has each request member that the runtime's
# first supported model lacked, by (operation, member): a typed call that sets one
# under an older botocore names the release to install.
MEMBER_SINCE: dict[tuple[str, str], str] = {
    ("InvokeEndpoint", "SessionId"): "1.35.15",
    ("InvokeEndpointWithResponseStream", "SessionId"): "1.35.15",
    ("InvokeEndpointAsync", "S3OutputPathExtension"): "1.42.54",
    ("InvokeEndpointAsync", "Filename"): "1.42.54",
    ("InvokeEndpointAsync", "Body"): "1.43.29",
    ("InvokeEndpoint", "PrefixAwareId"): "1.43.68",
    ("InvokeEndpointWithResponseStream", "PrefixAwareId"): "1.43.68",
}


def member_since(service: str, operation: str, member: str) -> str:
    """The first botocore release whose model of ``operation`` has ``member``.

    A member not in :data:`MEMBER_SINCE` came with the runtime's first model.
    """
    return MEMBER_SINCE.get((operation, member)) or MIN_BOTOCORE[service]


@functools.cache
def _session() -> Any:
    return botocore.session.get_session()


@functools.cache
def service_model(service: str) -> Any:
    """botocore's ``ServiceModel`` of ``service`` (loaded once).

    Raises :class:`~gateway.errors.ServiceModelUnavailable` when the installed botocore
    predates the service, and ``KeyError`` for a service that is none of the runtimes.
    """
    needed = MIN_BOTOCORE[service]
    try:
        return _session().get_service_model(service)
    except botocore.exceptions.UnknownServiceError:
        raise errors.ServiceModelUnavailable(service, needed, botocore.__version__) from None
