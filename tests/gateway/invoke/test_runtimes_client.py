"""Gateway's inference router and Global Inference Gateway calls, against the emulator over HTTP."""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import botocore.loaders
import pytest

from gateway import Gateway, errors
from gateway._aws.models import GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME
from gateway._config.options import GatewayConfig
from gateway._invoke.api import operation_table
from gateway._invoke.target_plans import TargetPlanner
from gateway._observe.events import AttemptFinished, CallFinished, CallStarted
from gateway.emulator import Emulator, EmulatorConfig
from gateway.emulator._runtime_config import GATEWAY_OWN_ERROR_CODES, ROUTER_ERROR_CODES
from tests._source import parse_file
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY, TRANSPORTS

ACCOUNT = "123456789012"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjYWxsZXIifQ.c2VjcmV0c2lnbmF0dXJl"
ATTRIBUTES = "tenant=acme-secret-attrs"
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "bid on this one"}]}
CONFIG: dict[str, Any] = {
    "seed": 3,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {"local-a": {}, "remote-eu": {}},
    "inference_routers": {
        "r1": {
            "routing_targets": {
                "t": {
                    "destinations": [
                        {"endpoint": "local-a"},
                        {"endpoint": "remote-eu", "region": "eu-west-1"},
                    ]
                },
                "t-async": {"mode": "async", "destinations": [{"endpoint": "local-a"}]},
            }
        }
    },
    "global_inference_gateways": {
        "gw1": {"models": ["echo", "busy"], "unavailable_models": ["busy"]}
    },
}
LOCAL_A = f"arn:aws:sagemaker:us-east-1:{ACCOUNT}:endpoint/local-a"
REMOTE_EU = f"arn:aws:sagemaker:eu-west-1:{ACCOUNT}:endpoint/remote-eu"
# One attempt per call: a retried error would only slow these tests.
ONE_ATTEMPT = {"retry": {"max_attempts": 1}}


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(CONFIG)) as emu:
        yield emu


def _gateway(emulator: Emulator, transport: str = "native", **options: Any) -> Gateway:
    options.setdefault("defaults", ONE_ATTEMPT)
    return Gateway(
        "us-east-1",
        endpoint_url=emulator.url,
        credentials=(ACCESS_KEY, SECRET_KEY),
        transport=transport,
        **options,
    )


def _sent(emulator: Emulator, prefix: str) -> dict[str, str]:
    request = [r for r in emulator.recorded if r.path.startswith(prefix)][-1]
    return {name.lower(): value for name, value in request.headers}


# -- every member of the models ---------------------------------------------------


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("method", "service", "operation"),
    [
        ("invoke_router", INFERENCE_ROUTER_RUNTIME, "InvokeInferenceRouter"),
        ("invoke_router_async", INFERENCE_ROUTER_RUNTIME, "InvokeInferenceRouterAsync"),
        ("invoke_global_gateway", GATEWAY_RUNTIME, "InvokeGlobalInferenceGateway"),
        (
            "invoke_global_gateway_stream",
            GATEWAY_RUNTIME,
            "InvokeGlobalInferenceGatewayWithResponseStream",
        ),
    ],
)
def test_every_header_member_is_a_keyword_and_in_signing_order(
    method: str, service: str, operation: str
) -> None:
    op = operation_table()[(service, operation)]
    # Read from the source, which a compiled build's methods do not carry.
    (function,) = [
        item
        for node in ast.walk(parse_file(Path(errors.__file__).parent / "_invoke" / "typed.py"))
        if isinstance(node, ast.ClassDef) and node.name == "TypedOperations"
        for item in node.body
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == method
    ]
    keywords = {argument.arg for argument in function.args.args + function.args.kwonlyargs}
    assert {m.keyword for m in op.headers} <= keywords
    # The member tuple names the keywords in the table's signing order.
    (members,) = [
        node.value
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == ["members"]
    ]
    assert isinstance(members, ast.Tuple)
    assert [getattr(element, "id", None) for element in members.elts] == [
        m.keyword for m in op.headers
    ]


# -- InvokeInferenceRouter ------------------------------------------------------------


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_router_call_carries_every_member_and_answers_where_and_why(
    emulator: Emulator, transport: str
) -> None:
    async with _gateway(emulator, transport) as gw:
        result = await gw.invoke_router(
            "r1",
            b'{"x": 1}',
            routing_target="t",
            content_type="application/json",
            accept="application/json",
            custom_attributes=ATTRIBUTES,
            inference_id="inf-1",
            prefix_aware_id="prefix-1",
        )
    assert result.body == b'{"x": 1}'
    assert result.routed_resource_arn == LOCAL_A
    assert result.routing_reason == "local-preferred"
    assert result.invoked_variant == "AllTraffic"
    assert result.custom_attributes == ATTRIBUTES
    assert result.request_id
    assert result.target == "r1"
    sent = _sent(emulator, "/inference-routers/r1/invocations")
    assert sent["x-amzn-sagemaker-routing-target-name"] == "t"
    assert sent["content-type"] == "application/json"
    assert sent["accept"] == "application/json"
    assert sent["x-amzn-sagemaker-custom-attributes"] == ATTRIBUTES
    assert sent["x-amzn-sagemaker-inference-id"] == "inf-1"
    assert sent["x-amzn-sagemaker-prefix-aware-id"] == "prefix-1"
    assert "x-amzn-sagemaker-routing-target-name" in sent["authorization"]


@pytest.mark.newer_runtimes
async def test_router_fails_over_to_another_region(emulator: Emulator) -> None:
    emulator.runtimes.routers.set_destination("r1", "t", "local-a", healthy=False)
    async with _gateway(emulator) as gw:
        result = await gw.invoke_router("r1", b"{}", routing_target="t")
    assert result.routed_resource_arn == REMOTE_EU
    assert result.routing_reason in ("failover", "only-healthy")


@pytest.mark.newer_runtimes
async def test_router_missing_routing_target_is_refused_before_sending(
    emulator: Emulator,
) -> None:
    async with _gateway(emulator) as gw:
        with pytest.raises(errors.InvalidRequest, match="RoutingTargetName"):
            router = operation_table()[(INFERENCE_ROUTER_RUNTIME, "InvokeInferenceRouter")]
            await gw.call(router, "r1", b"{}", (None,) * len(router.headers))
        with pytest.raises(errors.InvalidRequest, match="invalid inference router name"):
            await gw.invoke_router("bad name", b"{}", routing_target="t")
    assert not [r for r in emulator.recorded if r.path.startswith("/inference-routers/")]


@pytest.mark.newer_runtimes
async def test_router_async(emulator: Emulator) -> None:
    async with _gateway(emulator) as gw:
        answer = await gw.invoke_router_async(
            "r1",
            routing_target="t-async",
            input_location="s3://bucket/in.json",
            content_type="application/json",
            accept="application/json",
            custom_attributes=ATTRIBUTES,
            inference_id="inf-2",
            request_ttl_seconds=600,
            invocation_timeout_seconds=30,
            filename="out.json",
            s3_output_path_extension="runs/1",
        )
    assert answer.inference_id and answer.output_location and answer.request_id
    sent = _sent(emulator, "/inference-routers/r1/async-invocations")
    assert sent["x-amzn-sagemaker-inputlocation"] == "s3://bucket/in.json"
    assert sent["x-amzn-sagemaker-requestttlseconds"] == "600"
    assert sent["x-amzn-sagemaker-invocationtimeoutseconds"] == "30"
    assert sent["x-amzn-sagemaker-filename"] == "out.json"
    assert sent["x-amzn-sagemaker-s3outputpathextension"] == "runs/1"
    assert sent["x-amzn-sagemaker-content-type"] == "application/json"
    assert sent["x-amzn-sagemaker-accept"] == "application/json"
    assert sent["x-amzn-sagemaker-inference-id"] == "inf-2"


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("code", sorted(ROUTER_ERROR_CODES))
async def test_every_router_error_is_its_class(emulator: Emulator, code: str) -> None:
    emulator.runtimes.routers.set_faults("r1", {code: 1.0})
    expected = {
        "ValidationException": errors.ValidationError,
        "AccessDeniedException": errors.AccessDenied,
        "RequestTimeoutException": errors.RequestTimeout,
        "ModelError": errors.ModelError,
        "ThrottlingException": errors.Throttling,
        "ModelNotReadyException": errors.ModelNotReady,
        "InternalFailure": errors.InternalFailure,
        "ServiceUnavailableException": errors.ServiceUnavailable,
        "InternalDependencyException": errors.InternalDependency,
    }[code]
    async with _gateway(emulator) as gw:
        with pytest.raises(errors.ServiceError) as caught:
            await gw.invoke_router("r1", b"{}", routing_target="t")
    assert type(caught.value) is expected
    assert (caught.value.code, caught.value.status) == (code, ROUTER_ERROR_CODES[code])


@pytest.mark.newer_runtimes
async def test_router_model_error_and_retries_follow_the_route(emulator: Emulator) -> None:
    for endpoint in ("local-a", "remote-eu"):
        emulator.set_faults(endpoint, error_rates={"ModelError": 1.0})
    async with _gateway(emulator) as gw:
        with pytest.raises(errors.ModelError) as caught:
            await gw.invoke_router("r1", b"{}", routing_target="t")
    assert caught.value.original_status_code == 500
    # A retryable error is retried by the route's rules, as InvokeEndpoint's are.
    emulator.set_faults("local-a", error_rates={})
    emulator.set_faults("remote-eu", error_rates={})
    emulator.runtimes.routers.set_faults("r1", {"ThrottlingException": 1.0})
    async with _gateway(emulator, defaults={"retry": {"max_attempts": 3}}) as gw:
        with pytest.raises(errors.Throttling) as throttled:
            await gw.invoke_router("r1", b"{}", routing_target="t")
    assert throttled.value.attempts == 3


# -- the Global Inference Gateway -----------------------------------------------------


@pytest.mark.newer_runtimes
async def test_global_gateway_completion_passes_the_token(emulator: Emulator) -> None:
    async with _gateway(emulator) as gw:
        result = await gw.invoke_global_gateway(
            "gw1", json.dumps(CHAT).encode(), customer_identity_token=TOKEN, accept="*/*"
        )
    completion = json.loads(result.body)
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"]["content"] == "bid on this one"
    assert result.content_type == "application/json"
    forwarded = emulator.runtimes.gateways.forwarded[-1]
    assert (forwarded.identity_token, forwarded.body["stream"]) == (TOKEN, False)
    sent = _sent(emulator, "/global-inference-gateway/gw1/invocations")
    assert "x-amzn-sagemaker-customer-identity-token" in sent["authorization"]
    assert sent["accept"] == "*/*"


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_global_gateway_streamed_completion(emulator: Emulator, transport: str) -> None:
    async with _gateway(emulator, transport) as gw:
        stream = gw.invoke_global_gateway_stream(
            "gw1", json.dumps(CHAT).encode(), customer_identity_token=TOKEN
        )
        chunks = [chunk async for chunk in stream]
    assert chunks[-1] == b"data: [DONE]\n\n"
    assert all(chunk.startswith(b"data: ") for chunk in chunks)
    words = [
        json.loads(chunk[6:])["choices"][0]["delta"].get("content", "") for chunk in chunks[:-1]
    ]
    assert "".join(words) == "bid on this one"
    assert stream.request_id and stream.target == "gw1"
    assert emulator.runtimes.gateways.forwarded[-1].body["stream"] is True


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ("InternalStreamFailure", errors.InternalStreamFailure),
        ("ModelStreamError", errors.ModelError),
    ],
)
async def test_global_gateway_truncated_stream(
    emulator: Emulator, event: str, expected: type[errors.ServiceError]
) -> None:
    emulator.runtimes.gateways.set_faults(
        "gw1", {"stream_failure_rate": 1.0, "stream_failure_event": event}
    )
    chunks: list[bytes] = []
    async with _gateway(emulator) as gw:
        with pytest.raises(expected) as caught:
            async for chunk in gw.invoke_global_gateway_stream("gw1", json.dumps(CHAT).encode()):
                chunks.append(chunk)  # noqa: PERF401  (the parts before the error count)
    assert len(chunks) == 1  # the first part arrived, then the failure event
    assert caught.value.code == event
    assert caught.value.origin == "inference gateway"
    assert not caught.value.retryable  # parts were delivered: not replayable


@pytest.mark.newer_runtimes
@pytest.mark.parametrize("code", sorted(GATEWAY_OWN_ERROR_CODES))
async def test_every_global_gateway_error_is_its_class(emulator: Emulator, code: str) -> None:
    emulator.runtimes.gateways.set_faults("gw1", {"error_rates": {code: 1.0}})
    expected = {
        "AccessDeniedException": errors.AccessDenied,
        "ThrottlingException": errors.Throttling,
        "InternalServerException": errors.InternalServerError,
        "BadGatewayException": errors.BadGateway,
        "ServiceUnavailableException": errors.ServiceUnavailable,
        "GatewayTimeoutException": errors.GatewayTimeout,
    }[code]
    async with _gateway(emulator) as gw:
        with pytest.raises(errors.ServiceError) as caught:
            await gw.invoke_global_gateway("gw1", json.dumps(CHAT).encode())
        with pytest.raises(errors.ServiceError) as streamed:
            async for _ in gw.invoke_global_gateway_stream("gw1", json.dumps(CHAT).encode()):
                pass
    for error in (caught.value, streamed.value):
        assert type(error) is expected
        assert error.origin == "Global Inference Gateway"
        assert error.status == GATEWAY_OWN_ERROR_CODES[code]
    if code == "ThrottlingException":
        assert caught.value.retry_after == 1.0


@pytest.mark.newer_runtimes
async def test_global_gateway_request_errors(emulator: Emulator) -> None:
    async with _gateway(emulator) as gw:
        with pytest.raises(errors.ResourceNotFound) as missing_model:
            await gw.invoke_global_gateway("gw1", b'{"model": "nope", "messages": []}')
        with pytest.raises(errors.ResourceNotFound) as missing_gateway:
            await gw.invoke_global_gateway("gw9", json.dumps(CHAT).encode())
        with pytest.raises(errors.ServiceUnavailable):
            await gw.invoke_global_gateway("gw1", b'{"model": "busy", "messages": []}')
        with pytest.raises(errors.ServiceError) as media:
            await gw.invoke_global_gateway("gw1", b"x", content_type="text/plain")
        with pytest.raises(errors.AccessDenied) as bad_token:
            await gw.invoke_global_gateway(
                "gw1", json.dumps(CHAT).encode(), customer_identity_token="not-a-jwt"
            )
        with pytest.raises(errors.InvalidRequest, match="10485760"):
            await gw.invoke_global_gateway("gw1", b"x" * (10 * 1024 * 1024 + 1))
        with pytest.raises(errors.InvalidRequest, match="Global Inference Gateway id"):
            await gw.invoke_global_gateway("GW-1", json.dumps(CHAT).encode())
    assert (missing_model.value.resource_id, missing_model.value.resource_type) == (
        "nope",
        "model",
    )
    assert missing_gateway.value.resource_type == "gateway"
    assert (media.value.status, media.value.code) == (415, "UnsupportedMediaTypeException")
    assert bad_token.value.origin == "inference gateway"


# -- secrets ----------------------------------------------------------------------


class _EchoingServer:
    """A real HTTP server that answers every request with a 400 quoting its headers back."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> _EchoingServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()
        await asyncio.sleep(0)  # let the closed transports finish closing

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")[1:]
                headers = dict(line.split(": ", 1) for line in lines if ": " in line)
                length = int(headers.get("content-length", "0"))
                await reader.readexactly(length)
                echoed = "; ".join(f"{k}={v}" for k, v in headers.items() if k != "authorization")
                body = json.dumps(
                    {
                        "Message": f"Global Inference Gateway: bad request {echoed}",
                        "OriginalMessage": echoed,
                    }
                ).encode()
                writer.write(
                    b"HTTP/1.1 400 Bad Request\r\nx-amzn-RequestId: r-1\r\n"
                    b"x-amzn-ErrorType: ValidationException\r\n"
                    b"Content-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.mark.newer_runtimes
async def test_identity_token_and_custom_attributes_never_in_errors_events_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[object] = []
    caplog.set_level(logging.DEBUG)
    async with (
        _EchoingServer() as server,
        Gateway(
            "us-east-1",
            endpoint_url=f"http://127.0.0.1:{server.port}",
            credentials=(ACCESS_KEY, SECRET_KEY),
            hooks=[seen.append],
        ) as gw,
    ):
        failures: list[errors.GatewayError] = []
        with pytest.raises(errors.ValidationError) as routed:
            await gw.invoke_router("r1", b"{}", routing_target="t", custom_attributes=ATTRIBUTES)
        failures.append(routed.value)
        with pytest.raises(errors.ValidationError) as direct:
            await gw.invoke_global_gateway("gw1", b"{}", customer_identity_token=TOKEN)
        failures.append(direct.value)
        with pytest.raises(errors.ValidationError) as streamed:
            async for _ in gw.invoke_global_gateway_stream(
                "gw1", b"{}", customer_identity_token=TOKEN
            ):
                pass
        failures.append(streamed.value)
    for error in failures:
        text = f"{error} {error!r} {error.args} {vars(error)}"
        assert "<redacted>" in text  # the server did echo them
        assert TOKEN not in text and ATTRIBUTES not in text
    assert direct.value.origin == "Global Inference Gateway"
    assert any(isinstance(event, CallStarted) for event in seen)
    assert any(isinstance(event, AttemptFinished) for event in seen)
    assert any(isinstance(event, CallFinished) for event in seen)
    for event in seen:
        assert TOKEN not in repr(event) and ATTRIBUTES not in repr(event)
    assert TOKEN not in caplog.text and ATTRIBUTES not in caplog.text


# -- hosts -------------------------------------------------------------------------


@pytest.mark.newer_runtimes
@pytest.mark.parametrize(
    ("service", "options", "host"),
    [
        (INFERENCE_ROUTER_RUNTIME, {}, "inferencerouter-runtime.sagemaker.eu-west-1.amazonaws.com"),
        (
            INFERENCE_ROUTER_RUNTIME,
            {"use_fips_endpoint": True},
            "inferencerouter-runtime.sagemaker-fips.eu-west-1.amazonaws.com",
        ),
        (
            INFERENCE_ROUTER_RUNTIME,
            {"use_dualstack_endpoint": True},
            "inferencerouter-runtime.sagemaker.eu-west-1.api.aws",
        ),
        (GATEWAY_RUNTIME, {}, "gateway-runtime.sagemaker.eu-west-1.amazonaws.com"),
        (
            GATEWAY_RUNTIME,
            {"use_fips_endpoint": True},
            "gateway-runtime.sagemaker-fips.eu-west-1.amazonaws.com",
        ),
    ],
)
def test_hosts_per_service_as_botocore_resolves_them(
    service: str, options: dict[str, bool], host: str
) -> None:
    config = GatewayConfig.from_mapping({"region": "eu-west-1", **options})
    _, url, _, _ = TargetPlanner(config, service).resolve_with_botocore(set())
    assert url == f"https://{host}"


@pytest.mark.newer_runtimes
def test_endpoint_url_per_service_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_GATEWAY_RUNTIME", "http://gateway.test:81")
    monkeypatch.setenv(
        "AWS_ENDPOINT_URL_SAGEMAKER_INFERENCE_ROUTER_RUNTIME", "http://router.test:82"
    )
    config = GatewayConfig.from_mapping({"region": "eu-west-1"})
    urls = {
        service: TargetPlanner(config, service).resolve_with_botocore(set())[1]
        for service in (GATEWAY_RUNTIME, INFERENCE_ROUTER_RUNTIME, "sagemaker-runtime")
    }
    assert urls == {
        GATEWAY_RUNTIME: "http://gateway.test:81",
        INFERENCE_ROUTER_RUNTIME: "http://router.test:82",
        "sagemaker-runtime": "https://runtime.sagemaker.eu-west-1.amazonaws.com",
    }


@pytest.mark.newer_runtimes
async def test_router_in_another_region_is_signed_for_that_region(emulator: Emulator) -> None:
    async with _gateway(emulator) as gw:
        planner = gw._context.lane(INFERENCE_ROUTER_RUNTIME).planner
        await gw.invoke_router("r1", b"{}", routing_target="t")  # resolves the hosts
        origin = planner.target_origin(None, "ap-south-1")
    assert origin.host_header == "inferencerouter-runtime.sagemaker.ap-south-1.amazonaws.com"


# -- an older botocore -----------------------------------------------------------------

_OLD_BOTOCORE_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    import botocore.loaders
    botocore.loaders.Loader.BUILTIN_DATA_PATH = sys.argv[1]

    from gateway import Gateway, compat, errors
    from gateway.emulator import Emulator, EmulatorConfig

    async def main():
        async with Emulator(EmulatorConfig.from_dict({"endpoints": {"echo": {}}})) as emu:
            async with Gateway(
                "us-east-1", endpoint_url=emu.url, credentials=("AKIDOLD", "old-secret")
            ) as gw:
                print("invoke:", (await gw.invoke("echo", b"still served")).body.decode())
                calls = {
                    "router": gw.invoke_router("r1", b"{}", routing_target="t"),
                    "global": gw.invoke_global_gateway("gw1", b"{}"),
                    "stream": gw.invoke_global_gateway_stream("gw1", b"{}").__anext__(),
                }
                for name, call in calls.items():
                    try:
                        await call
                    except errors.ServiceModelUnavailable as exc:
                        print(f"{name}: {exc.service} {exc.required}")
            try:
                compat.Session().create_client(
                    "sagemaker-gateway-runtime", region_name="us-east-1"
                )
            except errors.ServiceModelUnavailable as exc:
                print(f"compat: {exc.service} {exc.required}")

    asyncio.run(main())
    """
)


def test_an_older_botocore_names_the_release_each_new_operation_needs(tmp_path: Path) -> None:
    builtin = Path(botocore.loaders.Loader.BUILTIN_DATA_PATH)
    old = tmp_path / "data"
    old.mkdir()
    for entry in builtin.iterdir():
        if entry.is_file():
            shutil.copy(entry, old / entry.name)
    shutil.copytree(builtin / "sagemaker-runtime", old / "sagemaker-runtime")
    completed = subprocess.run(
        [sys.executable, "-c", _OLD_BOTOCORE_CHILD, str(old)],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.splitlines() == [
        "invoke: still served",
        f"router: {INFERENCE_ROUTER_RUNTIME} 1.44.4",
        f"global: {GATEWAY_RUNTIME} 1.44.8",
        f"stream: {GATEWAY_RUNTIME} 1.44.8",
        f"compat: {GATEWAY_RUNTIME} 1.44.8",
    ]


@pytest.mark.newer_runtimes
async def test_a_stream_cut_mid_message_is_a_typed_error(emulator: Emulator) -> None:
    from tests._faultproxy import FaultProxy

    async with FaultProxy("127.0.0.1", emulator.port) as proxy:
        await proxy.set_mode("reset_mid_body")
        async with Gateway(
            "us-east-1",
            endpoint_url=proxy.url,
            credentials=(ACCESS_KEY, SECRET_KEY),
            defaults=ONE_ATTEMPT,
        ) as gw:
            with pytest.raises(errors.GatewayError) as caught:
                async for _ in gw.invoke_global_gateway_stream("gw1", json.dumps(CHAT).encode()):
                    pass
    assert isinstance(caught.value, errors.TransportError | errors.ResponseStreamError), repr(
        caught.value
    )
