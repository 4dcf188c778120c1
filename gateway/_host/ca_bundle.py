"""The CA bundle the transport trusts: ``ca_bundle``, else AWS_CA_BUNDLE or the profile's."""

from __future__ import annotations

import ssl

from gateway import errors

__all__ = ["botocore_ca_bundle", "ssl_context"]


def botocore_ca_bundle(profile: str | None) -> str | None:
    """AWS_CA_BUNDLE or the profile's ca_bundle, as botocore resolves it."""
    import botocore.exceptions
    import botocore.session

    session = botocore.session.get_session()
    if profile:
        session.set_config_variable("profile", profile)
    try:
        value = session.get_config_variable("ca_bundle")
    except botocore.exceptions.ProfileNotFound as exc:
        raise errors.ConfigError(f"profile: {exc}") from None
    return str(value) if value else None


def ssl_context(ca_bundle: str) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=ca_bundle)
    except (OSError, ssl.SSLError) as exc:
        raise errors.ConfigError(f"ca_bundle: cannot load {ca_bundle!r}: {exc}") from None
