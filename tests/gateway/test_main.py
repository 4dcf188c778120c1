"""``python -m gateway``: the command list and ``--version``."""

from __future__ import annotations

import subprocess
import sys

import gateway
from gateway.__main__ import main


def test_version_flag_prints_the_package_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "--version"], capture_output=True, timeout=60, check=True
    )
    assert result.stdout.decode() == f"sagemaker-gateway {gateway.__version__}\n"


def test_unknown_command_exits_2_with_usage() -> None:
    assert main(["no-such-command"]) == 2
    assert main([]) == 2
    assert main(["--help"]) == 0
