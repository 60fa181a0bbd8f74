"""A compacted topic through Spark: its offsets have holes where the cleaner removed
records, and a batch read or a stream reads each record that is left once, tombstones as
null values, whatever its ranges' bounds fall on."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("pyspark")

from quorumlog import Record
from tests.spark.helpers import stream_available_now, topic_records

PARTITIONS = 2
KEYS = 30


def _held_by(cluster, node_id: int, topic: str) -> list[tuple]:
    """What one node's replicas of `topic` hold (a node serves reads directly)."""
    out = []
    with cluster.client(node_id=node_id) as client:
        for partition in range(PARTITIONS):
            offset = client.start_offset(topic, partition)
            while page := client.read(offset, 10_000, topic, partition):
                out += [(partition, r.offset, r.key, r.value) for r in page]
                offset = page[-1].offset + 1
    return out


def _compacted(cluster, topic: str) -> None:
    """Until every replica's cleaner has left one record per row, and the same holes (Spark
    reads each range from any replica)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        held = [_held_by(cluster, n, topic) for n in cluster.ids]
        rows = [r for r in held[0] if r[2].startswith(b"row-")]
        if len(rows) == KEYS and all(h == held[0] for h in held):
            return
        time.sleep(0.2)
    raise AssertionError(f"{topic!r} not compacted alike on every replica within 60 s")


@pytest.fixture(scope="module")
def table(cluster) -> str:
    settings = {
        "cleanup.policy": "compact",
        "segment.bytes": 65_536,
        "min.cleanable.dirty.ratio": 0.01,
    }
    with cluster.client(timeout=30.0) as client:
        client.create_topic("table", partitions=PARTITIONS, config=settings)
        for round_ in range(12):
            records = [
                Record(b"%d:" % round_ + os.urandom(500), key=b"row-%d" % k) for k in range(KEYS)
            ]
            if round_ == 11:  # row-0's last record a tombstone, kept a day
                records[0] = Record(None, key=b"row-0")
            client.append_spread(records, topic="table")
        filler = [Record(os.urandom(900), key=b"filler-%d" % i) for i in range(200)]
        client.append_spread(filler, topic="table")  # closes the segments above
    _compacted(cluster, "table")
    return "table"


def _rows(rows) -> list[tuple]:
    return sorted(
        (r.partition, r.offset, bytes(r.key), None if r.value is None else bytes(r.value))
        for r in rows
    )


def _expected(records: list[Record]) -> list[tuple]:
    return sorted((r.partition, r.offset, r.key, r.value) for r in records)


def test_a_batch_read_of_a_compacted_topic_reads_what_is_left_once(spark, cluster, table):
    stored = topic_records(cluster, table)
    last = {p: max(r.offset for r in stored if r.partition == p) for p in range(PARTITIONS)}
    assert any(len([r for r in stored if r.partition == p]) <= last[p] for p in last), "holes"
    reader = spark.read.format("quorumlog").option("brokers", cluster.brokers)
    # Ranges of 7 offsets: many fall wholly inside a hole, read as empty.
    df = reader.option("topic", table).option("recordsPerPartition", "7").load()
    assert _rows(df.collect()) == _expected(stored)
    assert any(r.value is None for r in stored), "the tombstone reads back as a null value"


def test_a_stream_of_a_compacted_topic_reads_what_is_left_once(spark, cluster, table, tmp_path):
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
    stream_available_now(
        spark, cluster.brokers, sink, checkpoint, topic=table, maxRecordsPerTrigger=40
    )
    rows = spark.read.parquet(sink).collect()
    assert _rows(rows) == _expected(topic_records(cluster, table)), "each record once"
