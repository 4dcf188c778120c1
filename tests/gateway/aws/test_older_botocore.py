"""A botocore older than the newest runtimes' models: clear errors, never a wrong request.

``pyproject`` allows any botocore >= 1.34. Such a release lacks the inference router and
Global Inference Gateway runtimes (1.44.4, 1.44.8) and some members of the
``sagemaker-runtime`` operations (``SessionId`` came in 1.35.15). Each test runs in a
child process that loads what that botocore has: the models as 1.34.0 ships them
(``AWS_DATA_PATH``: the installed model less the members 1.34.0 lacks) and, where the
installed botocore has the newer runtimes, their models hidden from the loader as
botocore 1.34.0 has none (``UnknownServiceError``). Under a botocore that old (CI's
lowest-versions pass) nothing is changed: the same tests run on the real thing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import botocore
import botocore.session

from gateway._aws.models import MEMBER_SINCE

ROOT = Path(__file__).resolve().parents[3]
OLDEST = "1.34.0"
NEWER_RUNTIMES = ("sagemaker-inference-router-runtime", "sagemaker-gateway-runtime")

# Run first in the child: the loader answers for the newer runtimes as botocore 1.34 does.
_HIDE_NEWER_RUNTIMES = """
import botocore.exceptions, botocore.loaders
_HIDDEN = {hidden!r}
_load = botocore.loaders.Loader.load_service_model
_list = botocore.loaders.Loader.list_available_services
def _load_service_model(self, service_name, type_name, api_version=None):
    if service_name in _HIDDEN:
        raise botocore.exceptions.UnknownServiceError(
            service_name=service_name, known_service_names="(botocore 1.34.0's)")
    return _load(self, service_name, type_name, api_version)
def _list_available_services(self, type_name):
    return [name for name in _list(self, type_name) if name not in _HIDDEN]
botocore.loaders.Loader.load_service_model = _load_service_model
botocore.loaders.Loader.list_available_services = _list_available_services
"""


def _oldest_models(data_path: Path) -> None:
    """The installed sagemaker-runtime model less every member botocore 1.34.0 lacks."""
    loader = botocore.session.get_session().get_component("data_loader")
    model = loader.load_service_model("sagemaker-runtime", "service-2")
    for operation, member in MEMBER_SINCE:
        shape = model["shapes"][model["operations"][operation]["input"]["shape"]]
        shape["members"].pop(member, None)
        if member in shape.get("required", ()):
            shape["required"].remove(member)
    folder = data_path / "sagemaker-runtime" / model["metadata"]["apiVersion"]
    folder.mkdir(parents=True)
    (folder / "service-2.json").write_text(json.dumps(model))


def _run_as_oldest(tmp_path: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` (or ``-m`` and ``args``) in a child that sees botocore 1.34.0's models."""
    _oldest_models(tmp_path / "models")
    available = set(botocore.session.get_session().get_available_services())
    hidden = sorted(set(NEWER_RUNTIMES) & available)
    prelude = _HIDE_NEWER_RUNTIMES.format(hidden=hidden) if hidden else ""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "AWS_DATA_PATH": str(tmp_path / "models"),
    }
    command = [sys.executable, "-c", prelude + code, *args]
    return subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )


_TYPED_CALLS = """
import asyncio, json
from gateway import Gateway, errors
from gateway.emulator import Emulator, EmulatorConfig

CONFIG = {"auth": {"credentials": {"AK": "SK"}}, "endpoints": {
    "mme": {"mme": {"models": ["m.tar.gz"], "cold_load_ms": 1}},
    "ab": {"variants": [{"name": "v1", "weight": 1}, {"name": "v2", "weight": 1}]}}}

async def main():
    report = {}
    async with Emulator(EmulatorConfig.from_dict(CONFIG)) as emulator:
        async with Gateway("us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK")) as gw:
            await gw.invoke("mme", b"1", target_model="m.tar.gz", cache=False)
            await gw.invoke("ab", b"2", target_variant="v2", cache=False)
            try:
                await gw.invoke("ab", b"3", target_variant="v2", session_id="s-1", cache=False)
            except errors.MemberUnavailable as error:
                report["error"] = [error.member, error.required, str(error)]
            try:
                await gw.invoke_router("r1", b"{}", routing_target="t")
            except errors.ServiceModelUnavailable as error:
                report["router"] = str(error)
        report["sent"] = [
            {k: v for k, v in r.headers if k.startswith("x-amzn-sagemaker")}
            for r in emulator.recorded
        ]
    print(json.dumps(report))

asyncio.run(main())
"""


def test_typed_calls_send_each_member_in_its_own_header_or_name_the_release(
    tmp_path: Path,
) -> None:
    ran = _run_as_oldest(tmp_path, _TYPED_CALLS)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    # The model target and the variant go in their own headers; the session never went.
    assert report["sent"] == [
        {"x-amzn-sagemaker-target-model": "m.tar.gz"},
        {"x-amzn-sagemaker-target-variant": "v2"},
    ]
    member, required, text = report["error"]
    assert member == "SessionId"
    assert "SessionId" in text and "InvokeEndpoint" in text
    if botocore.__version__ == OLDEST:  # the real release: it names the one to install
        assert required == MEMBER_SINCE[("InvokeEndpoint", "SessionId")]
        assert f"botocore >= {required}" in text
    assert "sagemaker-inference-router-runtime needs botocore >= 1.44.4" in report["router"]


_START_WITH_ROUTES = """
import asyncio, json
from gateway import Gateway, errors

ROUTES = {{
    "router-route": {{"routes": {{"bids": {{"targets": [
        {{"endpoint": "bid-filter"}},
        {{"inference_router": "bid-router", "routing_target": "bid-filter"}}]}}}}}},
    "gateway-route": {{"global_gateway_routes": {{
        "chat": {{"targets": [{{"endpoint": "gw1"}}]}}}}}},
}}

async def main():
    report = {{}}
    for name, config in ROUTES.items():
        gateway = Gateway.from_config({{
            "region": "us-east-1", "endpoint_url": "http://127.0.0.1:9",
            "credentials": {{"access_key_id": "AK", "secret_access_key": "SK"}}, **config}})
        try:
            async with gateway:
                report[name] = "started"
        except errors.ServiceModelUnavailable as error:
            report[name] = str(error)
    print(json.dumps(report))

asyncio.run(main())
"""


def test_routes_over_a_runtime_botocore_lacks_fail_at_start_naming_the_release(
    tmp_path: Path,
) -> None:
    ran = _run_as_oldest(tmp_path, _START_WITH_ROUTES.format())
    assert ran.returncode == 0, ran.stderr[-3000:]
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    assert "sagemaker-inference-router-runtime needs botocore >= 1.44.4" in report["router-route"]
    assert "sagemaker-gateway-runtime needs botocore >= 1.44.8" in report["gateway-route"]


def test_the_demo_skips_its_router_lane_saying_why_and_runs_the_rest(tmp_path: Path) -> None:
    code = "import sys; from gateway.tools.demo import main; sys.exit(main(sys.argv[1:]))"
    ran = _run_as_oldest(tmp_path, code, "--duration", "1")
    assert ran.returncode == 0, ran.stderr[-3000:]
    out = ran.stdout
    assert "the inference-router lane is skipped" in out
    assert "sagemaker-inference-router-runtime needs botocore >= 1.44.4" in out
    assert "inference router:  skipped" in out
    # The other lanes ran.
    assert "RTB pre-filter" in out and "Sidecar" in out and "RTB proxy" in out
    assert "Traceback" not in ran.stderr
