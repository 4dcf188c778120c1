"""Every family the sidecar's /metrics serves is declared once in ``gateway._observe.families``,
with the type, help and labels it is served with; and every declared family is served."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from gateway import Gateway
from gateway._observe.families import (
    FAMILIES,
    CounterFamily,
    Family,
    GaugeFamily,
    HistogramFamily,
)
from gateway.sidecar import RtbConfig, RtbProxy, SidecarConfig
from gateway.sidecar._app import SidecarApp
from gateway.sidecar._ratecap import RateCapConfig

_TYPES: dict[type[Any], str] = {
    CounterFamily: "counter",
    GaugeFamily: "gauge",
    HistogramFamily: "histogram",
}


def _registry() -> CollectorRegistry:
    """A sidecar whose gateway has a routed route and a cache, with a rate-capped RTB proxy:
    every family there is, none called or listened on."""
    gateway = Gateway(
        region="us-east-1",
        endpoint_url="http://127.0.0.1:9",
        credentials=("AKIDEXAMPLE", "example"),
        routes={
            "scores": {
                "targets": [
                    {"endpoint": "scores"},
                    {"inference_router": "router", "routing_target": "scores"},
                ]
            }
        },
        cache={"ttl_s": 60},
    )
    bidders = ("http://127.0.0.1:9/bid",)
    rtb = RtbProxy(gateway, RtbConfig(bidders=bidders, rate_cap=RateCapConfig(rps=100.0)))
    return SidecarApp(gateway, SidecarConfig(), None, rtb).registry


def _served() -> dict[str, Any]:
    served = {family.name: family for family in _registry().collect()}
    return {name: family for name, family in served.items() if name.startswith("sagemaker_")}


def _family_name(declared: Family) -> str:
    # prometheus_client names a counter's family without the "_total" of its samples.
    if isinstance(declared, CounterFamily):
        return declared.name.removesuffix("_total")
    return declared.name


def test_each_family_is_declared_once() -> None:
    names = [declared.name for declared in FAMILIES]
    assert len(names) == len(set(names))
    assert all(
        declared.name.endswith("_total") == isinstance(declared, CounterFamily)
        for declared in FAMILIES
    )


def test_every_served_family_is_declared_as_served() -> None:
    served = _served()
    declared = {_family_name(family): family for family in FAMILIES}
    assert sorted(served) == sorted(declared)
    for name, family in served.items():
        spec = declared[name]
        assert (family.type, family.documentation) == (_TYPES[type(spec)], spec.help), name
        assert family._labelnames == spec.labels, name
