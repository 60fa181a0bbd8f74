"""Real processes: offsets count records. The Nth record appended to a partition has offset
N-1 however many leaders, barriers and configuration changes came between, through the
native client, the command line, status and Kafka's fetch alike; an empty partition is
empty to every client (Kafka's watermarks (0, 0)). Before, offset 0 was the first leader's
barrier and every new leader or configuration took one more."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from quorumlog import Client, QuorumLogError
from quorumlog import Consumer as NativeConsumer
from quorumlog.bench.partitions import groups_settled
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster
from tests.process.kafka_support import kafka_cluster
from tests.process.test_topics import wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("record-offsets")))


def ql(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], capture_output=True, text=True, timeout=60)


def kafka_consumer(cluster: ProcessCluster, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def test_an_empty_partition_is_empty_to_every_client(cluster):
    with cluster.client(timeout=30) as c:
        c.create_topic("empty", partitions=1, replicas=3)
        assert c.end_offset(topic="empty", linearizable=True) == -1
        assert c.read(0, 10, topic="empty") == []
        row = c.describe_topic("empty")[0]
        assert (row["log_start_offset"], row["commit_offset"]) == (0, -1)
    consumer = kafka_consumer(cluster, "empty-readers")
    try:
        assert consumer.get_watermark_offsets(TopicPartition("empty", 0), timeout=10) == (0, 0)
        consumer.assign([TopicPartition("empty", 0)])
        assert consumer.poll(1.0) is None
        producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap})
        producer.produce("empty", b"first", partition=0)
        assert producer.flush(30) == 0
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1.0)
        assert (message.offset(), message.value()) == (0, b"first")
        assert consumer.position([TopicPartition("empty", 0)])[0].offset == 1
    finally:
        consumer.close()


def kafka_read(consumer: Consumer, count: int, within_s: float = 30) -> list[tuple[int, bytes]]:
    """(offset, value) of the next `count` messages, or of those read within `within_s`."""
    seen: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + within_s
    while len(seen) < count and time.monotonic() < deadline:
        for message in consumer.consume(min(count - len(seen), 1000), 1.0):
            assert message.error() is None, message.error()
            seen.append((message.offset(), message.value()))
    return seen


class Appender(threading.Thread):
    """One record per append, acks=quorum, until stopped; what was acknowledged."""

    def __init__(self, brokers: str):
        super().__init__(daemon=True)
        self.brokers = brokers
        self.acked: list[tuple[int, bytes]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with Client(self.brokers, timeout=30) as c:
            i = 0
            while not self.stop.is_set():
                value = b"v%06d" % i
                i += 1
                try:
                    self.acked.append((c.append([value], topic="dense", partition=0), value))
                except QuorumLogError:
                    time.sleep(0.05)  # its outcome is unknown: the read below tells


def leader_of(cluster: ProcessCluster) -> int:
    with cluster.client(timeout=30) as c:
        return wait_until(lambda: c.describe_topic("dense")[0]["leader_id"], 30, "a leader")


def test_offsets_count_records_across_leader_kills_and_replica_changes(cluster):
    brokers = cluster.brokers
    with cluster.client(timeout=30) as c:
        c.create_topic("dense", partitions=1, replicas=3)
    appender = Appender(brokers)
    appender.start()
    try:
        for _ in range(2):  # each new leader appends its barrier
            acked = len(appender.acked)
            wait_until(lambda a=acked: len(appender.acked) > a + 20, 60, "appends flow")
            leader = leader_of(cluster)
            cluster.kill(leader, signal.SIGKILL)
            time.sleep(1.0)
            cluster.start(leader)
        # Configuration changes: a replica leaves the group, then joins again.
        for replicas in ("2", "3"):
            out = ql("topic", "-b", brokers, "alter", "dense", "--replicas", replicas)
            assert out.returncode == 0, out.stderr
            with cluster.client(timeout=30) as c:
                sets = {r["partition"]: r["replicas"] for r in c.describe_topic("dense")}
            wait_until(lambda s=sets: groups_settled(cluster, "dense", s), 60, "replicas moved")
        acked = len(appender.acked)
        wait_until(lambda: len(appender.acked) > acked + 20, 60, "appends go on")
    finally:
        appender.stop.set()
        appender.join(timeout=60)
    with cluster.client(timeout=30) as c:
        end = c.end_offset(topic="dense", linearizable=True)
        stored = []
        while len(stored) <= end:
            stored += [(r.offset, r.value) for r in c.read(len(stored), 10_000, topic="dense")]
    count = len(stored)
    assert count > 60
    assert [o for o, _ in stored] == list(range(count))  # dense, from 0
    assert len({v for _, v in stored}) == count  # nothing twice
    assert set(appender.acked) <= set(stored)  # every acknowledged one at its offset
    # The command line.
    out = ql("consume", "-b", brokers, "--topic", "dense", "--with-offsets", "--max", str(count))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == [f"{o}\t{v.decode()}" for o, v in stored]

    # Every replica's status, once it caught up.
    def commits() -> set[int]:
        out = ql("topic", "-b", brokers, "describe", "dense", "--json")
        return {json.loads(line)["commit_offset"] for line in out.stdout.splitlines()}

    wait_until(lambda: commits() == {count - 1}, 30, "the last record's offset everywhere")
    # Kafka's fetch.
    consumer = kafka_consumer(cluster, "dense-readers")
    try:
        assert consumer.get_watermark_offsets(TopicPartition("dense", 0), timeout=10) == (
            0,
            count,
        )
        consumer.assign([TopicPartition("dense", 0, 0)])
        seen = kafka_read(consumer, count, within_s=60)
        assert seen == stored
    finally:
        consumer.close()


def test_a_kafka_fetch_past_the_end_is_out_of_range_and_the_consumer_resets(cluster):
    """As Kafka answers it: the consumer's reset policy takes it back to the records (its
    partition's records empty, not null, which librdkafka could not parse)."""
    with cluster.client(timeout=30) as c:
        c.create_topic("short", partitions=1, replicas=3)
        c.append([b"s%d" % i for i in range(5)], topic="short", partition=0)
    consumer = kafka_consumer(cluster, "short-readers")
    try:
        consumer.assign([TopicPartition("short", 0, 1000)])
        seen = kafka_read(consumer, 5, within_s=30)
        assert seen == [(i, b"s%d" % i) for i in range(5)]
    finally:
        consumer.close()


def test_a_kafka_fetch_before_a_trim_is_out_of_range_and_the_consumer_resets(cluster):
    with cluster.client(timeout=30) as c:
        c.create_topic("trimmed", partitions=1, replicas=3)
        c.append([b"t%d" % i for i in range(5)], topic="trimmed", partition=0)
        assert c.trim_topic("trimmed", 0, 2) == 2
    consumer = kafka_consumer(cluster, "trimmed-readers")
    try:
        consumer.assign([TopicPartition("trimmed", 0, 0)])
        seen = kafka_read(consumer, 3, within_s=30)
        assert seen == [(i, b"t%d" % i) for i in range(2, 5)]
    finally:
        consumer.close()


def test_a_queue_group_reads_a_trimmed_partition_from_its_start(cluster):
    """Its window began at 0, before the trim: it skips what is gone (it asked the
    partition for offset 0 for ever)."""
    with cluster.client(timeout=30) as c:
        c.create_topic("trimmed-queue", partitions=1, replicas=3)
        c.append([b"q%d" % i for i in range(5)], topic="trimmed-queue", partition=0)
        assert c.trim_topic("trimmed-queue", 0, 3) == 3
    with NativeConsumer(
        cluster.brokers, group="trimmed-jobs", topics=["trimmed-queue"], mode="queue", timeout=30
    ) as jobs:
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            for record in jobs.poll(max_records=10, timeout=1.0):
                jobs.ack(record)
                got.append((record.offset, record.value))
    assert got == [(3, b"q3"), (4, b"q4")]
