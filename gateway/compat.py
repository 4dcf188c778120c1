"""aiobotocore-shaped clients of the SageMaker runtimes on top of :class:`gateway.Gateway`.

Moving a service over is a one-line change::

    # from aiobotocore.session import get_session
    from gateway.compat import get_session

    async with get_session().create_client("sagemaker-runtime", region_name="us-east-1") as client:
        response = await client.invoke_endpoint(EndpointName="ep", Body=b"...")
        body = await response["Body"].read()

``create_client`` serves the three runtimes botocore models: ``sagemaker-runtime``,
``sagemaker-inference-router-runtime`` and ``sagemaker-gateway-runtime`` (the last two
need botocore >= 1.44.8; aiobotocore cannot call them yet). As botocore does, each
client's methods are built from its service's model: one per operation, named as
botocore names it (``invoke_endpoint``, ``invoke_endpoint_with_response_stream``,
``invoke_endpoint_async``, ``invoke_inference_router``,
``invoke_global_inference_gateway``...).

The calls take the same keyword arguments and return the same dicts as
botocore's clients, and failures raise botocore's own exception classes with the
same ``response`` dicts, so existing ``except client.exceptions.ModelError``
and ``except botocore.exceptions.ClientError`` handlers keep working.

Errors, as aiobotocore 3.x raises them:

==============================================  =========================================
gateway error                                   botocore exception
==============================================  =========================================
``ServiceError`` with a code the service's      ``client.exceptions.<Code>`` (ModelError,
model names                                     ValidationError, ModelNotReadyException,
                                                InternalFailure, ServiceUnavailable,
                                                InternalDependencyException; the newer
                                                runtimes' ValidationException...)
``ServiceError``, any other code                ``botocore.exceptions.ClientError``
stream ``ModelStreamError`` /                   ``botocore.exceptions.EventStreamError``
``InternalStreamFailure`` (while iterating)
``ConnectError``, ``ReadError``, ``WriteError``, ``botocore.exceptions.EndpointConnectionError``
``StaleConnection``, ``NoHealthyTarget``        (aiohttp's connect errors and resets map
                                                there too)
``ProtocolError``                               ``botocore.exceptions.ConnectionClosedError``
``ConnectTimeout``, ``PoolTimeout``             ``botocore.exceptions.ConnectTimeoutError``
``ReadTimeout``, ``DeadlineExceeded``           ``botocore.exceptions.ReadTimeoutError``
``InvalidHeaderValue`` (CR, LF, control chars)  ``botocore.exceptions.HTTPClientError`` (as
                                                aiohttp refuses to send it)
other ``InvalidRequest`` (refused before        ``client.exceptions.ValidationError`` (400),
sending: name, length, size)                    as SageMaker answers the request botocore
                                                would have sent; the newer runtimes'
                                                ``ValidationException`` (400), and
                                                ``PayloadTooLargeException`` (413) for an
                                                oversized body
any other ``GatewayError``                      ``botocore.exceptions.HTTPClientError``
==============================================  =========================================

Parameters are validated by botocore's own validator (``ParamValidationError``
with botocore's report) against the same service model the gateway's
vocabulary comes from, so every member of every operation is accepted.

The gateway error is kept as ``__cause__``. Differences from aiobotocore:
an error's ``ResponseMetadata["HTTPHeaders"]`` holds only the request id (and
``retry-after`` when the answer asked for a wait; the gateway's errors do not keep
the other response headers); the stream calls return once the first event arrived
rather than after the response head. The extra keyword ``Timeout=`` (seconds) sets
the call's deadline. ``Config`` options the gateway cannot honour are refused when
the client is created (``botocore.exceptions.InvalidConfigError``), never ignored.
``client.meta.events`` emits botocore's call-level event hooks once a handler is
registered (see ``gateway._compat.events``).
"""

from __future__ import annotations

from gateway._compat.client import ClientMeta, RuntimeClient
from gateway._compat.response import EventStream, StreamingBody
from gateway._compat.session import Session, create_client, get_session

__all__ = [
    "ClientMeta",
    "EventStream",
    "GatewayRuntimeClient",
    "InferenceRouterRuntimeClient",
    "RuntimeClient",
    "SageMakerRuntimeClient",
    "Session",
    "StreamingBody",
    "create_client",
    "get_session",
]

# The names each runtime's client class had: every client is a RuntimeClient, so
# annotations and isinstance checks that use them keep working.
SageMakerRuntimeClient = RuntimeClient
InferenceRouterRuntimeClient = RuntimeClient
GatewayRuntimeClient = RuntimeClient
