"""The user-agent memo stays small whatever user agents the traffic carries."""

from __future__ import annotations

import gc
import tracemalloc

from gateway.rtb._useragent import MAX_UA_CHARS, MOBILE, device_class

_IPHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile"


def test_distinct_long_user_agents_do_not_grow_memory() -> None:
    # 4,000 distinct 16 KiB user agents: a memo of whole strings keeps ~64 MiB.
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for index in range(4000):
            ua = f"{_IPHONE} {index:06d} " + "x" * (16 * 1024)
            assert device_class(ua) == MOBILE
            del ua
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 8 * 1024 * 1024


def test_a_long_user_agent_is_classed_by_its_leading_characters() -> None:
    padded = _IPHONE + " " * MAX_UA_CHARS + "smart-tv"
    assert device_class(padded) == MOBILE  # the marker past the limit is not read
