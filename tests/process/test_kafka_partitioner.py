"""Real processes: a keyed record lands in the same partition whichever client wrote it:
quorumlog's `Client`, kafka-python (its default partitioner) and confluent-kafka told
`partitioner=murmur2_random` (librdkafka's own default, CRC32, puts keys elsewhere: the
docs/python.md says so, and this test shows it)."""

from __future__ import annotations

import warnings

import pytest
from confluent_kafka import Producer

from quorumlog import Client, Record
from tests.process.kafka_support import kafka_cluster

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

PARTITIONS = 8
KEYS = [f"user-{i}".encode() for i in range(40)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("kafka-partitioner")))


def confluent_partitions(cluster, topic: str, settings: dict) -> dict[bytes, int]:
    landed: dict[bytes, int] = {}

    def delivered(error, message) -> None:
        assert error is None, error
        landed[message.key()] = message.partition()

    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, **settings})
    for key in KEYS:
        producer.produce(topic, value=b"v", key=key, on_delivery=delivered)
    assert producer.flush(30) == 0
    return landed


def test_the_same_key_lands_in_the_same_partition_from_every_client(cluster):
    with Client(cluster.brokers, timeout=30) as c:
        c.create_topic("keys", partitions=PARTITIONS, replicas=3)
        native = {
            k: c.append([Record(key=k, value=b"v")], topic="keys", details=True).partition
            for k in KEYS
        }
    producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap)
    try:
        python = {k: producer.send("keys", key=k, value=b"v").get(30).partition for k in KEYS}
    finally:
        producer.close()
    murmur = confluent_partitions(cluster, "keys", {"partitioner": "murmur2_random"})
    assert len(set(native.values())) > 1, "the keys spread"
    assert python == native
    assert murmur == native
    librdkafka_default = confluent_partitions(cluster, "keys", {})
    assert librdkafka_default != native, "CRC32 puts some keys elsewhere"
