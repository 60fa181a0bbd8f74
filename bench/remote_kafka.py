"""The remote workloads through confluent-kafka (librdkafka), against any Kafka-protocol
cluster: quorumlog's `--kafka-listen`, or Kafka and Redpanda elsewhere, so that the figures
set side by side measure the same workload.

librdkafka batches by itself: `--records` and `--window` bound the messages in flight
(window x records per producer) instead of shaping requests; a message's latency runs from
its produce() (the open loop: its intended send time) to its delivery report."""

from __future__ import annotations

import logging
import time
from functools import partial

from quorumlog.bench.remote_meter import Meter
from quorumlog.bench.remote_spec import Done, RunOptions, WorkerSpec, stamped
from quorumlog.bench.remote_workers import (
    POLL_S,
    READ_RECORDS_MAX,
    Link,
    SetupError,
    TopicState,
    Values,
    call_times,
    count_read,
)

KAFKA_ACKS = {"quorum": "all", "leader": "1", "none": "0"}
REPLICAS_DEFAULT_MAX = 3
_quiet = logging.getLogger("quorumlog.bench.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False  # librdkafka's own retries would otherwise fill stderr


def _config(options: RunOptions, **more) -> dict:
    return {"bootstrap.servers": options.kafka, "logger": _quiet, **more}


def setup(options: RunOptions) -> TopicState:
    """The topic, created through the admin API if missing; whether it holds any record."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(_config(options))
    try:
        metadata = admin.list_topics(timeout=options.timeout_s)
        if options.topic not in metadata.topics:
            replicas = options.replicas or min(REPLICAS_DEFAULT_MAX, len(metadata.brokers))
            topic = NewTopic(options.topic, options.partitions, replicas)
            admin.create_topics([topic])[options.topic].result(timeout=options.timeout_s)
            return TopicState(options.partitions, empty=True)
        count = len(metadata.topics[options.topic].partitions)
        return TopicState(count, empty=not any(_ends(options, range(count))))
    except KafkaException as exc:
        raise SetupError(f"Kafka {options.kafka}: {exc.args[0].str()}") from None


def _ends(options: RunOptions, partitions, consumer=None) -> dict[int, tuple[int, int]]:
    """partition -> (low, high) watermark offsets; `high` is the next offset written."""
    from confluent_kafka import Consumer, TopicPartition

    own = consumer is None
    consumer = consumer or Consumer(_config(options, **{"group.id": "quorumlog-bench"}))
    try:
        return {
            p: consumer.get_watermark_offsets(
                TopicPartition(options.topic, p), timeout=options.timeout_s
            )
            for p in partitions
        }
    finally:
        if own:
            consumer.close()


def run_worker(spec: WorkerSpec, link: Link) -> None:
    (_produce if spec.role == "produce" else _consume)(spec, link)


def _produce(spec: WorkerSpec, link: Link) -> None:
    from confluent_kafka import Producer

    options = spec.options
    values = Values(options.size, 1, spec.index)
    producer = Producer(_config(options, acks=KAFKA_ACKS[options.acks]))
    warmed: list = []
    producer.produce(options.topic, values.warm()[0], on_delivery=lambda e, m: warmed.append(e))
    producer.flush(options.timeout_s)
    if warmed != [None]:
        raise RuntimeError(f"the first message was not delivered: {warmed or 'timed out'}")
    meter = Meter(link.send, spec.index, link.ready())
    end_s = meter.start_s + options.duration_s
    in_flight = 0

    def delivered(intended_s: float, error, message) -> None:
        nonlocal in_flight
        in_flight -= 1
        if error is not None:
            meter.error()
        else:
            meter.count(1, options.size, time.time() - intended_s)

    def send(intended_s: float) -> None:
        nonlocal in_flight
        value = values.take()[0]
        if spec.stamped:
            value = stamped(value, intended_s)
        while True:
            try:
                producer.produce(options.topic, value, on_delivery=partial(delivered, intended_s))
                in_flight += 1
                return
            except BufferError:  # librdkafka's queue is full: let it drain
                producer.poll(POLL_S)

    if options.rate is None:
        limit = options.window * options.records
        while (now_s := time.time()) < end_s:
            if in_flight < limit:
                send(now_s)
                producer.poll(0)
            else:
                producer.poll(POLL_S)
            meter.flush()
    else:
        for intended_s in call_times(meter.start_s, end_s, options, 1):
            while (wait_s := intended_s - time.time()) > 0:
                producer.poll(min(wait_s, POLL_S))
                meter.flush()
            send(intended_s)
            producer.poll(0)
    while in_flight and time.time() < end_s + options.timeout_s:
        producer.poll(POLL_S)
        meter.flush()
    meter.flush(final=True)
    link.send(Done(spec.index, spec.role, meter.elapsed_s))


def _consume(spec: WorkerSpec, link: Link) -> None:
    """As the native consumer (remote_native._consume): assigned its partitions, from the
    low watermark to the high one as it starts (consume), or from the high one on (e2e)."""
    from confluent_kafka import Consumer, TopicPartition

    options = spec.options
    consumer = Consumer(
        _config(options, **{"group.id": "quorumlog-bench", "enable.auto.commit": False})
    )
    ends = _ends(options, spec.partitions, consumer)
    positions = {p: high if spec.stamped else low for p, (low, high) in ends.items()}
    last = {p: high for p, (_, high) in ends.items()}  # read up to here (exclusive)
    consumer.assign([TopicPartition(options.topic, p, positions[p]) for p in spec.partitions])
    meter = Meter(link.send, spec.index, link.ready())
    end_s = meter.start_s + options.duration_s
    drained_by_s = end_s + options.timeout_s * 3
    final_known = False
    try:
        while time.time() < (drained_by_s if spec.stamped else end_s):
            if spec.stamped and not final_known and link.producers_done():
                last = {p: high for p, (_, high) in _ends(options, last, consumer).items()}
                final_known = True
            if (final_known or not spec.stamped) and all(
                positions[p] >= last[p] for p in positions
            ):
                break
            asked_s = time.time()
            messages = consumer.consume(READ_RECORDS_MAX, POLL_S * 50)
            meter.flush()
            now_s = time.time()
            good = [m for m in messages if m.error() is None]
            for message in good:
                positions[message.partition()] = message.offset() + 1
            if not good:
                continue
            count_read(meter, spec, [m.value() for m in good], asked_s, now_s)
    finally:
        consumer.close()
    meter.flush(final=True)
    link.send(Done(spec.index, spec.role, meter.elapsed_s))
