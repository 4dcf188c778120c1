"""Moving an aiobotocore service to the gateway: a one-line change.

    python examples/migrate_from_aiobotocore.py

``score_requests`` below is ordinary aiobotocore code. It runs twice
against the emulator: once with aiobotocore's ``get_session``, once with
``gateway.compat.get_session``, the only line that changes::

    -from aiobotocore.session import get_session
    +from gateway.compat import get_session

Same arguments, same response dicts, same botocore exceptions
(``client.exceptions.ValidationError``, ``ModelError``, ...).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiobotocore.session import get_session as aiobotocore_get_session

from gateway.compat import get_session as gateway_get_session
from gateway.emulator import Emulator

HERE = Path(__file__).resolve().parent
ROWS = [
    f"{day},{hour},0.02,0.03,0.02,0.02,2,0.03,0.02,0".encode()
    for day in range(7)
    for hour in range(24)
]  # the bid filter's ten features


async def score_requests(get_session: Callable[[], Any], url: str) -> dict[str, Any]:
    """Existing service code: unchanged whichever ``get_session`` it is given."""
    session = get_session()
    async with session.create_client(
        "sagemaker-runtime",
        region_name="us-east-1",
        endpoint_url=url,  # the emulator here; in AWS, leave it out
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
    ) as client:
        scores = []
        started = time.perf_counter()
        for row in ROWS:
            response = await client.invoke_endpoint(
                EndpointName="bid-filter", Body=row, ContentType="text/csv", Accept="text/csv"
            )
            scores.append(float(await response["Body"].read()))
        elapsed = time.perf_counter() - started
        variant = response["InvokedProductionVariant"]
        try:
            await client.invoke_endpoint(EndpointName="no-such-endpoint", Body=b"{}")
            error = "none"
        except client.exceptions.ValidationError as exc:
            error = f"{type(exc).__name__} ({exc.response['Error']['Code']})"
    return {"scores": scores, "variant": variant, "error": error, "seconds": elapsed}


async def main() -> None:
    async with Emulator(HERE / "emulator.toml") as emulator:
        before = await score_requests(aiobotocore_get_session, emulator.url)
        after = await score_requests(gateway_get_session, emulator.url)
    for name, result in (("aiobotocore", before), ("gateway.compat", after)):
        per_call = result["seconds"] / len(ROWS) * 1e6
        print(
            f"{name:15} {len(result['scores'])} scores, variant {result['variant']}, "
            f"error {result['error']}, {per_call:,.0f} us per call (emulator in this process)"
        )
    same = before["scores"] == after["scores"] and before["variant"] == after["variant"]
    print(f"identical results: {same}")


if __name__ == "__main__":
    asyncio.run(main())
