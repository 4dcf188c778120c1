"""What alerts and dashboards read is there from the start, at zero, for the
configured routes and targets; label values are configured names only."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway._observe.counting import UNCONFIGURED
from gateway._server.http import Server
from gateway.emulator import Emulator
from gateway.rtb.bidder import ToyBidder
from gateway.sidecar import Sidecar

ROOT = Path(__file__).resolve().parents[2]
ROUTES = {"scorer": ["echo", "constant"], "ranker": ["a"]}
_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def _config(emulator: Emulator, bidder: Server) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "endpoint_url": emulator.url,
        "credentials": {"access_key_id": "AK", "secret_access_key": "SK"},
        "routes": {
            name: {"targets": [{"endpoint": t} for t in targets]}
            for name, targets in ROUTES.items()
        },
        "cache": {"near_max_entries": 100},
        "sidecar": {"listen": "127.0.0.1:0", "admin_listen": "127.0.0.1:0"},
        "rtb": {"bidders": [f"http://127.0.0.1:{bidder.port}/bid"], "min_batch": 1},
    }


@pytest.fixture
async def admin(
    emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> AsyncIterator[httpx.AsyncClient]:
    async with Sidecar(_config(emulator, bidder[1])) as sidecar:
        assert sidecar.admin_url is not None
        async with httpx.AsyncClient(base_url=sidecar.admin_url) as http:
            yield http


def _queried_families() -> set[str]:
    """The sagemaker_gateway_* families the shipped alert rules and dashboard read."""
    expressions: list[str] = []
    for rules in (ROOT / "deploy/prometheus").glob("*.yml"):
        for group in yaml.safe_load(rules.read_text()).get("groups", []):
            expressions += [str(rule["expr"]) for rule in group["rules"] if "expr" in rule]
    for board in (ROOT / "deploy/grafana").glob("*.json"):
        expressions += re.findall(r'"expr":\s*"((?:[^"\\]|\\.)*)"', board.read_text())
    names = set()
    # Label matchers ({sagemaker_gateway_sidecar="true"}) name labels, not families.
    selectors = re.sub(r"\{[^}]*\}", "", "\n".join(expressions))
    for name in re.findall(r"\bsagemaker_gateway_[a-z_]+", selectors):
        for suffix in _SUFFIXES:
            name = name.removesuffix(suffix)
        names.add(name)
    return names


async def test_every_family_alerts_and_panels_read_is_at_zero_before_any_traffic(
    admin: httpx.AsyncClient,
) -> None:
    queried = _queried_families()
    assert len(queried) >= 20  # the files were read
    families = {
        f.name: f for f in text_string_to_metric_families((await admin.get("/metrics")).text)
    }
    missing = sorted(queried - set(families))
    assert missing == []
    for name in sorted(queried):
        family = families[name]
        assert family.samples, f"{name} has no series before traffic"
        if family.type in ("counter", "histogram"):
            nonzero = [
                s for s in family.samples if s.value != 0 and not s.name.endswith("_created")
            ]
            assert nonzero == [], name
        routes = {s.labels["route"] for s in family.samples if "route" in s.labels}
        if routes and name.startswith("sagemaker_gateway_") and "sidecar" not in name:
            assert set(ROUTES) <= routes, name
        pairs = {
            (s.labels["route"], s.labels["target"]) for s in family.samples if "target" in s.labels
        }
        if pairs:
            assert {(r, t) for r, ts in ROUTES.items() for t in ts} <= pairs, name


async def test_first_failed_refresh_and_ejection_series_exist_at_zero(
    admin: httpx.AsyncClient,
) -> None:
    families = {
        f.name: f for f in text_string_to_metric_families((await admin.get("/metrics")).text)
    }
    refreshes = {
        s.labels["result"]: s.value
        for s in families["sagemaker_gateway_credential_refreshes"].samples
    }
    assert refreshes == {"ok": 0, "failed": 0}
    rejected = {
        s.labels["reason"]: s.value for s in families["sagemaker_gateway_sidecar_rejected"].samples
    }
    assert rejected["in_flight_cap"] == 0
    ejections = {
        (s.labels["route"], s.labels["target"]): s.value
        for s in families["sagemaker_gateway_ejections"].samples
    }
    assert ejections == {("scorer", "echo"): 0, ("scorer", "constant"): 0, ("ranker", "a"): 0}


async def test_a_cr_in_an_endpoint_name_never_reaches_a_label(
    emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    sidecar = Sidecar(_config(emulator, bidder[1]))
    async with sidecar, httpx.AsyncClient(base_url=sidecar.url) as http:
        for name in ("bad%0dname", "bad%0aname", "q%22uote", "scorer"):
            await http.post(f"/endpoints/{name}/invocations", content=b"x")
        text = (await http.get("/metrics")).text
    assert "\r" not in text
    families = {f.name: f for f in text_string_to_metric_families(text)}  # parses
    routes = {s.labels["route"] for s in families["sagemaker_gateway_sidecar_requests"].samples}
    assert routes <= {*ROUTES, UNCONFIGURED, "openrtb"}
    requests = {
        s.labels["route"]: s.value
        for s in families["sagemaker_gateway_sidecar_requests"].samples
        if s.labels["operation"] == "invoke" and s.value
    }
    assert requests == {UNCONFIGURED: 3, "scorer": 1}


async def test_bogus_names_never_push_a_configured_route_out_of_its_label(
    emulator: Emulator, bidder: tuple[ToyBidder, Server]
) -> None:
    config = _config(emulator, bidder[1])
    config["sidecar"]["metrics_label_cap"] = 2
    async with Sidecar(config) as sidecar, httpx.AsyncClient(base_url=sidecar.url) as http:
        for index in range(10):
            await http.post(f"/endpoints/junk-{index}/invocations", content=b"x")
        assert (await http.post("/endpoints/ranker/invocations", content=b"x")).status_code == 200
        text = (await http.get("/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    calls = {s.labels["route"]: s.value for s in families["sagemaker_gateway_calls"].samples}
    assert calls == {"scorer": 0, "ranker": 1, UNCONFIGURED: 10}
