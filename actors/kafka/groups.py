"""Kafka's consumer groups (the classic protocol) on quorumlog's coordinators.

A group's coordinator is the node that leads its `__groups` partition, as for native
groups, and its committed offsets are the same durable positions (`ResetOffsets` commands
in `__groups`, acks=quorum): `group describe` shows them and a native consumer resumes from
them. What the classic protocol adds is kept in memory on the coordinator, as Kafka keeps
it between rebalances: the members, the generation, and the assignment the leader member
computed (client-side assignors: range, round robin, cooperative sticky, ...). A new
coordinator starts with no members; they find it, rejoin and resume from the committed
offsets. A group is used by Kafka clients or native ones at a time, not both: a Kafka
commit to a group with native members is refused, as is a join.

Rebalance: a join moves the group to "PreparingRebalance"; it completes when every known
member has joined again, or when the longest rebalance timeout has passed (the others are
dropped). Then each member gets the new generation and the leader gets everyone's
metadata; its SyncGroup hands out the assignment ("CompletingRebalance", then "Stable").
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog
import trio
from kio.index import load_entity_schema
from kio.schema.errors import ErrorCode as K
from kio.serial import entity_reader
from kio.serial.errors import DecodeError
from kio.static.constants import EntityType

from quorumlog.actors.coordinator.coordination import Coordination
from quorumlog.actors.kafka.cluster import KafkaBrokers, host_port
from quorumlog.actors.kafka.transactions import TRANSACTION, KafkaTransactions
from quorumlog.actors.replica.commands import PassBack
from quorumlog.actors.replica.mailbox import Pending
from quorumlog.actors.replica.read_index import end_offset
from quorumlog.consumers.state import (
    GROUPS_TOPIC,
    DeleteOffsets,
    ResetOffsets,
    TxnOffsets,
    groups_partition,
)
from quorumlog.transport.messages import EndOffsetReply

if TYPE_CHECKING:
    from quorumlog.actors.kafka.consumer_groups import ConsumerGroups
    from quorumlog.actors.kafka.host import KafkaHost

logger = structlog.get_logger("quorumlog.kafka")

EXPIRE_EVERY_S = 0.25
CONSUMER = "consumer"  # the protocol type of Kafka's consumers (Connect's is "connect")
# Each version of a consumer's subscription (newer ones only add fields at the end).
SUBSCRIPTIONS = tuple(
    load_entity_schema("consumer_protocol_subscription", v, EntityType.data) for v in range(4)
)
GROUP = 0  # FindCoordinator's key type of a consumer group
EMPTY, PREPARING, COMPLETING, STABLE = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
)


class GroupFailure(Exception):
    def __init__(self, error: K):
        self.error = error


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocols: list[tuple[str, bytes]]
    last_seen: float
    assignment: bytes = b""
    joining: Pending | None = None  # its JoinGroup, waiting for the rebalance to complete
    syncing: Pending | None = None  # its SyncGroup, waiting for the leader's


@dataclass(slots=True)
class KafkaGroup:
    name: str
    term: int  # of the coordination it lives in: a new leader's starts empty
    protocol_type: str = ""
    state: str = EMPTY
    generation: int = 0
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    changed: trio.Event = field(default_factory=trio.Event)

    def poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


class KafkaGroups:
    def __init__(
        self,
        node: KafkaHost,
        brokers: KafkaBrokers,
        rng: random.Random,
        transactions: KafkaTransactions,
    ):
        self.node = node
        self.transactions = transactions
        self.brokers = brokers
        self.rng = rng
        self.groups: dict[str, KafkaGroup] = {}
        self._nursery: trio.Nursery | None = None
        # The consumer protocol's groups (actors/kafka/consumer_groups.py), once it sets this.
        self.consumer_protocol: ConsumerGroups | None = None

    def members_of(self, name: str) -> int:
        """How many Kafka members the group has here (its coordinator keeps them)."""
        group = self.groups.get(name)
        return 0 if group is None else len(group.members)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            while True:
                await trio.sleep(EXPIRE_EVERY_S)
                self._expire_sessions()

    # ------------------------------------------------------------------- coordinator

    async def find_coordinator(self, request, version: int) -> dict:
        key_type = getattr(request, "key_type", GROUP)
        if key_type == TRANSACTION:
            return await self.transactions.find_coordinator(request.key)
        if key_type != GROUP:
            return {
                "error_code": K.invalid_request,
                "error_message": f"unknown key type {key_type}",
            }
        try:
            topic = await self.node.coordinator.groups_topic()
        except PassBack:
            return {"error_code": K.coordinator_not_available, "node_id": -1}
        partition = groups_partition(request.key, len(topic.partitions))
        leader = self.node.controller_actor.leader_hint(GROUPS_TOPIC, partition)
        address = (await self.brokers.known()).get(leader)
        if address is None:
            return {"error_code": K.coordinator_not_available, "node_id": -1}
        host, port = host_port(address)
        return {"node_id": leader, "host": host, "port": port}

    async def _coordination(self, name: str) -> Coordination:
        coordinator = self.node.coordinator
        try:
            return await coordinator.current(await coordinator.partition_of(name))
        except PassBack:
            raise GroupFailure(K.not_coordinator) from None

    async def group(self, name: str) -> tuple[Coordination, KafkaGroup]:
        c = await self._coordination(name)
        group = self.groups.get(name)
        if group is None or group.term != c.term:
            group = self.groups[name] = KafkaGroup(name, c.term)
        return c, group

    # ------------------------------------------------------------------- membership

    async def join_group(self, request, version: int) -> dict:
        if not request.group_id:
            return {"error_code": K.invalid_group_id, "member_id": request.member_id}
        try:
            c, group = await self.group(request.group_id)
            native = c.state.groups.get(group.name)
            if native is not None and native.members:
                raise GroupFailure(K.inconsistent_group_protocol)
            if self.consumer_protocol and self.consumer_protocol.members_of(group.name):
                raise GroupFailure(K.inconsistent_group_protocol)
            member = self._joining_member(group, request, version)
        except GroupFailure as failure:
            return {"error_code": failure.error, "member_id": request.member_id}
        waiter = member.joining = Pending()
        if group.state != PREPARING:
            self._prepare_rebalance(group)
        group.poke()
        return await waiter.wait()

    def _joining_member(self, group: KafkaGroup, request, version: int) -> Member:
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        if not protocols or not request.protocol_type:  # as Kafka: nothing to agree on
            raise GroupFailure(K.inconsistent_group_protocol)
        if group.members and request.protocol_type != group.protocol_type:
            raise GroupFailure(K.inconsistent_group_protocol)
        others = [m for m in group.members.values() if m.member_id != request.member_id]
        names = {n for n, _ in protocols}
        if others and not names & set.intersection(*({n for n, _ in m.protocols} for m in others)):
            raise GroupFailure(K.inconsistent_group_protocol)
        session_s = request.session_timeout.total_seconds()
        rebalance = getattr(request, "rebalance_timeout", request.session_timeout).total_seconds()
        now = trio.current_time()
        member_id = request.member_id
        if not member_id:
            member_id = f"{request.group_id}-{self.rng.getrandbits(64):016x}"
        elif member_id not in group.members:
            raise GroupFailure(K.unknown_member_id)
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = Member(member_id, "", session_s, rebalance, [], now)
        member.protocols = protocols
        member.session_timeout_s, member.rebalance_timeout_s = session_s, max(rebalance, session_s)
        member.last_seen = now
        group.protocol_type = request.protocol_type
        return member

    def _prepare_rebalance(self, group: KafkaGroup) -> None:
        group.state = PREPARING
        for member in group.members.values():
            if member.syncing is not None:
                member.syncing.resolve({"error_code": K.rebalance_in_progress})
                member.syncing = None
        assert self._nursery is not None
        self._nursery.start_soon(self._rebalance, group)

    async def _rebalance(self, group: KafkaGroup) -> None:
        """Until every member joined again or the longest rebalance timeout passed."""
        timeout = max((m.rebalance_timeout_s for m in group.members.values()), default=0.0)
        with trio.move_on_after(timeout):
            while any(m.joining is None for m in group.members.values()):
                await group.changed.wait()
        if self.groups.get(group.name) is not group or group.state != PREPARING:
            return
        for member in [m for m in group.members.values() if m.joining is None]:
            del group.members[member.member_id]  # did not rejoin in time
        if not group.members:
            group.state, group.generation = EMPTY, group.generation + 1
            return
        group.generation += 1
        group.protocol = _chosen_protocol(group)
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = COMPLETING
        for member in group.members.values():
            answer = {
                "generation_id": group.generation,
                "protocol_name": group.protocol,
                "leader": group.leader,
                "member_id": member.member_id,
            }
            if member.member_id == group.leader:
                answer["members"] = [
                    {"member_id": m.member_id, "metadata": dict(m.protocols)[group.protocol]}
                    for m in group.members.values()
                ]
            assert member.joining is not None
            member.joining.resolve(answer)
            member.joining = None
        logger.info(
            "kafka_group_rebalanced",
            group=group.name,
            generation=group.generation,
            members=len(group.members),
        )

    async def _seen(self, request) -> tuple[KafkaGroup, Member]:
        """The group and member a SyncGroup or Heartbeat names (GroupFailure if the member
        or its generation is not the group's), noted alive."""
        _, group = await self.group(request.group_id)
        member = _member(group, request.member_id, request.generation_id)
        member.last_seen = trio.current_time()
        return group, member

    async def sync_group(self, request, version: int) -> dict:
        try:
            group, member = await self._seen(request)
        except GroupFailure as failure:
            return {"error_code": failure.error}
        if group.state == PREPARING:
            return {"error_code": K.rebalance_in_progress}
        if group.state == STABLE:
            return {"assignment": member.assignment}
        if member.member_id == group.leader:
            given = {a.member_id: bytes(a.assignment) for a in request.assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
                if m.syncing is not None:
                    m.syncing.resolve({"assignment": m.assignment})
                    m.syncing = None
            group.state = STABLE
            return {"assignment": member.assignment}
        waiter = member.syncing = Pending()
        return await waiter.wait()

    async def heartbeat(self, request, version: int) -> dict:
        try:
            group, _ = await self._seen(request)
        except GroupFailure as failure:
            return {"error_code": failure.error}
        return {"error_code": K.rebalance_in_progress if group.state == PREPARING else K.none}

    async def leave_group(self, request, version: int) -> dict:
        ids = [m.member_id for m in request.members] if version >= 3 else [request.member_id]
        try:
            _, group = await self.group(request.group_id)
        except GroupFailure as failure:
            return {"error_code": failure.error}
        results = []
        for member_id in ids:
            member = group.members.pop(member_id, None)
            if member is not None and member.joining is not None:
                member.joining.resolve({"error_code": K.unknown_member_id})
            error = K.none if member is not None else K.unknown_member_id
            results.append({"member_id": member_id, "error_code": error})
        if len(ids) == 1 and results[0]["error_code"] != K.none:
            return {"error_code": K.unknown_member_id, "members": results}
        self._members_left(group)
        return {"members": results}

    def _members_left(self, group: KafkaGroup) -> None:
        if not group.members:
            group.state, group.generation = EMPTY, group.generation + 1
            group.poke()
        elif group.state != PREPARING:
            self._prepare_rebalance(group)
        else:
            group.poke()

    def _expire_sessions(self) -> None:
        now = trio.current_time()
        for group in self.groups.values():
            expired = [
                m.member_id
                for m in group.members.values()
                if m.joining is None and now - m.last_seen > m.session_timeout_s
            ]
            for member_id in expired:
                del group.members[member_id]
                logger.info("kafka_member_expired", group=group.name, member=member_id)
            if expired:
                self._members_left(group)

    # ------------------------------------------------------------------- offsets

    async def offset_commit(self, request, version: int) -> dict:
        generation = getattr(request, "generation_id_or_member_epoch", None)
        if generation is None:
            generation = request.generation_id
        offsets = [
            (t.name, p.partition_index, p.committed_offset)
            for t in request.topics
            for p in t.partitions
        ]
        try:
            c, group = await self.group(request.group_id)
            consumers = self.consumer_protocol
            if consumers is not None and consumers.members_of(group.name):
                committed = [(topic, partition) for topic, partition, _ in offsets]
                refusal = consumers.commit_refusal(
                    group.name, request.member_id, generation, version, committed
                )
                if refusal is not None:
                    raise GroupFailure(refusal)
            elif generation >= 0 or request.member_id or group.members:
                _member(group, request.member_id, generation)
                if group.state == COMPLETING:
                    raise GroupFailure(K.rebalance_in_progress)
            error = await self._commit(c, group.name, offsets)
        except GroupFailure as failure:
            error = failure.error
        return _each_partition(request.topics, error)

    async def txn_offset_commit(self, request, version: int) -> dict:
        """Positions a transaction commits: held apart until it ends (its marker for the
        group's partition: EndTxnOffsets), once its coordinator says the transaction has
        the group's partition (AddOffsetsToTxn came first)."""
        offsets = [
            (t.name, p.partition_index, p.committed_offset)
            for t in request.topics
            for p in t.partitions
        ]
        name = request.group_id
        try:
            c = await self._coordination(name)
            error = self._checked_offsets(offsets)
            if error is K.none:
                error = await self.transactions.verify(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    GROUPS_TOPIC,
                    c.partition,
                )
            if error is K.none:
                async with c.lock(name):
                    why = await c.propose(TxnOffsets(name, request.producer_id, tuple(offsets)))
                error = K.none if why is None else K.unknown_server_error
        except GroupFailure as failure:
            error = failure.error
        return _each_partition(request.topics, error)

    def _checked_offsets(self, offsets: list) -> K:
        topics = self.node.controller_actor.state.topics
        for topic, partition, offset in offsets:
            found = topics.get(topic)
            if found is None or not 0 <= partition < len(found.partitions):
                return K.unknown_topic_or_partition
            if offset < 0:
                return K.invalid_commit_offset_size
        return K.none

    async def _commit(self, c: Coordination, name: str, offsets: list) -> K:
        error = self._checked_offsets(offsets)
        if error is not K.none:
            return error
        async with c.lock(name):
            why = await c.propose(ResetOffsets(name, tuple(offsets)))
        return K.none if why is None else K.inconsistent_group_protocol

    async def offset_fetch(self, request, version: int) -> dict:
        try:
            c = await self._coordination(request.group_id)
            confirmed = await end_offset(c.replica, True)  # a deposed coordinator may lag
            if not isinstance(confirmed, EndOffsetReply):
                raise GroupFailure(K.not_coordinator)
        except GroupFailure as failure:
            return {"error_code": failure.error, "topics": []}
        c.catch_up()
        native = c.state.groups.get(request.group_id)
        committed = native.committed if native is not None else {}
        # v7: a read_committed consumer asks that no open transaction hold a position of
        # the partition (UNSTABLE_OFFSET_COMMIT, retriable, until it ends).
        held = (
            {tp for positions in native.pending.values() for tp in positions}
            if native is not None and getattr(request, "require_stable", False)
            else set()
        )
        if request.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(committed):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in request.topics}
        return {
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": committed.get((topic, p), -1),
                            "metadata": "",
                        }
                        if (topic, p) not in held
                        else {
                            "partition_index": p,
                            "committed_offset": -1,
                            "metadata": "",
                            "error_code": K.unstable_offset_commit,
                        }
                        for p in partitions
                    ],
                }
                for topic, partitions in wanted.items()
            ]
        }

    async def offset_delete(self, request, version: int) -> dict:
        """Kafka's OffsetDelete, as Kafka's classic groups answer it: refused for the whole
        group while it has members of another protocol type than "consumer", and for each
        partition of a topic an active member subscribes to."""
        if not request.group_id:
            return {"error_code": K.invalid_group_id}
        try:
            c, group = await self.group(request.group_id)
        except GroupFailure as failure:
            return {"error_code": failure.error}
        native = c.state.groups.get(group.name)
        if native is None and not group.members:
            return {"error_code": K.group_id_not_found}
        if group.members and group.protocol_type != CONSUMER:
            return {"error_code": K.non_empty_group}
        subscribed = _subscriptions(group)
        if native is not None and native.members:
            subscribed = None if subscribed is None else subscribed | set(native.topics)
        topics = self.node.controller_actor.state.topics
        answers: dict[str, dict[int, K]] = {}
        for t in request.topics:
            for p in t.partitions:
                found = topics.get(t.name)
                if found is None or not 0 <= p.partition_index < len(found.partitions):
                    error = K.unknown_topic_or_partition
                elif subscribed is None or t.name in subscribed:
                    error = K.group_subscribed_to_topic
                else:
                    error = K.none
                answers.setdefault(t.name, {})[p.partition_index] = error
        deleted = [(t, p) for t, ps in answers.items() for p, e in ps.items() if e is K.none]
        if native is not None and deleted:  # else no offset of the group is stored
            try:
                async with c.lock(group.name):
                    why = await c.propose(DeleteOffsets(group.name, tuple(deleted)))
            except PassBack:
                return {"error_code": K.not_coordinator}
            if why is not None:  # a native member came meanwhile
                for t, p in deleted:
                    answers[t][p] = K.group_subscribed_to_topic
        return {
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {"partition_index": p, "error_code": e} for p, e in partitions.items()
                    ],
                }
                for name, partitions in answers.items()
            ]
        }

    # ------------------------------------------------------------------- admin

    async def describe_groups(self, request, version: int) -> dict:
        out = []
        for name in request.groups:
            try:
                _, group = await self.group(name)
            except GroupFailure as failure:
                out.append({"group_id": name, "error_code": failure.error})
                continue
            out.append(
                {
                    "group_id": name,
                    "group_state": group.state if group.members else EMPTY,
                    "protocol_type": group.protocol_type,
                    "protocol_data": group.protocol,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "client_id": m.client_id,
                            "member_metadata": dict(m.protocols).get(group.protocol, b""),
                            "member_assignment": m.assignment,
                        }
                        for m in group.members.values()
                    ],
                }
            )
        return {"groups": out}

    async def list_groups(self, request, version: int) -> dict:
        """The groups this node coordinates: Kafka's with members (of either protocol), and
        every group whose offsets its `__groups` partitions hold."""
        names: dict[str, str] = {}
        for c in self.node.coordinator.coordinations.values():
            if c.replica.view.is_leader:
                for name in c.state.groups:
                    names[name] = "consumer"
        for name, group in self.groups.items():
            if group.members:
                names[name] = group.protocol_type
        if self.consumer_protocol is not None:
            for name, consumer_group in self.consumer_protocol.groups.items():
                if consumer_group.members:
                    names[name] = CONSUMER
        return {"groups": [{"group_id": n, "protocol_type": t} for n, t in sorted(names.items())]}


def _member(group: KafkaGroup, member_id: str, generation: int) -> Member:
    member = group.members.get(member_id)
    if member is None:
        raise GroupFailure(K.unknown_member_id)
    if generation != group.generation:
        raise GroupFailure(K.illegal_generation)
    return member


def _subscriptions(group: KafkaGroup) -> set[str] | None:
    """The topics the group's Kafka members subscribe to, from the subscription each sends
    with its protocols (Kafka's ConsumerProtocolSubscription); None if one cannot be read:
    then every topic counts as subscribed to."""
    topics: set[str] = set()
    for member in group.members.values():
        for name, metadata in member.protocols:
            if group.protocol and name != group.protocol:
                continue
            try:
                (version,) = struct.unpack_from(">h", metadata)
                schema = SUBSCRIPTIONS[min(max(version, 0), len(SUBSCRIPTIONS) - 1)]
                subscription, _ = entity_reader(schema)(metadata, 2)
            except (DecodeError, ValueError, IndexError, UnicodeDecodeError, struct.error):
                return None
            topics.update(subscription.topics)
    return topics


def _chosen_protocol(group: KafkaGroup) -> str:
    """The protocol every member supports that most members list first (Kafka's vote)."""
    members = list(group.members.values())
    common = set.intersection(*({n for n, _ in m.protocols} for m in members))
    votes: dict[str, int] = {}
    for m in members:
        first = next(n for n, _ in m.protocols if n in common)
        votes[first] = votes.get(first, 0) + 1
    return max(sorted(votes), key=lambda n: votes[n])


def _each_partition(topics, error: K) -> dict:
    """An OffsetCommit's or TxnOffsetCommit's answer: one error for every partition."""
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": error}
                    for p in t.partitions
                ],
            }
            for t in topics
        ]
    }
