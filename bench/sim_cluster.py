"""A simulated cluster (bench/simulation.py runs it): its nodes on the in-memory network
and disks, starting, crashing and healing them, its clients, and what it observed of every
group's leaders and configurations as it ran."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass

import trio

from quorumlog.actors.node.node import Node
from quorumlog.actors.replica.actor import ReplicaActor
from quorumlog.actors.services.storage import open_storage
from quorumlog.bench.sim_node import SimNode
from quorumlog.log.config import LogConfig
from quorumlog.log.files import StorageError
from quorumlog.log.records import make_data_batch
from quorumlog.membership.config import Configuration
from quorumlog.membership.quorum import has_quorum
from quorumlog.raft.settings import RaftSettings
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.memory import PERFECT_LINK, LinkFaults, MemoryNetwork
from quorumlog.transport.messages import (
    Acks,
    AdminReply,
    AdminRequest,
    AppendReply,
    AppendRequest,
    ErrorCode,
    ErrorReply,
)

DATA_DIR = "/data"
# Small messages, so that the simulated clusters' few records still make followers
# recover in chunks, as they do in production with much more data.
SETTINGS = RaftSettings(chunk_bytes_max=1024, steady_bytes_max=4096)
ACKS = (Acks.QUORUM, Acks.QUORUM, Acks.LEADER, Acks.NONE)
# `default` takes its leaders' timestamps, and the nodes' clocks disagree by up to two
# seconds each way: a new leader sometimes waits out the gap, sometimes stamps past it,
# and timestamps must still never go back (seed 002; checked in bench/sim_checks.py).
LOG_CONFIG = LogConfig(timestamp_type="log_append", timestamp_wait_max_ms=1000)
CLOCK_SKEW_MAX_S = 2.0
SKEW_SEED = 0x5EED
# A witness that had to lead hands over within this (simulated s; raft/witness.py).
WITNESS_LEAD_BOUND_S = 10.0


# Appends that fail for good (a topic's max.message.bytes lowered refuses them: TOO_LARGE).
REFUSALS = frozenset({ErrorCode.REFUSED, ErrorCode.TOO_LARGE})
TOPICS = (("t0", 4), ("t1", 4), ("t2", 4))
Route = tuple[str, int]  # (topic, partition)
DEFAULT_ROUTE: Route = ("default", 0)


@dataclass
class Outcome:
    value: bytes
    acks: Acks
    route: Route
    offset: int | None  # the offset the cluster acknowledged, None if not acknowledged
    key: bytes | None = None


class Cluster:
    def __init__(
        self,
        seed: int,
        size: int,
        settings: RaftSettings = SETTINGS,
        log_config: LogConfig = LOG_CONFIG,
    ):
        self.seed = seed
        self.log_config = log_config
        self.routes: list[Route] = [DEFAULT_ROUTE]
        self.rng = random.Random(seed)
        self.settings = settings
        self.network = MemoryNetwork(random.Random(self.rng.getrandbits(64)))
        self.addresses = {i: f"127.0.0.1:{7000 + i}" for i in range(1, size + 1)}
        self.nodes = {i: SimNode(i) for i in self.addresses}
        for sim in self.nodes.values():
            sim.base_fsync_s = sim.fsync_s = self.rng.uniform(0.0, 0.004)
        skews = random.Random(seed + SKEW_SEED)  # apart: the seeds' schedules stay as they were
        for sim in self.nodes.values():
            sim.clock_skew_s = skews.uniform(-CLOCK_SKEW_MAX_S, CLOCK_SKEW_MAX_S)
        self.outcomes: list[Outcome] = []
        self.leaders: dict[tuple[int, int], set[int]] = {}  # (group, term) -> its leaders
        # (node, group, term) -> when a witness began to lead it (raft/witness.py)
        self.witness_leads: dict[tuple[int, int, int], float] = {}
        self.trace: list[str] = []
        self.failures: list[str] = []
        # (group, configuration, the one that replaced it) as seen in some log
        self.successions: set[tuple[int, Configuration, Configuration]] = set()
        self.leader_hints: dict[Route, int] = {}
        # Clients' records take keys from this many (a compacted topic needs them); 0: none.
        self.keys = 0
        # Where retention started some replica's log (the topic changes set it): committed
        # entries before it may be gone from every replica. Retention drops a sealed segment
        # of control entries alone whatever its age: they carry no timestamp.
        self.retained_from: dict[Route, int] = {}

    # ---------------------------------------------------------------- node lifecycle

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.node is not None]

    async def start(self, nursery: trio.Nursery, node_id: int) -> None:
        sim = self.nodes[node_id]
        assert sim.node is None
        node_rng = random.Random(self.rng.getrandbits(64))
        storage = open_storage(
            sim.fs,
            DATA_DIR,
            node_id=node_id,
            peers=self.addresses,
            rng=node_rng,
            run_sync=sim.run_sync,
            log_config=self.log_config,
        )
        node = Node(
            node_id,
            storage,
            settings=self.settings,
            rng=node_rng,
            run_sync=sim.run_sync,  # the flusher's fsyncs take this node's disk time too
            wall_clock_ms=sim.wall_clock_ms,
        )
        sim.node, sim.scope, sim.stopped = node, trio.CancelScope(), trio.Event()
        sim.last_commit = {}
        peers = {p: a for p, a in self.addresses.items() if p != node_id}
        self.trace.append(f"start {node_id}")

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            try:
                with sim.scope:
                    await node.run(
                        lambda handler: self.network.open_node(node_id, handler, peers=peers),
                        task_status=task_status,
                    )
            except StorageError as exc:
                self.failures.append(f"node {node_id} storage error: {exc}")
            finally:
                sim.node = None
                sim.stopped.set()

        await nursery.start(run)

    async def crash(self, node_id: int) -> None:
        sim = self.nodes[node_id]
        if sim.node is None:
            return
        sim.scope.cancel()
        await sim.stopped.wait()
        sim.fs.crash(self.rng)
        self.trace.append(f"crash {node_id}")

    # ---------------------------------------------------------------- observation

    async def observe(self) -> None:
        """Every few ms of simulated time, in every group: leaders per term, commit
        monotonic, I4."""
        while True:
            for i, sim in self.nodes.items():
                node = sim.node
                if node is None:
                    continue
                for gid, group in node.groups.items():
                    core = group.core
                    if core.is_leader:
                        self.leaders.setdefault((gid, core.term), set()).add(i)
                        if i in core.config.witnesses:
                            self._check_witness_lead(i, gid, core)
                    replica = (gid, group.storage.meta.incarnation)
                    if core.is_leader:
                        sim.led.add(replica)
                    last = sim.last_commit.get(replica, -1)
                    if core.commit_offset < last:
                        self.failures.append(
                            f"node {i} group {gid} commit went back {last}->{core.commit_offset}"
                        )
                    # A commit below the log's start is of records this replica does not
                    # hold (its log started again at the leader's start, as a witness's
                    # does): committed on a majority elsewhere, nothing of its own to flush.
                    if (
                        core.commit_offset > group.log.flushed_offset
                        and core.commit_offset >= group.log.log_start_offset
                        and replica not in sim.led
                    ):
                        self.failures.append(
                            f"node {i} group {gid} commit {core.commit_offset} above flushed"
                        )
                    sim.last_commit[replica] = core.commit_offset
            self._check_active_configs()
            await trio.sleep(0.005)

    def note_leader(self, core) -> None:
        """A replica that leads, seen at a commit: a leader outside C(new) steps down as
        C(new) commits, which may fall between two looks of `observe`."""
        sim = self.nodes[core.id]
        group = sim.node.groups.get(core.group_id) if sim.node is not None else None
        if group is not None:
            self.leaders.setdefault((core.group_id, core.term), set()).add(core.id)
            sim.led.add((core.group_id, group.storage.meta.incarnation))

    def _check_witness_lead(self, node_id: int, gid: int, core) -> None:
        """A witness leads only to hand over: it serves no client, and a voter that can
        lead takes over soon (unless it needs records the witness does not hold)."""
        began = self.witness_leads.setdefault((node_id, gid, core.term), trio.current_time())
        if core.serves_clients:
            self.failures.append(f"node {node_id} serves group {gid} as leader, a witness")
        needs_older = any(
            p.match_offset < core.log.log_start_offset for p in core.progress.values()
        )
        if trio.current_time() - began > WITNESS_LEAD_BOUND_S and not needs_older:
            self.failures.append(
                f"node {node_id}, a witness, led group {gid} in term {core.term} for "
                f"{WITNESS_LEAD_BOUND_S} s"
            )

    def _check_active_configs(self) -> None:
        """A configuration and the one that follows it in some log, both in effect
        somewhere, must have majorities that meet (the joint rule at every step). Older
        ones are harmless: the change after them committed first, on nodes whose longer
        logs win every vote; so is a change on a branch that lost (a configuration with
        the next version number on another branch does not follow it)."""
        active: dict[int, set] = {}
        for sim in self.nodes.values():
            if sim.node is not None:
                for gid, group in sim.node.groups.items():
                    configs = group.core.configs
                    if configs.current is not None:
                        active.setdefault(gid, set()).add(configs.current)
                    if configs.previous is not None:
                        self.successions.add((gid, configs.previous, configs.current))
        for gid, a, b in self.successions:
            if a in active.get(gid, ()) and b in active[gid] and not quorums_intersect(a, b):
                problem = f"group {gid}: configs {a.to_json()} and {b.to_json()} active together"
                if problem not in self.failures:
                    self.failures.append(problem)

    # ---------------------------------------------------------------- clients

    async def append(
        self,
        value: bytes,
        acks: Acks,
        producer: tuple[int, int],
        route: Route,
        timeout_s: float,
        key: bytes | None = None,
    ) -> int | None:
        """One idempotent append, retried (same producer sequence) until the deadline."""
        producer_id, seq = producer
        batch = make_data_batch([(key, value, 0, None)], producer_id=producer_id, producer_seq=seq)
        request = AppendRequest(batch, acks, producer_id, seq, *route)
        with trio.move_on_after(timeout_s):
            while True:
                target = self.leader_hints.get(route) or self.rng.choice(list(self.addresses))
                reply = await self.request(target, request)
                if isinstance(reply, AppendReply):
                    self.leader_hints[route] = target
                    return reply.first_offset
                if isinstance(reply, ErrorReply) and reply.code in REFUSALS:
                    return None
                hint = reply.leader_id if isinstance(reply, ErrorReply) else None
                if hint is None:
                    self.leader_hints.pop(route, None)
                else:
                    self.leader_hints[route] = hint
                await trio.sleep(0.02)
        return None

    async def create_topics(self, config: dict | None = None) -> None:
        """Create TOPICS through the controller's leader (`config`: their settings, by
        Kafka's names)."""
        for name, partitions in TOPICS:
            await self.create_topic(name, partitions, timeout_s=5.0, config=config)
            self.routes += [(name, p) for p in range(partitions)]
            self.trace.append(f"created {name}")

    async def create_topic(
        self, name: str, partitions: int, timeout_s: float, config: dict | None = None
    ) -> None:
        """Create a topic through the controller's leader, found by asking around."""
        replicas = min(3, len(self.nodes))
        args = {"name": name, "partitions": partitions, "replicas": replicas, "config": config}
        request = AdminRequest("create_topic", {**args, "timeout_s": timeout_s})
        target = min(self.nodes)
        while not isinstance(reply := await self.request(target, request), AdminReply):
            hint = reply.leader_id if isinstance(reply, ErrorReply) else None
            target = hint or self.rng.choice(list(self.nodes))
            await trio.sleep(0.05)

    async def request(self, target: int, request: AppendRequest | AdminRequest):
        """The reply, or None if the node was unreachable or went away."""
        reply = None
        try:
            async with self.network.connect(target) as conn:
                reply = await conn.request(request)
        except* ConnectionClosed:
            pass
        return reply

    async def client(self, client_id: int, count: int) -> None:
        rng = random.Random(self.rng.getrandbits(64))
        for k in range(count):
            acks = rng.choice(ACKS)
            value = b"c%d-%d" % (client_id, k)
            route = rng.choice(self.routes)
            key = b"k%d" % rng.randrange(self.keys) if self.keys else None
            offset = await self.append(value, acks, (client_id, k), route, 1.0, key)
            self.outcomes.append(Outcome(value, acks, route, offset, key))
            self.trace.append(f"ack {value!r} {acks.name} {offset}")
            await trio.sleep(rng.uniform(0, 0.03))

    def heal_disks(self) -> None:
        for sim in self.nodes.values():
            sim.fsync_s = sim.base_fsync_s

    def set_link_faults(self, faults: LinkFaults) -> None:
        # Client links too: a duplicated append is a retry, which idempotence must absorb.
        self.network.set_faults(faults)

    async def heal_all(self, nursery: trio.Nursery) -> None:
        self.network.heal()
        self.network.dropped_types = frozenset()
        self.set_link_faults(PERFECT_LINK)
        self.heal_disks()
        for i, sim in self.nodes.items():
            if sim.node is None:
                await self.start(nursery, i)

    def group_ids(self) -> set[int]:
        return {gid for s in self.nodes.values() if s.node for gid in s.node.groups}

    def stamps_log_append(self, gid: int) -> bool:
        """Whether group `gid`'s leaders stamp its batches (a log-append topic)."""
        return any(g.log.config.timestamp_type == "log_append" for g in self.replicas(gid).values())

    def replicas(self, gid: int) -> dict[int, ReplicaActor]:
        """Node id -> its replica of group `gid`, on the running nodes that host one."""
        return {
            i: s.node.groups[gid] for i, s in self.nodes.items() if s.node and gid in s.node.groups
        }

    def leader_of(self, gid: int) -> ReplicaActor | None:
        """The replica of group `gid` that leads in the highest term, if any leads."""
        leaders = [g for g in self.replicas(gid).values() if g.core.is_leader]
        return max(leaders, key=lambda g: g.core.term, default=None)

    def group_converged(self, gid: int) -> bool:
        replicas = self.replicas(gid)
        leader = self.leader_of(gid)
        if leader is None or leader.core.configs.change_in_flight:
            return False
        target = leader.log.dirty_offset
        return all(
            m in replicas
            and replicas[m].core.commit_offset == target
            and replicas[m].log.dirty_offset == target
            for m in leader.core.config.members
        )

    def controllers_behind(self) -> list[int]:
        """Running nodes whose controller has not applied all it committed: the replicas
        they host would not follow the cluster's metadata. Committed as the Raft core
        says: a round that commits publishes its view only once its metadata is saved, and
        a check made meanwhile took a node that had not learned the cluster's id for one
        that had applied everything (seed 82393)."""
        return [
            i
            for i, s in sorted(self.nodes.items())
            if s.node is not None
            and s.node.controller_actor.applied_through < s.node.controller.core.commit_offset
        ]

    async def wait_converged(self, timeout_s: float) -> bool:
        """I7: in every group a leader exists and every member holds and commits its log,
        and every node applied what its controller committed."""
        return await until(
            lambda: (
                not self.controllers_behind()
                and all(self.group_converged(gid) for gid in self.group_ids())
            ),
            timeout_s,
            0.05,
        )


async def until(done: Callable[[], bool], timeout_s: float, poll_s: float) -> bool:
    """Whether `done()` held within `timeout_s` (simulated), checked every `poll_s`."""
    with trio.move_on_after(timeout_s):
        while not done():
            await trio.sleep(poll_s)
        return True
    return False


@functools.cache
def quorums_intersect(a, b) -> bool:
    """Every quorum of `a` shares a node with every quorum of `b` (brute force, <= 7 nodes)."""
    nodes = sorted(a.members | b.members)
    for mask in range(1 << len(nodes)):
        chosen = {n for i, n in enumerate(nodes) if mask >> i & 1}
        if has_quorum(a, chosen) and has_quorum(b, set(nodes) - chosen):
            return False
    return True
