"""`quorumlog bench soak`: whether a node's memory stays flat under the same load for a long
time (issue 51).

The load, kept the same for the whole run on a 3-node cluster: a topic of 12 partitions x 3
replicas written by 4 keyed producers (values of 100 to 4,000 bytes, 16 appends in flight
each), read by a stream group of 2 members that commit every poll, and (the variant with
churn) every CHURN_S a topic of 3 partitions made, written, read back and deleted. Every
SAMPLE_S each node's resident memory, open files and `status` tables are read. The figure
that counts: the median RSS of the last third of the run against the middle third's, on
every node (at most x1.10). Each variant runs `minutes`.
"""

from __future__ import annotations

import os
import random
import statistics

import trio

from quorumlog import AsyncClient, AsyncConsumer, Record
from quorumlog.bench.workload import running_cluster
from quorumlog.cli.localcluster import ProcessCluster

TOPIC = "soak"
PARTITIONS = 12
PRODUCERS = 4
IN_FLIGHT = 16
VALUE_BYTES = (100, 4000)
MEMBERS = 2
CHURN_S = 10.0
SAMPLE_S = 10.0  # at most: a short run samples a dozen times
GROWTH_MAX = 1.10  # last third's median RSS against the middle third's


def run(quick: bool = False, minutes: float | None = None) -> list[dict]:
    minutes = minutes if minutes is not None else (1.0 if quick else 30.0)
    return [_soak(minutes, churn) for churn in (True, False)]


def _soak(minutes: float, churn: bool) -> dict:
    with running_cluster("soak", http=False) as cluster:
        return trio.run(_load_and_watch, cluster, minutes * 60, churn)


async def _load_and_watch(cluster: ProcessCluster, seconds: float, churn: bool) -> dict:
    counts = {"acked": 0, "errors": 0, "consumed": 0, "churn_rounds": 0}
    samples: dict[int, list[tuple[float, float, int]]] = {i: [] for i in cluster.ids}
    tables: dict[int, dict | None] = {}
    async with AsyncClient(cluster.brokers, timeout=30) as client:
        await client.create_topic(TOPIC, partitions=PARTITIONS, replicas=3)
        started = trio.current_time()
        async with trio.open_nursery() as load:
            for p in range(PRODUCERS):
                rng = random.Random(p)  # a producer's keys and values, its appends in flight
                for _ in range(IN_FLIGHT):
                    load.start_soon(_produce, client, rng, counts)
            for _ in range(MEMBERS):
                load.start_soon(_consume, cluster.brokers, counts)
            if churn:
                load.start_soon(_churn, client, counts)
            sample_s = min(SAMPLE_S, seconds / 12)
            while (elapsed := trio.current_time() - started) < seconds:
                for node_id in cluster.ids:
                    rss_mb, files = _resources(cluster.procs[node_id].pid)
                    samples[node_id].append((round(elapsed, 1), rss_mb, files))
                await trio.sleep(sample_s)
            with trio.move_on_after(30):
                tables = {row["node_id"]: row.get("tables") for row in await client.status()}
            load.cancel_scope.cancel()
    return _row(seconds, churn, counts, samples, tables)


async def _produce(client: AsyncClient, rng: random.Random, counts: dict) -> None:
    """One of a producer's appends in flight, again and again."""
    while True:
        key = b"k%d" % rng.randrange(10_000)
        value = rng.randbytes(rng.randint(*VALUE_BYTES))
        try:
            await client.append([Record(value, key=key)], topic=TOPIC)
            counts["acked"] += 1
        except Exception:  # counted: the figure is memory, the load must go on
            counts["errors"] += 1
            await trio.sleep(0.5)


async def _consume(brokers: str, counts: dict) -> None:
    async with AsyncConsumer(brokers, "soak", [TOPIC]) as consumer:
        while True:
            counts["consumed"] += len(await consumer.poll(500, 1.0))
            await consumer.commit()


async def _churn(client: AsyncClient, counts: dict) -> None:
    """A topic of 3 partitions made, written, read back and deleted, every CHURN_S."""
    while True:
        name = f"churn{counts['churn_rounds']}"
        try:
            await client.create_topic(name, partitions=3, replicas=3)
            await client.append_spread([b"v%d" % i for i in range(300)], topic=name)
            for p in range(3):
                await client.read(0, 1000, topic=name, partition=p)
            await client.delete_topic(name)
            counts["churn_rounds"] += 1
        except Exception:
            counts["errors"] += 1
        await trio.sleep(CHURN_S)


def _resources(pid: int) -> tuple[float, int]:
    """Resident memory (MB) and open files of a process (Linux /proc)."""
    with open(f"/proc/{pid}/status") as f:
        rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return round(rss_kib / 1024, 1), len(os.listdir(f"/proc/{pid}/fd"))


def _row(seconds, churn, counts, samples, tables) -> dict:
    nodes = {}
    for node_id, series in samples.items():
        third = max(1, len(series) // 3)
        middle = statistics.median(s[1] for s in series[third : 2 * third] or series)
        last = statistics.median(s[1] for s in series[-third:])
        nodes[node_id] = {
            "rss_first_mb": series[0][1],
            "rss_middle_third_median_mb": middle,
            "rss_last_third_median_mb": last,
            "growth": round(last / middle, 3),
            "open_files": (series[0][2], series[-1][2]),
            "tables": tables.get(node_id),
        }
    worst = max(n["growth"] for n in nodes.values())
    return {
        "figure": f"soak {'with' if churn else 'without'} topic churn",
        "minutes": round(seconds / 60, 1),
        **counts,
        "records_per_s": round(counts["acked"] / seconds),
        "growth_worst": worst,
        "flat": worst <= GROWTH_MAX,
        "nodes": nodes,
        "samples": {str(i): s for i, s in samples.items()},
    }
