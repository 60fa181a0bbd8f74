"""What the Spark tests share besides fixtures."""

from __future__ import annotations

from quorumlog import Record
from quorumlog.cli.localcluster import ProcessCluster


def committed_from(cluster: ProcessCluster, offset: int) -> list[Record]:
    """Every committed record from `offset` on, read from the leader (a follower may not
    know yet that the last appends are committed)."""
    with cluster.client(node_id=cluster.wait_for_leader()) as leader:
        out = []
        while page := leader.read(offset, 10_000):
            out += page
            offset = page[-1].offset + 1
    return out


def topic_records(cluster: ProcessCluster, topic: str) -> list[Record]:
    """Every committed record of every partition of `topic`, read from each partition's
    leader (a follower of a quiet partition may not know that the last appends are
    committed)."""
    out = []
    with cluster.client() as client:
        partitions = client.describe_topic(topic)
    for partition in partitions:
        number = partition["partition"]
        with cluster.client(node_id=partition["leader_id"]) as leader:
            offset = leader.start_offset(topic, number)
            while page := leader.read(offset, 10_000, topic, number):
                out += page
                offset = page[-1].offset + 1
    return out


def stream_available_now(spark, brokers: str, sink: str, checkpoint: str, **options) -> None:
    """A streaming read of everything there now (Trigger.AvailableNow) into parquet at
    `sink`, with `options` for the source."""
    reader = spark.readStream.format("quorumlog").option("brokers", brokers)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the stream did not finish within 120 s"
    finally:
        query.stop()
