"""The staged load-test runner against the emulator: results, CSV, PNG, failures by code.

Stages are fractions of a second and nothing asserts on timing.
"""

from __future__ import annotations

import csv
import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway import Gateway, errors
from gateway.emulator import Emulator, EmulatorConfig
from gateway.tools import loadtest
from gateway.tools.loadtest import LoadTestResult, Stage, StageResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# The plot extra (matplotlib) draws the PNG; without it, write_png says so.
PLOTS = importlib.util.find_spec("matplotlib") is not None
CREDENTIALS = ("AKIDLOADTESTTEST", "loadtest-test-secret")


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    config = EmulatorConfig.from_dict({"seed": 5, "endpoints": {"echo": {}}})
    async with Emulator(config) as emu:
        yield emu


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def check_png(result: LoadTestResult, path: Path) -> None:
    """A PNG at ``path`` with the plot extra installed; without it, PlotUnavailable."""
    if PLOTS:
        assert loadtest.write_png(result, path).read_bytes()[:8] == PNG_MAGIC
    else:
        with pytest.raises(loadtest.PlotUnavailable, match="matplotlib is not installed"):
            loadtest.write_png(result, path)


async def test_staged_run_writes_csv_and_png(emulator: Emulator, tmp_path: Path) -> None:
    result = await loadtest.run_loadtest(
        "2:0.3,4:0.3", target=emulator.url, endpoint="echo", credentials=CREDENTIALS
    )
    assert [(stage.index, stage.users) for stage in result.stages] == [(1, 2), (2, 4)]
    for stage in result.stages:
        assert stage.successes > 0 and stage.failures == {}
        assert stage.p50_ms is not None and stage.p99_ms is not None
        assert 0 < stage.p50_ms <= stage.p99_ms
        assert stage.requests == stage.successes
    assert result.first_failure_stage is None
    assert result.max_users_before_failure == 4

    rows = read_csv(loadtest.write_csv(result, tmp_path / "out" / "loadtest.csv"))
    assert [row["users"] for row in rows] == ["2", "4"]
    assert all(row["failures"] == "0" and int(row["requests"]) > 0 for row in rows)

    check_png(result, tmp_path / "out" / "loadtest.png")

    table = loadtest.markdown_table(result)
    assert "| stage | users |" in table and "No failures" in table


async def test_failures_by_code_and_first_failure(emulator: Emulator, tmp_path: Path) -> None:
    def faults(index: int, stage: Stage) -> None:
        # Clean first stage, then every call fails with one of two codes.
        if index == 2:
            emulator.set_faults(
                "echo", error_rates={"InternalFailure": 0.5, "ModelNotReadyException": 0.5}
            )

    result = await loadtest.run_loadtest(
        [Stage(2, 0.3), Stage(3, 0.3)],
        target=emulator.url,
        credentials=CREDENTIALS,
        on_stage=faults,
        timeout=5.0,
    )
    clean, failing = result.stages
    assert clean.failures == {} and clean.successes > 0
    assert set(failing.failures) == {"InternalFailure", "ModelNotReadyException"}
    assert failing.successes == 0 and failing.failed == failing.requests > 0
    assert failing.p50_ms is None
    assert result.first_failure_stage == 2
    assert result.max_users_before_failure == 2

    rows = read_csv(loadtest.write_csv(result, tmp_path / "loadtest.csv"))
    assert rows[0]["failures:InternalFailure"] == "0"
    assert int(rows[1]["failures:InternalFailure"]) + int(
        rows[1]["failures:ModelNotReadyException"]
    ) == int(rows[1]["requests"])
    table = loadtest.markdown_table(result)
    assert "before the first failure: 2 users" in table
    check_png(result, tmp_path / "loadtest.png")


async def test_transport_failures_use_the_class_name(emulator: Emulator) -> None:
    emulator.set_faults("echo", reset_rate=1.0)
    result = await loadtest.run_loadtest("1:0.2", target=emulator.url, credentials=CREDENTIALS)
    (stage,) = result.stages
    assert stage.successes == 0 and stage.failed > 0
    assert all(code.endswith("Error") or code == "StaleConnection" for code in stage.failures)
    assert result.max_users_before_failure is None
    assert "none (first failure in stage 1 at 1 users)" in loadtest.markdown_table(result)


async def test_route_from_config_and_existing_gateway(emulator: Emulator, tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'region = "us-east-1"\nendpoint_url = "{emulator.url}"\n'
        f'[credentials]\naccess_key_id = "{CREDENTIALS[0]}"\n'
        f'secret_access_key = "{CREDENTIALS[1]}"\n'
    )
    result = await loadtest.run_loadtest("1:0.2", target="echo", config=config, body=b"x")
    assert result.endpoint == "echo" and result.stages[0].successes > 0

    async with Gateway("us-east-1", endpoint_url=emulator.url, credentials=CREDENTIALS) as gw:
        result = await loadtest.run_loadtest("1:0.1", gateway=gw, endpoint="echo")
        assert result.stages[0].successes > 0
        assert (await gw.invoke("echo", b"still open")).body == b"still open"


async def test_route_without_config_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="--config"):
        await loadtest.run_loadtest("1:1", target="my-route")


def test_parse_stages() -> None:
    assert loadtest.parse_stages("10:30, 20:1.5") == [Stage(10, 30.0), Stage(20, 1.5)]
    for bad in ("", "10", "0:5", "5:0", "a:b", "5:-1", "5:inf"):
        with pytest.raises(ValueError, match="USERS:SECONDS"):
            loadtest.parse_stages(bad)


def test_percentile() -> None:
    ordered = [float(value) for value in range(1, 101)]
    assert loadtest.percentile(ordered, 0.50) == 50.0
    assert loadtest.percentile(ordered, 0.99) == 99.0
    assert loadtest.percentile([7.0], 0.95) == 7.0
    assert loadtest.percentile([], 0.5) is None


def _result() -> LoadTestResult:
    stage = StageResult(1, 2, 1.0, 1.0, 10, {}, 1.0, 2.0, 3.0)
    return LoadTestResult("http://x", "echo", [stage])


def test_png_without_matplotlib(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # None in sys.modules makes the import raise ImportError.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(loadtest.PlotUnavailable, match="matplotlib is not installed"):
        loadtest.write_png(_result(), tmp_path / "plot.png")
    loadtest._report(_result(), tmp_path / "out.csv", tmp_path / "plot.png")
    captured = capsys.readouterr()
    assert "PNG plot skipped" in captured.err and "| 1 | 2 |" in captured.out
    assert (tmp_path / "out.csv").exists() and not (tmp_path / "plot.png").exists()


def test_command_line_with_the_emulator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv_path, png_path = tmp_path / "lt.csv", tmp_path / "lt.png"
    arguments = ["--emulator", "--stages", "1:0.3,2:0.3", "--body-text", '{"a": 1}']
    arguments += ["--csv", str(csv_path), "--png", str(png_path), "--timeout-ms", "2000"]
    code = loadtest.main(arguments)
    assert code == 0
    out = capsys.readouterr().out
    assert out.count("\n| ") == 3  # header row + two stages
    assert len(read_csv(csv_path)) == 2
    if PLOTS:
        assert png_path.read_bytes()[:8] == PNG_MAGIC
    else:  # the run still succeeds, the PNG skipped with a note (test_png_without_matplotlib)
        assert not png_path.exists()


def test_command_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        loadtest.main(["--target", "http://127.0.0.1:1", "--stages", "nope"])
    assert "USERS:SECONDS" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        loadtest.main(["--stages", "1:1"])  # neither --target nor --emulator
    assert loadtest.main(["--target", "route-only", "--stages", "1:0.1"]) == 1
    assert "--config" in capsys.readouterr().err
