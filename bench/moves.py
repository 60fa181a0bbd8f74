"""`quorumlog bench moves`: an operator moves a full partition onto a new node, under load.

Four nodes; a topic of one partition on nodes 1-3 filled with MB megabytes of records that
do not compress; a producer appends one record at a time (acks=quorum) throughout. Then
`quorumlog partition move TOPIC 0 --to 4,2,3`: node 4 joins the group as a learner, is
caught up by the leader's recovery streamer, and the group's voters change by joint
consensus (node 1 leaves). The figures: how long until the group is on its new voters (the
command line's call returned long before), the MB/s that makes, and the producer's p99
before and during the move.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from quorumlog.bench.partitions import groups_settled
from quorumlog.bench.report import print_table
from quorumlog.bench.workload import IncompressibleRecords, percentile, running_cluster
from quorumlog.cli.localcluster import QUORUMLOG
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError

TOPIC = "moving"
RECORD_BYTES = 4096
BATCH_RECORDS = 256
SIZES_MB = {"full": 200, "quick": 50, "tiny": 2}
BEFORE_S = {"full": 5.0, "quick": 3.0, "tiny": 1.0}


class Prober(threading.Thread):
    """Appends one small record at a time and keeps (when it was sent, its latency)."""

    def __init__(self, brokers: str):
        super().__init__(daemon=True)
        self.brokers = brokers
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with Client(self.brokers, timeout=20) as c:
            while not self.stop.is_set():
                sent = time.monotonic()
                try:
                    c.append([b"probe"], topic=TOPIC, partition=0)
                except QuorumLogError:
                    self.errors += 1
                    continue
                self.samples.append((sent, time.monotonic() - sent))

    def p99_ms(self, start: float, end: float) -> float | None:
        window = sorted(lat for sent, lat in self.samples if start <= sent < end)
        return None if not window else round(percentile(window, 99) * 1000, 2)


def _move_rows(size: str) -> list[dict]:
    mb = SIZES_MB[size]
    with running_cluster("moves") as cluster:
        address = cluster.start_joiner(4)
        brokers = f"{cluster.brokers},{address}"
        members = [*QUORUMLOG, "members", "-b", brokers]
        subprocess.run([*members, "add", "4", address, "--wait"], check=True, capture_output=True)
        records = IncompressibleRecords(RECORD_BYTES)
        with Client(brokers, timeout=60) as c:
            c.create_topic(TOPIC, partitions=1, replicas=3)
            c.move_partition(TOPIC, 0, [1, 2, 3])  # from a known place
            wait_settled(cluster, [1, 2, 3])
            for _ in range(mb * 1024 * 1024 // (RECORD_BYTES * BATCH_RECORDS)):
                c.append(records.take(BATCH_RECORDS), topic=TOPIC, partition=0)
        prober = Prober(brokers)
        prober.start()
        time.sleep(BEFORE_S[size])
        started = time.monotonic()
        move = [*QUORUMLOG, "partition", "-b", brokers, "move", TOPIC, "0", "--to", "4,2,3"]
        subprocess.run(move, check=True, capture_output=True)
        wait_settled(cluster, [4, 2, 3])
        moved_s = time.monotonic() - started
        prober.stop.set()
        prober.join(timeout=30)
    return [
        {
            "figure": f"partition move of {mb} MB onto a new node, appends running",
            "s": round(moved_s, 2),
            "mb_s": round(mb / moved_s, 1),
            "append_p99_ms_before": prober.p99_ms(started - BEFORE_S[size], started),
            "append_p99_ms_during": prober.p99_ms(started, started + moved_s),
            "append_errors": prober.errors,
        }
    ]


def wait_settled(cluster, replicas: list[int], timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not groups_settled(cluster, TOPIC, {0: replicas}):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{TOPIC}/0 not on {replicas} within {timeout_s} s")
        time.sleep(0.05)


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    return _move_rows("tiny" if tiny else "quick" if quick else "full")


if __name__ == "__main__":
    print_table("bench moves", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
