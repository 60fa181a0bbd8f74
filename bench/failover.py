"""`quorumlog bench failover`: leader kills under a stream of acks=quorum appends.

A producer thread appends small records (acks quorum) in a loop through the blocking
`Client`, the way an application would: it finds the leader itself, follows not_leader
hints and backs off. The harness kills the leader with SIGKILL and the producer measures
the gap: from the kill to the first acknowledged append that was sent after the kill (an
append answered by the old leader just before it died does not count). Then the killed node
is restarted, the producer pauses until every node holds and commits the same log, and
resumes; repeated `kills` times.

Beside the producer, the harness itself watches the surviving nodes (a status request to
each every 10 ms) to split the gap: `leader_s`, from the kill until a survivor says it is
the leader, and `direct_ack_s`, until that leader acknowledged a quorum append sent to it
directly on a fresh connection. `gap_s - direct_ack_s` is what the client's rediscovery
(hints, backoff) adds.

Rows: one per kill, then the summary: median, p90 and max of the gaps beside the maximum
election timeout (0.6 s by default; `ratio_median_to_election_max`), and the medians of
`leader_s` and `direct_ack_s`. Then as many planned stops (SIGTERM: the leader hands its
groups over before it exits, actors/node/shutdown.py), one row each and their summary beside
the kills' median.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass

import trio

from quorumlog.bench.report import median, print_table
from quorumlog.bench.resources import peak_rss_row
from quorumlog.bench.workload import (
    make_batches,
    percentile,
    running_cluster,
    status_of,
)
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError
from quorumlog.transport.errors import TransportError
from quorumlog.transport.messages import Acks, AppendReply, AppendRequest
from quorumlog.transport.tcp import open_connection

ELECTION_TIMEOUT_MAX_S = 0.6  # RaftSettings' default; the cluster runs with defaults
VALUE = b"x" * 100


@dataclass(frozen=True)
class Sizes:
    kills: int
    steady_s: float  # acknowledged appends before each kill
    gap_timeout_s: float


FULL = Sizes(kills=20, steady_s=0.5, gap_timeout_s=30.0)
QUICK = Sizes(kills=5, steady_s=0.3, gap_timeout_s=30.0)
TINY = Sizes(kills=1, steady_s=0.1, gap_timeout_s=30.0)


class Producer(threading.Thread):
    """Appends in a loop; keeps (sent, acknowledged) times of every acknowledged append."""

    def __init__(self, brokers: str):
        super().__init__(daemon=True, name="failover-producer")
        self.brokers = brokers
        self.acks: list[tuple[float, float]] = []
        self.failures = 0
        self.stop = threading.Event()
        self.running = threading.Event()  # cleared: pause between appends
        self.idle = threading.Event()  # set while paused
        self.running.set()
        self.lock = threading.Lock()

    def run(self) -> None:
        with Client(self.brokers, timeout=10.0) as client:
            while not self.stop.is_set():
                if not self.running.is_set():
                    self.idle.set()
                    self.running.wait(0.05)
                    continue
                self.idle.clear()
                sent = time.monotonic()
                try:
                    client.append([VALUE], acks="quorum")
                except QuorumLogError:
                    self.failures += 1
                    continue
                with self.lock:
                    self.acks.append((sent, time.monotonic()))

    def pause(self) -> None:
        self.running.clear()
        self.idle.wait(15)

    def resume(self) -> None:
        self.idle.clear()
        self.running.set()

    def first_ack_sent_after(self, moment: float) -> float | None:
        with self.lock:
            later = [acked for sent, acked in self.acks if sent >= moment]
        return min(later) if later else None

    def acked_since(self, moment: float) -> int:
        with self.lock:
            return sum(1 for sent, _ in self.acks if sent >= moment)


async def _watch_survivors(
    addresses: list[str], killed_at: float, timeout_s: float
) -> tuple[float, float]:
    """(seconds until a survivor says it leads, until it acknowledged a direct append)."""
    probe = make_batches(1, count=1)[0]
    with trio.fail_after(timeout_s):
        while True:
            for address in addresses:
                status = await status_of(address)
                if not status or status["role"] != "leader":
                    continue
                leader_s = time.monotonic() - killed_at
                try:
                    async with open_connection(address) as conn:
                        reply = await conn.request(AppendRequest(probe, Acks.QUORUM, -1, -1))
                except (TransportError, OSError):
                    continue
                if isinstance(reply, AppendReply):
                    return leader_s, time.monotonic() - killed_at
            await trio.sleep(0.01)


def _one_kill(
    cluster: ProcessCluster, producer: Producer, sizes: Sizes, sig: int = signal.SIGKILL
) -> dict:
    leader = cluster.wait_for_leader()
    steady_from = time.monotonic()
    deadline = steady_from + sizes.gap_timeout_s
    while time.monotonic() - steady_from < sizes.steady_s or producer.acked_since(steady_from) == 0:
        if time.monotonic() > deadline:
            raise AssertionError("the producer made no progress before the kill")
        time.sleep(0.02)
    survivors = [cluster.address(i) for i in cluster.procs if i != leader]
    killed_at = time.monotonic()
    cluster.kill(leader, sig)
    leader_s, direct_ack_s = trio.run(_watch_survivors, survivors, killed_at, sizes.gap_timeout_s)
    while (acked := producer.first_ack_sent_after(killed_at)) is None:
        if time.monotonic() - killed_at > sizes.gap_timeout_s:
            raise AssertionError(f"no append acknowledged {sizes.gap_timeout_s} s after the kill")
        time.sleep(0.005)
    gap = acked - killed_at
    new_leader = cluster.wait_for_leader()
    cluster.start(leader)
    producer.pause()
    try:
        cluster.wait_converged(timeout_s=60)
    finally:
        producer.resume()
    return {
        "killed": leader,
        "new_leader": new_leader,
        "gap_s": gap,
        "leader_s": leader_s,
        "direct_ack_s": direct_ack_s,
    }


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    kills: list[dict] = []
    stops: list[dict] = []  # planned: the leader hands its groups over first
    with running_cluster("failover") as cluster:
        producer = Producer(cluster.brokers)
        producer.start()
        try:
            for i in range(sizes.kills):
                kills.append({"figure": f"kill {i + 1}", **_one_kill(cluster, producer, sizes)})
            for i in range(sizes.kills):
                stop = _one_kill(cluster, producer, sizes, signal.SIGTERM)
                stops.append({"figure": f"stop {i + 1} (SIGTERM)", **stop})
        finally:
            producer.stop.set()
            producer.resume()
            producer.join(timeout=15)
        rss = peak_rss_row(cluster, "peak RSS per node (restarted nodes: since restart)")
    gaps = sorted(k["gap_s"] for k in kills)
    summary = {
        "figure": "failover gap (kill -9 leader -> first ack)",
        "kills": len(gaps),
        "median_s": median(gaps),
        "p90_s": percentile(gaps, 90),
        "max_s": gaps[-1],
        "election_timeout_max_s": ELECTION_TIMEOUT_MAX_S,
        "ratio_median_to_election_max": median(gaps) / ELECTION_TIMEOUT_MAX_S,
        "ratio_max_to_election_max": gaps[-1] / ELECTION_TIMEOUT_MAX_S,
        "median_leader_s": median(k["leader_s"] for k in kills),
        "median_direct_ack_s": median(k["direct_ack_s"] for k in kills),
        "failed_appends": producer.failures,
        "acked_appends": len(producer.acks),
    }
    stop_gaps = sorted(k["gap_s"] for k in stops)
    planned = {
        "figure": "planned stop gap (SIGTERM leader -> first ack)",
        "stops": len(stop_gaps),
        "median_s": median(stop_gaps),
        "max_s": stop_gaps[-1],
        "ratio_median_to_kill": median(stop_gaps) / median(gaps),
    }
    return [*kills, summary, *stops, planned, rss]


if __name__ == "__main__":
    start = time.perf_counter()
    print_table("bench failover", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
    print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
