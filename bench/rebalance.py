"""`quorumlog bench rebalance`: time to balance 3 -> 4 nodes.

A 3-node cluster with a topic of 12 partitions x 3 replicas, each partition filled with N MB
of incompressible records (full: 100 MB; --quick: 5 MB); then a 4th node joins (`members
add --wait`) and the controller rebalances by itself, `rebalance_moves_max` (2) replica
moves at a time. Timed from the join:

- `balanced_s`: until the controller's leader reports the rebalance done and every group
  has its new replica set (voters committed, no learner left);
- `leads_s`: until node 4 leads a partition (preferred leaders reordered, then handed over
  by the leader balancer, every 5 s);

with the replicas moved, their MB, `mb_s` (moved MB over `balanced_s`) and, as baseline,
the MB/s the same data took to append in the first place.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass

from quorumlog.bench.partitions import groups_settled
from quorumlog.bench.report import print_table
from quorumlog.bench.workload import IncompressibleRecords, running_cluster
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster
from quorumlog.client.client import Client
from quorumlog.raft.settings import RaftSettings

TOPIC = "balancing"
PARTITIONS = 12
RECORD_BYTES = 1024
RECORDS_PER_APPEND = 256
POLL_S = 0.2


@dataclass(frozen=True)
class Sizes:
    mb: int  # per partition
    timeout_s: float


FULL = Sizes(mb=100, timeout_s=1800)
QUICK = Sizes(mb=5, timeout_s=300)
TINY = Sizes(mb=1, timeout_s=120)


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    with running_cluster("rebalance") as cluster:
        return [_balance_row(cluster, sizes)]


def _balance_row(cluster: ProcessCluster, sizes: Sizes) -> dict:
    records = IncompressibleRecords(RECORD_BYTES)
    appends = max(1, sizes.mb * 1024 * 1024 // (RECORD_BYTES * RECORDS_PER_APPEND))
    with Client(cluster.brokers, timeout=60) as c:
        c.create_topic(TOPIC, partitions=PARTITIONS, replicas=3)
        started = time.monotonic()
        for p in range(PARTITIONS):
            for _ in range(appends):
                c.append(records.take(RECORDS_PER_APPEND), topic=TOPIC, partition=p)
        fill_s = time.monotonic() - started
    address = cluster.start_joiner(4)
    brokers = f"{cluster.brokers},{address}"
    subprocess.run(
        [*QUORUMLOG, "members", "-b", brokers, "add", "4", address, "--wait", "--timeout", "60"],
        check=True,
        capture_output=True,
    )
    started = time.monotonic()
    deadline = started + sizes.timeout_s
    leads_s = None
    with Client(brokers, timeout=60) as c:
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not balanced within {sizes.timeout_s:g} s")
            rows = c.describe_topic(TOPIC)
            if leads_s is None and any(r["leader_id"] == 4 for r in rows):
                leads_s = time.monotonic() - started
            progress = next((s["rebalance"] for s in c.status() if "rebalance" in s), None)
            replicas = {r["partition"]: r["replicas"] for r in rows}
            if (
                progress is not None
                and progress["state"] == "balanced"
                and not progress["moves_left"]
                and groups_settled(cluster, TOPIC, replicas)
            ):
                balanced_s = time.monotonic() - started
                break
            time.sleep(POLL_S)
        while leads_s is None and time.monotonic() < deadline:
            if any(r["leader_id"] == 4 for r in c.describe_topic(TOPIC)):
                leads_s = time.monotonic() - started
            time.sleep(POLL_S)
    moved = sum(4 in r for r in replicas.values())
    return {
        "figure": f"rebalance 3 -> 4 nodes, {PARTITIONS} partitions of {sizes.mb} MB",
        "balanced_s": round(balanced_s, 2),
        "leads_s": None if leads_s is None else round(leads_s, 2),
        "replicas_moved": moved,
        "moved_mb": moved * sizes.mb,
        "mb_s": round(moved * sizes.mb / balanced_s, 2),
        "moves_at_once": RaftSettings().rebalance_moves_max,
        "append_same_mb_s": round(PARTITIONS * sizes.mb / fill_s, 2),
    }


if __name__ == "__main__":
    print_table("bench rebalance", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
