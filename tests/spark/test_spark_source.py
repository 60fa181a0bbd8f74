"""A local Spark reading a live cluster: batch reads in partitions, streams that restart
from their checkpoint, and records lost to retention."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("pyspark")

from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.spark import (
    DataLossError,
    OffsetRange,
    Options,
    read_range,
    split,
)
from tests.spark.helpers import committed_from, stream_available_now


def _read(spark, brokers: str, **options):
    reader = spark.read.format("quorumlog").option("brokers", brokers)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader.load()


def test_batch_read_of_100000_records_in_partitions(spark, cluster, filled):
    df = _read(spark, cluster.brokers, startingOffset=filled.start, endingOffset=filled.end)
    assert df.schema.simpleString() == (
        "struct<offset:bigint,key:binary,value:binary,timestamp:timestamp>"
    )
    assert df.rdd.getNumPartitions() == 2  # 100,000 offsets, one per record
    rows = df.orderBy("offset").collect()
    got = [(r.offset, r.key and bytes(r.key), bytes(r.value)) for r in rows]
    assert got == [(r.offset, r.key, r.value) for r in filled.records]
    first = filled.records[0]
    assert rows[0].timestamp.timestamp() == pytest.approx(first.timestamp_ms / 1000)


def test_batch_read_bounds_and_partition_size(spark, cluster, filled):
    start = filled.start + 10
    bounded = _read(
        spark,
        cluster.brokers,
        startingOffset=start,
        endingOffset=start + 100,
        recordsPerPartition=30,
    )
    assert bounded.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in bounded.collect()) == list(range(start, start + 100))
    end = filled.end
    assert _read(spark, cluster.brokers, startingOffset=end, endingOffset=end).count() == 0


def test_partitions_read_from_every_replica_in_turn():
    replicas = ["a:1", "b:2", "c:3"]
    ranges = split(0, 250, 100, replicas)
    assert [(r.start, r.end) for r in ranges] == [(0, 100), (100, 200), (200, 250)]
    assert [r.replicas for r in ranges] == [
        ("a:1", "b:2", "c:3"),
        ("b:2", "c:3", "a:1"),
        ("c:3", "a:1", "b:2"),
    ]
    assert split(0, 10, 100, []) == [OffsetRange(0, 10, ())]
    behind = split(0, 200, 100, ["a:1", "b:2"], ["c:3"])
    assert [r.replicas for r in behind] == [("a:1", "b:2", "c:3"), ("b:2", "a:1", "c:3")]


def test_a_partition_falls_back_when_its_replicas_fail(cluster, filled):
    """A dead node first, then one that is alive: the range is read whole, once."""
    options = Options(tuple(cluster.brokers.split(",")), timeout_s=10.0)
    dead = "127.0.0.1:1"
    start, end = filled.start, filled.start + 3000
    for replicas in ((dead, cluster.address(2)), (dead,), ()):
        batches = list(read_range(options, OffsetRange(start, end, replicas)))
        offsets = [o for b in batches for o in b.column("offset").to_pylist()]
        assert offsets == [r.offset for r in filled.records[:3000]], replicas


def test_a_batch_read_goes_on_with_a_node_down(spark, cluster, filled):
    """A follower killed: the read is planned over the replicas that answer (a replica
    that fails during the read hands over: test_a_partition_falls_back...)."""
    leader = cluster.wait_for_leader()
    follower = next(i for i in cluster.ids if i != leader)
    cluster.kill(follower)
    try:
        df = _read(spark, cluster.brokers, startingOffset=filled.start, endingOffset=filled.end)
        offsets = [r.offset for r in df.select("offset").collect()]
    finally:
        cluster.start(follower)
    assert sorted(offsets) == [r.offset for r in filled.records]


def test_stream_restarts_from_its_checkpoint_exactly_once(spark, cluster, filled, tmp_path):
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
    start = filled.end - 1000  # the last 1,000 of the session's records, and whatever follows
    with cluster.client() as client:
        client.append([b"before-%d" % i for i in range(500)])
    stream_available_now(
        spark, cluster.brokers, sink, checkpoint, startingOffset=start, maxRecordsPerTrigger=600
    )
    first_run = {r.offset for r in spark.read.parquet(sink).select("offset").collect()}
    with cluster.client() as client:
        client.append([b"after-%d" % i for i in range(700)])
    expected = committed_from(cluster, start)
    stream_available_now(
        spark, cluster.brokers, sink, checkpoint, startingOffset=start, maxRecordsPerTrigger=600
    )

    rows = spark.read.parquet(sink).collect()
    assert len(first_run) >= 1500
    assert sorted((r.offset, bytes(r.value)) for r in rows) == [
        (r.offset, r.value) for r in expected
    ], "every record once, none twice, across the restart"
    batches = len([f for f in os.listdir(os.path.join(checkpoint, "commits")) if f.isdigit()])
    assert batches >= 4, "maxRecordsPerTrigger cut the stream into micro-batches"


RETENTION = """[log]
segment_bytes_max = 32768
retention_bytes = 65536
"""


@pytest.mark.slow
def test_records_lost_to_retention_fail_the_stream_or_are_skipped(spark, tmp_path):
    """A stream stopped at offset N; retention then drops offsets past N. Restarted, it fails
    by default and says why; with failOnDataLoss=false it goes on from the log start."""
    (tmp_path / "c").mkdir()
    config = tmp_path / "retention.toml"
    config.write_text(RETENTION)
    cluster = ProcessCluster(str(tmp_path / "c"), config_file=str(config))
    cluster.start_all()
    try:
        cluster.wait_for_leader()
        sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")
        with cluster.client() as client:
            client.append([b"early-%d" % i for i in range(100)])
        stream_available_now(spark, cluster.brokers, sink, checkpoint)
        with cluster.client() as client:
            read_up_to = client.end_offset(linearizable=True)
            for _ in range(40):  # 40 appends of 8 KiB: several segments, past the limit
                client.append([os.urandom(1000) for _ in range(8)])  # incompressible
            deadline = time.monotonic() + 30
            while client.start_offset() <= read_up_to + 1:  # retention runs every 5 s
                assert time.monotonic() < deadline, "retention did not run"
                time.sleep(0.2)
            log_start = client.start_offset()
        rest = committed_from(cluster, log_start)

        with pytest.raises(Exception, match="removed by retention") as failure:
            stream_available_now(spark, cluster.brokers, sink, checkpoint)
        assert 'option("failOnDataLoss", "false")' in str(failure.value)
        batch = spark.read.format("quorumlog").option("brokers", cluster.brokers)
        with pytest.raises(Exception, match="startingOffset 0 was removed by retention"):
            batch.option("startingOffset", "0").load().collect()
        options = Options(tuple(cluster.brokers.split(",")))
        # The replica read may have run its retention further, or not as far, as the one
        # `start_offset` asked: each applies it on its own every 5 s.
        with pytest.raises(DataLossError, match=r"the log now starts at \d+\)"):
            list(read_range(options, OffsetRange(read_up_to + 1, log_start + 5)))

        stream_available_now(spark, cluster.brokers, sink, checkpoint, failOnDataLoss="false")
        offsets = sorted(r.offset for r in spark.read.parquet(sink).select("offset").collect())
        assert offsets[:100] == list(range(offsets[0], offsets[0] + 100))
        assert offsets[100:] == [r.offset for r in rest], "skipped to the log start, then all"
    finally:
        cluster.stop_all()


def test_offsets_count_records_across_a_leader_change(spark, cluster, filled):
    """The Nth record is at offset N-1 for Spark too: a new leader's barrier takes none."""
    leader = cluster.wait_for_leader()
    cluster.kill(leader)
    cluster.start(leader)
    cluster.wait_for_leader()
    with cluster.client(timeout=30.0) as client:
        first = client.append([b"after-%d" % i for i in range(10)])
        end = client.end_offset(linearizable=True) + 1
    df = _read(spark, cluster.brokers, startingOffset="earliest", endingOffset=end)
    offsets = sorted(r.offset for r in df.select("offset").collect())
    assert filled.start == 0 and offsets == list(range(end))
    assert first == end - 10
