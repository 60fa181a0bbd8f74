"""Real processes whose clocks disagree: leader-stamped (log-append) timestamps never go
back in offset order across leader changes (seed 002, KUDU-430)."""

from __future__ import annotations

import itertools
import time

from quorumlog import Client, Record
from quorumlog.cli.localcluster import ProcessCluster
from tests.process.test_membership import ql

# Node 1's clock is right, node 2's 0.6 s ahead (a new leader after it waits the gap out),
# node 3's 5 s ahead (too far to wait: the next leader stamps past its last stamp).
OFFSETS_MS = {1: 0, 2: 600, 3: 5_000}


def start_skewed(cluster: ProcessCluster) -> None:
    for node_id, offset_ms in OFFSETS_MS.items():
        cluster.start(node_id, wrapper=["env", f"QUORUMLOG_FAULT_CLOCK_OFFSET_MS={offset_ms}"])


def lead(cluster: ProcessCluster, node_id: int) -> None:
    out = ql("transfer-leader", "-b", cluster.brokers, str(node_id), "--timeout", "30")
    assert out.returncode == 0, out.stderr


def test_stamps_never_go_back_across_leaders_with_skewed_clocks(tmp_path):
    config = tmp_path / "quorumlog.toml"
    config.write_text('[log]\ntimestamp_type = "log_append"\n')
    cluster = ProcessCluster(str(tmp_path), size=3, config_file=str(config))
    start_skewed(cluster)
    try:
        cluster.wait_for_leader()
        # (leader, first offset of its appends, our clock just before that append)
        stamped_by: list[tuple[int, int, float]] = []
        with Client(cluster.brokers, timeout=20) as c:
            for leader in (2, 1, 3, 1, 2):
                lead(cluster, leader)
                for i in range(3):
                    before_ms = time.time() * 1000
                    # The producer's own timestamp is replaced by the leader's.
                    first = c.append([Record(b"%d-%d" % (leader, i), timestamp_ms=1)])
                    if i == 0:
                        stamped_by.append((leader, first, before_ms))
            records = c.read(0, max_records=100)
        stamps = [r.timestamp_ms for r in records]
        assert len(stamps) == 15 and all(a <= b for a, b in itertools.pairwise(stamps)), stamps
        at = {r.offset: r.timestamp_ms for r in records}
        (_, first_of_3, before_3), (_, first_after_3, _) = stamped_by[2], stamped_by[3]
        assert at[first_of_3] >= before_3 + 3_000, "node 3 stamps with its fast clock"
        assert at[first_after_3] <= at[first_of_3] + 2_000, "then node 1 stamps past it, no more"
    finally:
        cluster.stop_all()


def test_a_topic_created_with_log_append_timestamps_stamps_its_records(cluster):
    cluster.wait_for_leader()
    out = ql("topic", "-b", cluster.brokers, "create", "audit", "--timestamps", "log-append")
    assert out.returncode == 0, out.stderr
    before_ms = time.time() * 1000
    with Client(cluster.brokers, timeout=20) as c:
        c.append([Record(b"x", timestamp_ms=1)], topic="audit")
        c.append([Record(b"y", timestamp_ms=1)])  # `default` keeps the producer's time
        (stamped,) = c.read(0, topic="audit")
        assert stamped.timestamp_ms >= before_ms - 1_000
        assert [r.timestamp_ms for r in c.read(0)] == [1]
    out = ql("topic", "-b", cluster.brokers, "create", "bad", "--timestamps", "wall")
    assert out.returncode == 2 and b"--timestamps" in out.stderr
