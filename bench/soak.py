"""`quorumlog bench soak`: whether a node's memory stays flat under the same load for a long
time (issue 51).

The load, kept the same for the whole run on a 3-node cluster: a topic of 12 partitions x 3
replicas written by 4 keyed producers (values of 100 to 4,000 bytes, 16 appends in flight
each), read by a stream group of 2 members that commit every poll, and (the variant with
churn) every CHURN_S a topic of 3 partitions made, written, read back and deleted. Every
SAMPLE_S each node's resident memory, open files and `status` tables are read. The figure
that counts: the median RSS of the last third of the run against the middle third's, on
every node (at most x1.10). Each variant runs `minutes`.

With `heap`, the nodes trace their allocations (quorumlog/server/heap.py) and write a
snapshot as the middle third begins and another at the end: each node's row names the
source lines whose allocations grew most between the two (tracing slows the nodes, so its
runs' figures are not the plain run's).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import sysconfig
import tracemalloc

import trio

import quorumlog
from quorumlog import AsyncClient, AsyncConsumer, Record
from quorumlog.bench.workload import running_cluster
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.server.heap import ENV as TRACEMALLOC_ENV
from quorumlog.server.heap import snapshot_path

TOPIC = "soak"
PARTITIONS = 12
PRODUCERS = 4
IN_FLIGHT = 16
VALUE_BYTES = (100, 4000)
MEMBERS = 2
CHURN_S = 10.0
SAMPLE_S = 10.0  # at most: a short run samples a dozen times
GROWTH_MAX = 1.10  # last third's median RSS against the middle third's
HEAP_FRAMES = 1  # a source line each: enough to name a holder, and the cheapest to trace
HEAP_TOP = 10  # lines named per node
HEAP_WRITTEN_S = 60.0  # a node's snapshot file appears within this


def run(quick: bool = False, minutes: float | None = None, heap: bool = False) -> list[dict]:
    minutes = minutes if minutes is not None else (1.0 if quick else 30.0)
    return [_soak(minutes, churn, heap) for churn in (True, False)]


def _soak(minutes: float, churn: bool, heap: bool) -> dict:
    env = {TRACEMALLOC_ENV: str(HEAP_FRAMES)} if heap else None
    with running_cluster("soak", http=False, env=env) as cluster:
        return trio.run(_load_and_watch, cluster, minutes * 60, churn, heap)


async def _load_and_watch(cluster: ProcessCluster, seconds: float, churn: bool, heap: bool) -> dict:
    counts = {"acked": 0, "errors": 0, "consumed": 0, "churn_rounds": 0}
    samples: dict[int, list[tuple[float, float, int]]] = {i: [] for i in cluster.ids}
    tables: dict[int, dict | None] = {}
    heaps: dict[int, list[dict]] = {}
    snapshots = 0  # taken on every node so far
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
                if heap and not snapshots and elapsed >= seconds / 3:
                    snapshots = await _snapshot_heaps(cluster, 1)
                await trio.sleep(sample_s)
            with trio.move_on_after(30):
                tables = {row["node_id"]: row.get("tables") for row in await client.status()}
            if heap and snapshots:
                await _snapshot_heaps(cluster, 2)
                heaps = {node_id: _heap_growth(cluster, node_id) for node_id in cluster.ids}
            load.cancel_scope.cancel()
    return _row(seconds, churn, counts, samples, tables, heaps)


async def _snapshot_heaps(cluster: ProcessCluster, n: int) -> int:
    """Every node's snapshot `n` of its traced allocations, once written."""
    for node_id in cluster.ids:
        cluster.procs[node_id].send_signal(signal.SIGUSR2)
    paths = [snapshot_path(cluster.data_dir(node_id), n) for node_id in cluster.ids]
    with trio.fail_after(HEAP_WRITTEN_S):
        while not all(os.path.exists(p) for p in paths):
            await trio.sleep(0.2)
    return n


def _heap_growth(cluster: ProcessCluster, node_id: int) -> list[dict]:
    """The source lines whose allocations grew most from snapshot 1 to 2."""
    first, last = (
        tracemalloc.Snapshot.load(snapshot_path(cluster.data_dir(node_id), n)) for n in (1, 2)
    )
    return [
        {
            "where": _short(stat.traceback[0].filename) + f":{stat.traceback[0].lineno}",
            "grew_kib": round(stat.size_diff / 1024),
            "kib": round(stat.size / 1024),
            "blocks_grew": stat.count_diff,
        }
        for stat in last.compare_to(first, "lineno")[:HEAP_TOP]
    ]


def _short(filename: str) -> str:
    """A source file's path from the folder it was installed in (the project's, the
    packages', or the standard library's)."""
    for root in _SOURCE_ROOTS:
        if filename.startswith(root + os.sep):
            return os.path.relpath(filename, root)
    return filename


_SOURCE_ROOTS = (
    os.path.dirname(os.path.dirname(quorumlog.__file__)),
    sysconfig.get_paths()["purelib"],
    sysconfig.get_paths()["stdlib"],
)


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


def _row(seconds, churn, counts, samples, tables, heaps) -> dict:
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
            **({"heap_grew_most": heaps[node_id]} if node_id in heaps else {}),
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
