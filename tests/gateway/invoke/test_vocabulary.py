"""The SageMaker vocabulary (gateway._invoke.api) comes from botocore's model, and every member
of it is supported by Gateway, the sidecar and the emulator; bad input is refused with a
``gateway.errors`` type before anything is sent."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import botocore.session
import pytest

from gateway import Gateway, InvokeResult, InvokeStream, errors
from gateway._aws.models import MEMBER_SINCE
from gateway._aws.sigv4 import Credentials, SigV4Signer
from gateway._http.message import Origin
from gateway._http.request import RequestSigner
from gateway._invoke.api import (
    INVOKE,
    INVOKE_ASYNC,
    INVOKE_STREAM,
    AsyncInvocation,
    before_host_headers,
    operations,
    request_for,
    sagemaker_headers,
)
from gateway.emulator import Emulator
from gateway.emulator._service import CLOSE_SESSION
from gateway.sidecar import SidecarConfig
from gateway.sidecar import _app as sidecar_app
from tests._source import parse_file
from tests.gateway.conftest import ACCESS_KEY, SECRET_KEY

GATEWAY_METHODS = {
    "InvokeEndpoint": Gateway.invoke,
    "InvokeEndpointWithResponseStream": Gateway.invoke_stream,
    "InvokeEndpointAsync": Gateway.invoke_async,
}
# Where each operation's response members surface.
RESULT_TYPES: dict[str, type] = {
    "InvokeEndpoint": InvokeResult,
    "InvokeEndpointWithResponseStream": InvokeStream,
    "InvokeEndpointAsync": AsyncInvocation,
}
# A response member -> the attribute that carries it, where the names differ.
RESULT_ATTRIBUTES = {"InvokedProductionVariant": "invoked_variant", "Body": "body"}


def _snake(name: str) -> str:
    return botocore.xform_name(name)


def test_the_table_is_botocores_model() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker-runtime")
    assert set(operations()) == set(model.operation_names)
    for name, operation in operations().items():
        shape = model.operation_model(name).input_shape
        assert [m.name for m in operation.request] == list(shape.members)
        for member in operation.request:
            serialization = shape.members[member.name].serialization
            assert (
                member.wire_header == serialization.get("name", "") or member.location != "header"
            )
        # Signing order: SigV4 sorts headers by lower-case name. The signer inserts
        # x-amz-date and x-amz-security-token just past host: no member sorts between.
        assert [m.header for m in operation.headers] == sorted(m.header for m in operation.headers)
        for member in operation.headers:
            assert member.header < "host" or member.header > "x-amz-security-token", member


def _parameters(method: str) -> set[str]:
    """A Gateway method's parameter names, read from its source.

    Compiled (mypyc) methods do not keep a signature ``inspect`` can read.
    """
    source = Path(errors.__file__).parent / "_invoke" / "typed.py"
    for node in ast.walk(parse_file(source)):
        if isinstance(node, ast.ClassDef) and node.name == "TypedOperations":
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == method:
                    arguments = item.args
                    return {a.arg for a in [*arguments.args, *arguments.kwonlyargs]}
    raise AssertionError(f"Gateway.{method} not found in {source}")


@pytest.mark.parametrize("operation", sorted(GATEWAY_METHODS))
def test_gateway_takes_every_request_member(operation: str) -> None:
    """A botocore upgrade that adds a member fails here until Gateway takes it."""
    # A compiled method's __name__ is qualified ("Gateway.invoke").
    parameters = _parameters(GATEWAY_METHODS[operation].__name__.rsplit(".", 1)[-1])
    for member in operations()[operation].request:
        if member.name != "EndpointName":
            assert member.keyword in parameters, member.name


@pytest.mark.parametrize("operation", sorted(RESULT_TYPES))
def test_every_response_member_surfaces(operation: str) -> None:
    result_type = RESULT_TYPES[operation]
    for member in operations()[operation].response:
        attribute = RESULT_ATTRIBUTES.get(member.name, _snake(member.name))
        if operation == "InvokeEndpointWithResponseStream" and member.name == "Body":
            continue  # the stream itself is the body
        assert hasattr(result_type, attribute) or attribute in getattr(
            result_type, "__dataclass_fields__", {}
        ), (operation, member.name)


def _member_tuples() -> dict[str, list[str]]:
    """Each Gateway method's ``members = (...)`` tuple, as the names it lists."""
    source = Path(errors.__file__).parent / "_invoke" / "typed.py"
    found: dict[str, list[str]] = {}
    for node in ast.walk(parse_file(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for statement in node.body:
                if (
                    isinstance(statement, ast.Assign)
                    and isinstance(statement.targets[0], ast.Name)
                    and statement.targets[0].id == "members"
                    and isinstance(statement.value, ast.Tuple)
                ):
                    found[node.name] = [
                        element.id
                        for element in statement.value.elts
                        if isinstance(element, ast.Name)
                    ]
    return found


@pytest.mark.parametrize("operation", sorted(GATEWAY_METHODS))
def test_gateway_fills_the_member_tuple_in_signing_order(operation: str) -> None:
    """The one place a Gateway method names its members: in the model's header order.

    The tuple names the newest model's members; under an older botocore, those its model
    lacks (MEMBER_SINCE) are placed by MemberOrder, the rest keep the installed order.
    """
    method = GATEWAY_METHODS[operation].__name__.rsplit(".", 1)[-1]
    table = operations()[operation]
    newer = {
        _snake(member)
        for op, member in MEMBER_SINCE
        if op == operation and member not in table.by_name
    }
    expected = [member.keyword for member in table.headers]
    assert [name for name in _member_tuples()[method] if name not in newer] == expected


@pytest.mark.parametrize("operation", sorted(GATEWAY_METHODS))
def test_the_sidecar_reads_every_header_member(operation: str) -> None:
    """The sidecar's table is the model's: each header member lands in its own place."""
    table = operations()[operation]
    app = sidecar_app.SidecarApp(Gateway(region="us-east-1"), SidecarConfig(), None)
    headers = {}
    for member in table.headers:
        headers[member.header] = "7" if member.kind == "integer" else f"v-{member.name}"
    members, _, _, _ = app._members(headers, table)
    for index, member in enumerate(table.headers):
        assert members[index] == (7 if member.kind == "integer" else f"v-{member.name}")


def test_one_function_assembles_the_head_of_every_operation() -> None:
    values = INVOKE_STREAM.values(
        {"Accept": "text/csv", "ContentType": "application/json", "TargetVariant": "p"}
    )
    origin = Origin.from_url("https://runtime.example")
    credentials = Credentials(ACCESS_KEY, SECRET_KEY, token="session-token")
    signer = RequestSigner(SigV4Signer("us-east-1"), lambda: credentials)
    path = "/endpoints/e/invocations-response-stream"
    request = request_for(
        origin,
        path,
        SigV4Signer.request_prefix("POST", path),
        signer,
        before_host_headers(INVOKE_STREAM, values),
        sagemaker_headers(INVOKE_STREAM, values),
        b"{}",
    )
    assert request.headers == [
        ("content-type", "application/json"),
        ("host", "runtime.example"),
        ("x-amzn-sagemaker-accept", "text/csv"),
        ("x-amzn-sagemaker-target-variant", "p"),
    ]
    # Signed when sent: the SigV4 headers in their sorted places, the rest after.
    lines = request.encoded_head().decode().split("\r\n")
    assert lines[0] == f"POST {path} HTTP/1.1"
    names = [line.split(":", 1)[0] for line in lines[1:] if line]
    assert names == [
        "content-type",
        "host",
        "x-amz-date",
        "x-amz-security-token",
        "x-amzn-sagemaker-accept",
        "x-amzn-sagemaker-target-variant",
        "user-agent",
        "authorization",
        "content-length",
    ]
    assert "SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;" in lines[-4]
    assert sagemaker_headers(INVOKE_ASYNC, INVOKE_ASYNC.values({"RequestTTLSeconds": 600})) == [
        ("x-amzn-sagemaker-requestttlseconds", "600")
    ]
    assert before_host_headers(INVOKE_ASYNC, INVOKE_ASYNC.values({"Accept": "text/csv"})) == ()
    invoke_values = INVOKE.values({"ContentType": "text/csv", "Accept": "application/json"})
    assert before_host_headers(INVOKE, invoke_values) == (
        ("accept", "application/json"),
        ("content-type", "text/csv"),
    )


def test_a_content_type_is_checked_whether_or_not_it_was_seen_before() -> None:
    for _ in range(2):
        with pytest.raises(errors.InvalidHeaderValue):
            before_host_headers(INVOKE, INVOKE.values({"ContentType": "text/csv\r\nx-injected: 1"}))


# Members newer models add (PrefixAwareId 1.43.68, SessionId 1.35.15) where installed.
_NEWER_HEADER_CHECKS = [
    ({"PrefixAwareId": "p" * 65}, "at most 64"),
    ({"SessionId": "x\r\ninjected: 1"}, "CR, LF"),
]


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"CustomAttributes": "a" * 1025}, "at most 1024"),
        ({"InferenceId": ""}, "at least 1"),
        ({"InferenceId": "i" * 65}, "at most 64"),
        ({"TargetModel": "x\r\ninjected: 1"}, "CR, LF"),
        *[case for case in _NEWER_HEADER_CHECKS if set(case[0]) <= set(INVOKE.by_name)],
    ],
)
def test_header_members_are_checked_against_the_model(
    values: dict[str, object], problem: str
) -> None:
    with pytest.raises(errors.InvalidRequest, match=problem) as raised:
        sagemaker_headers(INVOKE, INVOKE.values(values))
    assert raised.value.retryable is False


def test_async_integers_are_checked_against_the_model() -> None:
    with pytest.raises(errors.InvalidRequest, match="RequestTTLSeconds"):
        sagemaker_headers(INVOKE_ASYNC, INVOKE_ASYNC.values({"RequestTTLSeconds": 5}))
    with pytest.raises(errors.InvalidRequest, match="InvocationTimeoutSeconds"):
        sagemaker_headers(INVOKE_ASYNC, INVOKE_ASYNC.values({"InvocationTimeoutSeconds": 3601}))


# -- end to end, against the emulator ----------------------------------------------


@pytest.fixture
async def gateway(emulator: Emulator) -> Gateway:
    return Gateway("us-east-1", endpoint_url=emulator.url, credentials=(ACCESS_KEY, SECRET_KEY))


@pytest.mark.parametrize("name", ["", "a" * 64, "under_score", "a/b", "-leading", "space d"])
async def test_bad_endpoint_names_are_refused_before_sending(
    emulator: Emulator, gateway: Gateway, name: str
) -> None:
    async with gateway:
        for call in (
            gateway.invoke(name, b"x"),
            gateway.invoke_async(name, input_location="s3://b/k"),
            anext(aiter(gateway.invoke_stream(name, b"x"))),
        ):
            with pytest.raises(errors.InvalidRequest) as raised:
                await call
            assert raised.value.retryable is False
    assert emulator.recorded == []


async def test_oversize_bodies_are_refused_before_sending(
    emulator: Emulator, gateway: Gateway
) -> None:
    async with gateway:
        with pytest.raises(errors.InvalidRequest, match="128000"):
            await gateway.invoke_async("echo", body=b"x" * 128_001)
        with pytest.raises(errors.InvalidRequest):
            await gateway.invoke("echo", b"x" * (6 * 1024 * 1024 + 1))
        named = {"filename": "out.json"} if "Filename" in INVOKE_ASYNC.by_name else {}
        answer = await gateway.invoke_async("echo", body=b"x" * 128_000, **named)
    assert answer.output_location is not None
    assert "/echo/" in answer.output_location
    assert answer.output_location.endswith("/echo/out.json") or not named
    assert len(emulator.recorded) == 1


async def test_a_session_closes_with_closed_session_id(
    emulator: Emulator, gateway: Gateway
) -> None:
    async with gateway:
        if "SessionId" not in INVOKE.by_name:  # botocore < 1.35.15: no sessions to close
            with pytest.raises(errors.MemberUnavailable, match=r"botocore >= 1\.35\.15"):
                await gateway.invoke("echo", b"x", session_id="NEW_SESSION")
            assert emulator.recorded == []
            return
        opened = await gateway.invoke("echo", b"x", session_id="NEW_SESSION")
        assert opened.new_session_id is not None
        session = opened.new_session_id.split(";")[0]
        still_open = await gateway.invoke("echo", b"x", session_id=session)
        assert still_open.closed_session_id is None
        closed = await gateway.invoke(
            "echo", b"x", session_id=session, custom_attributes=CLOSE_SESSION
        )
        assert closed.closed_session_id == session
        with pytest.raises(errors.ValidationError, match="not found or has expired"):
            await gateway.invoke("echo", b"x", session_id=session)


_OLD_MODEL_SCRIPT = """
import asyncio
from gateway import Gateway, errors
from gateway._invoke.api import INVOKE_ASYNC
from gateway.emulator import Emulator, EmulatorConfig

assert "Body" not in INVOKE_ASYNC.by_name, "the older model was not loaded"

async def main() -> None:
    config = {"auth": {"credentials": {"AKIDOLD": "old-secret"}}, "endpoints": {"echo": {}}}
    async with Emulator(EmulatorConfig.from_dict(config)) as emulator:
        gateway = Gateway(
            "us-east-1", endpoint_url=emulator.url, credentials=("AKIDOLD", "old-secret")
        )
        async with gateway:
            try:
                await gateway.invoke_async("echo", body=b"x" * 128_001)
            except errors.InvalidRequest as refused:
                print("refused:", refused)
            named = {"filename": "o.json"} if "Filename" in INVOKE_ASYNC.by_name else {}
            answer = await gateway.invoke_async("echo", body=b"inline", **named)
            print("queued:", answer.output_location)
        print("sent:", emulator.recorded[-1].body)

asyncio.run(main())
"""


def test_a_botocore_model_without_async_body_still_imports_and_sends_it(tmp_path: Path) -> None:
    """botocore before 1.43.29 (awscli v1 pins one) has no inline Body on InvokeEndpointAsync."""
    loader = botocore.session.get_session().get_component("data_loader")
    model = loader.load_service_model("sagemaker-runtime", "service-2")
    model["shapes"]["InvokeEndpointAsyncInput"]["members"].pop("Body", None)  # < 1.43.29: none
    folder = tmp_path / "sagemaker-runtime" / model["metadata"]["apiVersion"]
    folder.mkdir(parents=True)
    (folder / "service-2.json").write_text(json.dumps(model))
    env = {**os.environ, "AWS_DATA_PATH": str(tmp_path)}
    ran = subprocess.run(
        [sys.executable, "-c", _OLD_MODEL_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert "refused: Body: 128001 bytes exceeds InvokeEndpointAsync's limit of 128000" in ran.stdout
    assert "queued: " in ran.stdout
    # Filename (botocore >= 1.42.54) names the output, where the model has it.
    assert ran.stdout.count("/echo/o.json") == (1 if "Filename" in INVOKE_ASYNC.by_name else 0)
    assert "sent: b'inline'" in ran.stdout
