# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""Sans-IO AWS Signature Version 4 for SageMaker Runtime.

A pure function of (method, path, query, headers, payload hash, credentials,
time). Nothing here does I/O or builds a botocore object: botocore's
``SigV4Auth`` costs ~200 us a request, this path costs a few microseconds
because the derived signing key is cached per (day, secret) and a head's
signature is presigned once a second; each request then only finishes three
hash states, in one call of the C tail (``_sigv4_tail.c``) where it is
built, else with ``hashlib``.

The canonicalisation follows botocore's ``SigV4Auth`` exactly; the tests
compare the two on generated requests.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from time import time as wall_time
from types import ModuleType
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

if TYPE_CHECKING:
    from _hashlib import HASH

__all__ = [
    "EMPTY_SHA256",
    "UNSIGNED_HEADERS",
    "AmzDateClock",
    "Credentials",
    "ParsedAuthorization",
    "PresignedHead",
    "SigV4Signer",
    "canonical_query",
    "canonical_uri",
    "parse_authorization",
    "payload_sha256",
]


# The per-request tail in C (_sigv4_tail.c) where it was built and binds to the libcrypto
# hashlib loaded: the body's hash, and the presigned states finished into the head, each
# one call with no hashlib object. Without it (a pure build, no C compiler, no shared
# libcrypto) hashlib does the same.
def _bound_tail() -> ModuleType | None:
    try:
        from gateway._aws import _sigv4_tail
        from gateway._aws._libcrypto import sha256_functions
    except ImportError:
        return None
    functions = sha256_functions()
    if functions is None:
        return None
    try:
        _sigv4_tail.bind(*functions)  # ImportError if they fail its self-test
    except ImportError:
        return None
    return _sigv4_tail


# Final: compiled, each a C static rather than a look-up in the module's dict per call.
_TAIL: Final = _bound_tail()
_native_hex: Final[Callable[[bytes], str] | None] = None if _TAIL is None else _TAIL.sha256_hex
_native_state: Final[Callable[[bytes], bytes] | None] = (
    None if _TAIL is None else _TAIL.sha256_state
)
_native_head: Final[Callable[[bytes, bytes, str, int], bytes] | None] = (
    None if _TAIL is None else _TAIL.signed_head
)
NATIVE_SIGNING = _native_head is not None

ALGORITHM = "AWS4-HMAC-SHA256"
_name_of = itemgetter(0)
_colon_join = ":".join  # ("host", "h") -> "host:h"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

# botocore never signs these (hop-by-hop, or rewritten by proxies).
UNSIGNED_HEADERS = frozenset(
    {
        "baggage",
        "connection",
        "expect",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "traceparent",
        "tracestate",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "x-amzn-trace-id",
        "authorization",
    }
)


@dataclass(frozen=True, slots=True)
class Credentials:
    """An AWS key pair, with the session token of temporary credentials.

    ``repr`` never shows the secret or the token: credentials end up in
    tracebacks and debug logs more often than anyone intends.
    """

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)
    # Wall-clock expiry (epoch seconds) of temporary credentials, None if static.
    expiry: float | None = None


def payload_sha256(body: bytes) -> str:
    if not body:
        return EMPTY_SHA256
    native = _native_hex
    return native(body) if native is not None else hashlib.sha256(body).hexdigest()


def canonical_uri(path: str) -> str:
    """The path as SigV4 wants it: percent-encoded once more, '/' and '~' kept."""
    return quote(path, safe="/~")


def canonical_query(query: str) -> str:
    """Sort ``k=v`` pairs the way botocore does for a query taken from the URL."""
    if not query:
        return ""
    pairs = sorted(pair.partition("=")[::2] for pair in query.split("&"))
    return "&".join(f"{key}={value}" for key, value in pairs)


def _trim(value: str) -> str:
    # SigV4 "Trimall" exactly as botocore does it: every run of whitespace (tabs
    # and Latin-1's NBSP included, not just spaces) becomes one space, ends stripped.
    return " ".join(value.split())


def _folds(block: str) -> bool:
    """Whether Trimall changes a value of ``block`` (``name:value`` lines, newline-joined).

    It does not when folding the whole block only turns its line breaks into spaces and
    no value starts with a space (": " also matches a value holding a colon and a space:
    such a block takes the slow path, to the same lines).
    """
    return " ".join(block.split()) != block.replace("\n", " ") or ": " in block


def _trimmed_block(headers: Sequence[tuple[str, str]]) -> str:
    # The values go on the wire as the caller gave them; only the canonical form folds them.
    return "\n".join([f"{name}:{_trim(value)}" for name, value in headers])


class AmzDateClock:
    """``x-amz-date`` strings, formatted once per wall-clock second."""

    __slots__ = ("_second", "_text")

    def __init__(self) -> None:
        self._second = -1
        self._text = ""

    def now(self) -> str:
        second = int(wall_time())
        if second != self._second:
            self._text = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
            self._second = second
        return self._text


class _HmacSha256:
    """HMAC-SHA256 under one fixed key, with the padded key states hashed once.

    ``hmac.digest`` re-derives the pads on every call (~2.5 us here); copying
    two prepared ``sha256`` states costs about a third of that.
    """

    __slots__ = ("_inner", "_inner_pad", "_outer", "_outer_pad")

    def __init__(self, key: bytes) -> None:
        block = key.ljust(64, b"\0")
        self._inner_pad = bytes(b ^ 0x36 for b in block)
        self._outer_pad = bytes(b ^ 0x5C for b in block)
        self._inner = hashlib.sha256(self._inner_pad)
        self._outer = hashlib.sha256(self._outer_pad)

    def hexdigest(self, message: bytes) -> str:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()

    def started(self, prefix: bytes) -> tuple[HASH, HASH]:
        """The (inner, outer) states with ``prefix`` already fed to the inner one."""
        inner = self._inner.copy()
        inner.update(prefix)
        return inner, self._outer

    def native_states(
        self, state: Callable[[bytes], bytes], canonical_start: bytes, prefix: bytes
    ) -> bytes:
        """The C tail's three states: ``canonical_start`` hashed, and ``started(prefix)``'s."""
        return state(canonical_start) + state(self._inner_pad + prefix) + state(self._outer_pad)


class PresignedHead:
    """A request head signed up to its payload hash, good for one date and key.

    Within a wall-clock second, calls to one target carry identical headers
    and date; only the body, so the payload hash, changes. The canonical
    request up to the payload hash and the string to sign up to the
    request's hash are hashed once here; each call resumes copies of those
    hash states (three short updates) and joins four byte strings: in one
    call of the C tail where ``native`` states were given, else with hashlib.
    """

    __slots__ = ("_canonical", "_inner", "_native", "_outer", "_start", "amz_date", "credentials")

    def __init__(
        self,
        amz_date: str,
        credentials: Credentials,
        canonical: HASH,
        mac_states: tuple[HASH, HASH],
        start: bytes,
        native: bytes | None = None,
    ) -> None:
        self.amz_date = amz_date
        self.credentials = credentials
        self._canonical = canonical
        self._inner, self._outer = mac_states
        self._start = start
        self._native = native  # the same three states, as the C tail keeps them

    def head(self, payload_hash: str, body_length: int) -> bytes:
        """The whole head: ``start``, the signature, ``content-length``, the blank line."""
        native = self._native
        signed_head = _native_head
        if native is not None and signed_head is not None:
            return signed_head(self._start, native, payload_hash, body_length)
        canonical = self._canonical.copy()
        canonical.update(payload_hash.encode())
        inner = self._inner.copy()
        inner.update(canonical.hexdigest().encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return b"".join(
            (
                self._start,
                outer.hexdigest().encode(),
                b"\r\ncontent-length: %d\r\n\r\n" % body_length,
            )
        )


class SigV4Signer:
    """Signs requests for one (region, service); safe to share across tasks."""

    __slots__ = ("_key_cache", "_last", "_native", "_region", "_scope_tail", "_service")

    def __init__(self, region: str, service: str = "sagemaker", native: bool = True) -> None:
        self._region = region
        self._service = service
        # Presigned heads are finished by the C tail where it loaded (see PresignedHead).
        self._native = native and NATIVE_SIGNING
        self._scope_tail = f"/{region}/{service}/aws4_request"
        self._key_cache: dict[tuple[str, str], _HmacSha256] = {}
        # The key used last: nearly every call signs with the same day and secret.
        self._last: tuple[str, str, _HmacSha256 | None] = ("", "", None)

    @property
    def region(self) -> str:
        return self._region

    def signing_key(self, secret_key: str, day: str) -> bytes:
        """The derived key for ``day`` (YYYYMMDD): four chained HMACs."""
        key = hmac.digest(("AWS4" + secret_key).encode(), day.encode(), "sha256")
        for part in (self._region, self._service, "aws4_request"):
            key = hmac.digest(key, part.encode(), "sha256")
        return key

    def _mac(self, secret_key: str, day: str) -> _HmacSha256:
        last_day, last_secret, last_mac = self._last
        if last_mac is not None and day == last_day and secret_key == last_secret:
            return last_mac
        cache_key = (day, secret_key)
        mac = self._key_cache.get(cache_key)
        if mac is None:
            if len(self._key_cache) > 8:
                self._key_cache.clear()  # old days and rotated secrets
            mac = _HmacSha256(self.signing_key(secret_key, day))
            self._key_cache[cache_key] = mac
        self._last = (day, secret_key, mac)
        return mac

    @staticmethod
    def canonical_request(
        method: str,
        path: str,
        query: str,
        headers: Iterable[tuple[str, str]],
        payload_hash: str,
    ) -> tuple[str, str]:
        """Return (canonical request, signed-headers list).

        ``headers`` are (lower-case name, value) pairs and must already
        include ``host`` and ``x-amz-date``; repeated names are joined
        with ',' as SigV4 requires.
        """
        merged: dict[str, str] = {}
        for name, value in headers:
            if name in UNSIGNED_HEADERS:
                continue
            trimmed = _trim(value)
            merged[name] = f"{merged[name]},{trimmed}" if name in merged else trimmed
        names = sorted(merged)
        signed = ";".join(names)
        canonical_headers = "".join(f"{name}:{merged[name]}\n" for name in names)
        text = (
            f"{method}\n{canonical_uri(path)}\n{canonical_query(query)}\n"
            f"{canonical_headers}\n{signed}\n{payload_hash}"
        )
        return text, signed

    def signature(self, secret_key: str, amz_date: str, canonical: str) -> str:
        day = amz_date[:8]
        string_to_sign = (
            f"{ALGORITHM}\n{amz_date}\n{day}{self._scope_tail}\n"
            f"{hashlib.sha256(canonical.encode()).hexdigest()}"
        )
        return self._mac(secret_key, day).hexdigest(string_to_sign.encode())

    def authorization(
        self,
        method: str,
        path: str,
        headers: Sequence[tuple[str, str]],
        payload_hash: str,
        credentials: Credentials,
        amz_date: str,
        query: str = "",
    ) -> str:
        """The ``Authorization`` header value for any request."""
        canonical, signed = self.canonical_request(method, path, query, headers, payload_hash)
        return self._header(credentials, amz_date, signed, canonical)

    def authorization_presorted(
        self,
        request_prefix: str,
        headers: Sequence[tuple[str, str]],
        payload_hash: str,
        credentials: Credentials,
        amz_date: str,
    ) -> str:
        """The hot-path variant of :meth:`authorization`.

        ``request_prefix`` is ``"METHOD\\nCANONICAL-URI\\nCANONICAL-QUERY\\n"``
        (see :meth:`request_prefix`), computed once per target, and
        ``headers`` are already lower-case, unique, signable and sorted by
        name (their values are Trimall-ed here, for the canonical form only):
        the client builds them in that order (``host`` is always among them,
        so the list is never empty).

        One function with C-level joins and no per-header f-string unless a
        value has whitespace to fold: it runs once per request (see
        ``bench/compare.py``).
        """
        signed = ";".join(map(_name_of, headers))
        block = "\n".join(map(_colon_join, headers))
        if _folds(block):
            block = _trimmed_block(headers)
        return self.authorization_from_parts(
            request_prefix, signed, block, payload_hash, credentials, amz_date
        )

    def authorization_from_parts(
        self,
        request_prefix: str,
        signed: str,
        block: str,
        payload_hash: str,
        credentials: Credentials,
        amz_date: str,
    ) -> str:
        """:meth:`authorization_presorted` with the header joins already done.

        ``signed`` is the ``;``-joined header names and ``block`` the
        ``\n``-joined ``name:value`` lines, values Trimall-ed: a caller that signs the same
        headers many times a second (the client does) joins them once.
        """
        canonical = "".join((request_prefix, block, "\n\n", signed, "\n", payload_hash))
        day = amz_date[:8]
        secret = credentials.secret_key
        mac = self._mac(secret, day)
        scope_tail = self._scope_tail
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        signature = mac.hexdigest(f"{ALGORITHM}\n{amz_date}\n{day}{scope_tail}\n{digest}".encode())
        return (
            f"{ALGORITHM} Credential={credentials.access_key}/{day}{scope_tail}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )

    def presign_head(
        self,
        request_prefix: str,
        headers: Sequence[tuple[str, str]],
        credentials: Credentials,
        amz_date: str,
        head_start: str,
    ) -> PresignedHead:
        """A :class:`PresignedHead` for presorted ``headers`` (with ``x-amz-date``).

        ``head_start`` is the request line and header lines sent before
        ``Authorization``; the head's bytes are ``head_start``, the
        ``Authorization`` line, ``Content-Length``, a blank line.
        """
        signed = ";".join(map(_name_of, headers))
        block = "\n".join(map(_colon_join, headers))
        if _folds(block):
            block = _trimmed_block(headers)
        canonical_start = f"{request_prefix}{block}\n\n{signed}\n".encode()
        canonical = hashlib.sha256(canonical_start)
        day = amz_date[:8]
        scope_tail = self._scope_tail
        mac = self._mac(credentials.secret_key, day)
        sign_start = f"{ALGORITHM}\n{amz_date}\n{day}{scope_tail}\n".encode()
        mac_states = mac.started(sign_start)
        start = (
            f"{head_start}authorization: {ALGORITHM} Credential={credentials.access_key}/"
            f"{day}{scope_tail}, SignedHeaders={signed}, Signature="
        )
        state = _native_state
        native = (
            mac.native_states(state, canonical_start, sign_start)
            if self._native and state is not None
            else None
        )
        return PresignedHead(
            amz_date, credentials, canonical, mac_states, start.encode("latin-1"), native
        )

    @staticmethod
    def request_prefix(method: str, path: str, query: str = "") -> str:
        return f"{method}\n{canonical_uri(path)}\n{canonical_query(query)}\n"

    def _header(self, credentials: Credentials, amz_date: str, signed: str, canonical: str) -> str:
        signature = self.signature(credentials.secret_key, amz_date, canonical)
        return (
            f"{ALGORITHM} Credential={credentials.access_key}/{amz_date[:8]}{self._scope_tail}, "
            f"SignedHeaders={signed}, Signature={signature}"
        )


@dataclass(frozen=True, slots=True)
class ParsedAuthorization:
    access_key: str
    day: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str) -> ParsedAuthorization:
    """Split an ``AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...``.

    Raises ValueError naming what is malformed.
    """
    algorithm, _, rest = value.partition(" ")
    if algorithm != ALGORITHM:
        raise ValueError(f"unsupported authorization algorithm {algorithm[:32]!r}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, field_value = part.strip().partition("=")
        if not sep:
            raise ValueError("malformed authorization header")
        fields[name] = field_value
    try:
        credential = fields["Credential"].split("/")
        signed = fields["SignedHeaders"]
        signature = fields["Signature"]
    except KeyError as missing:
        raise ValueError(f"authorization header lacks {missing.args[0]}") from None
    if len(credential) != 5 or credential[4] != "aws4_request":
        raise ValueError("malformed credential scope")
    return ParsedAuthorization(
        access_key=credential[0],
        day=credential[1],
        region=credential[2],
        service=credential[3],
        signed_headers=tuple(signed.split(";")),
        signature=signature,
    )
