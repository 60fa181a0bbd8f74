"""Real processes: one node's fsyncs made slow (the fault harness's hook: a delay in a file
of its data folder) under a stream of quorum appends. Commits go on through the followers
that flushed; a leader whose disk stays slow hands leadership to a healthy node, which
reports the slow one in `status`; nothing acknowledged is lost (gray failures)."""

from __future__ import annotations

import os
import time

import pytest

from bench.faults import fsync_delay_path
from quorumlog.localcluster import ProcessCluster
from tests.process.test_failover import Producer, check_no_loss

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


def wait_for(what: str, check, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def test_a_leader_with_a_slow_disk_hands_over_and_the_slow_disk_is_reported(hooked):
    cluster = hooked
    slow = cluster.wait_for_leader()
    producer = Producer(cluster)
    producer.start()
    try:
        wait_for("appends flow", lambda: len(producer.acked) > 50)
        slow_disk(cluster, slow, SLOW_MS)
        new = wait_for(
            "leadership leaves the slow disk",
            lambda: next(
                (
                    i
                    for i in cluster.ids
                    if i != slow and (cluster.node_status(i) or {}).get("role") == "leader"
                ),
                None,
            ),
        )
        status = wait_for(
            "the new leader reports the slow disk",
            lambda: (
                s
                if (s := cluster.node_status(new)) and s["disks"][str(slow)]["slow_disk"]
                else None
            ),
        )
        assert not status["disks"][str(new)]["slow_disk"]
        acked_before = len(producer.acked)
        wait_for("appends go on", lambda: len(producer.acked) > acked_before + 50)
    finally:
        producer.stop.set()
        producer.join(timeout=30)
    slow_disk(cluster, slow, None)
    cluster.wait_converged()
    with cluster.client() as c:
        check_no_loss(c, producer.acked)
