"""Real processes: a leader killed with SIGKILL under a stream of quorum appends."""

from __future__ import annotations

import hashlib
import signal
import threading
import time

from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.client.errors import QuorumLogError


def read_all(client) -> dict[int, bytes]:
    """Every committed record as `client` reads them: offset -> value."""
    found: dict[int, bytes] = {}
    offset = 0
    while records := client.read(offset, 10_000):
        found.update((r.offset, r.value) for r in records)
        offset = records[-1].offset + 1
    return found


def committed_digest(cluster: ProcessCluster, node_id: int) -> tuple[int, str]:
    """(commit offset, sha256 of every committed record) as one node serves them."""
    digest = hashlib.sha256()
    with cluster.client(node_id=node_id) as c:
        commit = c.end_offset()
        for offset, value in sorted(read_all(c).items()):
            digest.update(b"%d:" % offset + value)
    return commit, digest.hexdigest()


PRODUCER_TIMEOUT_S = 10.0


def check_no_loss(client, acked: dict[int, bytes]) -> None:
    """As `client` reads the log: every acknowledged record at its offset, no value twice."""
    found = read_all(client)
    lost = [o for o, v in acked.items() if found.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, first at {lost[:3]}"
    assert len(set(found.values())) == len(found), "a value was written twice"


class Producer(threading.Thread):
    def __init__(self, cluster: ProcessCluster, value_bytes: int = 100, per_append: int = 1):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.value_bytes = value_bytes
        self.per_append = per_append
        self.acked: dict[int, bytes] = {}
        self.failures: list[str] = []
        self.longest_call_s = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        with self.cluster.client(timeout=PRODUCER_TIMEOUT_S) as c:
            while not self.stop.is_set():
                values = [
                    b"%08d:" % (i + k) + b"x" * self.value_bytes for k in range(self.per_append)
                ]
                started = time.monotonic()
                try:
                    first = c.append(values)
                    for k, v in enumerate(values):
                        self.acked[first + k] = v
                except QuorumLogError as exc:
                    self.failures.append(str(exc))
                self.longest_call_s = max(self.longest_call_s, time.monotonic() - started)
                i += self.per_append


def test_leader_kill_loses_no_acknowledged_write(cluster):
    leader = cluster.wait_for_leader()
    producer = Producer(cluster)
    producer.start()
    time.sleep(1.0)
    before_kill = len(producer.acked)
    assert before_kill > 0, producer.failures
    cluster.kill(leader)
    deadline = time.monotonic() + 30
    while len(producer.acked) < before_kill + 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(producer.acked) >= before_kill + 100, "appends resumed after the failover"
    assert producer.longest_call_s < PRODUCER_TIMEOUT_S + 1, "every call ends within its timeout"
    cluster.start(leader)
    time.sleep(0.5)
    producer.stop.set()
    producer.join(timeout=20)
    cluster.wait_converged()

    with cluster.client() as c:
        check_no_loss(c, producer.acked)
    digests = {committed_digest(cluster, i) for i in cluster.ids}
    assert len(digests) == 1, "every node holds the same committed log"


def test_a_reader_right_after_a_full_restart_sees_every_committed_record(cluster):
    """After every node restarts, each replica's commit offset starts at -1 until a leader
    commits its term's barrier. A client read must wait for that leader rather than take
    a replica's "nothing there yet" for the end of the log, and its end offset too."""
    cluster.wait_for_leader()
    with cluster.client() as c:
        first = c.append([b"one", b"two", b"three"])
    for node_id in cluster.ids:
        cluster.kill(node_id, signal.SIGTERM)
    cluster.start_all()
    with cluster.client(timeout=20) as c:
        assert [r.value for r in c.read(first)] == [b"one", b"two", b"three"]
        assert c.end_offset() == first + 2, "the new leader's barrier takes no offset"


def test_a_leader_told_to_stop_hands_its_groups_over_first(cluster):
    """SIGTERM is a planned stop: every group the node leads moves to another voter by a
    transfer, not by an election after it is gone (clients see no election timeout)."""
    with cluster.client(timeout=30) as c:
        c.create_topic("moving", partitions=6, replicas=3)
    leader = cluster.wait_for_leader()  # of `default`
    cluster.kill(leader, signal.SIGTERM)
    with open(f"{cluster.root}/node{leader}.log") as f:
        stopping = f.read()
    assert "leadership_handed_over" in stopping and "still_leading=0" in stopping, stopping[-2000:]
    taken = ""
    for survivor in cluster.procs:
        with open(f"{cluster.root}/node{survivor}.log") as f:
            taken += f.read()
    assert any(
        "election_started" in line and "group=1 " in line and "transfer=True" in line
        for line in taken.splitlines()
    ), "default's new leader was elected by a transfer"
    with cluster.client(timeout=30) as c:
        c.append([b"after the stop"])
