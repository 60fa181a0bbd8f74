"""A topic of three partitions through Spark: a batch read of every partition, a stream
whose offsets are a map per partition, and a write that places rows by their key as the
client does."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row

from quorumlog import Record
from quorumlog.spark import Options, Written, write_rows
from quorumlog.spark.reader import _capped
from tests.spark.helpers import stream_available_now, topic_records

PARTITIONS = 3


def _keyed(prefix: str, count: int) -> list[Record]:
    return [
        Record(b"%s-%d" % (prefix.encode(), i), key=b"user-%d" % (i % 11)) for i in range(count)
    ]


def _append_by_key(client, topic: str, records: list[Record]) -> None:
    """One append per key: the client places an append by its first record's key."""
    for key in sorted({r.key for r in records}):
        client.append([r for r in records if r.key == key], topic=topic)


@pytest.fixture(scope="module")
def events(cluster) -> str:
    with cluster.client(timeout=30.0) as client:
        client.create_topic("events", partitions=PARTITIONS)
        _append_by_key(client, "events", _keyed("early", 600))
    return "events"


def _reader(spark, cluster, topic: str, **options):
    reader = spark.read.format("quorumlog").option("brokers", cluster.brokers)
    for name, value in {"topic": topic, **options}.items():
        reader = reader.option(name, str(value))
    return reader.load()


def _rows(df) -> list[tuple]:
    return sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in df.collect())


def _expected(records: list[Record]) -> list[tuple]:
    return sorted((r.partition, r.offset, r.key, r.value) for r in records)


def test_a_batch_read_reads_every_partition_once(spark, cluster, events):
    stored = topic_records(cluster, events)
    assert {r.partition for r in stored} == set(range(PARTITIONS)), "the keys spread"
    df = _reader(spark, cluster, events, recordsPerPartition=150)
    assert df.schema.simpleString() == (
        "struct<offset:bigint,key:binary,value:binary,timestamp:timestamp,partition:int>"
    )
    assert _rows(df) == _expected(stored), "every record once, in the partition it is in"
    assert df.rdd.getNumPartitions() >= PARTITIONS + 1  # 600 records, 150 offsets a task

    first = {p: min(r.offset for r in stored if r.partition == p) for p in range(PARTITIONS)}
    last = {p: max(r.offset for r in stored if r.partition == p) for p in range(PARTITIONS)}
    bounded = _reader(
        spark,
        cluster,
        events,
        startingOffset=json.dumps({"0": first[0] + 5, "1": -2}),
        endingOffset=json.dumps({"2": last[2] - 2}),  # partitions 0 and 1: latest
    )
    kept = [
        r
        for r in stored
        if (r.partition != 0 or r.offset >= first[0] + 5)
        and (r.partition != 2 or r.offset < last[2] - 2)
    ]
    assert _rows(bounded) == _expected(kept)


def test_an_unknown_topic_or_partition_is_named(spark, cluster, events):
    with pytest.raises(Exception, match="unknown topic 'nope'"):
        _reader(spark, cluster, "nope").collect()
    with pytest.raises(Exception, match="startingOffset names partition 3, but topic 'events'"):
        _reader(spark, cluster, events, startingOffset='{"3": 0}').collect()
    df = spark.createDataFrame([("v",)], "value string")
    writer = df.write.format("quorumlog").option("brokers", cluster.brokers).mode("append")
    with pytest.raises(Exception, match="unknown topic 'nope'"):
        writer.option("topic", "nope").save()


def _last_offsets(checkpoint: str) -> dict:
    """The source offsets of the checkpoint's last micro-batch (its file's last line)."""
    offsets = os.path.join(checkpoint, "offsets")
    last = max(int(f) for f in os.listdir(offsets) if f.isdigit())
    with open(os.path.join(offsets, str(last))) as f:
        return json.loads(f.read().splitlines()[-1])


def test_a_stream_of_a_topic_goes_on_from_its_offsets_per_partition(
    spark, cluster, events, tmp_path
):
    sink, checkpoint = str(tmp_path / "sink"), str(tmp_path / "checkpoint")

    def run() -> None:
        stream_available_now(
            spark, cluster.brokers, sink, checkpoint, topic=events, maxRecordsPerTrigger=250
        )

    def read_past_every_record() -> bool:
        """The stream's offsets are one past each partition's last record: its end (a
        leadership move adds a barrier, which takes no offset)."""
        done = _last_offsets(checkpoint)
        last = {}
        for record in topic_records(cluster, events):
            last[record.partition] = max(last.get(record.partition, -1), record.offset)
        return all(done[str(p)] == offset + 1 for p, offset in last.items())

    run()
    assert read_past_every_record(), "the first run read every partition to its end"
    with cluster.client() as client:
        _append_by_key(client, events, _keyed("later", 300))
    run()
    assert read_past_every_record()
    rows = spark.read.parquet(sink).collect()
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in rows)
    stored = topic_records(cluster, events)
    assert got == sorted((r.partition, r.offset, r.value) for r in stored), "each once"
    batches = len([f for f in os.listdir(os.path.join(checkpoint, "commits")) if f.isdigit()])
    assert batches >= 4, "maxRecordsPerTrigger cut each run into micro-batches"


def test_the_read_limit_is_shared_out_over_the_partitions():
    starts = {0: 10, 1: 0, 2: 5}
    assert _capped(starts, {0: 110, 1: 100, 2: 7}, 50) == {0: 34, 1: 24, 2: 7}
    assert _capped(starts, {0: 10, 1: 3, 2: 5}, 50) == {0: 10, 1: 3, 2: 5}
    capped = _capped(starts, {0: 1000, 1: 1000, 2: 1000}, 10)
    assert sum(capped[p] - starts[p] for p in starts) == 10


def test_a_write_places_each_row_by_its_key_as_the_client_does(spark, cluster):
    topic = "written"
    keys = [f"order-{i}" for i in range(12)]
    with cluster.client(timeout=30.0) as client:
        client.create_topic(topic, partitions=PARTITIONS)
        # The client's own choice for each key: one record each, appended first.
        placed = {
            k: client.append(
                [Record(b"probe", key=k.encode())], topic=topic, details=True
            ).partition
            for k in keys
        }
    rows = [(keys[i % 12], f"keyed-{i}", None) for i in range(600)]
    rows += [(None, f"unkeyed-{i}", None) for i in range(60)]
    rows += [(keys[0], f"pinned-{i}", (placed[keys[0]] + 1) % PARTITIONS) for i in range(5)]
    df = spark.createDataFrame(rows, "key string, value string, partition int")
    df.repartition(2).write.format("quorumlog").option("brokers", cluster.brokers).option(
        "topic", topic
    ).mode("append").save()

    stored = [r for r in topic_records(cluster, topic) if r.value != b"probe"]
    assert sorted(r.value for r in stored) == sorted(v.encode() for _, v, _ in rows)
    for r in stored:
        if r.value.startswith(b"keyed-"):
            assert r.partition == placed[r.key.decode()], r
        if r.value.startswith(b"pinned-"):
            assert r.partition == (placed[keys[0]] + 1) % PARTITIONS, r
    unkeyed = [[r.partition for r in stored if r.key is None].count(p) for p in range(PARTITIONS)]
    assert max(unkeyed) - min(unkeyed) <= 2, "round robin in each of the 2 tasks"


def test_a_retried_task_writes_to_each_partition_once(cluster, events):
    """Producer ids per task and partition: the second run is answered with the first
    run's offsets in every partition."""
    options = Options(tuple(cluster.brokers.split(",")), topic=events)
    rows = [Row(key=b"user-%d" % (i % 11), value=b"retried-%d" % i) for i in range(90)]
    before = len(topic_records(cluster, events))
    first = write_rows(options, "write-1/partition-0", iter(rows), PARTITIONS)
    again = write_rows(options, "write-1/partition-0", iter(rows), PARTITIONS)
    assert isinstance(first, Written) and first == again, "the retry got the first offsets"
    assert [a.partition for a in first.partitions] == list(range(PARTITIONS))
    assert sum(a.records for a in first.partitions) == len(rows)
    ids = [i for a in first.partitions for i in a.producer_ids]
    assert len(set(ids)) == PARTITIONS, "one producer id per partition"
    assert len(topic_records(cluster, events)) == before + len(rows)
