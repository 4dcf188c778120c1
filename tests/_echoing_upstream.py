"""A real HTTP upstream that echoes a call's secrets into one field of its answer.

Shared by the library and sidecar tests that an echoed ``CustomAttributes`` or
``CustomerIdentityToken`` reaches no error text or attribute, event, metric, log line or
span. It speaks the three runtimes' paths; ``into`` picks where the secret goes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson

from gateway._aws.eventstream import encode_exception, encode_payload_part

# Identifier-shaped (a well-formed code), hex-dash-shaped (a well-formed request id) and a
# JWT: each must be caught as a secret, not merely as a malformed value.
SECRETS = {
    "identifier": "TenantSecret7f3a9c",
    "hexdash": "5ec12e7a-0b5e-4d11-9a7c-c0ffee000001",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYWxsZXIifQ.c2VjcmV0c2ln",
}
REQUEST_ID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
_SENSITIVE = ("x-amzn-sagemaker-custom-attributes", "x-amzn-sagemaker-customer-identity-token")

# Where the secret goes: an error's request id, its code (header or body), its message,
# a ModelError's own fields, a ResourceNotFound's resource, a stream's error event and its
# type, and a successful answer's request id.
ERROR_FIELDS = ("request_id", "error_type", "type_body", "message", "model_error")
RUNTIME_FIELDS = ("resource",)
STREAM_FIELDS = ("stream_event", "stream_type")
OK_FIELDS = ("ok_request_id",)


@dataclass
class EchoingUpstream:
    into: str = "message"  # the field the secret is echoed into
    port: int = 0
    seen: list[str] = field(default_factory=list)  # the secrets it was sent
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1]
                headers = {}
                for line in lines[1:]:
                    name, sep, value = line.partition(":")
                    if sep:
                        headers[name.strip().lower()] = value.strip(" \t")
                await reader.readexactly(int(headers.get("content-length", "0")))
                secret = next((headers[h] for h in _SENSITIVE if h in headers), "")
                self.seen.append(secret)
                writer.write(self.answer(path, secret))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def answer(self, path: str, secret: str) -> bytes:
        runtime = not path.startswith("/endpoints/")
        stream = path.endswith("-response-stream")
        queued = path.endswith("/async-invocations")
        validation = "ValidationException" if runtime else "ValidationError"
        kind = self.into
        if kind == "ok_request_id" or (kind in STREAM_FIELDS and not stream):
            request_id = secret if kind == "ok_request_id" else REQUEST_ID
            if stream:
                body = encode_payload_part(b"part")
                return _response(200, "application/vnd.amazon.eventstream", body, request_id)
            if queued:
                body = orjson.dumps({"InferenceId": "i-1"})
                return _response(202, "application/json", body, request_id)
            return _response(200, "application/json", b'{"ok": 1}', request_id)
        if kind in STREAM_FIELDS:
            if kind == "stream_event":
                event = encode_exception(
                    "ModelStreamError", {"Message": f"broke on {secret}", "ErrorCode": secret}
                )
            else:
                event = encode_exception(secret, {"Message": f"failed: {secret}"})
            body = encode_payload_part(b"part") + event
            return _response(200, "application/vnd.amazon.eventstream", body, REQUEST_ID)
        if kind == "request_id":
            body = orjson.dumps({"message": "bad request"})
            return _response(400, "application/json", body, secret, validation)
        if kind == "error_type":
            body = orjson.dumps({"message": "bad request"})
            return _response(400, "application/json", body, REQUEST_ID, secret + ":http://x/")
        if kind == "type_body":
            body = orjson.dumps({"__type": f"com.amazon.coral#{secret}", "message": "bad"})
            return _response(400, "application/json", body, REQUEST_ID)
        if kind == "message":
            body = orjson.dumps({"message": f"bad value {secret} here", "Message": secret})
            return _response(400, "application/json", body, REQUEST_ID, validation)
        if kind == "model_error":
            body = orjson.dumps(
                {
                    "Message": f"Received client error (400) from primary: {secret}",
                    "message": f"Received client error (400) from primary: {secret}",
                    "OriginalStatusCode": 400,
                    "OriginalMessage": secret,
                    "LogStreamArn": f"arn:aws:logs:us-east-1:123456789012:log-group:x:{secret}",
                    "ErrorCode": secret,
                }
            )
            return _response(424, "application/json", body, REQUEST_ID, "ModelError")
        if kind == "resource":
            body = orjson.dumps(
                {"Message": "no such model", "ResourceId": secret, "ResourceType": secret}
            )
            return _response(404, "application/json", body, REQUEST_ID, "ResourceNotFoundException")
        raise AssertionError(f"unknown field {kind}")


def _response(
    status: int, content_type: str, body: bytes, request_id: str, error_type: str | None = None
) -> bytes:
    head = [
        f"HTTP/1.1 {status} X",
        f"content-type: {content_type}",
        f"content-length: {len(body)}",
        f"x-amzn-RequestId: {request_id}",
    ]
    if error_type is not None:
        head.append(f"x-amzn-ErrorType: {error_type}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


@contextlib.asynccontextmanager
async def echoing_upstream() -> AsyncIterator[EchoingUpstream]:
    upstream = EchoingUpstream()
    upstream._server = await asyncio.start_server(upstream._serve, "127.0.0.1", 0)
    upstream.port = upstream._server.sockets[0].getsockname()[1]
    try:
        yield upstream
    finally:
        upstream._server.close()
        for writer in list(upstream._writers):
            writer.close()
        await upstream._server.wait_closed()
        await asyncio.sleep(0)


def holds(text: str, secret: str) -> bool:
    """Whether ``text`` shows ``secret`` (whole, or its JSON- or repr-escaped form)."""
    return secret in text or orjson.dumps(secret).decode()[1:-1] in text
