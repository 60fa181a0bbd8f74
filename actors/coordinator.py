"""The group coordinator: consumer groups' calls, answered by the leader of each group's
partition of the internal topic `__groups` (created by the first call that needs it).

Each such leader keeps a `Coordination`: the groups of its partition (`consumers.state`),
rebuilt by applying the partition's committed commands before it answers anything (its
term's barrier committed first, so nothing a former leader committed is missed), and the
soft state no log holds: when each member was last heard and which partitions it reports
consuming. A new coordinator gives every member a fresh session.

A rebalance is incremental (KIP-848): the coordinator appends the new target assignment at
once, and a member is let into a partition only when no other member reports consuming it
any more: the old owner commits and releases it on its next heartbeat, so a graceful
rebalance delivers nothing twice and members keep their unaffected partitions throughout.
A member silent for its session timeout is removed, and its partitions are free at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack
import structlog
import trio

from actors.admin import forward_to_leader
from actors.replicated import PassBack, append_command, committed_batches, not_leader
from consumers.assignment import TopicPartition, assign
from consumers.state import (
    GROUPS_PARTITIONS,
    GROUPS_TOPIC,
    Command,
    CommandError,
    Group,
    GroupError,
    GroupsState,
    SetMembers,
    check_group_name,
    from_wire,
    groups_partition,
    to_wire,
)
from log.batch import BatchType
from log.records import batch_records
from transport.errors import ConnectionClosed
from transport.messages import (
    AdminReply,
    AdminRequest,
    EndOffsetReply,
    EndOffsetRequest,
    ErrorCode,
    ErrorReply,
    GroupRequest,
    Message,
)

if TYPE_CHECKING:
    from actors.group import GroupActor
    from actors.node import Node

logger = structlog.get_logger("quorumlog.coordinator")

# How often the coordinator looks for members whose session ran out.
EXPIRY_CHECK_S = 0.1
# Members heartbeat every tenth of their session timeout, at most this long apart: a
# partition freed by a member leaving reaches its next owner within one interval.
HEARTBEAT_INTERVAL_S_MAX = 0.5
HEARTBEAT_INTERVAL_S_MIN = 0.05
# How long the coordinator tries to learn a partition's offsets from its leader.
ASK_S = 5.0
ASK_RETRY_S = 0.05


class NotMember(Exception):
    """The caller is not (or no longer) a member of the group: it must rejoin."""


class UnknownTopic(Exception):
    pass


@dataclass(slots=True)
class Session:
    last_seen: float
    timeout_s: float
    # The partitions the member last said it consumes; None: not heard from since this
    # coordinator took over, so it may still consume anything it was given before.
    owned: frozenset[TopicPartition] | None


class Coordination:
    """One `__groups` partition as its replica here applies it, and the sessions of its
    groups' members while that replica leads."""

    def __init__(self, replica: GroupActor, partition: int):
        self.replica = replica
        self.partition = partition
        self.state = GroupsState()
        self.next_offset = 0  # the next offset of the partition to apply
        self.term = -1  # the term in which the sessions were set up
        self.sessions: dict[str, dict[str, Session]] = {}  # group -> member -> session
        self.locks: dict[str, trio.Lock] = {}  # group -> one membership change at a time
        self._results: dict[int, str | None] = {}  # offset -> why a command did nothing
        self._proposed_from = 0  # commands before it were not proposed by this leader

    def catch_up(self) -> None:
        core = self.replica.core
        if core.commit_offset < self.next_offset:
            return
        for header, batch in committed_batches(self.replica, self.next_offset):
            if header.batch_type is not BatchType.DATA:
                continue
            for i, record in enumerate(batch_records(batch, header)):
                self._apply(record.value, header.base_offset + i)
        self.next_offset = core.commit_offset + 1

    def _apply(self, value: bytes, offset: int) -> None:
        try:
            command = from_wire(msgpack.unpackb(value, raw=False))
        except (CommandError, ValueError, msgpack.UnpackException) as exc:
            logger.error("bad_group_command", offset=offset, error=str(exc))
            return
        why = self.state.apply(command, offset)
        if offset >= self._proposed_from:
            self._results[offset] = why

    def take_over(self, now: float) -> None:
        """This replica leads in a new term: every member gets a fresh session."""
        core = self.replica.core
        self.term = core.term
        self._proposed_from = core.commit_offset + 1
        self.sessions = {
            name: {m: Session(now, ms / 1000, None) for m, ms in group.members.items()}
            for name, group in self.state.groups.items()
        }

    def is_current(self) -> bool:
        core = self.replica.core
        return (
            core.is_leader
            and core.term == self.term
            and core.term_at(core.commit_offset) == core.term
        )

    async def propose(self, command: Command) -> str | None:
        """Append with acks=quorum; once applied, why it did nothing (or None)."""
        value = msgpack.packb(to_wire(command), use_bin_type=True)
        offset = await append_command(self.replica, value)
        self.catch_up()  # committed now: apply it here before answering
        return self._results.pop(offset, None)

    def lock(self, name: str) -> trio.Lock:
        return self.locks.setdefault(name, trio.Lock())

    def free_for(self, group: Group, member: str, tp: TopicPartition) -> bool:
        """Whether `member` may consume `tp` now: no other member consumes it, as far as
        this coordinator knows."""
        sessions = self.sessions.get(group.name, {})
        for other in group.members:
            if other == member:
                continue
            session = sessions.get(other)
            if session is None or session.owned is None or tp in session.owned:
                return False
        return True


def heartbeat_interval_s(session_timeout_s: float) -> float:
    return max(HEARTBEAT_INTERVAL_S_MIN, min(HEARTBEAT_INTERVAL_S_MAX, session_timeout_s / 10))


class Coordinator:
    def __init__(self, node: Node):
        self.node = node
        self.coordinations: dict[int, Coordination] = {}
        self.ends: dict[TopicPartition, int] = {}  # the highest end each partition was seen at

    # ------------------------------------------------------------------- running

    async def run(self) -> None:
        """Removes members whose session ran out, on the coordinations led here."""
        while True:
            await trio.sleep(EXPIRY_CHECK_S)
            now = trio.current_time()
            for c in list(self.coordinations.values()):
                if not c.is_current():
                    continue
                for name, sessions in list(c.sessions.items()):
                    expired = [m for m, s in sessions.items() if now - s.last_seen > s.timeout_s]
                    if expired:
                        try:
                            await self.remove_members(c, name, expired, "session expired")
                        except PassBack:
                            break  # leadership moved: the next coordinator takes over

    async def remove_members(
        self, c: Coordination, name: str, members: list[str], why: str
    ) -> None:
        async with c.lock(name):
            group = c.state.groups.get(name)
            gone = [m for m in members if group is not None and m in group.members]
            for m in members:
                c.sessions.get(name, {}).pop(m, None)
            if group is None or not gone:
                return
            kept = {m: t for m, t in group.members.items() if m not in gone}
            await self.set_members(c, group, group.mode, group.topics, kept)
            logger.info("members_removed", group=name, members=gone, why=why)

    async def set_members(
        self,
        c: Coordination,
        group: Group,
        mode: str,
        topics: tuple[str, ...],
        members: dict[str, int],
    ) -> None:
        """Append the group's next generation: these members, a sticky assignment."""
        assignment = (
            assign(self.partitions_of(topics), members, group.assignment)
            if mode == "stream"
            else {}
        )
        command = SetMembers(
            group.name,
            mode,
            topics,
            group.generation + 1,
            tuple(sorted(members.items())),
            tuple(sorted(assignment.items())),
        )
        why = await c.propose(command)
        if why is not None:
            raise GroupError(why)

    def partitions_of(self, topics: tuple[str, ...]) -> list[TopicPartition]:
        state = self.node.controller_actor.state
        out = []
        for name in topics:
            topic = state.topics.get(name)
            if topic is None:
                raise UnknownTopic(f"unknown topic {name!r}")
            out += [(name, p) for p in range(len(topic.partitions))]
        return out

    # ------------------------------------------------------------------- calls

    async def handle(self, request: GroupRequest) -> Message:
        from actors.group_calls import CALLS, list_groups  # the calls use this actor

        try:
            if request.op == "list":
                return AdminReply({"groups": await list_groups(self)})
            if request.op == "list_here":
                c = await self.current(int(request.args["partition"]))
                return AdminReply({"groups": _groups_here(c)})
            call = CALLS.get(request.op)
            if call is None:
                return ErrorReply(ErrorCode.REFUSED, f"unknown group call {request.op!r}")
            name = check_group_name(request.group)
            c = await self.current(await self.partition_of(name))
            return AdminReply(await call(self, c, name, request.args))
        except PassBack as answer:
            return answer.reply
        except NotMember as exc:
            return ErrorReply(ErrorCode.NOT_MEMBER, str(exc))
        except UnknownTopic as exc:
            return ErrorReply(ErrorCode.UNKNOWN_TOPIC, str(exc))
        except GroupError as exc:
            return ErrorReply(ErrorCode.REFUSED, str(exc))
        except (KeyError, TypeError, ValueError) as exc:
            return ErrorReply(ErrorCode.REFUSED, f"{request.op} refused: bad arguments ({exc})")

    async def partition_of(self, name: str) -> int:
        topic = await self.groups_topic()
        return groups_partition(name, len(topic.partitions))

    async def groups_topic(self):
        """`__groups` as the controller's state has it, created on first use."""
        controller = self.node.controller_actor
        topic = controller.state.topics.get(GROUPS_TOPIC)
        if topic is not None:
            return topic
        create = AdminRequest(
            "create_topic",
            {
                "name": GROUPS_TOPIC,
                "partitions": GROUPS_PARTITIONS,
                "internal": True,
                "retry": True,
                "timeout_s": ASK_S,
            },
        )
        with trio.move_on_after(2 * ASK_S):
            reply = await forward_to_leader(self.node, self.node.controller, create)
            if isinstance(reply, ErrorReply):
                raise PassBack(reply)
            while (topic := controller.state.topics.get(GROUPS_TOPIC)) is None:
                await controller.changed.wait()
            return topic
        raise PassBack(ErrorReply(ErrorCode.TIMEOUT, f"could not create {GROUPS_TOPIC}: retry"))

    async def current(self, partition: int) -> Coordination:
        """The coordination of a `__groups` partition this node leads, up to date; PassBack
        with the leader to ask otherwise."""
        node = self.node
        replica = node.partitions.get((GROUPS_TOPIC, partition))
        if replica is None:
            leader = node.controller_actor.leader_hint(GROUPS_TOPIC, partition)
            raise PassBack(
                ErrorReply(
                    ErrorCode.NOT_LEADER,
                    f"node {node.id} holds no replica of {GROUPS_TOPIC}/{partition}",
                    leader,
                    node.address_of(leader),
                )
            )
        c = self.coordinations.get(partition)
        if c is None or c.replica is not replica:  # new, or its task was restarted
            c = self.coordinations[partition] = Coordination(replica, partition)
        core = replica.core
        term = core.term
        with trio.move_on_after(node.settings.election_timeout_max_s):
            while core.is_leader and core.term == term and core.term_at(core.commit_offset) != term:
                await replica.round_done.wait()  # the barrier of this term commits soon
        if not core.is_leader or core.term != term or core.term_at(core.commit_offset) != term:
            raise not_leader(replica)
        c.catch_up()
        if c.term != term:
            c.take_over(trio.current_time())
        return c

    # ------------------------------------------------------------------- offsets

    async def offsets_of(self, tp: TopicPartition) -> tuple[int, int]:
        """(first offset kept, next offset to be written) of a topic partition, from its
        leader."""
        topic, partition = tp
        node = self.node
        ask = EndOffsetRequest(False, topic, partition)
        with trio.move_on_after(ASK_S):
            while True:
                replica = node.partitions.get(tp)
                if replica is not None and replica.core.is_leader:
                    reply = await replica.end_offset(False)
                else:
                    reply = await self._ask(self._leader_of(tp, replica), ask)
                if isinstance(reply, EndOffsetReply):
                    end = reply.commit_offset + 1
                    self.ends[tp] = max(self.ends.get(tp, 0), end)
                    return reply.log_start_offset, end
                if isinstance(reply, ErrorReply) and reply.code is ErrorCode.UNKNOWN_TOPIC:
                    raise UnknownTopic(reply.message)
                await trio.sleep(ASK_RETRY_S)
        raise PassBack(ErrorReply(ErrorCode.BUSY, f"{topic}/{partition} has no leader now: retry"))

    def _leader_of(self, tp: TopicPartition, replica: GroupActor | None) -> int | None:
        if replica is not None and replica.core.leader_id is not None:
            return replica.core.leader_id
        return self.node.controller_actor.leader_hint(*tp)

    async def _ask(self, node_id: int | None, message: Message) -> Message | None:
        if node_id is None or node_id == self.node.id:
            return None
        try:
            return await self.node.request(node_id, message)
        except ConnectionClosed:
            return None

    async def ask_coordinator(self, partition: int, request: GroupRequest) -> Message | None:
        """`request` answered by the leader of a `__groups` partition, here or elsewhere."""
        replica = self.node.partitions.get((GROUPS_TOPIC, partition))
        if replica is not None and replica.core.is_leader:
            return await self.handle(request)
        return await self._ask(self._leader_of((GROUPS_TOPIC, partition), replica), request)


def _groups_here(c: Coordination) -> list[dict[str, Any]]:
    return [
        {"group": g.name, "mode": g.mode, "members": len(g.members)}
        for g in c.state.groups.values()
    ]
