"""Real processes: Kafka producers compress with every codec Kafka has, and what they wrote
reads back the same through quorumlog's own `Client` and through a Kafka consumer.
librdkafka (confluent-kafka) writes snappy as one plain block, kafka-python as the Java
client does (xerial's framing); lz4 is the LZ4 frame format from both."""

from __future__ import annotations

import time
import warnings

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from quorumlog.cli.localcluster import ProcessCluster
from tests.process.kafka_support import kafka_cluster
from tests.process.test_kafka import native_headers, read_natively

with warnings.catch_warnings():  # kafka-python loads its schemas with deprecated calls
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

RECORDS = 200
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kafka_cluster(str(tmp_path_factory.mktemp("kafka-compression")))


def sent(codec: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    """Records that compress well (repeated text), with keys, headers and timestamps."""
    return [
        (
            b"key-%d" % (i % 5),
            (b"%s record %d " % (codec.encode(), i)) * 20,
            [("n", b"%d" % i)],
            BASE_TS + i,
        )
        for i in range(RECORDS)
    ]


def produce_with_librdkafka(cluster: ProcessCluster, topic: str, codec: str, records) -> None:
    producer = Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "compression.type": codec,
            "linger.ms": 50,  # many records to a batch, so compression has something to do
            "enable.idempotence": True,
        }
    )
    failures = []
    for key, value, headers, ts in records:
        producer.produce(
            topic,
            key=key,
            value=value,
            headers=headers,
            timestamp=ts,
            partition=0,
            on_delivery=lambda err, _msg: err and failures.append(err),
        )
    assert producer.flush(30) == 0
    assert failures == []


def produce_with_kafka_python(cluster: ProcessCluster, topic: str, codec: str, records) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        producer = KafkaProducer(
            bootstrap_servers=cluster.kafka_bootstrap,
            compression_type=codec,
            linger_ms=50,
            acks="all",
        )
    try:
        futures = [
            producer.send(topic, key=k, value=v, headers=h, timestamp_ms=ts, partition=0)
            for k, v, h, ts in records
        ]
        producer.flush(timeout=30)
        for f in futures:
            f.get(timeout=30)
    finally:
        producer.close(timeout=10)


def read_with_librdkafka(cluster: ProcessCluster, topic: str) -> list[tuple]:
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "unused"})
    out = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(out) < RECORDS and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None:
                assert m.error() is None, m.error()
                out.append((m.key(), m.value(), list(m.headers() or []), m.timestamp()[1]))
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize(
    ("client", "codec"),
    [
        ("librdkafka", "lz4"),
        ("librdkafka", "snappy"),
        ("kafka-python", "lz4"),
        ("kafka-python", "snappy"),
    ],
)
def test_a_compressed_produce_reads_back_natively_and_through_kafka(cluster, client, codec):
    topic = f"{codec}-{client}"
    records = sent(codec)
    with cluster.client(timeout=30) as c:
        c.create_topic(topic, partitions=1, replicas=3)
    produce = produce_with_librdkafka if client == "librdkafka" else produce_with_kafka_python
    produce(cluster, topic, codec, records)

    native = read_natively(cluster, topic, 0, RECORDS)
    assert [(r.key, r.value, native_headers(r), r.timestamp_ms) for r in native] == records
    with cluster.client(timeout=30) as c:
        size = c.describe_topic(topic)[0]["size_bytes"]
    # Stored as the producer compressed it: far smaller than the records themselves.
    assert size < sum(len(v) for _, v, _, _ in records) / 3
    assert read_with_librdkafka(cluster, topic) == records
