"""Real processes: one node's fsyncs made slow (the fault harness's hook: a delay in a file
of its data folder) under a stream of quorum appends. Commits go on through the followers
that flushed; a leader whose disk stays slow hands leadership to a healthy node, which
reports the slow one in `status`; nothing acknowledged is lost (gray failures)."""

from __future__ import annotations

import os

import pytest

from quorumlog.bench.faults import fsync_delay_path
from quorumlog.cli.localcluster import ProcessCluster
from tests.process.test_failover import Producer, check_no_loss
from tests.process.test_topics import wait_until

SLOW_MS = 150
WAIT_S = 30.0


@pytest.fixture
def hooked(tmp_path):
    c = ProcessCluster(str(tmp_path), env={"QUORUMLOG_FAULT_SYNC_JOURNAL": "1"})
    c.start_all()
    yield c
    c.stop_all()


def slow_disk(cluster: ProcessCluster, node_id: int, delay_ms: int | None) -> None:
    path = fsync_delay_path(cluster.data_dir(node_id))
    if delay_ms is None:
        os.remove(path)
        return
    with open(path, "w") as f:
        f.write(str(delay_ms))


def test_a_leader_with_a_slow_disk_hands_over_and_the_slow_disk_is_reported(hooked):
    cluster = hooked
    slow = cluster.wait_for_leader()
    producer = Producer(cluster)
    producer.start()
    try:
        wait_until(lambda: len(producer.acked) > 50, WAIT_S, "appends flow")
        slow_disk(cluster, slow, SLOW_MS)

        def other_leader():
            leaders = [
                i for i in cluster.ids if (cluster.node_status(i) or {}).get("role") == "leader"
            ]
            return next((i for i in leaders if i != slow), None)

        new = wait_until(other_leader, WAIT_S, "leadership leaves the slow disk")

        def reported():
            status = cluster.node_status(new)
            return status if status and status["disks"][str(slow)]["slow_disk"] else None

        status = wait_until(reported, WAIT_S, "the new leader reports the slow disk")
        assert not status["disks"][str(new)]["slow_disk"]
        acked_before = len(producer.acked)
        wait_until(lambda: len(producer.acked) > acked_before + 50, WAIT_S, "appends go on")
    finally:
        producer.stop.set()
        producer.join(timeout=30)
    slow_disk(cluster, slow, None)
    cluster.wait_converged()
    with cluster.client() as c:
        check_no_loss(c, producer.acked)
