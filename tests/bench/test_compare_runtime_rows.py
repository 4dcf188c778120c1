"""The async and streaming rows of ``bench.compare``: the stub answers each operation in
its own shape, and the gateway's and boto3's clients both read it back.

No timing is asserted: only that each row measured every call against the stub,
failed none, opened no connection once warm, and that the ratios beside boto3 exist.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from bench._stub import BODY, FAILURE_LOCATION, OUTPUT_LOCATION, StubServer

ROOT = Path(__file__).resolve().parents[2]
# Calls in flight in a concurrent round (bench.compare's plan): a pool's ceiling.
POOL_CAP = 64
CLIENTS = (
    "gateway-router-async",
    "boto3-router-async",
    "gateway-global-stream",
    "boto3-global-stream",
)


def _boto3(url: str, service: str) -> Any:
    return boto3.session.Session().client(
        service,
        region_name="us-east-1",
        endpoint_url=url,
        aws_access_key_id="AK",
        aws_secret_access_key="SK",
        config=Config(retries={"max_attempts": 0}),
    )


def test_the_stub_answers_each_operation_as_botocore_reads_it() -> None:
    with StubServer() as stub:
        router = _boto3(stub.url, "sagemaker-inference-router-runtime")
        queued = router.invoke_inference_router_async(
            InferenceRouterName="r", RoutingTargetName="t", InputLocation="s3://b/in"
        )
        gateway = _boto3(stub.url, "sagemaker-gateway-runtime")
        streamed = gateway.invoke_global_inference_gateway_with_response_stream(
            GatewayId="g", Body=b"{}", ContentType="application/json"
        )
        events = list(streamed["Body"])
        plain = gateway.invoke_global_inference_gateway(
            GatewayId="g", Body=b"{}", ContentType="application/json"
        )
        body = plain["Body"].read()
        router.close()
        gateway.close()
    assert queued["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert (queued["OutputLocation"], queued["FailureLocation"]) == (
        OUTPUT_LOCATION,
        FAILURE_LOCATION,
    )
    assert queued["InferenceId"]
    assert [list(event) for event in events] == [["PayloadPart"], ["PayloadPart"]]
    assert b"".join(event["PayloadPart"]["Bytes"] for event in events) == BODY
    assert body == BODY


def test_quick_compare_measures_the_async_and_stream_rows() -> None:
    command = [sys.executable, "-m", "bench.compare", "--quick", "--plain", "--no-signing"]
    command += ["--repeats", "1", "--calls", "200", "--clients", ",".join(CLIENTS), "--json"]
    completed = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=150, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    setup = json.loads(completed.stdout)["setups"]["plain"]
    assert set(setup["clients"]) == set(CLIENTS)
    for name, row in setup["clients"].items():
        assert row.get("failed_calls", 0) == 0, name  # boto3 rows raise instead
        assert row["stub_requests_measured"] == row["expected_requests_measured"] > 0, name
        # Connections are reused, not churned: how many a pool opens depends on how
        # far calls overlap (further on a loaded machine), never past the calls in flight.
        opened = row["connections_opened"]["warm"] + row["connections_opened_measured"]
        assert opened <= POOL_CAP, (name, opened)
        assert row["cpu_us"] > 0, name
    ratios = setup["ratios"]
    assert ratios["boto3_router_async_vs_router_async"] > 0
    assert ratios["boto3_global_stream_vs_global_stream"] > 0
    # Without gateway-native in the run there is nothing to divide by.
    assert ratios["router_async_vs_native"] is None
