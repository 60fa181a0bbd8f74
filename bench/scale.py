"""`quorumlog bench scale`: how throughput and latency move with one knob at a time.

A line per step, acks=quorum, closed loop through one pipelined connection to the leader:
- record size 100 B, 1 KiB, 16 KiB (about 64 KiB per append), window 64, 3 nodes;
- window 1, 16, 64 (64 KiB appends of 1 KiB records), 3 nodes;
- cluster size 3 and 5 (64 KiB appends, window 64);
- log size: the same step again after the log grew by `grow_mb` (does the log's size cost?).
Each line also says the peak RSS of the nodes, which must not follow the log's size.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from quorumlog.bench.report import print_table
from quorumlog.bench.workload import IncompressibleRecords, closed_loop_row, running_cluster
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.client.client import Client

RECORD_SIZES = (100, 1024, 16 * 1024)
WINDOWS = (1, 16, 64)


@dataclass(frozen=True)
class Sizes:
    duration_s: float
    grow_mb: int


TINY = Sizes(duration_s=0.5, grow_mb=5)
QUICK = Sizes(duration_s=2.0, grow_mb=200)
FULL = Sizes(duration_s=6.0, grow_mb=2000)


def _step(cluster: ProcessCluster, sizes: Sizes, record_bytes: int, window: int, **what) -> dict:
    return closed_loop_row(cluster, record_bytes, window, "quorum", sizes.duration_s, **what)


def _grow(cluster: ProcessCluster, megabytes: int) -> None:
    records = IncompressibleRecords(16 * 1024)
    with Client(cluster.brokers, timeout=60) as client:
        for _ in range(megabytes * 1_000_000 // (64 * 16 * 1024) + 1):
            client.append(records.take(64))


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    rows = []
    with running_cluster("scale") as cluster:
        for record_bytes in RECORD_SIZES:
            rows.append(_step(cluster, sizes, record_bytes, 64, figure=f"record {record_bytes} B"))
        for window in WINDOWS:
            rows.append(_step(cluster, sizes, 1024, window, figure=f"window {window}"))
        rows.append(_step(cluster, sizes, 1024, 64, figure="log small", log_mb=0))
        _grow(cluster, sizes.grow_mb)
        rows.append(_step(cluster, sizes, 1024, 64, figure="log grown", log_mb=sizes.grow_mb))
    with running_cluster("scale-5", size=5) as cluster:
        rows.append(_step(cluster, sizes, 1024, 64, figure="5 nodes"))
    return rows


if __name__ == "__main__":
    print_table("bench scale", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
