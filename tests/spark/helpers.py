"""What the Spark tests share besides fixtures."""

from __future__ import annotations

from quorumlog import Record
from quorumlog.localcluster import ProcessCluster


def committed_from(cluster: ProcessCluster, offset: int) -> list[Record]:
    """Every committed record from `offset` on, read from the leader (a follower may not
    know yet that the last appends are committed)."""
    with cluster.client(node_id=cluster.wait_for_leader()) as leader:
        out = []
        while page := leader.read(offset, 10_000):
            out += page
            offset = page[-1].offset + 1
    return out
