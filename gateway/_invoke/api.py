# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The SageMaker Runtime vocabulary: request headers, validation, results, rest-json errors.

Sans-IO: header pairs and bytes in, typed values out. The transports under
``gateway/_http`` move the bytes; this module knows what they mean.

The vocabulary itself (``operation_table()``: every operation's path, request
and response members, their keywords, headers, bounds and signing order,
keyed by (service, operation)) is read from botocore's service models at
import, so Gateway, ``gateway.compat``, the sidecar, the cache key and the
emulator share one table. A call carries its members as one tuple in the
operation's signing order (``Operation.headers``): a member botocore adds is
sent, relayed and keyed with no code change.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Final

import botocore
import botocore.session
import orjson
from botocore import xform_name

from gateway import errors
from gateway._aws.models import member_since
from gateway._http.message import Origin, RawResponse, headers_from_raw, split_head
from gateway._http.request import PreparedRequest, RequestSigner

if TYPE_CHECKING:
    from typing_extensions import Buffer

MAX_PAYLOAD_BYTES = 6 * 1024 * 1024


# SageMaker endpoint names: letters, digits and inner hyphens, at most 63.
_ENDPOINT_NAME = re.compile(r"[a-zA-Z0-9](?:-*[a-zA-Z0-9]){0,62}")
# A Global Inference Gateway's id: lower-case letters and digits, at most 64.
_GATEWAY_ID = re.compile(r"[a-z0-9]{1,64}")
# A header value may hold any visible Latin-1 character, space and tab, but
# never CR, LF or NUL: those would let a caller inject headers. Other control
# characters are not valid in a field value either (RFC 9110 5.5).
_FORBIDDEN_IN_HEADER = re.compile(r"[\r\n\x00]")
_CONTROL_IN_HEADER = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]")


# -- the vocabulary, from botocore's service model ------------------------------

SERVICE_NAME = "sagemaker-runtime"
# The runtimes the table holds, each loaded when the installed botocore has its model.
SERVICE_NAMES = (
    SERVICE_NAME,
    "sagemaker-inference-router-runtime",
    "sagemaker-gateway-runtime",
)
# Members that cannot change a model's answer, and so stay out of the prediction
# cache's key: InferenceId only labels the call in SageMaker's logs and output.
# (A call with a SessionId is never answered from the cache at all.)
NOT_IN_CACHE_KEY = frozenset({"InferenceId"})
# Members whose values are the caller's secrets: no error, event, log, metric or span
# carries them, whatever an upstream echoes (see "redaction at decode" below).
SENSITIVE: Final = ("CustomerIdentityToken", "CustomAttributes")
# Keywords that differ from botocore's snake_case of the member name (kept
# for the callers that already use them).
_KEYWORD_OVERRIDES = {
    "InferenceComponentName": "inference_component",
    "RoutingTargetName": "routing_target",
}


@dataclass(frozen=True, slots=True)
class Member:
    """One request or response member of an operation, as the service model defines it."""

    name: str  # botocore's parameter name: "TargetModel"
    keyword: str  # Gateway's keyword argument: "target_model"
    location: str  # "header", "uri" or "body" (the payload, or a JSON body member)
    header: str  # the wire header, lower-case ("" when not a header)
    wire_header: str  # the header as the model spells it ("X-Amzn-SageMaker-Target-Model")
    kind: str  # "string", "integer", "blob" or "structure" (an event stream)
    required: bool
    min_length: int  # strings: length bounds; integers: value bounds
    max_length: int | None


# A call's request headers: those before ``host`` and those after it (never mutated).
RequestHeaders = tuple[tuple[tuple[str, str], ...], list[tuple[str, str]]]


@dataclass(frozen=True, slots=True)
class Service:
    """One runtime service of the table: where its hosts are and how it is signed."""

    name: str  # botocore's service name: "sagemaker-runtime"
    endpoint_prefix: str  # the host's leading labels: "runtime.sagemaker"
    signing_name: str  # SigV4's service: "sagemaker"


@dataclass(frozen=True, slots=True)
class Operation:
    """One runtime operation: its path, request and response members.

    A call's members travel as one tuple aligned with ``headers`` (signing
    order, None where unset); ``header_index`` finds a header's place in it.
    """

    service: Service
    name: str  # "InvokeEndpoint"
    uri: str  # "/endpoints/{EndpointName}/invocations"
    uri_member: str  # the member the path names: "EndpointName"
    action: str  # the path after its last "/"
    success_status: int
    request: tuple[Member, ...]  # in the model's order
    response: tuple[Member, ...]
    errors: tuple[str, ...]
    # Request headers in SigV4's signing order (sorted by lower-case name), and
    # split where ``host`` goes between them.
    headers: tuple[Member, ...]
    before_host: tuple[Member, ...]
    after_host: tuple[Member, ...]
    by_name: Mapping[str, Member]
    by_keyword: Mapping[str, Member]
    by_header: Mapping[str, Member]
    header_index: Mapping[str, int]  # lower-case header -> its place in ``headers``
    name_index: Mapping[str, int]  # member name -> its place in ``headers``
    # Places in ``headers`` of the members the cache key covers (all but NOT_IN_CACHE_KEY).
    keyed: tuple[int, ...]
    per_call: tuple[int, ...]  # places of members unique to a call (InferenceId): not memoised
    sensitive: tuple[int, ...]  # places of members whose values are secrets (see SENSITIVE)
    before_host_memo: dict[tuple[object, ...], tuple[tuple[str, str], ...]]
    headers_memo: dict[tuple[object, ...], RequestHeaders]
    input_shape: Any  # botocore's (compat validates with it, as botocore does)

    def path(self, name: str) -> str:
        """The request path for the resource ``name`` (an endpoint, a router...)."""
        return self.uri.replace("{" + self.uri_member + "}", name)

    def index(self, member: str) -> int:
        """The place of header member ``member`` in a call's member tuple (-1: none)."""
        return self.name_index.get(member, -1)

    def values(self, members: Mapping[str, object]) -> tuple[object, ...]:
        """Header members by name (None: unset) as the call's member tuple."""
        return tuple([members.get(member.name) for member in self.headers])


class MemberOrder:
    """A typed method's members, named in the method's own order, placed by name into
    the installed model's member tuple (:attr:`Operation.headers` order).

    The model decides which members an operation has: a member it lacks that the call
    sets is :class:`~gateway.errors.MemberUnavailable`, never dropped or shifted into
    a neighbour's header; a member it has that the method does not name stays unset.
    When the method's names are the model's, in its order, the call's tuple is used
    as it is.
    """

    __slots__ = ("_places", "names", "operation", "same")

    def __init__(self, operation: Operation, names: tuple[str, ...]) -> None:
        self.operation = operation
        self.names = names
        self._places = tuple([operation.index(name) for name in names])
        self.same = names == tuple([member.name for member in operation.headers])

    def secrets(self, values: tuple[object, ...]) -> tuple[str, ...]:
        """The secrets among ``values`` (see :func:`secrets_in`)."""
        return secrets_named(self.names, values)

    def place(self, values: tuple[object, ...]) -> tuple[object, ...]:
        """``values`` (one per name, None: unset) as the operation's member tuple."""
        if self.same:
            return values
        placed: list[object] = [None] * len(self.operation.headers)
        for name, place, value in zip(self.names, self._places, values, strict=True):
            if value is None:
                continue
            if place < 0:
                raise _member_unavailable(self.operation, name)
            placed[place] = value
        return tuple(placed)


def _member_unavailable(operation: Operation, member: str) -> errors.MemberUnavailable:
    service = operation.service.name
    required = member_since(service, operation.name, member)
    installed = str(botocore.__version__)
    if _release(installed) >= _release(required):
        required = ""  # a newer model than this library knows, without the member
    return errors.MemberUnavailable(service, operation.name, member, required, installed)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _member(name: str, shape: Any, required: bool) -> Member:
    serialization = shape.serialization
    location = serialization.get("location") or "body"
    wire_header = serialization.get("name", "") if location == "header" else ""
    metadata = shape.metadata
    return Member(
        name=name,
        keyword=_KEYWORD_OVERRIDES.get(name) or xform_name(name),
        location=location,
        header=wire_header.lower(),
        wire_header=wire_header,
        kind=shape.type_name,
        required=required,
        min_length=int(metadata.get("min", 0)),
        max_length=int(metadata["max"]) if "max" in metadata else None,
    )


def _operation(service: Service, model: Any) -> Operation:
    request_shape, response_shape = model.input_shape, model.output_shape
    required = set(request_shape.required_members)
    request = tuple(_member(n, s, n in required) for n, s in request_shape.members.items())
    response = tuple(_member(n, s, False) for n, s in response_shape.members.items())
    headers = tuple(sorted((m for m in request if m.header), key=lambda m: m.header))
    uri = model.http["requestUri"]
    uri_member = next((m.name for m in request if m.location == "uri"), "")
    return Operation(
        service=service,
        name=model.name,
        uri=uri,
        uri_member=uri_member,
        action=uri.rsplit("/", 1)[-1],
        success_status=int(model.http.get("responseCode", 200)),
        request=request,
        response=response,
        errors=tuple(shape.name for shape in model.error_shapes),
        headers=headers,
        before_host=tuple(m for m in headers if m.header < "host"),
        after_host=tuple(m for m in headers if m.header > "host"),
        by_name={m.name: m for m in request},
        by_keyword={m.keyword: m for m in request},
        by_header={m.header: m for m in headers},
        header_index={m.header: i for i, m in enumerate(headers)},
        name_index={m.name: i for i, m in enumerate(headers)},
        keyed=tuple(i for i, m in enumerate(headers) if m.name not in NOT_IN_CACHE_KEY),
        per_call=tuple(i for i, m in enumerate(headers) if m.name in NOT_IN_CACHE_KEY),
        sensitive=tuple(i for i, m in enumerate(headers) if m.name in SENSITIVE),
        before_host_memo={},
        headers_memo={},
        input_shape=request_shape,
    )


def _load_table() -> dict[tuple[str, str], Operation]:
    session = botocore.session.get_session()
    available = set(session.get_available_services())
    table: dict[tuple[str, str], Operation] = {}
    for service_name in SERVICE_NAMES:
        if service_name not in available:
            continue  # an older botocore: that runtime is not in the table
        model = session.get_service_model(service_name)
        metadata = model.metadata
        service = Service(
            service_name,
            metadata["endpointPrefix"],
            metadata.get("signingName") or metadata["endpointPrefix"],
        )
        for name in model.operation_names:
            table[(service_name, name)] = _operation(service, model.operation_model(name))
    return table


# Loaded once, at import (botocore's loader reads one JSON file per service: milliseconds).
_TABLE = _load_table()
_OPERATIONS = {name: op for (service, name), op in _TABLE.items() if service == SERVICE_NAME}
# The wire headers of the sensitive members, in every runtime.
_SENSITIVE_HEADERS: Final = frozenset(
    m.header for op in _TABLE.values() for m in op.headers if m.name in SENSITIVE
)


def operation_table() -> Mapping[tuple[str, str], Operation]:
    """Every operation of every runtime in :data:`SERVICE_NAMES`, by (service, operation)."""
    return _TABLE


def operations() -> Mapping[str, Operation]:
    """Every operation of botocore's ``sagemaker-runtime`` model, by name."""
    return _OPERATIONS


INVOKE: Final = operations()["InvokeEndpoint"]
INVOKE_STREAM: Final = operations()["InvokeEndpointWithResponseStream"]
INVOKE_ASYNC: Final = operations()["InvokeEndpointAsync"]
# The newer runtimes' operations, by name: the installed botocore may lack their models
# (a call then names the release it needs).
INVOKE_ROUTER: Final = "InvokeInferenceRouter"
INVOKE_ROUTER_ASYNC: Final = "InvokeInferenceRouterAsync"
INVOKE_GLOBAL_GATEWAY: Final = "InvokeGlobalInferenceGateway"
INVOKE_GLOBAL_GATEWAY_STREAM: Final = "InvokeGlobalInferenceGatewayWithResponseStream"
# InvokeEndpointAsync's inline Body joined botocore's model in 1.43.29; older models (awscli v1
# pins one) lack it, and the service still takes up to 128,000 bytes inline.
_ASYNC_BODY = INVOKE_ASYNC.by_name.get("Body")
MAX_ASYNC_BODY_BYTES = (_ASYNC_BODY.max_length if _ASYNC_BODY else None) or 128_000


def check_value(member: Member, value: str) -> str:
    """A request header's value checked against the model and HTTP; the value to send."""
    value = check_header_value(member.name, value)
    if len(value) < member.min_length:
        raise errors.InvalidRequest(
            f"{member.name}: must be at least {member.min_length} character(s) long"
        )
    if member.max_length is not None and len(value) > member.max_length:
        raise errors.InvalidRequest(
            f"{member.name}: {len(value)} characters, at most {member.max_length} allowed"
        )
    return value


def check_integer(member: Member, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.InvalidRequest(f"{member.name}: must be an integer, got {value!r}")
    if value < member.min_length or (member.max_length is not None and value > member.max_length):
        raise errors.InvalidRequest(
            f"{member.name}: {value} is outside {member.min_length}..{member.max_length}"
        )
    return str(value)


# -- the request head -------------------------------------------------------------
#
# One call's head, in SigV4's signing order (sorted by lower-case name):
#
#   POST /endpoints/{name}/{action} HTTP/1.1
#   <members before host>    accept, content-type (InvokeEndpoint; the others send
#                             theirs as x-amzn-sagemaker-*)   <- before_host_headers
#   host                                                      <- request_for
#   x-amz-date, x-amz-security-token                          <- RequestSigner, at send time
#   <members after host>     x-amzn-sagemaker-*                <- sagemaker_headers
#   user-agent, authorization, content-length                 <- RequestSigner, at send time
#
# request_for assembles the unsigned part; the transport has the signer sign it
# when a connection is ready (a request that waited for one keeps a fresh date).

# Validated before-host headers are remembered per operation (Operation.before_host_memo):
# most callers send the same few content types, so each is checked once.
_MAX_BEFORE_HOST = 4096


def before_host_headers(
    operation: Operation, values: tuple[object, ...]
) -> tuple[tuple[str, str], ...]:
    """The members' headers that sort before ``host`` (``accept``, ``content-type``), checked.

    ``values`` is the call's member tuple (see :class:`Operation`); None is
    left out. A shape seen before is not checked again.
    """
    members = operation.before_host
    key = values[: len(members)]
    memo = operation.before_host_memo
    headers = memo.get(key)
    if headers is None:
        headers = tuple(
            [
                (member.header, check_value(member, str(value)))
                for member, value in zip(members, key, strict=True)
                if value is not None
            ]
        )
        if len(memo) < _MAX_BEFORE_HOST:
            memo[key] = headers
    return headers


def sagemaker_headers(operation: Operation, values: tuple[object, ...]) -> list[tuple[str, str]]:
    """The headers after ``host`` (``x-amzn-sagemaker-*``) for ``values``, in signing order.

    ``values`` is the call's member tuple; None is left out; every value is
    checked against the model.
    """
    headers: list[tuple[str, str]] = []
    members = operation.headers
    for index in range(len(operation.before_host), len(members)):
        value = values[index]
        if value is None:
            continue
        member = members[index]
        if member.kind == "integer":
            headers.append((member.header, check_integer(member, value)))
        else:
            headers.append((member.header, check_value(member, str(value))))
    return headers


def request_headers(operation: Operation, values: tuple[object, ...]) -> RequestHeaders:
    """:func:`before_host_headers` and :func:`sagemaker_headers` of a call, checked once per shape.

    Most calls repeat a few member tuples, so both lists are remembered per
    tuple (not when a member unique to the call, such as InferenceId, is set).
    """
    memo = operation.headers_memo
    headers = memo.get(values)
    if headers is None:
        headers = (before_host_headers(operation, values), sagemaker_headers(operation, values))
        for index in operation.per_call:
            if values[index] is not None:
                return headers
        if len(memo) >= _MAX_BEFORE_HOST:
            memo.clear()
        memo[values] = headers
    return headers


def request_for(
    origin: Origin,
    path: str,
    sign_prefix: str,
    signer: RequestSigner,
    before_host: tuple[tuple[str, str], ...],
    after_host: list[tuple[str, str]],
    body: bytes,
    payload_hash: str = "",
) -> PreparedRequest:
    """The one place a SageMaker request's head is assembled, for every operation.

    ``before_host`` and ``after_host`` are the members' headers from
    :func:`before_host_headers` and :func:`sagemaker_headers`; ``host`` goes
    between them. ``signer`` adds the SigV4 headers (``x-amz-date`` and the
    token just past ``host``, then ``authorization``) and encodes the whole
    head when the transport has a connection for it
    (:meth:`PreparedRequest.encoded_head`).
    """
    headers = [*before_host, ("host", origin.host_header), *after_host]
    return PreparedRequest(
        origin, path, sign_prefix, headers, body, signer, payload_hash, len(before_host) + 1
    )


def check_endpoint_name(name: str, kind: str = "endpoint name") -> None:
    # The pattern's repetition counts hyphen runs as one step: check the length too.
    if len(name) > 63 or not _ENDPOINT_NAME.fullmatch(name):
        raise errors.InvalidRequest(
            f"invalid {kind} {name[:80]!r}: letters, digits and hyphens, at most 63"
        )


def check_router_name(name: str) -> None:
    """An inference router's name: the model's pattern is an endpoint name's."""
    check_endpoint_name(name, "inference router name")


def check_gateway_id(name: str) -> None:
    if not _GATEWAY_ID.fullmatch(name):
        raise errors.InvalidRequest(
            f"invalid Global Inference Gateway id {name[:80]!r}: "
            "lower-case letters and digits, at most 64"
        )


def check_header_value(name: str, value: str) -> str:
    """Refuse values that would corrupt or inject headers; return the trimmed value."""
    if _FORBIDDEN_IN_HEADER.search(value):
        raise errors.InvalidHeaderValue(f"header {name} contains CR, LF or NUL")
    if _CONTROL_IN_HEADER.search(value):
        raise errors.InvalidHeaderValue(f"header {name} contains a control character")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        raise errors.InvalidHeaderValue(f"header {name} is not Latin-1 text") from None
    # Sent as given, as boto3 sends it: only the whitespace around it goes, which is no
    # part of a field value (RFC 9110 5.5). SigV4's canonical form folds the runs inside
    # (the signer does that); the model reads the caller's bytes.
    return value.strip(" \t")


def payload_bytes(body: Buffer, limit: int = MAX_PAYLOAD_BYTES, operation: str = "") -> bytes:
    """A call's body as bytes, refused with InvalidRequest when it is not binary (BodyTooLarge,
    an InvalidRequest, when it is too large).

    Typed as a buffer, not ``bytes``: a compiled build checks a ``bytes``
    parameter itself and would raise a bare TypeError for a ``str``.
    """
    if isinstance(body, bytes):
        if len(body) <= limit:
            return body  # the common call
        payload = body
    elif isinstance(body, bytearray | memoryview):
        payload = bytes(body)
    else:
        kind = type(body).__name__
        hint = " (encode it first, e.g. text.encode())" if isinstance(body, str) else ""
        raise errors.InvalidRequest(f"Body: must be bytes, got {kind}{hint}")
    if len(payload) > limit:
        where = f"{operation}'s limit" if operation else "SageMaker's limit"
        raise errors.BodyTooLarge(f"Body: {len(payload)} bytes exceeds {where} of {limit}")
    return payload


# The shapes of an operation's answer (see answer_of).
BODY: Final = "body"
STREAM: Final = "stream"
QUEUED: Final = "queued"


_ANSWERS: Final[dict[str, str]] = {}


def answer_of(operation: Operation) -> str:
    """What a call of ``operation`` answers: a body, an event stream, or a queued
    invocation (no body: the output lands in S3)."""
    answer = _ANSWERS.get(operation.name)
    if answer is None:
        body = next((m for m in operation.response if m.name == "Body"), None)
        answer = QUEUED if body is None else STREAM if body.kind == "structure" else BODY
        _ANSWERS[operation.name] = answer
    return answer


def body_limit(operation: Operation) -> int:
    """The largest body the operation takes: its model's, else SageMaker's documented one."""
    body = operation.by_name.get("Body")
    limit = body.max_length if body is not None else None
    if limit:
        return limit
    # A model without the member (InvokeEndpointAsync's inline Body before botocore
    # 1.43.29) still has the service's limit.
    return MAX_ASYNC_BODY_BYTES if operation.name == "InvokeEndpointAsync" else MAX_PAYLOAD_BYTES


def check_payload(body: bytes) -> None:
    payload_bytes(body)


# InvokeResult's attribute for a response member, where it is not the member's keyword.
_RESULT_ATTRIBUTES: Final = {"InvokedProductionVariant": "invoked_variant"}
# InvokeEndpoint's header-bound output members, each with the InvokeResult field
# that holds it: what a relay or compat answers with, read from the model.
RESULT_MEMBERS: Final = tuple(
    (m, _RESULT_ATTRIBUTES.get(m.name, m.keyword))
    for m in INVOKE.response
    if m.location == "header"
)
# An inference router's own answer headers (no other runtime sends them).
_ROUTER_FIELDS: Final = (
    ("x-amzn-sagemaker-invoked-routed-resource-arn", "routed_resource_arn"),
    ("x-amzn-sagemaker-invoked-routing-reason", "routing_reason"),
)
# Response headers InvokeResult reads, by the raw lower-case name: those members,
# an inference router's (where it sent the call, and why), then the request id.
_RESULT_FIELDS: Final = {
    **{m.header.encode(): field for m, field in RESULT_MEMBERS},
    **{header.encode(): field for header, field in _ROUTER_FIELDS},
    b"x-amzn-requestid": "request_id",
}
_RESULT_HEADER_FIELDS: Final = tuple(
    (name.decode("latin-1"), field) for name, field in _RESULT_FIELDS.items()
)
# The fields the constructor takes, in its order.
_FIELD_NAMES = (
    "content_type",
    "invoked_variant",
    "custom_attributes",
    "request_id",
    "new_session_id",
    "closed_session_id",
)
_NO_FIELDS = (None,) * len(_FIELD_NAMES)
_REQUEST_ID: Final = b"x-amzn-requestid"
_FOLD_STARTS: Final = (32, 9)  # space, tab: a line starting with one continues the last
# The start of a request id's header line in a lower-cased head (never the status line).
_REQUEST_ID_LINE: Final = b"\n" + _REQUEST_ID + b":"


# Each field InvokeResult reads gets a bit: field_lines finds a field sent twice
# with an int test, not a scan of the names kept so far.
_FIELD_BITS: Final = {name: 1 << index for index, name in enumerate(_RESULT_FIELDS)}
_REQUEST_ID_BIT: Final = _FIELD_BITS[_REQUEST_ID]
# Header names as upstreams spell them -> their field's bit (0: a field no result
# reads), so that the common ones cost one look-up rather than a lower() call
# and a second look-up each. Fixed at import: names received never grow it.
_SPELLINGS: Final = {
    spelling: _FIELD_BITS.get(spelling.lower(), 0)
    for name in (
        *(m.wire_header for m, _ in RESULT_MEMBERS),
        *(m.header for m, _ in RESULT_MEMBERS),
        *(header for header, _ in _ROUTER_FIELDS),
        "x-amzn-RequestId",
        "X-Amzn-RequestId",
        "X-Amzn-Invoked-Production-Variant",
        "Date",
        "Content-Length",
        "Server",
        "Connection",
        "Keep-Alive",
        "Transfer-Encoding",
    )
    for spelling in (name.encode("latin-1"), name.lower().encode("latin-1"))
}
# What a head copied into another must not hold beyond its CRLF pairs: a bare
# CR or LF (a line break that copying and reading could split differently), a NUL.
_UNSAFE_BYTES: Final = b"\r\n\0"


# field_lines in C (gateway/_http/_heads.c) where it was built: one pass over the head,
# a few hundred instructions where the Python version below takes about 2,500 a line.
def _bound_field_lines() -> Callable[[bytes], bytes | None] | None:
    try:
        from gateway._http import _heads
    except ImportError:
        return None
    _heads.bind_fields(tuple(_FIELD_BITS), list(_FIELD_BITS).index(_REQUEST_ID))
    return _heads.field_lines


# Final: compiled, a C static rather than a look-up in the module's dict per call.
_native_field_lines: Final = _bound_field_lines()
NATIVE_FIELD_LINES = _native_field_lines is not None


def _colon_in(line: bytes) -> int:
    """Where the first ``:`` of ``line`` is (its length if none): a field name's end.

    Compiled, a loop over a name's few bytes costs less than the generic call
    that ``partition`` is, once per header line of every answer.
    """
    size = len(line)
    for index in range(size):
        if line[index] == 58:  # ":"
            return index
    return size


class InvokeResult:
    """What InvokeEndpoint returned, plus where and how the gateway got it.

    The header-derived fields (``content_type``, ``invoked_variant``,
    ``custom_attributes``, ``request_id``, ``new_session_id``,
    ``closed_session_id``) are decoded on first access: a caller that only
    reads ``body`` never pays for them.
    """

    __slots__ = ("_fields", "_raw", "attempts", "body", "cache", "hedged", "target")

    def __init__(
        self,
        body: bytes,
        content_type: str | None = None,
        *,
        invoked_variant: str | None = None,
        custom_attributes: str | None = None,
        request_id: str | None = None,
        new_session_id: str | None = None,
        closed_session_id: str | None = None,
        target: str | None = None,
        hedged: bool = False,
        attempts: int = 1,
        cache: str | None = None,
    ) -> None:
        self.body = body
        self.target = target  # the SageMaker endpoint that answered
        self.hedged = hedged  # a hedge attempt was sent during this call
        self.attempts = attempts
        self.cache = cache  # "near", "redis", "stale", "coalesced" or None
        self._raw: bytes | None = None  # a response head, decoded into _fields on first read
        given = (
            content_type,
            invoked_variant,
            custom_attributes,
            request_id,
            new_session_id,
            closed_session_id,
        )
        # None: decode the fields from _raw on first read (the hot path sets _raw).
        self._fields: dict[str, str] | None = None
        if given != _NO_FIELDS:
            self._fields = {
                name: value
                for name, value in zip(_FIELD_NAMES, given, strict=True)
                if value is not None
            }

    @classmethod
    def from_fields(
        cls, body: bytes, fields: dict[str, str], target: str | None, cache: str | None
    ) -> InvokeResult:
        """A result from already-decoded fields (a cached answer): no parsing at all."""
        result = cls(body, target=target, attempts=0, cache=cache)
        result._fields = fields
        return result

    def _field(self, name: str) -> str | None:
        fields = self._fields
        if fields is None:
            fields = self._fields = {}
            for raw_name, raw_value in split_head(self._raw or b""):
                field_name = _RESULT_FIELDS.get(raw_name.lower())
                if field_name is not None:
                    fields[field_name] = raw_value.decode("latin-1")
        return fields.get(name)

    def field(self, keyword: str) -> str | None:
        """A header-bound response member by its keyword (``"new_session_id"``), or None."""
        return self._field(keyword)

    @property
    def content_type(self) -> str | None:
        return self._field("content_type")

    @property
    def invoked_variant(self) -> str | None:
        return self._field("invoked_variant")

    @property
    def custom_attributes(self) -> str | None:
        return self._field("custom_attributes")

    @property
    def request_id(self) -> str | None:
        """The answer's ``x-amzn-RequestId``; ``other`` when it is not well-formed."""
        raw = self._raw
        if self._fields is None and raw is not None:
            # Every call's CallFinished event reads it: found by searching the
            # head, not by decoding every field (which a relay never needs).
            return safe_request_id(_request_id_of(raw))
        return safe_request_id(self._field("request_id"))

    @property
    def routed_resource_arn(self) -> str | None:
        """An inference router's answer: the endpoint or inference component it invoked."""
        return self._field("routed_resource_arn")

    @property
    def routing_reason(self) -> str | None:
        """An inference router's answer: why it chose that destination (``local-preferred``...)."""
        return self._field("routing_reason")

    @property
    def new_session_id(self) -> str | None:
        return self._field("new_session_id")

    @property
    def closed_session_id(self) -> str | None:
        return self._field("closed_session_id")

    @property
    def headers(self) -> Mapping[str, str]:
        """Every response header, lower-case names (empty for cached answers)."""
        return headers_from_raw(self._raw) if self._raw is not None else {}

    def field_lines(self) -> bytes | None:
        """The fields' header lines exactly as the upstream sent them, each ending in CRLF.

        For a relay (the sidecar) that answers with the same fields: it copies
        these bytes instead of decoding each field and encoding it again. They
        are safe to copy into another head: None where copying could differ
        from reading the fields or could smuggle a line, namely no received
        head (a cached answer), a bare CR or LF, a NUL, a folded line, or a
        field sent twice (reading keeps the last); and None without a request
        id, which a relay must then make up (SageMaker always sends one).
        """
        raw = self._raw
        return None if raw is None else field_lines(raw)

    def _public(self) -> tuple[object, ...]:
        fields = tuple(self._field(name) for name in _FIELD_NAMES)
        return (self.body, *fields, self.target, self.hedged, self.attempts, self.cache)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InvokeResult):
            return NotImplemented
        return self._public() == other._public()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaced

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{name}={value!r}"
            for name, value in zip(
                ("body", *_FIELD_NAMES, "target", "hedged", "attempts", "cache"),
                self._public(),
                strict=True,
            )
        )
        return f"InvokeResult({parts})"


def field_lines(raw: bytes) -> bytes | None:
    """:meth:`InvokeResult.field_lines` of a received head (``RawResponse.raw``)."""
    native = _native_field_lines
    if native is not None:
        return native(raw)
    return python_field_lines(raw)


def python_field_lines(raw: bytes) -> bytes | None:
    """:func:`field_lines` in Python: where ``_heads.c`` is not built, and its reference."""
    lines = raw.split(b"\r\n")
    # Each CRLF holds one CR and one LF: with any other CR, LF or NUL in the
    # head, fewer bytes than its length less two per CRLF remain. (One scan
    # of the whole head, in C, rather than three tests of each line.)
    if len(raw.translate(None, _UNSAFE_BYTES)) != len(raw) - 2 * (len(lines) - 1):
        return None
    kept: list[bytes] = []
    seen = 0
    spellings = _SPELLINGS
    for index in range(1, len(lines)):  # after the status line
        line = lines[index]
        colon = _colon_in(line)
        received = line[:colon]
        bit = spellings.get(received, -1)
        if bit < 0:
            bit = _FIELD_BITS.get(received.lower(), 0)
            if bit == 0 and (not line or line[0] == 32 or line[0] == 9):
                # An empty line cannot be in a head; one starting with a space
                # or a tab continues the last (a folded field).
                return None
        if bit:
            if seen & bit:
                return None  # sent twice: reading keeps the last
            if bit == _REQUEST_ID_BIT and not line[colon + 1 :].strip():
                return None
            seen |= bit
            kept.append(line)
    if not seen & _REQUEST_ID_BIT:
        return None
    kept.append(b"")
    return b"\r\n".join(kept)


def _request_id_of(raw: bytes) -> str | None:
    """The request id of a raw response head, as decoding every field reads it (the last wins)."""
    start = raw.lower().rfind(_REQUEST_ID_LINE)
    if start < 0:
        return None
    start += len(_REQUEST_ID_LINE)
    end = raw.find(b"\n", start)
    if end < 0:
        end = len(raw)
    elif end + 1 < len(raw) and raw[end + 1] in _FOLD_STARTS:
        # Continued on the next line (obs-fold): split the head as the fields do.
        values = [value for name, value in split_head(raw) if name.lower() == _REQUEST_ID]
        return values[-1].decode("latin-1")
    return raw[start:end].strip().decode("latin-1")


def result_from_response(response: RawResponse, target: str | None) -> InvokeResult:
    raw = response.raw
    if raw is not None:
        # The hot path: headers decoded only if read.
        result = InvokeResult(response.body, target=target)
        result._raw = raw
        return result
    # Decoded headers (the httpx transport): the same fields as a raw head gives, by the
    # same table (an older model without a member, e.g. NewSessionId, reads neither).
    headers = response.headers
    fields: dict[str, str] = {}
    for header, field in _RESULT_HEADER_FIELDS:
        value = headers.get(header)
        if value is not None:
            fields[field] = value
    result = InvokeResult(response.body, target=target)
    result._fields = fields
    return result


@dataclass(frozen=True, slots=True)
class AsyncInvocation:
    """InvokeEndpointAsync's answer: where the output will be written."""

    inference_id: str | None
    output_location: str | None
    failure_location: str | None
    request_id: str | None = None


def async_invocation_from_response(response: RawResponse) -> AsyncInvocation:
    body = _json_object(response.body)
    inference_id = body.get("InferenceId") if body else None
    return AsyncInvocation(
        inference_id=inference_id if isinstance(inference_id, str) else None,
        output_location=response.headers.get("x-amzn-sagemaker-outputlocation"),
        failure_location=response.headers.get("x-amzn-sagemaker-failurelocation"),
        request_id=safe_request_id(response.headers.get("x-amzn-requestid")),
    )


# -- errors -----------------------------------------------------------------

_ERROR_CLASSES: dict[str, type[errors.ServiceError]] = {
    "ValidationError": errors.ValidationError,
    "ModelError": errors.ModelError,
    "ModelNotReadyException": errors.ModelNotReady,
    "InternalFailure": errors.InternalFailure,
    "ServiceUnavailable": errors.ServiceUnavailable,
    "InternalDependencyException": errors.InternalDependency,
    "ThrottlingException": errors.Throttling,
    "Throttling": errors.Throttling,
    "TooManyRequestsException": errors.Throttling,
    "RequestLimitExceeded": errors.Throttling,
    "InvalidSignatureException": errors.SignatureError,
    "SignatureDoesNotMatch": errors.SignatureError,
    "UnrecognizedClientException": errors.SignatureError,
    "IncompleteSignature": errors.SignatureError,
    "IncompleteSignatureException": errors.SignatureError,
    "ExpiredToken": errors.SignatureError,
    "InvalidAccessKeyId": errors.SignatureError,
    "MissingAuthenticationToken": errors.SignatureError,
    "MissingAuthenticationTokenException": errors.SignatureError,
    "AccessDeniedException": errors.SignatureError,
    "ExpiredTokenException": errors.SignatureError,
    "InvalidClientTokenId": errors.SignatureError,
}

# When nothing names the error, the status is all there is to go on.
_STATUS_CLASSES: dict[int, type[errors.ServiceError]] = {
    400: errors.ValidationError,
    403: errors.SignatureError,
    424: errors.ModelError,
    429: errors.ModelNotReady,
    500: errors.InternalFailure,
    502: errors.ServiceUnavailable,
    503: errors.ServiceUnavailable,
    504: errors.ServiceUnavailable,
    530: errors.InternalDependency,
}


def _json_object(body: bytes) -> dict[str, object] | None:
    if not body:
        return None
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _error_code(headers: Mapping[str, str], body: dict[str, object] | None) -> str | None:
    # As botocore reads it: the header first, then the body; the text before ':'
    # and after the last '#' (``com.amazon.coral.service#ValidationError:http://...``).
    header = headers.get("x-amzn-errortype")
    if header:
        return _bare_code(header)
    if body:
        for key in ("__type", "code", "Code"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return _bare_code(value)
    return None


def _bare_code(value: str) -> str | None:
    return value.split(":", 1)[0].rsplit("#", 1)[-1].strip() or None


def _text(body: dict[str, object] | None, *keys: str) -> str | None:
    if body:
        for key in keys:
            value = body.get(key)
            if isinstance(value, str):
                return value
    return None


def decode_error(response: RawResponse, secrets: Sequence[str] = ()) -> errors.ServiceError:
    """Turn a non-2xx response into the matching typed error.

    Works on SageMaker's rest-json shape and degrades to the HTTP status for
    empty, truncated or non-JSON bodies (a load balancer's 502 page, say).
    ``secrets`` (the call's ``CustomAttributes``, see :func:`secrets_in_headers`)
    never reach the error, whatever the server echoed: every field is
    redacted as it is decoded, and a code or request id that is not
    well-formed reads ``other`` (see :func:`safe_code`, :func:`safe_request_id`).
    """
    body = _json_object(response.body)
    code = safe_code(_error_code(response.headers, body), secrets)
    error_class = _ERROR_CLASSES.get(code or "") or _STATUS_CLASSES.get(response.status)
    if error_class is None:
        error_class = errors.ServiceError
    message = redact(_text(body, "message", "Message") or _fallback_message(response), secrets)
    common: dict[str, object] = {
        "code": code or error_class.code,
        "status": response.status,
        "request_id": safe_request_id(response.headers.get("x-amzn-requestid"), secrets),
        "retry_after": retry_after(response.headers),
    }
    if error_class is errors.ServiceError:
        # An unknown code: 5xx and 429 are worth another try, the rest are not.
        common["retryable"] = response.status >= 500 or response.status == 429
    if error_class is errors.ModelError:
        return errors.ModelError(
            message or "",
            original_status_code=_int_or_none(body.get("OriginalStatusCode") if body else None),
            original_message=redact(_text(body, "OriginalMessage"), secrets),
            log_stream_arn=redact(_text(body, "LogStreamArn"), secrets),
            error_code=safe_code(_text(body, "ErrorCode"), secrets),
            **common,
        )
    return error_class(message or "", **common)  # type: ignore[arg-type]


# -- errors of the inference router and Global Inference Gateway runtimes -----

_RUNTIME_ERROR_CLASSES: dict[str, type[errors.ServiceError]] = {
    "ValidationException": errors.ValidationError,
    "AccessDeniedException": errors.AccessDenied,
    "RequestTimeoutException": errors.RequestTimeout,
    "ModelError": errors.ModelError,
    "ThrottlingException": errors.Throttling,
    "ModelNotReadyException": errors.ModelNotReady,
    "InternalFailure": errors.InternalFailure,
    "InternalServerException": errors.InternalServerError,
    "ServiceUnavailableException": errors.ServiceUnavailable,
    "InternalDependencyException": errors.InternalDependency,
    "PayloadTooLargeException": errors.PayloadTooLarge,
    "ResourceNotFoundException": errors.ResourceNotFound,
    "BadGatewayException": errors.BadGateway,
    "GatewayTimeoutException": errors.GatewayTimeout,
    "InternalStreamFailure": errors.InternalStreamFailure,
}
_RUNTIME_STATUS_CLASSES: dict[int, type[errors.ServiceError]] = {
    400: errors.ValidationError,
    403: errors.AccessDenied,
    404: errors.ResourceNotFound,
    408: errors.RequestTimeout,
    413: errors.PayloadTooLarge,
    424: errors.ModelError,
    429: errors.Throttling,
    500: errors.InternalFailure,
    502: errors.BadGateway,
    503: errors.ServiceUnavailable,
    504: errors.GatewayTimeout,
    530: errors.InternalDependency,
}
# A Global Inference Gateway's message says where the error came from.
_ORIGIN = re.compile(r"(Global Inference Gateway|inference gateway(?: \([a-z ]+\))?):")
REDACTED = "<redacted>"
# What a code or request id that is not well-formed reads as, wherever it goes.
OTHER: Final = "other"
# A well-formed error code, once the rest-json prefix and suffix are gone (_bare_code):
# an identifier such as ValidationError or ModelInvocationTimeExceeded.
_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
# The codes the models and the gateway name: public names, never a caller's secret.
_KNOWN_CODES: Final = frozenset(
    {
        *_ERROR_CLASSES,
        *_RUNTIME_ERROR_CLASSES,
        *(cls.code for cls in (*_ERROR_CLASSES.values(), *_RUNTIME_ERROR_CLASSES.values())),
        *(code for op in _TABLE.values() for code in op.errors),
        "ModelStreamError",
    }
)
# A well-formed request id: hex digits and dashes (SageMaker's are UUIDs), bounded.
_REQUEST_ID_CHARS: Final = "0123456789abcdefABCDEF-"
_MAX_REQUEST_ID = 64


def error_origin(message: str) -> str | None:
    """``Global Inference Gateway``, ``inference gateway`` or ``inference gateway (<part>)``."""
    match = _ORIGIN.match(message)
    return match.group(1) if match else None


# Retry-After's delay-seconds (RFC 9110 10.2.3) are ASCII digits; a decimal fraction is
# taken too (servers send one). Not float()'s grammar: no sign, "_", exponent or "inf".
_DELAY_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
# The longest wait an answer's Retry-After is read as (a relay passes it on as digits).
MAX_RETRY_AFTER_S = 86_400.0


def retry_after(headers: Mapping[str, str]) -> float | None:
    """The seconds ``Retry-After`` asks for (delay-seconds, or an HTTP date in any of
    RFC 9110's three forms), at most MAX_RETRY_AFTER_S; None without a valid one."""
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    if _DELAY_SECONDS.fullmatch(value):
        seconds = float(value)  # inf for a few hundred digits: clamped below
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, OverflowError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)  # asctime's form names no zone: HTTP dates are GMT
        seconds = (when - datetime.now(UTC)).total_seconds()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)


# -- redaction at decode --------------------------------------------------------------
#
# Every field decoded from an upstream's error answer passes through these before
# anything else sees it (the error's text and attributes, events, metrics, logs, spans):
# text fields lose the call's secrets, codes and request ids that are not well-formed
# (or hold a secret) read ``other``. A success answer's request id is checked the same
# way wherever it is read (InvokeResult.request_id and the streams' and async calls').


# How deep an error's cause chain is searched for a secret (DeadlineExceeded wraps one).
_MAX_CHAIN = 8


def redacted(error: errors.GatewayError, secrets: tuple[str, ...]) -> errors.GatewayError:
    """``error`` (and the errors it wraps) with every secret's value taken out of its text."""
    if not secrets:
        return error
    current: BaseException | None = error
    for _ in range(_MAX_CHAIN):
        if current is None:
            break
        current.args = tuple(
            redact(arg, secrets) if isinstance(arg, str) else arg for arg in current.args
        )
        if isinstance(current, errors.ServiceError):
            current.message = redact(current.message, secrets) or ""
        if isinstance(current, errors.ModelError):
            current.original_message = redact(current.original_message, secrets)
        current = current.__cause__ or current.__context__
    return error


def redact(text: str | None, secrets: Sequence[str]) -> str | None:
    """``text`` without any of ``secrets`` (an identity token, custom attributes)."""
    if text is None:
        return None
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _holds_secret(value: str, secrets: Sequence[str]) -> bool:
    # Either way round: an upstream may echo a secret whole, or cut a piece of it.
    return any(secret and (secret in value or value in secret) for secret in secrets)


def safe_code(code: str | None, secrets: Sequence[str] = ()) -> str | None:
    """``code`` if it is a well-formed error code that holds no secret, else ``other``."""
    if code is None or code in _KNOWN_CODES:
        return code
    if not _CODE.fullmatch(code) or _holds_secret(code, secrets):
        return OTHER
    return code


def safe_request_id(value: str | None, secrets: Sequence[str] = ()) -> str | None:
    """``value`` if it is a well-formed request id (hex digits and dashes, at most 64)
    that holds no secret, else ``other``; None and "" (no id) as they are."""
    if not value:
        return value
    if len(value) > _MAX_REQUEST_ID or value.strip(_REQUEST_ID_CHARS):
        return OTHER
    if secrets and _holds_secret(value, secrets):
        return OTHER
    return value


def secrets_of(values: Sequence[str]) -> tuple[str, ...]:
    """The secrets to take out for sensitive ``values``: each as given, as sent (trimmed)
    and as SigV4 folds it (a server may echo any of them), longest first."""
    if not values:
        return ()
    found: set[str] = set()
    for value in values:
        for form in (value, value.strip(" \t"), " ".join(value.split())):
            if form:
                found.add(form)
    return tuple(sorted(found, key=len, reverse=True))


def secrets_in_headers(headers: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The secrets a request carries (its sensitive members' header values)."""
    return secrets_of([value for name, value in headers if name in _SENSITIVE_HEADERS])


def secrets_named(names: Sequence[str], values: Sequence[object]) -> tuple[str, ...]:
    """The secrets among a typed method's ``values``, one per member of ``names``."""
    return secrets_of(
        [
            str(value)
            for name, value in zip(names, values, strict=True)
            if name in SENSITIVE and value is not None
        ]
    )


def secrets_in(operation: Operation, members: Sequence[object]) -> tuple[str, ...]:
    """The secrets of a call's member tuple (``operation.headers`` order)."""
    if not operation.sensitive:
        return ()
    if len(members) != len(operation.headers):
        # A caller's tuple of another shape: keep every string out.
        return secrets_of([value for value in members if isinstance(value, str)])
    return secrets_of(
        [str(members[index]) for index in operation.sensitive if members[index] is not None]
    )


def decode_runtime_error(response: RawResponse, secrets: Sequence[str] = ()) -> errors.ServiceError:
    """:func:`decode_error` for the inference router and Global Inference Gateway runtimes.

    Every error shape of their models becomes its class in the :class:`GatewayError`
    tree; ``origin`` comes from the message's prefix and ``retry_after`` from the
    ``Retry-After`` header. ``secrets`` (the call's ``CustomerIdentityToken`` and
    ``CustomAttributes``) never reach the error's text, whatever the server echoed.
    """
    body = _json_object(response.body)
    code = safe_code(_error_code(response.headers, body), secrets)
    error_class = (
        _RUNTIME_ERROR_CLASSES.get(code or "")
        or _ERROR_CLASSES.get(code or "")
        or _RUNTIME_STATUS_CLASSES.get(response.status)
        or errors.ServiceError
    )
    raw_message = _text(body, "Message", "message") or _fallback_message(response)
    message = redact(raw_message, secrets) or ""
    common: dict[str, object] = {
        "code": code or error_class.code,
        "status": response.status,
        "request_id": safe_request_id(response.headers.get("x-amzn-requestid"), secrets),
        "origin": error_origin(raw_message),
        "retry_after": retry_after(response.headers),
    }
    if error_class is errors.ServiceError:
        common["retryable"] = response.status >= 500 or response.status == 429
    if error_class is errors.ModelError:
        return errors.ModelError(
            message,
            original_status_code=_int_or_none(body.get("OriginalStatusCode") if body else None),
            original_message=redact(_text(body, "OriginalMessage"), secrets),
            log_stream_arn=redact(_text(body, "LogStreamArn"), secrets),
            error_code=safe_code(_text(body, "ErrorCode"), secrets),
            **common,
        )
    if error_class is errors.ResourceNotFound:
        return errors.ResourceNotFound(
            message,
            resource_id=redact(_text(body, "ResourceId"), secrets),
            resource_type=redact(_text(body, "ResourceType"), secrets),
            **common,
        )
    return error_class(message, **common)  # type: ignore[arg-type]


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    # isdigit() is also true of '²' and other non-ASCII digits int() refuses,
    # and int() refuses strings past 4300 digits: only short ASCII numbers.
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10:
        return int(value)
    return None


def _fallback_message(response: RawResponse) -> str:
    if not response.body:
        return f"HTTP {response.status} with an empty body"
    snippet = response.body[:200].decode("utf-8", "replace").strip()
    return f"HTTP {response.status}: {snippet}"
