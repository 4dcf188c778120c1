"""``gateway.tune_gc``: freezes, sets thresholds, refuses bad ones, reports what it did.

Every test leaves the interpreter's collector as it found it (the
``restore_gc`` fixture unfreezes and puts the thresholds back), so no other
test runs with a frozen heap or odd thresholds.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

import gateway
from gateway import GcTuning, tune_gc

pytestmark = pytest.mark.usefixtures("restore_gc")


class _Tracked:
    """A GC-tracked object (instances with a __dict__ are)."""


def _in_collected_generations(target: object) -> bool:
    # get_objects() covers generations 0-2, never the permanent one.
    return any(item is target for item in gc.get_objects())


def test_freeze_moves_live_objects_out_of_the_collectors_sight() -> None:
    survivor = _Tracked()
    assert gc.is_tracked(survivor) and _in_collected_generations(survivor)
    tuning = tune_gc()
    assert isinstance(tuning, GcTuning) and tuning.frozen
    assert tuning.frozen_objects == gc.get_freeze_count() > 0
    assert not _in_collected_generations(survivor)
    assert not any(item is survivor for gen in range(3) for item in gc.get_objects(gen))
    after = _Tracked()  # allocated after the freeze: collected as usual
    assert _in_collected_generations(after)
    # Thresholds untouched unless asked.
    assert tuning.previous_thresholds == tuning.thresholds == gc.get_threshold()


def test_garbage_is_collected_before_freezing() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    del cycle
    assert tune_gc().collected >= 1


def test_calling_it_again_freezes_what_was_loaded_since() -> None:
    first = tune_gc().frozen_objects
    reloaded = [_Tracked() for _ in range(100)]
    second = tune_gc().frozen_objects
    assert second >= first + len(reloaded)
    assert not _in_collected_generations(reloaded[0])


def test_thresholds_are_set_and_reported() -> None:
    before = gc.get_threshold()
    tuning = tune_gc(thresholds=(20000, 50, 100))
    assert gc.get_threshold() == (20000, 50, 100)
    assert tuning.previous_thresholds == before
    assert tuning.thresholds == (20000, 50, 100)


def test_thresholds_without_freezing() -> None:
    tuning = tune_gc(freeze=False, thresholds=(1000, 20, 20))
    assert not tuning.frozen and tuning.collected == 0
    assert gc.get_freeze_count() == 0 == tuning.frozen_objects
    assert gc.get_threshold() == (1000, 20, 20)


@pytest.mark.parametrize(
    "thresholds",
    [
        (0, 10, 10),  # 0 turns automatic collection off
        (-1, 10, 10),
        (700, 10),
        (700, 10, 10, 10),
        (700.0, 10, 10),
        (True, 10, 10),
        (700, "10", 10),
        (2**31, 10, 10),
        "700,10,10",
    ],
)
def test_invalid_thresholds_are_refused_before_anything_changes(thresholds: Any) -> None:
    before = gc.get_threshold()
    with pytest.raises(ValueError, match=r"thresholds: must be three positive integers"):
        tune_gc(thresholds=thresholds)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_public_api() -> None:
    assert "tune_gc" in gateway.__all__ and "GcTuning" in gateway.__all__
    assert gateway.tune_gc is tune_gc
    tuning = tune_gc(freeze=False)
    with pytest.raises(AttributeError):
        tuning.frozen = True  # type: ignore[misc]
