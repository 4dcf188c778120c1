"""The runtimes' botocore models, and what an older botocore still does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import botocore
import botocore.loaders
import pytest

from gateway import errors
from gateway._aws.models import (
    GATEWAY_RUNTIME,
    INFERENCE_ROUTER_RUNTIME,
    MIN_BOTOCORE,
    SAGEMAKER_RUNTIME,
    service_model,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.newer_runtimes
def test_this_environment_has_every_runtime_model() -> None:
    """dev's botocore ships all three models, and their operations are the ones served."""
    operations = {
        service: sorted(service_model(service).operation_names)
        for service in (SAGEMAKER_RUNTIME, INFERENCE_ROUTER_RUNTIME, GATEWAY_RUNTIME)
    }
    assert operations[INFERENCE_ROUTER_RUNTIME] == [
        "InvokeInferenceRouter",
        "InvokeInferenceRouterAsync",
    ]
    assert operations[GATEWAY_RUNTIME] == [
        "InvokeGlobalInferenceGateway",
        "InvokeGlobalInferenceGatewayWithResponseStream",
    ]
    assert "InvokeEndpoint" in operations[SAGEMAKER_RUNTIME]


def test_an_unknown_service_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        service_model("sagemaker")


# The child process sees botocore's data path replaced by a copy of the models an
# older botocore shipped: sagemaker-runtime and botocore's own files, not the new runtimes.
_OLD_BOTOCORE_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    import botocore.loaders
    botocore.loaders.Loader.BUILTIN_DATA_PATH = sys.argv[1]

    from gateway import Gateway, errors
    from gateway._aws.models import service_model
    from gateway.emulator import Emulator, EmulatorConfig

    async def main():
        async with Emulator(EmulatorConfig.from_dict({"endpoints": {"echo": {}}})) as emu:
            async with Gateway(
                "us-east-1", endpoint_url=emu.url, credentials=("AKIDOLD", "old-secret")
            ) as gw:
                result = await gw.invoke("echo", b"still served")
                print("invoke:", result.body.decode())
        for service in sys.argv[2:]:
            try:
                service_model(service)
            except errors.ServiceModelUnavailable as exc:
                print(f"{service}: {type(exc).__name__}: {exc}")

    asyncio.run(main())
    """
)


def test_an_older_botocore_serves_sagemaker_runtime_and_names_the_release_needed(
    tmp_path: Path,
) -> None:
    builtin = Path(botocore.loaders.Loader.BUILTIN_DATA_PATH)
    old = tmp_path / "data"
    old.mkdir()
    for entry in builtin.iterdir():
        if entry.is_file():
            shutil.copy(entry, old / entry.name)
    shutil.copytree(builtin / SAGEMAKER_RUNTIME, old / SAGEMAKER_RUNTIME)
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            _OLD_BOTOCORE_CHILD,
            str(old),
            INFERENCE_ROUTER_RUNTIME,
            GATEWAY_RUNTIME,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    installed = botocore.__version__
    assert lines == [
        "invoke: still served",
        f"{INFERENCE_ROUTER_RUNTIME}: ServiceModelUnavailable: {INFERENCE_ROUTER_RUNTIME} "
        f"needs botocore >= {MIN_BOTOCORE[INFERENCE_ROUTER_RUNTIME]}, which ships its model; "
        f"this environment has botocore {installed} "
        f"(pip install 'botocore>={MIN_BOTOCORE[INFERENCE_ROUTER_RUNTIME]}')",
        f"{GATEWAY_RUNTIME}: ServiceModelUnavailable: {GATEWAY_RUNTIME} needs botocore >= "
        f"1.44.8, which ships its model; this environment has botocore {installed} "
        "(pip install 'botocore>=1.44.8')",
    ]


def test_the_error_is_a_gateway_error_that_no_retry_fixes() -> None:
    error = errors.ServiceModelUnavailable(GATEWAY_RUNTIME, "1.44.8", "1.43.117")
    assert isinstance(error, errors.GatewayError)
    assert error.retryable is False
    assert (error.service, error.required, error.installed) == (
        GATEWAY_RUNTIME,
        "1.44.8",
        "1.43.117",
    )
