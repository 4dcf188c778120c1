"""SigV4 verification of incoming requests, with AWS's error codes and messages.

Shared by the emulator (which plays SageMaker) and the sidecar (which
checks its own clients before re-signing upstream). Uses the project's
sans-IO signer: the signing key is cached per (day, secret), so verifying
costs a SHA-256 of the body plus a few HMACs.
"""

from __future__ import annotations

import calendar
import contextlib
import hashlib
import hmac
import ipaddress
import socket
import time
from collections.abc import Collection, Container, Mapping

from gateway._aws.sigv4 import EMPTY_SHA256, SigV4Signer, parse_authorization
from gateway._server.http import Request

__all__ = ["REJECTION_STATUS", "LocalHosts", "SigV4Rejected", "SigV4Verifier"]

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


# Headers clients send without signing them: botocore never signs the trace id
# (load balancers add or rewrite it). Every other x-amz* header must be signed.
_UNSIGNED_AMZ = frozenset({"x-amzn-trace-id"})


def host_name(host: str) -> str:
    """The name in a Host header, without its port or IPv6 brackets, lower-case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.partition(":")[0] if host.count(":") == 1 else host


class LocalHosts:
    """Which Host names mean this server: its own names and addresses, plus any configured.

    The port is not compared: port mappings and proxies in front of a server
    change it, while a request signed for another service names another host.
    """

    __slots__ = ("_extra", "_known")

    _MAX_REMEMBERED = 256

    def __init__(self, extra: Collection[str] = ()) -> None:
        self._extra = frozenset(host_name(name) for name in extra)
        # No getfqdn(): a DNS lookup at start-up can block for seconds.
        names = {"localhost", socket.gethostname().lower()}
        self._known: dict[str, bool] = dict.fromkeys(names | self._extra, True)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        known = self._known.get(name)
        if known is None:
            known = _is_local_address(name)
            if len(self._known) < self._MAX_REMEMBERED:
                self._known[name] = known
        return known


def _is_local_address(name: str) -> bool:
    """True for an IP literal of this machine: loopback, or one it can bind to."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False  # a name: only the configured and the machine's own count
    if address.is_loopback:
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.bind((name, 0))
        return True
    return False


class SigV4Verifier:
    """Checks ``Authorization`` against ``credentials`` (access key id -> secret).

    With no credentials, any well-formed signature is accepted, and unsigned
    requests only when ``required`` is false. A signature scoped to another
    ``region`` (when given), a Host header naming another server (when
    ``hosts`` is given), or an ``x-amz*`` header left out of the signature is
    refused either way.
    """

    def __init__(
        self,
        credentials: Mapping[str, str],
        *,
        required: bool = True,
        max_skew_s: float = 300.0,
        service: str = "sagemaker",
        region: str | None = None,
        hosts: Container[str] | None = None,
    ) -> None:
        self._credentials = dict(credentials)
        self._required = required
        self._max_skew = max_skew_s
        self._service = service
        self._region = region
        self._hosts = hosts
        self._signers: dict[str, SigV4Signer] = {}

    def verify(self, request: Request) -> None:
        """Raise :class:`SigV4Rejected` unless the request is acceptably signed."""
        checked = self._verify_head(request)
        if checked is not None:
            self._check_signature(request, *checked)

    def verify_head(self, request: Request) -> None:
        """Every check the head alone decides (all but the signature over the body).

        Run before the body is read, it refuses unsigned, malformed, stale,
        mis-scoped and unknown-key requests without buffering what they send.
        """
        self._verify_head(request)

    def _verify_head(self, request: Request) -> tuple[str, tuple[str, ...], str, str, str] | None:
        """The head checks; what the signature check needs, or None when there is none."""
        authorization = request.headers.get("authorization")
        if authorization is None:
            if self._required or self._credentials:
                raise SigV4Rejected(
                    "MissingAuthenticationTokenException", "Missing Authentication Token"
                )
            return None
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
        self._check_scope(request, parsed.region, parsed.signed_headers)
        if not self._credentials:
            return None  # no keys configured: any well-formed signature will do
        secret = self._credentials.get(parsed.access_key)
        if secret is None:
            raise SigV4Rejected(
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            )
        return parsed.region, parsed.signed_headers, parsed.signature, secret, amz_date

    def _check_scope(self, request: Request, region: str, signed_headers: tuple[str, ...]) -> None:
        """Signed for this region and this host, with every x-amz* header signed."""
        if self._region is not None and region != self._region:
            raise SigV4Rejected(
                "InvalidSignatureException",
                f"Credential should be scoped to a valid region, not '{region[:64]}'.",
            )
        if self._hosts is not None:
            host = request.headers.get("host", "")
            if host_name(host) not in self._hosts:
                raise SigV4Rejected(
                    "InvalidSignatureException",
                    f"The request was signed for host '{host[:128]}', which is not this service.",
                )
        unsigned = [
            name
            for name, _ in request.header_pairs
            if name.startswith("x-amz") and name not in signed_headers and name not in _UNSIGNED_AMZ
        ]
        if unsigned:
            raise SigV4Rejected(
                "InvalidSignatureException",
                "There were headers present in the request which were not signed: "
                + ", ".join(sorted(set(unsigned)))[:256],
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
