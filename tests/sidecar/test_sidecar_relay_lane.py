"""The relay lane: InvokeEndpoint answered from the server's callbacks, as the handler answers it.

Each test runs the same traffic through a sidecar twice where it compares:
once with its relay lane (the default) and once with ``relay_lane = false``,
so that every answer is the handler's. The upstream is a real HTTP
server on a loopback port whose answers each test scripts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx

from gateway import Gateway
from gateway._invoke.api import INVOKE
from gateway._observe.events import Event
from gateway._observe.hooks import Hook
from gateway._server.http import AbortConnection, Request, Response, Server, start_server
from gateway._server.sigv4_verify import SigV4Rejected, SigV4Verifier
from gateway.sidecar import Sidecar, SidecarConfig
from gateway.sidecar._app import RelayLane
from gateway.sidecar._errors import error_response

_INVOKE = "/endpoints/{}/invocations"
# What differs between two answers to one request: the upstream's own request id and the clock.
_PER_ANSWER = {"x-amzn-requestid", "date"}

Script = Callable[[Request, int], Response | Awaitable[Response]]


def _answer(request: Request, _: int) -> Response:
    """SageMaker's answer: the body back, a request id and a variant."""
    headers = [
        ("Content-Type", request.headers.get("content-type", "application/octet-stream")),
        ("x-amzn-RequestId", f"req-{len(request.body)}"),
        ("x-amzn-Invoked-Production-Variant", "AllTraffic"),
    ]
    custom = request.headers.get("x-amzn-sagemaker-custom-attributes")
    if custom is not None:
        headers.append(("X-Amzn-SageMaker-Custom-Attributes", custom))
    return Response(200, headers, request.body)


class Upstream:
    """A scripted SageMaker endpoint: ``script(request, n)`` answers its n-th request."""

    def __init__(self, script: Script = _answer) -> None:
        self.script = script
        self.seen: list[bytes] = []
        self.server: Server | None = None

    async def handle(self, request: Request) -> Response:
        self.seen.append(request.body)
        answer = self.script(request, len(self.seen))
        return answer if isinstance(answer, Response) else await answer

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"


@asynccontextmanager
async def running(
    script: Script = _answer,
    lane: bool = True,
    hooks: Sequence[Hook] = (),
    defaults: Mapping[str, Any] | None = None,
    cache: Mapping[str, Any] | None = None,
) -> AsyncIterator[tuple[Upstream, Sidecar, httpx.AsyncClient]]:
    upstream = Upstream(script)
    upstream.server = await start_server(upstream.handle, "127.0.0.1", 0)
    try:
        gateway = Gateway(
            region="us-east-1",
            endpoint_url=upstream.url,
            credentials=("AK", "SK"),
            hooks=hooks,
            defaults=defaults,
            cache=cache,
        )
        config = SidecarConfig.from_mapping({"relay_lane": lane})  # true: the default
        async with gateway, Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
            server = sidecar._server
            assert server is not None
            # A prediction cache keeps every call on the handler's path: no lane at all.
            if lane and cache is None:
                assert isinstance(server.relay, RelayLane)
            else:
                assert server.relay is None
            async with httpx.AsyncClient(base_url=sidecar.url, timeout=10) as client:
                yield upstream, sidecar, client
    finally:
        await upstream.server.close(grace=1.0)


def _lane(sidecar: Sidecar) -> RelayLane | None:
    server = sidecar._server
    assert server is not None
    relay = server.relay
    return relay if isinstance(relay, RelayLane) else None


async def _eventually(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within 5 s")


def _comparable(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    headers = sorted((k, v) for k, v in response.headers.items() if k not in _PER_ANSWER)
    return response.status_code, response.content, headers


async def _calls(client: httpx.AsyncClient, bodies: list[bytes]) -> list[httpx.Response]:
    headers = {"Content-Type": "application/json", "X-Amzn-SageMaker-Custom-Attributes": "c=1"}
    return [
        await client.post(_INVOKE.format("ep"), content=body, headers=headers) for body in bodies
    ]


async def test_the_lane_answers_what_the_handler_answers() -> None:
    bodies = [b'{"n": %d}' % n for n in range(12)]
    async with running() as (_, sidecar, client):
        relayed = await _calls(client, bodies)
        lane = _lane(sidecar)
        assert lane is not None
        # The first call plans its target and opens the socket (the handler's); the rest relay.
        assert lane.taken == len(bodies) - 1
        assert sidecar.app.in_flight == 0
    async with running(lane=False) as (_, sidecar, client):
        handled = await _calls(client, bodies)
        assert _lane(sidecar) is None
    assert [_comparable(r) for r in relayed] == [_comparable(r) for r in handled]
    assert [r.content for r in relayed] == bodies
    assert all(r.headers["x-amzn-requestid"].startswith("req-") for r in relayed)


async def test_each_call_reaches_the_endpoint_its_own_path_names() -> None:
    """The lane keeps the last path's endpoint name: a call to another endpoint, or to
    a path the lane leaves to the handler, in between, is never sent to the last one."""

    def by_path(request: Request, _: int) -> Response:
        headers = [("x-amzn-RequestId", "req-path"), ("Content-Type", "text/plain")]
        return Response(200, headers, request.path.encode())

    paths = ["ep-a", "ep-a", "ep-b", "ep-a", "ep%2Db", "ep-b", "ep-b", "ep-a"]
    async with running(by_path) as (_, sidecar, client):
        answers = [
            await client.post(_INVOKE.format(path), content=b"x", headers={"Content-Type": "a/b"})
            for path in paths
        ]
        lane = _lane(sidecar)
        assert lane is not None
        # The first call to each endpoint plans it (the handler's), as does the encoded one.
        assert lane.taken == len(paths) - 3
    assert [a.status_code for a in answers] == [200] * len(paths)
    assert [a.content.decode() for a in answers] == [
        _INVOKE.format(path.replace("%2D", "-")) for path in paths
    ]


async def test_a_header_is_read_as_each_operations_model_defines_it() -> None:
    """What a header is to a call (a member, or refused) is kept per operation: a target
    model goes through on InvokeEndpoint, before and after a streaming call refuses it."""
    model = {"X-Amzn-SageMaker-Target-Model": "m.tar.gz", "Content-Type": "a/b"}
    async with running() as (upstream, _, client):
        first = await client.post(_INVOKE.format("ep"), content=b"one", headers=model)
        streamed = await client.post(
            "/endpoints/ep/invocations-response-stream", content=b"two", headers=model
        )
        again = await client.post(_INVOKE.format("ep"), content=b"three", headers=model)
    assert (first.status_code, again.status_code) == (200, 200)
    assert streamed.status_code == 400
    assert "x-amzn-sagemaker-target-model" in streamed.json()["message"]
    assert upstream.seen == [b"one", b"three"]  # the refused call never went upstream


async def test_the_lane_counts_what_the_handler_counts() -> None:
    def counters(exposition: str) -> list[str]:
        # Counters and counts, not latencies: the sums and buckets hold durations.
        wanted = ("sagemaker_gateway_calls_total", "sagemaker_gateway_attempts_total", "_count")
        return sorted(
            line
            for line in exposition.splitlines()
            if line.startswith("sagemaker_gateway") and any(w in line for w in wanted)
        )

    scraped = []
    for lane in (True, False):
        async with running(lane=lane) as (_, _sidecar, client):
            await _calls(client, [b"x"] * 5)
            scraped.append(counters((await client.get("/metrics")).text))
    relayed, handled = scraped
    assert any("calls_total" in line and line.endswith(" 5.0") for line in relayed), relayed
    assert relayed == handled


class _Recorder:
    """A hook of the caller's own that reads no request id (the lane's calls stay on it)."""

    reads_request_id = False

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)


async def test_a_hook_of_the_callers_own_sees_the_events_the_handler_sends() -> None:
    def seen(events: list[Event]) -> list[tuple[object, ...]]:
        # The kinds and what each says, less its durations (the clock's).
        return [
            (type(event).__name__, *(v for v in event if not isinstance(v, float)))
            for event in events
        ]

    recorded = []
    for lane in (True, False):
        recorder = _Recorder()
        async with running(lane=lane, hooks=[recorder]) as (_, sidecar, client):
            await _calls(client, [b"x"] * 4)
            relay = _lane(sidecar)
            assert (relay.taken if relay is not None else 0) == (3 if lane else 0)
        recorded.append(seen(recorder.events))
    relayed, handled = recorded
    assert [kind for kind, *_ in relayed].count("CallFinished") == 4
    assert relayed == handled


async def test_a_call_the_lane_refuses_is_authenticated_once() -> None:
    """A hedged route is the handler's: the lane refuses it before authenticating it
    (the handler authenticates it, once), and a name never seen makes no route."""
    hedged = {"hedge": {"enabled": True, "min_delay_ms": 50}}
    async with running(defaults=hedged) as (_, sidecar, client):
        checked: list[str] = []
        sidecar.app._authenticate = lambda request: checked.append(request.path)
        await _calls(client, [b"a", b"b", b"c"])
        lane = _lane(sidecar)
        assert lane is not None and lane.taken == 0
        assert checked == [_INVOKE.format("ep")] * 3
        router = sidecar.gateway._context.lanes["sagemaker-runtime"].router
        assert router.find("ep") is not None and router.find("never-called") is None


async def test_an_error_answer_is_the_handlers_error_answer() -> None:
    def script(request: Request, n: int) -> Response:
        if request.body == b"bad":
            return error_response("ValidationError", "the model refuses this body", 400)
        return _answer(request, n)

    answers = []
    for lane in (True, False):
        async with running(script, lane) as (_, sidecar, client):
            await _calls(client, [b"warm"])
            (refused,) = await _calls(client, [b"bad"])
            taken = _lane(sidecar)
            assert (taken.taken == 1) if taken is not None else not lane
            answers.append(_comparable(refused))
            assert sidecar.app.in_flight == 0
    assert answers[0] == answers[1]
    assert answers[0][0] == 400


async def test_a_call_past_its_deadline_is_answered_as_the_handler_answers_it() -> None:
    async def late(request: Request) -> Response:
        await asyncio.sleep(0.5)
        return _answer(request, 0)

    def script(request: Request, n: int) -> Response | Awaitable[Response]:
        return late(request) if request.body == b"late" else _answer(request, n)

    answers = []
    for lane in (True, False):
        async with running(script, lane) as (_, sidecar, client):
            await _calls(client, [b"warm"])
            timed_out = await client.post(
                _INVOKE.format("ep"), content=b"late", headers={"x-gateway-timeout-ms": "100"}
            )
            taken = _lane(sidecar)
            assert (taken.taken == 1) if taken is not None else not lane
            assert sidecar.app.in_flight == 0
            answers.append(_comparable(timed_out))
            # The socket that timed out is not reused for the next call's answer.
            (after,) = await _calls(client, [b"after"])
            assert after.status_code == 200 and after.content == b"after"
    assert answers[0] == answers[1]
    assert answers[0][0] >= 400
    assert b"deadline" in answers[0][1].lower()


async def test_a_failed_first_attempt_is_retried_as_the_handler_retries_it() -> None:
    def script(request: Request, n: int) -> Response:
        if request.body == b"flaky" and n == 2:  # the first try of the second request
            return error_response("ServiceUnavailable", "try again", 503)
        return _answer(request, n)

    async with running(script) as (upstream, sidecar, client):
        await _calls(client, [b"warm"])
        (answer,) = await _calls(client, [b"flaky"])
        lane = _lane(sidecar)
        assert lane is not None and lane.taken == 1
    assert answer.status_code == 200 and answer.content == b"flaky"
    assert upstream.seen == [b"warm", b"flaky", b"flaky"]


async def test_a_socket_that_dies_unanswered_is_resent_once_on_a_fresh_one() -> None:
    def script(request: Request, n: int) -> Response:
        if n == 2:  # no answer: the connection is reset, as an idle socket's close would be
            raise AbortConnection
        return _answer(request, n)

    async with running(script) as (upstream, sidecar, client):
        await _calls(client, [b"warm"])
        (answer,) = await _calls(client, [b"again"])
        lane = _lane(sidecar)
        assert lane is not None and lane.taken == 1
        stats = sidecar.gateway._transport.stats
    assert answer.status_code == 200 and answer.content == b"again"
    assert upstream.seen == [b"warm", b"again", b"again"]
    assert stats.stale_retries == 1


async def test_each_relayed_request_is_signed_for_its_own_body_members_and_agent() -> None:
    """The lane keeps a target's presigned head per members and reuses it within the second:
    every request still carries a signature the upstream verifies, over its own body, its
    own members and its caller's agent, a resend of a socket that died included."""
    verifier = SigV4Verifier({"AK": "SK"}, region="us-east-1")
    refused: list[str] = []
    agents: list[str] = []

    def script(request: Request, n: int) -> Response:
        agents.append(request.headers.get("user-agent", ""))
        try:
            verifier.verify(request)
        except SigV4Rejected as error:
            refused.append(f"{n}: {error}")
            return Response(403, [("x-amzn-RequestId", "r")], b"refused")
        if n == 6:
            raise AbortConnection  # resent once, on a fresh socket, as it was signed
        return _answer(request, n)

    async def post(body: bytes, **headers: str) -> httpx.Response:
        return await client.post(_INVOKE.format("ep"), content=body, headers=headers)

    async with running(script) as (upstream, sidecar, client):
        answers = await _calls(client, [b"a", b"bb", b"ccc"])  # the same members: one head
        answers.append(await post(b"d", **{"Content-Type": "text/csv"}))
        answers.append(await post(b"e", **{"Content-Type": "text/csv", "User-Agent": "other/1"}))
        answers += await _calls(client, [b"f"])
        lane = _lane(sidecar)
        assert lane is not None and lane.taken == 5  # all but the first, which planned
    assert refused == []
    assert [(a.status_code, a.content) for a in answers] == [
        (200, body) for body in (b"a", b"bb", b"ccc", b"d", b"e", b"f")
    ]
    assert answers[3].headers["content-type"] == "text/csv"
    # The caller's agent first (the gateway's appended): its own, not the one kept before.
    assert agents[4].startswith("other/1 ") and not agents[3].startswith("other/1")
    assert upstream.seen == [b"a", b"bb", b"ccc", b"d", b"e", b"f", b"f"]


async def test_pipelined_requests_behind_a_relayed_one_are_answered_in_order() -> None:
    async with running() as (_, sidecar, client):
        await _calls(client, [b"warm"])
        reader, writer = await asyncio.open_connection("127.0.0.1", sidecar.port)
        requests = b"".join(
            b"POST /endpoints/ep/invocations HTTP/1.1\r\nhost: x\r\n"
            b"content-type: text/plain\r\ncontent-length: 2\r\n\r\n" + body
            for body in (b"p1", b"p2", b"p3")
        )
        writer.write(requests)
        bodies = []
        for _ in range(3):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            bodies.append(await reader.readexactly(length))
        writer.close()
        lane = _lane(sidecar)
        assert lane is not None and lane.taken >= 1
    assert bodies == [b"p1", b"p2", b"p3"]


async def test_a_client_that_leaves_mid_call_leaves_nothing_behind() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: Request) -> Response:
        if request.body == b"slow":
            entered.set()
            await release.wait()
        return _answer(request, 0)

    upstream = await start_server(slow, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{upstream.port}"
        gateway = Gateway(region="us-east-1", endpoint_url=url, credentials=("AK", "SK"))
        async with gateway, Sidecar(gateway, "127.0.0.1", 0) as sidecar:
            reader, writer = await asyncio.open_connection("127.0.0.1", sidecar.port)
            for body in (b"warm", b"slow"):
                writer.write(
                    b"POST /endpoints/ep/invocations HTTP/1.1\r\nhost: x\r\n"
                    b"content-length: %d\r\n\r\n%b" % (len(body), body)
                )
                if body == b"warm":
                    await asyncio.wait_for(reader.readuntil(b"warm"), 5)
            await asyncio.wait_for(entered.wait(), 5)
            assert sidecar.app.in_flight == 1
            writer.close()  # gone while its call is upstream
            await asyncio.sleep(0.05)
            release.set()
            await _eventually(lambda: sidecar.app.in_flight == 0)
            lane = _lane(sidecar)
            assert lane is not None and lane.taken == 1
            async with httpx.AsyncClient(base_url=sidecar.url, timeout=5) as client:
                (after,) = await _calls(client, [b"after"])
            assert after.status_code == 200 and after.content == b"after"
    finally:
        await upstream.close(grace=1.0)


async def test_with_a_prediction_cache_the_handler_answers_every_request() -> None:
    """The cache is consulted on the handler's path: no lane to offer requests to."""
    async with running(cache={"enabled": True}) as (upstream, _, client):
        first, second = await _calls(client, [b"same", b"same"])
    assert first.content == second.content == b"same"
    assert second.headers["x-gateway-cache"] == "near"
    assert upstream.seen == [b"same"]


async def test_a_repeated_call_gets_one_members_tuple_and_a_changed_one_its_own() -> None:
    """``_members`` hands the last tuple again only where every value is the same object."""
    model = "m.tar.gz"
    async with running() as (_, sidecar, _client):
        members = sidecar.app._members
        first, *_ = members({"content-type": "a/b", "x-amzn-sagemaker-target-model": model}, INVOKE)
        again, *_ = members({"content-type": "a/b", "x-amzn-sagemaker-target-model": model}, INVOKE)
        assert again is first  # ("a/b" is one constant: the same object both times)
        other = "".join(["m.", "tar.gz"])  # equal, another object: a new, equal tuple
        equal, *_ = members({"content-type": "a/b", "x-amzn-sagemaker-target-model": other}, INVOKE)
        assert equal == first and equal is not first
        changed, *_ = members(
            {"content-type": "a/c", "x-amzn-sagemaker-target-model": model}, INVOKE
        )
        assert changed != first
        assert changed[INVOKE.index("ContentType")] == "a/c"
        fewer, *_ = members({"content-type": "a/c"}, INVOKE)
        assert fewer[INVOKE.index("TargetModel")] is None


async def test_alternating_target_models_each_reach_their_own_model_signed() -> None:
    """Repeated values are shared objects, so a repeated call's members are one tuple and
    its shape and presigned head are found by identity: each call still goes out with
    its own target model, under a signature the upstream verifies."""
    verifier = SigV4Verifier({"AK": "SK"}, region="us-east-1")
    refused: list[str] = []

    def by_model(request: Request, n: int) -> Response:
        try:
            verifier.verify(request)
        except SigV4Rejected as error:
            refused.append(f"{n}: {error}")
            return Response(403, [("x-amzn-RequestId", "r")], b"refused")
        model = request.headers.get("x-amzn-sagemaker-target-model", "-")
        return Response(200, [("x-amzn-RequestId", "r"), ("Content-Type", "a/b")], model.encode())

    models = [
        "a.tar.gz",
        "a.tar.gz",
        "b.tar.gz",
        "a.tar.gz",
        "b.tar.gz",
        "b.tar.gz",
        "-",
        "a.tar.gz",
    ]
    async with running(by_model) as (_, sidecar, client):
        answers = []
        for model in models:
            headers = {"Content-Type": "a/b"}
            if model != "-":
                headers["X-Amzn-SageMaker-Target-Model"] = model
            answers.append(await client.post(_INVOKE.format("ep"), content=b"x", headers=headers))
        lane = _lane(sidecar)
        assert lane is not None and lane.taken == len(models) - 1
    assert refused == []
    assert [(a.status_code, a.content.decode()) for a in answers] == [(200, m) for m in models]
