"""A local SparkSession and a live cluster for the whole test session, set up to start fast
and quietly."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from quorumlog import Record
from quorumlog.cli.localcluster import ProcessCluster
from tests.spark.helpers import committed_from


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark.sql")
    from quorumlog.spark import local_session

    session = local_session("quorumlog-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """Three `quorumlog serve` processes; tests only append to it, so they share it."""
    cluster = ProcessCluster(str(tmp_path_factory.mktemp("cluster")))
    cluster.start_all()
    try:
        cluster.wait_for_leader()
        yield cluster
    finally:
        cluster.stop_all()


@dataclass(frozen=True)
class Filled:
    """Records appended to the shared cluster at the start of the session."""

    records: list[Record]  # with their offsets
    start: int  # the first one's offset
    end: int  # one past the last one's


FILL_RECORDS = 100_000


@pytest.fixture(scope="session")
def filled(cluster) -> Filled:
    records = [
        Record(b"value-%06d" % i, key=b"key-%d" % (i % 7) if i % 10 == 0 else None)
        for i in range(FILL_RECORDS)
    ]
    with cluster.client(timeout=30.0) as client:
        first = client.append(records[:50_000])
        client.append(records[50_000:])
    stored = committed_from(cluster, first)
    assert [(r.key, r.value) for r in stored] == [(r.key, r.value) for r in records]
    return Filled(stored, first, stored[-1].offset + 1)
