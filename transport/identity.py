"""Which cluster a node belongs to, as its handshakes state and check it.

A cluster names itself once, when first formed: its controller's leader appends a random
id to the controller's log and every node records it in its data directory. Each handshake
between two nodes carries both ids; nodes of different clusters refuse each other on both
sides, before any Raft message passes (a data directory copied from another cluster would
otherwise answer for a member with the other cluster's log and votes). A node that has no
id yet (a new one, or one from before ids) accepts any peer, and clients carry none.

The transport only states and checks; what to make of peers of another cluster is the
node's call (`on_foreign`: the node whose configured majority refuses it is the one that
does not belong, actors/node/node.py).
"""

from __future__ import annotations

from collections.abc import Callable


class ClusterIdentity:
    def __init__(self, cluster_id: str | None = None) -> None:
        self.cluster_id = cluster_id
        # Peers that proved, in a handshake, to be of another cluster: id -> their cluster.
        self.foreign: dict[int, str] = {}
        self.on_foreign: Callable[[], None] | None = None

    def differs(self, theirs: str | None) -> bool:
        return self.cluster_id is not None and theirs is not None and theirs != self.cluster_id

    def note_foreign(self, peer_id: int | None, theirs: str) -> None:
        if peer_id is None or self.foreign.get(peer_id) == theirs:
            return
        self.foreign[peer_id] = theirs
        if self.on_foreign is not None:
            self.on_foreign()

    def refusal(self, peer_id: int | None, theirs: str) -> str:
        return f"node {peer_id} is of cluster {theirs}, not of this node's {self.cluster_id}"
