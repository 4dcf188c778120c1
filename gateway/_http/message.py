# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""HTTP/1.1 messages as the client sends and receives them: origins, heads, raw responses.

Sans-IO and free of SageMaker knowledge: bytes and header pairs in, values out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway import errors
from gateway._host.version import __version__

USER_AGENT = f"sagemaker-gateway/{__version__}"


def user_agent(appid: str | None = None, extra: str | None = None) -> str:
    """The User-Agent: the package's, then ``app/<appid>`` and ``extra`` as botocore adds them."""
    agent = USER_AGENT
    if appid:
        agent += f" app/{appid}"
    if extra:
        agent += f" {extra}"
    return agent


@dataclass(frozen=True, slots=True)
class Origin:
    """Where requests go: scheme, host and port, plus the Host header to send."""

    scheme: str
    host: str
    port: int
    host_header: str

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @classmethod
    def from_url(cls, url: str) -> Origin:
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in ("http", "https"):
            raise errors.ConfigError(f"endpoint_url must start with http:// or https://: {url!r}")
        authority = rest.split("/", 1)[0]
        host, port_sep, port_text = authority.rpartition(":")
        if not port_sep or "]" in port_text:
            host, port_text = authority, ""
        if not host:
            raise errors.ConfigError(f"endpoint_url has no host: {url!r}")
        default_port = 443 if scheme == "https" else 80
        try:
            port = int(port_text) if port_text else default_port
        except ValueError:
            raise errors.ConfigError(f"endpoint_url has a bad port: {url!r}") from None
        if not 0 < port < 65536 or (port_text and not port_text.isdigit()):
            raise errors.ConfigError(f"endpoint_url has a bad port: {url!r}")
        host_header = host if port == default_port else f"{host}:{port}"
        return cls(scheme, host.strip("[]"), port, host_header)


def header_lines(headers: Sequence[tuple[str, str]]) -> str:
    """``name: value`` lines of an HTTP head, each ending in CRLF."""
    return "".join([f"{name}: {value}\r\n" for name, value in headers])


def encode_head(path: str, headers: list[tuple[str, str]], body_length: int) -> bytes:
    """A POST head; header order on the wire follows ``headers``."""
    return (
        f"POST {path} HTTP/1.1\r\n{header_lines(headers)}user-agent: {USER_AGENT}\r\n"
        f"content-length: {body_length}\r\n\r\n"
    ).encode("latin-1")


RawHeaders = list[tuple[bytes, bytes]]


def split_head(head: bytes) -> RawHeaders:
    """The (name, value) pairs of a raw response head; values stripped.

    The head was already accepted by httptools, so this only splits it. An
    obs-fold continuation line joins the previous value with one space.
    """
    pairs: RawHeaders = []
    for line in head.split(b"\n")[1:]:
        line = line.rstrip(b"\r")
        if line[:1] in (b" ", b"\t") and pairs:
            name, value = pairs[-1]
            pairs[-1] = (name, value + b" " + line.strip())
            continue
        name, _, value = line.partition(b":")
        pairs.append((name, value.strip()))
    return pairs


class RawResponse:
    """A complete HTTP response.

    The native transport hands over the response head undecoded (``raw``:
    the status line and header lines exactly as received, without the blank
    line that ends them); the lower-cased ``headers`` dict is built only if
    someone asks (error decoding does, the success path does not).
    """

    __slots__ = ("_headers", "body", "raw", "status")

    def __init__(
        self,
        status: int,
        headers: dict[str, str] | None,
        body: bytes,
        raw: bytes | None = None,
    ) -> None:
        self.status = status
        self._headers = headers
        self.body = body
        self.raw = raw

    @property
    def headers(self) -> dict[str, str]:
        headers = self._headers
        if headers is None:
            headers = self._headers = headers_from_raw(self.raw or b"")
        return headers

    def __repr__(self) -> str:
        return f"RawResponse(status={self.status}, body={self.body[:64]!r})"


def headers_from_raw(head: bytes) -> dict[str, str]:
    """A raw response head as a dict: lower-case names, repeated headers joined by ","."""
    headers: dict[str, str] = {}
    for name, value in split_head(head):
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = headers.get(key)
        headers[key] = text if previous is None else f"{previous},{text}"
    return headers
