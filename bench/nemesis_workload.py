"""The fault harness's workload and observers (bench/nemesis.py runs them): producers that
append unique values over every partition, a reader per node that polls what each of its
replicas has committed, a watcher of who leads each partition in which term, and, once
everything healed, the replicas' convergence and their final logs."""

from __future__ import annotations

import contextlib
import random

import trio

from quorumlog.bench.history import DEFAULT_PART, Append, Log, Part
from quorumlog.bench.nemesis_cluster import NemesisCluster
from quorumlog.bench.workload import statuses_of
from quorumlog.client.aclient import AsyncClient
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError
from quorumlog.transport.messages import PartitionsRequest, StatusRequest

ACKS_WEIGHTS = {"quorum": 8, "leader": 1, "none": 1}
WATCH_S = 0.15  # the watcher asks every node this often: three requests on one connection
READ_IDLE_S = 0.1  # a reader with nothing new waits this long


async def producer(n: NemesisCluster, name: str, stop: trio.Event) -> None:
    """Unique values, each to a partition drawn from the producer's own seeded rng."""
    rng = random.Random(f"{n.plan.seed}-{name}")
    acks_levels, weights = list(ACKS_WEIGHTS), list(ACKS_WEIGHTS.values())
    async with AsyncClient(n.brokers, timeout=5.0) as client:
        count = 0
        while not stop.is_set():
            value = f"{name}-{count}".encode()
            acks = rng.choices(acks_levels, weights)[0]
            part = rng.choice(n.parts)
            start = n.now()
            try:
                offset = await client.append(
                    [value], acks=acks, topic=part.topic, partition=part.partition
                )
                outcome = "ok"
            except QuorumLogError:
                offset, outcome = None, "unknown"
            n.history.appends.append(Append(value, acks, start, n.now(), outcome, offset, *part))
            count += 1
            await trio.sleep(rng.uniform(0, 0.01))


async def reader(n: NemesisCluster, node_id: int) -> None:
    """Polls one node's committed records of every partition it hosts, from the start, as
    consumers would."""
    next_offsets: dict[Part, int] = {}
    async with AsyncClient(n.cluster.address(node_id), timeout=2.0, direct=True) as c:
        while True:
            progress = False
            for part in n.hosted_by(node_id):
                offset = next_offsets.setdefault(part, 0)
                try:
                    records = await c.read(offset, 500, topic=part.topic, partition=part.partition)
                except QuorumLogError:
                    continue  # down or paused: the next round asks again
                if records:
                    n.history.saw_records(node_id, part, [(r.offset, r.value) for r in records])
                    next_offsets[part] = records[-1].offset + 1
                    progress = True
            if not progress:
                await trio.sleep(READ_IDLE_S)


async def replicas_of_node(n: NemesisCluster, node_id: int) -> tuple[dict, dict[Part, dict]] | None:
    """One node's status and the status of each replica it hosts, by partition."""
    topics = n.topics
    found = await statuses_of(
        n.cluster.address(node_id), [StatusRequest(), *map(PartitionsRequest, topics)]
    )
    if found is None:
        return None
    status, *per_topic = found
    return status, {
        Part(topic, int(p)): replica
        for topic, replicas in zip(topics, per_topic, strict=True)
        for p, replica in replicas.items()
    }


async def watcher(n: NemesisCluster) -> None:
    """Which replicas each node hosts, who leads each partition in which term, `default`'s
    configuration (the cluster's members), and the controller's leader."""
    while True:
        for node_id in n.running:
            if node_id in n.paused:
                continue
            found = await replicas_of_node(n, node_id)
            if found is None:
                continue
            status, replicas = found
            n.hosting[node_id] = set(replicas)
            if status.get("controller_id") == node_id:
                n.controller = node_id
            for part, replica in replicas.items():
                if replica["role"] == "leader":
                    _saw_leader(n, part, node_id, replica)
        await trio.sleep(WATCH_S)


def _saw_leader(n: NemesisCluster, part: Part, node_id: int, replica: dict) -> None:
    term = replica["term"]
    n.history.saw_leader(part, term, node_id)
    if n.leaders.get(part) != (node_id, term):
        n.event("leader", partition=str(part), node=node_id, term=term)
        n.leaders[part] = (node_id, term)
    if part == DEFAULT_PART and replica["config"].get("joint") is None:
        n.config = replica["config"]


async def wait_converged(n: NemesisCluster, timeout_s: float) -> dict[Part, dict]:
    """Waits until the running replicas of every partition hold and commit the same log;
    returns the partitions that did not, with what each replica reported. The placement is
    read at each look: the rebalancer may move a replica off a node while the others
    converge, and that node holding none of it is not a stall."""
    views: dict[Part, dict] = {}
    with trio.move_on_after(timeout_s):
        while True:
            with contextlib.suppress(QuorumLogError):  # the last placement read stands
                await n.read_placement()
            found = {i: await replicas_of_node(n, i) for i in n.running}
            views = {
                part: {i: _view(found.get(i), part) for i in n.replicas_of(part)}
                for part in n.parts
            }
            views = {part: seen for part, seen in views.items() if not _converged(seen)}
            if not views:
                break
            await trio.sleep(0.2)
    return views


def _view(found: tuple[dict, dict[Part, dict]] | None, part: Part) -> tuple[int, int] | None:
    replica = None if found is None else found[1].get(part)
    return None if replica is None else (replica["dirty_offset"], replica["commit_offset"])


def _converged(views: dict[int, tuple[int, int] | None]) -> bool:
    distinct = set(views.values())
    if len(distinct) != 1 or None in distinct:
        return False
    dirty, commit = distinct.pop()
    return dirty == commit


def read_logs(address: str, parts: list[Part]) -> dict[Part, Log]:
    """One node's whole committed log of each partition in `parts` (blocking)."""
    out: dict[Part, Log] = {}
    with Client(address, timeout=10.0, direct=True) as c:
        for topic, partition in parts:
            log = out[Part(topic, partition)] = []
            offset = c.start_offset(topic=topic, partition=partition)
            while records := c.read(offset, 5000, topic=topic, partition=partition):
                log += [(r.offset, r.value) for r in records]
                offset = records[-1].offset + 1
    return out
