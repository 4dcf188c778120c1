"""The peer SDKs (aiobotocore): tests that compare with them run where they are installed.

aiobotocore pins a botocore older than the one the new SageMaker runtimes need,
so it lives in an environment of its own (the ``peers`` extra; ``.ci/run``'s
second pass). Elsewhere its tests skip, saying why; with
``SAGEMAKER_GATEWAY_EXPECT_PEERS=1`` (that second pass) a missing peer fails
them instead, so the pass cannot succeed by skipping.
"""

from __future__ import annotations

import os

import pytest

from bench._peers import aiobotocore_problem

__all__ = ["EXPECT_PEERS_ENV", "require_peers"]

EXPECT_PEERS_ENV = "SAGEMAKER_GATEWAY_EXPECT_PEERS"


def require_peers() -> None:
    """Skip the calling test (or module) without a usable aiobotocore; fail in the peers pass."""
    problem = aiobotocore_problem()
    if problem is None:
        return
    problem += ": .ci/run's second pass runs these tests"
    if os.environ.get(EXPECT_PEERS_ENV):
        pytest.fail(f"{EXPECT_PEERS_ENV} is set but {problem}", pytrace=False)
    pytest.skip(problem, allow_module_level=True)
