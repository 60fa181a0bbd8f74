"""`quorumlog bench nemesis`: real `serve` processes, real faults, and a checker of every
promise in docs/reliability.md, in every partition.

A run starts a cluster whose links all pass through the harness's proxy (bench/proxy.py),
with every node's fsyncs journaled (so a crash can lose exactly what was not yet durable),
and creates two topics of three partitions beside `default`: each partition is its own Raft
group, with its own log, offsets, leaders and terms. Producers append unique values (acks
quorum mostly, some leader and none) to partitions drawn from the seed, a reader per node
polls what each of that node's replicas has committed, and a watcher records who leads
each partition in which term (bench/nemesis_workload.py), and a stream-mode and a queue-mode
consumer group consume the topics (bench/nemesis_consumers.py). Then a seeded schedule of faults
runs (bench/nemesis_faults.py), one step after another, each held for a while and healed;
membership changes run during the other faults. At the end everything is healed and
restarted, every partition must accept appends again, the replicas of each must converge,
the consumers must read to the end, and the checkers (bench/history.py,
bench/nemesis_consumers.py) compare the history with each partition's logs and with what
the groups were given.

    quorumlog bench nemesis --seed 7 --faults kill-leader,partition,membership --steps 8

The schedule's random draws (which faults, for how long, which partition's leader, which
of the candidate nodes) come from the seed; the timing of real processes does not, and the
candidates can depend on it (who leads when the fault starts), so a replay repeats the
faults, not the interleaving. Every run writes its history (faults and appends, as JSON
lines) beside the figures.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import tempfile

import trio

from quorumlog.bench.history import (
    DEFAULT_PART,
    History,
    Log,
    Part,
    check,
    throughput_ratio,
    unavailable_s,
)
from quorumlog.bench.nemesis_cluster import NemesisCluster, Plan
from quorumlog.bench.nemesis_consumers import Consumers
from quorumlog.bench.nemesis_faults import ACTIONS
from quorumlog.bench.nemesis_workload import producer, read_logs, reader, wait_converged, watcher
from quorumlog.bench.proxy import serve_front
from quorumlog.client.aclient import AsyncClient
from quorumlog.client.errors import QuorumLogError

FAULTS = tuple(ACTIONS)
# Faults that can run together: one on the links, one on the processes.
LINK_FAULTS = frozenset({"isolate-leader", "partition", "bridge", "one-way", "slow", "flap"})
PROCESS_FAULTS = frozenset(
    {"kill-leader", "kill-controller", "kill-follower", "kill-majority", "pause-leader"}
)
COMBINED_SHARE = 0.3
RECOVERY_TIMEOUT_S = 60.0


class Nemesis(NemesisCluster):
    def __init__(self, root: str, plan: Plan):
        super().__init__(root, plan)
        self.consumers = Consumers(self)  # a stream group and a queue group
        self._nursery: trio.Nursery | None = None

    def start(self, node_id: int, extra: list[str] | None = None) -> None:
        """As the cluster's; a node started for the first time gets a reader."""
        first = node_id not in self.started
        super().start(node_id, extra)
        if first:
            assert self._nursery is not None
            self._nursery.start_soon(reader, self, node_id)

    # --- the run -------------------------------------------------------------------------

    async def step(self, index: int) -> None:
        """One fault; sometimes a second one at the same time: a process fault during a
        link fault (or the reverse), and a membership change during either."""
        names = [self.rng.choice(self.plan.faults)]
        for family, other in ((LINK_FAULTS, PROCESS_FAULTS), (PROCESS_FAULTS, LINK_FAULTS)):
            partners = sorted(other & set(self.plan.faults))
            if names[0] in family and partners and self.rng.random() < COMBINED_SHARE:
                names.append(self.rng.choice(partners))
        during = names[0] != "membership" and "membership" in self.plan.faults
        if during and self.rng.random() < 0.5:
            names.append("membership")
        self.faults_injected += len(names)
        self.event("step", index=index, faults=names)
        async with trio.open_nursery() as nursery:
            for name in names[1:]:
                nursery.start_soon(ACTIONS[name], self)
            await ACTIONS[names[0]](self)

    async def heal_all(self) -> None:
        self.links.heal()
        for node_id in list(self.paused):
            self.signal(node_id, signal.SIGCONT)
        members = set(self.members)
        for node_id in sorted(self.started):
            proc = self.cluster.procs.pop(node_id, None)
            if proc is not None and proc.poll() is not None:
                self.history.violations.append(f"node {node_id} exited by itself: {proc.poll()}")
            elif proc is not None:
                self.cluster.procs[node_id] = proc
            running = node_id in self.running
            if node_id in members and not running:
                self.start(node_id)
            elif node_id not in members and running:
                await self.kill(node_id)  # removed from the cluster: it has no more say
        self.event("heal all", members=sorted(members))

    async def recover(self) -> float | None:
        """Seconds until every partition took a quorum append after healing (I7)."""
        start = self.now()
        waiting = set(self.parts)

        async def first_ack(client: AsyncClient, part: Part) -> None:
            for attempt in itertools.count():
                # A value of its own each time: an attempt that failed may still have been
                # appended (a reply lost, an outcome unknown), and the history's values
                # must stay unique, or the retry would read as a duplicate (I3).
                value = f"healed-{self.plan.seed}-{part}-{attempt}".encode()
                try:
                    await client.append([value], topic=part.topic, partition=part.partition)
                    waiting.discard(part)
                    return
                except QuorumLogError as exc:
                    self.event("append after healing failed", partition=str(part), error=str(exc))
                    await trio.sleep(0.1)

        with trio.move_on_after(RECOVERY_TIMEOUT_S):
            async with AsyncClient(self.brokers, timeout=5.0) as c, trio.open_nursery() as tasks:
                for part in self.parts:
                    tasks.start_soon(first_ack, c, part)
        if waiting:
            self.history.violations.append(
                f"I7: no quorum append succeeded within {RECOVERY_TIMEOUT_S} s of healing in "
                + ", ".join(str(p) for p in sorted(waiting))
            )
            return None
        return self.now() - start

    async def run(self) -> dict:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for i in range(1, len(self.cluster.ports) + 1):
                await nursery.start(
                    serve_front,
                    self.links,
                    i,
                    self.cluster.ports[i - 1],
                    self.cluster.listen_ports[i - 1],
                )
            for i in self.cluster.ids:
                self.start(i)
            nursery.start_soon(watcher, self)
            if await self.leader_now(DEFAULT_PART, 30.0) is None:
                raise RuntimeError("no leader within 30 s of the start")
            await self.all_answering(30.0)
            await self.create_topics()
            nursery.start_soon(self.consumers.run)
            stop = trio.Event()
            async with trio.open_nursery() as workload:
                for p in range(self.plan.producers):
                    workload.start_soon(producer, self, f"s{self.plan.seed}p{p}", stop)
                await trio.sleep(1.0)
                for index in range(self.plan.steps):
                    await self.step(index)
                    await trio.sleep(self.rng.uniform(0.5, 1.5))
                await self.heal_all()
                healed_at = self.now()
                recovery_s = await self.recover()
                stop.set()
            await self.heal_all()  # the config may have changed while it recovered
            if not await self.consumers.drain(self.history, RECOVERY_TIMEOUT_S):
                self.history.violations.append(
                    f"consumers did not read to the end within {RECOVERY_TIMEOUT_S} s of healing "
                    f"(last errors: {self.consumers.last_error})"
                )
            result = await self.settle_and_check(healed_at, recovery_s)
            nursery.cancel_scope.cancel()
        return result

    async def final_logs(self) -> dict[Part, dict[int, Log]]:
        """Every running replica's log of each partition whose replicas converged, where
        the controller last placed them: a node that joined may still be getting replicas
        moved onto it (the rebalancer) while the others converge, so the logs are read
        again, after the next convergence, while the placement changed as they were read
        (a node asked for a replica moved off it meanwhile holds none: seed 101), for at
        most RECOVERY_TIMEOUT_S."""
        deadline = trio.current_time() + RECOVERY_TIMEOUT_S
        while True:
            unsettled = await wait_converged(self, RECOVERY_TIMEOUT_S)
            read_on = dict(self.topic_replicas)
            settled = [p for p in self.parts if p not in unsettled]
            logs, unreadable = await self._read_logs(settled)
            try:
                await self.read_placement()
            except QuorumLogError as exc:
                self.history.violations.append(f"I7: the topics could not be described: {exc}")
                break
            if unsettled or self.topic_replicas == read_on or trio.current_time() >= deadline:
                break
        for part, views in unsettled.items():
            self.history.violations.append(
                f"I7 {part}: the replicas did not converge within {RECOVERY_TIMEOUT_S} s: "
                f"(dirty, commit) {views}"
            )
        self.history.violations += unreadable
        return {part: replicas for part, replicas in logs.items() if replicas}

    async def _read_logs(self, parts: list[Part]) -> tuple[dict[Part, dict[int, Log]], list[str]]:
        """Each running replica's log of `parts` as placed now, and the nodes that could
        not answer."""
        logs: dict[Part, dict[int, Log]] = {p: {} for p in parts}
        unreadable = []
        for node_id in self.running:
            mine = [p for p in parts if node_id in self.replicas_of(p)]
            try:
                found = await trio.to_thread.run_sync(
                    read_logs, self.cluster.address(node_id), mine
                )
            except QuorumLogError as exc:
                unreadable.append(f"I7: node {node_id}'s logs could not be read: {exc}")
                continue
            for part, log in found.items():
                logs[part][node_id] = log
        return logs, unreadable

    async def settle_and_check(self, healed_at: float, recovery_s: float | None) -> dict:
        logs = await self.final_logs()
        figures = check(self.history, logs) if logs else {"violations": self.history.violations}
        consumed = self.consumers.check(self.history)
        violations = figures.pop("violations") + consumed.pop("violations")
        levels = ("quorum", "leader", "none")
        return {
            "seed": self.plan.seed,
            "faults": self.faults_injected,
            "attempted q/l/n": "/".join(str(figures.get(f"{a}_attempted", "?")) for a in levels),
            "acked q/l/n": "/".join(str(figures.get(f"{a}_acked", "?")) for a in levels),
            "lost q/l/n": "/".join(str(figures.get(f"{a}_lost", "?")) for a in levels),
            "unknown": figures.get("unknown_outcomes"),
            "unavailable_s": round(unavailable_s(self.history, 1.0, healed_at), 2),
            # Quorum acks/s during each slow-disk fault over as long a time before it.
            "slow_disk_ratios": [
                throughput_ratio(self.history, start, end) for start, end in self.slow_disks
            ],
            "recovery_s": None if recovery_s is None else round(recovery_s, 2),
            "delivered s/q": f"{consumed['stream_delivered']}/{consumed['queue_delivered']}",
            "violations": len(violations),
            "details": {
                **figures,
                **consumed,
                "dropped_frames": self.links.dropped,
                "violations": violations,
            },
        }


def run_plan(root: str, plan: Plan) -> tuple[dict, History]:
    nemesis = Nemesis(root, plan)
    try:
        result = trio.run(nemesis.run)
    finally:
        nemesis.cluster.stop_all()
    return result, nemesis.history


def parse_faults(faults: str | None) -> tuple[str, ...]:
    chosen = tuple(f.strip() for f in faults.split(",")) if faults else FAULTS
    unknown = set(chosen) - set(FAULTS)
    if unknown:
        raise ValueError(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
    return chosen


def run(
    quick: bool = False,
    seeds: int | None = None,
    seed: int | None = None,
    faults: tuple[str, ...] = FAULTS,
    steps: int | None = None,
    out_dir: str = "bench-results",
) -> list[dict]:
    chosen = faults
    first = seed if seed is not None else 1
    rows = []
    os.makedirs(out_dir, exist_ok=True)
    for s in range(first, first + (seeds or 1)):
        plan = Plan(s, chosen, steps or (6 if quick else 20))
        with tempfile.TemporaryDirectory(prefix="quorumlog-nemesis-") as root:
            result, history = run_plan(root, plan)
            history_path = os.path.join(out_dir, f"nemesis-seed{s}-history.jsonl")
            history.write(history_path)
            if result["violations"]:
                with contextlib.suppress(OSError):
                    keep = os.path.join(out_dir, f"nemesis-seed{s}-nodes")
                    _keep_node_logs(root, keep)
        replay = (
            f"quorumlog bench nemesis --seed {s} --faults {','.join(chosen)} --steps {plan.steps}"
        )
        if result["violations"]:
            print(
                f"seed {s} broke a promise: {result['details']['violations'][:5]}", file=sys.stderr
            )
            print(f"replay: {replay}  (history: {history_path})", file=sys.stderr)
        result["details"].update(history=history_path, replay=replay)
        rows.append({"figure": "nemesis run", **result})
    return rows


def _keep_node_logs(root: str, keep: str) -> None:
    os.makedirs(keep, exist_ok=True)
    for name in os.listdir(root):
        if name.endswith(".log"):
            with (
                open(os.path.join(root, name), "rb") as src,
                open(os.path.join(keep, name), "wb") as dst,
            ):
                dst.write(src.read())
