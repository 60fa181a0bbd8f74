"""`quorumlog bench witness`: seed 000's argument for witnesses, measured.

On one 3-node cluster with N MB in its log (quick: 100 MB, full: 1 GB), a follower dies
twice over and single-fault tolerance is restored each time, through the public `Client`:

- with a full replica (the baseline): `add_member` of a new node, which copies the whole
  log before the leader promotes it, then `remove_member` of the dead one;
- with a witness: `add_member ... witness=True`, which joins with the uncommitted tail only,
  then `demote_member` of the dead one (two committed changes, no copy).

Commit latency (one 1 KiB append at a time, acks=quorum) is timed with one follower dead,
so that every commit needs the other member: a full follower (baseline), then the witness.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from quorumlog.bench.clients import fill_log
from quorumlog.bench.report import print_table
from quorumlog.bench.workload import percentile, running_cluster
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.client.client import Client

RECORD = b"w" * 1024


@dataclass(frozen=True)
class Sizes:
    log_mb: int
    appends: int  # timed for the commit latency


TINY = Sizes(log_mb=5, appends=50)
QUICK = Sizes(log_mb=100, appends=500)
FULL = Sizes(log_mb=1000, appends=2000)


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    with running_cluster("witness") as cluster:
        return _measure(cluster, sizes)


def _measure(cluster: ProcessCluster, sizes: Sizes) -> list[dict]:
    fill_s = fill_log(cluster.brokers, sizes.log_mb)
    members = {n: cluster.address(n) for n in (1, 2, 3)}
    rows = []

    dead = _kill_a_follower(cluster, members)
    full_latency = _latencies(members, sizes.appends)
    replica = 4
    members[replica] = _joiner(cluster, replica)
    with Client(_brokers(members), timeout=3600) as c:
        start = time.monotonic()
        c.admin("add_member", node_id=replica, address=members[replica], wait=True)
        replica_added_s = time.monotonic() - start
        c.admin("remove_member", node_id=dead)
        replica_s = time.monotonic() - start

    dead = _kill_a_follower(cluster, members, keep=replica)
    witness = 5
    members[witness] = _joiner(cluster, witness)
    with Client(_brokers(members), timeout=600) as c:
        start = time.monotonic()
        c.admin("add_member", node_id=witness, address=members[witness], witness=True, wait=True)
        witness_added_s = time.monotonic() - start
        c.admin("demote_member", node_id=dead)
        witness_s = time.monotonic() - start
    copied = cluster.node_status(witness) or {}

    rows.append(
        {
            "figure": f"restore fault tolerance, {sizes.log_mb} MB log: full replica (baseline)",
            "seconds": replica_s,
            "add_s": replica_added_s,
            "fill_s": fill_s,
        }
    )
    rows.append(
        {
            "figure": f"restore fault tolerance, {sizes.log_mb} MB log: witness + demote",
            "seconds": witness_s,
            "add_s": witness_added_s,
            "ratio_to_baseline": witness_s / replica_s,
            "witness_log_start_offset": copied.get("log_start_offset"),
        }
    )

    cluster.kill(replica)  # the witness and the leader make the majority now
    del members[replica]
    witness_latency = _latencies(members, sizes.appends)
    for figure, latencies in (
        ("commit latency, leader + full follower (baseline)", full_latency),
        ("commit latency, leader + witness", witness_latency),
    ):
        rows.append(
            {
                "figure": figure,
                "appends": len(latencies),
                "p50_ms": percentile(latencies, 50) * 1000,
                "p99_ms": percentile(latencies, 99) * 1000,
            }
        )
    rows[-1]["ratio_to_baseline"] = rows[-1]["p50_ms"] / rows[-2]["p50_ms"]

    # Step t=5: the witness is copied the records before its join, then becomes a full
    # voter; against the copy to a new full replica above.
    with Client(_brokers(members), timeout=3600) as c:
        start = time.monotonic()
        c.admin("promote_member", node_id=witness)
        promote_s = time.monotonic() - start
    rows.append(
        {
            "figure": f"promote the witness: copy of the older records, {sizes.log_mb} MB log",
            "seconds": promote_s,
            "ratio_to_full_replica_add": promote_s / replica_added_s,
            "log_start_offset": (cluster.node_status(witness) or {}).get("log_start_offset"),
        }
    )
    return rows


def _brokers(members: dict[int, str]) -> str:
    return ",".join(members.values())


def _joiner(cluster: ProcessCluster, node_id: int) -> str:
    """A new node, started and answering (its start-up is not part of a restore)."""
    address = cluster.start_joiner(node_id)
    deadline = time.monotonic() + 30
    while cluster.node_status(node_id) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"node {node_id} did not answer within 30 s")
        time.sleep(0.05)
    return address


def _kill_a_follower(
    cluster: ProcessCluster, members: dict[int, str], keep: int | None = None
) -> int:
    """Kill a follower of `default` (not `keep`) for good; returns its id."""
    with Client(_brokers(members), timeout=30) as c:
        statuses = c.status()
    leader = next(s["node_id"] for s in statuses if s.get("role") == "leader")
    victim = min(n for n in members if n not in (leader, keep))
    cluster.kill(victim)
    del members[victim]
    return victim


def _latencies(members: dict[int, str], count: int) -> list[float]:
    """Sorted seconds per acks=quorum append of one 1 KiB record, one at a time."""
    times = []
    with Client(_brokers(members), timeout=30) as c:
        c.append([RECORD])  # connected, leader known
        for _ in range(count):
            start = time.perf_counter()
            c.append([RECORD])
            times.append(time.perf_counter() - start)
    return sorted(times)


if __name__ == "__main__":
    print_table("bench witness", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
