"""Real processes: a leader paused (SIGSTOP) for longer than an election timeout, under a
stream of quorum appends, then resumed. It must step down; nothing acknowledged is lost."""

from __future__ import annotations

import signal
import time

from tests.process.test_failover import Producer, check_no_loss


def test_a_paused_leader_is_replaced_and_steps_down_when_resumed(cluster):
    leader = cluster.wait_for_leader()
    producer = Producer(cluster)
    producer.start()
    try:
        time.sleep(0.5)
        cluster.procs[leader].send_signal(signal.SIGSTOP)
        paused_at = len(producer.acked)
        time.sleep(4.0)  # more than the election timeout and a client's try: others take over
        during_pause = len(producer.acked) - paused_at
        cluster.procs[leader].send_signal(signal.SIGCONT)
        time.sleep(1.0)
    finally:
        producer.stop.set()
        producer.join(timeout=30)
    assert during_pause > 0, "the survivors took over while the leader was paused"
    statuses = cluster.wait_converged()
    leaders = [s["node_id"] for s in statuses.values() if s["role"] == "leader"]
    assert len(leaders) == 1, f"one leader once the paused one is back: {leaders}"
    with cluster.client() as c:
        check_no_loss(c, producer.acked)
