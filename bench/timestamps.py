"""`quorumlog bench timestamps`: what leader-stamped (log-append) timestamps cost.

- After a leader change: leadership goes to node 2, which appends (so the log's last
  stamp is its clock), then back to node 1, and the first append through the public
  `Client` is timed. Node 2's clock is right, 300 ms ahead (node 1 waits the gap out) or
  5 s ahead (too far: node 1 stamps past it at once); the same with producer timestamps
  is the baseline. The clock is shifted with QUORUMLOG_FAULT_CLOCK_OFFSET_MS, which moves
  the clock the leader stamps with (libfaketime would move the whole process's).
- Steady appends: the median latency of one-record appends, producer against leader
  timestamps (stamping patches each batch once).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

from quorumlog.bench.report import print_table
from quorumlog.bench.workload import write_config
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.client.client import Client


@dataclass(frozen=True)
class Sizes:
    changes: int  # leader changes timed per case
    steady: int  # appends timed for the steady latency


TINY = Sizes(changes=1, steady=20)
QUICK = Sizes(changes=3, steady=200)
FULL = Sizes(changes=10, steady=1000)

CASES = (
    ("producer timestamps (baseline)", "create", 0),
    ("leader timestamps, clocks agree", "log_append", 0),
    ("leader timestamps, old leader 300 ms ahead", "log_append", 300),
    ("leader timestamps, old leader 5 s ahead", "log_append", 5_000),
)


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    rows = []
    baseline = None
    # tiny (the smoke test): the baseline and the gap waited out only.
    for figure, timestamps, ahead_ms in CASES[::2] if tiny else CASES:
        firsts, steady_s = _case(timestamps, ahead_ms, sizes)
        first_s = statistics.median(firsts)
        baseline = baseline or first_s
        rows.append(
            {
                "figure": f"first append after a leader change, {figure}",
                "changes": sizes.changes,
                "median_ms": first_s * 1000,
                "max_ms": max(firsts) * 1000,
                "ratio_to_baseline": first_s / baseline,
                "steady_append_median_ms": steady_s * 1000,
            }
        )
    return rows


def _case(timestamps: str, ahead_ms: int, sizes: Sizes) -> tuple[list[float], float]:
    """(first-append latencies after each leader change, median steady append latency)."""
    root = tempfile.mkdtemp(prefix="quorumlog-bench-timestamps-")
    try:
        config = os.path.join(root, "settings.toml")
        write_config(config, None, {"timestamp_type": timestamps})
        cluster = ProcessCluster(root, size=3, config_file=config)
        for node_id in cluster.ids:
            offset = ahead_ms if node_id == 2 else 0
            cluster.start(node_id, wrapper=["env", f"QUORUMLOG_FAULT_CLOCK_OFFSET_MS={offset}"])
        try:
            cluster.wait_for_leader()
            with Client(cluster.brokers, timeout=30) as c:
                firsts = [_after_a_change(c) for _ in range(sizes.changes)]
                steady = []
                for _ in range(sizes.steady):
                    started = time.perf_counter()
                    c.append([b"s" * 100])
                    steady.append(time.perf_counter() - started)
        finally:
            cluster.stop_all()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return firsts, statistics.median(steady)


def _after_a_change(c: Client) -> float:
    c.admin("transfer_leader", node_id=2)
    for _ in range(5):
        c.append([b"on node 2"])
    c.admin("transfer_leader", node_id=1)
    started = time.perf_counter()
    c.append([b"first on node 1"])
    return time.perf_counter() - started


if __name__ == "__main__":
    print_table("bench timestamps", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
