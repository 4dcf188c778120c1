"""The sidecar proxy: the SageMaker Runtime API on a local port.

Processes in any language point an unmodified AWS SDK (``endpoint_url``)
at it and get the gateway's pooling, routing, hedging and caching. Run it
with ``python -m gateway sidecar --listen 127.0.0.1:PORT --config gateway.toml``.

With an ``[rtb]`` table in that file (``RtbConfig``), the sidecar is also an
OpenRTB pre-filter proxy: ``POST /openrtb2/auction`` is scored by the bid
filter and answered 204 No Content ("no bid") when dropped, or forwarded to
one of ``bidders`` with its answer relayed::

    [rtb]
    bidders = ["http://10.0.0.5:8080/bid"]
    endpoint = "bid-filter"      # the route/endpoint that scores (text/csv)
    threshold = 0.01
"""

from gateway.sidecar._config import AuthSettings, SidecarConfig
from gateway.sidecar._errors import gateway_error_response
from gateway.sidecar._rtb import REASON_HEADER, RULE_HEADER, SCORE_HEADER, RtbConfig, RtbProxy
from gateway.sidecar._sidecar import Sidecar, SidecarProcess, main

__all__ = [
    "REASON_HEADER",
    "RULE_HEADER",
    "SCORE_HEADER",
    "AuthSettings",
    "RtbConfig",
    "RtbProxy",
    "Sidecar",
    "SidecarConfig",
    "SidecarProcess",
    "gateway_error_response",
    "main",
]
