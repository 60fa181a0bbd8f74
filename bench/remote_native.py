"""The remote workloads through quorumlog's own clients: the driver's set-up with the
blocking `Client`, and the worker processes' appends and reads with one shared
`AsyncClient` each (as docs/python.md says to keep a window of calls in flight)."""

from __future__ import annotations

import time

import trio

from quorumlog import AsyncClient, Client, QuorumLogError
from quorumlog.bench.remote_meter import Meter
from quorumlog.bench.remote_spec import Done, RunOptions, WorkerSpec, stamped
from quorumlog.bench.remote_workers import (
    ERROR_PAUSE_S,
    INFLIGHT_MAX,
    POLL_S,
    READ_RECORDS_MAX,
    REPORT_EVERY_S,
    Link,
    SetupError,
    TopicState,
    Values,
    call_times,
    count_read,
)
from quorumlog.client.protocol import read_secret_file


def _client_args(options: RunOptions) -> dict:
    secret = read_secret_file(options.secret_file) if options.secret_file else None
    return {"secret": secret, "timeout": options.timeout_s, **dict(options.tls)}


def setup(options: RunOptions) -> TopicState:
    """The topic, created if missing; whether it holds any record."""
    try:
        with Client(options.brokers, **_client_args(options)) as client:
            topics = client.topics()
            if options.topic not in topics:
                client.create_topic(
                    options.topic, partitions=options.partitions, replicas=options.replicas
                )
                return TopicState(options.partitions, empty=True)
            count = topics[options.topic]
            empty = not any(
                client.read(
                    client.start_offset(options.topic, p), 1, topic=options.topic, partition=p
                )
                for p in range(count)
            )
            return TopicState(count, empty)
    except QuorumLogError as exc:
        raise SetupError(str(exc)) from None


async def _report(meter: Meter) -> None:
    while True:
        await trio.sleep(REPORT_EVERY_S)
        meter.flush()


def run_worker(spec: WorkerSpec, link: Link) -> None:
    body = _produce if spec.role == "produce" else _consume
    trio.run(body, spec, link)


async def _produce(spec: WorkerSpec, link: Link) -> None:
    options = spec.options
    values = Values(options.size, options.records, spec.index)

    async with AsyncClient(options.brokers, **_client_args(options)) as client:
        # Routes and connections first; its value carries no send time, so e2e skips it.
        await client.append(values.warm(), acks=options.acks, topic=options.topic)
        meter = Meter(link.send, spec.index, await trio.to_thread.run_sync(link.ready))
        end_s = meter.start_s + options.duration_s

        async def call(intended_s: float) -> None:
            batch = values.take()
            if spec.stamped:
                batch = [stamped(v, intended_s) for v in batch]
            try:
                await client.append(batch, acks=options.acks, topic=options.topic)
            except QuorumLogError:
                meter.error()
                await trio.sleep(ERROR_PAUSE_S)  # a cluster that fails every call: no spin
                return
            # From the intended send time: a stall delays the calls due after it, and
            # an open loop counts that wait (no coordinated omission).
            meter.count(len(batch), values.batch_bytes, time.time() - intended_s)

        async def closed_loop() -> None:
            while (sent_s := time.time()) < end_s:
                await call(sent_s)

        async def open_loop(nursery: trio.Nursery) -> None:
            slots = trio.Semaphore(INFLIGHT_MAX)

            async def one(intended_s: float) -> None:
                try:
                    await call(intended_s)
                finally:
                    slots.release()

            for intended_s in call_times(meter.start_s, end_s, options, options.records):
                await trio.sleep(max(0.0, intended_s - time.time()))
                await slots.acquire()
                nursery.start_soon(one, intended_s)

        async with trio.open_nursery() as outer:
            outer.start_soon(_report, meter)
            async with trio.open_nursery() as nursery:
                if options.rate is None:
                    for _ in range(options.window):
                        nursery.start_soon(closed_loop)
                else:
                    nursery.start_soon(open_loop, nursery)
            outer.cancel_scope.cancel()
    meter.flush(final=True)
    link.send(Done(spec.index, spec.role, meter.elapsed_s))


async def _consume(spec: WorkerSpec, link: Link) -> None:
    """consume: from each partition's start to its end as the worker starts (or until the
    duration ends), timing each read; e2e: from the end on, timing each record from its
    send time, until the producers are done and their last records are read."""
    options = spec.options
    topic = options.topic
    async with AsyncClient(options.brokers, **_client_args(options)) as client:
        positions, last = {}, {}
        for p in spec.partitions:
            last[p] = await client.end_offset(topic=topic, partition=p)
            positions[p] = last[p] + 1 if spec.stamped else await client.start_offset(topic, p)
        meter = Meter(link.send, spec.index, await trio.to_thread.run_sync(link.ready))
        end_s = meter.start_s + options.duration_s
        final: dict[int, int] = {}  # e2e: the ends once the producers are done

        async def reader(p: int) -> None:
            while True:
                if spec.stamped:
                    if link.producers_done() and p not in final:
                        final[p] = await client.end_offset(topic=topic, partition=p)
                    if p in final and positions[p] > final[p]:
                        return
                elif positions[p] > last[p] or time.time() >= end_s:
                    return
                asked_s = time.time()
                try:
                    records, positions[p] = await client.read_on(
                        positions[p], READ_RECORDS_MAX, topic, p
                    )
                except QuorumLogError:
                    meter.error()
                    await trio.sleep(ERROR_PAUSE_S)
                    continue
                if not records:
                    await trio.sleep(POLL_S)
                    continue
                count_read(meter, spec, [r.value for r in records], asked_s, time.time())

        async with trio.open_nursery() as outer:
            outer.start_soon(_report, meter)
            with trio.move_on_after(options.duration_s + options.timeout_s * 3):
                async with trio.open_nursery() as nursery:
                    for p in spec.partitions:
                        nursery.start_soon(reader, p)
            outer.cancel_scope.cancel()
    meter.flush(final=True)
    link.send(Done(spec.index, spec.role, meter.elapsed_s))
