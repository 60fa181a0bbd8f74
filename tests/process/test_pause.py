"""Real processes: a leader paused (SIGSTOP) for longer than an election timeout, under a
stream of quorum appends, then resumed. It must step down; nothing acknowledged is lost."""

from __future__ import annotations

import signal
import time

import pytest
import trio

from quorumlog.client.aclient import AsyncClient
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError
from tests.process.test_failover import Producer, check_no_loss, read_all
from tests.process.test_topics import wait_until


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


def test_a_leader_starved_of_cpu_hands_its_leadership_over(cluster):
    """Stopped 200 ms in every 400, a leader keeps its followers' votes while each append
    waits out its pauses: compared with its peers it is slow, as a slow disk is, and after
    `slow_fsync_for_s` it hands its groups to a healthy voter (actors/services/stall_watch.py)."""
    leader = cluster.wait_for_leader()
    proc = cluster.procs[leader]
    for _ in range(8):
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.2)
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.2)

    def led_elsewhere() -> list[int] | None:
        statuses = cluster.wait_converged()
        leaders = [s["node_id"] for s in statuses.values() if s["role"] == "leader"]
        return leaders if len(leaders) == 1 and leaders != [leader] else None

    # Its last stalls count for STALL_WINDOW_S after the pauses end: it hands over then.
    wait_until(led_elsewhere, 10, f"a leader other than the starved node {leader}")
    with open(f"{cluster.root}/node{leader}.log") as log:
        assert "process_stalled" in log.read()


@pytest.mark.parametrize("kind", ["Client", "AsyncClient"])
def test_a_call_waiting_on_a_paused_leader_goes_to_the_one_elected_meanwhile(cluster, kind):
    """Tries here would wait out the whole call: only the leader watch, asking the other
    nodes whom they elected, can move an append off the paused leader."""
    leader = cluster.wait_for_leader()

    def append_during_pause(append) -> int:
        append(b"before")
        cluster.procs[leader].send_signal(signal.SIGSTOP)
        try:
            return append(b"during")
        finally:
            cluster.procs[leader].send_signal(signal.SIGCONT)

    if kind == "Client":
        with cluster.client(timeout=20.0) as c:
            c.attempt_s = 60.0
            offset = append_during_pause(lambda v: c.append([v]))
    else:

        async def main() -> int:
            async with AsyncClient(cluster.brokers, timeout=20.0) as c:
                c.attempt_s = 60.0
                token = trio.lowlevel.current_trio_token()
                return await trio.to_thread.run_sync(
                    append_during_pause,
                    lambda v: trio.from_thread.run(c.append, [v], trio_token=token),
                )

        offset = trio.run(main)
    cluster.wait_converged()
    with cluster.client() as c:
        found = read_all(c)
    assert found[offset] == b"during"
    assert list(found.values()).count(b"during") == 1, "written once"


def test_status_asks_the_members_together_and_ends_within_its_timeout(cluster):
    """Two members paused: `status` reports them unreachable once its timeout is up, instead
    of waiting for each in turn (it took 4.4 s with --timeout 1)."""
    cluster.wait_for_leader()
    for node_id in (2, 3):
        cluster.procs[node_id].send_signal(signal.SIGSTOP)
    try:
        expected = [{"node_id": n, "error": "unreachable"} for n in (2, 3)]
        started = time.monotonic()
        with Client(cluster.address(1), timeout=1.0) as c:
            rows = c.status()
        blocking_s = time.monotonic() - started

        async def status_async():
            async with AsyncClient(cluster.address(1), timeout=1.0) as c:
                return await c.status()

        started = time.monotonic()
        async_rows = trio.run(status_async)
        async_s = time.monotonic() - started
    finally:
        for node_id in (2, 3):
            cluster.procs[node_id].send_signal(signal.SIGCONT)
    for found, took in ((rows, blocking_s), (async_rows, async_s)):
        assert found[0]["node_id"] == 1 and found[1:] == expected
        assert took < 2.5, f"status took {took:.1f} s with a 1 s timeout"


def test_a_leader_cut_off_from_its_followers_answers_no_linearizable_end_offset(cluster):
    """ReadIndex: a leader answers with its commit offset only once a quorum confirmed,
    after the call, that it still leads. With both followers paused it cannot: the call
    fails rather than answer from a leadership the others may have moved on from."""
    leader = cluster.wait_for_leader()
    with cluster.client() as c:
        c.append([b"before"])
    followers = [n for n in cluster.ids if n != leader]
    for n in followers:
        cluster.procs[n].send_signal(signal.SIGSTOP)
    try:
        with (
            cluster.client(timeout=3, node_id=leader) as c,
            pytest.raises(QuorumLogError),
        ):
            c.end_offset(linearizable=True)
    finally:
        for n in followers:
            cluster.procs[n].send_signal(signal.SIGCONT)
    with cluster.client() as c:
        # The one record, at offset 0, whatever leaders came since.
        assert c.end_offset(linearizable=True) == 0, "confirmed again once they are back"
