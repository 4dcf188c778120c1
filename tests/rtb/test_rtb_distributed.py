"""The trainer on Dask: a LocalCluster over a generated log of a million requests.

Marked slow (CI runs it; ``-m 'not slow'`` skips it locally). The log is
generated on the workers (`synthetic_bag`), so no million-line file is written.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.rtb.synth import SyntheticTraffic
from gateway.rtb.train import LogLine, count_values, train_on_lines

distributed = pytest.importorskip("distributed")  # the distributed extra (in dev)

from gateway.rtb.distributed import synthetic_bag, train_on_bag, train_on_files  # noqa: E402

MILLION = 1_000_000
# One cluster for the module's tests, on one xdist worker (its dashboard on a free port).
pytestmark = pytest.mark.xdist_group("dask-cluster")


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as dask_client,
    ):
        yield dask_client


@pytest.mark.slow
@pytest.mark.timeout(600)  # ~40 s on two idle cores; a shared, loaded machine takes longer
def test_a_million_requests_on_a_local_cluster(client: object) -> None:
    started = time.perf_counter()
    result = train_on_bag(synthetic_bag(MILLION, partitions=16, seed=5))
    seconds = time.perf_counter() - started
    parts = result.rows
    assert parts["encode"] + parts["train"] + parts["valid"] == MILLION
    assert parts["unreadable"] == 0
    assert 0.35 < parts["encode"] / MILLION < 0.45 and 0.08 < parts["valid"] / MILLION < 0.12
    assert len(result.spec.features[3].encoding) > 100  # domains seen often enough
    # It learned something: the validation bids score higher than the no-bids.
    scores, labels = result.valid_scores, result.valid_labels
    bid = [s for s, label in zip(scores, labels, strict=True) if label]
    no_bid = [s for s, label in zip(scores, labels, strict=True) if not label]
    assert sum(bid) / len(bid) > 1.5 * sum(no_bid) / len(no_bid)
    print(f"\ndask: {MILLION:,} requests in {seconds:.1f} s ({MILLION / seconds:,.0f}/s)")


def test_files_on_the_cluster_train_like_one_machine(client: object, tmp_path: Path) -> None:
    """The same log, as files on Dask and read in-process: the same spec and rows."""
    items = list(SyntheticTraffic(9).generate(3000))
    paths = []
    for part in range(3):
        path = tmp_path / f"log-{part}.jsonl.gz"
        with gzip.open(path, "wb") as log:
            for item in items[part::3]:
                log.write(b'{"request": %s, "ts": %d, "bid": %d}\n' % (
                    item.body, item.timestamp, item.label
                ))  # fmt: skip
        paths.append(path)
    on_dask = train_on_files(paths, scheduler=client.scheduler.address)  # type: ignore[attr-defined]
    lines = [
        LogLine(item.body, item.timestamp, item.label)
        for part in range(3)
        for item in items[part::3]
    ]
    local = train_on_lines(lambda: lines)
    assert on_dask.spec == local.spec
    assert on_dask.rows == local.rows
    assert on_dask.valid_labels == local.valid_labels
    assert count_values(local.spec, lines).requests == local.rows["encode"]
