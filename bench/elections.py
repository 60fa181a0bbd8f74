"""`quorumlog bench elections`: with many partitions, how long until every partition has a
leader again after one node is lost, two are restarted, or the whole cluster is.

For each size (200, 1,000 and 2,000 partitions x 3 replicas on 3 nodes; --quick: 200 and
1,000), a fresh cluster and one topic of that size; then, in turn:
- one node lost: SIGKILL the node that leads most and leave it down;
- two restarted: SIGKILL two nodes and start them again;
- all restarted: SIGKILL every node and start them all again (`--id --data --listen`, as
  after a power loss).
Each figure is the seconds from the kill until every partition has a leader: each running
node is asked for the state of its replicas every 0.2 s, and a partition counts once a
replica leads in the highest term any of them knows. Beside it, each node's CPU (cores)
over that time, and the highest term reached. Targets (issue 30): one node lost 5 s; all
restarted 30 s for 1,000 partitions (aim 10 s), 60 s for 2,000.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import trio

from quorumlog.bench.report import print_table
from quorumlog.bench.resources import cpu_s
from quorumlog.bench.workload import running_cluster, statuses_of
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.transport.messages import PartitionsRequest

TOPIC = "many"
POLL_S = 0.2
TARGETS_S = {"one node lost": 5.0, "two restarted": 30.0, "all restarted": 30.0}


@dataclass(frozen=True)
class Led:
    leaders: int  # partitions with a leader of their highest known term
    term_max: int


def leaders(cluster: ProcessCluster, topic: str, partitions: int) -> Led:
    """How many of the topic's partitions lead, as the running nodes report them."""
    best: dict[int, tuple[int, bool]] = {}  # partition -> (highest term, led in it)
    for node_id in list(cluster.procs):
        found = trio.run(statuses_of, cluster.address(node_id), [PartitionsRequest(topic)])
        for p, status in (found or [{}])[0].items():
            term, leads = status["term"], status["role"] == "leader"
            seen = best.get(int(p), (-1, False))
            if (term, leads) > seen:
                best[int(p)] = (term, leads)
    led = sum(leads for _, leads in best.values())
    return Led(led if len(best) == partitions else 0, max((t for t, _ in best.values()), default=0))


def wait_all_lead(cluster: ProcessCluster, partitions: int, timeout_s: float) -> tuple[float, Led]:
    """Seconds until every partition leads (or `timeout_s`, then an AssertionError)."""
    started = time.monotonic()
    while True:
        led = leaders(cluster, TOPIC, partitions)
        elapsed = time.monotonic() - started
        if led.leaders == partitions:
            return elapsed, led
        if elapsed > timeout_s:
            raise AssertionError(
                f"{partitions - led.leaders} of {partitions} partitions without a leader "
                f"{timeout_s} s on (terms up to {led.term_max})"
            )
        time.sleep(POLL_S)


def lose_and_recover(
    cluster: ProcessCluster, event: str, partitions: int, timeout_s: float
) -> dict:
    """Cause `event`, time until every partition leads again; the row of the figure."""
    if event == "one node lost":
        counts = {i: _led_by(cluster, i) for i in cluster.procs}
        cluster.kill(max(counts, key=counts.__getitem__))
    else:
        stopped = sorted(cluster.procs)[-2:] if event == "two restarted" else list(cluster.procs)
        for node_id in stopped:
            cluster.kill(node_id)
        for node_id in stopped:
            cluster.start(node_id)
    pids = {i: p.pid for i, p in cluster.procs.items()}
    before = {i: cpu_s(pid) for i, pid in pids.items()}
    elapsed, led = wait_all_lead(cluster, partitions, timeout_s)
    return {
        "figure": f"{partitions} partitions x 3, {event}: s until every partition leads",
        "s": round(elapsed, 2),
        "target_s": TARGETS_S[event] * (2 if partitions > 1000 else 1),
        "term_max": led.term_max,
        "cpu_cores": {
            str(i): round((cpu_s(pid) - before[i]) / elapsed, 2) for i, pid in pids.items()
        },
    }


def _led_by(cluster: ProcessCluster, node_id: int) -> int:
    found = trio.run(statuses_of, cluster.address(node_id), [PartitionsRequest(TOPIC)])
    return sum(s["role"] == "leader" for s in (found or [{}])[0].values())


def _restart_missing(cluster: ProcessCluster) -> None:
    for node_id in cluster.ids:
        if node_id not in cluster.procs:
            cluster.start(node_id)


@dataclass(frozen=True)
class Sizes:
    partitions: tuple[int, ...]
    timeout_s: float


FULL = Sizes((200, 1000, 2000), timeout_s=180.0)
QUICK = Sizes((200, 1000), timeout_s=120.0)
TINY = Sizes((20,), timeout_s=60.0)


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    rows = []
    for partitions in sizes.partitions:
        with running_cluster(f"elections-{partitions}") as cluster:
            started = time.monotonic()
            with cluster.client(timeout=600) as c:
                c.create_topic(TOPIC, partitions=partitions, replicas=3)
            rows.append(
                {
                    "figure": f"create {partitions} partitions x 3: s until every one leads",
                    "s": round(time.monotonic() - started, 2),
                }
            )
            for event in ("one node lost", "two restarted", "all restarted"):
                time.sleep(3.0)  # the groups settle and go quiet
                rows.append(lose_and_recover(cluster, event, partitions, sizes.timeout_s))
                _restart_missing(cluster)
                wait_all_lead(cluster, partitions, sizes.timeout_s)
    return rows


if __name__ == "__main__":
    print_table("bench elections", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
