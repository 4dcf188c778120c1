"""A member a newer botocore model adds is sent, relayed and keyed with no code change.

The child process loads botocore's sagemaker-runtime model with one extra InvokeEndpoint
header member (through AWS_DATA_PATH): ``gateway.compat`` and the sidecar (called by an
unmodified boto3 client that reads the same model) send it upstream, and the prediction
cache keys on it. Only ``Gateway.invoke``'s own keyword list would need one edit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import botocore.session

_SCRIPT = """
import asyncio, json, uuid
import boto3
from botocore.config import Config
from gateway import Gateway, compat
from gateway._invoke.api import INVOKE
from gateway._invoke.cached import CachedCalls, KeyLayout
from gateway.cache import CacheConfig, PredictionCache
from gateway.emulator import Emulator, EmulatorConfig
from gateway.sidecar import Sidecar

HEADER = "x-amzn-sagemaker-fraud-tier"
assert HEADER in INVOKE.by_header, "the extended model was not loaded"


def sent(emulator):
    return [dict(request.headers).get(HEADER) for request in emulator.recorded]


async def main():
    config = {"auth": {"credentials": {"AK": "SK"}}, "endpoints": {"echo": {}}}
    report = {}
    async with Emulator(EmulatorConfig.from_dict(config)) as emulator:
        cache = {"namespace": f"t-{uuid.uuid4().hex[:8]}", "ttl_s": 60}
        gateway = Gateway(
            "us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"), cache=cache
        )
        async with gateway, compat.create_client("sagemaker-runtime", gateway=gateway) as client:
            for tier in ("gold", "silver", "gold"):
                answer = await client.invoke_endpoint(
                    EndpointName="echo", Body=b"1,2", ContentType="text/csv", FraudTier=tier
                )
                await answer["Body"].read()
            report["compat"] = sent(emulator)
            before = len(report["compat"])
            async with Sidecar(gateway, "127.0.0.1", 0) as sidecar:
                boto = boto3.client(
                    "sagemaker-runtime", region_name="us-east-1", endpoint_url=sidecar.url,
                    aws_access_key_id="AK", aws_secret_access_key="SK",
                    config=Config(retries={"max_attempts": 0}),
                )
                for tier in ("bronze", "bronze"):
                    answer = await asyncio.to_thread(
                        boto.invoke_endpoint, EndpointName="echo", Body=b"3,4",
                        ContentType="text/csv", FraudTier=tier,
                    )
                    answer["Body"].read()
                report["sidecar"] = sent(emulator)[before:]
    calls = CachedCalls(PredictionCache(CacheConfig()))
    layout = KeyLayout(INVOKE)
    report["keys"] = len({
        calls.key("r", layout, INVOKE.values({"FraudTier": tier}), b"x")
        for tier in (None, "gold", "silver")
    })
    print(json.dumps(report))


asyncio.run(main())
"""


def _extended_model(data_path: Path) -> None:
    """botocore's sagemaker-runtime model with one more InvokeEndpoint header member."""
    loader = botocore.session.get_session().get_component("data_loader")
    model = loader.load_service_model("sagemaker-runtime", "service-2")
    model["shapes"]["FraudTierHeader"] = {"type": "string", "max": 64, "min": 1}
    model["shapes"]["InvokeEndpointInput"]["members"]["FraudTier"] = {
        "shape": "FraudTierHeader",
        "location": "header",
        "locationName": "X-Amzn-SageMaker-Fraud-Tier",
    }
    folder = data_path / "sagemaker-runtime" / model["metadata"]["apiVersion"]
    folder.mkdir(parents=True)
    (folder / "service-2.json").write_text(json.dumps(model))


def test_a_member_a_newer_model_adds_is_sent_relayed_and_keyed(tmp_path: Path) -> None:
    _extended_model(tmp_path)
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("AWS_")},
        "AWS_DATA_PATH": str(tmp_path),
    }
    ran = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    # compat sent it; a different tier missed the cache, the same one hit it.
    assert report["compat"] == ["gold", "silver"]
    # The sidecar relayed it from boto3 (the second call a cache hit).
    assert report["sidecar"] == ["bronze"]
    assert report["keys"] == 3
