"""bench.compare's aiobotocore row: kept where aiobotocore can run, explained where not."""

from __future__ import annotations

import importlib.metadata

import pytest

import bench._peers
import bench.compare
from bench._peers import aiobotocore_problem

NAMES = ["gateway-native", "aiobotocore", "boto3"]


def test_kept_when_aiobotocore_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.compare, "aiobotocore_problem", lambda: None)
    assert bench.compare._peer_clients(NAMES, explicit=True) == NAMES


def test_dropped_from_the_default_set_with_a_note(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench.compare, "aiobotocore_problem", lambda: "too old")
    assert bench.compare._peer_clients(NAMES, explicit=False) == ["gateway-native", "boto3"]
    assert "no aiobotocore row: too old" in capsys.readouterr().err


def test_refused_when_asked_for_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.compare, "aiobotocore_problem", lambda: "too old")
    with pytest.raises(SystemExit, match="cannot measure aiobotocore: too old"):
        bench.compare._peer_clients(NAMES, explicit=True)


def _installed(
    monkeypatch: pytest.MonkeyPatch, versions: dict[str, str], requires: list[str]
) -> None:
    def version(name: str) -> str:
        if name not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(bench._peers.importlib.metadata, "version", version)
    monkeypatch.setattr(bench._peers.importlib.metadata, "requires", lambda name: requires)


def test_the_problem_names_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    pins = ["botocore<1.43.118,>=1.43.115", "aiohttp<4.0.0,>=3.12.0"]
    _installed(monkeypatch, {"aiobotocore": "3.10.0", "botocore": "1.44.8"}, pins)
    problem = aiobotocore_problem()
    assert problem is not None
    assert "aiobotocore 3.10.0 needs botocore<1.43.118,>=1.43.115" in problem
    assert "botocore 1.44.8" in problem
    _installed(monkeypatch, {"aiobotocore": "3.10.0", "botocore": "1.43.117"}, pins)
    assert aiobotocore_problem() is None
    _installed(monkeypatch, {"botocore": "1.44.8"}, [])
    assert aiobotocore_problem() == "aiobotocore is not installed (the peers extra)"
