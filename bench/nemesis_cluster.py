"""The fault harness's cluster (bench/nemesis.py runs it, bench/nemesis_faults.py and
bench/nemesis_workload.py act on it): the plan, real `serve` processes behind the harness's
proxy, starting, killing and pausing them, and what the harness last saw of the partitions'
leaders and replicas and of the members."""

from __future__ import annotations

import random
import signal
import time
from dataclasses import dataclass

import trio

from quorumlog.bench.history import DEFAULT_PART, History, Part
from quorumlog.bench.proxy import Links
from quorumlog.cli.localcluster import ProcessCluster, free_ports
from quorumlog.client.aclient import AsyncClient
from quorumlog.client.protocol import DEFAULT_TOPIC

FSYNC_DELAY_MS = 20  # CONTRACT: damaged storage exits 3 within 10 s
REPLICAS_MAX = 3  # of a topic's partitions
SPARE_NODES = 6  # ids beyond the first voters, for nodes added by membership changes


@dataclass(frozen=True)
class Plan:
    seed: int
    faults: tuple[str, ...]
    steps: int = 10
    size: int = 3
    hold_s: tuple[float, float] = (1.0, 3.0)
    producers: int = 3
    topics: tuple[str, ...] = ("nemesis-a", "nemesis-b")
    partitions: int = 3  # of each topic


class NemesisCluster:
    def __init__(self, root: str, plan: Plan):
        self.plan = plan
        self.rng = random.Random(plan.seed)
        count = plan.size + SPARE_NODES
        self.cluster = ProcessCluster(
            root,
            plan.size,
            ports=free_ports(count),
            listen_ports=free_ports(count),
            # A journal of fsyncs (a crash can lose what was unsynced) and a slow disk, so
            # that there is something unsynced to lose.
            env={
                "QUORUMLOG_FAULT_SYNC_JOURNAL": "1",
                "QUORUMLOG_FAULT_FSYNC_DELAY_MS": str(FSYNC_DELAY_MS),
            },
        )
        self.links = Links(random.Random(plan.seed + 1))
        self.history = History()
        self.t0 = time.monotonic()
        self.topics = [DEFAULT_TOPIC, *plan.topics]
        self.parts = [DEFAULT_PART]  # the plan's topics' partitions join once created
        self.topic_replicas: dict[Part, list[int]] = {}  # as describe_topic last said
        self.started: set[int] = set()  # every id ever started (each gets a reader)
        self.paused: set[int] = set()
        self.leaders: dict[Part, tuple[int, int]] = {}  # (node, term), as last seen
        self.hosting: dict[int, set[Part]] = {}  # node -> its replicas, as last seen
        self.controller: int | None = None  # the controller group's leader, as last seen
        self.config: dict = {"voters": list(self.cluster.ids), "learners": []}  # default's
        self.removed: set[int] = set()  # asked to leave by a membership change
        self.next_id = plan.size + 1
        self.faults_injected = 0
        self.slow_disks: list[tuple[float, float]] = []  # (start, end) of each slow-disk fault

    # --- the cluster -------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.t0

    def event(self, what: str, /, **details) -> None:
        self.history.event(self.now(), what, **details)

    @property
    def running(self) -> list[int]:
        return sorted(i for i, p in self.cluster.procs.items() if p.poll() is None)

    @property
    def brokers(self) -> str:
        """Every address a node may have: membership changes can replace all the first
        nodes, and a client that knows only those would find nobody."""
        return ",".join(self.cluster.address(i) for i in range(1, len(self.cluster.ports) + 1))

    @property
    def members(self) -> list[int]:
        return sorted({*self.config["voters"], *self.config["learners"]})

    def hosted_by(self, node_id: int) -> list[Part]:
        """The partitions a node had a replica of when the watcher last asked it."""
        return [p for p in self.parts if p in self.hosting.get(node_id, ())]

    def replicas_of(self, part: Part) -> list[int]:
        """The running replicas of a partition; of `default`, every running node (the
        members, once healed)."""
        placed = self.topic_replicas.get(part)
        return [i for i in self.running if placed is None or i in placed]

    def start(self, node_id: int, extra: list[str] | None = None) -> None:
        if node_id in self.running:
            return  # two faults at once may both restart it: one process per data folder
        # Nodes beyond the first voters were added by membership changes: they join.
        self.cluster.start(node_id, extra, join=node_id > self.plan.size)
        self.started.add(node_id)

    async def kill(self, node_id: int) -> None:
        proc = self.cluster.procs.pop(node_id, None)
        if proc is None:
            return
        proc.send_signal(signal.SIGKILL)
        self.paused.discard(node_id)
        await trio.to_thread.run_sync(proc.wait)

    def signal(self, node_id: int, sig: int) -> None:
        proc = self.cluster.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            (self.paused.add if sig == signal.SIGSTOP else self.paused.discard)(node_id)

    async def leader_now(self, part: Part = DEFAULT_PART, timeout_s: float = 20.0) -> int | None:
        """The partition's leader as the watcher last saw it, waiting a while for one."""
        with trio.move_on_after(timeout_s):
            while (seen := self.leaders.get(part)) is None or seen[0] not in self.running:
                await trio.sleep(0.05)
            return seen[0]
        return None

    def followers(self) -> list[int]:
        """The running voters of `default` that do not lead it."""
        leader = self.leaders.get(DEFAULT_PART, (None,))[0]
        return [i for i in self.config["voters"] if i != leader and i in self.running]

    async def hold(self) -> None:
        await trio.sleep(self.rng.uniform(*self.plan.hold_s))

    async def all_answering(self, timeout_s: float) -> None:
        """Waits until the watcher has heard from every node: a topic's replicas go only to
        nodes the controller hears, and on a loaded machine the last one may still be
        starting when `default` already has a leader."""
        with trio.move_on_after(timeout_s):
            while silent := [i for i in self.running if i not in self.hosting]:
                await trio.sleep(0.05)
            return
        raise RuntimeError(f"nodes {silent} did not answer within {timeout_s} s of the start")

    async def create_topics(self) -> None:
        """The plan's topics, each partition with a leader."""
        replicas = min(REPLICAS_MAX, self.plan.size)
        async with AsyncClient(self.brokers, timeout=30.0) as c:
            for topic in self.plan.topics:
                await c.create_topic(topic, partitions=self.plan.partitions, replicas=replicas)
        await self.read_placement()
        self.parts = [DEFAULT_PART, *self.topic_replicas]
        self.event("topics", replicas={str(p): r for p, r in self.topic_replicas.items()})
        for part in self.parts:
            if await self.leader_now(part, 30.0) is None:
                raise RuntimeError(f"{part} had no leader within 30 s of its creation")

    async def read_placement(self) -> None:
        """Where the topics' replicas are: membership changes do not move them, but the
        controller may."""
        async with AsyncClient(self.brokers, timeout=30.0) as c:
            for topic in self.plan.topics:
                for row in await c.describe_topic(topic):
                    self.topic_replicas[Part(topic, row["partition"])] = row["replicas"]
