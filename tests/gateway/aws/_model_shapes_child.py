"""The child of ``test_model_shapes.py``: one botocore model shape, every path, one report.

Run as ``python -m tests.gateway._model_shapes_child SPEC.json`` with ``AWS_DATA_PATH``
naming the changed models. It calls every typed ``Gateway`` method (with every member
the method names, and with the required ones only), ``gateway.compat`` and unmodified
boto3 through the sidecar, against the emulator, and prints what reached the emulator
(header by header) as one JSON line. The parent judges it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from typing import Any

import boto3
from botocore import xform_name
from botocore.config import Config

from gateway import Gateway, compat, errors
from gateway._invoke.api import INVOKE, operation_table
from gateway._invoke.cached import KeyLayout
from gateway.emulator import Emulator, EmulatorConfig
from gateway.sidecar import Sidecar

KEYS = ("AK", "SK")
EMULATOR: dict[str, Any] = {
    "seed": 3,
    "auth": {"credentials": {"AK": "SK"}},
    "endpoints": {
        "echo": {},
        "mme": {"mme": {"models": ["a.tar.gz", "b.tar.gz"], "cold_load_ms": 1, "max_loaded": 2}},
    },
    "inference_routers": {
        "r1": {
            "routing_targets": {
                "t": {"destinations": [{"endpoint": "echo"}]},
                "t-async": {"mode": "async", "destinations": [{"endpoint": "echo"}]},
            }
        }
    },
    "global_inference_gateways": {"gw1": {"models": ["echo"]}},
}


async def typed_call(gateway: Gateway, call: dict[str, Any], keywords: dict[str, Any]) -> None:
    """The operation's typed Gateway method, with ``keywords``."""
    resource, body = call["resource"], call["body"].encode()
    operation = call["operation"]
    if operation == "InvokeEndpoint":
        await gateway.invoke(resource, body, cache=False, **keywords)
    elif operation == "InvokeEndpointWithResponseStream":
        [part async for part in gateway.invoke_stream(resource, body, **keywords)]
    elif operation == "InvokeEndpointAsync":
        await gateway.invoke_async(resource, body=body or None, **keywords)
    elif operation == "InvokeInferenceRouter":
        await gateway.invoke_router(resource, body, **keywords)
    elif operation == "InvokeInferenceRouterAsync":
        await gateway.invoke_router_async(resource, **keywords)
    elif operation == "InvokeGlobalInferenceGateway":
        await gateway.invoke_global_gateway(resource, body, **keywords)
    elif operation == "InvokeGlobalInferenceGatewayWithResponseStream":
        stream = gateway.invoke_global_gateway_stream(resource, body, **keywords)
        [part async for part in stream]
    else:
        raise AssertionError(f"no typed method for {operation}")


def botocore_params(call: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """The call as a botocore caller passes it: members by name, the resource, the body."""
    params = {call["resource_member"]: call["resource"], **values}
    if call["has_body"]:
        params["Body"] = call["body"].encode()
    return params


def read_answer(operation: str, answer: dict[str, Any]) -> None:
    body = answer.get("Body")
    if body is None:
        return
    if operation.endswith("WithResponseStream"):
        for _ in body:
            pass
    else:
        body.read()


async def compat_answer(operation: str, answer: dict[str, Any]) -> None:
    body = answer.get("Body")
    if body is None:
        return
    if operation.endswith("WithResponseStream"):
        async for _ in body:
            pass
    else:
        await body.read()


class Recorder:
    """What reached the emulator since the last look, header by header."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.seen = 0

    def take(self) -> list[dict[str, str]]:
        recorded = self.emulator.recorded
        fresh, self.seen = recorded[self.seen :], len(recorded)
        return [dict(request.headers) for request in fresh]


async def case(
    recorder: Recorder, name: str, run: Any, cases: list[dict[str, Any]], call: dict[str, Any]
) -> None:
    error = None
    try:
        await run()
    except errors.MemberUnavailable as failure:
        error = {"class": "MemberUnavailable", "member": failure.member, "text": str(failure)}
    except Exception as failure:  # reported to the parent, which names it
        error = {"class": type(failure).__name__, "text": str(failure)[:300]}
    cases.append(
        {"case": name, "operation": call["operation"], "error": error, "sent": recorder.take()}
    )


async def main(spec: dict[str, Any]) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    extra = spec["extra"]
    async with Emulator(EmulatorConfig.from_dict(EMULATOR)) as emulator:
        recorder = Recorder(emulator)
        gateway = Gateway("us-east-1", endpoint_url=emulator.url, credentials=KEYS)
        async with gateway, Sidecar(gateway, "127.0.0.1", 0) as sidecar:
            for call in spec["calls"]:
                values: dict[str, Any] = call["values"]
                keywords = call["keywords"]
                every = {keywords[name]: value for name, value in values.items()}
                required = {
                    keywords[name]: value
                    for name, value in values.items()
                    if name in call["required"]
                }
                typed = functools.partial(typed_call, gateway, call)
                await case(recorder, "typed-all", functools.partial(typed, every), cases, call)
                # An MME endpoint needs TargetModel: the required-only call goes elsewhere.
                bare = {**call, "resource": call.get("required_resource", call["resource"])}
                only_required = functools.partial(typed_call, gateway, bare, required)
                await case(recorder, "typed-required", only_required, cases, call)
                removed = call.get("removed")
                if removed:
                    kept = {k: v for k, v in every.items() if k != keywords[removed]}
                    but_removed = functools.partial(typed, kept)
                    await case(recorder, "typed-all-but-removed", but_removed, cases, call)
                    values = {k: v for k, v in values.items() if k != removed}
                relayed = dict(values)
                if extra:
                    relayed[extra["name"]] = extra["value"]
                await relay_cases(recorder, call, relayed, gateway, sidecar.url, cases)
    return cases


async def relay_cases(
    recorder: Recorder,
    call: dict[str, Any],
    values: dict[str, Any],
    gateway: Gateway,
    sidecar_url: str,
    cases: list[dict[str, Any]],
) -> None:
    """The same members (and the model's extra one) through compat and the sidecar."""
    operation, service = call["operation"], call["service"]
    method = xform_name(operation)
    params = botocore_params(call, values)

    async def through_compat() -> None:
        async with compat.create_client(service, gateway=gateway) as client:
            await compat_answer(operation, await getattr(client, method)(**params))

    def through_sidecar() -> None:
        client = boto3.client(
            service,
            region_name="us-east-1",
            endpoint_url=sidecar_url,
            aws_access_key_id=KEYS[0],
            aws_secret_access_key=KEYS[1],
            config=Config(retries={"max_attempts": 0}),
        )
        read_answer(operation, getattr(client, method)(**params))

    await case(recorder, "compat", through_compat, cases, call)
    await case(recorder, "boto3-sidecar", lambda: asyncio.to_thread(through_sidecar), cases, call)


def cache_keys(spec: dict[str, Any]) -> dict[str, Any]:
    """The cache key's fields of a typed InvokeEndpoint call, and of the extra member."""
    from gateway._invoke.api import MemberOrder
    from gateway._invoke.typed import _INVOKE_NAMES

    _INVOKE_MEMBERS = MemberOrder(INVOKE, _INVOKE_NAMES)

    layout = KeyLayout(INVOKE)
    values = {"TargetModel": "a.tar.gz", "ContentType": "text/csv", "Accept": "application/json"}
    placed = _INVOKE_MEMBERS.place(tuple(values.get(name) for name in _INVOKE_MEMBERS.names))
    model, _, content_type, accept = layout.fields(placed)
    report: dict[str, Any] = {"fields": [model, content_type, accept]}
    extra = spec["extra"]
    if extra and ("sagemaker-runtime", "InvokeEndpoint") in {
        (service, name) for service, name in operation_table()
    }:
        keyed = {layout.fields(INVOKE.values({extra["name"]: tier})) for tier in (None, "g", "s")}
        report["extra_keys"] = len(keyed)
    return report


if __name__ == "__main__":
    with open(sys.argv[1]) as file:
        loaded = json.load(file)
    report = {"cases": asyncio.run(main(loaded)), "cache": cache_keys(loaded)}
    print(json.dumps(report))
