"""Real processes: a node's Kafka and HTTP listeners are part of its identity (issue 44). A
node restarted as docs/operating.md says, with --id, --data and --listen alone, serves them
again; a node that serves no Kafka clients is never advertised to them, and a partition it leads
is advertised with no leader, which clients wait out instead of connecting to a dead
address."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
import warnings

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster
from quorumlog.server.listeners import LISTENERS_FILE
from tests.process.kafka_support import kafka_cluster
from tests.process.test_kafka import call, connect, serves_metadata
from tests.process.test_membership import ql
from tests.process.test_topics import wait_until

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

LEADER_NOT_AVAILABLE = 5


@pytest.fixture
def cluster(tmp_path):
    yield from kafka_cluster(str(tmp_path), http=True, ready=serves_metadata)


def start_bare(cluster: ProcessCluster, node_id: int) -> dict:
    """Start a stopped node with only --id, --data and --listen (docs/operating.md's restart);
    returns its status once it answers."""
    args = [*QUORUMLOG, "serve", "--id", str(node_id), "--data", cluster.data_dir(node_id)]
    args += ["--listen", cluster.address(node_id)]
    with open(os.path.join(cluster.root, f"node{node_id}.log"), "ab") as log:
        cluster.procs[node_id] = subprocess.Popen(args, stdout=log, stderr=log)
    return wait_until(lambda: cluster.node_status(node_id), 30, f"node {node_id} answering")


def lead_default(cluster: ProcessCluster, node_id: int) -> None:
    out = ql("transfer-leader", "-b", cluster.brokers, str(node_id), "--timeout", "30")
    assert out.returncode == 0, out.stderr


def metadata(cluster: ProcessCluster, node_id: int, topic: str) -> MetadataResponse:
    """Node `node_id`'s Kafka Metadata v1 for `topic`."""
    with connect(cluster, node_id) as sock:
        return call(sock, MetadataRequest[1](topics=[topic]), MetadataResponse, 1)


def console_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as page:
            return page.status == 200
    except OSError:
        return False


def test_a_restart_with_id_data_and_listen_serves_the_nodes_listeners_again(cluster):
    cluster.kill(2, signal.SIGTERM)
    status = start_bare(cluster, 2)
    assert status["kafka_address"] == f"127.0.0.1:{cluster.kafka_ports[1]}"
    wait_until(lambda: console_answers(cluster.http_ports[1]), 10, "node 2's console")
    with open(os.path.join(cluster.root, "node2.log")) as log:
        assert "listeners_restored" in log.read()

    # Node 2 leads the partition; the clients find it through node 1 alone.
    lead_default(cluster, 2)
    bootstrap = f"127.0.0.1:{cluster.kafka_ports[0]}"
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15_000})
    values = [b"after-restart-%d" % i for i in range(10)]
    for value in values:
        producer.produce("default", value, partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    seen: list[bytes] = []
    try:
        consumer.assign([TopicPartition("default", 0, OFFSET_BEGINNING)])
        while len(seen) < len(values) and time.monotonic() < started + 10:
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                seen.append(m.value())
    finally:
        consumer.close()
    assert seen == values


def test_a_node_without_a_kafka_listener_is_not_advertised_and_its_partitions_have_no_leader(
    cluster,
):
    cluster.kill(3, signal.SIGTERM)
    with contextlib.suppress(FileNotFoundError):  # as a data directory of an older version
        os.remove(os.path.join(cluster.data_dir(3), LISTENERS_FILE))
    assert start_bare(cluster, 3)["kafka_address"] is None
    lead_default(cluster, 3)

    def advertised_without_node_3() -> MetadataResponse | None:
        answer = metadata(cluster, 1, "default")
        brokers = sorted(b.node_id for b in answer.brokers)
        [topic] = answer.topics
        [partition] = topic.partitions
        without = brokers == [1, 2] and (partition.error_code, partition.leader_id) == (
            LEADER_NOT_AVAILABLE,
            -1,
        )
        return answer if without else None

    answer = wait_until(advertised_without_node_3, 15, "node 1's Metadata without node 3")
    assert answer.controller_id in (1, 2)  # one that clients can reach
