"""`quorumlog bench kafka`: Kafka clients through the Kafka listener, beside quorumlog's own
clients on the same cluster in the same run.

- produce: confluent-kafka's Producer (librdkafka's batching, acks=all; with its defaults,
  then idempotent, which librdkafka limits to one request in flight per partition) against
  an `AsyncClient` (64 appends of 64 records in flight, acks=quorum), 1 KiB records into a
  topic of one partition; records/s and the p50/p99 from produce() to the delivery report
  (they include the wait in librdkafka's queue: everything is handed over at once);
- consume: confluent-kafka's Consumer (assigned the partition, from offset 0) against a
  `Client.read` loop over the same records, each timed from its first record.
Targets: both Kafka figures >= 0.8x of the native one.
"""

from __future__ import annotations

import sys
import time

import trio

from quorumlog import AsyncClient
from quorumlog.bench.report import print_table
from quorumlog.bench.workload import IncompressibleRecords, latency_fields, running_cluster

RECORD_BYTES = 1024
NATIVE_BATCH = 64
NATIVE_IN_FLIGHT = 64
FULL, QUICK, TINY = 200_000, 50_000, 2_000


def _kafka_produce(bootstrap: str, topic: str, count: int, idempotent: bool) -> dict:
    from confluent_kafka import Producer

    source = IncompressibleRecords(RECORD_BYTES, seed=3)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": idempotent, "acks": "all"}
    )
    latencies: list[float] = []
    failures: list[str] = []

    def delivered(error, message) -> None:
        # The message's timestamp is librdkafka's clock when it was produced (ms).
        if error is not None:
            failures.append(str(error))
        latencies.append(time.time() - message.timestamp()[1] / 1000)

    started = time.perf_counter()
    for value in source.take(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:  # librdkafka's queue is full: let it drain
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(120)
    took = time.perf_counter() - started
    if failures or len(latencies) != count:
        raise RuntimeError(f"kafka produce: {len(latencies)} of {count} acked, {failures[:3]}")
    return {"records_per_s": round(count / took), **latency_fields(latencies)}


async def _native_produce(brokers: str, topic: str, count: int) -> dict:
    source = IncompressibleRecords(RECORD_BYTES, seed=4)
    calls = [source.take(NATIVE_BATCH) for _ in range(count // NATIVE_BATCH)]
    latencies: list[float] = []
    async with AsyncClient(brokers, timeout=60) as client:
        started = trio.current_time()

        async def worker(mine: list[list[bytes]]) -> None:
            for records in mine:
                sent = trio.current_time()
                await client.append(records, topic=topic, acks="quorum")
                latencies.append(trio.current_time() - sent)

        async with trio.open_nursery() as nursery:
            for i in range(NATIVE_IN_FLIGHT):
                nursery.start_soon(worker, calls[i::NATIVE_IN_FLIGHT])
        took = trio.current_time() - started
    return {"records_per_s": round(len(calls) * NATIVE_BATCH / took), **latency_fields(latencies)}


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
    count = TINY if tiny else QUICK if quick else FULL
    with running_cluster("kafka", kafka=True) as cluster:
        with cluster.client(timeout=60) as client:
            client.create_topic("bench-kafka", partitions=1, replicas=3)
            client.create_topic("bench-native", partitions=1, replicas=3)
        kafka = _kafka_produce(cluster.kafka_bootstrap, "bench-kafka", count, idempotent=False)
        idempotent = _kafka_produce(cluster.kafka_bootstrap, "bench-kafka", count, True)
        native = trio.run(_native_produce, cluster.brokers, "bench-native", count)
        kafka_read = _kafka_consume(cluster.kafka_bootstrap, "bench-kafka", count)
        native_read = _native_consume(cluster, "bench-kafka", count)
    return [
        {
            "figure": "produce, confluent-kafka (librdkafka's defaults, acks=all)",
            **kafka,
            "vs_native": round(kafka["records_per_s"] / native["records_per_s"], 2),
        },
        {
            "figure": "produce, confluent-kafka, enable.idempotence=true",
            **idempotent,
            "vs_native": round(idempotent["records_per_s"] / native["records_per_s"], 2),
        },
        {
            "figure": f"produce, AsyncClient ({NATIVE_IN_FLIGHT} x {NATIVE_BATCH} records, quorum)",
            **native,
        },
        {
            "figure": "consume, confluent-kafka Consumer",
            "records_per_s": round(kafka_read),
            "vs_native": round(kafka_read / native_read, 2),
        },
        {"figure": "consume, Client.read loop", "records_per_s": round(native_read)},
    ]


if __name__ == "__main__":
    print_table("bench kafka", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
