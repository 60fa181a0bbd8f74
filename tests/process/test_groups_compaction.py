"""Real processes: `__groups` is compacted to its snapshots. After thousands of commits its
partition's log holds a segment or two, not every commit, on every replica, and a new
coordinator (the old one SIGKILLed) rebuilds the group from the last snapshot and what
follows it: the committed position and the member carry on."""

from __future__ import annotations

import glob
import os

import pytest

from quorumlog import Consumer, Record
from quorumlog.cli.localcluster import ProcessCluster
from quorumlog.consumers.state import GROUPS_PARTITIONS, GROUPS_TOPIC, groups_partition
from tests.process.test_topics import wait_until

COMMITS = 3000
SNAPSHOT_EVERY = 200


def segments(cluster: ProcessCluster, node_id: int, partition: int) -> list[str]:
    folder = os.path.join(cluster.data_dir(node_id), "topics", GROUPS_TOPIC, str(partition), "log")
    return sorted(glob.glob(os.path.join(folder, "*.log")))


def committed(cluster: ProcessCluster, group: str) -> int | None:
    with cluster.client(timeout=20) as c:
        (row,) = c.describe_group(group)["partitions"]
        return row["committed"]


@pytest.mark.slow
def test_groups_log_is_compacted_and_a_new_coordinator_starts_from_its_snapshot(tmp_path):
    cluster = ProcessCluster(
        str(tmp_path), env={"QUORUMLOG_GROUPS_SNAPSHOT_EVERY": str(SNAPSHOT_EVERY)}
    )
    cluster.start_all()
    try:
        with cluster.client(timeout=30) as c:
            c.create_topic("events", partitions=1, replicas=3)
            c.append([Record(b"%d" % i) for i in range(COMMITS + 100)], topic="events")
        partition = groups_partition("ledger", GROUPS_PARTITIONS)
        with Consumer(cluster.brokers, "ledger", ["events"], session_timeout=10.0) as member:
            for _ in range(COMMITS):  # one record, one commit: ~150 bytes of __groups each
                assert member.poll(1, 5.0)
                member.commit()
            position = committed(cluster, "ledger")
            assert position is not None and position >= COMMITS

            # Retention runs every 5 s on each replica: each drops what precedes the last
            # committed snapshot, keeping a segment or two of 256 KiB.
            def compacted() -> bool:
                return all(
                    1 <= len(segments(cluster, n, partition)) <= 2
                    and os.path.basename(segments(cluster, n, partition)[0])
                    != "00000000000000000000.log"
                    for n in (1, 2, 3)
                )

            wait_until(compacted, 30, "every replica of the partition is compacted")

            with cluster.client(timeout=20) as c:
                coordinator = c.describe_topic(GROUPS_TOPIC)[partition]["leader_id"]
            cluster.kill(coordinator)
            # The member goes on with the new coordinator, which replayed from the snapshot.
            assert member.poll(1, 10.0)
            member.commit()
        after = committed(cluster, "ledger")
        assert after == position + 1, "the group's state survived compaction and failover"
    finally:
        cluster.stop_all()
