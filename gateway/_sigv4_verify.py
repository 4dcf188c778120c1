"""SigV4 verification of incoming requests, with AWS's error codes and messages.

Shared by the emulator (which plays SageMaker) and the sidecar (which
checks its own clients before re-signing upstream). Uses the project's
sans-IO signer: the signing key is cached per (day, secret), so verifying
costs a SHA-256 of the body plus a few HMACs.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time
from collections.abc import Mapping

from gateway._http_server import Request
from gateway._signing import EMPTY_SHA256, SigV4Signer, parse_authorization

__all__ = ["REJECTION_STATUS", "SigV4Rejected", "SigV4Verifier"]

_SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. "
    "Consult the service documentation for details."
)

# The HTTP status AWS answers each rejection with: signature errors are 403,
# a malformed Authorization header or a body-hash mismatch is 400.
REJECTION_STATUS: dict[str, int] = {
    "IncompleteSignatureException": 400,
    "XAmzContentSHA256Mismatch": 400,
    "InvalidSignatureException": 403,
    "UnrecognizedClientException": 403,
    "MissingAuthenticationTokenException": 403,
}


class SigV4Rejected(Exception):
    """A request that is not acceptably signed: AWS's error code and message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = REJECTION_STATUS[code]


def _amz_date_epoch(amz_date: str) -> int:
    """Seconds since the epoch of ``YYYYMMDDTHHMMSSZ``; ValueError if malformed."""
    if len(amz_date) != 16 or amz_date[8] != "T" or amz_date[15] != "Z":
        raise ValueError(amz_date)
    parts = (amz_date[0:4], amz_date[4:6], amz_date[6:8], amz_date[9:11], amz_date[11:13])
    fields = [int(part) for part in (*parts, amz_date[13:15]) if part.isdigit()]
    if len(fields) != 6:
        raise ValueError(amz_date)
    return calendar.timegm((*fields, 0, 0, 0))


def _iso_basic(epoch: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch))


class SigV4Verifier:
    """Checks ``Authorization`` against ``credentials`` (access key id -> secret).

    With no credentials, any well-formed signature is accepted, and unsigned
    requests only when ``required`` is false.
    """

    def __init__(
        self,
        credentials: Mapping[str, str],
        *,
        required: bool = True,
        max_skew_s: float = 300.0,
        service: str = "sagemaker",
    ) -> None:
        self._credentials = dict(credentials)
        self._required = required
        self._max_skew = max_skew_s
        self._service = service
        self._signers: dict[str, SigV4Signer] = {}

    def verify(self, request: Request) -> None:
        """Raise :class:`SigV4Rejected` unless the request is acceptably signed."""
        authorization = request.headers.get("authorization")
        if authorization is None:
            if self._required or self._credentials:
                raise SigV4Rejected(
                    "MissingAuthenticationTokenException", "Missing Authentication Token"
                )
            return
        try:
            parsed = parse_authorization(authorization)
        except ValueError as exc:
            raise SigV4Rejected(
                "IncompleteSignatureException", f"Authorization header is malformed: {exc}"
            ) from None
        amz_date = request.headers.get("x-amz-date")
        if amz_date is None:
            raise SigV4Rejected(
                "IncompleteSignatureException",
                "Authorization header requires existence of either a 'X-Amz-Date' or "
                "a 'Date' header.",
            )
        self._check_date(amz_date, parsed.day)
        if parsed.service != self._service:
            raise SigV4Rejected(
                "InvalidSignatureException",
                f"Credential should be scoped to correct service: '{self._service}'.",
            )
        if not self._credentials:
            return  # no keys configured: any well-formed signature will do
        secret = self._credentials.get(parsed.access_key)
        if secret is None:
            raise SigV4Rejected(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        self._check_signature(
            request, parsed.region, parsed.signed_headers, parsed.signature, secret, amz_date
        )

    def _check_signature(
        self,
        request: Request,
        region: str,
        signed_headers: tuple[str, ...],
        signature: str,
        secret: str,
        amz_date: str,
    ) -> None:
        signer = self._signers.get(region)
        if signer is None:
            signer = self._signers[region] = SigV4Signer(region, self._service)
        payload_hash = self._payload_hash(request)
        signed_names = set(signed_headers)
        if "host" not in signed_names:
            raise SigV4Rejected("InvalidSignatureException", _SIGNATURE_MISMATCH)
        signed_pairs = [pair for pair in request.header_pairs if pair[0] in signed_names]
        canonical, signed = signer.canonical_request(
            request.method, request.path, request.query, signed_pairs, payload_hash
        )
        expected = signer.signature(secret, amz_date, canonical)
        # compare_digest on both: the SignedHeaders list must match what was present.
        same_headers = signed == ";".join(signed_headers)
        if not (hmac.compare_digest(expected, signature) and same_headers):
            raise SigV4Rejected("InvalidSignatureException", _SIGNATURE_MISMATCH)

    def _check_date(self, amz_date: str, scope_day: str) -> None:
        try:
            signed_at = _amz_date_epoch(amz_date)
        except ValueError:
            raise SigV4Rejected(
                "IncompleteSignatureException",
                f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'.",
            ) from None
        now = time.time()
        if signed_at < now - self._max_skew:
            raise SigV4Rejected(
                "InvalidSignatureException",
                f"Signature expired: {amz_date} is now earlier than "
                f"{_iso_basic(now - self._max_skew)} ({_iso_basic(now)} - 5 min.)",
            )
        if signed_at > now + self._max_skew:
            raise SigV4Rejected(
                "InvalidSignatureException",
                f"Signature not yet current: {amz_date} is still later than "
                f"{_iso_basic(now + self._max_skew)} ({_iso_basic(now)} + 5 min.)",
            )
        if scope_day != amz_date[:8]:
            raise SigV4Rejected(
                "InvalidSignatureException",
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version "
                "of date from HTTP: "
                f"'{scope_day}' != '{amz_date[:8]}', from '{amz_date}'.",
            )

    @staticmethod
    def _payload_hash(request: Request) -> str:
        body = request.body
        actual = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        declared = request.headers.get("x-amz-content-sha256")
        if declared is None or declared == "UNSIGNED-PAYLOAD":
            return actual if declared is None else declared
        if declared != actual:
            raise SigV4Rejected(
                "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
        return declared
