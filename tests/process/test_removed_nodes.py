"""Real processes: nodes removed from the cluster and left running (issues 45 and 50).

A removed node keeps the configuration it last knew (the leader stops replicating to it
in the step that leaves it out), so `status` and clients must not take its word for the
cluster's: the newest configuration names the members, a removed node that still answers
is listed as `removed`, and it learns and says so itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from quorumlog import Client
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster, free_ports
from quorumlog.client.errors import QuorumLogError

SHOWN_WITHIN_S = 2.0


def ql(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], capture_output=True, timeout=90, text=True)


def ok(*args: str) -> None:
    out = ql(*args)
    assert out.returncode == 0, (args, out.stdout, out.stderr)


def shows(
    rows: list[dict],
    members: set[int],
    removed: set[int],
    leader: int | None,
    joining: frozenset[int] = frozenset(),
) -> str:
    """What is wrong with a `status` answer, or "" if it shows a leader among `members`
    (`leader`, if named), every member, and every removed node as removed (and nodes
    `joining`, not added yet, as they answer)."""
    by_id = {r["node_id"]: r for r in rows}
    if missing := members - by_id.keys():
        return f"no row for members {sorted(missing)}"
    for node_id in members:
        row = by_id[node_id]
        if row.get("role") not in ("leader", "follower"):
            return f"member {node_id} shows {row.get('role') or row.get('error')}"
    for node_id in removed:
        row = by_id.get(node_id)
        if row is None or row.get("role") != "removed":
            return f"removed node {node_id} shows {row and row.get('role')}"
    if extra := by_id.keys() - members - removed - joining:
        return f"rows for nodes {sorted(extra)}, neither members nor removed"
    leaders = [r["node_id"] for r in rows if r.get("role") == "leader"]
    if len(leaders) != 1 or (leader is not None and leaders != [leader]):
        return f"leaders {leaders}, wanted {leader or 'one member'}"
    return ""


def wait_shown(
    brokers: str,
    members: set[int],
    removed: set[int],
    leader: int | None,
    since: float,
    joining: frozenset[int] = frozenset(),
) -> list[dict]:
    problem = "not asked"
    while time.monotonic() - since < SHOWN_WITHIN_S:
        with Client(brokers, timeout=SHOWN_WITHIN_S) as c:
            try:
                rows = c.status()
            except QuorumLogError as exc:
                problem = str(exc)
                continue
        problem = shows(rows, members, removed, leader, joining)
        if not problem:
            return rows
        time.sleep(0.05)
    raise AssertionError(f"within {SHOWN_WITHIN_S} s of the command: {problem}")


@pytest.fixture
def six(tmp_path):
    c = ProcessCluster(str(tmp_path), size=5)
    c.start_all()
    yield c
    c.stop_all()


def test_status_and_clients_follow_the_newest_configuration_past_removed_nodes(six):
    """Issue 50: 1-5 and 6 started to join, remove 1, replace 2 by 6, set 3,5,6 (the leader,
    4, steps down), transfer to 6; the removed nodes stay up. After each command `status`
    with every node shows the current members, their leader, and the removed nodes as
    removed. (`replace` adds 6, as a learner and then by joint consensus: added first with
    `members add`, 6 would be a voter by then, and `replace` refuses a voter.)"""
    cluster = six
    cluster.wait_for_leader()
    address6 = cluster.start_joiner(6)
    everyone = ",".join(cluster.address(i) for i in range(1, 7))

    ok("members", "-b", everyone, "remove", "1", "--timeout", "60")
    wait_shown(everyone, {2, 3, 4, 5}, {1}, None, time.monotonic(), joining=frozenset({6}))

    ok("members", "-b", everyone, "replace", "2", "6", address6, "--timeout", "60")
    wait_shown(everyone, {3, 4, 5, 6}, {1, 2}, None, time.monotonic())

    # Make 4 lead, so that the next change leaves its leader out.
    ok("transfer-leader", "-b", everyone, "4", "--timeout", "60")
    spec = ",".join(f"{i}={cluster.address(i)}" for i in (3, 5, 6))
    ok("members", "-b", everyone, "set", spec, "--timeout", "60")
    wait_shown(everyone, {3, 5, 6}, {1, 2, 4}, None, time.monotonic())

    ok("transfer-leader", "-b", everyone, "6", "--timeout", "60")
    wait_shown(everyone, {3, 5, 6}, {1, 2, 4}, 6, time.monotonic())

    out = ql("status", "-b", everyone, "--json")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert not shows(rows, {3, 5, 6}, {1, 2, 4}, 6), rows
    for node_id in (1, 2, 4):
        assert cluster.procs[node_id].poll() is None, f"node {node_id} stays up"

    # A client given every address in the original order, removed nodes first.
    started = time.monotonic()
    with Client(everyone, timeout=10) as c:
        first = c.append([b"after", b"the changes"])
        assert [r.value for r in c.read(first, 10)] == [b"after", b"the changes"]
    assert time.monotonic() - started < 5.0


def test_a_removed_node_learns_it_says_so_and_stops_serving(cluster):
    """Issue 45: a node removed and left running learns its removal, logs it once, says so
    in `status`, serves no client, deletes the replicas moved off it (tombstones), then
    campaigns in no group (until its groups leave it out, it may: actors/cluster/removal.py), and
    keeps the rest of its data."""
    cluster.wait_for_leader()
    with cluster.client() as c:
        controller = c.status()[0]["controller_id"]
        c.create_topic("spread", partitions=3, replicas=3)
    removed = next(i for i in reversed(cluster.ids) if i != controller)
    ok("members", "-b", cluster.brokers, "remove", str(removed), "--timeout", "60")

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        own = cluster.node_status(removed)
        if own is not None and own["role"] == "removed" and own.get("removed"):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"node {removed} does not say it was removed: {own}")
    time.sleep(1.0)  # its watch logs within a round
    with open(cluster.log_path(removed)) as f:
        assert f.read().count("removed_from_cluster") == 1

    direct = Client(cluster.address(removed), direct=True, timeout=2)
    with direct, pytest.raises(QuorumLogError, match="not a member"):
        direct.append([b"x"])

    def tombstoned() -> int:
        with open(cluster.log_path(removed)) as f:
            return sum("replica_tombstoned" in line and "spread" in line for line in f)

    deadline = time.monotonic() + 30  # the moves, then a burial round (CHECK_S = 5 s)
    while tombstoned() < 3:
        assert time.monotonic() < deadline, f"{tombstoned()} of 3 replicas buried"
        time.sleep(0.5)
    elections = cluster.node_status(removed)["elections_started"]
    time.sleep(2.0)
    assert cluster.node_status(removed)["elections_started"] == elections, "no campaigns"
    assert cluster.procs[removed].poll() is None
    assert os.listdir(cluster.data_dir(removed)), "its data stays until wiped"

    others = ",".join(cluster.address(i) for i in cluster.ids if i != removed)
    with Client(f"{cluster.address(removed)},{others}", timeout=10) as c:
        first = c.append([b"still"])
        assert [r.value for r in c.read(first, 1)] == [b"still"]


def test_adding_a_node_that_is_not_running_names_its_address(cluster):
    """`members add --wait` for a node nobody started: the cluster answers, the new node
    does not; the message names the node and its address."""
    cluster.wait_for_leader()
    address = f"127.0.0.1:{free_ports(1)[0]}"
    started = time.monotonic()
    out = ql("members", "-b", cluster.brokers, "add", "4", address, "--wait", "--timeout", "3")
    assert out.returncode == 1, out
    assert time.monotonic() - started < 10
    assert address in out.stderr and "node 4" in out.stderr, out.stderr
    assert "no broker answered" not in out.stderr


def test_a_removed_nodes_kafka_metadata_sends_clients_to_the_members(tmp_path):
    """Issue 50, Kafka's side: a removed node's Metadata names the members it last learned
    of, not itself, and no leaders (its leader table is of the old configuration), so a
    client that asks it first goes on to the members and produces there."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.process.kafka_support import kafka_cluster
    from tests.process.test_node_listeners import metadata

    clusters = kafka_cluster(str(tmp_path))
    cluster = next(clusters)
    try:
        with cluster.client() as c:
            controller = c.status()[0]["controller_id"]
        removed = next(i for i in reversed(cluster.ids) if i != controller)
        members = [i for i in cluster.ids if i != removed]
        on_members = ",".join(f"127.0.0.1:{cluster.kafka_ports[i - 1]}" for i in members)
        on_removed = f"127.0.0.1:{cluster.kafka_ports[removed - 1]}"
        admin = AdminClient({"bootstrap.servers": on_members})
        admin.create_topics([NewTopic("after", num_partitions=2, replication_factor=2)])[
            "after"
        ].result(30)
        ok("members", "-b", cluster.brokers, "remove", str(removed), "--timeout", "60")
        deadline = time.monotonic() + 10
        while (own := cluster.node_status(removed)) is None or own["role"] != "removed":
            assert time.monotonic() < deadline, f"node {removed} does not say it was removed"
            time.sleep(0.2)

        # Asked at the wire: librdkafka's list_topics may go to a member it just learned of.
        seen = metadata(cluster, removed, "after")
        assert {b.node_id for b in seen.brokers} == set(members), "the members, not itself"
        [topic] = seen.topics
        assert [p.leader_id for p in topic.partitions] == [-1, -1], "no leaders from an old table"

        producer = confluent_kafka.Producer(
            {"bootstrap.servers": f"{on_removed},{on_members}", "message.timeout.ms": 20000}
        )
        delivered = []
        for key in (b"a", b"b", b"c", b"d"):
            producer.produce("after", b"v", key, on_delivery=lambda e, m: delivered.append(e))
        assert producer.flush(30) == 0 and delivered == [None] * 4
    finally:
        clusters.close()
