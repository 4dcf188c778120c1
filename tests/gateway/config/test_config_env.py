"""SAGEMAKER_GATEWAY__<SECTION>__<KEY>: the environment over the config file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway._config.env import apply_environment, explain
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


# -- secret files: regular files only, bounded, exact bytes rules ----------------

TOKEN_VARIABLE = "SAGEMAKER_GATEWAY__SIDECAR__AUTH__TOKEN_FILE"


def _token_from(path: Path | str) -> str:
    overlay = apply_environment({}, {TOKEN_VARIABLE: str(path)})
    token = overlay.mapping["sidecar"]["auth"]["token"]
    assert isinstance(token, str)
    return token


def _refusal(path: Path | str) -> str:
    with pytest.raises(ConfigError) as raised:
        _token_from(path)
    message = str(raised.value)
    assert message.startswith(f"{TOKEN_VARIABLE}: secret file {path}")
    assert "\n" not in message and raised.value.__cause__ is None
    return message


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    # Before: opening it waited for a writer, and start-up hung forever.
    assert "is not a regular file" in _refusal(fifo)


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused(path: str) -> None:
    assert "is not a regular file" in _refusal(path)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    assert "is not a regular file" in _refusal(tmp_path)


def test_a_secret_file_past_64_kib_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "token"
    big.write_bytes(b"t" * (64 * 1024 + 1))
    assert "is larger than 64 KiB" in _refusal(big)
    big.write_bytes(b"t" * (64 * 1024))
    assert len(_token_from(big)) == 64 * 1024


@pytest.mark.parametrize(
    ("content", "token"),
    [
        (b"s3cret-token-of-24-chars", "s3cret-token-of-24-chars"),
        (b"s3cret-token-of-24-chars\n", "s3cret-token-of-24-chars"),
        (b"s3cret-token-of-24-chars\r\n", "s3cret-token-of-24-chars"),
    ],
)
def test_one_trailing_line_end_is_removed(tmp_path: Path, content: bytes, token: str) -> None:
    path = tmp_path / "token"
    path.write_bytes(content)
    assert _token_from(path) == token


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"s3cret-token-of-24-chars\n\n", "holds a control character or more than one line"),
        (b"s3cret-token-of-24-chars \n", "has leading or trailing whitespace"),
        (b"\xef\xbb\xbfs3cret-token-of-24-chars\n", "starts with a byte-order mark"),
        (b"s3cret-token-of-24-chars\r", "holds a control character or more than one line"),
        (b"\n", "is empty"),
        (b"s3cret-\xff-token-of-24-chars", "is not UTF-8 text"),
    ],
)
def test_a_token_that_could_never_match_is_refused_naming_the_file(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "token"
    path.write_bytes(content)
    message = _refusal(path)
    assert problem in message
    assert "s3cret" not in message


def test_a_bad_secret_file_is_one_line_from_the_sidecar_command(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"\xff\xfe not utf-8")
    result = _sidecar_command({TOKEN_VARIABLE: str(path)}, "--upstream", "http://127.0.0.1:1")
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert lines == [f"sidecar: {TOKEN_VARIABLE}: secret file {path} is not UTF-8 text"]


# -- secrets are strings, and errors never show them ---------------------------


def test_an_all_digit_token_from_the_environment_is_a_string() -> None:
    digits = "12345678901234567890"
    overlay = apply_environment(
        {}, {"SAGEMAKER_GATEWAY__SIDECAR__AUTH__TOKEN": digits, "SAGEMAKER_GATEWAY__X__Y": "1"}
    )
    assert overlay.mapping["sidecar"]["auth"]["token"] == digits
    assert overlay.mapping["x"]["y"] == 1  # other keys still read TOML values
    auth = {"mode": "bearer", **overlay.mapping["sidecar"]["auth"]}
    assert SidecarConfig.from_mapping({"auth": auth}).auth.token == digits


def test_an_unquoted_numeric_secret_in_a_credentials_file_is_refused_unseen(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text("AKIDCLIENT = 98765432109876543210\n")
    with pytest.raises(ConfigError) as raised:
        apply_environment({}, {"SAGEMAKER_GATEWAY__SIDECAR__AUTH__CREDENTIALS_FILE": str(keys)})
    message = str(raised.value)
    assert "the secret of AKIDCLIENT must be a quoted string" in message
    assert "98765" not in message


def test_reader_errors_about_a_secret_never_show_it() -> None:
    with pytest.raises(ConfigError) as raised:
        SidecarConfig.from_mapping(
            {"auth": {"mode": "sigv4", "credentials": {"AKIDCLIENT": 98765432109876543210}}}
        )
    message = str(raised.value)
    assert message.startswith("config error at sidecar.auth.credentials.AKIDCLIENT")
    assert "98765" not in message


def test_a_4300_digit_value_is_a_one_line_error() -> None:
    digits = "9" * 5000
    overlay = apply_environment({}, {"SAGEMAKER_GATEWAY__SIDECAR__MAX_IN_FLIGHT": digits})
    with pytest.raises(ConfigError) as raised:
        SidecarConfig.from_mapping(overlay.mapping["sidecar"])
    message = str(raised.value)
    assert message.startswith("config error at sidecar.max_in_flight: must be an integer")
    assert len(message) < 200


def test_a_4300_digit_integer_in_the_config_file_is_a_one_line_error(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(f"[sidecar]\nmax_in_flight = {'9' * 5000}\n")
    result = _sidecar_command({}, "--config", str(config), "--upstream", "http://127.0.0.1:1")
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and "is not valid TOML" in lines[0]


def test_an_integer_past_64_bits_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"sidecar\.max_in_flight: must be at most 2\*\*63-1"):
        SidecarConfig.from_mapping({"max_in_flight": 10**30})
    assert SidecarConfig.from_mapping({"max_in_flight": 2**20}).max_in_flight == 2**20


# -- two variables for one key ----------------------------------------------------


@pytest.mark.parametrize(
    "environ",
    [
        {"SAGEMAKER_GATEWAY__SIDECAR__LISTEN": "a:1", "sagemaker_gateway__sidecar__listen": "b:2"},
        {"SAGEMAKER_GATEWAY__SIDECAR__LISTEN": "a:1", "SAGEMAKER_GATEWAY__SIDECAR__Listen": "b:2"},
    ],
)
def test_two_variables_differing_only_in_case_are_refused(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as raised:
        apply_environment({}, environ)
    message = str(raised.value)
    assert "both set sidecar.listen: set one of them" in message
    assert all(name in message for name in environ)


def test_a_secret_and_its_file_from_two_variables_are_refused(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token-of-24-chars\n")
    environ = {"SAGEMAKER_GATEWAY__SIDECAR__AUTH__TOKEN": "x" * 24, TOKEN_VARIABLE: str(token)}
    with pytest.raises(ConfigError, match=r"both set sidecar\.auth\.token"):
        apply_environment({}, environ)


def test_a_4300_digit_worker_count_is_a_one_line_error() -> None:
    environ = {"SAGEMAKER_GATEWAY__SIDECAR__WORKERS": "9" * 5000}
    result = _sidecar_command(environ, "--upstream", "http://127.0.0.1:1")
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("sidecar: SAGEMAKER_GATEWAY__SIDECAR__WORKERS (sidecar.workers)")


def test_a_secret_file_key_in_the_config_file_follows_the_same_rules(tmp_path: Path) -> None:
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as raised:
        apply_environment({"sidecar": {"auth": {"token_file": str(fifo)}}}, {})
    assert str(raised.value) == f"sidecar.auth.token_file: secret file {fifo} is not a regular file"
