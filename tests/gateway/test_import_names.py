"""An application's own ``cache.py`` or ``routing/`` must not break ``import gateway`` silently."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def import_gateway_from(app_dir: Path) -> subprocess.CompletedProcess[str]:
    # The application's directory comes first on the path, as a script's own directory does.
    return subprocess.run(
        [sys.executable, "-c", "import gateway"],
        cwd=app_dir,
        env={"PYTHONPATH": f"{app_dir}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "shadow",
    [
        "cache.py",
        "routing/__init__.py",
        "cache/__init__.py",
        "routing.py",
        "sagemaker_gateway_config.py",
    ],
)
def test_a_shadowing_module_is_named_with_the_fix(tmp_path: Path, shadow: str) -> None:
    file = tmp_path / shadow
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("VALUE = 1\n")
    result = import_gateway_from(tmp_path)
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("ImportError: sagemaker-gateway: the top-level name")
    shadowing = tmp_path / shadow.split("/")[0]
    assert str(shadowing) in last_line
    assert "rename your module" in last_line
    assert "gateway, routing, cache, sagemaker_gateway_config" in last_line


def test_an_unrelated_module_next_to_the_app_is_fine(tmp_path: Path) -> None:
    (tmp_path / "app_cache.py").write_text("VALUE = 1\n")
    result = import_gateway_from(tmp_path)
    assert result.returncode == 0, result.stderr
