"""Future and past botocore models: every header carries its own value, whatever the model.

The installed botocore decides which members an operation has. This test copies each
installed runtime model (all three) in four shapes and loads them, through
``AWS_DATA_PATH``, in a child process (``_model_shapes_child``):

* ``first``, ``middle``, ``last``: one more header member in every operation, placed
  first, in the middle and last in SigV4's signing order (a newer botocore);
* ``removed``: one optional header member taken out of every operation (an older one).

In each, every typed ``Gateway`` method runs with every member it names and with the
required ones only, and ``gateway.compat`` and unmodified boto3 (through the sidecar)
relay the same members plus the new one. The emulator records each request as it
arrived: every model header must carry the value of its own member. A member the model
lacks that a typed call sets is ``MemberUnavailable`` naming it; a member the typed
methods do not know is relayed by compat and the sidecar, and keyed by the cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from gateway._aws.models import MEMBER_SINCE
from gateway._invoke.api import operation_table
from tests._sagemaker_members import MEMBER_VALUES

ROOT = Path(__file__).resolve().parents[3]
EXTRA_MEMBER = "FraudTier"
EXTRA_VALUE = "tier-7"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjYWxsZXIifQ.c2lnbmF0dXJl"
CHAT = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "hi"}]})
# Per operation: the resource a call names, its body, and values that differ from the
# shared MEMBER_VALUES.
CALLS: dict[str, dict[str, Any]] = {
    "InvokeEndpoint": {
        "resource": "mme",
        "required_resource": "echo",
        "body": '{"x": 1}',
        "values": {},
    },
    "InvokeEndpointWithResponseStream": {"resource": "echo", "body": '{"p": 1}', "values": {}},
    # Its input in S3 (InputLocation), so no inline body; the model requires neither,
    # the service one of them.
    "InvokeEndpointAsync": {
        "resource": "echo",
        "body": "",
        "values": {},
        "also_required": ["InputLocation"],
    },
    "InvokeInferenceRouter": {
        "resource": "r1",
        "body": '{"x": 2}',
        "values": {"RoutingTargetName": "t"},
    },
    "InvokeInferenceRouterAsync": {
        "resource": "r1",
        "body": "",
        "values": {"RoutingTargetName": "t-async"},
    },
    "InvokeGlobalInferenceGateway": {
        "resource": "gw1",
        "body": CHAT,
        "values": {"CustomerIdentityToken": TOKEN},
    },
    "InvokeGlobalInferenceGatewayWithResponseStream": {
        "resource": "gw1",
        "body": CHAT,
        "values": {"CustomerIdentityToken": TOKEN, "Accept": "text/event-stream"},
    },
}
# Headers a typed method sends when its keyword is left out (its documented default).
TYPED_DEFAULTS: dict[str, dict[str, str]] = {
    "InvokeGlobalInferenceGateway": {"content-type": "application/json"},
    "InvokeGlobalInferenceGatewayWithResponseStream": {"content-type": "application/json"},
}
SHAPES = ("first", "middle", "last", "removed")


def _loader() -> Any:
    return botocore.session.get_session().get_component("data_loader")


def _header_members(model: dict[str, Any], operation: str) -> dict[str, str]:
    """Header member name -> lower-case header, of ``operation`` in a raw model."""
    shape = model["shapes"][model["operations"][operation]["input"]["shape"]]
    return {
        name: member["locationName"].lower()
        for name, member in shape["members"].items()
        if member.get("location") == "header"
    }


def _extra_header(headers: list[str], shape: str) -> str:
    """A header name that sorts first, between two of ``headers``, or last."""
    ordered = sorted(headers)
    if shape == "first":
        name = "a-first-tier"
    elif shape == "last":
        name = "zz-last-tier"
    else:
        name = ordered[len(ordered) // 2 - 1] + "-tier"
    placed = sorted([*ordered, name])
    expected = {"first": 0, "last": len(ordered), "middle": len(ordered) // 2}[shape]
    assert placed.index(name) == expected, (name, ordered)
    return name


def _removable(model: dict[str, Any], operation: str) -> str:
    """The optional header member in the middle of ``operation``'s signing order."""
    shape = model["shapes"][model["operations"][operation]["input"]["shape"]]
    required = set(shape.get("required", ()))
    headers = _header_members(model, operation)
    defaulted = set(TYPED_DEFAULTS.get(operation, {}))  # the typed method always sends it
    optional = sorted(
        (h, n) for n, h in headers.items() if n not in required and h not in defaulted
    )
    return optional[len(optional) // 2][1]


def _changed_models(data_path: Path, shape: str) -> dict[str, dict[str, str]]:
    """Write the three runtime models in ``shape``; per operation, what changed."""
    changes: dict[str, dict[str, str]] = {}
    services = {service for service, _ in operation_table()}
    for service in services:
        model = _loader().load_service_model(service, "service-2")
        for operation in model["operations"]:
            input_shape = model["shapes"][model["operations"][operation]["input"]["shape"]]
            if shape == "removed":
                removed = _removable(model, operation)
                del input_shape["members"][removed]
                changes[operation] = {"removed": removed}
                continue
            header = _extra_header(list(_header_members(model, operation).values()), shape)
            model["shapes"]["FraudTierHeader"] = {"type": "string", "min": 1, "max": 64}
            input_shape["members"][EXTRA_MEMBER] = {
                "shape": "FraudTierHeader",
                "location": "header",
                "locationName": header,
            }
            changes[operation] = {"extra_header": header}
        folder = data_path / service / model["metadata"]["apiVersion"]
        folder.mkdir(parents=True)
        (folder / "service-2.json").write_text(json.dumps(model))
    return changes


def _spec(shape: str, changes: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Every operation's call, its members by name with values, from the installed model."""
    calls = []
    for (service, name), operation in operation_table().items():
        call = CALLS[name]
        values = {
            member.name: call["values"].get(member.name, MEMBER_VALUES.get(member.name))
            for member in operation.headers
        }
        if "SessionId" in values:
            # A new session on InvokeEndpoint; a stream may only join a live one, which
            # is the contract tests' business.
            values["SessionId"] = "NEW_SESSION" if name == "InvokeEndpoint" else None
        values = {member: value for member, value in values.items() if value is not None}
        calls.append(
            {
                "service": service,
                "operation": name,
                "resource": call["resource"],
                "required_resource": call.get("required_resource", call["resource"]),
                "resource_member": operation.uri_member,
                "body": call["body"],
                "has_body": bool(call["body"]),
                "values": values,
                "keywords": {m: operation.by_name[m].keyword for m in values},
                "headers": {m.name: m.header for m in operation.headers},
                "required": sorted(
                    {m.name for m in operation.headers if m.required}
                    | set(call.get("also_required", ()))
                ),
                **changes[name],
            }
        )
    extra = None if shape == "removed" else {"name": EXTRA_MEMBER, "value": EXTRA_VALUE}
    return {"shape": shape, "extra": extra, "calls": calls}


def _run_child(tmp_path: Path, shape: str) -> tuple[dict[str, Any], dict[str, Any]]:
    data_path = tmp_path / "models"
    spec = _spec(shape, _changed_models(data_path, shape))
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "AWS_DATA_PATH": str(data_path),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "tests.gateway.aws._model_shapes_child", str(spec_file)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-4000:]
    return spec, json.loads(ran.stdout.strip().splitlines()[-1])


def _expected(call: dict[str, Any], case: str, shape: str) -> dict[str, str]:
    """Header -> value that the emulator must have received for one case."""
    values = dict(call["values"])
    if case == "typed-required":
        values = {k: v for k, v in values.items() if k in call["required"]}
    if call.get("removed"):
        values.pop(call["removed"], None)
    expected = {call["headers"][name]: str(value) for name, value in values.items()}
    if case.startswith("typed"):
        for header, value in TYPED_DEFAULTS.get(call["operation"], {}).items():
            expected.setdefault(header, value)
    elif shape != "removed":
        expected[call["extra_header"]] = EXTRA_VALUE
    return expected


def _model_headers(call: dict[str, Any]) -> set[str]:
    headers = set(call["headers"].values())
    if call.get("extra_header"):
        headers.add(call["extra_header"])
    return headers


@pytest.mark.parametrize("shape", SHAPES)
def test_every_header_carries_its_own_value(tmp_path: Path, shape: str) -> None:
    spec, report = _run_child(tmp_path, shape)
    calls = {call["operation"]: call for call in spec["calls"]}
    seen = set()
    for result in report["cases"]:
        call, case = calls[result["operation"]], result["case"]
        label = f"{shape}/{result['operation']}/{case}"
        seen.add((result["operation"], case))
        removed = call.get("removed")
        if case == "typed-all" and removed:
            # The typed call sets a member this model lacks: refused, naming it, not sent.
            assert result["error"] is not None, label
            assert result["error"]["class"] == "MemberUnavailable", (label, result["error"])
            assert result["error"]["member"] == removed, label
            assert removed in result["error"]["text"], label
            assert result["sent"] == [], label
            continue
        assert result["error"] is None, (label, result["error"])
        assert len(result["sent"]) == 1, (label, len(result["sent"]))
        sent = result["sent"][0]
        model_headers = _model_headers(call)
        got = {name: value for name, value in sent.items() if name in model_headers}
        assert got == _expected(call, case, shape), label
    every_case = {"typed-all", "typed-required", "compat", "boto3-sidecar"}
    if shape == "removed":
        every_case.add("typed-all-but-removed")
    assert seen == {(op, case) for op in calls for case in every_case}
    # The cache key reads the typed call's members by name, and keys the new member.
    assert report["cache"]["fields"] == ["a.tar.gz", "text/csv", "application/json"]
    if shape != "removed":
        assert report["cache"]["extra_keys"] == 3


def test_the_typed_methods_name_only_members_of_the_installed_models() -> None:
    """A typo in a typed method's names would leave its value unsent: every name is real,
    in the installed model or one a newer model adds (MEMBER_SINCE, refused by name)."""
    from gateway._invoke import typed
    from gateway._invoke.api import INVOKE, INVOKE_ASYNC, INVOKE_STREAM, MemberOrder

    orders = [
        MemberOrder(INVOKE, typed._INVOKE_NAMES),
        MemberOrder(INVOKE_STREAM, typed._INVOKE_STREAM_NAMES),
        MemberOrder(INVOKE_ASYNC, typed._INVOKE_ASYNC_NAMES),
    ]
    for order in orders:
        operation = order.operation
        newer = {member for name, member in MEMBER_SINCE if name == operation.name}
        assert set(order.names) <= set(operation.by_name) | newer, operation.name
        if set(order.names) <= set(operation.by_name):
            assert order.same  # the installed model's order: the call's tuple is used as it is


@pytest.mark.newer_runtimes
def test_the_typed_runtime_methods_name_only_members_of_their_models() -> None:
    from gateway._invoke import typed

    table = operation_table()
    router = table[("sagemaker-inference-router-runtime", "InvokeInferenceRouter")]
    router_async = table[("sagemaker-inference-router-runtime", "InvokeInferenceRouterAsync")]
    assert set(typed._ROUTER_NAMES) <= set(router.by_name)
    assert set(typed._ROUTER_ASYNC_NAMES) <= set(router_async.by_name)
    for name in ("InvokeGlobalInferenceGateway", "InvokeGlobalInferenceGatewayWithResponseStream"):
        gateway_operation = table[("sagemaker-gateway-runtime", name)]
        assert set(typed._GLOBAL_GATEWAY_NAMES) <= set(gateway_operation.by_name)
