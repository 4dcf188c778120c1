"""Inbound auth: who may use the sidecar's (upstream) credentials.

The sidecar re-signs every call with its own credentials, so a client's
signature only matters as proof of who the client is. On loopback with
mode ``none`` nothing is checked; otherwise a rejection is raised as
:class:`SigV4Rejected` with AWS's code, whichever the mode.
Nothing here logs a header or a secret.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from gateway._server.http import Request
from gateway._server.sigv4_verify import LocalHosts, SigV4Rejected, SigV4Verifier
from gateway.sidecar._config import AuthSettings

__all__ = ["Authenticator", "SigV4Rejected", "make_authenticator"]

Authenticator = Callable[[Request], None]


class _BearerCheck:
    __slots__ = ("_expected",)

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def __call__(self, request: Request) -> None:
        value = request.headers.get("authorization")
        if value is None:
            raise SigV4Rejected(
                "MissingAuthenticationTokenException", "Missing Authentication Token"
            )
        # compare_digest: the time taken must not tell how much of the token matched.
        if not hmac.compare_digest(value.encode("latin-1"), self._expected):
            raise SigV4Rejected(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )


def make_authenticator(settings: AuthSettings, region: str | None = None) -> Authenticator | None:
    """The per-request check, or None when every request is accepted.

    SigV4 signatures must be scoped to ``settings.region`` (else ``region``,
    the Gateway's) and name a Host of this machine or one in ``settings.hosts``.
    """
    if settings.mode == "bearer":
        assert settings.token is not None
        return _BearerCheck(settings.token)
    if settings.mode == "sigv4":
        verifier = SigV4Verifier(
            settings.credentials,
            required=True,
            max_skew_s=settings.max_skew_s,
            region=settings.region or region,
            hosts=LocalHosts(settings.hosts),
        )
        return verifier.verify
    return None
