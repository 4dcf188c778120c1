"""Whether the peer SDK (aiobotocore) can run here.

aiobotocore pins a botocore older than the new SageMaker runtimes need, so the
development environment usually lacks it (or has it beside a botocore outside
its pin, where it misbehaves); the ``peers`` extra installs it in an environment
of its own.
"""

from __future__ import annotations

import importlib.metadata

from packaging.requirements import Requirement

__all__ = ["aiobotocore_problem"]


def aiobotocore_problem() -> str | None:
    """Why aiobotocore cannot run here, or None when it can."""
    try:
        version = importlib.metadata.version("aiobotocore")
    except importlib.metadata.PackageNotFoundError:
        return "aiobotocore is not installed (the peers extra)"
    botocore = importlib.metadata.version("botocore")
    for text in importlib.metadata.requires("aiobotocore") or ():
        requirement = Requirement(text)
        if requirement.name != "botocore" or requirement.marker:
            continue
        if not requirement.specifier.contains(botocore, prereleases=True):
            return (
                f"aiobotocore {version} needs botocore{requirement.specifier}, this "
                f"environment has botocore {botocore} (the peers extra, in an environment "
                "of its own)"
            )
    return None
