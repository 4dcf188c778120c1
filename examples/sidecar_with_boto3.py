"""The sidecar with a config file, called by an unmodified boto3 client.

    python examples/sidecar_with_boto3.py

Starts the emulator and the sidecar (``python -m gateway sidecar --config
examples/gateway.toml``) as child processes on free loopback ports, then
uses plain boto3, pointed at the sidecar with ``endpoint_url``. The sidecar
answers through the gateway: "bid-filter" is a logical route over two
endpoints (hedging, retries, the prediction cache), "models" a multi-model
endpoint. Errors come back as botocore's own exception classes.
"""

from __future__ import annotations

from pathlib import Path

import boto3
import botocore.config

from gateway.emulator import Emulator
from gateway.sidecar import Sidecar

HERE = Path(__file__).resolve().parent


def main() -> None:
    with Emulator.start_subprocess(HERE / "emulator.toml") as emulator:
        sidecar = Sidecar.start_subprocess(
            HERE / "gateway.toml",
            listen="127.0.0.1:0",  # a free port; the config says 127.0.0.1:8081
            args=["--upstream", emulator.url, "--log-level", "WARNING"],
        )
        with sidecar:
            print(f"emulator {emulator.url}, sidecar {sidecar.url}", flush=True)
            # Unmodified boto3. On loopback the sidecar accepts any signature and
            # re-signs upstream with its own credentials.
            client = boto3.client(
                "sagemaker-runtime",
                region_name="us-east-1",
                endpoint_url=sidecar.url,
                aws_access_key_id="AKIDANYTHING",
                aws_secret_access_key="anything",
                config=botocore.config.Config(retries={"max_attempts": 1}),
            )
            row = b"3,19,0.02,0.03,0.02,0.02,2,0.03,0.02,0"  # the bid filter's ten features
            # Warm-up, straight to the emulator (it speaks the same API): the first
            # call to an XGBoost endpoint loads the model, the slowest call there is.
            direct = boto3.client(
                "sagemaker-runtime",
                region_name="us-east-1",
                endpoint_url=emulator.url,
                aws_access_key_id="AKIDANYTHING",
                aws_secret_access_key="anything",
            )
            for endpoint in ("bid-filter", "bid-filter-b"):
                direct.invoke_endpoint(EndpointName=endpoint, Body=row, ContentType="text/csv")
            for attempt in (1, 2):
                response = client.invoke_endpoint(
                    EndpointName="bid-filter", Body=row, ContentType="text/csv", Accept="text/csv"
                )
                score = response["Body"].read().decode().strip()
                cache = response["ResponseMetadata"]["HTTPHeaders"].get("x-gateway-cache", "miss")
                print(f"bid-filter call {attempt}: score {score} (cache: {cache})")

            response = client.invoke_endpoint(
                EndpointName="models",
                Body=b'{"inputs": [1, 2, 3]}',
                ContentType="application/json",
                TargetModel="model-a.tar.gz",
            )
            print(f"models / model-a.tar.gz: {response['Body'].read().decode()}")

            stream = client.invoke_endpoint_with_response_stream(
                EndpointName="echo", Body=b"streamed through the sidecar", ContentType="text/plain"
            )
            parts = [event["PayloadPart"]["Bytes"] for event in stream["Body"]]
            print(f"response stream: {len(parts)} parts -> {b''.join(parts).decode()!r}")

            try:
                client.invoke_endpoint(EndpointName="no-such-endpoint", Body=b"{}")
            except client.exceptions.ValidationError as exc:
                code = exc.response["Error"]["Code"]
                print(f"unknown endpoint -> botocore {type(exc).__name__}: {code}")

            metrics = _get(sidecar.url + "/metrics")
            calls = [
                line for line in metrics.splitlines() if line.startswith("sagemaker_gateway_calls")
            ]
            print(f"/metrics: {len(metrics.splitlines())} lines, e.g. {calls[0] if calls else '-'}")


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as answer:
        return str(answer.read().decode())


if __name__ == "__main__":
    main()
