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
- Secrets are strings: a variable that sets a secret key (``SECRET_KEYS``
  but the ``credentials`` table) is taken as text, never read as TOML (an
  all-digit token stays a string).
- Secrets come from files: ``..._<KEY>_FILE=/path`` (variable) or
  ``<key>_file = "/path"`` (in the file) sets ``<key>`` to the file's text,
  for the secret keys in ``SECRET_KEYS``. The file must be a regular file (no
  FIFO, device or directory) of at most 64 KiB of UTF-8. One trailing line
  end (LF or CRLF) is removed; what is left must be one non-empty line with
  no byte-order mark, no control character and no leading or trailing
  whitespace, else start-up is refused naming the file (never the value).
  ``credentials`` (a table) is read from a TOML file whose values are quoted
  strings.
- Two variables that set the same key (names differing only in case, or
  ``<KEY>`` and ``<KEY>_FILE``) are refused: which one wins would be luck.
- Precedence: command-line flag > environment > config file > default.

Variables that name no key are reported by the section readers, with the
variable's name put in front of the reader's message (:func:`explain`).
"""

from __future__ import annotations

import copy
import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway._config.reader import SECRET_KEYS
from gateway.errors import ConfigError

__all__ = [
    "MAX_SECRET_FILE_BYTES",
    "PREFIX",
    "SECRET_KEYS",
    "EnvironmentOverlay",
    "apply_environment",
    "explain",
]

PREFIX = "SAGEMAKER_GATEWAY__"
_FILE_SUFFIX = "_file"
# SECRET_KEYS are the keys whose value may come from a file. ``credentials``
# is a table: the sidecar's inbound SigV4 keys ([sidecar.auth]) or the
# gateway's own AWS keys.
_TABLE_SECRETS = frozenset({"credentials"})
# Larger is no token, key or URL: refused rather than read into memory.
MAX_SECRET_FILE_BYTES = 64 * 1024
_BOM = "\ufeff"


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
        value = _read_secret(name, key, raw)
    else:
        key = _match(table, last)
        # A secret is text (an all-digit token too); so is any key the file has as text.
        textual = isinstance(table.get(key), str) or key in SECRET_KEYS - _TABLE_SECRETS
        value = raw if textual else _value(raw)
    dotted = ".".join([*path, key])
    other = overlay.sources.get(dotted)
    if other is not None:
        raise ConfigError(f"{other} and {name} both set {dotted}: set one of them")
    table[key] = value
    overlay.sources[dotted] = name


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
    except ValueError:  # not TOML, or an integer too long to convert: the text
        return raw


def _read_secret(where: str, key: str, path: str) -> Any:
    text = _read_secret_file(where, path)
    if key not in _TABLE_SECRETS:
        return _secret_line(where, path, text)
    try:
        table = tomllib.loads(text)
    except ValueError:
        # Not echoing the parser's message: it may quote the secret.
        raise ConfigError(
            f'{where}: secret file {path} must hold TOML lines: KEY_ID = "secret"'
        ) from None
    for name, value in table.items():
        if not isinstance(value, str):
            raise ConfigError(
                f"{where}: secret file {path}: the secret of {name} must be a quoted string"
            )
    return table


def _read_secret_file(where: str, path: str) -> str:
    """A regular file of at most MAX_SECRET_FILE_BYTES of UTF-8, as text.

    Opened without blocking (a FIFO would wait for a writer forever) and
    checked on the open descriptor, so what is read is what was checked.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read secret file {path}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{where}: secret file {path} is not a regular file")
        with open(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read secret file {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise ConfigError(
            f"{where}: secret file {path} is larger than {MAX_SECRET_FILE_BYTES // 1024} KiB"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: secret file {path} is not UTF-8 text") from None


def _secret_line(where: str, path: str, text: str) -> str:
    """The secret a one-line file holds: one trailing LF or CRLF removed, nothing else.

    Anything else that would silently make a token never match (a second
    line end, surrounding spaces, a byte-order mark) is refused instead.
    """
    value = text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text
    problem = ""
    if not value:
        problem = "is empty"
    elif value.startswith(_BOM):
        problem = "starts with a byte-order mark"
    elif any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        problem = "holds a control character or more than one line"
    elif value != value.strip():
        problem = "has leading or trailing whitespace"
    if problem:
        raise ConfigError(f"{where}: secret file {path} {problem} (the secret is one line)")
    return value


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
