"""A compat call's keyword arguments, read as botocore reads them into one Gateway call.

Each operation of the table gets a :class:`MethodSpec` once; a call then costs a dict
lookup per parameter on the usual path (str values, a bytes Body). Anything else
takes botocore's own validator, so a ``ParamValidationError`` reads as botocore's.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import botocore.exceptions
import botocore.validate
from botocore import xform_name

from gateway._invoke import api

__all__ = ["Call", "MethodSpec", "method_specs", "parse"]

_STR, _INT, _BLOB, _SECONDS = "str", "int", "blob", "seconds"
_KINDS: Final = {"string": _STR, "integer": _INT, "blob": _BLOB}
# A parameter's place that is not in the member tuple: an optional inline Body
# (InvokeEndpointAsync's), or our Timeout extension.
_INLINE_BODY, _TIMEOUT = -1, -2
_MISSING: Final[Any] = object()
_VALIDATOR: Final = botocore.validate.ParamValidator()
# The attribute of Gateway's result that answers a response member, where it is not
# the member's keyword.
_RESULT_ATTRIBUTES: Final = {
    "InvokedProductionVariant": "invoked_variant",
    "InvokedRoutedResourceArn": "routed_resource_arn",
}


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One operation as its compat method reads and answers it."""

    operation: api.Operation
    name: str  # the operation: "InvokeEndpoint"
    method: str  # botocore's method name: "invoke_endpoint"
    uri_member: str  # the resource the path names: EndpointName, InferenceRouterName...
    positional: frozenset[str]  # that member and a required Body: read apart from the rest
    has_body: bool  # Body is required and passed positionally (not async's inline Body)
    # API name -> (place, kind), every member of the model but the resource and a
    # required Body, plus our Timeout. The place is the member's in the call's member
    # tuple (Operation.headers), or _INLINE_BODY / _TIMEOUT.
    params: Mapping[str, tuple[int, str]]
    required_params: tuple[str, ...]  # required header members
    nonempty: frozenset[str]  # string members the model gives a minimum length
    # The response's members other than Body, each with the result attribute holding it.
    answer_members: tuple[tuple[str, str], ...]


def _spec(operation: api.Operation) -> MethodSpec:
    body = operation.by_name.get("Body")
    has_body = body is not None and body.required
    params = {
        m.name: (
            operation.index(m.name) if m.location == "header" else _INLINE_BODY,
            _KINDS[m.kind],
        )
        for m in operation.request
        if m.location != "uri" and not (has_body and m.name == "Body")
    }
    params["Timeout"] = (_TIMEOUT, _SECONDS)  # our extension: the call's deadline
    return MethodSpec(
        operation,
        operation.name,
        xform_name(operation.name),
        operation.uri_member,
        frozenset({operation.uri_member, "Body"}),
        has_body,
        params,
        tuple(m.name for m in operation.request if m.required and m.location == "header"),
        frozenset(m.name for m in operation.request if m.kind == "string" and m.min_length),
        tuple(
            (m.name, _RESULT_ATTRIBUTES.get(m.name, m.keyword))
            for m in operation.response
            if m.name != "Body"
        ),
    )


@functools.cache
def method_specs(service: str) -> tuple[MethodSpec, ...]:
    """Every operation of ``service`` the installed botocore models, as compat methods."""
    return tuple(_spec(op) for op in api.operation_table().values() if op.service.name == service)


@dataclass(slots=True)
class Call:
    """One call's arguments, as the Gateway takes them."""

    resource: str  # the endpoint, inference router or gateway the path names
    body: bytes | None  # the payload; an optional inline Body when given, else None
    members: tuple[object, ...]  # in the operation's Operation.headers order
    timeout: float | None


def _call(spec: MethodSpec, resource: str, body: bytes | None, options: dict[str, Any]) -> Call:
    """The parsed parameters as a call: the members in their places, as given."""
    values: list[object] = [None] * len(spec.operation.headers)
    call = Call(resource, body, (), None)
    for key, value in options.items():
        index = spec.params[key][0]
        if index >= 0:
            values[index] = value
        elif index == _TIMEOUT:
            call.timeout = value
        else:
            call.body = value
    call.members = tuple(values)
    return call


def parse(spec: MethodSpec, params: dict[str, Any]) -> Call:
    """The call's arguments, or ParamValidationError as botocore reports it.

    ``params`` is the caller's fresh ``**kwargs`` dict. The usual call (str values,
    bytes Body) costs one lookup per parameter; anything else takes the slow path,
    which coerces or reports.
    """
    resource = params.get(spec.uri_member, _MISSING)
    body = params.get("Body", _MISSING) if spec.has_body else b""
    ok = (
        type(resource) is str
        and (resource or spec.uri_member not in spec.nonempty)
        and type(body) is bytes
    )
    options: dict[str, Any] = {}
    for key, value in params.items():
        param = spec.params.get(key)
        if param is not None and (
            (param[1] == _STR and type(value) is str and (value or key not in spec.nonempty))
            or (param[1] == _SECONDS and type(value) in (float, int))
        ):
            options[key] = value
        elif param is None and key in spec.positional:
            continue  # the resource, or a required Body: read above
        else:
            ok = False
    if ok and (not spec.required_params or all(name in params for name in spec.required_params)):
        return _call(spec, resource, body if spec.has_body else None, options)
    return _parse_slowly(spec, resource, body, params)


def _parse_slowly(spec: MethodSpec, resource: Any, body: Any, params: dict[str, Any]) -> Call:
    """botocore's own validation report, then coercions (bytearray, str, file-like blobs)."""
    # In the caller's order, as botocore reports problems in it.
    given = {key: value for key, value in params.items() if key != "Timeout"}
    report = _VALIDATOR.validate(given, spec.operation.input_shape)
    problems = [report.generate_report()] if report.has_errors() else []
    timeout = params.get("Timeout", _MISSING)
    if timeout is not _MISSING and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float)
    ):
        problems.append(_type_problem("Timeout", timeout, "<class 'int'>, <class 'float'>"))
    if problems:
        raise botocore.exceptions.ParamValidationError(report="\n".join(problems))
    options: dict[str, Any] = {}
    for key, value in params.items():
        if key not in spec.params:
            continue  # the resource, or a required Body
        kind = spec.params[key][1]
        options[key] = _coerce_blob(value) if kind == _BLOB else value
    return _call(spec, resource, _coerce_blob(body) if spec.has_body else None, options)


def _type_problem(key: str, value: Any, valid: str) -> str:
    return (
        f"Invalid type for parameter {key}, value: {value}, type: {type(value)}, "
        f"valid types: {valid}"
    )


def _coerce_blob(body: Any) -> bytes:
    # botocore's blob type (validated already): bytes, bytearray, str (UTF-8) or read().
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    data = body.read()
    return data.encode() if isinstance(data, str) else bytes(data)
