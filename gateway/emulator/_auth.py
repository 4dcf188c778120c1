"""SigV4 verification of incoming requests, with AWS's error codes and messages.

Uses the project's sans-IO signer: the signing key is cached per (day,
secret), so verifying costs a SHA-256 of the body plus a few HMACs.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time

from gateway._http_server import Request
from gateway._signing import EMPTY_SHA256, SigV4Signer, parse_authorization
from gateway.emulator._config import AuthConfig
from gateway.emulator._errors import SageMakerError

__all__ = ["SignatureVerifier"]

_SIGNATURE_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. "
    "Check your AWS Secret Access Key and signing method. "
    "Consult the service documentation for details."
)


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


class SignatureVerifier:
    def __init__(self, config: AuthConfig) -> None:
        self._credentials = dict(config.credentials)
        self._required = config.required
        self._max_skew = config.max_skew_s
        self._signers: dict[str, SigV4Signer] = {}

    def verify(self, request: Request) -> None:
        """Raise :class:`SageMakerError` unless the request is acceptably signed."""
        authorization = request.headers.get("authorization")
        if authorization is None:
            if self._required or self._credentials:
                raise SageMakerError(
                    "MissingAuthenticationTokenException", "Missing Authentication Token"
                )
            return
        try:
            parsed = parse_authorization(authorization)
        except ValueError as exc:
            raise SageMakerError(
                "IncompleteSignatureException", f"Authorization header is malformed: {exc}"
            ) from None
        amz_date = request.headers.get("x-amz-date")
        if amz_date is None:
            raise SageMakerError(
                "IncompleteSignatureException",
                "Authorization header requires existence of either a 'X-Amz-Date' or "
                "a 'Date' header.",
            )
        self._check_date(amz_date, parsed.day)
        if parsed.service != "sagemaker":
            raise SageMakerError(
                "InvalidSignatureException",
                "Credential should be scoped to correct service: 'sagemaker'.",
            )
        if not self._credentials:
            return  # no keys configured: any well-formed signature will do
        secret = self._credentials.get(parsed.access_key)
        if secret is None:
            raise SageMakerError(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        signer = self._signers.get(parsed.region)
        if signer is None:
            signer = self._signers[parsed.region] = SigV4Signer(parsed.region, "sagemaker")
        payload_hash = self._payload_hash(request)
        signed_names = set(parsed.signed_headers)
        if "host" not in signed_names:
            raise SageMakerError("InvalidSignatureException", _SIGNATURE_MISMATCH)
        signed_pairs = [pair for pair in request.header_pairs if pair[0] in signed_names]
        canonical, signed = signer.canonical_request(
            request.method, request.path, request.query, signed_pairs, payload_hash
        )
        expected = signer.signature(secret, amz_date, canonical)
        # compare_digest on both: the SignedHeaders list must match what was present.
        same_headers = signed == ";".join(parsed.signed_headers)
        if not (hmac.compare_digest(expected, parsed.signature) and same_headers):
            raise SageMakerError("InvalidSignatureException", _SIGNATURE_MISMATCH)

    def _check_date(self, amz_date: str, scope_day: str) -> None:
        try:
            signed_at = _amz_date_epoch(amz_date)
        except ValueError:
            raise SageMakerError(
                "IncompleteSignatureException",
                f"Date must be in ISO-8601 'basic format'. Got '{amz_date}'.",
            ) from None
        now = time.time()
        if signed_at < now - self._max_skew:
            raise SageMakerError(
                "InvalidSignatureException",
                f"Signature expired: {amz_date} is now earlier than "
                f"{_iso_basic(now - self._max_skew)} ({_iso_basic(now)} - 5 min.)",
            )
        if signed_at > now + self._max_skew:
            raise SageMakerError(
                "InvalidSignatureException",
                f"Signature not yet current: {amz_date} is still later than "
                f"{_iso_basic(now + self._max_skew)} ({_iso_basic(now)} + 5 min.)",
            )
        if scope_day != amz_date[:8]:
            raise SageMakerError(
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
            raise SageMakerError(
                "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
        return declared
