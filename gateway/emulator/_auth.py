"""SigV4 verification of incoming requests, as SageMaker errors.

The verification itself lives in :mod:`gateway._sigv4_verify` (the sidecar
uses it too); this adapter turns its rejections into the emulator's
:class:`SageMakerError`.
"""

from __future__ import annotations

from gateway._http_server import Request
from gateway._sigv4_verify import SigV4Rejected, SigV4Verifier
from gateway.emulator._config import AuthConfig
from gateway.emulator._errors import SageMakerError

__all__ = ["SignatureVerifier"]


class SignatureVerifier:
    def __init__(self, config: AuthConfig) -> None:
        self._verifier = SigV4Verifier(
            config.credentials, required=config.required, max_skew_s=config.max_skew_s
        )

    def verify(self, request: Request) -> None:
        """Raise :class:`SageMakerError` unless the request is acceptably signed."""
        try:
            self._verifier.verify(request)
        except SigV4Rejected as rejected:
            raise SageMakerError(rejected.code, rejected.message) from None
