"""An operation plan's shapes: the last members tuple is found by identity, never wrongly.

``OperationPlan.shape_of`` returns what ``shape`` computes for a members tuple;
the relay hands the same tuple again while a client repeats its call, and the
plan finds that one by identity, with no hashing. These tests check that what
comes back is always the shape of the tuple asked about. (Compiled, a shape
crosses into Python as a new tuple each time: the tests compare by value.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway import Gateway
from gateway._invoke.api import INVOKE
from gateway._invoke.context import OperationPlan


@pytest.fixture
def plan() -> Iterator[OperationPlan]:
    gateway = Gateway("us-east-1", endpoint_url="http://127.0.0.1:9", credentials=("AK", "SK"))
    yield gateway._context.add_plan(INVOKE)


def members(**values: object) -> tuple[object, ...]:
    """InvokeEndpoint's members tuple with these values (by member name)."""
    found: list[object] = [None] * len(INVOKE.headers)
    for name, value in values.items():
        found[INVOKE.index(name)] = value
    return tuple(found)


def test_the_same_tuple_gets_its_shape_again(plan: OperationPlan) -> None:
    call = members(ContentType="application/json")
    first = plan.shape_of(call)
    assert first == plan.shape(call)
    assert plan._last_members is call  # found by identity next time
    assert plan.shape_of(call) == first


def test_each_tuple_gets_its_own_shape_whatever_came_before(plan: OperationPlan) -> None:
    csv = members(ContentType="text/csv")
    json = members(ContentType="application/json", Accept="application/json")
    csv_shape, json_shape = plan.shape(csv), plan.shape(json)
    # Alternating, repeating, and an equal tuple that is another object.
    equal_json = members(ContentType="application/json", Accept="application/json")
    calls = [(csv, csv_shape), (csv, csv_shape), (json, json_shape), (csv, csv_shape)]
    calls += [(json, json_shape), (json, json_shape), (equal_json, json_shape), (csv, csv_shape)]
    for call, shape in calls:
        assert plan.shape_of(call) == shape
    assert plan.shape_of(csv)[0] != plan.shape_of(json)[0]


def test_a_call_with_a_member_of_its_own_is_shaped_but_never_kept(plan: OperationPlan) -> None:
    """A per-call member (InferenceId) makes a tuple no other call sends: not remembered,
    and not the last tuple either, so the tuple before it is still found as it was."""
    usual = members(ContentType="text/csv")
    kept = plan.shape_of(usual)
    own = members(ContentType="text/csv", InferenceId="call-1")
    shaped = plan.shape_of(own)
    assert shaped == plan.shape(own)
    assert own not in plan.shapes
    assert ("x-amzn-sagemaker-inference-id", "call-1") in [
        (name.lower(), value) for name, value in (*shaped[0], *shaped[1])
    ]
    assert plan._last_members is usual
    assert plan.shape_of(usual) == kept
