"""Real processes: a node leaves the cluster and its partition replicas move to another
node, driven by the controller, under a steady producer; nothing acknowledged is lost and
the moved partitions survive losing one of their original replicas afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading

import pytest

from quorumlog import Client, NotLeaderError, QuorumLogError
from quorumlog.bench.partitions import groups_settled
from quorumlog.cli.localcluster import QUORUMLOG
from tests.process.test_topics import wait_until

TOPIC = "moving"
PARTITIONS = 4


class TopicProducer(threading.Thread):
    """Appends one record at a time to each partition in turn, with acks=quorum."""

    def __init__(self, brokers: str, topic: str = TOPIC, partitions: int = PARTITIONS):
        super().__init__(daemon=True)
        self.brokers = brokers
        self.topic = topic
        self.partitions = partitions
        self.acked: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        with Client(self.brokers, timeout=20) as c:
            while not self.stop.is_set():
                partition = i % self.partitions
                value = b"record-%d" % i
                with contextlib.suppress(QuorumLogError):  # not acknowledged: not checked
                    offset = c.append([value], topic=self.topic, partition=partition)
                    self.acked[(partition, offset)] = value
                i += 1


def ql(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], capture_output=True, timeout=90)


def check_no_loss(
    client: Client,
    acked: dict[tuple[int, int], bytes],
    topic: str = TOPIC,
    partitions: int = PARTITIONS,
) -> None:
    found = {}
    for p in range(partitions):
        for r in client.read(0, 100_000, topic=topic, partition=p):
            found[(p, r.offset)] = r.value
    lost = [k for k, v in acked.items() if found.get(k) != v]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, first at {lost[:3]}"
    assert len(set(found.values())) == len(found), "a value was written twice"


def four_nodes_and_a_topic(cluster) -> tuple[str, dict[int, list[int]]]:
    """Node 4 added to the three, then TOPIC created: (brokers, partition -> replicas)."""
    cluster.wait_for_leader()
    address = cluster.start_joiner(4)
    brokers = f"{cluster.brokers},{address}"
    out = ql("members", "-b", brokers, "add", "4", address, "--wait", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    with Client(brokers, timeout=30) as c:
        c.create_topic(TOPIC, partitions=PARTITIONS, replicas=3)
        return brokers, {r["partition"]: r["replicas"] for r in c.describe_topic(TOPIC)}


def test_a_removed_nodes_replicas_move_under_load_and_lose_nothing(cluster):
    brokers, before = four_nodes_and_a_topic(cluster)
    leaving = next(n for n in (1, 2, 3) if any(n in r for r in before.values()))
    producer = TopicProducer(brokers)
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) >= 50, 30, "appends flow")
        out = ql("members", "-b", brokers, "remove", str(leaving), "--timeout", "60")
        assert out.returncode == 0, out.stderr
        with Client(brokers, timeout=30) as c:

            def moved() -> list[dict] | None:
                rows = c.describe_topic(TOPIC)
                done = all(
                    leaving not in r["replicas"]
                    and len(r["replicas"]) == 3
                    and r["leader_id"] in r["replicas"]
                    for r in rows
                )
                return rows if done else None

            after = {r["partition"]: r["replicas"] for r in wait_until(moved, 60, "moved")}
        remaining = {1, 2, 3, 4} - {leaving}
        newcomer = {}
        for p, replicas in before.items():
            if leaving in replicas:
                (newcomer[p],) = remaining - set(replicas)
            expected = [newcomer[p] if n == leaving else n for n in replicas]
            # In its place (tests/controller/test_placement.py); the rebalancer may then
            # make the newcomer a preferred leader, as it holds fewer of them.
            assert sorted(after[p]) == sorted(expected), "the departed replica is replaced"
        wait_until(lambda: groups_settled(cluster, TOPIC, after), 60, "each group has its new set")
        acked_during_move = len(producer.acked)
        wait_until(lambda: len(producer.acked) > acked_during_move + 50, 30, "appends go on")
    finally:
        producer.stop.set()
        producer.join(timeout=30)
    # The departed node keeps its old replicas, idle, their ends frozen: it must not answer
    # for them, but send readers on to the partitions' leaders.
    with Client(cluster.address(leaving), timeout=5, direct=True) as c:
        for p, replicas in before.items():
            if leaving in replicas:
                with pytest.raises(NotLeaderError):
                    c.read(0, topic=TOPIC, partition=p)
        with pytest.raises(NotLeaderError, match="not a member"):
            c.describe_group("anyone")  # nor does it coordinate consumer groups
    cluster.kill(leaving)
    with Client(brokers, timeout=30) as c:
        check_no_loss(c, producer.acked)
    # The new replicas hold the data: a moved partition still commits without one of its
    # original replicas (a majority of three needs the newcomer).
    survivor = next(n for n in remaining if any(n != m for m in newcomer.values()))
    cluster.kill(survivor)
    with Client(brokers, timeout=30) as c:
        for p in range(PARTITIONS):
            c.append([b"after-%d" % p], topic=TOPIC, partition=p)
        check_no_loss(c, producer.acked)


def test_a_removed_nodes_only_replicas_move_before_it_goes(cluster):
    """Replication factor 1: a removed node's partitions have no other copy. Its groups
    serve on until a live node has copied them, and their records survive the node."""
    cluster.wait_for_leader()
    with Client(cluster.brokers, timeout=30) as c:
        c.create_topic("single", partitions=3, replicas=1)
        before = {r["partition"]: r["replicas"] for r in c.describe_topic("single")}
        acked = {}
        for p in range(3):
            for i in range(20):
                value = b"p%d-%d" % (p, i)
                acked[(p, c.append([value], topic="single", partition=p))] = value
    (leaving,) = before[0]
    out = ql("members", "-b", cluster.brokers, "remove", str(leaving), "--timeout", "60")
    assert out.returncode == 0, out.stderr
    brokers = ",".join(cluster.address(n) for n in cluster.procs if n != leaving)
    with Client(brokers, timeout=30) as c:

        def moved() -> dict[int, list[int]] | None:
            after = {r["partition"]: r["replicas"] for r in c.describe_topic("single")}
            return after if all(leaving not in r for r in after.values()) else None

        after = wait_until(moved, 60, "the partitions on the removed node move")
    assert all(after[p] == before[p] for p in after if leaving not in before[p]), "others stay"
    wait_until(lambda: groups_settled(cluster, "single", after), 60, "each group on its node")
    cluster.kill(leaving)
    with Client(brokers, timeout=30) as c:
        check_no_loss(c, acked, topic="single", partitions=3)
        c.append([b"after"], topic="single", partition=0)


def test_a_demoted_nodes_moved_replicas_are_tombstoned_once_their_groups_leave_it(cluster):
    """A demoted (log-only) node still applies the controller's log, so it learns where its
    replicas went: each is deleted, its term and vote kept, once its group no longer
    counts it; a restart keeps them deleted."""
    brokers, before = four_nodes_and_a_topic(cluster)
    with Client(brokers, timeout=30) as c:
        acked = {
            (p, c.append([b"p%d" % p], topic=TOPIC, partition=p)): b"p%d" % p for p in range(4)
        }
    on_4 = [p for p, replicas in before.items() if 4 in replicas]
    assert on_4, before
    folder = os.path.join(cluster.data_dir(4), "topics", TOPIC)
    out = ql("members", "-b", brokers, "demote", "4", "--timeout", "60")
    assert out.returncode == 0, out.stderr

    def buried() -> bool:
        return all(
            os.path.exists(os.path.join(folder, str(p), "tombstone"))
            and not os.path.exists(os.path.join(folder, str(p), "log"))
            for p in on_4
        )

    wait_until(buried, 60, "node 4's moved replicas are tombstoned")
    assert all(os.path.exists(os.path.join(folder, str(p), "consensus.meta")) for p in on_4)
    cluster.kill(4, signal.SIGTERM)
    cluster.start(4, join=True)
    wait_until(lambda: cluster.node_status(4), 20, "node 4 answers again")
    assert buried(), "a restart does not bring them back"
    with Client(cluster.brokers, timeout=30) as c:
        check_no_loss(c, acked)
