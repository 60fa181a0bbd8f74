"""Closed-loop produce through confluent-kafka (librdkafka), as `clients.async_run` appends
through the AsyncClient: `window` calls in flight, each of `records_per_call` 1 KiB
records, a call done when the delivery reports of all its records are in, the next call
produced at once. Against quorumlog's Kafka listener or Apache Kafka alike.

One thread: librdkafka's delivery reports are served by `poll`, where the loop produces
the next calls. A call's latency runs from its first produce() to its last record's
delivery report. Calls started in the warm-up are not counted, nor, with a `meter`, the
CPU used before the measured interval (the client's includes librdkafka's threads).
"""

from __future__ import annotations

import time

from quorumlog.bench.clients import record_calls, record_pool
from quorumlog.bench.resources import CpuMeter
from quorumlog.bench.workload import AppendRun

# Every request waits for its answer, one record per request when one is in flight.
NO_IDEMPOTENCE = {"acks": "all", "enable.idempotence": False, "linger.ms": 0}
# librdkafka's defaults (acks=all, linger.ms=5) with idempotence on, as the Java client's
# defaults have it since Kafka 3.0 (librdkafka's own default is off).
IDEMPOTENT_DEFAULTS = {"enable.idempotence": True}
POLL_S = 0.05  # the longest the loop waits for a report before it looks at the clock


def kafka_run(
    bootstrap: str,
    topic: str,
    window: int,
    records_per_call: int,
    settings: dict,
    duration_s: float,
    warmup_s: float,
    meter: CpuMeter | None = None,
) -> AppendRun:
    from confluent_kafka import Producer

    calls = record_calls(record_pool(), records_per_call)
    producer = Producer({"bootstrap.servers": bootstrap, **settings})
    producer.produce(topic, b"warm")  # metadata fetched, connections open, ids assigned
    if producer.flush(60):
        raise RuntimeError(f"confluent-kafka: no answer from {bootstrap} for {topic}")
    run = AppendRun()
    finished: list[tuple[float, float, int, int]] = []  # sent, done, records, failed
    issued = 0

    def produce_call() -> None:
        nonlocal issued
        records = calls[issued % len(calls)]
        issued += 1
        sent = time.monotonic()
        left, failed = [len(records)], [0]

        def delivered(error, _message) -> None:
            left[0] -= 1
            failed[0] += error is not None
            if not left[0]:
                finished.append((sent, time.monotonic(), len(records), failed[0]))

        for value in records:
            while True:
                try:
                    producer.produce(topic, value, on_delivery=delivered)
                    break
                except BufferError:  # librdkafka's queue is full: serve reports, retry
                    producer.poll(POLL_S)

    start = time.monotonic()
    measure_from = start + warmup_s
    end = measure_from + duration_s
    last_done = measure_from
    cpu_from = None
    for _ in range(window):
        produce_call()
    in_flight = window
    while in_flight:
        producer.poll(POLL_S)
        if meter is not None and cpu_from is None and time.monotonic() >= measure_from:
            cpu_from = meter.read()
        while finished:
            sent, done, records, failed = finished.pop()
            in_flight -= 1
            if failed:
                run.errors += 1
            elif sent >= measure_from:
                run.appends += 1
                run.records += records
                run.latencies_s.append(done - sent)
                last_done = max(last_done, done)
            if time.monotonic() < end:
                produce_call()
                in_flight += 1
    if meter is not None and cpu_from is not None:
        run.server_cpu_s, run.client_cpu_s = meter.since(cpu_from)
    run.elapsed_s = last_done - measure_from
    producer.flush(60)
    return run
