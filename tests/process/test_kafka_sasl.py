"""Real processes: a node with `--secret-file` takes Kafka clients over SASL/PLAIN whose
password is the cluster secret; a wrong password or no SASL at all gets nothing."""

from __future__ import annotations

import socket
import struct

import pytest
from confluent_kafka import KafkaException, Producer

from quorumlog import Client
from quorumlog.cli.localcluster import ProcessCluster, free_ports
from tests.process.kafka_support import listening
from tests.process.test_topics import wait_until

SECRET = "kafka-secret"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    root = tmp_path_factory.mktemp("kafka-sasl")
    secret_file = root / "secret"
    secret_file.write_text(SECRET + "\n")
    cluster = ProcessCluster(str(root / "c"), size=1, kafka_ports=free_ports(1))
    (root / "c").mkdir()
    cluster.start(1, ["--secret-file", str(secret_file)])
    try:
        wait_until(lambda: listening(cluster.kafka_ports[0]), 30, "the Kafka listener")
        with Client(cluster.brokers, secret=SECRET, timeout=20) as c:
            c.create_topic("secured", partitions=1, replicas=1)
        yield cluster
    finally:
        cluster.stop_all()


def produce(cluster: ProcessCluster, password: str | None) -> None:
    config = {"bootstrap.servers": cluster.kafka_bootstrap, "message.timeout.ms": 4000}
    if password is not None:
        config |= {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "anyone",
            "sasl.password": password,
        }
    producer = Producer(config)
    failures = []
    producer.produce("secured", b"hello", on_delivery=lambda e, _m: e and failures.append(e))
    left = producer.flush(10)
    if failures or left:
        raise KafkaException(failures[0] if failures else "not delivered")


def test_the_cluster_secret_is_the_sasl_password(node):
    produce(node, SECRET)
    with Client(node.brokers, secret=SECRET, timeout=10) as c:
        assert [r.value for r in c.read(0, topic="secured")] == [b"hello"]


def test_a_wrong_password_or_no_sasl_writes_nothing(node):
    with pytest.raises(KafkaException):
        produce(node, "wrong")
    # Without SASL, the first request other than ApiVersions closes the connection.
    with socket.create_connection(("127.0.0.1", node.kafka_ports[0]), timeout=10) as sock:
        header = struct.pack(">hhih", 3, 1, 1, 0)  # Metadata v1, correlation 1, client ""
        body = struct.pack(">i", -1)  # every topic
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        assert sock.recv(4) == b""
    with Client(node.brokers, secret=SECRET, timeout=10) as c:
        assert [r.value for r in c.read(0, topic="secured")] == [b"hello"]
