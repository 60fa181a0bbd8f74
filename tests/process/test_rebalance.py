"""Real processes: a node that joins gets its share of the existing replicas and leaders,
moved by the controller a few at a time under a steady producer, and the rebalance goes on
when the controller's leader is killed half-way; nothing acknowledged is lost."""

from __future__ import annotations

import signal

import pytest

from quorumlog import Client
from quorumlog.bench.partitions import groups_settled
from tests.process.test_replica_moves import TopicProducer, check_no_loss, ql
from tests.process.test_topics import wait_until

TOPIC = "spread"
PARTITIONS = 6


def rebalance_line(brokers: str) -> dict | None:
    """The `rebalance` of the controller leader's `status --json` line, if one answered."""
    with Client(brokers, timeout=10) as c:
        statuses = c.status()
    for status in statuses:
        if "rebalance" in status:
            return {**status["rebalance"], "node_id": status["node_id"]}
    return None


def balanced(brokers: str) -> dict | None:
    found = rebalance_line(brokers)
    return found if found and found["state"] == "balanced" and not found["moves_left"] else None


@pytest.mark.slow
def test_a_joining_node_gets_replicas_and_leaders_under_load_across_a_controller_kill(cluster):
    cluster.wait_for_leader()
    brokers = cluster.brokers
    with Client(brokers, timeout=30) as c:
        c.create_topic(TOPIC, partitions=PARTITIONS, replicas=3)
    # Three nodes holding every replica: balanced, so `--wait` returns at once.
    out = ql("cluster", "-b", brokers, "rebalance", "--wait", "--timeout", "5")
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().startswith("balanced already"), out.stdout
    assert wait_until(lambda: rebalance_line(brokers), 10, "status")["state"] == "balanced"

    producer = TopicProducer(brokers, TOPIC, PARTITIONS)
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) >= 50, 30, "appends flow")
        address = cluster.start_joiner(4)
        brokers = f"{brokers},{address}"
        out = ql("members", "-b", brokers, "add", "4", address, "--wait", "--timeout", "60")
        assert out.returncode == 0, out.stderr

        # The join starts a rebalance; as soon as it is seen under way, the controller's
        # leader is killed and restarted (nothing moves onto or off a node that is down),
        # and the next leader goes on from the controller's state.
        moving = wait_until(
            lambda: (r := rebalance_line(brokers)) and r["state"] == "moving" and r,
            30,
            "a rebalance under way",
        )
        assert moving["reason"] == "node 4 joined"
        cluster.kill(moving["node_id"], signal.SIGKILL)
        cluster.start(moving["node_id"], join=moving["node_id"] == 4)

        done = wait_until(lambda: balanced(brokers), 180, "balanced")
        assert done["moves_done"] >= 3 and done["moves_in_flight"] == 0
        assert abs(done["replicas"]["4"] - PARTITIONS * 3 / 4) <= 1, done
        with Client(brokers, timeout=30) as c:
            rows = c.describe_topic(TOPIC)
        replicas = {r["partition"]: r["replicas"] for r in rows}
        on_4 = sum(4 in r for r in replicas.values())
        assert abs(on_4 - PARTITIONS * 3 / 4) <= 1, replicas
        assert all(len(set(r)) == 3 for r in replicas.values())
        wait_until(lambda: groups_settled(cluster, TOPIC, replicas), 60, "every group on its set")

        def node_4_leads() -> bool:
            with Client(brokers, timeout=30) as c:
                return any(r["leader_id"] == 4 for r in c.describe_topic(TOPIC))

        wait_until(node_4_leads, 60, "node 4 leads a partition")
        acked = len(producer.acked)
        wait_until(lambda: len(producer.acked) > acked + 50, 30, "appends go on")
    finally:
        producer.stop.set()
        producer.join(timeout=30)
    with Client(brokers, timeout=30) as c:
        check_no_loss(c, producer.acked, TOPIC, PARTITIONS)

    out = ql("cluster", "-b", brokers, "rebalance", "--wait", "--timeout", "5")
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().startswith("balanced already"), out.stdout

    # A partition moved off node 4 by hand unbalances it again; asked, a rebalance waits
    # for that move, then gives node 4 a replica back.
    off_4 = next(p for p, r in replicas.items() if 4 in r)
    out = ql("partition", "-b", brokers, "move", TOPIC, str(off_4), "--to", "1,2,3")
    assert out.returncode == 0, out.stderr
    out = ql("cluster", "-b", brokers, "rebalance", "--wait", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.decode().splitlines()
    moves = [line.split(" -> ") for line in lines if line.startswith("move ")]
    assert any("4" in to.split(",") for _, to in moves), lines
    assert lines[-1].startswith("balanced: "), lines
    with Client(brokers, timeout=30) as c:
        after = {r["partition"]: r["replicas"] for r in c.describe_topic(TOPIC)}
    assert abs(sum(4 in r for r in after.values()) - PARTITIONS * 3 / 4) <= 1, after
