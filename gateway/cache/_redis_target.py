"""Where the Redis tier connects: ``redis_url`` / ``cluster`` decoded, and kept out of logs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote

from gateway._config.reader import fail

__all__ = ["RedisSettings", "RedisTarget", "parse_host_port", "redact_url", "redis_target"]

_SENTINEL_SCHEME = "redis+sentinel://"
# userinfo in "scheme://user:secret@host" and "password=..." query parameters.
_URL_SECRET = re.compile(r"(?<=://)([^/@]*?):([^/@]*)@")
_QUERY_SECRET = re.compile(r"(?i)(password=)[^&]*")


def redact_url(url: str | None) -> str | None:
    """``url`` with any password replaced by ``***``, safe for logs and reprs."""
    if url is None:
        return None
    return _QUERY_SECRET.sub(r"\1***", _URL_SECRET.sub(r"\1:***@", url))


class RedisSettings(Protocol):
    """The fields of the ``[cache]`` table a target is decoded from.

    The table decodes its target to validate itself, so this module names the fields
    it reads instead of importing the table's class.
    """

    @property
    def enabled(self) -> bool: ...

    @property
    def redis_url(self) -> str | None: ...

    @property
    def cluster(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """Where the Redis tier connects, decoded from ``redis_url`` / ``cluster``."""

    kind: str  # "url", "sentinel" or "cluster"
    url: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    service_name: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    cluster_nodes: tuple[tuple[str, int], ...] = ()

    def __repr__(self) -> str:
        return (
            f"RedisTarget(kind={self.kind!r}, url={redact_url(self.url)!r}, "
            f"sentinels={self.sentinels!r}, service_name={self.service_name!r}, "
            f"db={self.db}, cluster_nodes={self.cluster_nodes!r})"
        )


def redis_target(config: RedisSettings) -> RedisTarget | None:
    """The decoded connection target, or None for a near-only cache."""
    if not config.enabled or (config.redis_url is None and not config.cluster):
        return None
    if config.cluster:
        nodes = tuple(parse_host_port(config, seed, "cluster") for seed in config.cluster)
        return RedisTarget(kind="cluster", cluster_nodes=nodes)
    assert config.redis_url is not None
    if config.redis_url.startswith(_SENTINEL_SCHEME):
        return _parse_sentinel_url(config, config.redis_url)
    return RedisTarget(kind="url", url=config.redis_url)


def parse_host_port(config: RedisSettings, text: str, key: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")  # allow "[::1]:6379"
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise fail(config, key, f'{redact_url(text)!r} is not "host:port"')
    return host, int(port_text)


def _parse_sentinel_url(config: RedisSettings, url: str) -> RedisTarget:
    """``redis+sentinel://[user:pass@]h1:26379,h2:26379/service_name[/db]``.

    The credentials are the master's; sentinels are reached without them.
    """
    rest = url[len(_SENTINEL_SCHEME) :]
    userinfo, at, rest = rest.rpartition("@")
    if not at:
        userinfo = ""
    hosts_text, _, path = rest.partition("/")
    path_parts = [part for part in path.split("/") if part]
    if not hosts_text or not path_parts or len(path_parts) > 2:
        raise fail(
            config, "redis_url", "sentinel form is redis+sentinel://host:port,.../service[/db]"
        )
    sentinels = tuple(parse_host_port(config, h, "redis_url") for h in hosts_text.split(","))
    db_text = path_parts[1] if len(path_parts) == 2 else "0"
    if not db_text.isdigit():
        raise fail(config, "redis_url", "sentinel db must be an integer")
    username, _, password = userinfo.partition(":")
    return RedisTarget(
        kind="sentinel",
        url=url,
        sentinels=sentinels,
        service_name=unquote(path_parts[0]),
        db=int(db_text),
        username=unquote(username) or None,
        password=unquote(password) or None,
    )
