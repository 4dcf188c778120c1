"""Unmodified boto3 ``sagemaker-runtime`` clients for tests: fake keys, retries off."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
from botocore.config import Config

ClientFactory = Callable[..., Any]


def boto_clients(default_key: str, default_secret: str) -> Iterator[ClientFactory]:
    """Yield ``make(url, access_key=..., secret=..., service=...)``; each is closed afterwards."""
    clients: list[Any] = []

    def make(
        url: str,
        *,
        access_key: str = default_key,
        secret: str = default_secret,
        service: str = "sagemaker-runtime",
    ) -> Any:
        client = boto3.client(
            service,
            region_name="us-east-1",
            endpoint_url=url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret,
            config=Config(retries={"max_attempts": 0}, read_timeout=10, connect_timeout=5),
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
