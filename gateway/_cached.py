# Compiled with mypyc in wheels (HOT_PATH in gateway/_build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""What ``Gateway`` does around the prediction cache.

The cache package knows nothing of SageMaker; this module maps a call onto
it: which call arguments make the cache key, which version tag a route's
answers carry, how an ``InvokeResult`` becomes a cache ``Entry`` and back,
and the near-tier peek / get-or-load sequence ``Gateway.invoke`` runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway import errors
from gateway._api import InvokeResult
from gateway.cache import CacheSource, Entry, PredictionCache

__all__ = ["CachedCalls"]

# Metadata a cached answer must give back, as cache.Entry.meta names it.
_META_VARIANT = "variant"
_META_ATTRIBUTES = "custom-attributes"
_META_TARGET = "target"
_META_FIELDS = {_META_VARIANT: "invoked_variant", _META_ATTRIBUTES: "custom_attributes"}


class CachedCalls:
    """The prediction cache as ``Gateway.invoke`` uses it: keys, versions, fill, lookup."""

    __slots__ = ("_cache", "_versions", "versions_due")

    def __init__(self, cache: PredictionCache) -> None:
        self._cache = cache
        self._versions = cache.versions
        # True when a route's version tags must be re-read first (await
        # ``refresh_versions``). Synchronous and cheap: under steady traffic the
        # tags are refreshed in the background and this stays False. Bound
        # once, as it runs on every cached call.
        self.versions_due: Callable[[str], bool] = cache.versions.due

    @property
    def cache(self) -> PredictionCache:
        return self._cache

    def key(
        self,
        route: str,
        model: str | None,
        variant: str | None,
        attributes: str | None,
        hostname: str | None,
        component: str | None,
        content_type: str | None,
        accept: str | None,
        body: bytes,
    ) -> str:
        """The cache key of one call: everything that can change the model's answer."""
        variant_key = _variant_key(variant, attributes, hostname, component)
        version = self._versions.lookup(route, model)
        return self._cache.key_for(route, model, variant_key, content_type, accept, version, body)

    def peek(self, key: str) -> InvokeResult | None:
        """A fresh near-tier answer, or None. Synchronous: the hit path awaits nothing."""
        entry = self._cache.peek_near(key)
        if entry is None:
            return None
        return _result_from_entry(entry, "near")

    async def get_or_load(
        self,
        invoke: Callable[[], Awaitable[InvokeResult]],
        key: str,
        ttl: float | None,
        deadline: float,
    ) -> InvokeResult:
        """The cached answer for ``key``, or ``invoke()``'s (then cached).

        ``deadline`` (``time.monotonic()``) is the call's: ``invoke`` keeps it
        itself, and a call waiting for an identical one in flight gives up there.
        """
        loaded: list[InvokeResult] = []

        async def load() -> Entry:
            result = await invoke()
            loaded.append(result)
            return _entry_from_result(result)

        try:
            entry, source = await self._cache.get_or_load(key, load, ttl_s=ttl, deadline=deadline)
        except TimeoutError:  # the cache's own (builtin) one: a wait for another call
            raise errors.DeadlineExceeded(
                "the call's deadline passed while it waited for an identical call in flight"
            ) from None
        if source is CacheSource.LOADED and loaded:
            return loaded[0]
        return _result_from_entry(entry, source.value)

    async def refresh_versions(self, route: str) -> None:
        await self._versions.refresh(route)

    def set_version(self, endpoint: str, version: str, target_model: str | None) -> None:
        """Tag ``endpoint``'s answers here at once, and in every process sharing Redis."""
        self._versions.set(endpoint, target_model, version)


def _variant_key(
    variant: str | None, attributes: str | None, hostname: str | None, component: str | None
) -> str | None:
    """Everything besides the body that can change a model's answer, as one key part.

    The common case (a variant at most) is the variant itself. Otherwise each
    part is written with its length in front, so no choice of values can make
    two different combinations read the same (a separator character could
    occur inside a header value). A composite always holds ``:``, a plain
    variant never does: the two forms cannot collide either.
    """
    if not (attributes or hostname or component or (variant and ":" in variant)):
        return variant
    return "".join(
        f"{len(part)}:{part}"
        for part in (variant or "", attributes or "", hostname or "", component or "")
    )


def _entry_from_result(result: InvokeResult) -> Entry:
    meta: list[tuple[str, str]] = []
    if result.invoked_variant is not None:
        meta.append((_META_VARIANT, result.invoked_variant))
    if result.custom_attributes is not None:
        meta.append((_META_ATTRIBUTES, result.custom_attributes))
    if result.target is not None:
        meta.append((_META_TARGET, result.target))
    return Entry(result.body, result.content_type or "", tuple(meta))


def _result_from_entry(entry: Entry, source: str) -> InvokeResult:
    fields = {"content_type": entry.content_type} if entry.content_type else {}
    target = None
    for name, value in entry.meta:
        if name == _META_TARGET:
            target = value
        else:
            field = _META_FIELDS.get(name)
            if field is not None:
                fields[field] = value
    return InvokeResult.from_fields(entry.body, fields, target, source)
