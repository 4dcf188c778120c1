"""A local SageMaker Runtime: the stand-in for AWS in tests, examples and benchmarks.

It speaks the real wire API (an unmodified boto3 ``sagemaker-runtime``
client pointed at it with ``endpoint_url`` works, errors included), with
per-endpoint models, variants, multi-model cold loads, a latency
distribution with a tail, fault injection and SigV4 verification. On the same
port it serves the inference router runtime (routers over its endpoints in
simulated Regions) and the Global Inference Gateway runtime (echo chat models).
"""

from gateway.emulator._config import (
    AuthConfig,
    EmulatorConfig,
    EndpointConfig,
    FaultConfig,
    MmeConfig,
    ModelConfig,
    VariantConfig,
)
from gateway.emulator._emulator import Emulator, EmulatorProcess, main
from gateway.emulator._latency_config import LatencyConfig
from gateway.emulator._runtime_config import (
    DestinationConfig,
    GlobalGatewayFaultConfig,
    GlobalInferenceGatewayConfig,
    InferenceRouterConfig,
    RouterFaultConfig,
    RoutingTargetConfig,
)
from gateway.emulator._runtimes import RuntimeServices
from gateway.emulator._stats import EmulatorStats
from gateway.errors import ConfigError

__all__ = [
    "AuthConfig",
    "ConfigError",
    "DestinationConfig",
    "Emulator",
    "EmulatorConfig",
    "EmulatorProcess",
    "EmulatorStats",
    "EndpointConfig",
    "FaultConfig",
    "GlobalGatewayFaultConfig",
    "GlobalInferenceGatewayConfig",
    "InferenceRouterConfig",
    "LatencyConfig",
    "MmeConfig",
    "ModelConfig",
    "RouterFaultConfig",
    "RoutingTargetConfig",
    "RuntimeServices",
    "VariantConfig",
    "main",
]
