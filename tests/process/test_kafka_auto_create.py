"""Real processes: with `--auto-create-topics` (as `quorumlog dev` starts its nodes), a Kafka
producer that names a topic nobody created creates it, with the node's partitions and
replicas; without it (the default), the topic stays unknown."""

from __future__ import annotations

import os
import warnings

import pytest

from quorumlog import Client
from quorumlog.cli.localcluster import ProcessCluster, free_ports
from tests.process.kafka_support import listening
from tests.process.test_topics import wait_until

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError


def started(root: str, auto_create: bool) -> ProcessCluster:
    os.makedirs(root)
    c = ProcessCluster(root, kafka_ports=free_ports(3), auto_create_topics=auto_create)
    c.start_all()
    c.wait_for_leader()
    wait_until(lambda: all(listening(p) for p in c.kafka_ports), 30, "Kafka listeners")
    return c


def test_a_producer_naming_a_new_topic_creates_it_when_the_node_allows(tmp_path):
    cluster = started(str(tmp_path / "on"), auto_create=True)
    try:
        producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap)
        try:
            sent = producer.send("fresh", value=b"hello").get(30)
        finally:
            producer.close()
        with Client(cluster.brokers, timeout=20) as c:
            assert c.topics(details=True)["fresh"] == (1, 3)
            assert c.read(sent.offset, topic="fresh")[0].value == b"hello"
    finally:
        cluster.stop_all()


def test_without_the_option_a_new_topic_stays_unknown(tmp_path):
    cluster = started(str(tmp_path / "off"), auto_create=False)
    try:
        producer = KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap, max_block_ms=3000)
        try:
            with pytest.raises(KafkaTimeoutError):
                producer.send("never", value=b"x").get(10)
        finally:
            producer.close()
        with Client(cluster.brokers, timeout=20) as c:
            assert "never" not in c.topics()
    finally:
        cluster.stop_all()
