"""`quorumlog bench partitions`: what many Raft groups per node give and cost.

- aggregate throughput: 64-record appends of 1 KiB through one public `AsyncClient`, 64
  appends in flight in total, spread over 1, 3, 6 and 12 partitions (one topic each, on
  one cluster), rounds alternating between the cases; ratio to one partition;
- creating a topic of 100 partitions: seconds until every partition has a leader;
- idle cost: a topic of many partitions (1,000 x 3 replicas; 100 with --quick) and no
  traffic: CPU and RSS per node, heartbeat messages per node pair per second;
- controller failover: SIGKILL the controller's leader; seconds until a topic can be
  created, and until `describe` names every partition's true leader (baseline: the
  election timeout's maximum);
- replica moves: 4 nodes, a topic of 3 partitions x 3 replicas filled with data; `members
  remove` of the node holding most replicas; seconds until every moved group has its new
  set (baseline: appending that data in the first place).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import trio

from quorumlog.bench.report import median, print_table
from quorumlog.bench.resources import cpu_s
from quorumlog.bench.workload import IncompressibleRecords, running_cluster, statuses_of
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster
from quorumlog.client.aclient import AsyncClient
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError
from quorumlog.raft.settings import RaftSettings
from quorumlog.transport.messages import PartitionsRequest

RECORD_BYTES = 1024
RECORDS_PER_APPEND = 64
WINDOW = 64
PARTITION_COUNTS = (1, 3, 6, 12)


async def _aggregate(brokers: str, topic: str, partitions: int, seconds: float) -> float:
    """Records/s acknowledged (acks=quorum), WINDOW appends in flight over `partitions`."""
    source = IncompressibleRecords(RECORD_BYTES, seed=partitions)
    chunks = [source.take(RECORDS_PER_APPEND) for _ in range(WINDOW)]
    done = 0
    async with AsyncClient(brokers, timeout=30) as client:
        for p in range(partitions):  # find every leader before timing
            await client.append(chunks[p], topic=topic, partition=p)
        deadline = trio.current_time() + seconds

        async def worker(i: int) -> None:
            nonlocal done
            while trio.current_time() < deadline:
                await client.append(chunks[i], topic=topic, partition=i % partitions)
                done += RECORDS_PER_APPEND

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            for i in range(WINDOW):
                nursery.start_soon(worker, i)
        return done / (trio.current_time() - started)


def _throughput_rows(cluster: ProcessCluster, rounds: int, seconds: float) -> list[dict]:
    with cluster.client(timeout=60) as c:
        for n in PARTITION_COUNTS:
            c.create_topic(f"p{n}", partitions=n, replicas=3)
    samples: dict[int, list[float]] = {n: [] for n in PARTITION_COUNTS}
    for _ in range(rounds):
        for n in PARTITION_COUNTS:
            samples[n].append(trio.run(_aggregate, cluster.brokers, f"p{n}", n, seconds))
    one = median(samples[1])
    rows = []
    for n in PARTITION_COUNTS:
        rate = median(samples[n])
        rows.append(
            {
                "figure": f"aggregate acks=quorum, 64 x 1 KiB appends, w64, {n} partitions",
                "records_s": round(rate),
                "mb_s": round(rate * RECORD_BYTES / 1e6, 1),
                "x_one_partition": round(rate / one, 2),
                "runs": [round(r) for r in samples[n]],
            }
        )
    return rows


def _create_row(cluster: ProcessCluster, partitions: int) -> dict:
    with cluster.client(timeout=120) as c:
        started = time.monotonic()
        c.create_topic(f"created{partitions}", partitions=partitions, replicas=3)
        elapsed = time.monotonic() - started
    return {"figure": f"create a topic of {partitions} partitions, until all lead", "s": elapsed}


def _idle_rows(cluster: ProcessCluster, partitions: int, seconds: float) -> list[dict]:
    with cluster.client(timeout=300) as c:
        started = time.monotonic()
        c.create_topic("idle", partitions=partitions, replicas=3)
        created_s = time.monotonic() - started
    time.sleep(2.0)  # elections and first heartbeats settle
    pids = {i: p.pid for i, p in cluster.procs.items()}
    before_cpu = {i: cpu_s(pid) for i, pid in pids.items()}
    before_hb = {i: _status(cluster, i)["heartbeats_sent"] for i in pids}
    time.sleep(seconds)
    cpu = {i: (cpu_s(pid) - before_cpu[i]) / seconds for i, pid in pids.items()}
    beats = {i: (_status(cluster, i)["heartbeats_sent"] - before_hb[i]) / seconds for i in pids}
    peers = len(pids) - 1
    rss = cluster.peak_rss_mb()
    interval = RaftSettings().heartbeat_interval_s
    return [
        {"figure": f"create {partitions} partitions x 3 replicas (idle test)", "s": created_s},
        {
            "figure": f"idle, {partitions} partitions x 3: CPU per node (cores)",
            "max": round(max(cpu.values()), 3),
            "per_node": {str(k): round(v, 3) for k, v in cpu.items()},
            "target": 0.05,
        },
        {
            "figure": f"idle, {partitions} partitions x 3: peak RSS per node (MB)",
            "max": round(max(rss.values()), 1),
            "target": 300,
        },
        {
            "figure": f"idle, {partitions} partitions x 3: heartbeats per node pair per s",
            "max": round(max(b / peers for b in beats.values()), 1),
            "target": round(1 / interval, 1),
        },
    ]


def _status(cluster: ProcessCluster, node_id: int) -> dict:
    status = cluster.node_status(node_id)
    assert status is not None, f"node {node_id} did not answer"
    return status


def _controller_failover_rows(cluster: ProcessCluster, kills: int) -> list[dict]:
    create_s, exact_s = [], []
    for k in range(kills):
        controller = _status(cluster, min(cluster.procs))["controller_id"]
        survivors = [i for i in cluster.procs if i != controller]
        killed_at = time.monotonic()
        cluster.kill(controller)
        with Client(",".join(cluster.address(i) for i in survivors), timeout=30) as c:
            c.create_topic(f"after-kill-{k}", partitions=3, replicas=2)
            create_s.append(time.monotonic() - killed_at)
            while not _describe_exact(cluster, c, "p3"):
                time.sleep(0.05)
            exact_s.append(time.monotonic() - killed_at)
        cluster.start(controller)
        time.sleep(3.0)  # it catches up before the next kill
    baseline = RaftSettings().election_timeout_max_s
    return [
        {
            "figure": "controller failover: kill its leader -> topic created",
            "median_s": round(statistics.median(create_s), 3),
            "max_s": round(max(create_s), 3),
            "x_election_timeout_max": round(statistics.median(create_s) / baseline, 2),
            "target_x": 2.0,
        },
        {
            "figure": "controller failover: kill its leader -> describe exact",
            "median_s": round(statistics.median(exact_s), 3),
            "max_s": round(max(exact_s), 3),
            "x_election_timeout_max": round(statistics.median(exact_s) / baseline, 2),
            "target_x": 2.0,
        },
    ]


def _describe_exact(cluster: ProcessCluster, client: Client, topic: str) -> bool:
    try:
        rows = client.describe_topic(topic)
    except QuorumLogError:
        return False
    for row in rows:
        if row["leader_id"] not in cluster.procs:
            return False
        try:
            with Client(cluster.address(row["leader_id"]), timeout=2, direct=True) as direct:
                direct.end_offset(linearizable=True, topic=topic, partition=row["partition"])
        except QuorumLogError:
            return False
    return True


def groups_settled(cluster: ProcessCluster, topic: str, replicas: dict[int, list[int]]) -> bool:
    """Whether each partition's leader has exactly `replicas` as its committed voters (the
    group finished its change; the controller's state says where it is going, not where it
    is)."""
    settled = set()
    for node_id in cluster.procs:
        found = trio.run(statuses_of, cluster.address(node_id), [PartitionsRequest(topic)])
        for p, status in (found or [{}])[0].items():
            config = status["config"]
            if (
                status["role"] == "leader"
                and config["joint"] is None
                and not config["learners"]
                and sorted(config["voters"]) == sorted(replicas[int(p)])
                and status["commit_offset"] == status["dirty_offset"]
            ):
                settled.add(int(p))
    return settled == set(replicas)


def _move_row(cluster: ProcessCluster, mb: int) -> dict:
    """A node with replicas leaves: how long until its partitions are whole elsewhere."""
    address = cluster.start_joiner(4)
    brokers = f"{cluster.brokers},{address}"
    members = [*QUORUMLOG, "members", "-b", brokers]
    subprocess.run([*members, "add", "4", address, "--wait"], check=True, capture_output=True)
    records = IncompressibleRecords(RECORD_BYTES)
    with Client(brokers, timeout=60) as c:
        c.create_topic("moving", partitions=3, replicas=3)
        started = time.monotonic()
        for p in range(3):
            for _ in range(mb * 1024 * 1024 // (RECORD_BYTES * 256)):
                c.append(records.take(256), topic="moving", partition=p)
        fill_s = time.monotonic() - started
        before = {r["partition"]: r["replicas"] for r in c.describe_topic("moving")}
        leaving = max((1, 2, 3), key=lambda n: sum(n in r for r in before.values()))
        moved = sum(leaving in r for r in before.values())
        started = time.monotonic()
        subprocess.run([*members, "remove", str(leaving)], check=True, capture_output=True)
        while True:
            after = {r["partition"]: r["replicas"] for r in c.describe_topic("moving")}
            done = all(leaving not in r for r in after.values())
            if done and groups_settled(cluster, "moving", after):
                break
            time.sleep(0.05)
        move_s = time.monotonic() - started
    return {
        "figure": f"members remove -> {moved} partitions of {mb} MB on their new replicas",
        "s": round(move_s, 2),
        "mb_s": round(moved * mb / move_s, 2),
        "append_same_mb_s": round(3 * mb / fill_s, 2),
    }


@dataclass(frozen=True)
class Sizes:
    rounds: int
    seconds: float
    created: int  # partitions of the topic whose creation is timed
    kills: int
    idle_partitions: int
    idle_s: float
    move_mb: int  # per partition


FULL = Sizes(5, 4.0, created=100, kills=5, idle_partitions=1000, idle_s=20.0, move_mb=200)
QUICK = Sizes(2, 2.0, created=100, kills=2, idle_partitions=100, idle_s=5.0, move_mb=50)
TINY = Sizes(1, 0.5, created=10, kills=1, idle_partitions=20, idle_s=1.0, move_mb=1)


def run(quick: bool = False, tiny: bool = False) -> list[dict]:
    sizes = TINY if tiny else QUICK if quick else FULL
    rows: list[dict] = []
    with running_cluster("partitions") as cluster:
        rows += _throughput_rows(cluster, rounds=sizes.rounds, seconds=sizes.seconds)
        rows.append(_create_row(cluster, sizes.created))
        rows += _controller_failover_rows(cluster, kills=sizes.kills)
    with running_cluster("partitions-idle") as cluster:
        rows += _idle_rows(cluster, partitions=sizes.idle_partitions, seconds=sizes.idle_s)
    with running_cluster("partitions-move") as cluster:
        rows.append(_move_row(cluster, sizes.move_mb))
    return rows


if __name__ == "__main__":
    print_table("bench partitions", run(quick="--quick" in sys.argv, tiny="--tiny" in sys.argv))
