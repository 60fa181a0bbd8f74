"""DataFrames written into a live cluster: read back through the Client, and retried tasks
and replayed micro-batches written once."""

from __future__ import annotations

import datetime
import os

import pytest

pytest.importorskip("pyspark")

from pyspark.sql import Row

import quorumlog.spark.writer
from quorumlog.spark import Options, producer_id, write_rows
from tests.spark.helpers import committed_from


def _values_from(cluster, offset: int) -> list[tuple]:
    return [(r.key, r.value, r.timestamp_ms) for r in committed_from(cluster, offset)]


def test_write_a_dataframe_and_read_it_back(spark, cluster):
    with cluster.client() as client:
        start = client.end_offset(linearizable=True) + 1
    stamp = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    rows = [(f"k{i % 3}" if i % 2 else None, f"value-{i}", stamp) for i in range(3000)]
    df = spark.createDataFrame(rows, "key string, value string, timestamp timestamp")
    df.repartition(3).write.format("quorumlog").option("brokers", cluster.brokers).mode(
        "append"
    ).save()
    written = _values_from(cluster, start)
    expected = [(k and k.encode(), v.encode(), 1767323045000) for k, v, _ in rows]
    assert sorted(written, key=repr) == sorted(expected, key=repr)


def test_a_retried_task_writes_its_rows_once(cluster, monkeypatch):
    """The same task run twice, as Spark retries it: the second run is answered with the
    first run's offsets. Small producer chunks, so that the task spans several ids."""
    monkeypatch.setattr(quorumlog.spark.writer, "WRITE_RECORDS_PER_APPEND", 10)
    monkeypatch.setattr(quorumlog.spark.writer, "APPENDS_PER_PRODUCER", 4)
    options = Options(tuple(cluster.brokers.split(",")))
    rows = [Row(key=None, value=b"retried-%03d" % i) for i in range(95)]  # 10 appends
    with cluster.client() as client:
        start = client.end_offset(linearizable=True) + 1
    first = write_rows(options, "write-1/partition-0", iter(rows))
    again = write_rows(options, "write-1/partition-0", iter(rows))
    assert first == again, "the retry got the first run's offsets"
    assert (first.records, len(first.producer_ids)) == (95, 3)
    other = write_rows(options, "write-1/partition-1", iter(rows[:5]))  # another task: new ids
    assert not set(other.producer_ids) & set(first.producer_ids)
    values = [v for _, v, _ in _values_from(cluster, start)]
    assert values == [r.value for r in rows] + [r.value for r in rows[:5]]
    assert start <= first.first_offset and first.last_offset < other.first_offset


def test_producer_ids_are_stable_and_in_range():
    assert producer_id("w/0", 0) == producer_id("w/0", 0)
    ids = {producer_id(f"w/{p}", c) for p in range(100) for c in range(10)}
    assert len(ids) == 1000 and all(0 <= i < 2**62 for i in ids)


def test_a_replayed_micro_batch_is_written_once(spark, cluster, tmp_path):
    """A streaming write whose last micro-batch is run again after a restart (its commit
    file deleted, as if the driver died before writing it) leaves each row in the log once."""
    source, checkpoint = tmp_path / "in", str(tmp_path / "checkpoint")
    source.mkdir()
    with cluster.client() as client:
        start = client.end_offset(linearizable=True) + 1

    def run() -> None:
        query = (
            spark.readStream.schema("value string")
            .json(str(source))
            .writeStream.format("quorumlog")
            .option("brokers", cluster.brokers)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(120)

    for part in range(2):
        lines = "".join(f'{{"value": "streamed-{part}-{i}"}}\n' for i in range(200))
        (source / f"part-{part}.json").write_text(lines)
        run()
    commits = os.path.join(checkpoint, "commits")
    last = max(int(f) for f in os.listdir(commits) if f.isdigit())
    for name in (str(last), f".{last}.crc"):
        if os.path.exists(os.path.join(commits, name)):
            os.remove(os.path.join(commits, name))
    run()  # replays the last micro-batch: the same query id, batch id and rows
    assert os.path.exists(os.path.join(commits, str(last))), "the micro-batch ran again"

    values = sorted(v for _, v, _ in _values_from(cluster, start))
    assert values == sorted(b"streamed-%d-%d" % (p, i) for p in range(2) for i in range(200))
