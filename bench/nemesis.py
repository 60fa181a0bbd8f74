"""`quorumlog bench nemesis`: real `serve` processes, real faults, and a checker of every
promise in RELIABILITY.md.

A run starts a cluster whose links all pass through the harness's proxy (bench/proxy.py),
with every node's fsyncs journaled (so a crash can lose exactly what was not yet durable).
Producers append unique values (acks quorum mostly, some leader and none), a reader per
node polls what that node has committed, and a watcher records who leads in which term.
Then a seeded schedule of faults runs, one step after another, each held for a while and
healed; membership changes run during the other faults. At the end everything is healed
and restarted, the cluster must accept appends again, the nodes must converge, and the
checker (bench/history.py) compares the history with every member's log.

    quorumlog bench nemesis --seed 7 --faults kill-leader,partition,membership --steps 8

The schedule's random draws (which faults, for how long, which of the candidate nodes) come
from the seed; the timing of real processes does not, and the candidates can depend on it
(who leads when the fault starts), so a replay repeats the faults, not the interleaving. Every run writes its history (faults and appends, as JSON lines) beside
the figures.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from bench import faults as disk
from bench.history import Append, History, check, unavailable_s
from bench.proxy import Links, serve_front
from bench.workload import status_of
from quorumlog.aclient import AsyncClient
from quorumlog.client import Client
from quorumlog.errors import QuorumLogError
from quorumlog.localcluster import ProcessCluster, free_ports

FAULTS = (
    "kill-leader",
    "kill-controller",
    "kill-follower",
    "kill-majority",
    "pause-leader",
    "isolate-leader",
    "partition",
    "bridge",
    "one-way",
    "slow",
    "flap",
    "lose-unsynced",
    "lose-unsynced-all",
    "damage",
    "membership",
)
# Faults that can run together: one on the links, one on the processes.
LINK_FAULTS = frozenset({"isolate-leader", "partition", "bridge", "one-way", "slow", "flap"})
PROCESS_FAULTS = frozenset(
    {"kill-leader", "kill-controller", "kill-follower", "kill-majority", "pause-leader"}
)
COMBINED_SHARE = 0.3
ACKS_WEIGHTS = {"quorum": 8, "leader": 1, "none": 1}
SPARE_NODES = 6  # ids beyond the first voters, for nodes added by membership changes
RECOVERY_TIMEOUT_S = 60.0
STARTUP_REFUSAL_S = 10.0
FSYNC_DELAY_MS = 20  # CONTRACT: damaged storage exits 3 within 10 s


@dataclass(frozen=True)
class Plan:
    seed: int
    faults: tuple[str, ...] = FAULTS
    steps: int = 10
    size: int = 3
    hold_s: tuple[float, float] = (1.0, 3.0)
    producers: int = 3


class Nemesis:
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
        self.started: set[int] = set()  # every id ever started (each gets a reader)
        self.paused: set[int] = set()
        self.leader: int | None = None
        self.term = 0
        self.controller: int | None = None  # the controller group's leader, as last seen
        self.config: dict = {"voters": list(self.cluster.ids), "learners": []}
        self.next_id = plan.size + 1
        self.faults_injected = 0
        self._nursery: trio.Nursery | None = None

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

    def start(self, node_id: int, extra: list[str] | None = None) -> None:
        if node_id in self.running:
            return  # two faults at once may both restart it: one process per data folder
        # Nodes beyond the first voters were added by membership changes: they join.
        self.cluster.start(node_id, extra, join=node_id > self.plan.size)
        if node_id not in self.started:
            self.started.add(node_id)
            assert self._nursery is not None
            self._nursery.start_soon(self._reader, node_id)

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

    async def leader_now(self, timeout_s: float = 20.0) -> int | None:
        """The leader as the watcher last saw it, waiting a while for one to exist."""
        with trio.move_on_after(timeout_s):
            while self.leader is None or self.leader not in self.running:
                await trio.sleep(0.05)
            return self.leader
        return None

    def followers(self) -> list[int]:
        return [i for i in self.config["voters"] if i != self.leader and i in self.running]

    async def hold(self) -> None:
        await trio.sleep(self.rng.uniform(*self.plan.hold_s))

    # --- the workload --------------------------------------------------------------------

    async def _producer(self, name: str, stop: trio.Event) -> None:
        rng = random.Random(f"{self.plan.seed}-{name}")
        acks_levels, weights = list(ACKS_WEIGHTS), list(ACKS_WEIGHTS.values())
        async with AsyncClient(self.brokers, timeout=5.0) as client:
            n = 0
            while not stop.is_set():
                value = f"{name}-{n}".encode()
                acks = rng.choices(acks_levels, weights)[0]
                start = self.now()
                try:
                    offset = await client.append([value], acks=acks)
                    outcome = "ok"
                except QuorumLogError:
                    offset, outcome = None, "unknown"
                self.history.appends.append(Append(value, acks, start, self.now(), outcome, offset))
                n += 1
                await trio.sleep(rng.uniform(0, 0.01))

    async def _reader(self, node_id: int) -> None:
        """Polls one node's committed records from the start, as a consumer would."""
        next_offset = 0
        async with AsyncClient(self.cluster.address(node_id), timeout=2.0, direct=True) as c:
            while True:
                try:
                    records = await c.read(next_offset, 500)
                except QuorumLogError:
                    await trio.sleep(0.2)
                    continue
                if records:
                    self.history.saw_records(node_id, [(r.offset, r.value) for r in records])
                    next_offset = records[-1].offset + 1
                else:
                    await trio.sleep(0.05)

    async def _watcher(self) -> None:
        """Who leads, in which term, with which configuration: every 100 ms."""
        while True:
            for node_id in self.running:
                if node_id in self.paused:
                    continue
                status = await status_of(self.cluster.address(node_id))
                if status is not None and status.get("controller_id") == node_id:
                    self.controller = node_id
                if status is None or status.get("role") != "leader":
                    continue
                term = status["term"]
                self.history.saw_leader(term, node_id)
                if (self.leader, self.term) != (node_id, term):
                    self.event("leader", node=node_id, term=term)
                self.leader, self.term = node_id, term
                config = status["config"]
                if config.get("joint") is None:
                    self.config = config
            await trio.sleep(0.1)

    # --- the faults ----------------------------------------------------------------------

    async def kill_and_restart(self, nodes: list[int]) -> None:
        for node_id in nodes:
            await self.kill(node_id)
        self.event("kill", nodes=nodes)
        await self.hold()
        for node_id in nodes:
            self.start(node_id)
        self.event("restart", nodes=nodes)

    async def kill_leader(self) -> None:
        leader = await self.leader_now()
        if leader is not None:
            await self.kill_and_restart([leader])

    async def kill_controller(self) -> None:
        """The controller group's leader (topic calls and membership go through it)."""
        if self.controller is not None and self.controller in self.running:
            await self.kill_and_restart([self.controller])

    async def kill_follower(self) -> None:
        if followers := self.followers():
            await self.kill_and_restart([self.rng.choice(followers)])

    async def kill_majority(self) -> None:
        voters = [i for i in self.config["voters"] if i in self.running]
        await self.kill_and_restart(self.rng.sample(voters, len(voters) // 2 + 1))

    async def pause_leader(self) -> None:
        leader = await self.leader_now()
        if leader is None:
            return
        self.signal(leader, signal.SIGSTOP)
        self.event("pause", node=leader)
        await self.hold()
        self.signal(leader, signal.SIGCONT)
        self.event("resume", node=leader)

    async def partitioned(self, groups: list[set[int]], what: str) -> None:
        self.links.partition(groups)
        self.event(what, groups=[sorted(g) for g in groups])
        await self.hold()
        self.links.heal()
        self.event("heal")

    async def isolate_leader(self) -> None:
        leader = await self.leader_now()
        if leader is not None:
            await self.partitioned([{leader}, set(self.members) - {leader}], "isolate")

    async def partition(self) -> None:
        nodes = self.members
        self.rng.shuffle(nodes)
        cut = self.rng.randint(1, len(nodes) // 2)
        await self.partitioned([set(nodes[:cut]), set(nodes[cut:])], "partition")

    async def bridge(self) -> None:
        """Two sides that cannot talk, and one node that talks to both."""
        nodes = self.members
        self.rng.shuffle(nodes)
        bridge, rest = nodes[0], nodes[1:]
        half = max(1, len(rest) // 2)
        left, right = set(rest[:half]), set(rest[half:])
        for a in left:
            for b in right:
                self.links.cut.update({(a, b), (b, a)})
        self.event("bridge", bridge=bridge, left=sorted(left), right=sorted(right))
        await self.hold()
        self.links.heal()
        self.event("heal")

    async def one_way(self) -> None:
        leader = await self.leader_now()
        if leader is None:
            return
        outward = self.rng.random() < 0.5  # the leader cannot send, or cannot hear
        for other in self.members:
            if other != leader:
                pair = (leader, other) if outward else (other, leader)
                self.links.cut_one_way(*pair)
        self.event("one-way", leader=leader, leader_can="hear" if outward else "send")
        await self.hold()
        self.links.heal()
        self.event("heal")

    async def slow(self) -> None:
        pairs = [(a, b) for a in self.members for b in self.members if a != b]
        delay, loss = self.rng.uniform(0.02, 0.2), self.rng.uniform(0.0, 0.2)
        self.links.slow(pairs, delay, loss)
        self.event("slow", delay_s=round(delay, 3), loss=round(loss, 3))
        await self.hold()
        self.links.heal()
        self.event("heal")

    async def flap(self) -> None:
        end = trio.current_time() + self.rng.uniform(*self.plan.hold_s) * 2
        while trio.current_time() < end:
            self.links.heal()
            if self.rng.random() < 0.7:
                nodes = self.members
                self.rng.shuffle(nodes)
                cut = self.rng.randint(1, len(nodes) // 2)
                self.links.partition([set(nodes[:cut]), set(nodes[cut:])])
            await trio.sleep(self.rng.uniform(0.2, 0.6))
        self.links.heal()
        self.event("flap")

    async def lose_unsynced(self) -> None:
        """Kill the leader right after it acknowledged an acks=leader append, on a disk
        that loses what was not yet fsynced."""
        leader = await self.leader_now()
        if leader is None:
            return
        value = f"nemesis-{self.faults_injected}".encode()
        start = self.now()
        try:
            async with AsyncClient(self.cluster.address(leader), timeout=2.0, direct=True) as c:
                offset = await c.append([value], acks="leader")
            outcome = "ok"
        except QuorumLogError:
            offset, outcome = None, "unknown"
        await self.kill(leader)
        self.history.appends.append(Append(value, "leader", start, self.now(), outcome, offset))
        lost = self._lose_unsynced(leader)
        self.event("kill, unsynced writes lost", node=leader, bytes_lost=lost)
        await self.hold()
        self.start(leader)

    async def lose_unsynced_all(self) -> None:
        nodes = self.running
        for node_id in nodes:
            await self.kill(node_id)
        lost = {node_id: self._lose_unsynced(node_id) for node_id in nodes}
        self.event("kill all, unsynced writes lost", bytes_lost=lost)
        await trio.sleep(0.5)
        for node_id in nodes:
            self.start(node_id)

    def _lose_unsynced(self, node_id: int) -> int:
        data = self.cluster.data_dir(node_id)
        return disk.lose_unsynced(data, os.path.join(data, "sync-journal"), self.rng)

    async def damage(self) -> None:
        """Restart a follower on damaged files. A torn tail is cut and the node starts;
        damage in the middle of a segment or in the metadata makes it refuse to start
        (exit 3). It comes back with --repair (segments) or a restored file (metadata)."""
        if not (followers := self.followers()):
            return
        node_id = self.rng.choice(followers)
        await self.kill(node_id)
        data = self.cluster.data_dir(node_id)
        kind = self.rng.choice(disk.DAMAGE)
        metadata = disk.metadata_path(data)
        with open(metadata, "rb") as f:
            saved_metadata = f.read()
        what = disk.damage(data, kind, self.rng)
        self.event("damage", node=node_id, kind=kind, what=what)
        self.start(node_id)
        refused = what is not None and kind in disk.REFUSED
        proc = self.cluster.procs[node_id]
        with trio.move_on_after(STARTUP_REFUSAL_S if refused else 3.0):
            while proc.poll() is None:
                await trio.sleep(0.1)
        code = proc.poll()
        if not refused:
            if code is not None:
                self.history.violations.append(f"node {node_id} did not start after {what}")
            return
        if code != 3:
            self.history.violations.append(
                f"node {node_id} did not refuse damaged storage ({what}): exit {code}"
            )
            return
        self.cluster.procs.pop(node_id)
        await self.hold()
        if kind == disk.METADATA:
            with open(metadata, "wb") as f:
                f.write(saved_metadata)
            self.start(node_id)
        else:
            self.start(node_id, ["--repair"])
        self.event("restored" if kind == disk.METADATA else "repaired", node=node_id)

    async def membership(self) -> None:
        """One change: add a node, remove one, replace one, or move the leadership."""
        voters = [i for i in self.config["voters"] if i in self.running]
        op = self.rng.choice(["add", "remove", "replace", "transfer"])
        if op in ("add", "replace") and self.next_id > self.plan.size + SPARE_NODES:
            op = "transfer"
        if op == "remove" and len(voters) <= self.plan.size:
            op = "add" if self.next_id <= self.plan.size + SPARE_NODES else "transfer"
        args: dict
        if op in ("add", "replace"):
            new_id = self.next_id
            self.next_id += 1
            self.start(new_id)
            address = self.cluster.address(new_id)
            if op == "add":
                args = {"op": "add_member", "node_id": new_id, "address": address}
            else:
                old = self.rng.choice(voters)
                args = {"op": "replace_member", "old_id": old, "new_id": new_id, "address": address}
        elif op == "remove":
            args = {"op": "remove_member", "node_id": self.rng.choice(voters)}
        else:
            args = {"op": "transfer_leader", "node_id": self.rng.choice(voters)}
        self.event("membership", **args)
        result = await trio.to_thread.run_sync(self._admin, args)
        self.event("membership done", result=result)

    def _admin(self, args: dict) -> str:
        args = dict(args)
        op = args.pop("op")
        try:
            with Client(self.brokers, timeout=15.0) as client:
                client.admin(op, **args)
            return "ok"
        except QuorumLogError as exc:
            return f"{type(exc).__name__}: {exc}"

    # --- the run -------------------------------------------------------------------------

    def fault(self, name: str) -> Callable[[], Awaitable[None]]:
        return getattr(self, name.replace("-", "_"))

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
                nursery.start_soon(self.fault(name))
            await self.fault(names[0])()

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

    async def first_quorum_ack(self) -> float | None:
        start = self.now()
        with trio.move_on_after(RECOVERY_TIMEOUT_S):
            async with AsyncClient(self.brokers, timeout=5.0) as c:
                while True:
                    try:
                        await c.append([f"healed-{self.plan.seed}".encode()])
                        return self.now() - start
                    except QuorumLogError as exc:
                        self.event("append after healing failed", error=str(exc))
                        await trio.sleep(0.1)
        return None

    def read_log(self, node_id: int) -> list[tuple[int, bytes]]:
        out: list[tuple[int, bytes]] = []
        with Client(self.cluster.address(node_id), timeout=10.0, direct=True) as c:
            offset = c.start_offset()
            while records := c.read(offset, 5000):
                out += [(r.offset, r.value) for r in records]
                offset = records[-1].offset + 1
        return out

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
            nursery.start_soon(self._watcher)
            if await self.leader_now(30.0) is None:
                raise RuntimeError("no leader within 30 s of the start")
            stop = trio.Event()
            async with trio.open_nursery() as workload:
                for p in range(self.plan.producers):
                    workload.start_soon(self._producer, f"s{self.plan.seed}p{p}", stop)
                await trio.sleep(1.0)
                for index in range(self.plan.steps):
                    await self.step(index)
                    await trio.sleep(self.rng.uniform(0.5, 1.5))
                await self.heal_all()
                healed_at = self.now()
                recovery_s = await self.first_quorum_ack()
                stop.set()
            if recovery_s is None:
                self.history.violations.append(
                    f"I7: no quorum append succeeded within {RECOVERY_TIMEOUT_S} s of healing"
                )
            await self.heal_all()  # the config may have changed while it recovered
            result = await self.settle_and_check(healed_at, recovery_s)
            nursery.cancel_scope.cancel()
        return result

    async def settle_and_check(self, healed_at: float, recovery_s: float | None) -> dict:
        try:
            await trio.to_thread.run_sync(self.cluster.wait_converged, RECOVERY_TIMEOUT_S)
            logs = {i: await trio.to_thread.run_sync(self.read_log, i) for i in self.running}
        except (AssertionError, QuorumLogError) as exc:
            self.history.violations.append(f"I7: the nodes did not converge: {exc}")
            logs = {}
        figures = check(self.history, logs) if logs else {"violations": self.history.violations}
        violations = figures.pop("violations")
        levels = ("quorum", "leader", "none")
        return {
            "seed": self.plan.seed,
            "faults": self.faults_injected,
            "attempted q/l/n": "/".join(str(figures.get(f"{a}_attempted", "?")) for a in levels),
            "acked q/l/n": "/".join(str(figures.get(f"{a}_acked", "?")) for a in levels),
            "lost q/l/n": "/".join(str(figures.get(f"{a}_lost", "?")) for a in levels),
            "unknown": figures.get("unknown_outcomes"),
            "unavailable_s": round(unavailable_s(self.history, 1.0, healed_at), 2),
            "recovery_s": None if recovery_s is None else round(recovery_s, 2),
            "violations": len(violations),
            "details": {**figures, "dropped_frames": self.links.dropped, "violations": violations},
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
