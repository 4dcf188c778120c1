"""gateway.compat against real aiobotocore: the same calls, the same emulator, the same answers."""

from __future__ import annotations

import io
import re
import socket
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack
from typing import Any

import botocore.exceptions
import botocore.session
import pytest
from botocore.config import Config

from gateway import Gateway, compat
from gateway._compat.request import method_specs
from gateway.emulator import Emulator, EmulatorConfig
from gateway.emulator._errors import ERROR_CODES
from tests._peers import require_peers
from tests._sagemaker_members import BOTO_METHODS, call_members, wire_view

# aiobotocore is the reference here: a peer, installed in an environment of its own.
# The tests that call it skip without it; the rest run everywhere.
pytestmark = pytest.mark.peers

CREDENTIALS: dict[str, Any] = {
    "aws_access_key_id": "AKIDCOMPATTEST",
    "aws_secret_access_key": "compat-secret",
}
EMULATOR_CONFIG: dict[str, Any] = {
    "seed": 3,
    "endpoints": {
        "echo": {},
        "constant": {"model": {"type": "constant", "body": "0.25", "content_type": "text/csv"}},
        "mme": {"mme": {"models": ["a.tar.gz", "b.tar.gz"], "cold_load_ms": 1}},
        "ab": {"variants": [{"name": "blue", "weight": 1}, {"name": "green", "weight": 1}]},
    },
}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

Clients = tuple[Any, compat.SageMakerRuntimeClient]


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(EMULATOR_CONFIG)) as emu:
        yield emu


async def open_clients(stack: AsyncExitStack, url: str, **config: Any) -> Clients:
    require_peers()
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session as aio_get_session

    real = await stack.enter_async_context(
        aio_get_session().create_client(
            "sagemaker-runtime",
            region_name="us-east-1",
            endpoint_url=url,
            config=AioConfig(retries={"max_attempts": 0}, **config),
            **CREDENTIALS,
        )
    )
    ours = await stack.enter_async_context(
        compat.create_client(
            "sagemaker-runtime",
            region_name="us-east-1",
            endpoint_url=url,
            # The same retry settings as the real client: both send one attempt.
            config=Config(retries={"max_attempts": 0}, **config),
            **CREDENTIALS,
        )
    )
    return real, ours


@pytest.fixture
async def clients(emulator: Emulator) -> AsyncIterator[Clients]:
    async with AsyncExitStack() as stack:
        yield await open_clients(stack, emulator.url)


async def raised(call: Awaitable[Any]) -> Exception:
    try:
        await call
    except Exception as exc:  # the point: capture whatever each client raises
        return exc
    raise AssertionError("no exception")


def scrub(text: str) -> str:
    return _UUID.sub("<id>", text)


async def comparable(response: dict[str, Any]) -> dict[str, Any]:
    """Read the body; drop what legitimately differs per request (ids, Date)."""
    view = dict(response)
    if "Body" in view:
        view["Body"] = await view["Body"].read()
    metadata = dict(view.pop("ResponseMetadata"))
    assert metadata.pop("RequestId", "x")
    headers = {
        name: value
        for name, value in metadata.pop("HTTPHeaders").items()
        # Date and ids vary; only the first call of a model pays its cold load.
        if name not in ("date", "x-amzn-requestid", "x-emulator-cold-load")
    }
    view["metadata"] = metadata
    view["headers"] = {name: scrub(value) for name, value in headers.items()}
    for key in ("InferenceId", "OutputLocation", "FailureLocation"):
        if key in view:
            view[key] = scrub(view[key])
    if "NewSessionId" in view:
        view["NewSessionId"] = re.sub(r"^[0-9a-f]{32};", "<session>;", view["NewSessionId"])
        view["headers"].pop("x-amzn-sagemaker-new-session-id")
    return view


def error_view(exc: Exception) -> dict[str, Any]:
    assert isinstance(exc, botocore.exceptions.ClientError), repr(exc)
    response = exc.response
    metadata = response.get("ResponseMetadata", {})
    return {
        "class": type(exc).__name__,
        "error": {key: scrub(value) for key, value in response["Error"].items()},
        "status": metadata.get("HTTPStatusCode"),
        "request_id": bool(metadata.get("RequestId")),
        "retries": (metadata.get("RetryAttempts"), metadata.get("MaxAttemptsReached")),
        "members": {
            key: scrub(value) if isinstance(value, str) else value
            for key, value in response.items()
            if key not in ("Error", "ResponseMetadata")
        },
        "str": scrub(str(exc)),
    }


# -- InvokeEndpoint -----------------------------------------------------------

INVOKE_CASES: list[dict[str, Any]] = [
    {"EndpointName": "echo", "Body": b'{"x": 1}'},
    {
        "EndpointName": "echo",
        "Body": b'{"x": 1}',
        "ContentType": "application/json",
        "Accept": "application/json",
        "CustomAttributes": "trace=abc",
        "InferenceId": "inf-1",
        "TargetVariant": "AllTraffic",
        "EnableExplanations": "`true`",
    },
    {"EndpointName": "constant", "Body": b"1,2,3", "ContentType": "text/csv"},
    {"EndpointName": "mme", "Body": b"payload", "TargetModel": "b.tar.gz"},
    {"EndpointName": "ab", "Body": b"x", "TargetVariant": "green"},
    {"EndpointName": "echo", "Body": bytearray(b"from a bytearray")},
    {"EndpointName": "echo", "Body": "text body"},
]


@pytest.mark.parametrize("params", INVOKE_CASES, ids=range(len(INVOKE_CASES)))
async def test_invoke_endpoint_matches(clients: Clients, params: dict[str, Any]) -> None:
    real, ours = clients
    expected = await comparable(await real.invoke_endpoint(**params))
    assert await comparable(await ours.invoke_endpoint(**params)) == expected


async def test_file_like_body(clients: Clients) -> None:
    real, ours = clients
    expected = await comparable(
        await real.invoke_endpoint(EndpointName="echo", Body=io.BytesIO(b"file body"))
    )
    answer = await ours.invoke_endpoint(EndpointName="echo", Body=io.BytesIO(b"file body"))
    assert await comparable(answer) == expected
    assert expected["Body"] == b"file body"


async def test_new_session(clients: Clients) -> None:
    real, ours = clients
    params = {"EndpointName": "echo", "Body": b"{}", "SessionId": "NEW_SESSION"}
    expected = await comparable(await real.invoke_endpoint(**params))
    assert "NewSessionId" in expected
    assert await comparable(await ours.invoke_endpoint(**params)) == expected


async def test_body_reader_behaves_like_aiobotocore(clients: Clients) -> None:
    body = b"line one\nline two\n" * 100

    async def reads(client: Any) -> list[Any]:
        response = await client.invoke_endpoint(EndpointName="echo", Body=body)
        async with response["Body"] as stream:
            parts: list[Any] = [await stream.read(5), stream.tell(), await stream.read(7)]
            parts.append([len(chunk) async for chunk in stream.iter_chunks(500)])
            parts.append(await stream.read())
        second = await client.invoke_endpoint(EndpointName="echo", Body=body)
        parts.append([line async for line in second["Body"].iter_lines()][:3])
        third = await client.invoke_endpoint(EndpointName="echo", Body=body)
        parts.append(b"".join([chunk async for chunk in third["Body"]]) == body)
        return parts

    real, ours = clients
    assert await reads(ours) == await reads(real)


# -- InvokeEndpointWithResponseStream ----------------------------------------


async def stream_events(client: Any, **params: Any) -> tuple[dict[str, Any], list[Any]]:
    response = await client.invoke_endpoint_with_response_stream(**params)
    events = [event async for event in response["Body"]]
    return response, events


@pytest.mark.parametrize(
    "params",
    [
        {"EndpointName": "echo", "Body": b'{"tokens": "abcdefghij"}'},
        {"EndpointName": "echo", "Body": b"x", "ContentType": "text/plain", "Accept": "text/plain"},
        {"EndpointName": "constant", "Body": b"1", "CustomAttributes": "a=b", "InferenceId": "i"},
    ],
)
async def test_stream_matches(clients: Clients, params: dict[str, Any]) -> None:
    real, ours = clients
    real_response, expected = await stream_events(real, **params)
    our_response, events = await stream_events(ours, **params)
    assert events == expected
    assert len(expected) > 0
    assert all(set(event) == {"PayloadPart"} for event in events)
    assert set(our_response) == set(real_response)
    for key in ("ContentType", "InvokedProductionVariant", "CustomAttributes"):
        assert our_response.get(key) == real_response.get(key), key
    assert our_response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert _UUID.fullmatch(our_response["ResponseMetadata"]["RequestId"])


async def drain(body: Any, events: list[Any]) -> None:
    async for event in body:
        events.append(event)  # noqa: PERF401 - keeps the events seen before an error


async def test_stream_error_event(clients: Clients, emulator: Emulator) -> None:
    emulator.set_faults("echo", stream_error_rate=1.0)
    params = {"EndpointName": "echo", "Body": b"abcdefghijkl"}
    views = []
    for client in clients:
        response = await client.invoke_endpoint_with_response_stream(**params)
        events: list[Any] = []
        exc = await raised(drain(response["Body"], events))
        assert isinstance(exc, botocore.exceptions.EventStreamError)
        views.append((events, type(exc).__name__, exc.response, str(exc)))
    assert views[1] == views[0]
    assert views[0][2]["Error"]["Code"] == "ModelStreamError"


async def test_stream_http_error_raises_from_the_call(clients: Clients) -> None:
    real, ours = clients
    params = {"EndpointName": "missing", "Body": b"x"}
    expected = error_view(await raised(real.invoke_endpoint_with_response_stream(**params)))
    assert error_view(await raised(ours.invoke_endpoint_with_response_stream(**params))) == expected
    assert expected["class"] == "ValidationError"


# -- InvokeEndpointAsync -------------------------------------------------------


async def test_invoke_async_matches(clients: Clients) -> None:
    real, ours = clients
    params = {
        "EndpointName": "echo",
        "InputLocation": "s3://bucket/input.json",
        "InferenceId": "async-1",
        "ContentType": "application/json",
        "RequestTTLSeconds": 600,
        "InvocationTimeoutSeconds": 120,
    }
    expected = await comparable(await real.invoke_endpoint_async(**params))
    view = await comparable(await ours.invoke_endpoint_async(**params))
    # Only the request id is known of an async answer's headers (see compat).
    expected.pop("headers")
    view.pop("headers")
    assert view == expected
    assert expected["metadata"]["HTTPStatusCode"] == 202


# -- errors ------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(ERROR_CODES))
async def test_service_errors_match(clients: Clients, emulator: Emulator, code: str) -> None:
    real, ours = clients
    emulator.set_faults("echo", error_rates={code: 1.0})
    params = {"EndpointName": "echo", "Body": b"{}"}
    expected = error_view(await raised(real.invoke_endpoint(**params)))
    exc = await raised(ours.invoke_endpoint(**params))
    assert error_view(exc) == expected
    assert expected["error"]["Code"] == code
    assert expected["status"] == ERROR_CODES[code]
    modeled = getattr(ours.exceptions, code, None)
    if modeled is not None:
        assert isinstance(exc, modeled)
    assert isinstance(exc.__cause__, Exception)  # the gateway error is kept


async def test_model_error_members(clients: Clients, emulator: Emulator) -> None:
    _, ours = clients
    emulator.set_faults("echo", error_rates={"ModelError": 1.0})
    with pytest.raises(ours.exceptions.ModelError) as info:
        await ours.invoke_endpoint(EndpointName="echo", Body=b"{}")
    response = info.value.response
    assert response["OriginalStatusCode"] == 500
    assert response["OriginalMessage"] == "Injected model failure"
    assert response["LogStreamArn"].startswith("arn:aws:logs:us-east-1:")
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424


@pytest.mark.parametrize(
    "params",
    [
        {"EndpointName": "no-such-endpoint", "Body": b"{}"},
        {"EndpointName": "mme", "Body": b"{}"},  # TargetModel missing
        {"EndpointName": "echo", "Body": b"{}", "TargetModel": "a.tar.gz"},
        {"EndpointName": "mme", "Body": b"{}", "TargetModel": "unknown.tar.gz"},
    ],
)
async def test_validation_errors_match(clients: Clients, params: dict[str, Any]) -> None:
    real, ours = clients
    expected = error_view(await raised(real.invoke_endpoint(**params)))
    assert error_view(await raised(ours.invoke_endpoint(**params))) == expected


def report_lines(exc: Exception) -> list[str]:
    assert isinstance(exc, botocore.exceptions.ParamValidationError), repr(exc)
    # "must be one of" lists each side's known members; the rest must agree.
    return [line.split(", must be one of")[0] for line in str(exc).splitlines()]


@pytest.mark.parametrize(
    "params",
    [
        {"Body": b"{}"},
        {"EndpointName": "echo"},
        {"EndpointName": "echo", "Body": 12},
        {"EndpointName": "echo", "Body": b"{}", "ContentType": 3},
        {"EndpointName": 5, "Body": b"{}"},
        {"EndpointName": "echo", "Body": b"{}", "Bogus": "x"},
        {"Body": None, "Bogus": 1, "Accept": 2},
    ],
)
async def test_parameter_validation_matches(clients: Clients, params: dict[str, Any]) -> None:
    real, ours = clients
    expected = report_lines(await raised(real.invoke_endpoint(**params)))
    assert report_lines(await raised(ours.invoke_endpoint(**params))) == expected
    stream_expected = report_lines(
        await raised(real.invoke_endpoint_with_response_stream(**params))
    )
    stream = report_lines(await raised(ours.invoke_endpoint_with_response_stream(**params)))
    assert stream == stream_expected


@pytest.mark.parametrize(
    "params",
    [
        {"EndpointName": "", "Body": b"x"},
        {"EndpointName": "a" * 64, "Body": b"x"},
        {"EndpointName": "bad_name", "Body": b"x"},
        {"EndpointName": "echo", "Body": b"x", "CustomAttributes": "a" * 1025},
        {"EndpointName": "echo", "Body": b"x", "InferenceId": "i" * 65},
    ],
)
async def test_refused_requests_raise_what_aiobotocore_raises(
    clients: Clients, params: dict[str, Any]
) -> None:
    """What the gateway refuses before sending, aiobotocore sends and SageMaker refuses."""
    real, ours = clients
    expected = await raised(real.invoke_endpoint(**params))
    exc = await raised(ours.invoke_endpoint(**params))
    # Each session builds its own modeled classes: the same name, both ClientErrors.
    assert type(exc).__name__ == type(expected).__name__ == "ValidationError", (exc, expected)
    assert isinstance(exc, botocore.exceptions.ClientError)
    assert isinstance(expected, botocore.exceptions.ClientError)
    assert exc.response["Error"]["Code"] == expected.response["Error"]["Code"] == "ValidationError"
    assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 400


async def test_header_injection_raises_what_aiobotocore_raises(clients: Clients) -> None:
    real, ours = clients
    params = {"EndpointName": "echo", "Body": b"x", "CustomAttributes": "a\r\nb: c"}
    expected = await raised(real.invoke_endpoint(**params))
    exc = await raised(ours.invoke_endpoint(**params))
    assert type(exc) is type(expected) is botocore.exceptions.HTTPClientError


@pytest.mark.parametrize(
    "params",
    [
        {"EndpointName": "echo", "Body": b"x", "InferenceId": ""},
        {"EndpointName": "echo", "Body": b"x", "PrefixAwareId": ""},
        {"EndpointName": "echo", "Body": b"x", "PrefixAwareId": 3},
    ],
)
async def test_model_bounds_are_botocore_parameter_errors(
    clients: Clients, params: dict[str, Any]
) -> None:
    real, ours = clients
    expected = report_lines(await raised(real.invoke_endpoint(**params)))
    assert report_lines(await raised(ours.invoke_endpoint(**params))) == expected


@pytest.mark.parametrize(
    "params",
    [
        {"EndpointName": "echo", "InputLocation": "s3://b/i", "RequestTTLSeconds": 5},
        {"EndpointName": "echo", "InputLocation": "s3://b/i", "Filename": ""},
        {"EndpointName": "echo", "Body": 7},
    ],
)
async def test_async_parameter_errors_match(clients: Clients, params: dict[str, Any]) -> None:
    real, ours = clients
    expected = report_lines(await raised(real.invoke_endpoint_async(**params)))
    assert report_lines(await raised(ours.invoke_endpoint_async(**params))) == expected


# -- transport errors ------------------------------------------------------------


async def test_connection_reset(clients: Clients, emulator: Emulator) -> None:
    emulator.set_faults("echo", reset_rate=1.0)
    for client in clients:
        exc = await raised(client.invoke_endpoint(EndpointName="echo", Body=b"{}"))
        assert type(exc) is botocore.exceptions.EndpointConnectionError
        assert "/endpoints/echo/invocations" in str(exc)


async def test_connection_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    async with AsyncExitStack() as stack:
        for client in await open_clients(stack, url, connect_timeout=2):
            exc = await raised(client.invoke_endpoint(EndpointName="echo", Body=b"{}"))
            assert type(exc) is botocore.exceptions.EndpointConnectionError
            assert (
                str(exc)
                == f'Could not connect to the endpoint URL: "{url}/endpoints/echo/invocations"'
            )


async def test_read_timeout(emulator: Emulator) -> None:
    emulator.set_latency("echo", base_ms=800)
    async with AsyncExitStack() as stack:
        real, ours = await open_clients(stack, emulator.url, read_timeout=0.2)
        for call in (
            real.invoke_endpoint(EndpointName="echo", Body=b"{}"),
            ours.invoke_endpoint(EndpointName="echo", Body=b"{}"),
        ):
            assert isinstance(await raised(call), botocore.exceptions.ReadTimeoutError)
    async with compat.create_client(
        "sagemaker-runtime", region_name="us-east-1", endpoint_url=emulator.url, **CREDENTIALS
    ) as client:
        exc = await raised(client.invoke_endpoint(EndpointName="echo", Body=b"{}", Timeout=0.2))
        assert isinstance(exc, botocore.exceptions.ReadTimeoutError)


# -- client and session ------------------------------------------------------------


async def test_exceptions_are_built_once_per_session(clients: Clients, emulator: Emulator) -> None:
    _, ours = clients
    session = compat.get_session()
    assert ours.exceptions is session.exceptions
    async with session.create_client(
        "sagemaker-runtime", region_name="us-east-1", endpoint_url=emulator.url, **CREDENTIALS
    ) as other:
        assert other.exceptions.ModelError is ours.exceptions.ModelError
    assert issubclass(ours.exceptions.ModelError, botocore.exceptions.ClientError)
    for name in ("ValidationError", "ModelNotReadyException", "InternalFailure"):
        assert getattr(ours.exceptions, name).__name__ == name


def test_every_botocore_member_is_a_parameter() -> None:
    """A botocore upgrade that adds a member fails here until compat passes it on."""
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    operations = {op.name: op for op in method_specs("sagemaker-runtime")}
    assert set(operations) == set(model.operation_names)
    for name, operation in operations.items():
        members = set(model.operation_model(name).input_shape.members)
        ours = set(operation.params) - {"Timeout"} | {"EndpointName"}
        ours |= {"Body"} if operation.has_body else set()
        assert ours == members, name


def test_session_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "missing"))
    session = compat.Session()
    with pytest.raises(botocore.exceptions.NoRegionError):
        session.create_client("sagemaker-runtime")
    with pytest.raises(botocore.exceptions.UnknownServiceError):
        session.create_client("s3", region_name="us-east-1")
    with pytest.raises(botocore.exceptions.PartialCredentialsError):
        session.create_client("sagemaker-runtime", region_name="us-east-1", aws_access_key_id="A")


def test_config_options_are_applied() -> None:
    config = Config(
        max_pool_connections=3, connect_timeout=2, read_timeout=5, region_name="eu-west-1"
    )
    client = compat.create_client("sagemaker-runtime", config=config, verify=False, **CREDENTIALS)
    pool = client.gateway.config.pool
    assert (pool.max_connections, pool.connect_timeout_ms, pool.read_timeout_ms) == (3, 2000, 5000)
    assert pool.tls_verify is False
    assert client.meta.region_name == "eu-west-1"
    # Options left at botocore's defaults keep the gateway's own.
    default = compat.create_client("sagemaker-runtime", region_name="us-east-1", config=Config())
    assert default.gateway.config.pool.max_connections == 64


async def test_wraps_an_existing_gateway(emulator: Emulator) -> None:
    gateway = Gateway("us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK"))
    async with gateway:
        async with compat.create_client("sagemaker-runtime", gateway=gateway) as client:
            response = await client.invoke_endpoint(EndpointName="echo", Body=b"shared")
            assert await response["Body"].read() == b"shared"
        # Not owned: still usable after the client closed.
        assert (await gateway.invoke("echo", b"again")).body == b"again"


# -- every member, on the wire ------------------------------------------------------


async def _drain(operation: str, response: dict[str, Any]) -> Any:
    body = response.get("Body")
    if operation == "InvokeEndpointWithResponseStream":
        return [event["PayloadPart"]["Bytes"] async for event in body]
    return await body.read() if body is not None else response.get("OutputLocation")


@pytest.mark.parametrize("operation", sorted(BOTO_METHODS))
async def test_every_member_reaches_the_wire_as_aiobotocore_sends_it(
    clients: Clients, emulator: Emulator, operation: str
) -> None:
    real, ours = clients
    opened = await ours.invoke_endpoint(EndpointName="echo", Body=b"x", SessionId="NEW_SESSION")
    session = opened["NewSessionId"].split(";")[0]
    params = call_members(operation, session, b'{"every": "member"}')
    views, answers = [], []
    for client in (real, ours):
        before = len(emulator.recorded)
        response = await getattr(client, BOTO_METHODS[operation])(**params)
        answers.append(await _drain(operation, response))
        assert len(emulator.recorded) == before + 1
        views.append(wire_view(emulator.recorded[-1], operation))
    assert views[0] == views[1]
    if operation != "InvokeEndpointAsync":  # async answers carry a fresh inference id
        assert answers[0] == answers[1]
