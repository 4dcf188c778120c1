"""An operation a newer botocore adds to a runtime is served with no change to the gateway.

The child process loads the inference router runtime's model with one more operation,
``InvokeInferenceRouterWithResponseStream`` (through AWS_DATA_PATH): the operation table
has it; ``Gateway.call`` sends it, signed, to its path; ``gateway.compat`` has its method;
the sidecar routes its path, labels its metrics and sizes its body limit from the table,
and relays it upstream. The emulator answers it as an operation it does not know: a
handler there (and a typed ``Gateway`` method, if wanted) is all the operation would add.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import botocore.session
import pytest

ROUTER = "sagemaker-inference-router-runtime"
NEW = "InvokeInferenceRouterWithResponseStream"

_SCRIPT = """
import asyncio, json
import httpx
from gateway import Gateway, compat
from gateway._invoke.api import answer_of, operation_table
from gateway.emulator import Emulator, EmulatorConfig
from gateway.sidecar import Sidecar
from gateway.sidecar._paths import PATHS

ROUTER, NEW = "sagemaker-inference-router-runtime", "InvokeInferenceRouterWithResponseStream"
PATH = "/inference-routers/r1/invocations-response-stream"
FAMILY = "sagemaker_gateway_sidecar_requests_total"


async def main():
    report = {}
    operation = operation_table()[(ROUTER, NEW)]
    report["answer"] = answer_of(operation)
    action, name, service = PATHS.find(PATH)
    report["sidecar"] = [action.label, action.span_route, action.limit, name, service]
    config = {"auth": {"credentials": {"AK": "SK"}}, "endpoints": {"echo": {}}}
    async with Emulator(EmulatorConfig.from_dict(config)) as emulator:
        gateway = Gateway("us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"))
        async with gateway:
            client = compat.create_client(ROUTER, gateway=gateway)
            report["compat"] = hasattr(client, "invoke_inference_router_with_response_stream")
            members = operation.values({"RoutingTargetName": "t1", "ContentType": "text/csv"})
            stream = await gateway.call(operation, "r1", b"1,2", members)
            try:
                async for _ in stream:
                    pass
            except Exception as exc:
                report["direct_error"] = type(exc).__name__
            async with Sidecar(gateway, "127.0.0.1", 0) as sidecar:
                headers = {
                    "content-type": "text/csv",
                    "x-amzn-sagemaker-routing-target-name": "t1",
                }
                async with httpx.AsyncClient(base_url=sidecar.url) as http:
                    answer = await http.post(PATH, content=b"3,4", headers=headers)
                    report["status"] = answer.status_code
                    metrics = (await http.get("/metrics")).text
        report["metric"] = [
            line for line in metrics.splitlines()
            if line.startswith(FAMILY) and 'operation="router_stream"' in line
        ]
        report["upstream"] = [
            (request.path, "authorization" in dict(request.headers),
             dict(request.headers).get("x-amzn-sagemaker-routing-target-name"))
            for request in emulator.recorded
        ]
    print(json.dumps(report))


asyncio.run(main())
"""


def _referenced(shapes: dict[str, Any], name: str, found: set[str]) -> None:
    """``name`` and every shape it refers to, into ``found``."""
    if name in found:
        return
    found.add(name)
    shape = shapes[name]
    for member in shape.get("members", {}).values():
        _referenced(shapes, member["shape"], found)
    for key in ("member", "key", "value"):
        if key in shape:
            _referenced(shapes, shape[key]["shape"], found)


def _model_with_new_operation(data_path: Path) -> None:
    """The router runtime's model plus a streaming operation in its style (its stream
    shapes taken from the Global Inference Gateway runtime's model)."""
    loader = botocore.session.get_session().get_component("data_loader")
    router = loader.load_service_model(ROUTER, "service-2")
    gateway = loader.load_service_model("sagemaker-gateway-runtime", "service-2")
    streamed = gateway["operations"]["InvokeGlobalInferenceGatewayWithResponseStream"]
    needed: set[str] = set()
    _referenced(gateway["shapes"], streamed["output"]["shape"], needed)
    for name in needed:
        router["shapes"].setdefault(name, copy.deepcopy(gateway["shapes"][name]))
    operation = copy.deepcopy(router["operations"]["InvokeInferenceRouter"])
    operation["name"] = NEW
    operation["http"]["requestUri"] = (
        "/inference-routers/{InferenceRouterName}/invocations-response-stream"
    )
    operation["output"] = {"shape": streamed["output"]["shape"]}
    router["operations"][NEW] = operation
    folder = data_path / ROUTER / router["metadata"]["apiVersion"]
    folder.mkdir(parents=True)
    (folder / "service-2.json").write_text(json.dumps(router))


@pytest.mark.newer_runtimes
def test_an_operation_a_newer_model_adds_is_served_from_the_table(tmp_path: Path) -> None:
    _model_with_new_operation(tmp_path)
    ran = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env={**os.environ, "AWS_DATA_PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    assert report["answer"] == "stream"
    assert report["compat"] is True
    label, span_route, limit, name, service = report["sidecar"]
    assert (label, name, service) == ("router_stream", "r1", ROUTER)
    assert span_route == "/inference-routers/{name}/invocations-response-stream"
    assert limit == 6 * 1024 * 1024
    # Both calls reached the operation's own path, signed, with the routing target's header.
    path = "/inference-routers/r1/invocations-response-stream"
    assert report["upstream"] == [[path, True, "t1"], [path, True, "t1"]]
    # The emulator has no handler for it: its refusal comes back, in the runtime's shape.
    assert "direct_error" in report
    assert report["status"] >= 400
    assert report["metric"], "the sidecar counts the new operation under its own label"
