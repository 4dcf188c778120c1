from __future__ import annotations

from gateway.cache import make_key

BASE = ("smgw", "bidder", "model-a.tar.gz", "v1", "text/csv", "application/json", "7")


def test_key_is_deterministic_and_namespaced() -> None:
    key = make_key(*BASE, b"1,2,3")
    assert key == make_key(*BASE, b"1,2,3")
    assert key.startswith("smgw:k1:bidder:model-a.tar.gz:v1:")
    assert make_key("other", *BASE[1:], b"1,2,3") != key


def test_every_field_and_the_body_matter() -> None:
    keys = {make_key(*BASE, b"1,2,3"), make_key(*BASE, b"1,2,4")}
    for index in range(1, len(BASE)):
        changed = list(BASE)
        changed[index] = BASE[index] + "x"
        keys.add(make_key(*changed, b"1,2,3"))  # type: ignore[arg-type]
    assert len(keys) == 2 + len(BASE) - 1


def test_version_tag_bump_changes_the_key() -> None:
    bumped = (*BASE[:-1], "8")
    assert make_key(*BASE, b"x") != make_key(*bumped, b"x")


def test_separators_in_fields_cannot_collide() -> None:
    a = make_key("ns", "a:b", "c", None, None, None, None, b"")
    b = make_key("ns", "a", "b:c", None, None, None, None, b"")
    assert a != b
    assert make_key("ns", "r", "{tag}", None, None, None, None, b"").count("{") == 0


def test_length_is_bounded_whatever_the_input() -> None:
    huge = "m" * 10_000
    key = make_key("ns", huge, huge, huge, huge, huge, huge, b"b" * 1_000_000)
    assert len(key) < 300


def test_none_and_empty_are_the_same() -> None:
    assert make_key("ns", "r", None, None, None, None, None, b"x") == make_key(
        "ns", "r", "", "", "", "", "", b"x"
    )


def test_body_may_be_any_buffer() -> None:
    assert make_key(*BASE, bytearray(b"abc")) == make_key(*BASE, memoryview(b"abc"))
