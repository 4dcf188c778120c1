# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes.
# A compiled install needs a rebuild after edits.
"""``Gateway``'s typed methods: one per operation, its members as explicit keywords.

Each method lists its members' values in its own order and names them
(``_INVOKE_NAMES``...); the operation's plan places them by name into the
installed botocore model's member tuple, never by position. Relays that hold
members by name or header use ``Gateway.call`` instead.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME, SAGEMAKER_RUNTIME
from gateway._invoke import pipeline
from gateway._invoke.api import (
    INVOKE_GLOBAL_GATEWAY,
    INVOKE_GLOBAL_GATEWAY_STREAM,
    INVOKE_ROUTER,
    INVOKE_ROUTER_ASYNC,
    INVOKE_STREAM,
    AsyncInvocation,
    InvokeResult,
)
from gateway._invoke.context import CallContext, OperationPlan
from gateway._invoke.streaming import InvokeStream

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = ["TypedOperations"]

# Each typed method's members by name, in the order its values are listed.
_INVOKE_NAMES = (
    "Accept",
    "ContentType",
    "CustomAttributes",
    "EnableExplanations",
    "InferenceComponentName",
    "InferenceId",
    "PrefixAwareId",
    "SessionId",
    "TargetContainerHostname",
    "TargetModel",
    "TargetVariant",
)
_INVOKE_STREAM_NAMES = (
    "ContentType",
    "Accept",
    "CustomAttributes",
    "InferenceComponentName",
    "InferenceId",
    "PrefixAwareId",
    "SessionId",
    "TargetContainerHostname",
    "TargetVariant",
)
_INVOKE_ASYNC_NAMES = (
    "Accept",
    "ContentType",
    "CustomAttributes",
    "Filename",
    "InferenceId",
    "InputLocation",
    "InvocationTimeoutSeconds",
    "RequestTTLSeconds",
    "S3OutputPathExtension",
)
_ROUTER_NAMES = (
    "Accept",
    "ContentType",
    "CustomAttributes",
    "InferenceId",
    "PrefixAwareId",
    "RoutingTargetName",
)
_ROUTER_ASYNC_NAMES = (
    "Accept",
    "ContentType",
    "CustomAttributes",
    "Filename",
    "InferenceId",
    "InputLocation",
    "InvocationTimeoutSeconds",
    "RequestTTLSeconds",
    "RoutingTargetName",
    "S3OutputPathExtension",
)
_GLOBAL_GATEWAY_NAMES = ("Accept", "ContentType", "CustomerIdentityToken")


# Gateway (and users' subclasses of it) derive from this class; mypyc compiles it, and a
# compiled class accepts Python subclasses only when told to.
@mypyc_attr(allow_interpreted_subclasses=True)
class TypedOperations:
    """The typed methods of ``Gateway``, over its call context."""

    _context: CallContext
    _invoke_plan: OperationPlan  # InvokeEndpoint's, over the sagemaker-runtime lane
    _async_plan: OperationPlan  # InvokeEndpointAsync's

    def invoke(
        self,
        endpoint: str,
        body: Buffer,
        *,
        content_type: str | None = None,
        accept: str | None = None,
        target_model: str | None = None,
        target_variant: str | None = None,
        target_container_hostname: str | None = None,
        inference_id: str | None = None,
        custom_attributes: str | None = None,
        enable_explanations: str | None = None,
        inference_component: str | None = None,
        session_id: str | None = None,
        prefix_aware_id: str | None = None,
        timeout: float | None = None,
        cache: bool | None = None,
        cache_ttl: float | None = None,
        user_agent: str | None = None,
    ) -> Coroutine[Any, Any, InvokeResult]:
        """InvokeEndpoint through the route named ``endpoint`` (await the result).

        ``timeout`` (seconds) is the call's one deadline: pool waits, attempts,
        hedges, backoffs and retries all spend from it. ``cache=False`` skips
        the prediction cache for this call; ``cache_ttl`` overrides its TTL.
        Both default to the route's ``cache``/``cache_ttl_s``, then the
        ``[cache]`` table's. ``user_agent``: the caller's own (a proxy's
        client's), sent first with the gateway's appended.
        Raises a :class:`gateway.errors.GatewayError` subclass on failure.
        """
        # The values of _INVOKE_NAMES, in its order.
        members = (
            accept,
            content_type,
            custom_attributes,
            enable_explanations,
            inference_component,
            inference_id,
            prefix_aware_id,
            session_id,
            target_container_hostname,
            target_model,
            target_variant,
        )
        return pipeline.invoke(
            self._context,
            self._invoke_plan,
            endpoint,
            body,
            members,
            _INVOKE_NAMES,
            timeout,
            cache,
            cache_ttl,
            user_agent,
        )

    def invoke_stream(
        self,
        endpoint: str,
        body: Buffer,
        *,
        content_type: str | None = None,
        accept: str | None = None,
        target_variant: str | None = None,
        target_container_hostname: str | None = None,
        inference_id: str | None = None,
        custom_attributes: str | None = None,
        inference_component: str | None = None,
        session_id: str | None = None,
        prefix_aware_id: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> InvokeStream:
        """InvokeEndpointWithResponseStream: ``async for part in gw.invoke_stream(...)``.

        Each part is a ``PayloadPart``'s bytes. The returned stream's
        ``content_type``, ``invoked_variant``, ``custom_attributes`` and
        ``request_id`` are set once the response head has arrived (after the
        first part). A ``ModelStreamError`` or ``InternalStreamFailure`` event
        mid-stream raises ModelError / InternalFailure. Streams are routed but
        never hedged or retried: a partly delivered stream cannot be replayed.
        """
        # The values of _INVOKE_STREAM_NAMES, in its order.
        members = (
            content_type,
            accept,
            custom_attributes,
            inference_component,
            inference_id,
            prefix_aware_id,
            session_id,
            target_container_hostname,
            target_variant,
        )
        return pipeline.stream(
            self._context,
            SAGEMAKER_RUNTIME,
            INVOKE_STREAM.name,
            endpoint,
            body,
            members,
            _INVOKE_STREAM_NAMES,
            timeout,
            user_agent,
        )

    async def invoke_async(
        self,
        endpoint: str,
        *,
        input_location: str | None = None,
        body: Buffer | None = None,
        content_type: str | None = None,
        accept: str | None = None,
        custom_attributes: str | None = None,
        inference_id: str | None = None,
        request_ttl_seconds: int | None = None,
        invocation_timeout_seconds: int | None = None,
        filename: str | None = None,
        s3_output_path_extension: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> AsyncInvocation:
        """InvokeEndpointAsync: queue a request, its input in S3 (``input_location``) or inline.

        ``body`` (at most 128,000 bytes, as SageMaker allows) is sent inline.
        ``filename`` and ``s3_output_path_extension`` shape the output's S3 key.
        """
        # The values of _INVOKE_ASYNC_NAMES, in its order.
        members = (
            accept,
            content_type,
            custom_attributes,
            filename,
            inference_id,
            input_location,
            invocation_timeout_seconds,
            request_ttl_seconds,
            s3_output_path_extension,
        )
        return await pipeline.invoke_queued(
            self._context,
            self._async_plan,
            endpoint,
            body,
            members,
            _INVOKE_ASYNC_NAMES,
            timeout,
            user_agent,
        )

    def invoke_router(
        self,
        router: str,
        body: Buffer,
        *,
        routing_target: str,
        content_type: str | None = None,
        accept: str | None = None,
        custom_attributes: str | None = None,
        inference_id: str | None = None,
        prefix_aware_id: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> Coroutine[Any, Any, InvokeResult]:
        """InvokeInferenceRouter: the router ``router`` sends ``body`` to one destination
        of its routing target ``routing_target`` (await the result).

        The result's ``routed_resource_arn`` and ``routing_reason`` say where the
        router sent the call and why. The call has one deadline, and is hedged
        and retried by the ``[defaults]`` route rules, as ``invoke`` on a bare
        endpoint name is.
        """
        # The values of _ROUTER_NAMES, in its order.
        members = (
            accept,
            content_type,
            custom_attributes,
            inference_id,
            prefix_aware_id,
            routing_target,
        )
        return pipeline.invoke_later(
            self._context,
            INFERENCE_ROUTER_RUNTIME,
            INVOKE_ROUTER,
            router,
            body,
            members,
            _ROUTER_NAMES,
            timeout,
            None,
            None,
            user_agent,
        )

    async def invoke_router_async(
        self,
        router: str,
        *,
        routing_target: str,
        input_location: str,
        content_type: str | None = None,
        accept: str | None = None,
        custom_attributes: str | None = None,
        inference_id: str | None = None,
        request_ttl_seconds: int | None = None,
        invocation_timeout_seconds: int | None = None,
        filename: str | None = None,
        s3_output_path_extension: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> AsyncInvocation:
        """InvokeInferenceRouterAsync: queue a request whose input is in S3 (``input_location``)."""
        # The values of _ROUTER_ASYNC_NAMES, in its order.
        members = (
            accept,
            content_type,
            custom_attributes,
            filename,
            inference_id,
            input_location,
            invocation_timeout_seconds,
            request_ttl_seconds,
            routing_target,
            s3_output_path_extension,
        )
        return await pipeline.invoke_queued_later(
            self._context,
            INFERENCE_ROUTER_RUNTIME,
            INVOKE_ROUTER_ASYNC,
            router,
            None,
            members,
            _ROUTER_ASYNC_NAMES,
            timeout,
            user_agent,
        )

    def invoke_global_gateway(
        self,
        gateway_id: str,
        body: Buffer,
        *,
        content_type: str = "application/json",
        accept: str | None = None,
        customer_identity_token: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> Coroutine[Any, Any, InvokeResult]:
        """InvokeGlobalInferenceGateway: an OpenAI-compatible JSON ``body`` whose ``model``
        picks the model (await the result; its ``body`` is the completion).

        ``customer_identity_token`` (a JWT) is passed through, signed, and never
        logged or put in an error's text.
        """
        members = (accept, content_type, customer_identity_token)  # _GLOBAL_GATEWAY_NAMES
        return pipeline.invoke_later(
            self._context,
            GATEWAY_RUNTIME,
            INVOKE_GLOBAL_GATEWAY,
            gateway_id,
            body,
            members,
            _GLOBAL_GATEWAY_NAMES,
            timeout,
            None,
            None,
            user_agent,
        )

    def invoke_global_gateway_stream(
        self,
        gateway_id: str,
        body: Buffer,
        *,
        content_type: str = "application/json",
        accept: str | None = None,
        customer_identity_token: str | None = None,
        timeout: float | None = None,
        user_agent: str | None = None,
    ) -> InvokeStream:
        """InvokeGlobalInferenceGatewayWithResponseStream: ``async for chunk in ...``.

        Each chunk is a ``PayloadPart``'s bytes: the model server's SSE
        (``data: {...}`` lines). A failure event mid-stream raises
        ``InternalStreamFailure`` or ``ModelError``; never hedged or retried.
        """
        members = (accept, content_type, customer_identity_token)  # _GLOBAL_GATEWAY_NAMES
        return pipeline.stream(
            self._context,
            GATEWAY_RUNTIME,
            INVOKE_GLOBAL_GATEWAY_STREAM,
            gateway_id,
            body,
            members,
            _GLOBAL_GATEWAY_NAMES,
            timeout,
            user_agent,
        )
