"""A request refused for keys that were replaced while it was on its way is signed again.

Credentials rotate (an STS session ends, a key is revoked) while a request waits on a
slow far side: the answer refuses keys the gateway no longer uses. The call retries,
signed with the current keys, within its deadline and the route's retry rules. Keys
that did not change are not worth a second try: that answer stands. On the scripted
transport: each attempt's signature is recorded, and the far side answers on cue.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from gateway import Gateway, errors
from gateway._aws.sigv4 import Credentials
from tests.gateway._scripted import ScriptedTransport

NO_BACKOFF = {"max_attempts": 2, "backoff_base_ms": 0, "backoff_max_ms": 0}
REFUSED = b'{"__type": "UnrecognizedClientException", "message": "The security token is invalid."}'


@contextlib.asynccontextmanager
async def scripted(transport: ScriptedTransport) -> AsyncIterator[Gateway]:
    gateway = Gateway(
        "us-east-1",
        endpoint_url="http://scripted.invalid",
        credentials=("AKIDOLD", "old-secret"),
        transport=transport,
        routes={"bid": {"targets": [{"endpoint": "ep"}], "retry": NO_BACKOFF}},
    )
    async with gateway:
        yield gateway


def _signed_keys(transport: ScriptedTransport) -> list[str]:
    """The access key of each request sent, read from its Authorization header."""
    return [
        sent.headers["authorization"].partition("Credential=")[2].partition("/")[0]
        for sent in transport.sent
    ]


def _rotate(gateway: Gateway) -> None:
    source = gateway._context.credentials
    assert source is not None
    source._credentials = Credentials("AKIDNEW", "new-secret")


async def test_keys_replaced_in_flight_are_refused_then_the_call_is_signed_again() -> None:
    transport = ScriptedTransport()
    held = transport.on("ep").hold()
    async with scripted(transport) as gateway:
        call = asyncio.ensure_future(gateway.invoke("bid", b"row", timeout=5))
        await held.started.wait()
        _rotate(gateway)  # the keys change while the request is at the far side
        held.release(REFUSED, 403)
        result = await call
    assert result.body == b"row"  # the second attempt's answer (an empty script echoes)
    assert result.attempts == 2
    assert _signed_keys(transport) == ["AKIDOLD", "AKIDNEW"]


async def test_keys_that_did_not_change_are_refused_once() -> None:
    transport = ScriptedTransport()
    transport.on("ep").answer(REFUSED, 403)
    async with scripted(transport) as gateway:
        with pytest.raises(errors.SignatureError) as refused:
            await gateway.invoke("bid", b"row", timeout=5)
    assert refused.value.code == "UnrecognizedClientException"
    assert _signed_keys(transport) == ["AKIDOLD"]


async def test_access_denied_is_not_retried_even_after_a_rotation() -> None:
    """What the keys may do is not about which keys signed: a new key would be denied too."""
    transport = ScriptedTransport()
    held = transport.on("ep").hold()
    async with scripted(transport) as gateway:
        call = asyncio.ensure_future(gateway.invoke("bid", b"row", timeout=5))
        await held.started.wait()
        _rotate(gateway)
        held.release(b'{"__type": "AccessDeniedException", "message": "not allowed"}', 403)
        with pytest.raises(errors.SignatureError):
            await call
    assert _signed_keys(transport) == ["AKIDOLD"]
