"""The faults of the fault harness (bench/nemesis.py draws and runs them): each holds for a
while drawn from the seed, then heals. A fault aimed at "the leader" aims at the leader of
a partition drawn from the seed; membership changes change the cluster's members (the
controller's group and `default`), while topic partitions keep their replicas."""

from __future__ import annotations

import os
import signal
from collections.abc import Awaitable, Callable

import trio

from quorumlog.bench import faults as disk
from quorumlog.bench.history import Append, Part
from quorumlog.bench.nemesis_cluster import SPARE_NODES, NemesisCluster
from quorumlog.client.aclient import AsyncClient
from quorumlog.client.client import Client
from quorumlog.client.errors import QuorumLogError

# A slow disk's fsync delay (the others': nemesis_cluster.FSYNC_DELAY_MS) and how long.
SLOW_DISK_MS = (100.0, 200.0)
SLOW_DISK_HOLD_S = (2.0, 5.0)
STARTUP_REFUSAL_S = 10.0


async def kill_and_restart(n: NemesisCluster, nodes: list[int]) -> None:
    for node_id in nodes:
        await n.kill(node_id)
    n.event("kill", nodes=nodes)
    await n.hold()
    for node_id in nodes:
        n.start(node_id)
    n.event("restart", nodes=nodes)


async def target_leader(n: NemesisCluster) -> tuple[Part, int] | None:
    """A partition drawn from the seed, and its leader once there is one."""
    part = n.rng.choice(n.parts)
    leader = await n.leader_now(part)
    if leader is None:
        return None
    n.event("target", partition=str(part), leader=leader)
    return part, leader


async def kill_leader(n: NemesisCluster) -> None:
    if target := await target_leader(n):
        await kill_and_restart(n, [target[1]])


async def kill_controller(n: NemesisCluster) -> None:
    """The controller group's leader (topic calls and membership go through it)."""
    if n.controller is not None and n.controller in n.running:
        await kill_and_restart(n, [n.controller])


async def kill_follower(n: NemesisCluster) -> None:
    if followers := n.followers():
        await kill_and_restart(n, [n.rng.choice(followers)])


async def kill_majority(n: NemesisCluster) -> None:
    voters = [i for i in n.config["voters"] if i in n.running]
    await kill_and_restart(n, n.rng.sample(voters, len(voters) // 2 + 1))


async def pause_leader(n: NemesisCluster) -> None:
    if not (target := await target_leader(n)):
        return
    leader = target[1]
    n.signal(leader, signal.SIGSTOP)
    n.event("pause", node=leader)
    await n.hold()
    n.signal(leader, signal.SIGCONT)
    n.event("resume", node=leader)


async def held_and_healed(n: NemesisCluster, what: str, **details) -> None:
    """The links as they were just set, for a while."""
    n.event(what, **details)
    await n.hold()
    n.links.heal()
    n.event("heal")


async def partitioned(n: NemesisCluster, groups: list[set[int]], what: str) -> None:
    n.links.partition(groups)
    await held_and_healed(n, what, groups=[sorted(g) for g in groups])


async def isolate_leader(n: NemesisCluster) -> None:
    if target := await target_leader(n):
        leader = target[1]
        await partitioned(n, [{leader}, set(n.members) - {leader}], "isolate")


async def partition(n: NemesisCluster) -> None:
    nodes = n.members
    n.rng.shuffle(nodes)
    cut = n.rng.randint(1, len(nodes) // 2)
    await partitioned(n, [set(nodes[:cut]), set(nodes[cut:])], "partition")


async def bridge(n: NemesisCluster) -> None:
    """Two sides that cannot talk, and one node that talks to both."""
    nodes = n.members
    n.rng.shuffle(nodes)
    middle, rest = nodes[0], nodes[1:]
    half = max(1, len(rest) // 2)
    left, right = set(rest[:half]), set(rest[half:])
    for a in left:
        for b in right:
            n.links.cut.update({(a, b), (b, a)})
    await held_and_healed(n, "bridge", bridge=middle, left=sorted(left), right=sorted(right))


async def one_way(n: NemesisCluster) -> None:
    if not (target := await target_leader(n)):
        return
    leader = target[1]
    outward = n.rng.random() < 0.5  # the leader cannot send, or cannot hear
    for other in n.members:
        if other != leader:
            pair = (leader, other) if outward else (other, leader)
            n.links.cut_one_way(*pair)
    await held_and_healed(n, "one-way", leader=leader, leader_can="hear" if outward else "send")


async def slow(n: NemesisCluster) -> None:
    pairs = [(a, b) for a in n.members for b in n.members if a != b]
    delay, loss = n.rng.uniform(0.02, 0.2), n.rng.uniform(0.0, 0.2)
    n.links.slow(pairs, delay, loss)
    await held_and_healed(n, "slow", delay_s=round(delay, 3), loss=round(loss, 3))


async def flap(n: NemesisCluster) -> None:
    end = trio.current_time() + n.rng.uniform(*n.plan.hold_s) * 2
    while trio.current_time() < end:
        n.links.heal()
        if n.rng.random() < 0.7:
            nodes = n.members
            n.rng.shuffle(nodes)
            cut = n.rng.randint(1, len(nodes) // 2)
            n.links.partition([set(nodes[:cut]), set(nodes[cut:])])
        await trio.sleep(n.rng.uniform(0.2, 0.6))
    n.links.heal()
    n.event("flap")


async def lose_unsynced(n: NemesisCluster) -> None:
    """Kill a partition's leader right after it acknowledged an acks=leader append, on a
    disk that loses what was not yet fsynced."""
    if not (target := await target_leader(n)):
        return
    part, leader = target
    value = f"nemesis-{n.faults_injected}".encode()
    start = n.now()
    try:
        async with AsyncClient(n.cluster.address(leader), timeout=2.0, direct=True) as c:
            offset = await c.append(
                [value], acks="leader", topic=part.topic, partition=part.partition
            )
        outcome = "ok"
    except QuorumLogError:
        offset, outcome = None, "unknown"
    await n.kill(leader)
    n.history.appends.append(Append(value, "leader", start, n.now(), outcome, offset, *part))
    lost = _lose_unsynced(n, leader)
    n.event("kill, unsynced writes lost", node=leader, bytes_lost=lost)
    await n.hold()
    n.start(leader)


async def lose_unsynced_all(n: NemesisCluster) -> None:
    nodes = n.running
    for node_id in nodes:
        await n.kill(node_id)
    lost = {node_id: _lose_unsynced(n, node_id) for node_id in nodes}
    n.event("kill all, unsynced writes lost", bytes_lost=lost)
    await trio.sleep(0.5)
    for node_id in nodes:
        n.start(node_id)


def _lose_unsynced(n: NemesisCluster, node_id: int) -> int:
    data = n.cluster.data_dir(node_id)
    return disk.lose_unsynced(data, os.path.join(data, "sync-journal"), n.rng)


async def damage(n: NemesisCluster) -> None:
    """Restart a follower on damaged files. A torn tail is cut and the node starts;
    damage in the middle of a segment or in the metadata makes it refuse to start
    (exit 3). It comes back with --repair (segments) or a restored file (metadata)."""
    if not (followers := n.followers()):
        return
    node_id = n.rng.choice(followers)
    await n.kill(node_id)
    data = n.cluster.data_dir(node_id)
    kind = n.rng.choice(disk.DAMAGE)
    metadata = disk.metadata_path(data)
    with open(metadata, "rb") as f:
        saved_metadata = f.read()
    what = disk.damage(data, kind, n.rng)
    n.event("damage", node=node_id, kind=kind, what=what)
    n.start(node_id)
    refused = what is not None and kind in disk.REFUSED
    proc = n.cluster.procs[node_id]
    with trio.move_on_after(STARTUP_REFUSAL_S if refused else 3.0):
        while proc.poll() is None:
            await trio.sleep(0.1)
    code = proc.poll()
    if not refused:
        if code is not None:
            n.history.violations.append(f"node {node_id} did not start after {what}")
        return
    if code != 3:
        n.history.violations.append(
            f"node {node_id} did not refuse damaged storage ({what}): exit {code}"
        )
        return
    n.cluster.procs.pop(node_id)
    await n.hold()
    if kind == disk.METADATA:
        with open(metadata, "wb") as f:
            f.write(saved_metadata)
        n.start(node_id)
    else:
        n.start(node_id, ["--repair"])
    # Repaired once it serves: a kill before then could find the damage still there.
    if not await _serving(n, node_id, STARTUP_REFUSAL_S):
        n.history.violations.append(f"node {node_id} did not start again after {what}")
        return
    n.event("restored" if kind == disk.METADATA else "repaired", node=node_id)


async def _serving(n: NemesisCluster, node_id: int, timeout_s: float) -> bool:
    """Whether the node answers a status call within `timeout_s` (False if it exits)."""
    proc = n.cluster.procs[node_id]
    with trio.move_on_after(timeout_s):
        while proc.poll() is None:
            try:
                async with AsyncClient(n.cluster.address(node_id), timeout=1.0, direct=True) as c:
                    await c.status()
                return True
            except QuorumLogError:
                await trio.sleep(0.1)
    return False


async def slow_disk(n: NemesisCluster) -> None:
    """One node's fsyncs several times slower than the others' for a few seconds (long
    enough for a leader to hand its groups over): a partition's leader half the time. The
    report compares the quorum acknowledgements meanwhile with as long a time before."""
    target = await target_leader(n) if n.rng.random() < 0.5 else None
    node_id = target[1] if target else n.rng.choice(n.running)
    delay_ms = n.rng.uniform(*SLOW_DISK_MS)
    path = disk.fsync_delay_path(n.cluster.data_dir(node_id))
    with open(path, "w") as f:
        f.write(f"{delay_ms:.0f}")
    start = n.now()
    n.event("slow disk", node=node_id, delay_ms=round(delay_ms))
    await trio.sleep(n.rng.uniform(*SLOW_DISK_HOLD_S))
    os.remove(path)
    n.slow_disks.append((start, n.now()))
    n.event("disk healed", node=node_id)


async def membership(n: NemesisCluster) -> None:
    """One change: add a node, remove one, replace one, or move the leadership."""
    voters = [i for i in n.config["voters"] if i in n.running]
    leaving = removable(n, voters)
    op = n.rng.choice(["add", "remove", "replace", "transfer"])
    if op == "remove" and len(voters) <= n.plan.size:
        op = "add"
    if op in ("remove", "replace") and not leaving:
        op = "add"
    if op in ("add", "replace") and n.next_id > n.plan.size + SPARE_NODES:
        op = "transfer"
    args: dict
    if op in ("add", "replace"):
        new_id = n.next_id
        n.next_id += 1
        n.start(new_id)
        address = n.cluster.address(new_id)
        if op == "add":
            args = {"op": "add_member", "node_id": new_id, "address": address}
        else:
            old = n.rng.choice(leaving)
            n.removed.add(old)
            args = {"op": "replace_member", "old_id": old, "new_id": new_id, "address": address}
    elif op == "remove":
        old = n.rng.choice(leaving)
        n.removed.add(old)
        args = {"op": "remove_member", "node_id": old}
    else:
        args = {"op": "transfer_leader", "node_id": n.rng.choice(voters)}
    n.event("membership", **args)
    result = await trio.to_thread.run_sync(_admin, n.brokers, args)
    n.event("membership done", result=result)


def removable(n: NemesisCluster, voters: list[int]) -> list[int]:
    """The voters whose removal leaves a majority of every topic partition's replicas (as
    placed at creation) among the members: replicas need not follow membership, and removed
    nodes are stopped at the end. Nodes removed by a change still in flight count too."""
    staying = set(n.members) - n.removed
    return [
        v
        for v in voters
        if all(len(set(r) & (staying - {v})) > len(r) // 2 for r in n.topic_replicas.values())
    ]


def _admin(brokers: str, args: dict) -> str:
    args = dict(args)
    op = args.pop("op")
    try:
        with Client(brokers, timeout=15.0) as client:
            client.admin(op, **args)
        return "ok"
    except QuorumLogError as exc:
        return f"{type(exc).__name__}: {exc}"


ACTIONS: dict[str, Callable[[NemesisCluster], Awaitable[None]]] = {
    "kill-leader": kill_leader,
    "kill-controller": kill_controller,
    "kill-follower": kill_follower,
    "kill-majority": kill_majority,
    "pause-leader": pause_leader,
    "isolate-leader": isolate_leader,
    "partition": partition,
    "bridge": bridge,
    "one-way": one_way,
    "slow": slow,
    "flap": flap,
    "lose-unsynced": lose_unsynced,
    "lose-unsynced-all": lose_unsynced_all,
    "damage": damage,
    "slow-disk": slow_disk,
    "membership": membership,
}
