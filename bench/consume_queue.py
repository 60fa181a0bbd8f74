"""`quorumlog bench consume`, queue mode: 8 members leasing and acking the records of one
partition, beside one stream-mode member draining the same partition in the same run; and
the latency from a record's append to its durable ack under a steady load."""

from __future__ import annotations

import contextlib
import struct
from statistics import median

import trio

from quorumlog import AsyncClient, AsyncConsumer, Record
from quorumlog.bench.workload import percentile
from quorumlog.cli.localcluster import ProcessCluster

TOPIC = "bench-queue"
MEMBERS = 8
LEASE_RECORDS = 500
LATENCY_RATE = 2000  # records/s appended while the latency is measured
LATENCY_BATCH = 20


async def _queue_drain(brokers: str, group: str, total: int) -> float:
    """Acked records/s of MEMBERS queue members draining TOPIC: acks go with each next
    lease call, and the clock stops once every member's last acks are durable."""
    done = 0
    async with contextlib.AsyncExitStack() as stack:
        members = [
            await stack.enter_async_context(
                AsyncConsumer(brokers, group, [TOPIC], mode="queue", timeout=60)
            )
            for _ in range(MEMBERS)
        ]
        started = trio.current_time()

        async def member(c: AsyncConsumer) -> None:
            nonlocal done
            while done < total:
                records = await c.poll(LEASE_RECORDS, 0.05)
                for r in records:
                    await c.ack(r)
                done += len(records)
            await c.commit()

        async with trio.open_nursery() as nursery:
            for c in members:
                nursery.start_soon(member, c)
        took = trio.current_time() - started
    assert done == total, (done, total)
    return total / took


async def _latencies(brokers: str, group: str, seconds: float) -> list[float]:
    """Seconds from each append's acknowledgement to its durable ack by a queue member,
    appending LATENCY_RATE records/s while MEMBERS members lease, ack and commit."""
    latencies: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        producer = await stack.enter_async_context(AsyncClient(brokers, timeout=30))
        members = [
            await stack.enter_async_context(
                AsyncConsumer(brokers, group, [TOPIC], mode="queue", start="latest")
            )
            for _ in range(MEMBERS)
        ]
        stop = trio.current_time() + seconds

        async def produce() -> None:
            pause = LATENCY_BATCH / LATENCY_RATE
            while trio.current_time() < stop:
                stamp = struct.pack("<d", trio.current_time())
                await producer.append([Record(stamp)] * LATENCY_BATCH, topic=TOPIC, partition=0)
                await trio.sleep(pause)

        async def member(c: AsyncConsumer) -> None:
            while trio.current_time() < stop + 1.0:
                records = await c.poll(LEASE_RECORDS, 0.05)
                for r in records:
                    await c.ack(r)
                await c.commit()
                now = trio.current_time()
                latencies.extend(now - struct.unpack("<d", r.value)[0] for r in records)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            for c in members:
                nursery.start_soon(member, c)
    return sorted(latencies)


def queue_rows(cluster: ProcessCluster, records: int, rounds: int, latency_s: float) -> list[dict]:
    from quorumlog.bench.consume import fill, stream_group  # the scenario's own helpers

    trio.run(fill, cluster.brokers, TOPIC, 1, records)
    stream = [
        trio.run(stream_group, cluster.brokers, f"qs-{r}", 1, records, TOPIC, 1)
        for r in range(rounds)
    ]
    queue = [trio.run(_queue_drain, cluster.brokers, f"qq-{r}", records) for r in range(rounds)]
    latencies = trio.run(_latencies, cluster.brokers, "qlat", latency_s)
    base = median(stream)
    return [
        {
            "figure": "stream mode, 1 member, 1 partition, commit per poll",
            "records_s": round(base),
            "runs": [round(x) for x in stream],
        },
        {
            "figure": f"queue mode, {MEMBERS} members, 1 partition, acked records/s",
            "records_s": round(median(queue)),
            "x_stream_member": round(median(queue) / base, 2),
            "runs": [round(x) for x in queue],
        },
        {
            "figure": f"queue mode append to durable ack, {LATENCY_RATE} records/s, "
            f"{MEMBERS} members",
            "p50_ms": round(percentile(latencies, 50) * 1000, 1),
            "p99_ms": round(percentile(latencies, 99) * 1000, 1),
            "records": len(latencies),
        },
    ]
