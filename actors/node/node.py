"""The node: its transport, the group replicas it hosts, and the handler that routes every
message to the group it names.

The node hosts the controller's group (0) and a group per partition replica; Raft
messages carry their group id, client calls name a topic and partition. The node's
nursery supervises its groups: a storage error in any of them stops the whole node
(fail-stop). Peer links follow the union of the groups' configurations. Status and
metrics speak of partition 0 of `default` (as docs/cli.md's `status` says), plus the
controller's leader and how many partitions this node leads.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager

import structlog
import trio

from quorumlog.actors.cluster.admin_calls import handle_admin
from quorumlog.actors.cluster.controller import ControllerActor
from quorumlog.actors.cluster.mover import ReplicaMover
from quorumlog.actors.cluster.rebalancer import Rebalancer
from quorumlog.actors.cluster.removal import RemovalWatch
from quorumlog.actors.coordinator.coordinator import Coordinator
from quorumlog.actors.coordinator.group_calls import CALLS
from quorumlog.actors.coordinator.txn_coordinator import TxnCoordinator
from quorumlog.actors.node.burial import bury_moved_replicas
from quorumlog.actors.node.leader_balance import balance_leaders, hand_over_from_slow_disk
from quorumlog.actors.node.manager import GroupManager
from quorumlog.actors.node.refusals import no_replica
from quorumlog.actors.node.shutdown import hand_over_leadership
from quorumlog.actors.replica.actor import ReplicaActor
from quorumlog.actors.replica.campaigns import CampaignSlots
from quorumlog.actors.services.cleaner import LogCleaner
from quorumlog.actors.services.cluster_guard import ClusterGuard
from quorumlog.actors.services.disk_health import DiskHealth
from quorumlog.actors.services.flusher import Flusher
from quorumlog.actors.services.heartbeats import HeartbeatManager
from quorumlog.actors.services.metadata_writer import MetadataWriter
from quorumlog.actors.services.stall_watch import watch_stalls
from quorumlog.actors.services.stats import NodeStats
from quorumlog.actors.services.storage import GroupStorage, NodeStorage
from quorumlog.actors.services.wire import register_raft_messages
from quorumlog.controller.state import DEFAULT_TOPIC, Partition
from quorumlog.log.config import TopicSettings
from quorumlog.log.wal import Log, RunSync, run_inline
from quorumlog.membership.config import Configuration
from quorumlog.raft.messages import (
    RAFT_MESSAGES,
)
from quorumlog.raft.settings import RaftSettings
from quorumlog.transport.messages import (
    AdminRequest,
    AppendRequest,
    EndOffsetRequest,
    ErrorCode,
    ErrorReply,
    GroupRequest,
    HeartbeatBatch,
    HeartbeatBatchReply,
    LeaderDigest,
    LeaderReply,
    LeaderRequest,
    LeaderUpdates,
    Message,
    OffsetForTimeRequest,
    OffsetMapRequest,
    PartitionsRequest,
    PositionRequest,
    ReadRequest,
    StatusReply,
    StatusRequest,
    TxnMarkerRequest,
    TxnRequest,
)
from quorumlog.transport.messages import (
    Role as ConnectionRole,
)
from quorumlog.transport.network import Answer, ConnectionInfo, Handler, NodeTransport

logger = structlog.get_logger("quorumlog.node")


OpenTransport = Callable[[Handler], AbstractAsyncContextManager[NodeTransport]]


class NodeHandler:
    """What the node gives its transport: every message goes to `Node.handle`; client
    appends are taken without a task of their own (`Node.take_request`)."""

    __slots__ = ("_handle", "peer_connected", "take_request")

    def __init__(self, node: Node) -> None:
        self._handle = node.handle
        self.take_request = node.take_request
        self.peer_connected = node.peer_connected

    def __call__(self, peer: ConnectionInfo, message: Message) -> Awaitable[Message | None]:
        return self._handle(peer, message)


class Node:
    def __init__(
        self,
        node_id: int,
        storage: NodeStorage,
        *,
        settings: RaftSettings,
        rng: random.Random,
        run_sync: RunSync = run_inline,
        fsync_threads: int = 1,
        wall_clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        cleaner_sync: RunSync = run_inline,
    ):
        register_raft_messages()
        self.id = node_id
        # The clock a leader stamps log-append batches with (the simulation skews it).
        self.wall_clock_ms = wall_clock_ms
        self.settings = settings
        self.storage = storage
        self.stats = NodeStats()
        self._rng = rng
        self._run_sync = run_sync
        self.disk_health = DiskHealth(node_id, settings)
        # Threads for the fsyncs of one pass, many files at once (each pass runs on the
        # storage thread: the flusher's and the metadata writer's take turns).
        pool = ThreadPoolExecutor(fsync_threads, "fsync") if fsync_threads > 1 else None
        self.flusher = Flusher(
            run_sync, settings.leader_flush_interval_s, self.stats, self.disk_health, pool
        )
        self.metadata_writer = MetadataWriter(run_sync, pool)
        self.campaign_slots = CampaignSlots()
        self.heartbeats = HeartbeatManager(
            node_id, settings, lambda: self.groups, self.send_nowait, self.stats, self.disk_health
        )
        # Passes over compacted logs: on a thread of their own and within an I/O budget in
        # a node (`cleaner_sync`), inline in a simulation.
        self.cleaner = LogCleaner(
            lambda: self.partitions.values(),
            cleaner_sync,
            wall_clock_ms,
            throttled=cleaner_sync is not run_inline,
        )
        self.controller = self._group(storage.controller)
        self.partitions = {key: self._group(g) for key, g in storage.partitions.items()}
        self.groups: dict[int, ReplicaActor] = {
            g.group_id: g for g in [self.controller, *self.partitions.values()]
        }
        self._keys = {g.group_id: key for key, g in self.partitions.items()}
        self.controller_actor = ControllerActor(self, random.Random(self._rng.getrandbits(64)))
        self.cluster = ClusterGuard(storage, self._controller_voters)
        self.mover = ReplicaMover(self)
        self.rebalancer = Rebalancer(self.controller_actor, self.mover, settings)
        self.coordinator = Coordinator(self, CALLS)
        self.txn_coordinator = TxnCoordinator(self)
        self._transport: NodeTransport | None = None
        self._addresses_of: dict[int, dict[int, str]] = {}  # group -> its config's
        self._links: Counter[tuple[int, str]] = Counter()  # (node, address) -> groups naming it
        self._manager: GroupManager | None = None
        self._replicas_changing = trio.Lock()  # one change of its replicas at a time (below)
        self.kafka_address: str | None = None  # where its Kafka listener serves, if it has one
        self._nursery: trio.Nursery | None = None  # its services', once it runs
        # Members of Kafka's consumer groups this node coordinates: kept by its listener.
        self.kafka_members: Callable[[str], int] = lambda group: 0
        self.stopping = False  # told to stop: hands leadership over, takes none (shutdown.py)
        self.removal = RemovalWatch(self)  # whether the cluster still counts it (removal.py)

    def _clean_if_compacting(self) -> None:
        """Start the cleaner once a replica here compacts (not before: a node without
        compacted topics runs no task for it)."""
        if self._nursery is not None and any(
            g.log.config.compacts for g in self.partitions.values()
        ):
            self.cleaner.start(self._nursery)

    def _group(self, storage: GroupStorage) -> ReplicaActor:
        return ReplicaActor(
            self.id,
            storage,
            settings=self.settings,
            rng=random.Random(self._rng.getrandbits(64)),
            stats=self.stats,
            flusher=self.flusher,
            metadata_writer=self.metadata_writer,
            campaign_slots=self.campaign_slots,
            heartbeats=self.heartbeats,
            disk_health=self.disk_health,
            on_changed=self._group_changed,
            wall_clock_ms=self.wall_clock_ms,
            peer_alive=self.peer_alive,
            node_stopping=lambda: self.stopping,
        )

    def _controller_voters(self) -> frozenset[int]:
        config = self.controller.view.config
        return frozenset() if config is None else config.voters

    def peer_alive(self, peer: int) -> bool:
        """Whether this node has a connection to the peer's (a crashed node's closes)."""
        return self._transport is not None and self._transport.connected(peer)

    @property
    def default_group(self) -> ReplicaActor:
        return self.partitions[(DEFAULT_TOPIC, 0)]

    @property
    def log(self) -> Log:
        return self.default_group.log

    async def run(
        self, open_transport: OpenTransport, *, task_status=trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until cancelled; raises StorageError on a disk fault (fail-stop), and
        ForeignClusterError when its peers are of another cluster."""
        async with open_transport(NodeHandler(self)) as transport, trio.open_nursery() as nursery:
            self._transport = transport
            nursery.start_soon(self.cluster.watch)
            self._update_peers()
            nursery.start_soon(self.flusher.run)
            nursery.start_soon(self.metadata_writer.run)
            nursery.start_soon(self.heartbeats.run)
            self._nursery = nursery
            self._clean_if_compacting()
            self._manager = GroupManager(nursery, transport, self._reopen)
            for group in list(self.groups.values()):
                await self._manager.start(group)
            nursery.start_soon(self.controller_actor.run)
            cluster_state = lambda: self.controller_actor.state  # noqa: E731 (replaced as it changes)
            health = self.disk_health
            nursery.start_soon(balance_leaders, self.id, self.partitions, cluster_state, health)
            nursery.start_soon(hand_over_from_slow_disk, self.id, self.groups, health)
            nursery.start_soon(watch_stalls, self.id, self.settings.election_timeout_min_s, health)
            nursery.start_soon(self.mover.run)
            nursery.start_soon(self.rebalancer.run)
            nursery.start_soon(bury_moved_replicas, self)
            nursery.start_soon(self.coordinator.run)
            nursery.start_soon(self.txn_coordinator.run)
            nursery.start_soon(self.removal.run)
            task_status.started(self)

    def _group_changed(self, group: ReplicaActor) -> None:
        """A group's configuration, leader or term changed."""
        config = group.view.config
        addresses = None if config is None else dict(config.addresses)
        if self._addresses_of.get(group.group_id) != addresses:
            # Links follow configurations only: were every term or leader change to walk
            # every group, a node's elections would cost it groups x changes.
            self._addresses_changed(group.group_id, addresses)
        key = self._keys.get(group.group_id)
        if key is not None:
            self.controller_actor.sync.local_changed(*key, group)

    def _addresses_changed(self, group_id: int, addresses: dict[int, str] | None) -> None:
        """A group's configuration names other nodes now (None: none, or the group is
        gone). The links are set again only when a (node, address) pair appears or
        disappears: thousands of groups name the same few nodes, and walking them all for
        each one made a node's start cost groups x groups."""
        changed = False
        for pair in (addresses or {}).items():
            changed = changed or pair not in self._links
            self._links[pair] += 1
        for pair in self._addresses_of.pop(group_id, {}).items():
            self._links[pair] -= 1
            if not self._links[pair]:
                del self._links[pair]
                changed = True
        if addresses is not None:
            self._addresses_of[group_id] = addresses
        if changed:
            self._update_peers()

    def _update_peers(self) -> None:
        """Links to every node that shares a group with this one."""
        if self._transport is None:
            return
        peers: dict[int, str] = {}
        for group in self.groups.values():
            config = group.view.config
            if config is not None:
                peers.update(config.addresses)
        peers.pop(self.id, None)
        self._transport.set_peers(peers)

    async def _reopen(self, old: ReplicaActor) -> ReplicaActor:
        """A fresh actor for a group whose task crashed, from its files."""
        await self.flusher.forget(old.group_id)
        self.heartbeats.forget(old.group_id)
        self.campaign_slots.forget(old.group_id)
        group = self._group(
            self.storage.reopen(old.storage, random.Random(self._rng.getrandbits(64)))
        )
        self.groups[group.group_id] = group
        key = self._keys.get(group.group_id)
        if key is None:
            self.controller = group
        else:
            self.partitions[key] = group
        return group

    def send_nowait(self, peer: int, message: Message) -> bool:
        sent = self._transport is not None and self._transport.send_nowait(peer, message)
        if not sent:
            self.stats.messages_dropped += 1
        return sent

    def address_of(self, node_id: int | None) -> str | None:
        if node_id is None:
            return None
        broker = self.controller_actor.state.brokers.get(node_id)
        if broker is not None:
            return broker.address
        for group in self.groups.values():
            config = group.view.config
            if config is not None and node_id in config.addresses:
                return config.addresses[node_id]
        return None

    def partitions_status(self, topic: str) -> dict:
        """The status of each replica of `topic` this node hosts, by partition."""
        return {
            str(p): group.replica_status()
            for (t, p), group in self.partitions.items()
            if t == topic
        }

    async def request(self, peer: int, message: Message) -> Message:
        assert self._transport is not None
        return await self._transport.request(peer, message)

    async def stop_leading(self) -> int:
        """Told to stop: take no leadership from now on (every core, and any reopened
        meanwhile, hears it) and hand over what it holds (actors/node/shutdown.py); returns
        how many groups it still led when it gave up."""
        self.stopping = True
        return await hand_over_leadership(
            self.id, self.groups, self.settings.election_timeout_min_s
        )

    async def close(self) -> None:
        """After `run` ended: flush every log, keep the commit offsets known (for unsafe
        recovery's report), close the files."""
        for group in self.groups.values():
            await group.log.flush()
            await group.save_metadata()
        self.storage.close()

    def status(self) -> dict:
        out = self.default_group.status()
        out["cluster_id"] = self.cluster.identity.cluster_id
        out["controller_id"] = self.controller.view.leader_id
        out["partitions_led"] = sum(g.view.is_leader for g in self.partitions.values())
        out["partitions_hosted"] = len(self.partitions)
        out["heartbeats_sent"] = self.stats.heartbeats_sent
        out["messages_dropped"] = self.stats.messages_dropped
        out["elections_started"] = sum(g.view.elections_started for g in self.groups.values())
        out["partitions_quiet"] = sum(g.view.quiet for g in self.partitions.values())
        now = trio.current_time()
        out["partitions_under_replicated"] = sum(
            g.under_replicated(now) for g in self.partitions.values()
        )
        out["disk_bytes"] = sum(g.log.size_bytes for g in self.groups.values())
        out["tables"] = self.table_sizes()
        out["groups"] = self.coordinator.lag_rows()  # the consumer groups it coordinates
        out["kafka_address"] = self.kafka_address
        # Fsync latencies of this node and the peers it heard from, and which are slow
        # (actors/services/disk_health.py).
        out["disks"] = self.disk_health.to_json(trio.current_time())
        if self.controller_actor.is_current():  # the controller's leader: it rebalances
            out["rebalance"] = self.rebalancer.progress()
        # The cluster's configuration as this node knows it, to order the answers of
        # several nodes by (a removed node's is old: quorumlog/client/protocol.py).
        out.update(self.removal.what())
        if out["removed"]:
            out["role"] = "removed"
        return out

    def table_sizes(self) -> dict[str, int]:
        """The sizes of what this node keeps per group, partition or command: each is back
        where it was once the topics made since are deleted (issue 51)."""
        groups = self.groups.values()
        return {
            "groups": len(self.groups),
            "open_segment_files": sum(g.log.segment_count for g in groups),
            "leader_entries": len(self.controller_actor.leaders),
            **self.heartbeats.table_sizes(),
            "producer_appends_uncommitted": sum(g.producer_appends_uncommitted() for g in groups),
            "lag_ends": len(self.coordinator.ends),
            "group_positions": self.coordinator.positions_held(),
            "command_outcomes": self.controller_actor.outcomes_kept()
            + sum(c.outcomes_kept() for c in self.coordinator.coordinations.values()),
            # Bounded by bytes, not by topics (log/tailcache.py): what the memory model counts.
            "tail_cache_bytes": self.storage.tail_budget.bytes,
        }

    # ------------------------------------------------------------------- the handler

    async def handle(self, peer: ConnectionInfo, message: Message) -> Message | None:
        """Everything sent to this node, from peers and clients (transport/network.py)."""
        if isinstance(message, RAFT_MESSAGES):
            if peer.role is not ConnectionRole.PEER or peer.node_id is None:
                return ErrorReply(ErrorCode.PROTOCOL, "Raft messages come from peers only")
            group = self.groups.get(message.group)
            if group is None:
                return self._unknown_group(message)
            return await group.deliver(peer.node_id, message)
        match message:
            case (
                AppendRequest(topic=topic, partition=partition)
                | ReadRequest(topic=topic, partition=partition)
                | EndOffsetRequest(topic=topic, partition=partition)
                | OffsetForTimeRequest(topic=topic, partition=partition)
                | PositionRequest(topic=topic, partition=partition)
                | OffsetMapRequest(topic=topic, partition=partition)
            ):
                group = self.replica(topic, partition)
                return await group.answer(message) if group else no_replica(self, message)
            case LeaderRequest(topic, partition):
                return self.leader_of(topic, partition)
            case StatusRequest():
                return StatusReply(self.status())
            case PartitionsRequest(topic):
                return StatusReply(self.partitions_status(topic))
            case LeaderUpdates() | LeaderDigest() | HeartbeatBatch() | HeartbeatBatchReply():
                if peer.role is not ConnectionRole.PEER or peer.node_id is None:
                    return ErrorReply(ErrorCode.PROTOCOL, "node messages come from peers only")
                self._from_peer(peer.node_id, message)
                return None
            case AdminRequest():
                return await handle_admin(self, message)
            case GroupRequest():
                return await self.coordinator.handle(message)
            case TxnRequest():
                return await self.txn_coordinator.handle(message)
            case TxnMarkerRequest(topic=topic, partition=partition):
                if peer.role is not ConnectionRole.PEER or peer.node_id is None:
                    return ErrorReply(ErrorCode.PROTOCOL, "transaction markers come from peers")
                group = self.replica(topic, partition)
                return await group.answer(message) if group else no_replica(self, message)
            case _:
                return ErrorReply(ErrorCode.PROTOCOL, f"unexpected {type(message).__name__}")

    def _from_peer(self, sender: int, message: Message) -> None:
        match message:
            case LeaderUpdates():
                self.controller_actor.sync.on_updates(sender, message)
            case LeaderDigest():
                self.controller_actor.sync.on_digest(sender, message)
            case HeartbeatBatch():
                self.heartbeats.on_batch(sender, message)
            case HeartbeatBatchReply():
                self.heartbeats.on_batch_reply(sender, message)

    # ----------------------------------------------------------------- replicas
    # A node's partition replicas come and go as the controller's state says: made when
    # placed here, given their topic's settings and log start as they change, deleted with
    # their topic, buried (a tombstone) once moved off and no longer counted by their
    # group. One such change at a time: a burial that stopped a replica raced the
    # controller placing it here again, and deleted the new replica's files under it
    # (simulation seed 10000).

    async def add_partition(
        self,
        placed: Partition,
        config: Configuration | None,
        settings: TopicSettings,
    ) -> None:
        """Start a replica of a partition the controller placed here."""
        async with self._replicas_changing:
            await self._add_partition(placed, config, settings)

    async def _add_partition(
        self, placed: Partition, config: Configuration | None, settings: TopicSettings
    ) -> None:
        assert self._manager is not None
        key = (placed.topic, placed.partition)
        if key in self.partitions:
            return  # placed here again while it was being buried: made after, not during
        storage = await self._run_sync(
            lambda: self.storage.create_partition(
                *key,
                placed.group_id,
                config=config,
                settings=settings,
                rng=random.Random(self._rng.getrandbits(64)),
            )
        )
        self.storage.add(*key, storage)
        group = self._group(storage)
        if config is not None and placed.replicas[0] == self.id:
            group.campaign_soon()
        self.partitions[key] = group
        self.groups[group.group_id] = group
        self._keys[group.group_id] = key
        await self._manager.start(group)
        self._clean_if_compacting()
        logger.info(
            "replica_created", node_id=self.id, topic=key[0], partition=key[1], group=group.group_id
        )

    async def configure_partition(
        self, key: tuple[str, int], settings: TopicSettings, log_start: int
    ) -> None:
        """Give a replica its topic's settings and its partition's log start, where they
        changed (through the controller's log). Settings are recorded with the replica
        first, so a restart opens it with them. Called for every replica at every
        controller change: what has not changed costs no lock and no scheduler pass."""
        group = self.partitions.get(key)
        if group is None or (
            group.log.config == self.storage.log_config_of(key[0], settings)
            and log_start <= group.storage.log_floor
        ):
            return
        async with self._replicas_changing:
            if key in self.partitions:
                await self._configure_partition(key, settings, log_start)

    async def _configure_partition(
        self, key: tuple[str, int], settings: TopicSettings, log_start: int
    ) -> None:
        config = self.storage.log_config_of(key[0], settings)
        group = self.partitions[key]
        log_floor = max(log_start, group.log_floor)
        if group.log.config != config or log_floor != group.storage.log_floor:
            # Kept before it holds: a crash then would let a restart serve again what a
            # trim deleted, until the controller's log told it once more.
            await self._run_sync(self.storage.keep_settings, *key, settings, log_floor)
        if group.log.config != config:
            group.reconfigure(config)
            logger.info("replica_configured", node_id=self.id, topic=key[0], partition=key[1])
            self._clean_if_compacting()
        if log_start > group.log_floor:
            group.trim(log_start)

    async def remove_partition(self, key: tuple[str, int]) -> None:
        """Stop a replica and delete its files (its topic was deleted)."""
        async with self._replicas_changing:
            group_id = await self._stop_replica(key)
            await self._run_sync(self.storage.remove_partition, self.storage.pop(*key))
        logger.info(
            "replica_removed", node_id=self.id, topic=key[0], partition=key[1], group=group_id
        )

    def moved_off(self, key: tuple[str, int]) -> bool:
        """Whether this node's replica of a partition is one the controller now places
        elsewhere (a partition of `default` follows membership instead)."""
        group = self.partitions.get(key)
        topic = self.controller_actor.state.topics.get(key[0])
        if group is None or key[0] == DEFAULT_TOPIC or topic is None:
            return False
        if not 0 <= key[1] < len(topic.partitions):
            return False
        placed = topic.partitions[key[1]]
        return placed.group_id == group.group_id and self.id not in placed.replicas

    async def bury_partition(self, key: tuple[str, int]) -> None:
        """Stop a replica that moved off this node, which its group no longer counts, and
        delete its log, keeping its term and vote (actors/services/tombstones.py). Checked again
        once it holds the lock: a move that placed it here again while its group's leader
        was asked would lose the new replica, which nothing would make again (seed 80100:
        the learner the move added never caught up). A node removed from the cluster is
        placed nowhere (actors/node/burial.py)."""
        async with self._replicas_changing:
            if key not in self.partitions or (self.is_member() and not self.moved_off(key)):
                return
            group_id = await self._stop_replica(key)
            await self._run_sync(self.storage.bury, *key, self.storage.pop(*key))
        logger.info(
            "replica_tombstoned", node_id=self.id, topic=key[0], partition=key[1], group=group_id
        )

    async def remove_tombstone(self, key: tuple[str, int]) -> None:
        """What is left of a replica moved off this node: its topic was deleted."""
        await self._run_sync(self.storage.remove_tombstone, *key)

    async def _stop_replica(self, key: tuple[str, int]) -> int:
        assert self._manager is not None
        group = self.partitions.pop(key)
        del self.groups[group.group_id], self._keys[group.group_id]
        await self._manager.stop(group.group_id)
        await self.flusher.forget(group.group_id)
        self.heartbeats.forget(group.group_id)
        self.campaign_slots.forget(group.group_id)
        self._addresses_changed(group.group_id, None)
        return group.group_id

    # ----------------------------------------------------------------- serving

    def replica(self, topic: str, partition: int) -> ReplicaActor | None:
        """This node's replica of a partition, if the controller still places it here. A
        replica moved away stays on the node, idle until buried (actors/node/burial.py), with
        its commit offset and leader frozen at the move: it must not answer for the
        partition (a reader would see its end stand still)."""
        group = self.partitions.get((topic, partition))
        if group is None:
            return group
        if self.removal.removed:
            # Its replicas' logs stand still, but a group that still counts it (the mover
            # has not placed it elsewhere yet) may still have it lead: it serves until the
            # move makes it step down (the only copy of a partition of one replica, say).
            return group if group.view.is_leader else None
        if topic == DEFAULT_TOPIC:
            return group
        if not self.is_member():
            return None
        found = self.controller_actor.state.topics.get(topic)
        if found is None or not 0 <= partition < len(found.partitions):
            return group  # this node's state lags (it just restarted): trust the replica
        return group if self.id in found.partitions[partition].replicas else None

    def leader_of(self, topic: str, partition: int) -> LeaderReply:
        """The leader of a partition and its term, as this node's replica knows them, or
        else its leader table."""
        if not self.is_member():
            return LeaderReply(None, None, -1)  # what it knows is of an old configuration
        group = self.replica(topic, partition)
        if group is not None:
            leader, term = group.view.leader_id, group.view.term
        elif (entry := self.controller_actor.leaders.get(topic, partition)) is not None:
            leader, term = entry.leader_id, entry.term
        else:
            return LeaderReply(None, None, -1)
        return LeaderReply(leader, self.address_of(leader), term)

    def is_member(self) -> bool:
        """False once the cluster's configuration, as this node last saw it, leaves it out.
        A removed node may never learn that its removal committed, and after a restart it
        cannot even rebuild its state (nobody sends it the controller's log): every view
        it has is frozen or empty, so it answers no calls but sends callers elsewhere."""
        cluster = self.controller.view.config
        in_config = cluster is None or cluster.is_joint or self.id in cluster.members
        return in_config and not self.removal.removed

    def not_a_member(self) -> ErrorReply:
        """Retriable: the client asks the other brokers."""
        return ErrorReply(ErrorCode.NOT_LEADER, f"node {self.id} is not a member of the cluster")

    def _unknown_group(self, message: Message) -> None:
        """A Raft message for a group this node does not host: dropped, as Raft drops a
        lost message."""
        logger.debug("unknown_group", node_id=self.id, group=message.group)

    def peer_connected(self, peer: int) -> None:
        """The transport's link to `peer` connected (transport/network.py)."""
        for group in self.groups.values():
            group.peer_connected(peer)
        self.controller_actor.sync.peer_connected(peer)

    def take_request(self, peer: ConnectionInfo, message: Message, answer: Answer) -> bool:
        """A client append, taken without a task to wait for it (transport/network.py).
        False for anything else, and when the group's mailbox is full."""
        if type(message) is not AppendRequest:
            return False
        group = self.replica(message.topic, message.partition)
        if group is None:
            answer(no_replica(self, message))
            return True
        return group.take_append(message, answer)
