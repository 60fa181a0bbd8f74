"""A thousand partitions on three real nodes: every partition has a leader again after
its leaders' node is lost for good, and after every node is killed and restarted. Before
elections were paced (raft/election.py, actors/replica/campaigns.py) and term and vote saves
batched (actors/services/metadata_writer.py), a third of them stayed leaderless for as long as one
node was down, and nearly all of them after a restart. The time limits are far above what
the cluster needs (bench elections: seconds); a storm never ends."""

from __future__ import annotations

import pytest

from quorumlog.bench.elections import TOPIC, lose_and_recover
from quorumlog.cli.localcluster import ProcessCluster

PARTITIONS = 1000


# Alone: three nodes of 1,000 partitions each need their share of the cores to keep their
# leases; beside two other workers' JVMs (Kafka Streams, Connect, brokers) their elections
# once stormed past the test's timeout (terms in the fifties, 18,000 elections a node).
@pytest.mark.slow
@pytest.mark.alone
def test_a_thousand_partitions_lead_again_after_a_node_is_lost_and_after_a_restart(tmp_path):
    cluster = ProcessCluster(str(tmp_path))
    cluster.start_all()
    try:
        with cluster.client(timeout=300) as c:
            c.create_topic(TOPIC, partitions=PARTITIONS, replicas=3)
        row = lose_and_recover(cluster, "one node lost", PARTITIONS, timeout_s=120.0)
        assert len(row["cpu_cores"]) == 2, row
        cluster.start(next(i for i in cluster.ids if i not in cluster.procs))
        row = lose_and_recover(cluster, "all restarted", PARTITIONS, timeout_s=180.0)
        assert len(row["cpu_cores"]) == 3, row
        with cluster.client(timeout=60) as c:
            described = c.describe_topic(TOPIC)
        assert len(described) == PARTITIONS
        assert all(r["leader_id"] in cluster.procs for r in described), "describe agrees"
    finally:
        cluster.stop_all()
