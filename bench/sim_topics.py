"""Topic changes while the nemesis runs (bench/simulation.py, `topic_changes`): an operator
who grows the simulated cluster's topics, changes their replication factor, moves their
partitions onto other nodes, changes their retention and segment settings and trims them,
each call drawn from the seed and sent to the controller's leader (calls that fail, time
out or are refused are part of the game); and what must hold whatever they did:

- a partition's log start, as readers of each replica see it, never goes back, and ends
  at or after every start a trim answered;
- every replica ends with its topic's settings, and refuses readers before its
  partition's log start;
- records acknowledged before a trimmed log start may be gone (bench/sim_checks.py);
  everything else acknowledged is where it was, on every replica the partition ends on.
"""

from __future__ import annotations

import random
from dataclasses import replace

import trio

from quorumlog.actors.replica.read_index import read_committed
from quorumlog.bench.sim_checks import controller_state
from quorumlog.bench.sim_cluster import LOG_CONFIG, TOPICS, Cluster, Route, until
from quorumlog.bench.sim_node import SimNode
from quorumlog.controller.state import CONTROLLER_GROUP, DEFAULT_TOPIC, ClusterState
from quorumlog.transport.messages import AdminReply, AdminRequest, ErrorCode, ErrorReply

# Segments of a kilobyte, the nodes' own setting in this kind (a topic's segment.bytes is at
# least 64 KiB, and unsetting it goes back to this): the simulation's few records then
# fill several, and a trim deletes whole segments, as it does with production's volumes.
SMALL_SEGMENTS = replace(LOG_CONFIG, segment_bytes_max=200)
# The topics stamp their records with their leaders' clocks, as `default` does: an
# AlterConfigs that unsets every name leaves them so (the nodes' setting), and retention
# by age then measures from when records were appended (a producer's timestamp of 0
# would be older than any retention.ms).
TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}
# Retention that keeps all a run appends (it lasts minutes of simulated time and holds a
# few kilobytes a partition): what an acknowledged record may lose is its trim only.
RETENTION_MS = (None, 3_600_000, 86_400_000)
RETENTION_BYTES = (None, 1 << 20, 1 << 26)
SEGMENT_BYTES = (None, 64 * 1024, 1 << 20)
MAX_MESSAGE_BYTES = (None, None, 1 << 20, 16)  # 16: every append refused, TOO_LARGE
PARTITIONS_MAX = 8  # a topic grows from 4 up to this
CALL_S = 3.0  # a call not answered by then is left to run on the node, as a client's would
CONFIGURED_BOUND_S = 5.0  # every replica has its topic's settings this long after convergence


class TopicChaos:
    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.rng = random.Random(cluster.rng.getrandbits(64))
        self.trimmed: dict[Route, int] = {}  # the highest log start a trim answered
        # (node, group, incarnation) -> the highest start its readers were given
        self.read_starts: dict[tuple[int, int, str], int] = {}

    # ------------------------------------------------------------------ the operator

    async def run(self, duration_s: float) -> None:
        """Calls drawn from the seed until `duration_s` passed; several may be under way."""
        end = trio.current_time() + duration_s
        async with trio.open_nursery() as calls:
            while trio.current_time() < end:
                await trio.sleep(self.rng.uniform(0.1, 0.6))
                state = self._state()
                request = None if state is None else self._draw(state)
                if request is not None:
                    calls.start_soon(self._call, request)

    def _state(self) -> ClusterState | None:
        """The controller's leader's state; any running node's while it has none."""
        state = controller_state(self.cluster)
        if state is None:
            running = [s.node for s in self.cluster.nodes.values() if s.node]
            state = running[0].controller_actor.state if running else None
        return state

    def _draw(self, state: ClusterState) -> AdminRequest | None:
        rng = self.rng
        topics = [state.topics[name] for name, _ in TOPICS if name in state.topics]
        if not topics or not state.brokers:
            return None
        topic = rng.choice(topics)
        brokers = sorted(state.brokers)
        name = topic.name
        choice = rng.random()
        if choice < 0.15 and len(topic.partitions) < PARTITIONS_MAX:
            grown = min(PARTITIONS_MAX, len(topic.partitions) + rng.randint(1, 2))
            return AdminRequest("alter_topic", {"name": name, "partitions": grown})
        if choice < 0.3:
            factor = rng.randint(1, len(brokers))
            return AdminRequest("alter_topic", {"name": name, "replicas": factor})
        partition = rng.randrange(len(topic.partitions))
        if choice < 0.5:
            to = rng.sample(brokers, rng.randint(1, min(3, len(brokers))))
            return AdminRequest("move_partition", {"topic": name, "partition": partition, "to": to})
        if choice < 0.7:
            names = {
                "retention.ms": RETENTION_MS,
                "retention.bytes": RETENTION_BYTES,
                "segment.bytes": SEGMENT_BYTES,
                "max.message.bytes": MAX_MESSAGE_BYTES,
            }
            chosen = rng.sample(sorted(names), rng.randint(1, len(names)))
            config = {n: rng.choice(names[n]) for n in chosen}
            replace_all = rng.random() < 0.2  # AlterConfigs: every name not given unset
            args = {"name": name, "config": config, "replace": replace_all}
            return AdminRequest("alter_topic", args)
        if choice < 0.75:
            return AdminRequest("partition_moves", {})
        return AdminRequest(
            "trim_partition",
            {"topic": name, "partition": partition, "before": self._trim_point((name, partition))},
        )

    def _trim_point(self, route: Route) -> int:
        """-1 (the committed end), an offset acknowledged to a client, or one past the
        last acknowledged; a trim past the committed end is refused."""
        acked = [
            o.offset for o in self.cluster.outcomes if o.route == route and o.offset is not None
        ]
        draw = self.rng.random()
        if draw < 0.2 or not acked:
            return -1
        if draw < 0.8:
            return self.rng.choice(acked)
        return max(acked) + 1

    async def _call(self, request: AdminRequest) -> None:
        cluster = self.cluster
        cluster.trace.append(f"topic call {request.op} {sorted(request.args.items())}")
        target = self._controller_leader() or self.rng.choice(sorted(cluster.nodes))
        reply = None
        with trio.move_on_after(CALL_S):
            reply = await cluster.request(target, request)
            if isinstance(reply, ErrorReply) and reply.leader_id is not None:
                reply = await cluster.request(reply.leader_id, request)
        cluster.trace.append(f"topic reply {request.op} {_summary(reply)}")
        if isinstance(reply, AdminReply) and request.op == "trim_partition":
            route = (request.args["topic"], request.args["partition"])
            start = reply.result["log_start_offset"]
            self.trimmed[route] = max(self.trimmed.get(route, 0), start)
        self._add_routes()

    def _controller_leader(self) -> int | None:
        for i, sim in sorted(self.cluster.nodes.items()):
            if sim.node is not None and sim.node.controller.core.is_leader:
                return i
        return None

    def _add_routes(self) -> None:
        """Clients append to the partitions a grow added, too."""
        state = controller_state(self.cluster)
        routes = self.cluster.routes
        for name, _ in TOPICS:
            topic = None if state is None else state.topics.get(name)
            for p in () if topic is None else topic.partitions:
                if (name, p.partition) not in routes:
                    routes.append((name, p.partition))

    # ------------------------------------------------------------------ the checks

    async def watch(self) -> None:
        """As the run goes: no replica's readers start earlier than they once did; and
        where retention started a log (the checks let what precedes it go)."""
        while True:
            for i, sim in self.cluster.nodes.items():
                for (topic, partition), group in (sim.node.partitions if sim.node else {}).items():
                    if topic == DEFAULT_TOPIC:
                        continue  # not trimmed here; a witness of it may take older records
                    replica = (i, group.group_id, group.storage.meta.incarnation)
                    start = group.read_start()
                    seen = self.read_starts.get(replica, 0)
                    if start < seen:
                        problem = (
                            f"node {i} {topic}/{partition} (group {group.group_id}): readers' "
                            f"start went back from {seen} to {start}"
                        )
                        if problem not in self.cluster.failures:
                            self.cluster.failures.append(problem)
                    self.read_starts[replica] = max(seen, start)
                    if not group.log.retains_all:
                        retained = self.cluster.retained_from
                        route = (topic, partition)
                        retained[route] = max(retained.get(route, 0), group.log.log_start_offset)
            await trio.sleep(0.01)

    async def wait_configured(self) -> bool:
        """Every replica with its topic's settings and its partition's log start, within
        CONFIGURED_BOUND_S (a trim the chaos asked for may commit just as the faults heal:
        seed 82070's came while a replica was recording it)."""
        return await until(lambda: not self.settings_off(), CONFIGURED_BOUND_S, 0.1)

    def settings_off(self) -> list[str]:
        """Replicas whose log runs with other settings than their topic's, or whose
        readers start before their partition's log start (the controller leader's state
        says which)."""
        state = controller_state(self.cluster)
        if state is None:
            return ["the controller has no leader"]
        off = []
        for i, sim in self._members():
            for (name, partition), group in sim.node.partitions.items():
                topic = state.topics.get(name)
                if topic is None:
                    continue
                wanted = sim.node.storage.log_config_of(name, topic.settings)
                if group.log.config != wanted:
                    off.append(
                        f"node {i} {name}/{partition}: log settings {group.log.config}, "
                        f"its topic's {wanted}"
                    )
                placed = topic.partitions[partition] if partition < len(topic.partitions) else None
                if (
                    placed is not None
                    and placed.group_id == group.group_id
                    and group.read_start() < placed.log_start
                ):
                    off.append(
                        f"node {i} {name}/{partition}: reads from {group.read_start()}, "
                        f"its log start {placed.log_start}"
                    )
        return off

    def _members(self) -> list[tuple[int, SimNode]]:
        """The running nodes of the controller's configuration (a node removed hears no
        more of the topics' changes)."""
        controller = self.cluster.leader_of(CONTROLLER_GROUP)
        members = controller.core.config.members if controller and controller.core.config else ()
        return [
            (i, sim)
            for i, sim in sorted(self.cluster.nodes.items())
            if sim.node is not None and i in members
        ]

    def problems(self, configured: bool) -> list[str]:
        """What the end of a converged run breaks of the rules above."""
        problems = [] if configured else self.settings_off()[:3]
        state = controller_state(self.cluster)
        if state is None:
            return problems
        for route, start in sorted(self.trimmed.items()):
            p = state.partition(*route)
            # The answer is the leader's start, which retention may have moved further; the
            # state keeps positions, a trim's answer is a record offset.
            begins = max(p.log_start, self.cluster.retained_from.get(route, 0))
            if self._records_before(route, begins) < start:
                problems.append(
                    f"{route[0]}/{route[1]} starts at {p.log_start}, trimmed to {start}"
                )
        for topic in state.topics.values():
            for p in topic.partitions:
                for i, sim in self._members():
                    # The replicas that answer readers: one moved off this node is idle
                    # until buried, its log behind the partition's (Node.replica).
                    group = sim.node.replica(p.topic, p.partition)
                    if group is None or group.group_id != p.group_id or not p.log_start:
                        continue
                    before = group.log.records_before(p.log_start) - 1
                    refused = read_committed(group, before, 1024)
                    if group.read_start() < p.log_start or not (
                        isinstance(refused, ErrorReply)
                        and refused.code is ErrorCode.OFFSET_OUT_OF_RANGE
                    ):
                        problems.append(
                            f"node {i} {p.topic}/{p.partition} reads from {group.read_start()}, "
                            f"before its log start {p.log_start}"
                        )
        return problems

    def _records_before(self, route: Route, position: int) -> int:
        """The record offset at `position` of a partition's log, by a replica holding it."""
        for sim in self.cluster.nodes.values():
            group = sim.node.partitions.get(route) if sim.node else None
            if group is not None and group.log.log_start_offset <= position:
                return group.log.records_before(position)
        return position


def _summary(reply: object) -> str:
    if isinstance(reply, ErrorReply):
        return f"{reply.code.name} {reply.message[:80]}"
    return type(reply).__name__
