"""Where hooks are registered: the hooks of one gateway and the ``emit`` they make up.

A hook is any callable taking one :data:`~gateway._observe.events.Event`. Hooks run
synchronously on the event loop, inside the call that emits: keep them short and
never let them raise (an exception is logged once per hook type and swallowed, the
call goes on).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from gateway._observe.events import Emit, Event

__all__ = ["Hook", "Instrumentation"]

# Named for the stream: a broken hook's traceback is logged as the stream's.
log = logging.getLogger("gateway.events")


class Hook(Protocol):
    """Anything that takes an event.

    A hook with a true ``never_raises`` attribute is called directly; any
    other is wrapped so that an exception it raises is logged and dropped.
    A hook whose ``reads_request_id`` attribute is False never reads
    ``CallFinished.request_id``: while no hook reads it, that is None
    (finding the id in an answer costs CPU on every call).
    """

    def __call__(self, event: Event) -> None: ...


class Instrumentation:
    """The hooks of one gateway; ``emit`` is what emission points call.

    ``emit`` is None while no hook is registered, so an emission point is
    ``if emit is not None: emit(Event(...))``. With one hook, ``emit`` is
    that hook itself (no fan-out loop); listeners re-read ``emit`` through
    ``subscribe`` whenever the set of hooks changes.
    """

    def __init__(self, hooks: Sequence[Hook] = ()) -> None:
        self._hooks: list[Hook] = []
        self._listeners: list[Callable[[Emit | None], None]] = []
        self._failed: set[type] = set()
        self.emit: Emit | None = None
        for hook in hooks:
            self.add(hook)

    @property
    def hooks(self) -> tuple[Hook, ...]:
        return tuple(self._hooks)

    def add(self, hook: Hook) -> None:
        if hook not in self._hooks:
            self._hooks.append(hook)
            self._rebuild()

    def remove(self, hook: Hook) -> None:
        if hook in self._hooks:
            self._hooks.remove(hook)
            self._rebuild()

    def subscribe(self, listener: Callable[[Emit | None], None]) -> None:
        """Call ``listener(emit)`` now and whenever hooks are added or removed."""
        self._listeners.append(listener)
        listener(self.emit)

    def _rebuild(self) -> None:
        hooks = tuple(self._hooks)
        if not hooks:
            self.emit = None
        elif len(hooks) == 1:
            self.emit = self._guard(hooks[0])
        else:
            guarded = tuple(self._guard(hook) for hook in hooks)

            def fan_out(event: Event) -> None:
                for hook in guarded:
                    hook(event)

            if all(getattr(hook, "reads_request_id", True) is False for hook in hooks):
                fan_out.reads_request_id = False  # type: ignore[attr-defined]  # as _guard's
            self.emit = fan_out
        for listener in self._listeners:
            listener(self.emit)

    def _guard(self, hook: Hook) -> Emit:
        if getattr(hook, "never_raises", False) is True:
            return hook  # the gateway's own hooks: no wrapper call per event
        failed = self._failed

        def guarded(event: Event) -> None:
            try:
                hook(event)
            except Exception:
                # A broken hook must never break a call; say so once per kind.
                if type(hook) not in failed:
                    failed.add(type(hook))
                    log.exception("instrumentation hook %s failed", type(hook).__name__)

        if getattr(hook, "reads_request_id", True) is False:
            guarded.reads_request_id = False  # type: ignore[attr-defined]  # read by emitters
        return guarded
