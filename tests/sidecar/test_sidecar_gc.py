"""``sidecar.gc_freeze`` / ``sidecar.gc_thresholds``: parsing, errors, the command's GC step.

The tests that tune the collector in this process put it back afterwards
(``restore_gc``): unfrozen, original thresholds.
"""

from __future__ import annotations

import gc
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import Gateway
from gateway.errors import ConfigError
from gateway.sidecar import Sidecar, SidecarConfig
from gateway.sidecar._sidecar import tune_process_gc


def test_defaults_and_keys() -> None:
    config = SidecarConfig.from_mapping({})
    assert config.gc_freeze is True and config.gc_thresholds is None
    config = SidecarConfig.from_mapping({"gc_freeze": False, "gc_thresholds": [20000, 50, 100]})
    assert config.gc_freeze is False
    assert config.gc_thresholds == (20000, 50, 100)  # a TOML array becomes a tuple


def test_keys_from_toml() -> None:
    import tomllib

    table = tomllib.loads("[sidecar]\ngc_freeze = true\ngc_thresholds = [10000, 20, 20]\n")
    config = SidecarConfig.from_mapping(table["sidecar"])
    assert config.gc_freeze and config.gc_thresholds == (10000, 20, 20)


@pytest.mark.parametrize(
    ("table", "key", "detail"),
    [
        ({"gc_freeze": 1}, "sidecar.gc_freeze", "true or false"),
        ({"gc_freeze": "yes"}, "sidecar.gc_freeze", "true or false"),
        ({"gc_thresholds": [20000, 50]}, "sidecar.gc_thresholds", "a list of 3 items"),
        ({"gc_thresholds": [0, 10, 10]}, "sidecar.gc_thresholds[0]", "between 1 and 2147483647"),
        ({"gc_thresholds": [-1, 10, 10]}, "sidecar.gc_thresholds[0]", "between 1 and 2147483647"),
        ({"gc_thresholds": [1.5, 10, 10]}, "sidecar.gc_thresholds[0]", "must be an integer"),
        ({"gc_thresholds": [True, 10, 10]}, "sidecar.gc_thresholds[0]", "must be an integer"),
        ({"gc_thresholds": [10, 10, 2**31]}, "sidecar.gc_thresholds[2]", "and 2147483647"),
        ({"gc_thresholds": 700}, "sidecar.gc_thresholds", "must be a list"),
        ({"gc_threshold": [700, 10, 10]}, "sidecar.gc_threshold", "unknown key"),
    ],
)
def test_bad_values_name_the_key(table: dict[str, Any], key: str, detail: str) -> None:
    with pytest.raises(ConfigError) as caught:
        SidecarConfig.from_mapping(table)
    message = str(caught.value)
    assert message.startswith(f"config error at {key}:") and detail in message


async def _frozen_gauge(sidecar: Sidecar) -> float:
    async with httpx.AsyncClient(base_url=sidecar.url) as http:
        text = (await http.get("/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (sample,) = families["sagemaker_gateway_sidecar_gc_frozen_objects"].samples
    return sample.value


@pytest.mark.usefixtures("restore_gc")
async def test_an_in_process_sidecar_leaves_the_hosts_gc_alone(sidecar: Sidecar) -> None:
    # Started (fixture) with gc_freeze = true by default: still nothing frozen.
    assert sidecar.config.gc_freeze
    assert gc.get_freeze_count() == 0
    assert await _frozen_gauge(sidecar) == 0


@pytest.mark.usefixtures("restore_gc")
async def test_the_commands_gc_step_freezes_and_reports(gateway: Gateway) -> None:
    config = SidecarConfig(gc_thresholds=(20000, 50, 100))
    async with Sidecar(gateway, "127.0.0.1", 0, config=config) as sidecar:
        tuning = tune_process_gc(sidecar)
        assert tuning is not None and tuning.frozen
        assert tuning.frozen_objects == gc.get_freeze_count() > 0
        assert gc.get_threshold() == (20000, 50, 100)
        assert await _frozen_gauge(sidecar) == tuning.frozen_objects


@pytest.mark.usefixtures("restore_gc")
async def test_the_commands_gc_step_can_be_turned_off(gateway: Gateway) -> None:
    before = gc.get_threshold()
    off = SidecarConfig(gc_freeze=False)
    async with Sidecar(gateway, "127.0.0.1", 0, config=off) as sidecar:
        assert tune_process_gc(sidecar) is None
        assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
        assert await _frozen_gauge(sidecar) == 0
    thresholds_only = SidecarConfig(gc_freeze=False, gc_thresholds=(5000, 10, 10))
    async with Sidecar(gateway, "127.0.0.1", 0, config=thresholds_only) as sidecar:
        tuning = tune_process_gc(sidecar)
        assert tuning is not None and not tuning.frozen
        assert gc.get_freeze_count() == 0 and gc.get_threshold() == (5000, 10, 10)
        assert await _frozen_gauge(sidecar) == 0
