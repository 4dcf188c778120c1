"""The caller's user agent goes upstream, the gateway's appended, as a proxy should."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway import Gateway
from gateway._host.version import __version__
from gateway._server.http import Request, Response, Server, start_server
from gateway.errors import GatewayError
from gateway.sidecar import Sidecar

BOTO_AGENT = "Boto3/1.35.0 md/Botocore#1.35.0 ua/2.0 os/linux lang/python#3.11 app/bid-server-7"


class Upstream:
    """A SageMaker Runtime stand-in that keeps each request's User-Agent."""

    def __init__(self) -> None:
        self.agents: list[str | None] = []

    async def handle(self, request: Request) -> Response:
        if not request.path.startswith("/endpoints/"):
            return Response(404)  # a transport's warm-up, not a call
        self.agents.append(request.headers.get("user-agent"))
        if request.path.endswith("/async-invocations"):
            headers = [("x-amzn-RequestId", "r-async"), ("Content-Type", "application/json")]
            headers.append(("X-Amzn-SageMaker-OutputLocation", "s3://bucket/out"))
            return Response(202, headers, b'{"InferenceId": "i-1"}')
        return Response(200, [("x-amzn-RequestId", "r-1")], request.body)


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, Server]]:
    recorder = Upstream()
    server = await start_server(recorder.handle, "127.0.0.1", 0)
    try:
        yield recorder, server
    finally:
        await server.close(grace=1.0)


@pytest.mark.parametrize("transport", ["native", "httpx"])
async def test_the_callers_agent_comes_first_and_ours_is_appended(
    upstream: tuple[Upstream, Server], transport: str
) -> None:
    recorder, server = upstream
    gateway = Gateway(
        region="us-east-1",
        endpoint_url=f"http://127.0.0.1:{server.port}",
        credentials=("AK", "SK"),
        transport=transport,
    )
    async with gateway, Sidecar(gateway, "127.0.0.1", 0) as sidecar:
        async with httpx.AsyncClient(base_url=sidecar.url) as http:
            headers = {"user-agent": BOTO_AGENT}
            invoked = await http.post("/endpoints/m/invocations", content=b"x", headers=headers)
            assert invoked.status_code == 200
            queued = await http.post(
                "/endpoints/m/async-invocations",
                headers={**headers, "X-Amzn-SageMaker-InputLocation": "s3://bucket/in"},
            )
            assert queued.status_code == 202, queued.text
        # A call of the library's own, without a caller: only ours.
        await gateway.invoke("m", b"y", timeout=5)
        # A stream carries the caller's too (the stand-in's answer is no event
        # stream: only the request matters here).
        with contextlib.suppress(GatewayError):
            async for _ in gateway.invoke_stream("m", b"z", user_agent=BOTO_AGENT):
                pass
    ours = f"sagemaker-gateway/{__version__}"
    assert recorder.agents[0] is not None and recorder.agents[0].startswith(f"{BOTO_AGENT} {ours}")
    assert recorder.agents[1] == recorder.agents[0]
    assert recorder.agents[2] is not None and recorder.agents[2].startswith(ours)
    assert recorder.agents[3] == recorder.agents[0]


async def test_a_user_agent_with_a_control_character_is_an_input_error(
    upstream: tuple[Upstream, Server],
) -> None:
    _, server = upstream
    gateway = Gateway(
        region="us-east-1", endpoint_url=f"http://127.0.0.1:{server.port}", credentials=("AK", "SK")
    )
    async with gateway:
        from gateway.errors import InvalidHeaderValue

        with pytest.raises(InvalidHeaderValue):
            await gateway.invoke("m", b"x", user_agent="bad\x7fagent", timeout=5)
