"""Real processes: topics and partitions, each its own Raft group (docs/cli.md and docs/operating.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from quorumlog import Client, NotLeaderError, Record, UnknownTopicError
from quorumlog.bench.workload import IncompressibleRecords
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster
from quorumlog.client.partitioner import partition_of_key


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def leads(cluster: ProcessCluster, node_id: int, topic: str, partition: int) -> bool:
    """Whether `node_id` leads the partition now (it confirms with a quorum)."""
    try:
        with Client(cluster.address(node_id), timeout=2, direct=True) as c:
            c.end_offset(linearizable=True, topic=topic, partition=partition)
        return True
    except Exception:
        return False


# Marked so: each adds a topic of its own and compares with what it found first (the
# topics, default's end), and stops no node. One cluster serves both.
@pytest.mark.shares_cluster
def test_keyed_appends_read_back_per_partition_and_a_deleted_topic_is_gone(cluster):
    with cluster.client(timeout=20) as c:
        before, default_end = c.topics(), c.end_offset()
        assert before["default"] == 1 and "events" not in before
        c.create_topic("events", partitions=4, replicas=3)
        assert c.topics() == {**before, "events": 4}
        keys = [b"user-%d" % i for i in range(40)]
        for i, key in enumerate(keys):
            result = c.append([Record(b"v%d" % i, key=key)], topic="events", details=True)
            assert result.partition == partition_of_key(key, 4), "Kafka's partitioner"
        seen = {}
        for p in range(4):
            for r in c.read(0, 1000, topic="events", partition=p):
                assert (r.topic, r.partition) == ("events", p)
                seen[r.key] = r.value
        assert seen == {key: b"v%d" % i for i, key in enumerate(keys)}
        rows = c.describe_topic("events")
        assert [r["partition"] for r in rows] == [0, 1, 2, 3]
        assert all(r["leader_id"] in r["replicas"] and len(r["replicas"]) == 3 for r in rows)
        assert c.end_offset() == default_end, "default is untouched"
        c.delete_topic("events")
        assert c.topics() == before
        with pytest.raises(UnknownTopicError):
            c.append([b"x"], topic="events", partition=0)
    for node_id in cluster.ids:
        wait_until(
            lambda n=node_id: (
                not os.path.exists(os.path.join(cluster.data_dir(n), "topics/events"))
            ),
            10,
            f"node {node_id} drops the deleted topic's files",
        )


@pytest.mark.shares_cluster
def test_bad_topic_calls_are_refused_in_one_line_and_the_cluster_keeps_serving(cluster):
    cluster.wait_for_leader()
    base = [*QUORUMLOG, "topic", "-b", cluster.brokers]
    for args, why in (
        (["create", "t", "--partitions", "0"], "1-10000 partitions"),
        (["create", "t", "--partitions", "100000"], "1-10000 partitions"),
        (["create", "t", "--replicas", "4"], "4 replicas asked for but the cluster has 3"),
        (["create", "bad/name"], "bad topic name"),
        (["delete", "default"], "cannot be deleted"),
        (["describe", "nope"], "unknown topic 'nope'"),
    ):
        done = subprocess.run(base + args, capture_output=True, text=True, timeout=30)
        assert done.returncode == 1, (args, done.stderr)
        assert why in done.stderr and done.stderr.count("\n") == 1, done.stderr
    with cluster.client() as c:
        c.create_topic("t", partitions=2)
        c.append([b"fine"], topic="t", partition=1)
        assert [r.value for r in c.read(0, 10, topic="t", partition=1)] == [b"fine"]
        with pytest.raises(UnknownTopicError, match="partition 2"):
            c.read(0, 10, topic="t", partition=2)


def test_retention_is_per_topic(tmp_path):
    config = tmp_path / "settings.toml"
    config.write_text("[log]\nsegment_bytes_max = 262144\n")  # no retention by default
    (tmp_path / "c").mkdir()
    cluster = ProcessCluster(str(tmp_path / "c"), config_file=str(config))
    cluster.start_all()
    records = IncompressibleRecords(16 * 1024)
    try:
        with cluster.client(timeout=30) as c:
            c.create_topic("short", partitions=1, retention_bytes=512 * 1024)
            c.create_topic("long", partitions=1)
            for _ in range(8):  # 8 MB each: many segments
                chunk = records.take(64)
                c.append(chunk, topic="short", partition=0)
                c.append(chunk, topic="long", partition=0)
            wait_until(
                lambda: c.start_offset(topic="short", partition=0) > 0,
                30,
                "the short topic drops its old segments",
            )
            assert c.start_offset(topic="long", partition=0) == 0, "the other keeps them"
            assert c.start_offset() == 0, "and so does default"
            assert len(c.read(0, 10, topic="long", partition=0)) == 10
    finally:
        cluster.stop_all()


def test_a_restarted_node_gets_its_preferred_leaderships_back(cluster):
    with cluster.client(timeout=20) as c:
        c.create_topic("spread", partitions=6, replicas=3)
        rows = c.describe_topic("spread")
    preferred = {r["partition"]: r["replicas"][0] for r in rows}
    victim = preferred[0]
    cluster.kill(victim)
    for p, node_id in preferred.items():
        if node_id == victim:
            wait_until(
                lambda p=p: any(leads(cluster, n, "spread", p) for n in cluster.procs),
                20,
                f"partition {p} led by a survivor",
            )
    cluster.start(victim)
    for p, node_id in preferred.items():
        wait_until(
            lambda p=p, n=node_id: leads(cluster, n, "spread", p),
            60,
            f"partition {p} back on its preferred leader {node_id}",
        )


def test_kudu_1353_a_new_controller_never_answers_from_stale_leaders(tmp_path):
    """KUDU-1353: a partition's leadership moves, then the controller's leader dies before
    any report of the move reached it. Calls through the new controller's node still end
    in time and succeed, and `describe` on the survivors names the true leaders."""
    cluster = ProcessCluster(str(tmp_path), size=5)
    cluster.start_all()
    try:
        with cluster.client(timeout=20) as c:
            c.create_topic("t", partitions=5, replicas=5)
            status = c.status()
        controller = status[0]["controller_id"]
        rows = {r["partition"]: r for r in Client(cluster.brokers).describe_topic("t")}
        moved = next(p for p, r in rows.items() if r["leader_id"] != controller)
        old_leader = rows[moved]["leader_id"]
        cluster.kill(old_leader)  # partition `moved` elects a new leader ...
        cluster.kill(controller)  # ... and the controller's leader dies at once
        survivors = sorted(cluster.procs)

        def new_controller():
            for n in survivors:
                s = cluster.node_status(n)
                if s and s.get("controller_id") in survivors:
                    return s["controller_id"]
            return None

        via = wait_until(new_controller, 20, "a new controller leader")
        with Client(cluster.address(via), timeout=10) as c:  # routed through its node
            for p in range(5):
                assert c.append([b"after"], topic="t", partition=p) >= 0
        for n in survivors:

            def exact(n=n):
                with Client(cluster.address(n), timeout=5) as c:
                    described = c.describe_topic("t")
                return all(leads(cluster, r["leader_id"], "t", r["partition"]) for r in described)

            wait_until(exact, 5, f"describe through node {n} names every true leader")
    finally:
        cluster.stop_all()


def test_a_node_whose_view_lags_never_calls_an_existing_topic_unknown(tmp_path):
    """Node 3 misses a topic's creation, then comes back alone: with no controller leader
    to ask, it cannot tell whether the topic exists, and says so (retriable) rather than
    "unknown topic", which a consumer takes as final. Once its peers are back it serves
    the topic."""
    cluster = ProcessCluster(str(tmp_path), size=3)
    cluster.start_all()
    try:
        cluster.wait_for_leader()
        cluster.kill(3)
        with Client([cluster.address(1), cluster.address(2)], timeout=20) as c:
            c.create_topic("late", partitions=1, replicas=2)
            c.append([b"made while 3 was away"], topic="late")
        cluster.kill(1, signal.SIGTERM)
        cluster.kill(2, signal.SIGTERM)
        cluster.start(3)
        wait_until(lambda: cluster.node_status(3), 10, "node 3 answers")
        with (
            Client(cluster.address(3), timeout=5, direct=True) as c,
            pytest.raises(NotLeaderError, match="cannot tell"),
        ):
            c.read(0, topic="late")
        cluster.start(1)
        cluster.start(2)
        with Client(cluster.address(3), timeout=20) as c:
            assert [r.value for r in c.read(0, topic="late")] == [b"made while 3 was away"]
            with pytest.raises(UnknownTopicError):
                c.read(0, topic="never-made")
    finally:
        cluster.stop_all()


def test_a_node_that_joins_learns_every_partitions_leader(cluster):
    """Leader updates carry changes only: a node that joins after a partition's leader
    was elected is sent the controller's whole table, so it can send a caller on to the
    leader of a partition it holds no replica of (the coordinator relies on it too)."""
    cluster.wait_for_leader()
    with Client(cluster.brokers, timeout=20) as c:
        c.create_topic("settled", partitions=3, replicas=3)
    address = cluster.start_joiner(4)
    out = subprocess.run(
        [*QUORUMLOG, "members", "-b", cluster.brokers, "add", "4", address, "--wait"],
        capture_output=True,
        timeout=90,
    )
    assert out.returncode == 0, out.stderr

    def hints() -> list[int] | None:
        found = []
        with Client(address, timeout=5, direct=True) as c:
            for p in range(3):
                try:
                    c.read(0, topic="settled", partition=p)
                    # The rebalance after the join placed a replica here: it answers
                    # itself. The others (at least one of three) must send us on.
                except NotLeaderError as exc:
                    found.append(exc.leader_id)
                except UnknownTopicError:
                    return None  # its state has not caught up yet
        return found if found and None not in found else None

    leaders = wait_until(hints, 15, "node 4 names each partition's leader")
    assert set(leaders) <= {1, 2, 3}
