"""The controller actor: the cluster metadata every node keeps, and the topic calls that
only the controller's leader answers (routed to actors/cluster/topic_calls.py).

Every node applies the controller group's committed commands, in log order, to its
`ClusterState` and makes its own replicas match it: it creates the replicas a new topic
places here and drops those of a deleted topic. Who leads each partition is soft state
(`controller.leaders.LeaderTable`): each node's own groups feed it, and
actors/cluster/leader_table.py carries it to every node and repairs what was lost on the way
(KUDU-1353). Topic calls are validated by the controller's leader on a
state that is up to date (its term's barrier committed and applied), placed, appended with
acks=quorum and answered once applied here and, for a new topic, once every partition has
a leader.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import msgpack
import structlog
import trio

from quorumlog.actors.cluster import rebalancer, topic_calls, topic_changes
from quorumlog.actors.cluster.leader_calls import UnknownTopic
from quorumlog.actors.cluster.leader_table import LeaderTableSync
from quorumlog.actors.replica.commands import (
    PassBack,
    append_command,
    committed_batches,
    not_leader,
)
from quorumlog.actors.replica.outcomes import Outcomes
from quorumlog.controller.commands import (
    Command,
    CommandError,
    DeleteTopic,
    NameCluster,
    from_wire,
    to_wire,
)
from quorumlog.controller.kafka_ids import new_topic_id
from quorumlog.controller.placement import PlacementError
from quorumlog.controller.state import (
    DEFAULT_TOPIC,
    ClusterState,
    Partition,
    TopicError,
    check_topic_name,
)
from quorumlog.log.batch import BatchType
from quorumlog.log.config import TopicSettings
from quorumlog.log.records import offset_records
from quorumlog.membership.config import Configuration
from quorumlog.raft.configs import config_of
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import (
    AdminReply,
    AdminRequest,
    ErrorCode,
    ErrorReply,
    Message,
)

if TYPE_CHECKING:
    from quorumlog.actors.cluster.rebalancer import Rebalancer
    from quorumlog.actors.replica.actor import ReplicaActor
    from quorumlog.actors.services.cluster_guard import ClusterGuard
    from quorumlog.actors.services.heartbeats import HeartbeatManager
    from quorumlog.actors.services.storage import NodeStorage
    from quorumlog.raft.settings import RaftSettings

logger = structlog.get_logger("quorumlog.controller")

TOPIC_OPS = frozenset(
    {
        "create_topic",
        "delete_topic",
        "list_topics",
        "describe_topic",
        "alter_topic",
        "move_partition",
        "partition_moves",
        "topic_configs",
        "trim_partition",
        "rebalance",
    }
)
# A broker that answered within this many heartbeat intervals is live (for placement).
LIVE_BEATS = 4
# How long `topic_is_unknown` waits for the controller's leader.
TOPIC_ASK_S = 2.0


@runtime_checkable
class ControllerHost(Protocol):
    """What the controller actor needs of its node (a `Node` is one): who it is, its
    peers, and its replicas, which it makes match the cluster's state."""

    id: int
    settings: RaftSettings
    storage: NodeStorage
    heartbeats: HeartbeatManager  # who answered lately: the live brokers
    cluster: ClusterGuard  # takes the cluster's id once named
    controller: ReplicaActor  # its replica of the controller group
    partitions: Mapping[tuple[str, int], ReplicaActor]
    rebalancer: Rebalancer

    async def request(self, peer: int, message: Message) -> Message: ...

    def send_nowait(self, peer: int, message: Message) -> bool: ...

    def partitions_status(self, topic: str) -> dict: ...

    async def add_partition(
        self, placed: Partition, config: Configuration | None, settings: TopicSettings
    ) -> None: ...

    async def configure_partition(
        self, key: tuple[str, int], settings: TopicSettings, log_start: int
    ) -> None: ...

    async def remove_partition(self, key: tuple[str, int]) -> None: ...

    async def remove_tombstone(self, key: tuple[str, int]) -> None: ...


class ControllerActor:
    def __init__(self, node: ControllerHost, rng: random.Random):
        self.node = node
        self._rng = rng  # for the cluster's id and topic ids
        self._naming = False  # a NameCluster is being proposed
        self.state = ClusterState.genesis()
        self.sync = LeaderTableSync(self)
        self.leaders = self.sync.table
        self.changed = trio.Event()  # set (and replaced) whenever state or leaders change
        self._results = Outcomes()  # why a command did nothing, for the call that proposed it
        self._next_offset = 0  # the next controller log offset to apply

    @property
    def group(self) -> ReplicaActor:
        return self.node.controller

    # ------------------------------------------------------------------- running

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.sync.run)
            while True:
                # Taken before the work: a round that commits more while `_reconcile`
                # awaits sets it, so the loop goes round again. Waiting on the event of
                # after the work would miss that commit until the group's next round,
                # which a quiet group never has.
                group = self.group
                seen = group.view
                if self._apply_committed():
                    self.sync.topics_applied()
                    if self.state.cluster_id is not None:
                        self.node.cluster.adopt(self.state.cluster_id)
                    await self._reconcile()
                    self.signal()
                self.sync.report_to_new_controller()
                if self.state.cluster_id is None and not self._naming and self.is_current():
                    self._naming = True
                    nursery.start_soon(self._name_cluster)
                if self.group is group:  # not reopened meanwhile (node.py, _reopen)
                    await group.changed(seen)

    async def _name_cluster(self) -> None:
        """A new cluster (or one from before ids) gets its id from its first current
        controller leader; on failure the next round tries again."""
        config = self.group.view.committed_config
        addresses = () if config is None else tuple(sorted(config.addresses.items()))
        try:
            await self.propose(NameCluster(f"{self._rng.getrandbits(64):016x}", addresses))
        except PassBack as failed:
            logger.info("cluster_naming_failed", reply=str(failed.reply))
        finally:
            self._naming = False

    def new_topic_id(self) -> str:
        return new_topic_id(self._rng)

    @property
    def applied_through(self) -> int:
        """The controller log offset this node's state holds everything up to."""
        return self._next_offset - 1

    def signal(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def _apply_committed(self) -> bool:
        """Apply the controller's newly committed entries; True if any was applied."""
        view = self.group.view
        committed = view.committed_config
        if committed is not None and set(self.state.brokers) != set(committed.voters):
            self.state.set_brokers(
                {n: a for n, a in committed.addresses.items() if n in committed.voters}
            )
        if view.commit_offset < self._next_offset:
            return False
        for header, batch in committed_batches(self.group, self._next_offset):
            if header.batch_type is BatchType.DATA:
                for at, record in offset_records(batch, header):
                    self._apply(record.value, at)
            elif header.batch_type is BatchType.CONFIG:
                config = config_of(batch, header)
                self.state.applied_offset = header.base_offset
                self._note_config(config)
        self._next_offset = view.commit_offset + 1
        return True

    def _note_config(self, config: Configuration) -> None:
        if not config.is_joint:
            self.state.set_brokers(
                {n: a for n, a in config.addresses.items() if n in config.voters}
            )

    def _apply(self, value: bytes, offset: int) -> None:
        try:
            command = from_wire(msgpack.unpackb(value, raw=False))
        except (CommandError, ValueError, msgpack.UnpackException) as exc:
            # Every node skips it alike: the state stays the same everywhere.
            logger.error("bad_controller_command", offset=offset, error=str(exc))
            self.state.applied_offset = offset
            return
        why = self.state.apply(command, offset)
        if why is not None:
            self._results.put(offset, why)
        if isinstance(command, DeleteTopic):
            self.leaders.forget_topic(command.name)
        logger.info("controller_applied", node_id=self.node.id, offset=offset, command=str(command))

    async def _reconcile(self) -> None:
        """Make this node's replicas match the state: create those placed here, drop those
        of deleted topics (and what tombstones they left). A replica moved off this node
        stays, idle, until its group no longer counts it (actors/node/burial.py): dropped while
        it does, it could cost the group data it acknowledged (docs/decisions/controller.md, "Replica
        moves"). `default` follows membership instead (admin calls)."""
        node = self.node
        state = self.state
        wanted = {
            (p.topic, p.partition): p for p in state.groups_of(node.id) if p.topic != DEFAULT_TOPIC
        }
        for key, group in list(node.partitions.items()):
            if key[0] == DEFAULT_TOPIC:
                continue
            topic = state.topics.get(key[0])
            if topic is not None and any(
                p.partition == key[1] and p.group_id == group.group_id for p in topic.partitions
            ):
                continue  # placed here, or moved away
            if group.group_id < state.next_group_id:  # the state has seen its topic go
                await node.remove_partition(key)
        for key, group_id in list(node.storage.tombstones.items()):
            topic = state.topics.get(key[0])
            placed = topic is not None and any(p.group_id == group_id for p in topic.partitions)
            if not placed and group_id < state.next_group_id:
                await node.remove_tombstone(key)
        for key, placed in wanted.items():
            if key not in node.partitions:
                await node.add_partition(placed, self._first_config(placed), self._settings(placed))
        for key in list(node.partitions):
            topic = state.topics.get(key[0])
            if topic is not None and key in node.partitions and key[1] < len(topic.partitions):
                await node.configure_partition(
                    key, topic.settings, topic.partitions[key[1]].log_start
                )

    def _first_config(self, placed: Partition) -> Configuration | None:
        """The configuration this node's new replica starts with. A replica placed at
        creation bootstraps the group with its peers, with the set it was made on (even
        with a node that has left since: simulation seed 201 of the topic changes once
        crashed every node that applied the two so; the mover replaces it), and does so
        even where the partition moved since: a node that applies the creation and a move
        at once must still count for the group's first quorum (seed 80174: the creation
        set was 4, 3, 5; node 4 applied both and never made its replica, node 3 made it
        as a joiner, and node 5 alone never had a quorum to make the move with). A replica
        placed by a move, or placed again after one buried it here (its tombstone), joins
        the group, added by its leader (actors/cluster/mover.py): its group's configuration has
        moved on from the first."""
        node = self.node
        key = (placed.topic, placed.partition)
        if (
            node.id not in placed.created_replicas
            or node.storage.tombstones.get(key) == placed.group_id
        ):
            return None
        addresses = self.state.addresses
        return Configuration.bootstrap({n: addresses[n] for n in placed.created_replicas})

    def _settings(self, placed: Partition) -> TopicSettings:
        return self.state.topics[placed.topic].settings

    # ------------------------------------------------------------------- leader table

    def leader_hint(self, topic: str, partition: int) -> int | None:
        entry = self.leaders.get(topic, partition)
        return None if entry is None else entry.leader_id

    # ------------------------------------------------------------------- topic calls

    async def handle(self, request: AdminRequest) -> Message:
        group = self.group
        if not group.view.is_leader:
            return group.not_leader(group.view.leader_id)
        args = request.args
        try:
            await self._wait_current()
            match request.op:
                case "create_topic":
                    return await topic_calls.create(self, args)
                case "delete_topic":
                    return await topic_calls.delete(self, args)
                case "list_topics":
                    return AdminReply({"topics": topic_calls.list_topics(self)})
                case "describe_topic":
                    name = check_topic_name(args["name"], internal=True)
                    return AdminReply({"partitions": await topic_calls.describe(self, name)})
                case "alter_topic":
                    return await topic_changes.alter(self, args)
                case "move_partition":
                    return await topic_changes.move(self, args)
                case "partition_moves":
                    return await topic_changes.moves(self)
                case "trim_partition":
                    return await topic_changes.trim(self, args)
                case "topic_configs":
                    return topic_changes.configs(self, list(args["names"]))
                case "rebalance":
                    return await rebalancer.ask(self, args)
        except PassBack as answer:
            return answer.reply
        except UnknownTopic as exc:  # deleted while a call asked its partition's leader
            return ErrorReply(ErrorCode.UNKNOWN_TOPIC, str(exc))
        except (TopicError, PlacementError) as exc:
            code = (
                ErrorCode.UNKNOWN_TOPIC
                if str(exc).startswith("unknown topic")
                else ErrorCode.REFUSED
            )
            return ErrorReply(code, str(exc))
        except (KeyError, TypeError, ValueError) as exc:
            return ErrorReply(ErrorCode.REFUSED, f"{request.op} refused: bad arguments ({exc})")
        raise AssertionError(request.op)

    async def _wait_current(self) -> None:
        """Until this leader's state holds everything committed before its term."""
        term = self.group.view.term
        while not self.is_current():
            view = self.group.view
            if not view.is_leader or view.term != term:
                raise not_leader(self.group)
            await self.changed.wait()

    def is_current(self) -> bool:
        """Whether this node leads the controller and its state holds everything committed
        before its term (its term's barrier committed and applied)."""
        view = self.group.view
        return view.settled and self._next_offset > view.commit_offset

    async def topic_is_unknown(self, name: str) -> bool:
        """Whether the cluster has no topic `name`, not only this node's state: a node
        that just restarted applies the controller's log only once it hears the commit
        offset, and until then would call every topic unknown (a consumer told so gives up
        for good). Only a current controller leader answers from its own state; otherwise
        its leader is asked. False also when nobody could tell in time: then, retry."""
        if name in self.state.topics:
            return False
        if self.is_current():
            return True
        leader = self.group.view.leader_id
        if leader is None or leader == self.node.id:
            return False  # an election, or this new leader's barrier: soon known
        with trio.move_on_after(TOPIC_ASK_S):
            try:
                reply = await self.node.request(leader, AdminRequest("list_topics", {}))
            except ConnectionClosed:
                return False
            return isinstance(reply, AdminReply) and name not in reply.result["topics"]
        return False

    def outcomes_kept(self) -> int:
        return len(self._results)

    async def propose(self, command: Command) -> str | None:
        """Append a command with acks=quorum; once applied here, why it did nothing (or
        None)."""
        offset = await append_command(
            self.group, msgpack.packb(to_wire(command), use_bin_type=True)
        )
        while self._next_offset <= offset:
            await self.changed.wait()
        return self._results.take(offset)

    def live_brokers(self) -> list[int]:
        """The brokers that answered this node's heartbeats within LIVE_BEATS intervals
        (on the controller's leader, which beats all of them)."""
        window = LIVE_BEATS * self.node.settings.heartbeat_interval_s
        answered = self.node.heartbeats.answered_by
        now = trio.current_time()
        return [
            b
            for b in self.state.brokers
            if b == self.node.id or now - answered.get(b, -math.inf) < window
        ]
