"""``python -m gateway demo``: the gateway on the built-in emulator, no AWS needed."""

from __future__ import annotations

import argparse
import asyncio

from gateway import Gateway
from gateway.emulator import Emulator, EmulatorConfig


async def _run() -> None:
    async with Emulator(EmulatorConfig.default(seed=1)) as emulator:
        async with Gateway("us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK")) as gw:
            echo = await gw.invoke("echo", b'{"hello": "gateway"}', content_type="application/json")
            print(f"echo       -> {echo.body.decode()} (variant {echo.invoked_variant})")
            csv = await gw.invoke("bid-filter", b"2,14,3,7,1,5,2", content_type="text/csv")
            print(f"bid-filter -> bid probability {csv.body.decode().strip()}")
            mme = await gw.invoke("mme", b"1", target_model="model-a.tar.gz")
            print(f"mme        -> {mme.body.decode()} from model-a.tar.gz")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway demo", description=__doc__)
    parser.parse_args(argv)
    asyncio.run(_run())
    return 0
