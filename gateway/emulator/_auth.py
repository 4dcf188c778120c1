"""SigV4 verification of incoming requests, as SageMaker errors.

The verification itself lives in :mod:`gateway._server.sigv4_verify` (the sidecar
uses it too); this adapter turns its rejections into the emulator's
:class:`SageMakerError`.
"""

from __future__ import annotations

from gateway._server.http import Request
from gateway._server.sigv4_verify import LocalHosts, SigV4Rejected, SigV4Verifier
from gateway.emulator._config import AuthConfig
from gateway.emulator._errors import SageMakerError

__all__ = ["SignatureVerifier"]


class SignatureVerifier:
    """Signatures for ``region`` (when given) and for a Host naming this machine."""

    def __init__(self, config: AuthConfig, region: str | None = None) -> None:
        self._verifier = SigV4Verifier(
            config.credentials,
            required=config.required,
            max_skew_s=config.max_skew_s,
            region=region,
            hosts=LocalHosts(config.hosts),
        )

    def verify(self, request: Request) -> None:
        """Raise :class:`SageMakerError` unless the request is acceptably signed."""
        try:
            self._verifier.verify(request)
        except SigV4Rejected as rejected:
            raise SageMakerError(rejected.code, rejected.message) from None

    def verify_head(self, request: Request) -> None:
        """As :meth:`verify`, for what the head alone decides (before the body is read)."""
        try:
            self._verifier.verify_head(request)
        except SigV4Rejected as rejected:
            raise SageMakerError(rejected.code, rejected.message) from None
