"""``gateway.compat`` clients keep botocore's call-level event hooks (client.meta.events),
so instrumentation registered there (X-Ray, OpenTelemetry, home-grown) still sees calls."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import botocore.exceptions
import pytest

from gateway import compat
from gateway.emulator import Emulator, EmulatorConfig


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = {"seed": 3, "endpoints": {"echo": {}, "broken": {}}}
    async with Emulator(EmulatorConfig.from_dict(config)) as emu:
        yield emu


def _client(emulator: Emulator) -> compat.SageMakerRuntimeClient:
    return compat.Session().create_client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url=emulator.url,
        aws_access_key_id="AK",
        aws_secret_access_key="SK",
    )


async def test_before_and_after_call_events_with_botocores_arguments(emulator: Emulator) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def record(event_name: str, **kwargs: Any) -> None:
        seen.append((event_name, kwargs))

    async with _client(emulator) as client:
        assert client.meta.events.active is False  # no handler: nothing emitted
        client.meta.events.register("before-call.sagemaker-runtime", record)
        client.meta.events.register("after-call.sagemaker-runtime.InvokeEndpoint", record)
        client.meta.events.register("provide-client-params", record)
        response = await client.invoke_endpoint(EndpointName="echo", Body=b"hello")
        assert await response["Body"].read() == b"hello"
    names = [name for name, _ in seen]
    assert names == [
        "provide-client-params.sagemaker-runtime.InvokeEndpoint",
        "before-call.sagemaker-runtime.InvokeEndpoint",
        "after-call.sagemaker-runtime.InvokeEndpoint",
    ]
    before, after = seen[1][1], seen[2][1]
    assert before["model"].name == "InvokeEndpoint"
    assert before["params"]["url_path"] == "/endpoints/echo/invocations"
    assert before["params"]["body"] == b"hello"
    assert before["context"] is after["context"]  # one context per call, as in botocore
    assert after["http_response"].status_code == 200
    assert after["parsed"]["ResponseMetadata"]["HTTPStatusCode"] == 200


async def test_a_handler_may_replace_the_params(emulator: Emulator) -> None:
    def to_echo(params: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {**params, "EndpointName": "echo"}

    async with _client(emulator) as client:
        client.meta.events.register("provide-client-params.sagemaker-runtime", to_echo)
        response = await client.invoke_endpoint(EndpointName="not-there", Body=b"x")
        assert await response["Body"].read() == b"x"


async def test_after_call_error_sees_the_botocore_exception(emulator: Emulator) -> None:
    emulator.set_faults("broken", error_rates={"ValidationError": 1.0})
    errors: list[BaseException] = []

    def record(exception: BaseException, **kwargs: Any) -> None:
        errors.append(exception)

    async with _client(emulator) as client:
        client.meta.events.register("after-call-error", record)
        with pytest.raises(botocore.exceptions.ClientError) as raised:
            await client.invoke_endpoint(EndpointName="broken", Body=b"x")
    assert errors == [raised.value]
