"""Cache keys: namespaced, bounded in length, cheap to build on the hot path.

A key is ``{namespace}:k1:{route}:{model}:{variant}:{content_type}:{accept}:{version_tag}:{digest}``
where ``digest`` is a 128-bit BLAKE2b of the request body. ``k1`` is the key
schema version: changing the layout means bumping it, so old and new keys
never alias. Short, plain fields stay readable (useful with ``redis-cli
--scan``); a field that is long or holds a character with meaning in the key
(``:`` separates fields, ``{``/``}`` would form a Redis Cluster hash tag) is
replaced by ``~`` plus a hash of it. Plain fields never start with ``~``, so
the two forms cannot collide.
"""

from __future__ import annotations

from hashlib import blake2b

__all__ = ["make_key"]

_KEY_SCHEMA = "k1"
_PLAIN_FIELD_MAX = 64
_UNSAFE_CHARS = frozenset(":{}~\r\n\x00 ")
# The fields before the body digest repeat across calls (a handful of routes,
# models and content types), so their sanitised prefix is memoised. The bound
# keeps a caller that puts unbounded values in them from growing memory.
_PREFIX_CACHE_MAX = 4096
_prefix_cache: dict[tuple[str | None, ...], str] = {}


def make_key(
    namespace: str,
    route: str,
    model: str | None,
    variant: str | None,
    content_type: str | None,
    accept: str | None,
    version_tag: str | None,
    body: bytes | bytearray | memoryview,
) -> str:
    """The cache key of one prediction request.

    ``None`` and ``""`` are the same (no target model, any variant...).
    Bumping ``version_tag`` (a model version, a feature-spec hash) changes
    every key of that model, which is how cached results are invalidated.
    """
    fields = (namespace, route, model, variant, content_type, accept, version_tag)
    prefix = _prefix_cache.get(fields)
    if prefix is None:
        prefix = _remember_prefix(fields)
    return prefix + blake2b(body, digest_size=16).hexdigest()


def _remember_prefix(fields: tuple[str | None, ...]) -> str:
    namespace, *rest = fields
    prefix = ":".join([_safe_field(namespace), _KEY_SCHEMA, *map(_safe_field, rest), ""])
    if len(_prefix_cache) >= _PREFIX_CACHE_MAX:
        _prefix_cache.clear()
    _prefix_cache[fields] = prefix
    return prefix


def _safe_field(value: str | None) -> str:
    if not value:
        return ""
    if len(value) <= _PLAIN_FIELD_MAX and _UNSAFE_CHARS.isdisjoint(value):
        return value
    return "~" + blake2b(value.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
