"""`quorumlog bench groups-log`: what consumer groups leave in `__groups`, and how fast a new
coordinator answers, with the log compacted to its snapshots against the same commits with
snapshots turned off (every commit kept, as before compaction).

Many stream groups each read one record and commit, over and over (`AsyncConsumer.poll`,
`commit`: the public client), spread over the `__groups` partitions by their names. Then:
the bytes of `__groups` on one node's disk, and the time from a SIGKILL of the coordinator
of the busiest partition to the first commit answered by its successor.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys
import time
from dataclasses import dataclass

import trio

from quorumlog import AsyncConsumer, Record
from quorumlog.bench.report import print_table
from quorumlog.bench.workload import running_cluster
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.consumers.state import GROUPS_PARTITIONS, GROUPS_TOPIC, groups_partition

NEVER = "0"  # QUORUMLOG_GROUPS_SNAPSHOT_EVERY: no snapshot, nothing compacted


@dataclass(frozen=True)
class Sizes:
    commits: int
    groups: int
    settle_s: float = 7.0  # retention runs every 5 s on each replica


FULL = Sizes(1_000_000, 64)
QUICK = Sizes(100_000, 32)
TINY = Sizes(600, 3, settle_s=0.0)  # less than a segment: nothing to compact


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    rows = []
    for label, every in (("snapshots off (baseline)", NEVER), ("compacted", None)):
        env = {"QUORUMLOG_GROUPS_SNAPSHOT_EVERY": every} if every else None
        if tiny and every is None:
            env = {"QUORUMLOG_GROUPS_SNAPSHOT_EVERY": "200"}
        with running_cluster("groups-log", env=env) as cluster:
            rows.append(
                {"figure": f"{sizes.commits:,} commits, {label}", **_measure(cluster, sizes)}
            )
    base, compacted = rows
    compacted["bytes_ratio_to_baseline"] = compacted["groups_bytes"] / base["groups_bytes"]
    compacted["takeover_ratio_to_baseline"] = compacted["takeover_s"] / base["takeover_s"]
    return rows


def _measure(cluster: ProcessCluster, sizes: Sizes) -> dict:
    per_group = sizes.commits // sizes.groups
    with cluster.client(timeout=60) as c:
        c.create_topic("events", partitions=1, replicas=3)
        for start in range(0, per_group + 10, 10_000):
            c.append([Record(b"x")] * min(10_000, per_group + 10 - start), topic="events")
    names = [f"g{i}" for i in range(sizes.groups)]
    counts = [0] * GROUPS_PARTITIONS
    for name in names:
        counts[groups_partition(name, GROUPS_PARTITIONS)] += 1
    busiest = max(range(GROUPS_PARTITIONS), key=lambda p: counts[p])
    started = time.monotonic()
    takeover_s = trio.run(_commit_all, cluster, names, per_group, busiest)
    elapsed = time.monotonic() - started
    time.sleep(sizes.settle_s)
    return {
        "commits": per_group * len(names),
        "commits_per_s": per_group * len(names) / elapsed,
        "groups_bytes": _groups_bytes(cluster, 1),
        "takeover_s": takeover_s,
    }


async def _commit_all(cluster: ProcessCluster, names: list[str], per_group: int, busiest: int):
    """Every group commits `per_group` times, then the busiest partition's coordinator is
    killed and its groups commit once more; returns the time to the first answered."""
    async with contextlib.AsyncExitStack() as stack:
        consumers = [
            await stack.enter_async_context(
                AsyncConsumer(cluster.brokers, name, ["events"], timeout=60)
            )
            for name in names
        ]
        async with trio.open_nursery() as nursery:
            for c in consumers:
                nursery.start_soon(_commits, c, per_group)
        with cluster.client(timeout=30) as client:
            coordinator = client.describe_topic(GROUPS_TOPIC)[busiest]["leader_id"]
        cluster.kill(coordinator)
        killed = time.monotonic()
        first = [c for c in consumers if groups_partition(c.group, GROUPS_PARTITIONS) == busiest]
        await _commits(first[0], 1)
        return time.monotonic() - killed


async def _commits(consumer: AsyncConsumer, count: int) -> None:
    for _ in range(count):
        while not await consumer.poll(1, 5.0):
            pass
        await consumer.commit()


def _groups_bytes(cluster: ProcessCluster, node_id: int) -> int:
    folder = os.path.join(cluster.data_dir(node_id), "topics", GROUPS_TOPIC)
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(folder, "*", "log", "*.log")))


if __name__ == "__main__":
    print_table("bench groups-log", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
