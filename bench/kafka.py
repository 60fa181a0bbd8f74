"""`quorumlog bench kafka`: Kafka clients through the Kafka listener, beside quorumlog's own
clients on the same cluster in the same run.

- produce: confluent-kafka's Producer in a closed loop (bench/kafka_producer.py) against
  the `AsyncClient` (acks=quorum), 1 KiB records into topics of one partition of three
  replicas: acks=all without idempotence and linger.ms=0 with 1 and 64 sends in flight,
  and librdkafka's defaults with idempotence (linger.ms=5) at 64 calls of 64 records in
  flight; the AsyncClient with the same calls in flight. Each case runs on the Kafka path
  and right after natively, in every round (bench/rounds.py): records/s, p50/p99 per call,
  the three nodes' CPU per record (/proc), and the ratios Kafka path / native;
- consume: confluent-kafka's Consumer (assigned the partition, from offset 0) against a
  `Client.read` loop over the same records (those the Kafka path produced), each timed
  from its first record.
Targets: the Kafka path >= 0.8x of the native one.
"""

from __future__ import annotations

import sys
import time
from functools import partial

import trio

from quorumlog.bench.clients import async_run
from quorumlog.bench.kafka_producer import IDEMPOTENT_DEFAULTS, NO_IDEMPOTENCE, kafka_run
from quorumlog.bench.report import print_table
from quorumlog.bench.resources import CpuMeter
from quorumlog.bench.rounds import paired_ratio, round_fields
from quorumlog.bench.workload import running_cluster

# (the Kafka path's name, its producer settings, calls in flight, records per call):
# "linger 0" is acks=all, no idempotence, linger.ms=0; "idempotent" librdkafka's defaults.
CASES = (
    ("linger 0", NO_IDEMPOTENCE, 1, 1),
    ("linger 0", NO_IDEMPOTENCE, 64, 1),
    ("idempotent", IDEMPOTENT_DEFAULTS, 64, 64),
)
FULL_S, QUICK_S, TINY_S = 5.0, 2.0, 0.5
FULL_ROUNDS = 3  # each figure is the median of this many rounds (one with --quick)
CONSUMED = {"full": 200_000, "quick": 50_000, "tiny": 2_000}  # at most, records read back
KAFKA_TOPIC, NATIVE_TOPIC = "bench-kafka", "bench-native"


def _kafka_consume(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-kafka", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen, started = 0, None
    while seen < count:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                seen += 1
                started = started or time.perf_counter()  # timed from the first record
    took = time.perf_counter() - started
    consumer.close()
    return (count - 1) / took


def _native_consume(cluster, topic: str, count: int) -> float:
    with cluster.client(timeout=60) as client:
        first = client.read(0, topic=topic, max_records=1)  # timed from the first record
        started = time.perf_counter()
        offset, seen = first[0].offset + 1, 1
        while seen < count:
            records = client.read(offset, topic=topic, max_records=10_000)
            if records:
                seen += len(records)
                offset = records[-1].offset + 1
        return (count - 1) / (time.perf_counter() - started)


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    size = "tiny" if tiny else "quick" if quick else "full"
    duration_s = {"tiny": TINY_S, "quick": QUICK_S, "full": FULL_S}[size]
    rounds = FULL_ROUNDS if size == "full" else 1
    kafka_runs: dict[int, list] = {i: [] for i in range(len(CASES))}
    native_runs: dict[int, list] = {i: [] for i in range(len(CASES))}
    with running_cluster("kafka", kafka=True) as cluster:
        with cluster.client(timeout=60) as client:
            client.create_topic(KAFKA_TOPIC, partitions=1, replicas=3)
            client.create_topic(NATIVE_TOPIC, partitions=1, replicas=3)
        meter = CpuMeter(tuple(proc.pid for proc in cluster.procs.values()))
        measure = {"duration_s": duration_s, "warmup_s": duration_s / 5, "meter": meter}
        for _ in range(rounds):
            for i, (_name, settings, window, per_call) in enumerate(CASES):
                kafka_runs[i].append(
                    kafka_run(
                        cluster.kafka_bootstrap, KAFKA_TOPIC, window, per_call, settings, **measure
                    )
                )
                native = partial(async_run, topic=NATIVE_TOPIC, **measure)
                native_runs[i].append(trio.run(native, cluster.brokers, window, per_call, "quorum"))
        count = min(CONSUMED[size], _records_in(cluster.kafka_bootstrap, KAFKA_TOPIC))
        kafka_read = _kafka_consume(cluster.kafka_bootstrap, KAFKA_TOPIC, count)
        native_read = _native_consume(cluster, KAFKA_TOPIC, count)
    rows = []
    for i, (name, _settings, window, per_call) in enumerate(CASES):
        shape = {"window": window, "records_per_call": per_call}
        native = {"figure": f"AsyncClient quorum w{window} x{per_call}"}
        native.update(shape, **round_fields(native_runs[i]))
        kafka = {"figure": f"confluent-kafka {name} w{window} x{per_call}"}
        kafka.update(shape, **round_fields(kafka_runs[i]))
        paired_ratio(kafka, native, "vs_native")
        paired_ratio(kafka, native, "cpu_vs_native", field="server_cpu_us_per_record")
        rows += [kafka, native]
    rows.append(
        {
            "figure": "consume, confluent-kafka Consumer",
            "records": count,
            "records_s": kafka_read,
            "vs_native": kafka_read / native_read,
        }
    )
    rows.append({"figure": "consume, Client.read loop", "records": count, "records_s": native_read})
    return rows


def _records_in(bootstrap: str, topic: str) -> int:
    """The partition's high watermark: offsets count records."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka-size"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


if __name__ == "__main__":
    print_table("bench kafka", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
