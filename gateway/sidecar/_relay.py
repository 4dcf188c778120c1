"""The event stream of an InvokeEndpointWithResponseStream answer.

Kept apart from ``_app`` (compiled with mypyc in wheels) because it is an
async generator, which mypyc does not compile; streams are not the
per-request hot path.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from gateway import errors
from gateway._aws.eventstream import (
    encode_exception,
    encode_payload_part,
    internal_stream_failure,
    model_stream_error,
)

__all__ = ["InFlight", "aclose", "relay"]

_TIMEOUTS = (errors.DeadlineExceeded, errors.ReadTimeout)


class InFlight(Protocol):
    """What counts a stream as in flight while it is relayed (the app)."""

    in_flight: int


async def relay(
    counter: InFlight, parts: AsyncIterator[bytes], first: bytes | None
) -> AsyncIterator[bytes]:
    """PayloadPart events; a failure mid-stream becomes an exception event."""
    counter.in_flight += 1
    try:
        if first is not None:
            yield encode_payload_part(first)
            async for part in parts:
                yield encode_payload_part(part)
    except _TIMEOUTS as error:
        yield model_stream_error(f"gateway timeout: {error}", "ModelInvocationTimeExceeded")
    except errors.ModelError as error:
        yield _model_stream_error(error)
    except errors.ServiceError as error:
        # The upstream's InternalStreamFailure passes on as it came.
        upstream = error.code == "InternalStreamFailure"
        yield internal_stream_failure(error.message if upstream else f"{error}")
    except errors.GatewayError as error:
        yield internal_stream_failure(f"{type(error).__name__}: {error}")
    finally:
        counter.in_flight -= 1
        await aclose(parts)


async def aclose(parts: AsyncIterator[bytes]) -> None:
    # Typed as an iterator, but a generator underneath: closing it returns
    # the upstream connection to the pool now rather than at GC.
    close: Callable[[], Awaitable[object]] | None = getattr(parts, "aclose", None)
    if close is not None:
        await close()


def _model_stream_error(error: errors.ModelError) -> bytes:
    """The upstream's ModelStreamError passed on unchanged; any other ModelError as StreamBroken."""
    if error.code != "ModelStreamError":
        return model_stream_error(error.message, "StreamBroken")
    fields: dict[str, object] = {"Message": error.message}
    if error.error_code is not None:
        fields["ErrorCode"] = error.error_code
    return encode_exception("ModelStreamError", fields)
