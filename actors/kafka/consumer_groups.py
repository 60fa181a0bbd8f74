"""Kafka's consumer group protocol (KIP-848, `group.protocol=consumer`) on quorumlog's
coordinators: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

The coordinator computes each member's target assignment with a server-side assignor
(consumers/server_assignors.py) whenever the group's epoch moves (a member joins, leaves,
changes its subscription, or a subscribed topic's partition count changes), and each
member reconciles towards it in its heartbeats: it first revokes what its target no
longer has (its epoch stays), then gets the new epoch and what of its target no other
member still holds; a partition reaches its new owner once the previous owner's heartbeat
no longer lists it. A member leaves with epoch -1, or is dropped after its session timeout
without a heartbeat, or after its rebalance timeout without revoking what it must.

As for the classic protocol (actors/kafka/groups.py), membership is soft state in the
coordinator's memory and committed offsets are the group's durable ones in `__groups`: a
new coordinator answers UNKNOWN_MEMBER_ID and the members join again with epoch 0. A group
is of one protocol at a time: a heartbeat to a group with classic or native members gets
GROUP_ID_NOT_FOUND, a classic join to one with members of this protocol is refused.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog
import trio
from kio.schema.errors import ErrorCode as K

from quorumlog.actors.kafka.groups import GroupFailure, KafkaGroups
from quorumlog.consumers.assignment import TopicPartition
from quorumlog.consumers.server_assignors import ASSIGNORS, assign
from quorumlog.consumers.topic_patterns import PatternRefused, compile_pattern

if TYPE_CHECKING:
    from quorumlog.actors.cluster.member import ClusterMember

logger = structlog.get_logger("quorumlog.kafka")

# Kafka's group.consumer.heartbeat.interval.ms and group.consumer.session.timeout.ms, the
# same defaults; the environment sets others (tests use shorter ones).
HEARTBEAT_INTERVAL_MS = int(os.environ.get("QUORUMLOG_CONSUMER_HEARTBEAT_INTERVAL_MS", "5000"))
SESSION_TIMEOUT_MS = int(os.environ.get("QUORUMLOG_CONSUMER_SESSION_TIMEOUT_MS", "45000"))
EXPIRE_EVERY_S = 0.25
MATCHES_KEPT = 1024  # regex subscriptions whose matches are remembered
JOIN, LEAVE, STATIC_LEAVE = 0, -1, -2
MEMBER_ID_CHARS_MAX = 200
CONSUMER_MEMBER = 1  # ConsumerGroupDescribe's member type of this protocol's members
STABLE, UNREVOKED, UNRELEASED = "stable", "unrevoked_partitions", "unreleased_partitions"


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_s: float
    last_seen: float
    epoch: int = 0
    previous_epoch: int = -1
    instance_id: str | None = None
    rack_id: str | None = None
    topics: tuple[str, ...] = ()
    regex: str | None = None
    assignor: str | None = None
    state: str = STABLE
    assigned: frozenset[TopicPartition] = frozenset()  # given and not to be revoked
    revoking: frozenset[TopicPartition] = frozenset()  # given, to be revoked first
    owned: frozenset[TopicPartition] = frozenset()  # what its last heartbeat listed
    since: dict[TopicPartition, int] = field(default_factory=dict)  # epoch it was given at
    revoking_since: float = 0.0
    sent: tuple[int, frozenset[TopicPartition]] | None = None  # last assignment answered


@dataclass(slots=True)
class ConsumerGroup:
    name: str
    term: int  # of the coordination it lives in: a new leader's starts empty
    epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ASSIGNORS[0]
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    partitions_seen: dict[str, int] = field(default_factory=dict)  # of subscribed topics
    stale: bool = False  # its epoch moves on at the next assignment (once per change)

    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        if any(
            m.epoch != self.assignment_epoch or m.state != STABLE for m in self.members.values()
        ):
            return "Reconciling"
        return "Stable"


class Refused(Exception):
    def __init__(self, error: K, message: str):
        self.error, self.message = error, message


class ConsumerGroups:
    def __init__(self, node: ClusterMember, classic: KafkaGroups):
        self.node = node
        self.classic = classic
        self.groups: dict[str, ConsumerGroup] = {}
        # Each regex subscription's matches, and the topic names they were matched against.
        self._matches: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        classic.consumer_protocol = self

    def members_of(self, name: str) -> int:
        group = self.groups.get(name)
        return 0 if group is None else len(group.members)

    async def run(self) -> None:
        while True:
            await trio.sleep(EXPIRE_EVERY_S)
            self._expire()

    async def _group(self, name: str, create: bool = True) -> ConsumerGroup:
        """The group of this protocol named so (Refused if it is not or, unless `create`,
        if it does not exist yet)."""
        c, classic = await self.classic.group(name)  # GroupFailure if not its coordinator
        if classic.members:
            raise Refused(K.group_id_not_found, f"Group {name} is not a consumer group.")
        native = c.state.groups.get(name)
        if native is not None and native.members:
            raise Refused(K.group_id_not_found, f"Group {name} has quorumlog's native members.")
        group = self.groups.get(name)
        if group is None or group.term != c.term:
            if not create:
                raise Refused(K.group_id_not_found, f"Group {name} not found.")
            group = self.groups[name] = ConsumerGroup(name, c.term)
        return group

    # ------------------------------------------------------------------- heartbeat

    async def heartbeat(self, request, version: int, client: tuple[str, str] = ("", "")) -> dict:
        """`client`: its id and host, which describe shows."""
        try:
            _check(request, version)
            group = await self._group(request.group_id)
            member = self._member(group, request, client)
            if request.member_epoch in (LEAVE, STATIC_LEAVE):
                self._remove(group, member, "left")
                self._maybe_assign(group)
                return {"member_id": member.member_id, "member_epoch": request.member_epoch}
            owned = _owned(request, self._topic_names())
            if owned is not None:
                member.owned = owned
            self._update_subscription(group, member, request)
            self._maybe_assign(group)
            self._reconcile(group, member, trio.current_time())
            return self._answer(group, member, request)
        except GroupFailure as failure:
            return {"error_code": failure.error, "member_epoch": -1}
        except Refused as refused:
            return {"error_code": refused.error, "error_message": refused.message}

    def _member(self, group: ConsumerGroup, request, client: tuple[str, str]) -> ConsumerMember:
        now = trio.current_time()
        member_id = request.member_id
        member = group.members.get(member_id)
        if request.member_epoch == JOIN:
            if not member_id:  # version 0: the coordinator names it
                member_id = str(uuid.uuid4())
            if member is not None:  # it starts over: what it held is free again
                self._remove(group, member, "rejoined")
            timeout_s = request.rebalance_timeout.total_seconds()
            member = group.members[member_id] = ConsumerMember(member_id, *client, timeout_s, now)
            group.stale = True
            logger.info("kafka_consumer_joined", group=group.name, member=member_id)
        elif member is None:
            raise Refused(K.unknown_member_id, f"Member {member_id} is not in group {group.name}.")
        elif request.member_epoch > 0 and request.member_epoch != member.epoch:
            owned = _owned(request, self._topic_names())
            # Kafka's grace: the answer moving it to its epoch may have been lost.
            if (
                request.member_epoch != member.previous_epoch
                or owned is None
                or not owned <= member.assigned
            ):
                raise Refused(
                    K.fenced_member_epoch,
                    f"Member epoch {request.member_epoch} is not {member.epoch}.",
                )
        member.last_seen = now
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout.total_seconds() > 0:
            member.rebalance_timeout_s = request.rebalance_timeout.total_seconds()
        return member

    def _update_subscription(self, group: ConsumerGroup, member: ConsumerMember, request) -> None:
        changed = False
        if request.subscribed_topic_names is not None:
            topics = tuple(sorted(set(request.subscribed_topic_names)))
            changed |= topics != member.topics
            member.topics = topics
        if request.subscribed_topic_regex is not None:
            regex = request.subscribed_topic_regex or None
            changed |= regex != member.regex
            member.regex = regex
        if request.server_assignor is not None:
            member.assignor = request.server_assignor
            chosen = _chosen_assignor(group)
            changed |= chosen != group.assignor
            group.assignor = chosen
        group.stale |= changed

    def _subscriptions(self, group: ConsumerGroup) -> tuple[dict[str, set[str]], dict[str, int]]:
        """Each member's topics (its names and what its regex matches) and the partition
        count of every subscribed topic that exists."""
        topics = self.node.controller_actor.state.topics
        names = frozenset(topics)
        subscriptions: dict[str, set[str]] = {}
        for member in group.members.values():
            wanted = {t for t in member.topics if t in topics}
            if member.regex is not None:
                wanted |= self._matching(member.regex, names)
            subscriptions[member.member_id] = wanted
        counts = {t: len(topics[t].partitions) for s in subscriptions.values() for t in s}
        return subscriptions, counts

    def _matching(self, regex: str, names: frozenset[str]) -> frozenset[str]:
        """The topics `regex` matches, remembered until the topics change."""
        known = self._matches.get(regex)
        if known is None or known[0] != names:
            pattern = compile_pattern(regex)  # checked on arrival
            matched = frozenset(t for t in names if not t.startswith("__") and pattern.fullmatch(t))
            if len(self._matches) >= MATCHES_KEPT:
                self._matches.clear()
            known = self._matches[regex] = (names, matched)
        return known[1]

    def _maybe_assign(self, group: ConsumerGroup) -> None:
        subscriptions, counts = self._subscriptions(group)
        if counts != group.partitions_seen:  # a topic came, went or grew
            group.partitions_seen = counts
            group.stale = True
        if not group.stale:
            return
        group.epoch, group.stale = group.epoch + 1, False
        current = {m.member_id: m.assigned | m.revoking for m in group.members.values()}
        group.target = assign(group.assignor, subscriptions, counts, current)
        group.assignment_epoch = group.epoch
        logger.info(
            "kafka_consumer_group_assigned",
            group=group.name,
            epoch=group.epoch,
            members=len(group.members),
        )

    def _reconcile(self, group: ConsumerGroup, member: ConsumerMember, now: float) -> None:
        """Kafka's CurrentAssignmentBuilder: revoke first, then the new epoch with what of
        its target is free; what another member still holds comes in a later heartbeat."""
        target = group.target.get(member.member_id, frozenset())
        if member.state == UNREVOKED:
            if member.owned & member.revoking:
                return  # still revoking
            member.revoking = frozenset()
        if member.epoch < group.assignment_epoch:
            revoke = member.assigned - target
            if revoke:
                member.assigned -= revoke
                member.revoking, member.state, member.revoking_since = revoke, UNREVOKED, now
                return
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
        held = {
            tp for m in group.members.values() if m is not member for tp in m.assigned | m.revoking
        }
        member.assigned = frozenset(tp for tp in target if tp not in held)
        member.since = {tp: member.since.get(tp, member.epoch) for tp in member.assigned}
        member.state = STABLE if member.assigned == target else UNRELEASED

    def _answer(self, group: ConsumerGroup, member: ConsumerMember, request) -> dict:
        answer = {
            "member_id": member.member_id,
            "member_epoch": member.epoch,
            "heartbeat_interval": HEARTBEAT_INTERVAL_MS,
        }
        given = (member.epoch, member.assigned)
        owned = _owned(request, self._topic_names())
        if given != member.sent or (owned is not None and owned != member.assigned):
            member.sent = given
            answer["assignment"] = {"topic_partitions": self._topic_partitions(member.assigned)}
        return answer

    def _remove(self, group: ConsumerGroup, member: ConsumerMember, why: str) -> None:
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        group.stale = True
        logger.info("kafka_consumer_removed", group=group.name, member=member.member_id, why=why)

    def _expire(self) -> None:
        now = trio.current_time()
        for group in self.groups.values():
            try:
                self._expire_members(group, now)
            except Exception:  # a bug: this group's expiry only, never the listener
                logger.exception("kafka_consumer_expiry_failed", group=group.name)

    def _expire_members(self, group: ConsumerGroup, now: float) -> None:
        for member in list(group.members.values()):
            if now - member.last_seen > SESSION_TIMEOUT_MS / 1000:
                self._remove(group, member, "session timeout")
            elif (
                member.state == UNREVOKED
                and now - member.revoking_since > member.rebalance_timeout_s
            ):
                self._remove(group, member, "rebalance timeout")
        if group.stale:
            self._maybe_assign(group)  # at once: describe shows the new target

    # ------------------------------------------------------------------- offsets

    def commit_refusal(
        self, name: str, member_id: str, epoch: int, version: int, partitions: list
    ) -> K | None:
        """Why an OffsetCommit of `partitions` to `name` is refused if it is a group of this
        protocol with members (None if it may go on), as Kafka checks a member's epoch: its
        current one, or an earlier one at which it already held every partition committed."""
        group = self.groups.get(name)
        if group is None or not group.members:
            return None
        if epoch < 0 and not member_id:
            return K.unknown_member_id  # an admin's commit: only to an empty group
        member = group.members.get(member_id)
        if member is None:
            return K.unknown_member_id
        if version < 9:
            return K.unsupported_version  # as Kafka: this protocol's members commit with v9+
        if epoch > member.epoch:
            return K.stale_member_epoch
        if epoch < member.epoch and any(
            member.since.get(tp, epoch + 1) > epoch for tp in partitions
        ):
            return K.stale_member_epoch
        return None

    # ------------------------------------------------------------------- describe

    async def describe(self, request, version: int) -> dict:
        out = []
        for name in request.group_ids:
            try:
                group = await self._group(name, create=False)
            except GroupFailure as failure:
                out.append(_described_error(name, failure.error, None))
                continue
            except Refused as refused:
                out.append(_described_error(name, refused.error, refused.message))
                continue
            out.append(
                {
                    "group_id": name,
                    "group_state": group.state(),
                    "group_epoch": group.epoch,
                    "assignment_epoch": group.assignment_epoch,
                    "assignor_name": group.assignor,
                    "members": [self._described(group, m) for m in group.members.values()],
                }
            )
        return {"groups": out}

    def _described(self, group: ConsumerGroup, member: ConsumerMember) -> dict:
        names = self._topic_partitions
        return {
            "member_id": member.member_id,
            "instance_id": member.instance_id,
            "rack_id": member.rack_id,
            "member_epoch": member.epoch,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "subscribed_topic_names": member.topics,
            "subscribed_topic_regex": member.regex,
            "assignment": {"topic_partitions": names(member.assigned, with_names=True)},
            "target_assignment": {
                "topic_partitions": names(
                    group.target.get(member.member_id, frozenset()), with_names=True
                )
            },
            "member_type": CONSUMER_MEMBER,
        }

    # ------------------------------------------------------------------- topic ids

    def _topic_names(self) -> dict[uuid.UUID, str]:
        topics = self.node.controller_actor.state.topics
        return {uuid.UUID(t.topic_id): name for name, t in topics.items() if t.topic_id}

    def _topic_partitions(
        self, tps: frozenset[TopicPartition], with_names: bool = False
    ) -> list[dict]:
        topics = self.node.controller_actor.state.topics
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(tps):
            by_topic.setdefault(topic, []).append(partition)
        out = []
        for topic, partitions in by_topic.items():
            found = topics.get(topic)
            if found is None or not found.topic_id:
                continue  # deleted meanwhile: the next assignment drops it
            entry = {"topic_id": uuid.UUID(found.topic_id), "partitions": partitions}
            if with_names:
                entry["topic_name"] = topic
            out.append(entry)
        return out


def _check(request, version: int) -> None:
    """Kafka's checks of a heartbeat's fields, with its words."""
    if not request.group_id:
        raise Refused(K.invalid_request, "GroupId can't be empty.")
    if len(request.member_id) > MEMBER_ID_CHARS_MAX:
        raise Refused(K.invalid_request, "MemberId is too long.")
    if request.member_epoch == JOIN:
        if version >= 1 and not request.member_id:
            raise Refused(K.invalid_request, "MemberId can't be empty.")
        if request.rebalance_timeout.total_seconds() <= 0:
            raise Refused(
                K.invalid_request, "RebalanceTimeoutMs must be provided in first request."
            )
        if request.topic_partitions is None or request.topic_partitions:
            raise Refused(K.invalid_request, "TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise Refused(
                K.invalid_request,
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
            )
    elif not request.member_id:
        raise Refused(K.invalid_request, "MemberId can't be empty.")
    elif request.member_epoch < STATIC_LEAVE:
        raise Refused(K.invalid_request, f"MemberEpoch {request.member_epoch} is invalid.")
    if request.server_assignor is not None and request.server_assignor not in ASSIGNORS:
        raise Refused(
            K.unsupported_assignor,
            f"ServerAssignor {request.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(ASSIGNORS)}.",
        )
    if request.subscribed_topic_regex:
        try:
            compile_pattern(request.subscribed_topic_regex)
        except PatternRefused as why:
            raise Refused(
                K.invalid_regular_expression,
                f"SubscribedTopicRegex {request.subscribed_topic_regex} is not a valid regular "
                f"expression: {why}",
            ) from None


def _owned(request, names: dict[uuid.UUID, str]) -> frozenset[TopicPartition] | None:
    """The partitions a heartbeat says its member holds (None: unchanged since the last)."""
    if request.topic_partitions is None:
        return None
    return frozenset(
        (names[t.topic_id], p)
        for t in request.topic_partitions
        if t.topic_id in names
        for p in t.partitions
    )


def _chosen_assignor(group: ConsumerGroup) -> str:
    """The assignor most members name (Kafka's rule), the default if none does."""
    named = [m.assignor for m in group.members.values() if m.assignor]
    if not named:
        return ASSIGNORS[0]
    return max(sorted(set(named)), key=named.count)


def _described_error(name: str, error: K, message: str | None) -> dict:
    return {
        "group_id": name,
        "error_code": error,
        "error_message": message,
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
    }
