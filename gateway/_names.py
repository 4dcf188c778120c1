"""The distribution's other top-level packages must be the ones ``import`` finds.

sagemaker-gateway installs four top-level packages: ``gateway``, ``routing``,
``cache`` and ``sagemaker_gateway_config``. An application with its own
``cache.py`` (or ``routing/``)
next to its entry point shadows one of them, and the failure would otherwise
surface as a puzzling ``cannot import name 'CacheConfig' from 'cache'``.
``gateway/__init__.py`` imports this module first; importing it checks.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["TOP_LEVEL_PACKAGES", "check_top_level_packages"]

TOP_LEVEL_PACKAGES = ("gateway", "routing", "cache", "sagemaker_gateway_config")


def check_top_level_packages() -> None:
    """Raise ImportError naming the file that shadows one of the other packages, if one does."""
    home = Path(__file__).resolve().parent.parent  # where this distribution's packages live
    for name in TOP_LEVEL_PACKAGES[1:]:
        found = _location(name)
        expected = home / name
        if found is None or found.resolve() != expected:
            raise ImportError(_message(name, found, expected), name=name)


def _location(name: str) -> Path | None:
    """The directory of the package ``name`` resolves to, or the file of a module."""
    module = sys.modules.get(name)
    if module is not None:
        origin = getattr(module, "__file__", None)
        paths = list(getattr(module, "__path__", []))
    else:
        spec = importlib.util.find_spec(name)
        if spec is None:
            return None
        origin = spec.origin
        paths = list(spec.submodule_search_locations or [])
    if origin and Path(origin).name == "__init__.py":
        return Path(origin).parent
    if origin:
        return Path(origin)
    return Path(paths[0]) if paths else None  # a namespace package: a bare directory


def _message(name: str, found: Path | None, expected: Path) -> str:
    if found is None:
        return (
            f"sagemaker-gateway: its top-level package {name!r} cannot be imported "
            f"(expected at {expected}); reinstall sagemaker-gateway"
        )
    return (
        f"sagemaker-gateway: the top-level name {name!r} resolves to {found}, not to this "
        f"distribution's package at {expected}. sagemaker-gateway installs the top-level "
        f"packages {', '.join(TOP_LEVEL_PACKAGES)}; rename your module {found.name!r} "
        f"(for example to 'app_{found.name}') or move it inside your own package."
    )


check_top_level_packages()
