"""The cluster's hard state, as the controller group's log builds it: brokers, topics and
each partition's replica set with its revision. Who leads a partition is not here: each
partition elects its leader in its own group (see `controller.leaders`).

`ClusterState.apply(command, offset)` is the state machine: every node applies the
committed commands in log order and reaches the same state. A command that is no longer
valid when applied (a topic created twice by racing calls) changes nothing and says why.
The revision of a partition is the controller log offset of the command that last set
its replicas, so revisions grow along the log, across topics.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from quorumlog.controller.commands import (
    AddPartitions,
    AlterTopicConfig,
    Command,
    CreateTopic,
    DeleteTopic,
    EndRebalance,
    NameCluster,
    RegisterBroker,
    SetReplicas,
    StartRebalance,
    TrimPartition,
)
from quorumlog.controller.kafka_ids import derived_topic_id
from quorumlog.log.config import TIMESTAMP_TYPES, TopicSettings

CONTROLLER_GROUP = 0
DEFAULT_TOPIC = "default"
DEFAULT_GROUP = 1  # partition 0 of `default`, bootstrapped with the controller
TOPIC_NAME_CHARS_MAX = 200
PARTITIONS_MAX = 10_000  # per topic: each is a Raft group with its own files and timers
_NAME = re.compile(r"[A-Za-z0-9._-]+")


class TopicError(ValueError):
    """A topic call that can never succeed as asked (one line, for the user)."""


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: int
    address: str
    epoch: int  # grows each time the broker registers at a new address


@dataclass(frozen=True, slots=True)
class Partition:
    topic: str
    partition: int
    group_id: int
    replicas: tuple[int, ...]  # preferred leader first
    revision: int  # the controller offset that last set the replicas
    created_offset: int  # the controller offset that made the group (a create or a grow)
    log_start: int = 0  # where an operator's trim starts its readers (TrimPartition)
    created_replicas: tuple[int, ...] = ()  # the set its group was made on (a create or a grow)


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    partitions: tuple[Partition, ...]
    settings: TopicSettings
    created_offset: int
    topic_id: str  # Kafka's topic id, a UUID's text (controller/kafka_ids.py)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas)


@dataclass(frozen=True, slots=True)
class RebalanceMark:
    """Where rebalancing stands. A rebalance is under way from `started_offset` (the
    controller offset of its StartRebalance) until `ended_offset` passes it; `brokers` are
    those the last one balanced over (None: not yet known), so a new leader sees a join."""

    brokers: tuple[int, ...] | None = None
    started_offset: int = -1
    ended_offset: int = -1
    reason: str = ""

    @property
    def under_way(self) -> bool:
        return self.started_offset > self.ended_offset


@dataclass(slots=True)
class ClusterState:
    brokers: dict[int, Broker] = field(default_factory=dict)
    topics: dict[str, Topic] = field(default_factory=dict)
    next_group_id: int = CONTROLLER_GROUP + 1
    applied_offset: int = -1
    cluster_id: str | None = None
    rebalance: RebalanceMark = field(default_factory=RebalanceMark)
    # Every node's last address, brokers and those that left: a partition placed on a node
    # that left before another of its replicas was made there still starts from the set
    # it was placed on (actors/cluster/controller.py), the same on every replica.
    addresses: dict[int, str] = field(default_factory=dict)

    @classmethod
    def genesis(cls) -> ClusterState:
        """A new cluster: the topic `default`, one partition on every voter (its replicas
        follow the brokers, see `set_brokers`)."""
        default = Partition(DEFAULT_TOPIC, 0, DEFAULT_GROUP, (), 0, 0)
        topic = Topic(
            DEFAULT_TOPIC, (default,), TopicSettings(), 0, derived_topic_id(DEFAULT_TOPIC, 0)
        )
        return cls(topics={DEFAULT_TOPIC: topic}, next_group_id=DEFAULT_GROUP + 1)

    def set_brokers(self, addresses: Mapping[int, str]) -> None:
        """The brokers are the voters of the controller's committed configuration (its
        config batches are in the controller's log); an address change bumps the epoch."""
        brokers = {}
        self.addresses.update(addresses)
        for node_id, address in sorted(addresses.items()):
            known = self.brokers.get(node_id)
            epoch = 0 if known is None else known.epoch + (known.address != address)
            brokers[node_id] = Broker(node_id, address, epoch)
        self.brokers = brokers
        default = self.topics.get(DEFAULT_TOPIC)
        if default is not None:
            (partition,) = default.partitions
            moved = replace(partition, replicas=tuple(sorted(brokers)))
            self.topics[DEFAULT_TOPIC] = replace(default, partitions=(moved,))

    def partition(self, topic: str, partition: int) -> Partition:
        found = self.topics.get(topic)
        if found is None:
            raise TopicError(f"unknown topic {topic!r}")
        if not 0 <= partition < len(found.partitions):
            raise TopicError(
                f"topic {topic!r} has no partition {partition} (it has {len(found.partitions)})"
            )
        return found.partitions[partition]

    def groups_of(self, node_id: int) -> list[Partition]:
        """The partitions with a replica on `node_id`, in group order."""
        return sorted(
            (p for t in self.topics.values() for p in t.partitions if node_id in p.replicas),
            key=lambda p: p.group_id,
        )

    def replica_sets(self) -> list[tuple[int, ...]]:
        return [p.replicas for t in self.topics.values() for p in t.partitions]

    def was_moved(self, partition: Partition) -> bool:
        """Whether the partition's replicas changed since its group was made (a replica
        placed by a move joins its group; one placed at creation bootstraps it)."""
        return partition.revision != partition.created_offset

    def apply(self, command: Command, offset: int) -> str | None:
        """Apply a committed command at controller log `offset`; returns why it changed
        nothing, or None."""
        assert offset > self.applied_offset, (offset, self.applied_offset)
        self.applied_offset = offset
        match command:
            case RegisterBroker(node_id, address):
                self.addresses[node_id] = address
                known = self.brokers.get(node_id)
                if known is None:
                    self.brokers[node_id] = Broker(node_id, address, 0)
                elif known.address != address:
                    self.brokers[node_id] = Broker(node_id, address, known.epoch + 1)
            case CreateTopic(name, replicas):
                if name in self.topics:
                    return f"topic {name!r} exists"
                settings = TopicSettings.from_wire(
                    {
                        "retention_bytes": command.retention_bytes,
                        "retention_ms": command.retention_ms,
                        "timestamp_type": command.timestamp_type,
                        "segment_bytes_max": command.segment_bytes_max,
                        "max_message_bytes": command.max_message_bytes,
                        **(command.settings or {}),
                    }
                )
                topic_id = command.topic_id or derived_topic_id(name, offset)
                self.topics[name] = Topic(name, (), settings, offset, topic_id)
                self._add_partitions(name, replicas, offset)
            case AddPartitions(name, first, replicas):
                if name not in self.topics:
                    return f"unknown topic {name!r}"
                if len(self.topics[name].partitions) != first:
                    return f"topic {name!r} has {len(self.topics[name].partitions)} partitions now"
                self._add_partitions(name, replicas, offset)
            case AlterTopicConfig(name, settings):
                topic = self.topics.get(name)
                if topic is None:
                    return f"unknown topic {name!r}"
                self.topics[name] = replace(topic, settings=TopicSettings.from_wire(settings))
            case DeleteTopic(name):
                if self.topics.pop(name, None) is None:
                    return f"unknown topic {name!r}"
            case SetReplicas(topic, index, replicas):
                try:
                    old = self.partition(topic, index)
                except TopicError as exc:
                    return str(exc)
                self._put(replace(old, replicas=tuple(replicas), revision=offset))
            case TrimPartition(topic, index, before):
                try:
                    old = self.partition(topic, index)
                except TopicError as exc:
                    return str(exc)
                if before <= old.log_start:
                    return f"{topic}/{index} starts at {old.log_start} already"
                self._put(replace(old, log_start=before))
            case StartRebalance(reason):
                if self.rebalance.under_way:
                    return "a rebalance is under way"
                self.rebalance = replace(self.rebalance, started_offset=offset, reason=reason)
            case EndRebalance(brokers):
                if self.rebalance.brokers is not None and not self.rebalance.under_way:
                    return "no rebalance is under way"
                self.rebalance = replace(
                    self.rebalance, brokers=tuple(brokers), ended_offset=offset
                )
            case NameCluster(cluster_id, addresses):
                if self.cluster_id is not None:
                    return f"the cluster is named {self.cluster_id} already"
                self.cluster_id = cluster_id
                for node_id, address in addresses:
                    # Later addresses (a restart sets the current members' first) stand.
                    self.addresses.setdefault(node_id, address)
        return None

    def _put(self, partition: Partition) -> None:
        found = self.topics[partition.topic]
        partitions = list(found.partitions)
        partitions[partition.partition] = partition
        self.topics[partition.topic] = replace(found, partitions=tuple(partitions))

    def _add_partitions(
        self, name: str, replicas: tuple[tuple[int, ...], ...], offset: int
    ) -> None:
        """New partitions numbered on from the topic's last, each a new group that its
        replicas bootstrap together (a grow places them as a create does)."""
        topic = self.topics[name]
        first = len(topic.partitions)
        added = [
            Partition(
                name,
                first + i,
                self.next_group_id + i,
                tuple(r),
                revision=offset,
                created_offset=offset,
                created_replicas=tuple(r),
            )
            for i, r in enumerate(replicas)
        ]
        self.next_group_id += len(added)
        self.topics[name] = replace(topic, partitions=topic.partitions + tuple(added))


def check_topic_name(name: str, internal: bool = False) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= TOPIC_NAME_CHARS_MAX:
        raise TopicError(f"a topic name has 1-{TOPIC_NAME_CHARS_MAX} characters")
    if not _NAME.fullmatch(name):
        raise TopicError(f"bad topic name {name!r}: use only letters, digits, '.', '_' and '-'")
    if name.startswith("__") and not internal:
        raise TopicError(f"topic names starting with '__' are internal: {name!r}")
    return name


def check_create(
    state: ClusterState,
    name: str,
    partitions: int,
    replicas: int,
    retention_bytes: int | None = None,
    retention_ms: int | None = None,
    timestamp_type: str = "create",
    internal: bool = False,
) -> None:
    """Why a topic cannot be created as asked, if it cannot (placement checks the rest).
    `internal`: a node creates one of the cluster's own topics (`__groups`)."""
    check_topic_name(name, internal)
    if name in state.topics:
        raise TopicError(f"topic {name!r} exists")
    if not isinstance(partitions, int) or not 1 <= partitions <= PARTITIONS_MAX:
        raise TopicError(f"a topic has 1-{PARTITIONS_MAX} partitions, not {partitions}")
    if not isinstance(replicas, int) or replicas < 1:
        raise TopicError(f"a partition has at least one replica, not {replicas}")
    if replicas > len(state.brokers):
        raise TopicError(
            f"{replicas} replicas asked for but the cluster has {len(state.brokers)} nodes"
        )
    for label, value in (("retention bytes", retention_bytes), ("retention ms", retention_ms)):
        if value is not None and (not isinstance(value, int) or (value < 1 and value != -1)):
            raise TopicError(f"{label} must be a positive integer (or -1: no limit), not {value}")
    if timestamp_type not in TIMESTAMP_TYPES:
        raise TopicError(
            f"timestamps are one of {', '.join(TIMESTAMP_TYPES)}, not {timestamp_type!r}"
        )


def check_delete(state: ClusterState, name: str) -> None:
    if name == DEFAULT_TOPIC:
        raise TopicError("the topic 'default' cannot be deleted: calls that name no topic use it")
    if name.startswith("__"):
        raise TopicError(f"the topic {name!r} is the cluster's own: it cannot be deleted")
    if name not in state.topics:
        raise TopicError(f"unknown topic {name!r}")
