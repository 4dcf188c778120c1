"""Training on your own bid logs: the CLI on a generated log, the artifact served by the
emulator, and training rows that are byte for byte the filter's online rows."""

from __future__ import annotations

import asyncio
import gzip
import tarfile
from pathlib import Path

import orjson
import pytest

from gateway import Gateway
from gateway.emulator import Emulator, EmulatorConfig
from gateway.rtb import BidFilter, FeatureSpec, FilterPolicy, Reason, XGBoostModel
from gateway.rtb._logs import log_line
from gateway.rtb._training import TRAIN, VALID, part_of
from gateway.rtb.filter import InProcessResult
from gateway.rtb.request import parse_record
from gateway.rtb.synth import SyntheticTraffic
from gateway.rtb.train import LogLine, Outcome, feature_rows, main, read_log, read_outcomes

ROWS = 4000
DEFAULT_TS = 1_717_597_800.0
DEFAULT = ["--default-ts", str(DEFAULT_TS)]


def write_log(directory: Path, rows: int = ROWS, seed: int = 11) -> tuple[Path, Path]:
    """A gzipped request log (half bare requests, half envelopes) and its outcomes file.

    Bare requests get their labels and times from the outcomes (joined by id); every
    fourth outcome has no time, so its request is at ``--default-ts``. The envelopes
    carry theirs inline (``ts`` in milliseconds), as ``price`` or ``bid``.
    """
    requests, outcomes = directory / "requests.jsonl.gz", directory / "outcomes.jsonl"
    with gzip.open(requests, "wb") as log, outcomes.open("wb") as joined:
        for index, item in enumerate(SyntheticTraffic(seed).generate(rows)):
            if index % 2:
                log.write(item.body + b"\n")
                outcome = {"id": orjson.loads(item.body)["id"], "bid": int(item.label)}
                if index % 8 != 7:
                    outcome["ts"] = item.timestamp
                joined.write(orjson.dumps(outcome) + b"\n")
            else:
                envelope = {"request": item.body.decode(), "ts": item.timestamp * 1000}
                if index % 4:
                    envelope["bid"] = int(item.label)
                else:
                    envelope["price"] = 1.25 if item.label else 0
                log.write(orjson.dumps(envelope) + b"\n")
        log.write(b"{not json\n")  # skipped and counted, never fatal
    return requests, outcomes


def time_of(line: LogLine, outcomes: dict[str, Outcome]) -> float:
    """The time the trainer gives a line: its own, its outcome's, or the default."""
    if line.ts is not None:
        return line.ts
    outcome = outcomes.get(orjson.loads(line.body)["id"])
    return outcome.ts if outcome is not None and outcome.ts is not None else DEFAULT_TS


def readable(log: Path) -> list[LogLine]:
    return [line for line in read_log(log) if not line.body.startswith(b"{not")]


def test_log_lines_envelopes_and_outcomes(tmp_path: Path) -> None:
    bare = b'{"id":"r1","imp":[{"id":"1","banner":{}}]}'
    assert log_line(bare) == LogLine(bare)
    envelope = orjson.dumps({"request": orjson.loads(bare), "ts": 1_717_597_800_000, "price": 2})
    assert log_line(envelope) == LogLine(bare, 1_717_597_800.0, True)
    (tmp_path / "o.jsonl").write_bytes(b'{"id": "r1", "bid": 1, "ts": 5}\n{"id": 7, "price": 0}\n')
    outcomes = read_outcomes(tmp_path / "o.jsonl")
    assert (outcomes["r1"].bid, outcomes["r1"].ts, outcomes["7"].bid) == (True, 5.0, False)


def test_the_cli_trains_on_a_log_and_the_emulator_serves_the_artifact(tmp_path: Path) -> None:
    pytest.importorskip("xgboost")  # the train extra (in dev)
    requests, outcomes = write_log(tmp_path)
    out = tmp_path / "model"
    args = ["--requests", str(requests), "--outcomes", str(outcomes), "--out", str(out)]
    assert main([*args, *DEFAULT]) == 0
    assert {"model.json", "features.json", "model.tar.gz", "report.md", "tradeoff.png"} <= {
        p.name for p in out.iterdir()
    }
    with tarfile.open(out / "model.tar.gz") as tar:
        assert tar.getnames() == ["xgboost-model", "features.json"]
    report = (out / "report.md").read_text()
    assert "| threshold | requests dropped | true bids lost |" in report
    assert "'unreadable': 1}" in report  # only the line that is not JSON
    asyncio.run(_score_through_the_emulator(out, requests, read_outcomes(outcomes)))


async def _score_through_the_emulator(out: Path, log: Path, outcomes: dict[str, Outcome]) -> None:
    spec = FeatureSpec.load(out / "features.json")
    model = XGBoostModel.load(out / "model.tar.gz")  # the file the emulator loads
    lines = readable(log)[:200]
    artifact = {"type": "xgboost", "path": str(out / "model.tar.gz")}
    config = EmulatorConfig.from_dict({"endpoints": {"mine": {"model": artifact}}})
    async with (
        Emulator(config) as emulator,
        Gateway(region="us-east-1", endpoint_url=emulator.url, credentials=("AK", "SK")) as gw,
    ):
        bid_filter = BidFilter(
            gw, "mine", spec=spec, policy=FilterPolicy(threshold=0.0), default_budget=10.0
        )
        try:
            futures = [
                bid_filter.submit(line.body, now=time_of(line, outcomes), budget=10.0)
                for line in lines
            ]  # a generous budget: this test is about the scores, not the clock
            decisions = [await future for future in futures]  # in batches, as in production
        finally:
            await bid_filter.aclose()
        assert emulator.stats.count("mine") >= 1
    rows = [spec.record_csv_row(parse_record(line.body), time_of(line, outcomes)) for line in lines]
    expected = [float(s) for s in model.predict_csv(b"\n".join(rows)).split()]
    assert [d.reason for d in decisions] == [Reason.SCORED_KEEP] * len(lines)
    assert [d.score for d in decisions] == expected
    assert len(set(expected)) > 20  # a model that ranks, not a constant


class RowRecorder:
    """A scorer that records the rows the filter sends (and answers 0.5 each)."""

    def __init__(self) -> None:
        self.rows: list[bytes] = []

    async def invoke(
        self, endpoint: str, body: bytes, *, content_type: str, accept: str, timeout: float | None
    ) -> InProcessResult:
        sent = body.split(b"\n")
        self.rows += sent
        return InProcessResult(b"\n".join(b"0.5" for _ in sent))


async def test_training_rows_are_byte_for_byte_the_filters_online_rows(tmp_path: Path) -> None:
    pytest.importorskip("xgboost")  # the train extra (in dev)
    requests, outcomes = write_log(tmp_path, rows=1500, seed=12)
    out = tmp_path / "model"
    args = ["--requests", str(requests), "--outcomes", str(outcomes), "--out", str(out)]
    assert main([*args, *DEFAULT]) == 0
    spec = FeatureSpec.load(out / "features.json")
    joined = read_outcomes(outcomes)
    lines = [line for line in readable(requests) if part_of(line.body) in (TRAIN, VALID)]
    trained = feature_rows(spec, lines, joined, DEFAULT_TS)
    online = RowRecorder()
    bid_filter = BidFilter(online, "e", spec=spec, max_batch=1, min_batch=1, default_budget=10.0)
    try:
        for line in lines:
            await bid_filter.decide(line.body, now=time_of(line, joined))
    finally:
        await bid_filter.aclose()
    assert len(online.rows) == len(lines) > 500
    # One line at a time, each in its part: the rows, in log order, are the online rows.
    one_by_one = [feature_rows(spec, [line], joined, DEFAULT_TS) for line in lines]
    assert [(r.train + r.valid)[0] for r in one_by_one] == online.rows
    assert len(trained.train) + len(trained.valid) == len(lines)
    assert trained.train == [r.train[0] for r in one_by_one if r.train]


def test_parquet_logs_read_like_json_lines(tmp_path: Path) -> None:
    pyarrow = pytest.importorskip("pyarrow")  # the parquet extra (in dev)
    import pyarrow.parquet as parquet

    items = list(SyntheticTraffic(3).generate(50))
    table = pyarrow.table(
        {
            "request": [item.body.decode() for item in items],
            "ts": [item.timestamp for item in items],
            "bid": [int(item.label) for item in items],
        }
    )
    parquet.write_table(table, tmp_path / "log.parquet")
    lines = list(read_log(tmp_path / "log.parquet"))
    assert lines == [LogLine(item.body, item.timestamp, item.label) for item in items]
