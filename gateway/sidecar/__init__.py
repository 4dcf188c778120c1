"""The sidecar proxy: the SageMaker Runtime API on a local port.

Processes in any language point an unmodified AWS SDK (``endpoint_url``)
at it and get the gateway's pooling, routing, hedging and caching. Run it
with ``python -m gateway sidecar --listen 127.0.0.1:PORT --config gateway.toml``.
"""

from gateway.sidecar._config import AuthSettings, SidecarConfig
from gateway.sidecar._errors import gateway_error_response
from gateway.sidecar._sidecar import Sidecar, SidecarProcess, main

__all__ = [
    "AuthSettings",
    "Sidecar",
    "SidecarConfig",
    "SidecarProcess",
    "gateway_error_response",
    "main",
]
