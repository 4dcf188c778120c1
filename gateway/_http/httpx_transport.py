"""The second transport: httpx, for HTTP/2, proxies, or an ``AsyncClient`` the user owns.

It costs several times more CPU per call than the native transport (see
``python -m bench.compare``), so it is opt-in. httpx has its own pool, so
the request is signed before the pool wait here; with deadlines of
milliseconds and signatures valid for five minutes that is harmless.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpcore
import httpx

from gateway import errors
from gateway._http.interfaces import TransportStats
from gateway._http.message import Origin, RawResponse
from gateway._http.options import PoolConfig
from gateway._http.request import PreparedRequest

__all__ = ["HttpxTransport"]


class _HttpxStream:
    def __init__(self, response: httpx.Response, deadline: float) -> None:
        self._response = response
        self._deadline = deadline
        self.status = response.status_code
        self.headers = {name.lower(): value for name, value in response.headers.items()}

    async def chunks(self) -> AsyncIterator[bytes]:
        # httpx's read timeout is per read; the call's deadline covers the whole body.
        iterator = self._response.aiter_raw()
        try:
            while True:
                try:
                    async with asyncio.timeout(self._deadline - time.monotonic()):
                        chunk = await anext(iterator)
                except StopAsyncIteration:
                    return
                yield chunk
        except TimeoutError:
            raise errors.DeadlineExceeded("the call's deadline passed mid-stream") from None
        except httpx.TimeoutException:
            raise errors.ReadTimeout("no stream data within the read timeout") from None
        except httpx.TransportError as exc:
            raise _translate(exc, sent=True) from None

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxTransport:
    def __init__(
        self, options: PoolConfig | None = None, client: httpx.AsyncClient | None = None
    ) -> None:
        self.options = options or PoolConfig()
        self.stats = TransportStats()
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=self.options.max_connections,
                max_keepalive_connections=self.options.max_connections,
                keepalive_expiry=self.options.idle_timeout_s,
            ),
            verify=self.options.ssl_context or self.options.tls_verify,
            timeout=None,
        )
        if self._owns_client:
            # Send what the native transport sends: no "accept: */*" the caller did not
            # ask for (SageMaker hands Accept to the model), no compression offer.
            for name in ("accept", "accept-encoding"):
                del self._client.headers[name]

    async def start(self, origins: list[Origin]) -> None:
        """Open ``prewarm`` connections per origin before the first call.

        httpx has no call that opens a connection by itself, so each is opened
        by a concurrent ``GET /ping``; whatever the answer (the SageMaker
        runtime has no such route), the connection stays in httpx's pool.
        """
        count = min(self.options.prewarm, self.options.max_connections)
        if not count:
            return
        for origin in origins:
            url = f"{origin.scheme}://{origin.host_header}/ping"
            timeout = httpx.Timeout(self.options.connect_timeout)
            outcomes = await asyncio.gather(
                *(self._client.get(url, timeout=timeout) for _ in range(count)),
                return_exceptions=True,
            )
            self.stats.connections_opened += sum(
                1 for outcome in outcomes if isinstance(outcome, httpx.Response)
            )

    def _timeout(self, deadline: float) -> tuple[httpx.Timeout, float]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise errors.DeadlineExceeded("the call's deadline passed before sending", sent=False)
        options = self.options
        return (
            httpx.Timeout(
                connect=min(options.connect_timeout, remaining),
                read=min(options.read_timeout, remaining),
                write=min(options.read_timeout, remaining),
                pool=min(options.pool_timeout, remaining),
            ),
            remaining,
        )

    def _build(self, request: PreparedRequest, deadline: float) -> tuple[httpx.Request, float]:
        timeout, remaining = self._timeout(deadline)
        origin = request.origin
        headers = [(name, value) for name, value in request.final_headers() if name != "host"]
        headers.append(("user-agent", request.user_agent))
        url = f"{origin.scheme}://{origin.host_header}{request.path}"
        built = self._client.build_request(
            "POST",
            url,
            content=request.body,
            headers=headers,
            extensions={"timeout": timeout.as_dict()},
        )
        return built, remaining

    async def request(self, request: PreparedRequest, deadline: float) -> RawResponse:
        built, remaining = self._build(request, deadline)
        self.stats.requests += 1
        try:
            # httpx's timeouts are per phase and per read; the deadline bounds the whole call.
            async with asyncio.timeout(remaining):
                response = await self._client.send(built)
        except BaseException as exc:
            _drop_orphans(self._client)
            failure = _failure(exc, remaining, self.options)
            if failure is exc:
                raise
            raise failure from None
        headers = {name.lower(): value for name, value in response.headers.items()}
        return RawResponse(response.status_code, headers, response.content)

    async def stream(self, request: PreparedRequest, deadline: float) -> _HttpxStream:
        built, remaining = self._build(request, deadline)
        self.stats.requests += 1
        try:
            async with asyncio.timeout(remaining):
                response = await self._client.send(built, stream=True)
        except BaseException as exc:
            _drop_orphans(self._client)
            failure = _failure(exc, remaining, self.options)
            if failure is exc:
                raise
            raise failure from None
        return _HttpxStream(response, deadline)

    def open_connections(self) -> int:
        """Connections httpcore could still use: it drops dead idle ones only lazily."""
        pool = getattr(self._client._transport, "_pool", None)
        connections = getattr(pool, "connections", [])
        return sum(
            1
            for connection in connections
            if not connection.is_closed()
            and not (connection.is_idle() and connection.has_expired())
        )

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()


# Closes started by _drop_orphans: referenced until done.
_closing: set[asyncio.Task[None]] = set()


def _drop_orphans(client: httpx.AsyncClient) -> None:
    """Drop pooled connections that were opened for a request which then gave up.

    httpcore assigns a new, not yet connected connection to a queued request;
    if that request is cancelled or times out before using it, the connection
    is neither idle nor available nor closed, and stays in the pool for
    good, holding a slot. A burst of such calls fills the pool with them and
    every later call waits for a connection that never frees.
    """
    pool = getattr(client._transport, "_pool", None)
    if not isinstance(pool, httpcore.AsyncConnectionPool):
        return
    in_use = {id(request.connection) for request in pool._requests if request.connection}
    orphans = [
        connection
        for connection in pool._connections
        if isinstance(connection, httpcore.AsyncHTTPConnection)
        and connection._connection is None
        and not connection._connect_failed
        and id(connection) not in in_use
    ]
    for connection in orphans:
        pool._connections.remove(connection)
    if orphans:
        # The freed slots go to requests already queued.
        closing = pool._assign_requests_to_connections()
        if closing:
            task = asyncio.get_running_loop().create_task(pool._close_connections(closing))
            _closing.add(task)
            task.add_done_callback(_closing.discard)


def _failure(exc: BaseException, remaining: float, options: PoolConfig) -> BaseException:
    """The gateway error for what ended an exchange; anything else (cancellation) as is."""
    if isinstance(exc, TimeoutError):  # asyncio.timeout: the call's deadline
        return errors.DeadlineExceeded("the call's deadline passed")
    if isinstance(exc, httpx.TimeoutException):
        return _timeout_error(exc, remaining, options)
    if isinstance(exc, httpx.TransportError):
        return _translate(exc, sent=not isinstance(exc, httpx.ConnectError))
    return exc


def _timeout_error(
    exc: httpx.TimeoutException, remaining: float, options: PoolConfig
) -> errors.GatewayError:
    """The timeout that fired: the deadline only when it was shorter than that phase's limit."""
    if isinstance(exc, httpx.PoolTimeout):
        if remaining >= options.pool_timeout:
            return errors.PoolTimeout(str(exc) or "no pooled connection became free in time")
        return errors.DeadlineExceeded(
            "the call's deadline passed waiting for a connection", sent=False
        )
    elif isinstance(exc, httpx.ConnectTimeout):
        if remaining >= options.connect_timeout:
            return errors.ConnectTimeout(str(exc) or "connect timed out")
    elif remaining >= options.read_timeout:
        return errors.ReadTimeout(str(exc) or "read timed out")
    return errors.DeadlineExceeded("the call's deadline passed")


def _translate(exc: httpx.TransportError, *, sent: bool) -> errors.TransportError:
    if isinstance(exc, httpx.ConnectError):
        return errors.ConnectError(str(exc) or "connection refused")
    if isinstance(exc, httpx.WriteError):
        return errors.WriteError(str(exc) or "write failed", sent=True)
    if isinstance(exc, httpx.RemoteProtocolError):
        return errors.ReadError(str(exc) or "server broke the protocol", sent=sent)
    return errors.ReadError(str(exc) or "read failed", sent=sent)
