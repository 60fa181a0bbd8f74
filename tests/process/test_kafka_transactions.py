"""Kafka's transactions through librdkafka (confluent-kafka): a transactional producer
commits and aborts across partitions; a read_committed consumer sees every committed
record and no aborted one, a read_uncommitted one sees both; an open transaction holds
read_committed readers back at its first record; a new session fences the old one; a
consume-transform-produce loop writes each input once, also while the coordinator's node
and a partition leader's are killed."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.transactions.state import transactions_partition
from tests.process.kafka_support import kafka_cluster
from tests.process.test_kafka_failover import kill_and_restart, leader_of

PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("kafka-transactions")))


def transactional(cluster: ProcessCluster, txn_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(30)
    return producer


def read_all(cluster: ProcessCluster, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "unused",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    out, ended = [], set()
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while (len(ended) < PARTITIONS or len(out) < expected) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                assert m.error().code() == m.error()._PARTITION_EOF, m.error()
                ended.add(m.partition())
                continue
            out.append(m.value())
    finally:
        consumer.close()
    return sorted(out)


def create(cluster: ProcessCluster, topic: str) -> None:
    with cluster.client(timeout=30) as c:
        c.create_topic(topic, partitions=PARTITIONS, replicas=3)


def test_committed_records_are_read_and_aborted_ones_never(cluster):
    topic = "txn-outcomes"
    create(cluster, topic)
    producer = transactional(cluster, "outcomes")
    committed, aborted = [], []
    for round_ in range(6):
        producer.begin_transaction()
        values = [b"round %d record %d" % (round_, i) for i in range(9)]
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % PARTITIONS)
        if round_ % 2 == 0:
            producer.commit_transaction(30)
            committed += values
        else:
            producer.flush(30)
            producer.abort_transaction(30)
            aborted += values
    assert read_all(cluster, topic, "read_committed", len(committed)) == sorted(committed)
    everything = read_all(cluster, topic, "read_uncommitted", len(committed) + len(aborted))
    assert everything == sorted(committed + aborted)


def test_an_open_transaction_holds_read_committed_readers_back(cluster):
    topic = "txn-open"
    create(cluster, topic)
    plain = Producer({"bootstrap.servers": cluster.kafka_bootstrap})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(30)
    producer = transactional(cluster, "open")
    producer.begin_transaction()
    producer.produce(topic, value=b"pending", partition=0)
    producer.flush(30)
    plain.produce(topic, value=b"after", partition=0)
    plain.flush(30)
    # Until the transaction ends, a read_committed reader stops before its first record.
    assert read_all(cluster, topic, "read_committed", 1) == [b"before"]
    assert read_all(cluster, topic, "read_uncommitted", 3) == [b"after", b"before", b"pending"]
    producer.commit_transaction(30)
    assert read_all(cluster, topic, "read_committed", 3) == [b"after", b"before", b"pending"]


def test_a_new_session_fences_the_old_producer(cluster):
    topic = "txn-fenced"
    create(cluster, topic)
    zombie = transactional(cluster, "fenced")
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=1)
    zombie.flush(30)
    successor = transactional(cluster, "fenced")  # aborts what the zombie left open
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=1)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal(), raised.value
    assert read_all(cluster, topic, "read_committed", 1) == [b"successor"]


def test_consume_transform_produce_reads_each_input_once(cluster):
    """librdkafka's exactly-once loop: read a batch of the input in a group, write its
    transformation and the group's positions in one transaction. An aborted round leaves
    both the output and the positions as they were, so the next round reads it again."""
    source, sink, group = "orders", "invoices", "copier"
    create(cluster, source)
    create(cluster, sink)
    inputs = [b"order %d" % i for i in range(60)]
    plain = Producer({"bootstrap.servers": cluster.kafka_bootstrap})
    for i, value in enumerate(inputs):
        plain.produce(source, value=value, partition=i % PARTITIONS)
    assert plain.flush(30) == 0
    producer = transactional(cluster, "copier-1")
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    rounds, written = 0, 0
    deadline = time.monotonic() + 90
    try:
        while written < len(inputs) and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(10, 1.0) if m.error() is None]
            if not batch:
                continue
            rounds += 1
            producer.begin_transaction()
            for m in batch:
                producer.produce(sink, value=m.value().replace(b"order", b"invoice"))
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata())
            if rounds % 3 == 0:  # lost: the output goes, and the positions go back
                producer.abort_transaction(30)
                rewind(consumer)
            else:
                producer.commit_transaction(30)
                written += len(batch)
    finally:
        consumer.close()
    expected = sorted(v.replace(b"order", b"invoice") for v in inputs)
    assert rounds >= 3, "no round was aborted"
    assert read_all(cluster, sink, "read_committed", len(expected)) == expected


def test_exactly_once_across_kills_of_the_coordinator_and_a_partition_leader(cluster):
    """The consume-transform-produce loop while the node coordinating its transactional
    id, then the leader of an output partition, are SIGKILLed (and started again) in the
    middle of its transactions: what a transaction did is kept whole or not at all, so the
    output, read_committed, holds each input exactly once."""
    source, sink, group, txn_id = "kill-in", "kill-out", "kill-copier", "kill-copier-1"
    create(cluster, source)
    create(cluster, sink)
    inputs = [b"order %d" % i for i in range(300)]
    plain = Producer({"bootstrap.servers": cluster.kafka_bootstrap})
    for i, value in enumerate(inputs):
        plain.produce(source, value=value, partition=i % PARTITIONS)
    assert plain.flush(30) == 0
    producer = transactional(cluster, txn_id)
    coordinator = coordinator_of(cluster, txn_id)
    victims = [coordinator, leader_of(cluster, sink, 0)]
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([source])
    written, rounds, aborted = 0, 0, 0
    deadline = time.monotonic() + 150
    try:
        while written < len(inputs) and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(10, 1.0) if m.error() is None]
            if not batch:
                continue
            rounds += 1
            try:
                producer.begin_transaction()
                for m in batch:
                    producer.produce(sink, value=m.value().replace(b"order", b"invoice"))
                if rounds in (4, 12):  # mid-transaction: its records are out, not ended
                    producer.flush(30)
                    kill_and_restart(cluster, victims.pop(0))
                positions = consumer.position(consumer.assignment())
                metadata = consumer.consumer_group_metadata()
                producer.send_offsets_to_transaction(positions, metadata, 30)
                producer.commit_transaction(60)
                written += len(batch)
            except KafkaException as exc:
                error = exc.args[0]
                assert error.txn_requires_abort() or error.retriable(), error
                aborted += 1
                producer.abort_transaction(60)
                rewind(consumer)
    finally:
        consumer.close()
    assert not victims, "a kill did not happen"
    expected = sorted(v.replace(b"order", b"invoice") for v in inputs)
    assert read_all(cluster, sink, "read_committed", len(expected)) == expected


def rewind(consumer: Consumer) -> None:
    """Back to the group's committed positions (what an aborted round read is read again)."""
    for tp in consumer.assignment():
        committed = consumer.committed([tp], 30)[0]
        offset = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
        consumer.seek(TopicPartition(tp.topic, tp.partition, offset))


def coordinator_of(cluster: ProcessCluster, txn_id: str) -> int:
    with cluster.client(timeout=30) as c:
        topic = c.describe_topic("__transactions")
    partition = transactions_partition(txn_id, len(topic))
    return next(row["leader_id"] for row in topic if row["partition"] == partition)
