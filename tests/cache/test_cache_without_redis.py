"""redis is an extra: everything imports without it, and a Redis tier says what is missing.

Run in a child process where ``import redis`` fails, as on an install
without the ``redis`` extra (the wheel test checks the real thing, slowly).
"""

from __future__ import annotations

import subprocess
import sys

_WITHOUT_REDIS = """
import sys
sys.modules["redis"] = None  # any import of redis now raises ImportError
import gateway.cache, gateway, gateway.sidecar, gateway.emulator, gateway.tools.demo
from gateway import Gateway
from gateway.errors import ConfigError
Gateway(region="us-east-1", cache={"ttl_s": 5})  # near tier only: fine
try:
    Gateway(region="us-east-1", cache={"redis_url": "redis://127.0.0.1:6379/0"})
except ConfigError as error:
    print(error)
else:
    raise SystemExit("a Redis tier was accepted without the redis package")
"""


def test_everything_imports_without_redis_and_a_redis_tier_names_the_extra() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_REDIS], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'sagemaker-gateway[redis]'" in result.stdout
