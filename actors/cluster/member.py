"""A node as the services it runs see it (a `Node` is one): who it is, its view of the
cluster, its replicas, a call to a peer. The controller's calls, the coordinator, the
Kafka listener, the mover take this, not the node, so that each can be read and imported
without it (tests/test_layers.py: only actors/node/ and the programs that make a node
import `Node`); one that needs more names it in a protocol of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from quorumlog.actors.cluster.controller import ControllerActor
    from quorumlog.actors.cluster.removal import RemovalWatch
    from quorumlog.actors.replica.actor import ReplicaActor
    from quorumlog.actors.services.cluster_guard import ClusterGuard
    from quorumlog.raft.settings import RaftSettings
    from quorumlog.transport.messages import ErrorReply, Message


@runtime_checkable
class ClusterMember(Protocol):
    id: int
    settings: RaftSettings
    controller_actor: ControllerActor  # the cluster's state and leaders, as this node knows them
    controller: ReplicaActor  # this node's replica of the controller group
    default_group: ReplicaActor  # its replica of `default`, which follows the cluster's members
    groups: Mapping[int, ReplicaActor]  # every replica it holds, by group id
    removal: RemovalWatch  # whether the cluster still counts it
    cluster: ClusterGuard  # the cluster's identity

    def replica(self, topic: str, partition: int) -> ReplicaActor | None:
        """Its replica of a partition, if the controller still places it here."""

    def is_member(self) -> bool:
        """Whether the cluster's configuration, as this node last saw it, counts it."""

    def not_a_member(self) -> ErrorReply:
        """The answer of a node the cluster no longer counts."""

    def address_of(self, node_id: int | None) -> str | None: ...

    def peer_alive(self, peer: int) -> bool:
        """Whether this node has a connection to the peer's (a crashed node's closes)."""

    async def request(self, peer: int, message: Message) -> Message: ...
