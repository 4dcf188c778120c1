"""An application's own ``cache.py`` or ``routing/`` cannot shadow any part of the gateway.

The distribution installs one top-level import package, ``gateway``; its cache and
routing layers are ``gateway.cache`` and ``gateway.routing``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_USE_EVERY_LAYER = """
import cache, routing  # the application's own modules
assert cache.VALUE == routing.VALUE == 1
import gateway, gateway.cache, gateway.routing
from gateway.cache import CacheConfig
from gateway.routing import RouteConfig
assert gateway.cache.__file__.startswith({root!r})
assert gateway.routing.__file__.startswith({root!r})
print("ok")
"""


@pytest.mark.parametrize(
    "own_modules",
    [("cache.py", "routing.py"), ("cache/__init__.py", "routing/__init__.py")],
    ids=["modules", "packages"],
)
def test_an_applications_cache_and_routing_live_beside_the_gateway(
    tmp_path: Path, own_modules: tuple[str, str]
) -> None:
    for name in own_modules:
        file = tmp_path / name
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("VALUE = 1\n")
    # The application's directory comes first on the path, as a script's own directory does.
    result = subprocess.run(
        [sys.executable, "-c", _USE_EVERY_LAYER.format(root=str(ROOT))],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
