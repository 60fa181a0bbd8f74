"""The node's side of cluster ids (transport/identity.py): it records the id its cluster
named itself with, and stops a node that turns out to hold another cluster's data.

Handshakes between nodes of different clusters fail on both sides, so the two never
exchange a Raft message. Which of them does not belong? The one that a majority of its
own configuration's voters refuse: a directory copied from another cluster, started in a
member's place, is refused by every other member, while each of those is refused only by
it. That node stops with one line naming both ids rather than retrying for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import structlog
import trio

from quorumlog.actors.services.storage import NodeStorage
from quorumlog.transport.identity import ClusterIdentity

logger = structlog.get_logger("quorumlog.cluster")


class ForeignClusterError(Exception):
    """This node's data belongs to another cluster than its configured peers'."""


class ClusterGuard:
    def __init__(self, storage: NodeStorage, voters: Callable[[], Collection[int]]) -> None:
        self.identity = ClusterIdentity(storage.cluster_id)
        self.identity.on_foreign = self._check
        self._storage = storage
        self._voters = voters
        self._refused = trio.Event()

    def adopt(self, cluster_id: str) -> None:
        """The controller's log names the cluster: record it (once) and state it from now
        on in every handshake."""
        if cluster_id == self.identity.cluster_id:
            return
        if self.identity.cluster_id is not None:
            logger.error("cluster_id_changed", recorded=self.identity.cluster_id, in_log=cluster_id)
        self._storage.record_cluster_id(cluster_id)
        self.identity.cluster_id = cluster_id
        logger.info("cluster_named", cluster_id=cluster_id)

    def _check(self) -> None:
        voters = set(self._voters())
        refused_by = voters & self.identity.foreign.keys()
        logger.warning(
            "foreign_peers", cluster_id=self.identity.cluster_id, foreign=self.identity.foreign
        )
        if voters and len(refused_by) > len(voters) // 2:
            self._refused.set()

    async def watch(self) -> None:
        """Raise ForeignClusterError once a majority of the voters refused this node."""
        await self._refused.wait()
        foreign = self.identity.foreign
        theirs = sorted(set(foreign.values()))
        nodes = ", ".join(str(n) for n in sorted(foreign))
        raise ForeignClusterError(
            f"this node's data ({self._storage.data_dir}) is of cluster "
            f"{self.identity.cluster_id}, but its peers (nodes {nodes}) are of cluster "
            f"{' and '.join(theirs)}: it is not one of their members; to join them, start it "
            "on an empty directory and add it with `quorumlog members add`"
        )
