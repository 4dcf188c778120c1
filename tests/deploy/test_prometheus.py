"""deploy/prometheus: the alert rules pass promtool and their own unit tests, and follow the recipe.

``promtool`` comes from the ``prometheus`` Debian package (.ci/run installs it).
In CI (``CI=true``) a missing promtool fails these tests; elsewhere they skip.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.emulator import Emulator, EmulatorConfig
from gateway.sidecar import Sidecar

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
ALERTS_TEST = PROMETHEUS / "alerts_test.yml"
DEPLOYMENT = ROOT / "deploy" / "kubernetes" / "base" / "deployment.yaml"
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool not found: apt-get install prometheus (.ci/run does)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _run(promtool: str, *args: str) -> str:
    result = subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=120, cwd=PROMETHEUS
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def _unit_tests() -> list[dict[str, Any]]:
    tests: list[dict[str, Any]] = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    return tests


def _sidecar_container() -> dict[str, Any]:
    pod = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]
    (sidecar,) = pod["spec"]["initContainers"]
    return dict(sidecar)


def _bytes(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([KMG]i)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * UNITS[unit]


def _name_and_pod(series: str) -> tuple[str, str]:
    pod = re.search(r'pod="([^"]+)"', series)
    assert pod is not None, series
    return series.split("{")[0], pod[1]


def _first_value(series: dict[str, str]) -> int:
    return int(series["values"].split("x")[0])  # "470000000x20": that value, 21 times


def test_the_rules_pass_promtool_check(promtool: str) -> None:
    output = _run(promtool, "check", "rules", ALERTS.name)
    assert f"SUCCESS: {len(_rules())} rules found" in output


def test_the_rules_pass_their_unit_tests(promtool: str) -> None:
    output = _run(promtool, "test", "rules", ALERTS_TEST.name)
    assert "SUCCESS" in output


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    fired = {
        case["alertname"]
        for test in _unit_tests()
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert fired == set(_rules())


def test_every_increase_alert_fires_on_the_first_event_of_a_counter_exported_at_zero() -> None:
    increase_alerts = {name for name, rule in _rules().items() if "increase(" in rule["expr"]}
    assert increase_alerts  # ejections and credential-refresh failures
    for name in increase_alerts:
        counter = re.search(r"increase\((\w+)", _rules()[name]["expr"])[1]  # type: ignore[index]
        first_events = [
            test
            for test in _unit_tests()
            if any(
                case["alertname"] == name and case["exp_alerts"] for case in test["alert_rule_test"]
            )
            and any(
                series["series"].startswith(counter + "{")
                and re.fullmatch(r"0( 0)* 1( 1)*", series["values"])
                for series in test["input_series"]
            )
        ]
        assert first_events, f"{name}: no unit test of a first event (0 ... 0 1 ...)"


def test_the_memory_alert_follows_the_recipes_memory_limit() -> None:
    sidecar = _sidecar_container()
    limit = _bytes(sidecar["resources"]["limits"]["memory"])
    expression = _rules()["SageMakerGatewayHighMemory"]["expr"]
    assert f'container="{sidecar["name"]}"' in expression
    assert "container_spec_memory_limit_bytes" in expression
    threshold = float(re.search(r">\s*(0\.\d+)\s*$", expression.strip())[1])  # type: ignore[index]
    assert threshold == 0.85
    # The unit test uses the recipe's limit, and working sets on either side of 85% of it.
    (test,) = [
        test
        for test in _unit_tests()
        if any(
            case["alertname"] == "SageMakerGatewayHighMemory" for case in test["alert_rule_test"]
        )
    ]
    values = {
        _name_and_pod(series["series"]): _first_value(series) for series in test["input_series"]
    }
    assert values[("container_spec_memory_limit_bytes", "ad-server-1")] == limit
    assert threshold * limit < values[("container_memory_working_set_bytes", "ad-server-1")] < limit
    assert values[("container_memory_working_set_bytes", "ad-server-2")] < threshold * limit


def test_the_down_alert_matches_the_job_discovered_from_pod_annotations() -> None:
    (job,) = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())["scrape_configs"]
    assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
    relabel = job["relabel_configs"]
    assert {
        "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
        "action": "keep",
        "regex": "true",
    } in relabel
    assert {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"} in relabel
    # The recipe's pod label, as Prometheus names it once the labelmap copies it.
    template = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]
    assert template["metadata"]["labels"]["sagemaker-gateway/sidecar"] == "true"
    assert template["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    expression = _rules()["SageMakerGatewayDown"]["expr"]
    assert 'up{sagemaker_gateway_sidecar="true"} == 0' in expression
    # The unit test's series look like that job's targets.
    (test,) = [
        test
        for test in _unit_tests()
        if any(case["alertname"] == "SageMakerGatewayDown" for case in test["alert_rule_test"])
    ]
    assert f'job="{job["job_name"]}"' in test["input_series"][0]["series"]
    assert 'sagemaker_gateway_sidecar="true"' in test["input_series"][0]["series"]


async def test_no_healthy_target_fires_on_a_sidecar_whose_route_has_every_target_failing(
    promtool: str, tmp_path: Path
) -> None:
    """The rule, run on what a real sidecar exports: a route over a deleted endpoint
    and a model that fails every call is down, a route next to it is not."""
    endpoints = {"healthy": {}, "crashing": {"faults": {"error_rates": {"ModelError": 1.0}}}}
    config = EmulatorConfig.from_dict(
        {"auth": {"credentials": {"AK": "SK"}}, "endpoints": endpoints}
    )
    async with Emulator(config) as emulator:
        sidecar_config = {
            "region": "us-east-1",
            "endpoint_url": emulator.url,
            "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
            "routes": {
                "dead": {"targets": ["deleted-endpoint", "crashing"], "retry": {"max_attempts": 1}},
                "live": {"targets": ["healthy"]},
            },
        }
        async with (
            Sidecar(sidecar_config, "127.0.0.1", 0) as sidecar,
            httpx.AsyncClient(base_url=sidecar.url, timeout=10) as http,
        ):
            for _ in range(10):
                await http.post("/endpoints/dead/invocations", content=b"x")
            assert (await http.post("/endpoints/live/invocations", content=b"x")).status_code == 200
            exposition = (await http.get("/metrics")).text

    series = [
        {
            "series": line.split(" ")[0].replace("{", '{job="sidecar",', 1),
            "values": f"{float(line.rsplit(' ', 1)[1]):g}x5",
        }
        for line in exposition.splitlines()
        if line.startswith("sagemaker_gateway_target_healthy{")
    ]
    assert len(series) == 3
    unit_test = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {
                        "eval_time": "3m",
                        "alertname": "SageMakerGatewayNoHealthyTarget",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "job": "sidecar",
                                    "route": "dead",
                                },
                                "exp_annotations": {
                                    "summary": "route dead has no healthy target",
                                    "runbook_url": (
                                        "docs/runbooks/SageMakerGatewayNoHealthyTarget.md"
                                    ),
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "no_healthy_target_test.yml"
    path.write_text(yaml.safe_dump(unit_test))
    assert "SUCCESS" in _run(promtool, "test", "rules", str(path))
