"""Real processes: a follower down while 200 MB are appended catches up through the
recovery streamer while appends go on."""

from __future__ import annotations

import time

from quorumlog.bench.workload import IncompressibleRecords
from tests.process.test_failover import Producer, committed_digest

RECORD_BYTES = 16 * 1024
TOTAL_BYTES = 200 * 1024 * 1024


def test_follower_catches_up_while_appends_continue(cluster):
    leader = cluster.wait_for_leader()
    follower = next(i for i in cluster.ids if i != leader)
    cluster.kill(follower)
    records = IncompressibleRecords(RECORD_BYTES)
    with cluster.client(timeout=30) as c:
        for _ in range(TOTAL_BYTES // (64 * RECORD_BYTES)):
            c.append(records.take(64))
        behind = c.end_offset()
    producer = Producer(cluster, value_bytes=1000, per_append=10)
    producer.start()
    cluster.start(follower)
    deadline = time.monotonic() + 120
    caught_up = False
    while time.monotonic() < deadline:
        status = cluster.node_status(follower)
        if status and status["commit_offset"] >= behind:
            caught_up = True
            break
        time.sleep(0.2)
    producer.stop.set()
    producer.join(timeout=20)
    assert caught_up, f"follower did not catch up: {cluster.node_status(follower)}"
    assert len(producer.acked) > 0, "appends went on during the catch-up"
    cluster.wait_converged()
    assert len({committed_digest(cluster, i) for i in cluster.ids}) == 1
