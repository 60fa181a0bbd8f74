"""Real processes: an operator changes running topics. Settings reach every replica (and
survive a restart), a topic grows, its replication factor goes down and up, and a
partition moves onto named nodes under a steady producer, losing nothing."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess

import pytest

from quorumlog import Client, OffsetOutOfRangeError, QuorumLogError
from quorumlog.bench.partitions import groups_settled
from quorumlog.cli.localcluster import QUORUMLOG
from quorumlog.log.batch import HEADER_BYTES, BatchError, BatchType, parse_header
from tests.process.test_replica_moves import (
    TOPIC,
    TopicProducer,
    check_no_loss,
    four_nodes_and_a_topic,
)
from tests.process.test_topics import wait_until


def ql(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], capture_output=True, timeout=90, input=stdin)


def group_file(cluster, node_id: int, topic: str, partition: int) -> dict:
    path = os.path.join(cluster.data_dir(node_id), "topics", topic, str(partition), "group")
    with open(path) as f:
        return json.load(f)


def test_topic_settings_change_on_every_replica_and_survive_a_restart(cluster):
    cluster.wait_for_leader()
    b = cluster.brokers
    assert ql("topic", "-b", b, "create", "cfg", "--partitions", "2").returncode == 0
    out = ql("topic", "-b", b, "describe", "cfg", "--json")
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout.splitlines()[0])["config"]
    assert config["retention.ms"] == -1 and config["retention.bytes"] == -1
    assert config["message.timestamp.type"] == "CreateTime"
    assert config["segment.bytes"] > 0 and config["max.message.bytes"] > 0

    out = ql(
        "topic", "-b", b, "alter", "cfg", "--set", "retention.ms=86400000",
        "--set", "max.message.bytes=2000",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = ql("topic", "-b", b, "describe", "cfg").stdout.decode()
    assert "retention.ms=86400000" in text.splitlines()
    assert "max.message.bytes=2000" in text.splitlines()
    for node_id in (1, 2, 3):  # every replica keeps the setting with its files
        wait_until(
            lambda n=node_id: all(
                group_file(cluster, n, "cfg", p)["retention_ms"] == 86400000 for p in (0, 1)
            ),
            20,
            f"node {node_id} applied the change",
        )
    # The topic's batch limit holds at once, on whichever replica leads.
    with Client(b, timeout=20) as c:
        c.append([b"small"], topic="cfg", partition=0)
        big = base64.b64encode(os.urandom(4000))  # does not compress below the limit
        out = ql("produce", "-b", b, "--topic", "cfg", "--partition", "0", stdin=big)
        assert out.returncode == 1 and b"max.message.bytes" in out.stderr, out.stderr

    # Every node restarted: the limit still holds (the replicas opened with the changed
    # settings); unsetting goes back.
    for node_id in (1, 2, 3):
        cluster.kill(node_id, signal.SIGTERM)
    for node_id in (1, 2, 3):
        cluster.start(node_id)
    cluster.wait_for_leader()
    out = ql("produce", "-b", b, "--topic", "cfg", "--partition", "0", stdin=big)
    assert out.returncode == 1 and b"max.message.bytes" in out.stderr, out.stderr
    assert ql("topic", "-b", b, "alter", "cfg", "--set", "retention.ms=").returncode == 0
    rows = json.loads(ql("topic", "-b", b, "describe", "cfg", "--json").stdout.splitlines()[0])
    assert rows["config"]["retention.ms"] == -1


# Marked so: every change it asks for is refused, on a topic of its own; no node stops.
@pytest.mark.shares_cluster
def test_bad_settings_and_impossible_changes_are_one_line_each(cluster):
    cluster.wait_for_leader()
    b = cluster.brokers
    assert ql("topic", "-b", b, "create", "t", "--partitions", "3").returncode == 0
    for args, code, says in (
        (["--set", "retention.nope=1"], 2, b"no topic setting 'retention.nope'"),
        (["--set", "retention.ms=soon"], 2, b"retention.ms is an integer"),
        (["--set", "segment.bytes=10"], 2, b"segment.bytes is at least"),
        (["--set", "message.timestamp.type=Whenever"], 2, b"CreateTime or LogAppendTime"),
        ([], 2, b"give --partitions, --replicas or --set"),
        (["--partitions", "2"], 1, b"never shrinks"),
        (["--replicas", "4"], 1, b"4 replicas asked for but the cluster has 3 nodes"),
    ):
        out = ql("topic", "-b", b, "alter", "t", *args)
        assert out.returncode == code, (args, out.stderr)
        assert says in out.stderr and len(out.stderr.splitlines()) == 1, (args, out.stderr)
    out = ql("topic", "-b", b, "alter", "nope", "--partitions", "4")
    assert out.returncode == 1 and b"unknown topic 'nope'" in out.stderr
    out = ql("topic", "-b", b, "alter", "default", "--partitions", "4")
    assert out.returncode == 1 and b"membership" in out.stderr
    out = ql("partition", "-b", b, "move", "t", "0", "--to", "1,9")
    assert out.returncode == 1 and b"no node 9" in out.stderr
    out = ql("partition", "-b", b, "move", "t", "7", "--to", "1,2")
    assert out.returncode == 1 and b"no partition 7" in out.stderr


def test_a_topic_grows_and_its_new_partitions_take_records(cluster):
    cluster.wait_for_leader()
    b = cluster.brokers
    with Client(b, timeout=30) as c:
        c.create_topic("grow", partitions=2, replicas=3)
        first = {p: c.append([b"old-%d" % p], topic="grow", partition=p) for p in range(2)}
        out = ql("topic", "-b", b, "alter", "grow", "--partitions", "5")
        assert out.returncode == 0, out.stderr
        assert ql("topic", "-b", b, "alter", "grow", "--partitions", "5").returncode == 0
        rows = c.describe_topic("grow")
        assert [r["partition"] for r in rows] == [0, 1, 2, 3, 4]
        assert all(r["leader_id"] in r["replicas"] and len(r["replicas"]) == 3 for r in rows)
        assert c.topics()["grow"] == 5
        for p in range(5):
            offset = c.append([b"new-%d" % p], topic="grow", partition=p)
            assert c.read(offset, topic="grow", partition=p)[0].value == b"new-%d" % p
        for p, offset in first.items():  # the old partitions kept their records
            assert c.read(offset, topic="grow", partition=p)[0].value == b"old-%d" % p
    # Every node restarted: the grown topic is whole again.
    for node_id in (1, 2, 3):
        cluster.kill(node_id, signal.SIGTERM)
    for node_id in (1, 2, 3):
        cluster.start(node_id)
    cluster.wait_for_leader()
    with Client(b, timeout=30) as c:
        for p in range(5):
            assert c.read(0, 10, topic="grow", partition=p)[-1].value == b"new-%d" % p


def test_replication_factor_and_a_move_under_load_lose_nothing(cluster):
    brokers, _ = four_nodes_and_a_topic(cluster)
    producer = TopicProducer(brokers)
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) >= 30, 30, "appends flow")
        out = ql("topic", "-b", brokers, "alter", TOPIC, "--replicas", "2", "--timeout", "30")
        assert out.returncode == 0, out.stderr
        with Client(brokers, timeout=30) as c:
            two = {r["partition"]: r["replicas"] for r in c.describe_topic(TOPIC)}
            # (Node 4's join may have started a rebalance that reordered the sets since.)
            assert all(len(r) == 2 for r in two.values())
            wait_until(lambda: groups_settled(cluster, TOPIC, two), 60, "down to 2 replicas")
            out = ql("topic", "-b", brokers, "alter", TOPIC, "--replicas", "3")
            assert out.returncode == 0, out.stderr
            three = {r["partition"]: r["replicas"] for r in c.describe_topic(TOPIC)}
            assert all(len(r) == 3 for r in three.values())
            wait_until(lambda: groups_settled(cluster, TOPIC, three), 60, "back to 3")
            # Partition 0 moves entirely off its leader's node, onto the other three.
            leader = next(r["leader_id"] for r in c.describe_topic(TOPIC) if r["partition"] == 0)
            target = [n for n in (1, 2, 3, 4) if n != leader]
            out = ql("partition", "-b", brokers, "move", TOPIC, "0", "--to", ",".join(map(str, target)))  # fmt: skip
            assert out.returncode == 0, out.stderr
            wait_until(
                lambda: groups_settled(cluster, TOPIC, {**three, 0: target}),
                60,
                "partition 0 on its new nodes",
            )
            wait_until(lambda: not c.partition_moves(), 30, "no move left under way")
            moved = next(r for r in c.describe_topic(TOPIC) if r["partition"] == 0)
            assert moved["replicas"] == target and moved["leader_id"] in target
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) > acked + 30, 30, "appends go on")
    finally:
        producer.stop.set()
        producer.join(timeout=30)
    with Client(brokers, timeout=30) as c:
        check_no_loss(c, producer.acked)


def segment_files(cluster, node_id: int, topic: str, partition: int) -> list[str]:
    folder = os.path.join(cluster.data_dir(node_id), "topics", topic, str(partition), "log")
    return sorted(f for f in os.listdir(folder) if f.endswith(".log"))


def position_of_record(
    cluster, node_id: int, topic: str, partition: int, record: int
) -> int | None:
    """Where the record `record` sits in a replica's log, read from its segment files: Raft's
    own batches (barriers, configurations) take positions there, and no record offset.
    None if the replica does not hold it (yet)."""
    folder = os.path.join(cluster.data_dir(node_id), "topics", topic, str(partition), "log")
    seen = 0  # the data records before the batch at hand
    for name in segment_files(cluster, node_id, topic, partition):
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        at = 0
        while at + HEADER_BYTES <= len(data):
            try:
                header = parse_header(data, at)
            except BatchError:
                break  # the end of what was written
            if header.batch_type is BatchType.DATA:
                if record < seen + header.record_count:
                    return header.base_offset + record - seen
                seen += header.record_count
            at += header.total_bytes
    return None


def test_a_trimmed_partition_starts_later_for_every_reader_and_drops_its_old_segments(cluster):
    cluster.wait_for_leader()
    b = cluster.brokers
    with Client(b, timeout=30) as c:
        c.create_topic("trimmed", partitions=2, replicas=3)
        c.alter_topic("trimmed", config={"segment.bytes": 64 * 1024})
        value = base64.b64encode(os.urandom(3000))  # ~4 KB that do not compress away
        offsets = [c.append([value], topic="trimmed", partition=0) for _ in range(80)]
        before = offsets[50]
        assert len(segment_files(cluster, 1, "trimmed", 0)) > 2
        # The trim is kept as the record's position in the log (the same on every replica).
        position = wait_until(
            lambda: position_of_record(cluster, 1, "trimmed", 0, before), 20, "node 1 has it"
        )
        out = ql("topic", "-b", b, "trim", "trimmed", "--partition", "0", "--before", str(before))
        assert out.returncode == 0, out.stderr
        assert out.stdout.decode().strip() == f"trimmed/0 starts at {before}"
        assert c.start_offset(topic="trimmed", partition=0) == before
        with pytest.raises(OffsetOutOfRangeError):
            c.read(offsets[0], topic="trimmed", partition=0)
        assert c.read(before, topic="trimmed", partition=0)[0].offset == before
        row = next(r for r in c.describe_topic("trimmed") if r["partition"] == 0)
        assert row["log_start_offset"] == before
        assert c.start_offset(topic="trimmed", partition=1) == 0, "the other partition keeps all"
        # Readers from the start get what is left, on any replica (a follower too).
        got = ql("consume", "-b", b, "--topic", "trimmed", "--from", "earliest", "--with-offsets")
        assert int(got.stdout.split(b"\t", 1)[0]) == before
        for node_id in (1, 2, 3):
            with (
                Client(cluster.address(node_id), direct=True) as one,
                pytest.raises(OffsetOutOfRangeError),
            ):
                one.read(offsets[0], topic="trimmed", partition=0)
            wait_until(
                lambda n=node_id: len(segment_files(cluster, n, "trimmed", 0)) <= 3,
                20,
                f"node {node_id} dropped the segments before the trim",
            )
    # A restart keeps the start (each replica records it, so a restarted node refuses old
    # offsets before it has heard the controller); a trim never moves it back; past the
    # end is refused.
    assert all(group_file(cluster, n, "trimmed", 0)["log_start"] == position for n in (1, 2, 3))
    cluster.kill(3, signal.SIGTERM)
    cluster.start(3)
    wait_until(lambda: cluster.node_status(3), 20, "node 3 is back")
    with Client(cluster.address(3), direct=True) as one:
        wait_until(lambda: one.start_offset(topic="trimmed", partition=0) == before, 20, "kept")
    with Client(b, timeout=30) as c:
        assert c.trim_topic("trimmed", 0, offsets[10]) == before
        end = c.end_offset(topic="trimmed", partition=0)
        with pytest.raises(QuorumLogError, match="cannot be trimmed"):
            c.trim_topic("trimmed", 0, end + 5)
        assert c.trim_topic("trimmed", 0, -1) == end + 1
        assert c.read(end + 1, topic="trimmed", partition=0) == []


def controller_of(cluster) -> int:
    def found() -> int | None:
        for n in cluster.procs:
            status = cluster.node_status(n)
            if status and status.get("controller_id") in cluster.procs:
                return status["controller_id"]
        return None

    return wait_until(found, 20, "a controller leader")


def restart_at_once(cluster, node_id: int) -> None:
    """SIGKILL, then start again: the controller fails over, and the groups of two replicas
    that include the node can elect once it is back."""
    cluster.kill(node_id)
    cluster.start(node_id, join=node_id == 4)


def test_changes_cut_short_by_the_controller_leaders_death_complete_or_are_refused(cluster):
    """The controller's leader dies right after it committed new replica sets (its mover
    had only begun), and again while a grow may be waiting for its new partitions'
    leaders: the next leader drives every move to its end, asking again finishes the
    grow, and a steady producer loses nothing acknowledged."""
    brokers, _ = four_nodes_and_a_topic(cluster)
    producer = TopicProducer(brokers)
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) >= 30, 30, "appends flow")
        with Client(brokers, timeout=30) as c:
            c.alter_topic(TOPIC, replicas=2)
            restart_at_once(cluster, controller_of(cluster))
            two = {r["partition"]: r["replicas"] for r in c.describe_topic(TOPIC)}
            assert all(len(r) == 2 for r in two.values())
            wait_until(lambda: groups_settled(cluster, TOPIC, two), 90, "moves finished")
        grow = subprocess.Popen(
            [*QUORUMLOG, "topic", "-b", brokers, "alter", TOPIC, "--partitions", "8"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        restart_at_once(cluster, controller_of(cluster))
        grow.wait(timeout=60)
        with Client(brokers, timeout=30) as c:
            c.alter_topic(TOPIC, partitions=8)  # asked again: done, or done now
            rows = c.describe_topic(TOPIC)
            assert len(rows) == 8 and all(r["leader_id"] is not None for r in rows)
            for r in rows[4:]:
                c.append([b"new"], topic=TOPIC, partition=r["partition"])
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) > acked + 20, 30, "appends go on")
    finally:
        producer.stop.set()
        producer.join(timeout=30)
    with Client(brokers, timeout=30) as c:
        check_no_loss(c, producer.acked)
