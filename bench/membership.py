"""`quorumlog bench membership`: what membership changes cost a steady producer.

- Unavailability: a producer appends small records (acks quorum) through the blocking
  `Client` in a loop; the longest gap between two acknowledged appends is measured around
  a `replace` (joint consensus, the leader leaving) and around removing the leader itself,
  each beside a quiet stretch of the same length (the baseline) and the election timeout.
- Promotion: time from `members add` to the learner's promotion to voter, and to its
  commit of the whole log, for a learner N MB behind (quick: 100 MB, full: 1 GB), beside
  the time the same bytes took to append.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from quorumlog.bench.clients import fill_log
from quorumlog.bench.report import print_table
from quorumlog.bench.resources import peak_rss_row
from quorumlog.bench.workload import running_cluster
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError

ELECTION_TIMEOUT_MAX_S = 0.6


@dataclass(frozen=True)
class Sizes:
    quiet_s: float
    behind_mb: int


TINY = Sizes(quiet_s=0.5, behind_mb=5)
QUICK = Sizes(quiet_s=1.0, behind_mb=100)
FULL = Sizes(quiet_s=2.0, behind_mb=1000)


class Producer(threading.Thread):
    """Appends in a loop; records the time of every acknowledgement."""

    def __init__(self, brokers: str):
        super().__init__(daemon=True)
        self.brokers = brokers
        self.acks: list[float] = []
        self.failures = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with Client(self.brokers, timeout=10) as client:
            while not self.stop.is_set():
                try:
                    client.append([b"m" * 100])
                    self.acks.append(time.monotonic())
                except QuorumLogError:
                    self.failures += 1

    def longest_gap_s(self, start: float, end: float) -> float:
        times = [start] + [t for t in self.acks if start <= t <= end] + [end]
        return max(b - a for a, b in itertools.pairwise(times))


def ql(*args: str) -> None:
    out = subprocess.run([*QUORUMLOG, *args], capture_output=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"quorumlog {' '.join(args)} failed: {out.stderr.decode().strip()}")


def leader_of(cluster: ProcessCluster, brokers: str) -> int:
    with Client(brokers, timeout=10) as c:
        return next(s["node_id"] for s in c.status() if s.get("role") == "leader")


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    rows = []
    with running_cluster("membership") as cluster:
        _measure(cluster, sizes, rows)
        rows.append(peak_rss_row(cluster))
    return rows


def _measure(cluster: ProcessCluster, sizes: Sizes, rows: list[dict]) -> None:
    brokers = cluster.brokers
    producer = Producer(brokers)
    producer.start()
    try:
        time.sleep(0.3)
        start = time.monotonic()
        time.sleep(sizes.quiet_s)
        baseline = producer.longest_gap_s(start, time.monotonic())
        rows.append({"figure": "longest gap, no change (baseline)", "gap_s": baseline})

        address = cluster.start_joiner(4)
        brokers += "," + address
        old = leader_of(cluster, brokers)
        start = time.monotonic()
        ql("members", "-b", brokers, "replace", str(old), "4", address, "--timeout", "60")
        end = time.monotonic()
        time.sleep(0.3)
        gap = producer.longest_gap_s(start, time.monotonic())
        rows.append(_gap_row("longest gap, replace the leader (joint)", gap, baseline, end - start))

        leader = leader_of(cluster, brokers)
        start = time.monotonic()
        ql("members", "-b", brokers, "remove", str(leader), "--timeout", "60")
        end = time.monotonic()
        time.sleep(0.3)
        gap = producer.longest_gap_s(start, time.monotonic())
        rows.append(_gap_row("longest gap, remove the leader", gap, baseline, end - start))
    finally:
        producer.stop.set()
        producer.join(timeout=15)
    rows[-1]["failed_appends"] = producer.failures

    # A learner far behind: fill the log, then add it and time the promotion.
    fill_s = fill_log(brokers, sizes.behind_mb)
    address = cluster.start_joiner(5)
    with Client(brokers, timeout=10) as c:
        end = c.end_offset()
    start = time.monotonic()
    ql("members", "-b", brokers, "add", "5", address, "--wait", "--timeout", "600")
    promoted_s = time.monotonic() - start
    caught_up_s = _wait_committed(address, 5, end) - start
    rows.append(
        {
            # Promotion comes once the rest of the lag could be replicated within an
            # election timeout at the recent pace (Ongaro 4.2.1): before the very end.
            "figure": f"add -> promotion, learner {sizes.behind_mb} MB behind",
            "promotion_s": promoted_s,
            "caught_up_s": caught_up_s,
            "catchup_mb_s": sizes.behind_mb / caught_up_s,
            "append_same_mb_s": sizes.behind_mb / fill_s,
            "ratio_to_append": fill_s / caught_up_s,
        }
    )


def _wait_committed(address: str, node_id: int, offset: int) -> float:
    """When node `node_id` (at `address`) has committed `offset` (time.monotonic())."""
    with Client(address, timeout=10, direct=True) as c:
        while next(s for s in c.status() if s["node_id"] == node_id)["commit_offset"] < offset:
            time.sleep(0.05)
    return time.monotonic()


def _gap_row(figure: str, gap: float, baseline: float, change_s: float) -> dict:
    return {
        "figure": figure,
        "gap_s": gap,
        "change_s": change_s,
        "election_timeout_max_s": ELECTION_TIMEOUT_MAX_S,
        "ratio_to_election_max": gap / ELECTION_TIMEOUT_MAX_S,
        "ratio_to_baseline": gap / baseline if baseline else None,
    }


if __name__ == "__main__":
    print_table("bench membership", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
