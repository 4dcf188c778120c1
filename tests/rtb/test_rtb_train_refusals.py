"""The trainer checks its data before it writes anything, refuses in one line, writes each
file atomically, and never writes into the installed package."""

from __future__ import annotations

import gzip
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import gateway.rtb.train as trainer
from gateway.rtb._training import TRAIN, part_of
from gateway.rtb.features import target_feature_spec
from gateway.rtb.synth import SyntheticTraffic
from gateway.rtb.train import (
    LogLine,
    Outcome,
    TrainingRefused,
    TrainResult,
    feature_rows,
    main,
    read_log,
    synthetic_lines,
    train_on_lines,
    write_outputs,
)

pyarrow = pytest.importorskip("pyarrow")  # the parquet extra (in dev)
import pyarrow.parquet as parquet  # noqa: E402

PACKAGE_DATA = Path(trainer.__file__).parent / "data"
TS = 1_717_597_800
ITEMS = list(SyntheticTraffic(3).generate(600))
OLD_MODEL = {"model.json": b"old model\n", "features.json": b"old features\n"}


def envelopes(**fields: object) -> bytes:
    return b"".join(
        orjson.dumps({"request": item.body.decode(), **fields}) + b"\n" for item in ITEMS
    )


def outcomes_of(**fields: object) -> bytes:
    ids = [orjson.loads(item.body)["id"] for item in ITEMS]
    return b"".join(orjson.dumps({"id": i, **fields}) + b"\n" for i in ids)


def requests_table(**columns: list[object]) -> object:
    return pyarrow.table({"request": [item.body.decode() for item in ITEMS], **columns})


def write_cases(folder: Path) -> dict[str, list[str]]:
    """Each bad input the trainer met with a traceback, and its command line."""
    folder.mkdir()

    def put(name: str, data: bytes) -> str:
        (folder / name).write_bytes(data)
        return str(folder / name)

    def table(name: str, data: object) -> str:
        parquet.write_table(data, folder / name)
        return str(folder / name)

    good = envelopes(ts=TS, bid=1)
    packed = gzip.compress(good)
    corrupt = bytearray(packed)
    corrupt[len(corrupt) // 2] ^= 0xFF
    parquet.write_table(requests_table(ts=[TS] * len(ITEMS)), folder / "good.parquet")
    whole = (folder / "good.parquet").read_bytes()
    bare = put("bare.jsonl", b"".join(item.body + b"\n" for item in ITEMS))
    default_ts = ["--default-ts", str(TS)]

    def log(path: str) -> list[str]:
        return ["--requests", path]

    def joined(name: str, data: bytes, *more: str) -> list[str]:
        return ["--requests", bare, "--outcomes", put(name, data), *more]

    others = b'{"id": "someone-else", "bid": 1}\n' * 10
    return {
        "truncated gzip": log(put("cut.jsonl.gz", packed[: len(packed) // 2])),
        "not gzip": log(put("plain.jsonl.gz", b"plain text\n")),
        "corrupt gzip": log(put("corrupt.jsonl.gz", bytes(corrupt))),
        "truncated parquet": log(put("cut.parquet", whole[: len(whole) // 2])),
        "bad parquet": log(put("bad.parquet", b"PAR1 not parquet")),
        "integer request column": log(
            table("int.parquet", pyarrow.table({"request": [200_000_000] * 3}))
        ),
        "text ts column": log(table("text-ts.parquet", requests_table(ts=[str(TS)] * 600))),
        "text price column": log(table("price.parquet", requests_table(price=["1.5"] * 600))),
        "list bid column": log(table("list-bid.parquet", requests_table(bid=[[1]] * 600))),
        "ts inf column": log(
            table("inf.parquet", requests_table(ts=[float("inf")] * 600, bid=[1] * 600))
        ),
        "text ts envelope": log(put("text-ts.jsonl", envelopes(ts="soon", bid=1))),
        "ts inf envelope": log(put("inf-ts.jsonl", envelopes(ts="inf", bid=1))),
        "text price envelope": log(put("price.jsonl", envelopes(ts=TS, price="high"))),
        "outcomes that do not join": joined("others.jsonl", others, *default_ts),
        "outcomes with text ts": joined("o1.jsonl", outcomes_of(bid=1, ts="soon")),
        "outcomes with ts inf": joined("o2.jsonl", outcomes_of(bid=1, ts="inf")),
        "outcomes with text price": joined("o3.jsonl", outcomes_of(price="x"), *default_ts),
        "outcomes with text bid": joined("o5.jsonl", outcomes_of(bid="0"), *default_ts),
        "outcomes truncated gzip": joined("o4.jsonl.gz", gzip.compress(outcomes_of(bid=1))[:200]),
        "requests without outcomes": [*log(bare), *default_ts],
        "all no-bids": log(put("no-bids.jsonl", envelopes(ts=TS, bid=0))),
        "a folder as a log": log(str(folder)),
    }


CASES = [
    "truncated gzip", "not gzip", "corrupt gzip", "truncated parquet", "bad parquet",
    "integer request column", "text ts column", "text price column", "list bid column",
    "ts inf column", "text ts envelope", "ts inf envelope", "text price envelope",
    "outcomes that do not join", "outcomes with text ts", "outcomes with ts inf",
    "outcomes with text price", "outcomes with text bid", "outcomes truncated gzip",
    "requests without outcomes", "all no-bids", "a folder as a log",
]  # fmt: skip


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return write_cases(tmp_path_factory.mktemp("logs") / "cases")


def run(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as exit:  # argparse's refusals
        return exit.code if isinstance(exit.code, int) else 1


@pytest.mark.parametrize("case", CASES)
def test_every_refusal_is_one_line_and_writes_nothing(
    case: str, cases: dict[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "model"
    assert run([*cases[case], "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m gateway.rtb.train: "), err
    assert not out.exists()


def test_what_each_refusal_says(cases: dict[str, list[str]], tmp_path: Path) -> None:
    said = {}
    for case in ("integer request column", "outcomes that do not join", "all no-bids"):
        done = subprocess.run(
            [sys.executable, "-m", "gateway.rtb.train", *cases[case], "--out", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 1 and "Traceback" not in done.stderr
        said[case] = done.stderr
    assert (
        "column 'request' must hold text (the raw JSON), not int64"
        in said["integer request column"]
    )
    assert (
        "have no outcome: no bid or price of their own, and none joined by id"
        in said["outcomes that do not join"]
    )
    assert "requests are all no-bids: training needs both outcomes" in said["all no-bids"]


def test_outcomes_that_join_none_leave_the_installed_model_as_it_was(
    cases: dict[str, list[str]], tmp_path: Path
) -> None:
    """They trained on all-no-bid labels, wrote the model over the old one, then died in
    the report (ZeroDivisionError)."""
    out = tmp_path / "model"
    out.mkdir()
    for name, data in OLD_MODEL.items():
        (out / name).write_bytes(data)
    args = [*cases["outcomes that do not join"], "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "gateway.rtb.train", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == OLD_MODEL


@pytest.fixture
def package_data_kept() -> Iterator[dict[str, bytes]]:
    """The bundled model's files, put back if a test changed them."""
    before = {p.name: p.read_bytes() for p in PACKAGE_DATA.iterdir() if p.is_file()}
    try:
        yield before
    finally:
        for path in PACKAGE_DATA.iterdir():
            if path.is_file() and path.name not in before:
                path.unlink()
        for name, data in before.items():
            if (PACKAGE_DATA / name).read_bytes() != data:
                (PACKAGE_DATA / name).write_bytes(data)


def test_out_is_required_and_never_inside_the_installed_package(
    package_data_kept: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["--rows", "0"]) == 2  # it defaulted to the package's own data folder
    assert capsys.readouterr().err == (
        "python -m gateway.rtb.train: the following arguments are required: --out\n"
    )
    for inside in (PACKAGE_DATA, PACKAGE_DATA.parent, PACKAGE_DATA / "new"):
        assert run(["--out", str(inside), "--rows", "3000"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "inside the installed package" in err
    assert {p.name: p.read_bytes() for p in PACKAGE_DATA.iterdir()} == package_data_kept


@pytest.fixture(scope="module")
def trained() -> TrainResult:
    lines = synthetic_lines(3000, 3)
    return train_on_lines(lambda: lines, seed=3)


def test_outputs_replace_the_old_files_whole(trained: TrainResult, tmp_path: Path) -> None:
    for name, data in OLD_MODEL.items():
        (tmp_path / name).write_bytes(data)
    sizes = write_outputs(trained, tmp_path)
    assert {"model.json", "features.json", "model.tar.gz", "report.md"} <= set(sizes)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(sizes)  # no staging left
    assert (tmp_path / "model.json").read_bytes() != OLD_MODEL["model.json"]


def test_a_write_that_fails_leaves_the_old_files(
    trained: TrainResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, data in OLD_MODEL.items():
        (tmp_path / name).write_bytes(data)

    def disk_full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trainer, "write_artifact", disk_full)  # after model.json is made
    with pytest.raises(TrainingRefused, match="No space left on device"):
        write_outputs(trained, tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == OLD_MODEL


def test_a_parquet_column_of_the_wrong_type_is_refused_before_it_is_read(
    cases: dict[str, list[str]],
) -> None:
    """An int64 ``request`` went through ``bytes(int)``: 200,000,000 allocated 200 MB a row."""
    path = Path(cases["integer request column"][1])
    assert path.stat().st_size < 2000
    tracemalloc.start()
    try:
        with pytest.raises(TrainingRefused, match="column 'request' must hold text"):
            list(read_log(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 10 << 20


def test_a_line_keeps_its_own_outcome_when_the_outcomes_do_not_list_it() -> None:
    """With --outcomes, an envelope's own bid was replaced by a no-bid."""
    spec = target_feature_spec()
    lines = [LogLine(item.body, TS, True) for item in ITEMS]
    lines = [line for line in lines if part_of(line.body) == TRAIN]
    assert lines
    rows = feature_rows(spec, lines, outcomes={"elsewhere": Outcome(False)})
    assert rows.train_labels == [True] * len(lines)
    first = orjson.loads(lines[0].body)["id"]
    joined = feature_rows(spec, lines[:1], outcomes={first: Outcome(False, TS)})
    assert joined.train_labels == [False]  # a joined outcome wins over the line's own
