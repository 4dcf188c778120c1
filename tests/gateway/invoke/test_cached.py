"""The cache key of a call (gateway._invoke.cached): every member a call sends is in it, but a
short documented list that cannot change the answer."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway._invoke.api import INVOKE, NOT_IN_CACHE_KEY, Operation, operation_table
from gateway._invoke.cached import CachedCalls, KeyLayout
from gateway.cache import CacheConfig, PredictionCache

# Header-ish values, with the characters a naive join or prefix could confuse.
part = st.none() | st.text(alphabet=st.sampled_from("ab:0123\x1f\x1e~="), max_size=8)
# The members besides the body that go into the key's variant field, those of the installed
# model (PrefixAwareId came in botocore 1.43.68).
COMPOSITE = tuple(
    member
    for member in (
        "TargetVariant",
        "CustomAttributes",
        "TargetContainerHostname",
        "InferenceComponentName",
        "EnableExplanations",
        "PrefixAwareId",
    )
    if member in INVOKE.by_name
)
parts = st.tuples(*(part for _ in COMPOSITE))
INVOKE_KEY = KeyLayout(INVOKE)


def _calls() -> CachedCalls:
    return CachedCalls(PredictionCache(CacheConfig()))


def _key(calls: CachedCalls, fields: tuple[str | None, ...]) -> str:
    values = INVOKE.values({"ContentType": "text/csv", **dict(zip(COMPOSITE, fields, strict=True))})
    return calls.key("r", INVOKE_KEY, values, b"x")


@given(parts, parts)
def test_different_member_combinations_never_share_a_key(
    one: tuple[str | None, ...], other: tuple[str | None, ...]
) -> None:
    calls = _calls()
    assert (_key(calls, one) == _key(calls, other)) == (one == other)


def test_known_collisions_of_the_separator_join_are_apart() -> None:
    calls = _calls()
    nothing = (None,) * (len(COMPOSITE) - 2)
    assert _key(calls, ("a\x1fb", "c", *nothing)) != _key(calls, ("a", "b\x1fc", *nothing))
    # A plain variant that spells a composite encoding.
    spelled = "=13:TargetVariant1:a16:CustomAttributes1:b"
    assert _key(calls, (spelled, None, *nothing)) != _key(calls, ("a", "b", *nothing))


def test_enable_explanations_changes_the_key() -> None:
    calls = _calls()
    plain = INVOKE.values({"ContentType": "text/csv"})
    explained = INVOKE.values({"ContentType": "text/csv", "EnableExplanations": "`true`"})
    other = INVOKE.values({"ContentType": "text/csv", "EnableExplanations": "`false`"})
    keys = {calls.key("r", INVOKE_KEY, values, b"x") for values in (plain, explained, other)}
    assert len(keys) == 3


def _sample(kind: str, variant: int) -> object:
    return 60 + variant if kind == "integer" else f"value-{variant}"


@pytest.mark.parametrize(
    "operation", sorted(operation_table().values(), key=lambda op: (op.service.name, op.name))
)
def test_every_input_member_is_in_the_key_or_on_the_list(operation: Operation) -> None:
    """Walks every input member of the installed model: a new one is keyed by default."""
    calls = _calls()
    layout = KeyLayout(operation)
    base = {"ContentType": "text/csv"} if "ContentType" in operation.name_index else {}
    for member in operation.request:
        if member.location == "uri":  # the endpoint: the route names it
            assert calls.key("a", layout, operation.values(base), b"x") != calls.key(
                "b", layout, operation.values(base), b"x"
            )
        elif member.location == "body":
            assert calls.key("r", layout, operation.values(base), b"x") != calls.key(
                "r", layout, operation.values(base), b"y"
            )
        else:
            keys = {
                calls.key("r", layout, operation.values({**base, member.name: value}), b"x")
                for value in (None, _sample(member.kind, 1), _sample(member.kind, 2), "")
            }
            if member.name in NOT_IN_CACHE_KEY:
                assert len(keys) == 1, member.name
            else:
                assert len(keys) == 4, member.name


def test_the_list_of_members_outside_the_key_is_short_and_named() -> None:
    assert {"InferenceId"} == NOT_IN_CACHE_KEY
    assert all(name in INVOKE.by_name for name in NOT_IN_CACHE_KEY)
