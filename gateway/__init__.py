"""A low-latency client gateway for Amazon SageMaker Runtime.

``Gateway`` is the async client; ``gateway.errors`` holds the error tree.
``tune_gc()``, called once by the application after start-up, keeps the
garbage collector's full passes out of the tail latency.
"""

from gateway import errors
from gateway._aws.sigv4 import Credentials
from gateway._client import Gateway, InvokeStream
from gateway._config.options import GatewayConfig, PoolConfig
from gateway._host.gc import GcTuning, tune_gc
from gateway._host.version import __version__
from gateway._invoke.api import MAX_PAYLOAD_BYTES, AsyncInvocation, InvokeResult
from gateway.errors import (
    DeadlineExceeded,
    GatewayError,
    ModelError,
    ModelNotReady,
    NoHealthyTarget,
    ServiceError,
    ValidationError,
)

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "AsyncInvocation",
    "Credentials",
    "DeadlineExceeded",
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "GcTuning",
    "InvokeResult",
    "InvokeStream",
    "ModelError",
    "ModelNotReady",
    "NoHealthyTarget",
    "PoolConfig",
    "ServiceError",
    "ValidationError",
    "__version__",
    "errors",
    "tune_gc",
]
