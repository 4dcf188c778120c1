# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""A request signed at send time: the signature is computed when a connection is ready.

Signing late keeps a request that waited for a pooled connection from going
out with a stale date (botocore signs before the pool wait).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway._aws.sigv4 import AmzDateClock, Credentials, PresignedHead, SigV4Signer, payload_sha256
from gateway._http.message import USER_AGENT, Origin, encode_head, header_lines

# Where an Authorization header names its access key: "Credential=AKID/date/...".
_CREDENTIAL = "Credential="
# Presigned heads kept per RequestSigner (see RequestSigner.signed_head).
_MAX_PRESIGNED_HEADS = 512


class RequestSigner:
    """Signs at send time with whatever credentials are current then."""

    __slots__ = ("_clock", "_credentials", "_heads", "_signer", "user_agent")

    def __init__(
        self,
        signer: SigV4Signer,
        credentials: Callable[[], Credentials],
        user_agent: str = USER_AGENT,
    ) -> None:
        self._signer = signer
        self._credentials = credentials
        self.user_agent = user_agent  # checked by the caller (a header value)
        self._clock = AmzDateClock()
        self._heads: dict[tuple[object, ...], PresignedHead] = {}

    @property
    def signer(self) -> SigV4Signer:
        return self._signer

    def current_access_key(self) -> str:
        """The access key a request signed now would carry."""
        return self._credentials().access_key

    def sign(
        self,
        sign_prefix: str,
        headers: list[tuple[str, str]],
        payload_hash: str,
        after_host: int = -1,
    ) -> list[tuple[str, str]]:
        """A signed copy of sorted ``headers``: x-amz-date, the token, Authorization added.

        ``headers`` holds the sorted signable headers: accept, content-type,
        host, then the ``x-amzn-sagemaker-*`` ones (which sort after
        ``x-amz-*``). ``after_host`` is the index just past ``host`` when the
        caller knows it (the hot path does), else it is looked up.
        """
        credentials = self._credentials()
        amz_date = self._clock.now()
        signed = self._with_date(headers, credentials, amz_date, after_host)
        authorization = self._signer.authorization_presorted(
            sign_prefix, signed, payload_hash, credentials, amz_date
        )
        signed.append(("authorization", authorization))
        return signed

    def signed_head(
        self,
        path: str,
        sign_prefix: str,
        headers: list[tuple[str, str]],
        payload_hash: str,
        body_length: int,
        after_host: int = -1,
        user_agent: str | None = None,
    ) -> bytes:
        """The signed request's whole head, as bytes (the native transport's hot path).

        Within a second, calls to one target mostly carry identical headers
        (the date changes once a second), so everything but the payload
        hash is prepared once per (path, headers, second) in a
        :class:`PresignedHead`, and each call pays for three short hash
        updates and a join.
        """
        presigned = self.presigned(path, sign_prefix, headers, after_host, user_agent)
        return presigned.head(payload_hash, body_length)

    def presigned(
        self,
        path: str,
        sign_prefix: str,
        headers: list[tuple[str, str]],
        after_host: int = -1,
        user_agent: str | None = None,
    ) -> PresignedHead:
        """The head of :meth:`signed_head` signed up to its payload hash, good while
        :meth:`is_current` says so (this second's date, the current credentials)."""
        credentials = self._credentials()
        amz_date = self._clock.now()
        # A caller's own user agent (the sidecar's clients') is part of the head.
        key: tuple[object, ...] = (
            (path, *headers) if user_agent is None else (path, user_agent, *headers)
        )
        head = self._heads.get(key)
        if head is None or head.amz_date != amz_date or head.credentials is not credentials:
            signed = self._with_date(headers, credentials, amz_date, after_host)
            agent = self.user_agent if user_agent is None else user_agent
            head_start = f"POST {path} HTTP/1.1\r\n{header_lines(signed)}user-agent: {agent}\r\n"
            head = self._signer.presign_head(sign_prefix, signed, credentials, amz_date, head_start)
            if len(self._heads) >= _MAX_PRESIGNED_HEADS:
                self._heads.clear()  # rare shapes pile up otherwise
            self._heads[key] = head
        return head

    def is_current(self, head: PresignedHead) -> bool:
        """Whether ``head`` signs a request sent now: this second's date, the current keys."""
        return head.amz_date == self._clock.now() and head.credentials is self._credentials()

    @staticmethod
    def _with_date(
        headers: list[tuple[str, str]], credentials: Credentials, amz_date: str, after_host: int
    ) -> list[tuple[str, str]]:
        """``headers`` with x-amz-date and the session token in their sorted place."""
        position = after_host if after_host >= 0 else _after_host(headers)
        signed = headers[:position]
        signed.append(("x-amz-date", amz_date))
        if credentials.token:
            signed.append(("x-amz-security-token", credentials.token))
        signed += headers[position:]
        return signed


def _after_host(headers: list[tuple[str, str]]) -> int:
    for index, (name, _) in enumerate(headers):
        if name == "host":
            return index + 1
    raise AssertionError("headers lack host")


class PreparedRequest:
    """A request whose signature is computed only when a connection is ready.

    ``headers`` are sorted, signable, with ``host``. They are signed once;
    a transparent resend (the stale keep-alive case) reuses the signature.
    """

    __slots__ = (
        "_final",
        "_head",
        "after_host",
        "body",
        "caller_agent",
        "headers",
        "origin",
        "path",
        "payload_hash",
        "sign_prefix",
        "signer",
    )

    def __init__(
        self,
        origin: Origin,
        path: str,
        sign_prefix: str,
        headers: list[tuple[str, str]],
        body: bytes,
        signer: RequestSigner | None,
        payload_hash: str = "",
        after_host: int = -1,
    ) -> None:
        self.origin = origin
        self.path = path
        self.sign_prefix = sign_prefix
        self.headers = headers
        self.body = body
        self.signer = signer
        self.payload_hash = payload_hash
        self.after_host = after_host
        self._final: list[tuple[str, str]] | None = None
        self._head: bytes | None = None
        # The whole User-Agent when a caller's comes first (ours appended).
        self.caller_agent: str | None = None

    def encoded_head(self) -> bytes:
        """The whole signed head as bytes (native transport); signed once, like final_headers."""
        head = self._head
        if head is None:
            if self.signer is None:
                head = encode_head(self.path, self.headers, len(self.body))
            else:
                if not self.payload_hash:
                    self.payload_hash = payload_sha256(self.body)
                head = self.signer.signed_head(
                    self.path,
                    self.sign_prefix,
                    self.headers,
                    self.payload_hash,
                    len(self.body),
                    self.after_host,
                    self.caller_agent,
                )
            self._head = head
        return head

    def presigned(self) -> PresignedHead:
        """The head this request is signed with, up to its payload hash (a signed request)."""
        assert self.signer is not None
        return self.signer.presigned(
            self.path, self.sign_prefix, self.headers, self.after_host, self.caller_agent
        )

    def sent_as(self, head: bytes, payload_hash: str) -> None:
        """This request was signed and sent as ``head`` (by a caller that signed it itself):
        a resend sends the same head, and the signing keys are read back from it."""
        self._head = head
        self.payload_hash = payload_hash

    def signed_access_key(self) -> str | None:
        """The access key this request was signed with; None before signing or unsigned.

        Read back from the signature only when an answer refuses the credentials.
        """
        text = ""
        if self._head is not None:
            text = self._head.decode("latin-1")
        elif self._final is not None:
            for name, value in self._final:
                if name == "authorization":
                    text = value
        start = text.find(_CREDENTIAL)
        if start < 0:
            return None
        start += len(_CREDENTIAL)
        end = text.find("/", start)
        return text[start:end] if end > start else None

    @property
    def user_agent(self) -> str:
        if self.caller_agent is not None:
            return self.caller_agent
        return USER_AGENT if self.signer is None else self.signer.user_agent

    def final_headers(self) -> list[tuple[str, str]]:
        final = self._final
        if final is None:
            if self.signer is None:
                final = self.headers
            else:
                if not self.payload_hash:
                    self.payload_hash = payload_sha256(self.body)
                final = self.signer.sign(
                    self.sign_prefix, self.headers, self.payload_hash, self.after_host
                )
            self._final = final
        return final
