"""Real processes: membership changes and leadership transfers under a steady producer.

Grow 3 -> 5 -> 3, replace a node, remove the leader, transfer leadership; no acknowledged
write is lost and every change completes. The longest gap between acknowledged appends is
measured (reported, not asserted: it is a benchmark figure).
"""

from __future__ import annotations

import subprocess
import time

import pytest
import trio

from quorumlog import Client
from quorumlog.cli.localcluster import QUORUMLOG, ProcessCluster
from quorumlog.transport.messages import AdminReply, AdminRequest, ErrorCode, ErrorReply
from quorumlog.transport.tcp import open_connection
from tests.process.test_failover import Producer, check_no_loss


def ql(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*QUORUMLOG, *args], capture_output=True, timeout=60)


def voters(cluster: ProcessCluster, brokers: str) -> list[int]:
    out = ql("members", "-b", brokers, "list", "--json")
    assert out.returncode == 0, out.stderr
    import json

    return sorted(
        m["node_id"] for m in map(json.loads, out.stdout.splitlines()) if m["role"] == "voter"
    )


@pytest.mark.slow
def test_grow_shrink_replace_remove_leader_and_transfer_under_load(cluster):
    cluster.wait_for_leader()
    producer = Producer(cluster)
    producer.start()
    try:
        brokers = cluster.brokers
        for node_id in (4, 5):
            address = cluster.start_joiner(node_id)
            brokers += "," + address
            out = ql(
                "members", "-b", brokers, "add", str(node_id), address, "--wait", "--timeout", "30"
            )
            assert out.returncode == 0, out.stderr
        assert voters(cluster, brokers) == [1, 2, 3, 4, 5]

        leader = cluster.wait_for_leader()
        target = next(i for i in (1, 2, 3) if i != leader)
        out = ql("transfer-leader", "-b", brokers, str(target), "--timeout", "30")
        assert out.returncode == 0, out.stderr
        assert cluster.wait_for_leader() == target

        out = ql("members", "-b", brokers, "remove", str(target), "--timeout", "30")
        assert out.returncode == 0, out.stderr  # the leader itself: it hands over first
        remaining = [i for i in (1, 2, 3, 4, 5) if i != target]
        assert voters(cluster, brokers) == remaining

        new_address = cluster.start_joiner(6)
        brokers += "," + new_address
        old = remaining[0]
        out = ql("members", "-b", brokers, "replace", str(old), "6", new_address, "--timeout", "30")
        assert out.returncode == 0, out.stderr
        remaining = sorted([i for i in remaining if i != old] + [6])
        assert voters(cluster, brokers) == remaining

        keep = remaining[:3]
        spec = ",".join(f"{i}={cluster.address(i)}" for i in keep)
        out = ql("members", "-b", brokers, "set", spec, "--timeout", "30")
        assert out.returncode == 0, out.stderr
        assert voters(cluster, brokers) == keep

        out = ql("members", "-b", brokers, "remove", "99", "--timeout", "30")
        assert out.returncode == 1 and b"99" in out.stderr, "an impossible change fails at once"
        time.sleep(0.5)
    finally:
        producer.stop.set()
        producer.join(timeout=30)
    assert len(producer.acked) > 0
    statuses = Client(brokers, timeout=10).status()
    leader = next(s for s in statuses if s.get("role") == "leader")
    with Client(leader["members"][str(leader["node_id"])], direct=True) as c:
        check_no_loss(c, producer.acked)


def test_a_retried_change_that_was_made_already_succeeds(cluster):
    """The answer to a change can be lost (a broken connection, a leader change); the client
    sends it again marked `retry`, and the leader answers from the configuration it finds.
    (Membership calls go to the controller's leader: cluster membership is its group's.)"""
    cluster.wait_for_leader()
    leader = None
    while leader is None:
        leader = cluster.node_status(cluster.ids[0])["controller_id"]
    removed = next(i for i in cluster.ids if i != leader)
    with cluster.client() as c:
        c.admin("remove_member", node_id=removed)

    async def ask(args: dict):
        async with open_connection(cluster.address(leader)) as conn:
            return await conn.request(AdminRequest("remove_member", args))

    retried = trio.run(ask, {"node_id": removed, "retry": True})
    assert isinstance(retried, AdminReply), retried
    assert removed not in retried.result["config"]["voters"]
    first_time = trio.run(ask, {"node_id": removed})
    assert isinstance(first_time, ErrorReply) and first_time.code is ErrorCode.REFUSED
