"""Real processes: Kafka clients across failures. kafka-python's default producer
(idempotent, acks=all) keeps appending while the partition's leader is killed: every
acknowledged record is there, and none twice. A confluent-kafka group commits, its
coordinator is killed, and the next member resumes at the committed offset."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import warnings

import pytest
from confluent_kafka import Consumer

from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster
from quorumlog.consumers.state import GROUPS_PARTITIONS, GROUPS_TOPIC, groups_partition
from tests.process.kafka_support import kafka_cluster

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

RECORDS = 1500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("kafka-failover")))


def leader_of(cluster: ProcessCluster, topic: str, partition: int) -> int:
    out = subprocess.run(
        [*QUORUMLOG, "topic", "-b", cluster.brokers, "describe", topic, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    return next(r["leader_id"] for r in rows if r["partition"] == partition)


def kill_and_restart(cluster: ProcessCluster, node_id: int) -> None:
    cluster.kill(node_id, signal.SIGKILL)
    time.sleep(1.0)
    cluster.start(node_id)


def test_an_idempotent_producer_across_a_leader_kill_loses_and_repeats_nothing(cluster):
    with cluster.client(timeout=30) as c:
        c.create_topic("kf", partitions=1, replicas=3)
    leader = leader_of(cluster, "kf", 0)
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap)  # defaults
    futures = []
    killer = threading.Timer(0.5, kill_and_restart, (cluster, leader))
    killer.start()
    for i in range(RECORDS):
        futures.append((b"v%d" % i, producer.send("kf", b"v%d" % i)))
        if i % 50 == 0:
            time.sleep(0.05)  # spread the sends over the kill
    producer.flush(120)
    producer.close()
    killer.join()
    acked = [value for value, f in futures if f.succeeded()]
    assert len(acked) == RECORDS  # retries carried every record through the failover

    with cluster.client(timeout=30) as c:
        stored: list[bytes] = []
        offset = 0
        deadline = time.monotonic() + 30
        while len(stored) < RECORDS and time.monotonic() < deadline:
            records = c.read(offset, topic="kf", max_records=5000)
            stored += [r.value for r in records]
            offset = records[-1].offset + 1 if records else offset
    assert sorted(stored) == sorted(acked)  # everything, and nothing twice
    assert stored == acked  # in the order sent: one producer, one partition


def test_a_group_resumes_at_its_commit_after_its_coordinator_is_killed(cluster):
    with cluster.client(timeout=30) as c:
        c.create_topic("kg-failover", partitions=2, replicas=3)
        for p in range(2):
            c.append([b"p%d-%d" % (p, i) for i in range(100)], topic="kg-failover", partition=p)

    def member() -> Consumer:
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.kafka_bootstrap,
                "group.id": "kg-failover",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe(["kg-failover"])
        return consumer

    def take(consumer: Consumer, count: int) -> list[bytes]:
        out: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                out.append(message.value())
        return out

    first = member()
    before = take(first, 120)
    first.commit(asynchronous=False)
    first.close()

    coordinator = leader_of(
        cluster, GROUPS_TOPIC, groups_partition("kg-failover", GROUPS_PARTITIONS)
    )
    kill_and_restart(cluster, coordinator)

    after = take(member(), 200 - len(before))
    assert sorted(before + after) == sorted(
        b"p%d-%d" % (p, i) for p in range(2) for i in range(100)
    )
