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

Every SNAPSHOT_EVERY commands (or SNAPSHOT_AFTER_S after the last command, if fewer) the
coordinator appends a snapshot of its partition's whole state, with no other command in
flight (`AppendGate`), and the partition's log is compacted to its last committed one
(consumers/state.py): a new coordinator replays from there, not from the first commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
import trio

from quorumlog.actors.cluster.admin_calls import forward_to_leader
from quorumlog.actors.cluster.leader_calls import (
    ASK_S,
    UnknownTopic,
    ask_partition_leader,
)
from quorumlog.actors.coordinator.command_log import ask_leader, led
from quorumlog.actors.coordinator.coordination import Coordination, NotMember
from quorumlog.actors.coordinator.offsets_upgrade import count_records
from quorumlog.actors.replica.commands import PassBack
from quorumlog.actors.services.storage import INTERNAL_TOPICS
from quorumlog.consumers.assignment import TopicPartition, assign
from quorumlog.consumers.state import (
    GROUPS_PARTITIONS,
    GROUPS_TOPIC,
    ForgetTopics,
    Group,
    GroupError,
    SetMembers,
    check_group_name,
    groups_partition,
)
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import (
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
    from quorumlog.actors.cluster.member import ClusterMember
    from quorumlog.controller.state import Topic

logger = structlog.get_logger("quorumlog.coordinator")

# How often the coordinator looks for members whose session ran out.
EXPIRY_CHECK_S = 0.1
SLOW_CALL_S = 2.0  # a group call slower than this is logged
# How often the coordinator learns the end of the partitions its groups consume (for lag).
LAG_REFRESH_S = 2.0


GroupCall = Callable[["Coordinator", Coordination, str, dict], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Calls:
    """What a coordinator answers (actors/coordinator/group_calls.py, actors/coordinator/queue_calls.py)."""

    group: dict[str, GroupCall]  # calls about one group, answered by its coordinator
    node: dict[str, Callable[[Coordinator, dict], Awaitable[dict[str, Any]]]]  # any node
    tick: Callable[[Coordination, float], Awaitable[None]]  # every check, per partition led


async def _logged(fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    try:
        await fn(*args)
    except (PassBack, UnknownTopic, ConnectionClosed) as exc:
        logger.info("background_call_failed", call=fn.__qualname__, error=str(exc))


class Coordinator:
    def __init__(self, node: ClusterMember, calls: Calls):
        self.node = node
        self.calls = calls
        self.coordinations: dict[int, Coordination] = {}
        self._nursery: trio.Nursery | None = None  # run()'s, for background work
        self.ends: dict[TopicPartition, int] = {}  # the highest end each partition was seen at

    # ------------------------------------------------------------------- running

    async def run(self) -> None:
        """Removes members whose session ran out and hands back leases that ran out, on
        the coordinations led here; keeps their groups' lag known."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._refresh_ends)
            await self._expire()

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Background work of the calls (queue mode's read-ahead): errors are logged, the
        call that needs the data reads it itself."""
        if self._nursery is not None:
            self._nursery.start_soon(_logged, fn, *args)

    async def _expire(self) -> None:
        while True:
            await trio.sleep(EXPIRY_CHECK_S)
            for c in self._led():
                try:
                    await self._expire_sessions(c)
                    await self.calls.tick(c, trio.current_time())
                    await c.snapshot_if_due(trio.current_time())
                except PassBack:
                    continue  # leadership moved: the next coordinator takes over
                except GroupError as exc:  # a race lost to a member's call: next time
                    logger.info("expiry_refused", partition=c.partition, why=str(exc))

    async def _refresh_ends(self) -> None:
        """The end of every partition the groups led here consume, for their lag."""
        while True:
            await trio.sleep(LAG_REFRESH_S)
            topics = self.node.controller_actor.state.topics
            # A deleted topic's ends go with it (issue 51).
            self.ends = {tp: end for tp, end in self.ends.items() if tp[0] in topics}
            for c in self._led():
                with contextlib.suppress(PassBack):
                    await self._forget_deleted_topics(c)
                for group in list(c.state.groups.values()):
                    for tp in self.partitions_existing(group.topics):
                        with contextlib.suppress(PassBack, UnknownTopic):
                            await self.offsets_of(tp)

    async def _forget_deleted_topics(self, c: Coordination) -> None:
        """Drop every position held of a topic the cluster deleted (ForgetTopics)."""
        controller = self.node.controller_actor
        held = {tp[0] for g in c.state.groups.values() for tp in (*g.committed, *g.queues)}
        gone = [
            t
            for t in sorted(held - set(controller.state.topics))
            if await controller.topic_is_unknown(t)
        ]
        if gone:
            await c.propose(ForgetTopics(tuple(gone)))
            logger.info("deleted_topics_forgotten", partition=c.partition, topics=gone)

    def _led(self) -> list[Coordination]:
        """The coordinations of the `__groups` partitions this node leads, up to date."""
        return [c for c in self.coordinations.values() if c.is_current()]

    def positions_held(self) -> int:
        """Committed positions and queue windows of the groups led here."""
        return sum(
            len(g.committed) + len(g.queues) for c in self._led() for g in c.state.groups.values()
        )

    def lag_rows(self) -> list[dict[str, Any]]:
        """Each group led here, per partition: committed position, end as last seen, lag."""
        rows = []
        for c in self._led():
            for group in c.state.groups.values():
                for tp in self.partitions_existing(group.topics):
                    committed, end = group.committed.get(tp), self.ends.get(tp)
                    lag = None if committed is None or end is None else max(end - committed, 0)
                    row = {"group": group.name, "topic": tp[0], "partition": tp[1]}
                    rows.append({**row, "committed": committed, **partition_ends(end), "lag": lag})
        return rows

    async def _expire_sessions(self, c: Coordination) -> None:
        now = trio.current_time()
        for name, sessions in list(c.sessions.items()):
            expired = [m for m, s in sessions.items() if now - s.last_seen > s.timeout_s]
            if expired:
                await self.remove_members(c, name, expired, "session expired")

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

    def partitions_existing(self, topics: tuple[str, ...]) -> list[TopicPartition]:
        """The partitions of those topics that exist: a deleted topic's positions stay in
        its groups until ForgetTopics drops them, with nothing to read or show."""
        known = self.node.controller_actor.state.topics
        return self.partitions_of(tuple(t for t in topics if t in known))

    def partitions_of(self, topics: tuple[str, ...]) -> list[TopicPartition]:
        state = self.node.controller_actor.state
        out = []
        for name in topics:
            topic = state.topics.get(name)
            if topic is None:
                raise UnknownTopic(name, f"unknown topic {name!r}")
            out += [(name, p) for p in range(len(topic.partitions))]
        return out

    # ------------------------------------------------------------------- calls

    async def handle(self, request: GroupRequest) -> Message:
        started = trio.current_time()
        try:
            return await self._handle(request)
        finally:
            took_s = trio.current_time() - started
            if took_s > SLOW_CALL_S:
                logger.warning(
                    "slow_group_call",
                    node_id=self.node.id,
                    group=request.group,
                    call=request.op,
                    took_s=round(took_s, 3),
                )

    async def _handle(self, request: GroupRequest) -> Message:
        if not self.node.is_member():
            return self.node.not_a_member()
        try:
            node_call = self.calls.node.get(request.op)
            if node_call is not None:
                return AdminReply(await node_call(self, request.args))
            call = self.calls.group.get(request.op)
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
            if await self.node.controller_actor.topic_is_unknown(exc.topic):
                logger.info("unknown_topic", node_id=self.node.id, topic=exc.topic, call=request.op)
                return ErrorReply(ErrorCode.UNKNOWN_TOPIC, str(exc))
            return ErrorReply(
                ErrorCode.BUSY, f"node {self.node.id} is catching up on the topics: retry"
            )
        except GroupError as exc:
            return ErrorReply(ErrorCode.REFUSED, str(exc))
        except (KeyError, TypeError, ValueError) as exc:
            return ErrorReply(ErrorCode.REFUSED, f"{request.op} refused: bad arguments ({exc})")

    async def partition_of(self, name: str) -> int:
        topic = await self.groups_topic()
        return groups_partition(name, len(topic.partitions))

    async def groups_topic(self) -> Topic:
        return await self.ensure_topic(GROUPS_TOPIC, GROUPS_PARTITIONS)

    async def ensure_topic(self, name: str, partitions: int = 1) -> Topic:
        """A topic the coordinator needs (`__groups`, a dead-letter topic), created with
        `partitions` if it is not there; once this node's state has it."""
        controller = self.node.controller_actor
        topic = controller.state.topics.get(name)
        if topic is not None:
            return topic
        args = {"name": name, "partitions": partitions, "retry": True, "timeout_s": ASK_S}
        create = AdminRequest("create_topic", {**args, "internal": name in INTERNAL_TOPICS})
        with trio.move_on_after(2 * ASK_S):
            reply = await forward_to_leader(self.node, self.node.controller, create)
            if isinstance(reply, ErrorReply):
                raise PassBack(reply)
            while (topic := controller.state.topics.get(name)) is None:
                await controller.changed.wait()
            return topic
        raise PassBack(ErrorReply(ErrorCode.TIMEOUT, f"could not create {name}: retry"))

    async def current(self, partition: int) -> Coordination:
        """The coordination of a `__groups` partition this node leads, up to date; PassBack
        with the leader to ask otherwise."""
        c = await led(self.node, GROUPS_TOPIC, partition, self.coordinations, Coordination)
        if not c.state.records:
            await count_records(self.node, c)
        return c

    # ------------------------------------------------------------------- offsets

    async def offsets_of(self, tp: TopicPartition, exact: bool = False) -> tuple[int, int]:
        """(first offset kept, next offset to be written) of a topic partition, as its
        leader (or, unless `exact`, a replica taken for it) says."""
        ask = EndOffsetRequest(exact, *tp)
        reply = await ask_partition_leader(self.node, tp, ask, EndOffsetReply)
        end = reply.commit_offset + 1
        self.ends[tp] = max(self.ends.get(tp, 0), end)
        return reply.log_start_offset, end

    async def ask_coordinator(self, partition: int, request: GroupRequest) -> Message | None:
        """`request` answered by the leader of a `__groups` partition, here or elsewhere."""
        return await ask_leader(self.node, GROUPS_TOPIC, partition, request, self.handle)


def partition_ends(next_offset: int | None) -> dict[str, int | None]:
    """A partition's end as users read it everywhere: "end" the offset of its last record
    (as `end_offset()`, -1 when empty), "next_offset" the offset its next record takes
    (Kafka's end offset, what `committed` is measured against)."""
    return {"end": None if next_offset is None else next_offset - 1, "next_offset": next_offset}
