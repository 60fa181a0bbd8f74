"""Real processes with retention: old committed segments go, and a follower that was down
while they went starts its log again at the leader's log start, catches up, and takes the
configuration whose entry went with them."""

from __future__ import annotations

import time

from quorumlog.bench.workload import IncompressibleRecords
from quorumlog.cli.localcluster import ProcessCluster

SETTINGS = """
[log]
segment_bytes_max = 1048576
retention_bytes = 4194304
"""


def test_retention_and_a_follower_behind_the_log_start(tmp_path):
    config = tmp_path / "settings.toml"
    config.write_text(SETTINGS)
    (tmp_path / "c").mkdir()
    cluster = ProcessCluster(str(tmp_path / "c"), config_file=str(config))
    cluster.start_all()
    try:
        leader = cluster.wait_for_leader()
        follower = next(i for i in cluster.ids if i != leader)
        cluster.kill(follower)
        records = IncompressibleRecords(16 * 1024)
        address = cluster.start_joiner(4)  # a change the follower misses
        with cluster.client(timeout=30) as c:
            c.admin("add_member", node_id=4, address=address, wait=True)
            for _ in range(40):  # about 40 MB: ten times the retention
                c.append(records.take(64))
            end = c.end_offset()
        deadline = time.monotonic() + 30
        while (cluster.node_status(leader) or {}).get("log_start_offset", 0) == 0:
            assert time.monotonic() < deadline, "the leader drops old segments"
            time.sleep(0.5)
        cluster.start(follower)
        deadline = time.monotonic() + 60
        while True:
            status = cluster.node_status(follower)
            if status and status["commit_offset"] >= end:
                break
            assert time.monotonic() < deadline, f"the follower catches up: {status}"
            time.sleep(0.2)
        assert status["log_start_offset"] > 0, "it restarted its log at the leader's start"
        assert status["config"]["voters"] == [1, 2, 3, 4], "the leader sent the configuration"
        with cluster.client(node_id=follower) as c:
            assert len(c.read(status["log_start_offset"], 10)) > 0
    finally:
        cluster.stop_all()
