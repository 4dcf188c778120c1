"""Configuration from the environment: ``SAGEMAKER_GATEWAY__<SECTION>__<KEY>``.

An overlay on the raw mapping read from the config file, applied before any
section is parsed, so the ordinary readers validate the result (and reject
unknown keys) whatever the source. Rules:

- ``SAGEMAKER_GATEWAY__`` then the key path, one ``__`` between levels, in
  any case: ``SAGEMAKER_GATEWAY__SIDECAR__LISTEN`` is ``[sidecar] listen``,
  ``SAGEMAKER_GATEWAY__REGION`` the top-level ``region``,
  ``SAGEMAKER_GATEWAY__SIDECAR__AUTH__MODE`` is ``[sidecar.auth] mode``. A
  level matches an existing key of the file ignoring case, with ``_``
  standing for ``-`` (``ROUTES__BID_FILTER`` reaches ``[routes.bid-filter]``);
  a new key is the level in lower case.
- The value is the variable's text when the file has a string there;
  otherwise it is read as a TOML value if it is one (``4``, ``2.5``,
  ``true``, ``["a", "b"]``, ``{ endpoint = "a" }``), else as text. Lists and
  tables (a route's ``targets``, ``rtb.bidders``) are set whole, as TOML
  inline values; there is no per-element variable.
- Secrets come from files: ``..._<KEY>_FILE=/path`` (variable) or
  ``<key>_file = "/path"`` (in the file) sets ``<key>`` to the file's text
  (one trailing newline removed), for the secret keys in ``SECRET_KEYS``.
  ``credentials`` (a table) is read from a TOML file.
- Precedence: command-line flag > environment > config file > default.

Variables that name no key are reported by the section readers, with the
variable's name put in front of the reader's message (:func:`explain`).
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.errors import ConfigError

__all__ = ["PREFIX", "SECRET_KEYS", "EnvironmentOverlay", "apply_environment", "explain"]

PREFIX = "SAGEMAKER_GATEWAY__"
_FILE_SUFFIX = "_file"
# Keys whose value may come from a file. ``credentials`` is a table: the
# sidecar's inbound SigV4 keys ([sidecar.auth]) or the gateway's own AWS keys.
SECRET_KEYS = frozenset(
    {"token", "credentials", "secret_access_key", "session_token", "redis_url", "password"}
)
_TABLE_SECRETS = frozenset({"credentials"})


@dataclass(slots=True)
class EnvironmentOverlay:
    """The mapping with the environment applied, and which variable set what."""

    mapping: dict[str, Any]
    # Dotted key path ("sidecar.listen") -> the variable that set it.
    sources: dict[str, str] = field(default_factory=dict)


def apply_environment(mapping: Mapping[str, Any], environ: Mapping[str, str]) -> EnvironmentOverlay:
    """``mapping`` (not modified) with the ``SAGEMAKER_GATEWAY__*`` variables applied."""
    result: dict[str, Any] = copy.deepcopy(dict(mapping))
    # The file's own secret files first: a variable then overrides either form.
    _resolve_secret_keys(result, "")
    overlay = EnvironmentOverlay(result)
    for name in sorted(environ):
        if name.upper().startswith(PREFIX):
            _apply_variable(overlay, name, environ[name])
    return overlay


def explain(error: ConfigError, sources: Mapping[str, str]) -> ConfigError:
    """``error`` with the variable that set the offending key named first, if one did."""
    message = str(error)
    where: str | None = getattr(error, "key", None)
    if where is not None:
        problem = message.partition(f"{where}: ")[2] or message
    else:  # an error that names its key only in the text: "key: problem"
        where, _, problem = message.partition(": ")
    where = where.strip().lstrip(".")
    # The longest key path set from the environment that the error is about.
    for path in sorted(sources, key=len, reverse=True):
        if where == path or where.startswith(path + ".") or path.startswith(where + "."):
            return ConfigError(f"{sources[path]} ({path}): {problem.strip()}")
    return error


def _apply_variable(overlay: EnvironmentOverlay, name: str, raw: str) -> None:
    levels = name[len(PREFIX) :].split("__")
    if not levels or any(not level for level in levels):
        raise ConfigError(
            f"{name}: not a configuration key (expected {PREFIX}<SECTION>__<KEY>, "
            "one '__' between levels)"
        )
    table = overlay.mapping
    path: list[str] = []
    for level in levels[:-1]:
        key = _match(table, level)
        path.append(key)
        child = table.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{name}: {'.'.join(path)} is not a table")
        table = child
    last = levels[-1]
    secret = last.lower().endswith(_FILE_SUFFIX) and last.lower()[: -len(_FILE_SUFFIX)]
    if secret and secret in SECRET_KEYS:
        key = _match(table, secret)
        table[key] = _read_secret(name, key, raw)
    else:
        key = _match(table, last)
        table[key] = raw if isinstance(table.get(key), str) else _value(raw)
    overlay.sources[".".join([*path, key])] = name


def _match(table: Mapping[str, Any], level: str) -> str:
    """The existing key ``level`` names (case and ``-``/``_`` ignored), else it in lower case."""
    wanted = level.lower()
    for key in table:
        if isinstance(key, str) and key.lower().replace("-", "_") == wanted:
            return key
    return wanted


def _value(raw: str) -> Any:
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        return raw


def _read_secret(where: str, key: str, path: str) -> Any:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read secret file {path}: {exc.strerror}") from None
    if key not in _TABLE_SECRETS:
        return text.removesuffix("\n").removesuffix("\r")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        # Not echoing the parser's message: it may quote the secret.
        raise ConfigError(
            f'{where}: secret file {path} must hold TOML lines: KEY_ID = "secret"'
        ) from None


def _resolve_secret_keys(table: dict[str, Any], where: str) -> None:
    """``<secret>_file = "/path"`` keys of the file, at any depth, read in place."""
    for key in list(table):
        value = table[key]
        if isinstance(value, dict):
            _resolve_secret_keys(value, f"{where}{key}.")
            continue
        if not isinstance(key, str) or not key.endswith(_FILE_SUFFIX):
            continue
        secret = key[: -len(_FILE_SUFFIX)]
        if secret not in SECRET_KEYS:
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{where}{key}: must be a file path")
        if secret in table:
            raise ConfigError(f"{where}{key}: give {secret} or {key}, not both")
        table[secret] = _read_secret(f"{where}{key}", secret, value)
        del table[key]
