# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""What ``Gateway`` does around the prediction cache.

The cache package knows nothing of SageMaker; this module maps a call onto
it: which members of a call make the cache key, which version tag a route's
answers carry, how an ``InvokeResult`` becomes a cache ``Entry`` and back,
and the near-tier peek / get-or-load sequence ``Gateway.invoke`` runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway import errors
from gateway._invoke.api import InvokeResult, Operation
from gateway.cache import CacheSource, Entry, PredictionCache

__all__ = ["CachedCalls", "KeyFields", "KeyLayout"]

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

    def key(self, route: str, layout: KeyLayout, values: tuple[object, ...], body: bytes) -> str:
        """The cache key of one call: every member it sends but ``NOT_IN_CACHE_KEY``, and the body.

        ``values`` is the call's member tuple (``Operation.headers`` order).
        """
        return self.key_of(route, layout.fields(values), body)

    def key_of(self, route: str, fields: KeyFields, body: bytes) -> str:
        """:meth:`key` from the call's :meth:`KeyLayout.fields`, already looked up."""
        model = fields[0]
        version = self._versions.lookup(route, model)
        return self._cache.key_for(route, model, fields[1], fields[2], fields[3], version, body)

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
        fill = _Fill(invoke)
        try:
            entry, source = await self._cache.get_or_load(key, fill, ttl_s=ttl, deadline=deadline)
        except TimeoutError:  # the cache's own (builtin) one: a wait for another call
            raise errors.DeadlineExceeded(
                "the call's deadline passed while it waited for an identical call in flight"
            ) from None
        loaded = fill.result
        if source is CacheSource.LOADED and loaded is not None:
            return loaded
        return _result_from_entry(entry, source.value)

    async def refresh_versions(self, route: str) -> None:
        await self._versions.refresh(route)

    def set_version(self, endpoint: str, version: str, target_model: str | None) -> None:
        """Tag ``endpoint``'s answers here at once, and in every process sharing Redis."""
        self._versions.set(endpoint, target_model, version)


class _Fill:
    """The cache's loader for one call: makes the call and keeps its result.

    The caller that made the call gets that result itself, with every field
    of the answer, not one rebuilt from the cache entry.
    """

    __slots__ = ("invoke", "result")

    def __init__(self, invoke: Callable[[], Awaitable[InvokeResult]]) -> None:
        self.invoke = invoke
        self.result: InvokeResult | None = None

    async def __call__(self) -> Entry:
        result = await self.invoke()
        self.result = result
        return _entry_from_result(result)


# The key fields a member tuple gives: model, members part, content type, accept.
KeyFields = tuple[str | None, str | None, str | None, str | None]
_MEMO_MAX = 4096


class KeyLayout:
    """Where an operation's members go in a cache key, computed once per operation.

    TargetModel, ContentType and Accept have key fields of their own; every
    other member the key covers (``Operation.keyed``: all but
    ``NOT_IN_CACHE_KEY``) goes into the variant field, so a member a newer
    model adds is in the key by default: it may cost hit rate, never a wrong
    answer.
    """

    __slots__ = (
        "_memo",
        "accept",
        "content_type",
        "model",
        "not_keyed",
        "others",
        "own",
        "variant",
    )

    def __init__(self, operation: Operation) -> None:
        self.model = operation.index("TargetModel")
        self.content_type = operation.index("ContentType")
        self.accept = operation.index("Accept")
        self.variant = operation.index("TargetVariant")
        own = {self.model, self.content_type, self.accept, self.variant}
        self.others: tuple[tuple[int, str], ...] = tuple(
            (index, operation.headers[index].name) for index in operation.keyed if index not in own
        )
        # The key's own fields read "" as unset; an empty value sent goes in the composite.
        self.own: tuple[tuple[int, str], ...] = tuple(
            (index, operation.headers[index].name)
            for index in (self.model, self.content_type, self.accept)
            if index >= 0
        )
        keyed = set(operation.keyed)
        self.not_keyed = tuple(i for i in range(len(operation.headers)) if i not in keyed)
        # Member tuple -> its key fields: most calls repeat a few shapes.
        self._memo: dict[tuple[object, ...], KeyFields] = {}

    def fields(self, values: tuple[object, ...]) -> KeyFields:
        """(model, members part, content type, accept) of a call's key."""
        for index in self.not_keyed:
            if values[index] is not None:  # a per-call value (InferenceId): no memo
                return self._fields(values)
        fields = self._memo.get(values)
        if fields is None:
            fields = self._fields(values)
            if len(self._memo) >= _MEMO_MAX:
                self._memo.clear()
            self._memo[values] = fields
        return fields

    def _fields(self, values: tuple[object, ...]) -> KeyFields:
        return (
            _text(values, self.model),
            _members_key(values, self),
            _text(values, self.content_type),
            _text(values, self.accept),
        )


def _text(values: tuple[object, ...], index: int) -> str | None:
    if index < 0:
        return None
    value = values[index]
    return None if value is None else str(value)


def _members_key(values: tuple[object, ...], layout: KeyLayout) -> str | None:
    """The keyed members without a field of their own, as one key part.

    The common case (a variant at most) is the variant itself. Otherwise
    each set member is written as its name and value, each with its length
    in front, so no choice of values can make two different combinations
    read the same (a separator character could occur inside a header value).
    A composite starts with ``=`` and holds ``:``; a plain variant never
    holds ``:``: the two forms cannot collide either.
    """
    variant = _text(values, layout.variant)
    parts: list[str] | None = None
    for index, name in layout.others:
        value = values[index]
        if value is not None:
            if parts is None:
                parts = []
            text = str(value)
            parts.append(f"{len(name)}:{name}{len(text)}:{text}")
    for index, name in layout.own:
        if values[index] == "":
            if parts is None:
                parts = []
            parts.append(f"{len(name)}:{name}0:")
    if parts is None and (variant is None or (variant and ":" not in variant)):
        return variant
    if variant is not None:
        parts = [f"13:TargetVariant{len(variant)}:{variant}", *(parts or ())]
    return "=" + "".join(parts or ())


def _entry_from_result(result: InvokeResult) -> Entry:
    meta: list[tuple[str, str]] = []
    variant = result.invoked_variant
    if variant is not None:
        meta.append((_META_VARIANT, variant))
    attributes = result.custom_attributes
    if attributes is not None:
        meta.append((_META_ATTRIBUTES, attributes))
    target = result.target
    if target is not None:
        meta.append((_META_TARGET, target))
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
