# Compiled with mypyc in wheels (HOT_PATH in gateway/_host/build.py); an editable install runs it
# as plain Python. Keep it compilable: no async generators, no monkeypatching of its classes,
# re-check attributes narrowed before an await. A compiled install needs a rebuild after edits.
"""The route table, default single-target routes, and the interface gateway uses."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from ._config import RouteConfig, Target, parse_routes
from ._route import HealthObserver, Route

__all__ = ["Router"]

Clock = Callable[[], float]


class Router:
    """Routes by name, plus on-demand single-target routes for bare endpoint names.

    ``default_template`` (optional) supplies the timeout, hedge, retry,
    ejection and health-check settings of those default routes; its name
    and targets are ignored. Default routes are cached (FIFO-bounded by
    ``default_route_capacity``) so their statistics persist across calls.
    ``observer(route, target)`` is called after every ejection and
    re-admission in any of the routes (``target.state`` says which).
    """

    __slots__ = (
        "_capacity",
        "_clock",
        "_defaults",
        "_observer",
        "_random",
        "_routes",
        "_template",
    )

    def __init__(
        self,
        routes: Mapping[str, RouteConfig] | Iterable[RouteConfig] = (),
        *,
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
        default_template: RouteConfig | None = None,
        default_route_capacity: int = 1024,
        observer: HealthObserver | None = None,
    ) -> None:
        configs = routes.values() if isinstance(routes, Mapping) else routes
        self._clock = clock
        self._observer = observer
        self._random = rng if rng is not None else random.Random()
        self._template = default_template
        self._capacity = max(1, default_route_capacity)
        self._routes = {config.name: self._build(config) for config in configs}
        self._defaults: dict[str, Route] = {}

    @classmethod
    def from_mapping(cls, routes: Mapping[str, Any], **kwargs: Any) -> Router:
        """Build from the ``[routes]`` table as ``tomllib`` parsed it."""
        return cls(parse_routes(routes), **kwargs)

    @property
    def routes(self) -> Mapping[str, Route]:
        """The configured routes (default routes are not included)."""
        return self._routes

    def route(self, name: str) -> Route | None:
        return self._routes.get(name)

    def default_route(self, endpoint_name: str) -> Route:
        """A single-target route sending everything to SageMaker endpoint ``endpoint_name``."""
        route = self._defaults.get(endpoint_name)
        if route is None:
            route = self._build(self._default_config(endpoint_name))
            if len(self._defaults) >= self._capacity:
                del self._defaults[next(iter(self._defaults))]
            self._defaults[endpoint_name] = route
        return route

    def find(self, name: str) -> Route | None:
        """The route :meth:`resolve` gives, if it exists already; None: nothing is made.

        For a caller that has not yet authenticated who asks: a name never seen
        must not make a default route (and push a real one out of the bounded set).
        """
        route = self._routes.get(name)
        if route is None:
            route = self._defaults.get(name)
        return route

    def resolve(self, name: str) -> Route:
        """The configured route ``name``, or else the default route for endpoint ``name``."""
        route = self._routes.get(name)
        if route is None:
            route = self._defaults.get(name)  # default_route's lookup, without the call
            if route is None:
                route = self.default_route(name)
        return route

    def _default_config(self, endpoint_name: str) -> RouteConfig:
        targets = (Target(endpoint=endpoint_name),)
        if self._template is None:
            return RouteConfig(name=endpoint_name, targets=targets)
        return replace(self._template, name=endpoint_name, targets=targets)

    def _build(self, config: RouteConfig) -> Route:
        # One seeded generator per route keeps runs reproducible under a seeded Router.
        rng = random.Random(self._random.getrandbits(64))
        return Route(config, clock=self._clock, rng=rng, observer=self._observer)
