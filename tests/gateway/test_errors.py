"""The error tree: what a caller can catch, and which errors are worth retrying."""

from __future__ import annotations

import builtins

import pytest

from gateway import errors


@pytest.mark.parametrize(
    ("cls", "parents", "retryable"),
    [
        (errors.ConfigError, (errors.GatewayError, ValueError), False),
        (errors.InvalidRequest, (errors.GatewayError, ValueError), False),
        (errors.ConnectError, (errors.TransportError,), True),
        (errors.ReadError, (errors.TransportError,), True),
        (errors.WriteError, (errors.TransportError,), True),
        (errors.StaleConnection, (errors.ReadError,), True),
        (errors.ProtocolError, (errors.TransportError,), False),
        (errors.PoolTimeout, (errors.TimeoutError,), True),
        (errors.ConnectTimeout, (errors.TimeoutError,), True),
        (errors.ReadTimeout, (errors.TimeoutError,), True),
        (errors.DeadlineExceeded, (errors.TimeoutError,), False),
        (errors.NoHealthyTarget, (errors.GatewayError,), False),
        (errors.CacheUnavailable, (errors.GatewayError,), False),
    ],
)
def test_tree_and_retryable(
    cls: type[errors.GatewayError], parents: tuple[type, ...], retryable: bool
) -> None:
    assert issubclass(cls, errors.GatewayError)
    for parent in parents:
        assert issubclass(cls, parent)
    error = cls("boom")
    assert error.retryable is retryable
    assert str(error) == "boom"


def test_timeouts_do_not_shadow_the_builtin() -> None:
    assert not issubclass(errors.TimeoutError, builtins.TimeoutError)
    assert errors.TimeoutError is not builtins.TimeoutError


def test_transport_errors_say_whether_the_request_was_sent() -> None:
    assert errors.ConnectError("x").sent is False
    assert errors.ReadError("x").sent is True
    assert errors.ReadError("x", sent=False).sent is False
    assert errors.StaleConnection("x", sent=True).sent is True


@pytest.mark.parametrize(
    ("cls", "code", "retryable"),
    [
        (errors.ValidationError, "ValidationError", False),
        (errors.ModelError, "ModelError", False),
        (errors.ModelNotReady, "ModelNotReadyException", True),
        (errors.InternalFailure, "InternalFailure", True),
        (errors.ServiceUnavailable, "ServiceUnavailable", True),
        (errors.InternalDependency, "InternalDependencyException", True),
        (errors.Throttling, "ThrottlingException", True),
        (errors.SignatureError, "InvalidSignatureException", False),
    ],
)
def test_service_errors(cls: type[errors.ServiceError], code: str, retryable: bool) -> None:
    error = cls("went wrong", status=499, request_id="r-1")
    assert isinstance(error, errors.ServiceError)
    assert (error.code, error.status, error.request_id, error.retryable) == (
        code,
        499,
        "r-1",
        retryable,
    )
    assert str(error) == f"{code} (HTTP 499, request id r-1): went wrong"
    override = cls("x", code="Other", retryable=not retryable)
    assert override.code == "Other" and override.retryable is (not retryable)
    # the class defaults are untouched by an instance override
    assert cls.code == code


def test_model_error_fields() -> None:
    error = errors.ModelError(
        "m",
        original_status_code=503,
        original_message="busy",
        log_stream_arn="arn:aws:logs:x",
        status=424,
    )
    assert (error.original_status_code, error.original_message, error.log_stream_arn) == (
        503,
        "busy",
        "arn:aws:logs:x",
    )
    assert error.status == 424 and error.code == "ModelError"


def test_every_public_name_is_exported() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), Exception)
