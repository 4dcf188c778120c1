"""Synthetic traffic, training and the trade-off report (small sizes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.rtb import FeatureSpec, XGBoostModel, parse_bid_request
from gateway.rtb.report import Scored, tradeoff
from gateway.rtb.synth import SyntheticTraffic
from gateway.rtb.train import main as train_main


def test_traffic_is_seeded_parseable_and_sparse() -> None:
    first = list(SyntheticTraffic(5).generate(2000))
    assert first[:50] == list(SyntheticTraffic(5).generate(50))
    assert first[0].body != next(SyntheticTraffic(6).generate(1)).body
    requests = [parse_bid_request(item.body) for item in first]
    kinds = {r.imp[0].kind for r in requests}
    assert kinds == {"banner", "video", "native", "audio"}
    assert any(r.site for r in requests) and any(r.app for r in requests)
    assert any(r.regs.gpp for r in requests) and any(r.regs.gdpr == 1 for r in requests)
    mean = sum(item.propensity for item in first) / len(first)
    assert 0.01 < mean < 0.06  # a low base bid rate
    assert all(0.0 <= item.propensity <= 0.9 for item in first)


def test_train_writes_a_small_model_the_evaluator_reads(tmp_path: Path) -> None:
    pytest.importorskip("xgboost")  # the train extra (in dev)
    assert train_main(["--out", str(tmp_path), "--rows", "3000", "--seed", "3"]) == 0
    model = XGBoostModel.load(tmp_path / "model.json")
    spec = FeatureSpec.load(tmp_path / "features.json")
    assert len(model.trees) == 50 and model.feature_names == spec.names
    assert (tmp_path / "model.json").stat().st_size + (
        tmp_path / "features.json"
    ).stat().st_size < 1e6


def test_tradeoff_shares() -> None:
    scored = [Scored(0.1, 0.1, False), Scored(0.2, 0.2, True), Scored(0.9, 0.9, True)]
    (row,) = tradeoff(scored, [0.5])
    assert row.dropped == 2 / 3 and row.bids_lost == 0.5
    assert abs(row.expected_lost - 0.3 / 1.2) < 1e-12 and abs(row.oracle_lost - 0.3 / 1.2) < 1e-12


def test_bundled_files_are_commit_sized() -> None:
    data = Path(__file__).parents[2] / "gateway" / "rtb" / "data"
    assert sum(p.stat().st_size for p in data.iterdir()) < 500_000
