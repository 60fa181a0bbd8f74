"""Issue 51: what a node keeps per topic leaves with the topic. Topics made, written, read
back (by a consumer group too) and deleted while another is written and consumed:
afterwards every node's tables (status's `tables`) are where they were, the groups hold no
position of a deleted topic, and the metrics name none."""

from __future__ import annotations

import time
import urllib.request

from quorumlog import Consumer
from quorumlog.cli.localcluster import ProcessCluster, free_ports

ROUNDS = 8
SETTLED_WITHIN_S = 45.0  # the deletions applied everywhere, then a heartbeat prune (10-20 s)
# Equal to before: each counts what a topic's partitions hold on a node.
PER_TOPIC = ("groups", "leader_entries", "lag_ends")
GROUPS = ("steady-readers", "churn-readers")


def tables(cluster: ProcessCluster, groups: tuple[str, ...] = ()) -> dict[int, dict[str, int]]:
    """Every node's tables. A coordinator holds a group's positions once a call reached it
    since it took the lead (a leadership the balancer moved has none yet): `groups` are
    described first, so that their positions count wherever they are led now."""
    with cluster.client(timeout=30) as c:
        for group in groups:
            c.describe_group(group)
    return {i: cluster.node_status(i)["tables"] for i in cluster.ids}


def metrics(cluster: ProcessCluster, node_id: int) -> str:
    url = f"http://127.0.0.1:{cluster.http_ports[node_id - 1]}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


def left_behind(before: dict[int, dict[str, int]], after: dict[int, dict[str, int]]) -> list:
    problems = []
    for node_id, was in before.items():
        now = after[node_id]
        problems += [
            f"node {node_id} {k}: {was[k]} -> {now[k]}" for k in PER_TOPIC if now[k] != was[k]
        ]
        # A topic's segment files close with it (the controller's and `__groups`' logs may
        # roll one more meanwhile).
        if now["open_segment_files"] > was["open_segment_files"] + 2:
            problems.append(f"node {node_id} open files {was['open_segment_files']} -> {now}")
        # One entry per group hosted and node leading it, at most.
        if (
            now["heartbeat_entries"] > 2 * now["groups"]
            or now["heartbeat_groups_named"] > now["groups"]
        ):
            problems.append(f"node {node_id} heartbeat tables {now}")
        if now["producer_appends_uncommitted"] > 100:
            problems.append(f"node {node_id} holds {now['producer_appends_uncommitted']} appends")
    # The groups' positions, wherever their coordinators are now.
    positions = [sum(tables["group_positions"] for tables in t.values()) for t in (before, after)]
    if positions[1] != positions[0]:
        problems.append(f"the groups hold {positions[0]} -> {positions[1]} positions")
    return problems


def consume_all(cluster: ProcessCluster, group: str, topic: str, count: int) -> None:
    """A stream group reads `topic` to its end and commits it."""
    with Consumer(cluster.brokers, group, [topic], timeout=30) as consumer:
        got = 0
        while got < count:
            got += len(consumer.poll(timeout=5.0))
        consumer.commit()


def test_topics_made_and_deleted_leave_nothing_behind(tmp_path):
    cluster = ProcessCluster(str(tmp_path), http_ports=free_ports(3))
    cluster.start_all()
    try:
        cluster.wait_for_leader()
        with cluster.client(timeout=30) as c:
            c.create_topic("steady", partitions=3, replicas=3)
            c.append_spread([b"s%d" % i for i in range(300)], topic="steady")
            consume_all(cluster, "steady-readers", "steady", 300)
            time.sleep(3.0)  # the leader tables and lag ends of `steady` settle
            before = tables(cluster, ("steady-readers",))
            for r in range(ROUNDS):
                name = f"churn{r}"
                c.create_topic(name, partitions=3, replicas=3)
                c.append_spread([b"c%d" % i for i in range(60)], topic=name)
                assert sum(len(c.read(0, 100, topic=name, partition=p)) for p in range(3)) == 60
                consume_all(cluster, "churn-readers", name, 60)
                c.reset_offsets("churn-readers", name, "latest")  # no member now
                c.append_spread([b"s%d" % i for i in range(50)], topic="steady")
                c.delete_topic(name)
        deadline = time.monotonic() + SETTLED_WITHIN_S
        while problems := left_behind(before, tables(cluster, GROUPS)):
            assert time.monotonic() < deadline, problems
            time.sleep(1.0)
        for node_id in cluster.ids:
            assert "churn" not in metrics(cluster, node_id), f"node {node_id}'s metrics"
    finally:
        cluster.stop_all()
