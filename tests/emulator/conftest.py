"""Fixtures: an emulator on a free port, and unmodified boto3 clients for it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from gateway.emulator import Emulator, EmulatorConfig
from tests._boto import ClientFactory, boto_clients

ACCESS_KEY = "AKIDEMULATORTEST"
SECRET_KEY = "emulator-test-secret"

BASE_CONFIG: dict[str, Any] = {
    "seed": 7,
    "auth": {"credentials": {ACCESS_KEY: SECRET_KEY}},
    "endpoints": {
        "echo": {},
        "constant": {"model": {"type": "constant", "body": "0.25", "content_type": "text/csv"}},
        "mme": {
            "mme": {
                "models": ["a.tar.gz", "b.tar.gz", "c.tar.gz"],
                "cold_load_ms": 50,
                "max_loaded": 2,
            }
        },
        "ab": {"variants": [{"name": "blue", "weight": 3}, {"name": "green", "weight": 1}]},
    },
}


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    async with Emulator(EmulatorConfig.from_dict(BASE_CONFIG)) as emu:
        yield emu


@pytest.fixture
def boto_client() -> Iterator[ClientFactory]:
    """``boto_client(url, secret=..., access_key=...)``; every client is closed afterwards."""
    yield from boto_clients(ACCESS_KEY, SECRET_KEY)


def signed_headers(url: str, path: str, body: bytes, **extra: str) -> dict[str, str]:
    """Headers of a POST to ``url + path`` signed with the test credentials."""
    from gateway._aws.sigv4 import Credentials, SigV4Signer, payload_sha256

    amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    headers = {"host": url.removeprefix("http://"), "x-amz-date": amz_date}
    headers.update({name.lower(): value for name, value in extra.items()})
    authorization = SigV4Signer("us-east-1").authorization(
        "POST",
        path,
        sorted(headers.items()),
        payload_sha256(body),
        Credentials(ACCESS_KEY, SECRET_KEY),
        amz_date,
    )
    return {**headers, "authorization": authorization}
