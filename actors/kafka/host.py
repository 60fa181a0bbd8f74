"""What the Kafka listener needs of its node (a `Node` is one): a cluster member, with its
consumer groups' and transactions' coordinators and its storage's defaults, and where the listener says how
many members its own Kafka groups count (the node's `status`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from quorumlog.actors.cluster.member import ClusterMember

if TYPE_CHECKING:
    from quorumlog.actors.coordinator.coordinator import Coordinator
    from quorumlog.actors.coordinator.txn_coordinator import TxnCoordinator
    from quorumlog.actors.services.storage import NodeStorage


@runtime_checkable
class KafkaHost(ClusterMember, Protocol):
    coordinator: Coordinator
    txn_coordinator: TxnCoordinator
    storage: NodeStorage
    kafka_members: Callable[[str], int]  # a group's members, set by the listener
