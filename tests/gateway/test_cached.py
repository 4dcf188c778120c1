"""The cache key of a call (gateway._cached): what changes an answer changes the key."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway._cached import CachedCalls
from gateway.cache import CacheConfig, PredictionCache

# Header-ish values, with the characters a naive join or prefix could confuse.
part = st.none() | st.text(alphabet=st.sampled_from("ab:0123\x1f\x1e~"), max_size=8)
parts = st.tuples(part, part, part, part)


def _key(calls: CachedCalls, fields: tuple[str | None, ...]) -> str:
    variant, attributes, hostname, component = fields
    return calls.key("r", None, variant, attributes, hostname, component, "text/csv", None, b"x")


@given(parts, parts)
def test_different_variant_attribute_combinations_never_share_a_key(
    one: tuple[str | None, ...], other: tuple[str | None, ...]
) -> None:
    calls = CachedCalls(PredictionCache(CacheConfig()))
    same_call = [p or "" for p in one] == [p or "" for p in other]  # None and "" are alike
    assert (_key(calls, one) == _key(calls, other)) == same_call


def test_known_collisions_of_the_separator_join_are_apart() -> None:
    calls = CachedCalls(PredictionCache(CacheConfig()))
    assert _key(calls, ("a\x1fb", "c", None, None)) != _key(calls, ("a", "b\x1fc", None, None))
    # A plain variant that spells a composite encoding.
    assert _key(calls, ("1:a1:b0:0:", None, None, None)) != _key(calls, ("a", "b", None, None))
