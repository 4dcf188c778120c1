"""SAGEMAKER_GATEWAY__<SECTION>__<KEY>: the environment over the config file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway._config_env import apply_environment, explain
from gateway.errors import ConfigError
from gateway.sidecar import SidecarConfig
from gateway.sidecar._sidecar import _command_config, _parser

FILE = {
    "region": "us-east-1",
    "sidecar": {"listen": "127.0.0.1:8081", "max_in_flight": 64},
    "routes": {"bid-filter": {"targets": [{"endpoint": "a"}]}},
}


def test_variables_set_scalars_at_any_depth_with_toml_values() -> None:
    overlay = apply_environment(
        FILE,
        {
            "SAGEMAKER_GATEWAY__REGION": "eu-west-1",
            "SAGEMAKER_GATEWAY__SIDECAR__LISTEN": "0.0.0.0:8081",
            "SAGEMAKER_GATEWAY__SIDECAR__MAX_IN_FLIGHT": "512",
            "SAGEMAKER_GATEWAY__SIDECAR__GC_FREEZE": "false",
            "SAGEMAKER_GATEWAY__SIDECAR__AUTH__MODE": "bearer",
            "SAGEMAKER_GATEWAY__ROUTES__BID_FILTER__TARGETS": '[{endpoint = "b"}]',
            "UNRELATED": "x",
        },
    )
    mapping = overlay.mapping
    assert mapping["region"] == "eu-west-1"
    assert mapping["sidecar"]["listen"] == "0.0.0.0:8081"
    assert mapping["sidecar"]["max_in_flight"] == 512
    assert mapping["sidecar"]["gc_freeze"] is False
    assert mapping["sidecar"]["auth"] == {"mode": "bearer"}
    # BID_FILTER reached the file's "bid-filter" route; lists are set whole.
    assert mapping["routes"]["bid-filter"]["targets"] == [{"endpoint": "b"}]
    assert overlay.sources["sidecar.listen"] == "SAGEMAKER_GATEWAY__SIDECAR__LISTEN"
    assert FILE["sidecar"]["listen"] == "127.0.0.1:8081"  # the input is not modified


def test_a_string_in_the_file_stays_a_string() -> None:
    overlay = apply_environment(
        {"sidecar": {"auth": {"token": "x" * 20}}},
        {"SAGEMAKER_GATEWAY__SIDECAR__AUTH__TOKEN": "1234567890123456789"},
    )
    assert overlay.mapping["sidecar"]["auth"]["token"] == "1234567890123456789"


def test_secrets_come_from_files(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token-of-24-chars\n")
    keys = tmp_path / "keys.toml"
    keys.write_text('AKIDCLIENT = "client-secret"\n')
    redis = tmp_path / "redis"
    redis.write_text("redis://:pw@10.0.0.1:6379/0")
    overlay = apply_environment(
        {"sidecar": {"auth": {"mode": "sigv4", "credentials_file": str(keys)}}},
        {
            "SAGEMAKER_GATEWAY__SIDECAR__AUTH__TOKEN_FILE": str(token),
            "SAGEMAKER_GATEWAY__CACHE__REDIS_URL_FILE": str(redis),
        },
    )
    auth = overlay.mapping["sidecar"]["auth"]
    assert auth["token"] == "s3cret-token-of-24-chars"
    assert auth["credentials"] == {"AKIDCLIENT": "client-secret"}
    assert "credentials_file" not in auth
    assert overlay.mapping["cache"]["redis_url"] == "redis://:pw@10.0.0.1:6379/0"
    assert SidecarConfig.from_mapping(overlay.mapping["sidecar"]).auth.credentials == {
        "AKIDCLIENT": "client-secret"
    }


def test_an_unreadable_secret_file_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="SAGEMAKER_GATEWAY__SIDECAR__AUTH__TOKEN_FILE"):
        apply_environment({}, {"SAGEMAKER_GATEWAY__SIDECAR__AUTH__TOKEN_FILE": "/nonexistent"})


def test_an_unknown_variable_is_named_by_the_section_reader_error() -> None:
    overlay = apply_environment({}, {"SAGEMAKER_GATEWAY__SIDECAR__LISTN": "127.0.0.1:1"})
    with pytest.raises(ConfigError) as raised:
        SidecarConfig.from_mapping(overlay.mapping["sidecar"])
    explained = str(explain(raised.value, overlay.sources))
    assert explained.startswith("SAGEMAKER_GATEWAY__SIDECAR__LISTN (sidecar.listn): unknown key")


def test_malformed_variable_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="SAGEMAKER_GATEWAY__SIDECAR____LISTEN"):
        apply_environment({}, {"SAGEMAKER_GATEWAY__SIDECAR____LISTEN": "x"})
    with pytest.raises(ConfigError, match="region is not a table"):
        apply_environment({"region": "us-east-1"}, {"SAGEMAKER_GATEWAY__REGION__X": "1"})


def _sidecar_command(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SAGEMAKER_GATEWAY")}
    return subprocess.run(
        [sys.executable, "-m", "gateway", "sidecar", *args],
        capture_output=True,
        timeout=60,
        check=False,
        env={**clean, **env},
    )


def test_the_sidecar_command_names_an_unknown_variable_and_exits() -> None:
    result = _sidecar_command(
        {"SAGEMAKER_GATEWAY__SIDECAR__WORKRES": "2"}, "--upstream", "http://127.0.0.1:1"
    )
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("sidecar: SAGEMAKER_GATEWAY__SIDECAR__WORKRES (sidecar.workres)")


def test_flag_beats_environment_beats_file(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text('[sidecar]\nlisten = "bad-from-file"\n')
    # The file's value is refused by the reader: the environment must replace it.
    env = {"SAGEMAKER_GATEWAY__SIDECAR__LISTEN": "also-bad-from-env"}
    from_env = _sidecar_command(env, "--config", str(config))
    assert from_env.returncode == 2
    assert "also-bad-from-env" in from_env.stderr.decode()
    # ... and a flag replaces the environment (here: a different bad value).
    from_flag = _sidecar_command(env, "--config", str(config), "--listen", "flag-wins")
    assert "flag-wins" in from_flag.stderr.decode()


@pytest.mark.parametrize(
    ("variable", "path"),
    [
        ("SAGEMAKER_GATEWAY__FOO", "foo"),
        ("SAGEMAKER_GATEWAY__POOL__FOO", "pool.foo"),
        ("SAGEMAKER_GATEWAY__CREDENTIALS__FOO", "credentials.foo"),
        ("SAGEMAKER_GATEWAY__CACHE__FOO", "cache.foo"),
        ("SAGEMAKER_GATEWAY__ROUTES__BID_FILTER__FOO", "routes.bid-filter.foo"),
        ("SAGEMAKER_GATEWAY__RTB__FOO", "rtb.foo"),
        ("SAGEMAKER_GATEWAY__SIDECAR__AUTH__FOO", "sidecar.auth.foo"),
    ],
)
def test_an_unknown_variable_in_any_section_is_named(
    variable: str, path: str, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        'region = "us-east-1"\n[routes.bid-filter]\ntargets = [{ endpoint = "a" }]\n'
        '[rtb]\nbidders = ["http://127.0.0.1:9/bid"]\nendpoint = "bid-filter"\n'
    )
    args = _parser().parse_args(["--config", str(config)])
    with pytest.raises(ConfigError) as raised:
        _command_config(args, {variable: "1"})
    assert str(raised.value).startswith(f"{variable} ({path}): unknown key")


@pytest.mark.parametrize(
    ("flags", "environ", "workers"),
    [
        (["--workers", "auto"], {}, 0),
        (["--workers", " 3 "], {}, 3),
        # A count from a variable replaces the file's "auto" (text: the file has text there).
        ([], {"SAGEMAKER_GATEWAY__SIDECAR__WORKERS": "4"}, 4),
        (["--workers", "abc"], {}, "--workers (sidecar.workers): must be an integer, got 'abc'"),
        (["--workers", "2000"], {}, "--workers (sidecar.workers): must be between 0 and 1024"),
    ],
)
def test_workers_flag_is_read_as_the_key_and_errors_name_the_flag(
    flags: list[str], environ: dict[str, str], workers: int | str, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        'region = "us-east-1"\n[credentials]\naccess_key_id = "a"\nsecret_access_key = "s"\n'
        '[sidecar]\nworkers = "auto"\n'
    )
    args = _parser().parse_args(["--config", str(config), *flags])
    if isinstance(workers, int):
        assert _command_config(args, environ)[1].workers == workers
        return
    with pytest.raises(ConfigError) as raised:
        _command_config(args, environ)
    assert str(raised.value).startswith(workers)
