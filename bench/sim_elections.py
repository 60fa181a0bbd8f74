"""Elections with many groups, simulated: a cluster of 3 nodes hosting hundreds of
partitions loses a node, then (the node back) has every node restarted, and after each
event every group must have a leader again within a bound of simulated time.

Simulated time costs nothing, so on its own the simulation would elect any number of
groups at once. Here each node pays for its work as a real one does: every message it
receives takes it `CPU_PER_MESSAGE_S`, one at a time (one busy core), and its blocking
storage calls (fsyncs, term and vote saves) run one after another on its one storage
thread, `STORAGE_CALL_S` each. Under that load, elections that all start together queue
their votes behind one another until every candidate's timer has run out again (the storm
of docs/decisions/raft.md, "Elections with many partitions"); paced, they converge.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from quorumlog.bench.sim_checks import Violation
from quorumlog.bench.sim_cluster import Cluster
from quorumlog.bench.simulation import run_deterministic
from quorumlog.raft.settings import RaftSettings

# Measured on the 2-core machines here: a node handling an election storm spends about
# this much CPU per message it receives, and a term and vote save takes about this long.
CPU_PER_MESSAGE_S = 0.0005
STORAGE_CALL_S = 0.002
# What the cluster must do (issue 30's targets for 1,000 partitions, which these scale to).
ONE_LOST_BOUND_S = 5.0
ALL_RESTARTED_BOUND_S = 30.0


def leaderless(cluster: Cluster) -> list[int]:
    """The groups with no leader of their highest term among the running nodes."""
    missing = []
    for gid in sorted(cluster.group_ids()):
        replicas = cluster.replicas(gid).values()
        leader = cluster.leader_of(gid)
        if leader is None or leader.core.term < max(g.core.term for g in replicas):
            missing.append(gid)
    return missing


async def _until_all_lead(cluster: Cluster, bound_s: float, what: str) -> float:
    started = trio.current_time()
    with trio.move_on_after(bound_s):
        while leaderless(cluster):
            await trio.sleep(0.05)
        return trio.current_time() - started
    missing = leaderless(cluster)
    raise Violation(
        f"seed {cluster.seed}: {len(missing)} groups without a leader {bound_s} s after "
        f"{what} (first: {missing[:5]})"
    )


@dataclass(frozen=True)
class ElectionTimes:
    """Simulated seconds until every group led again."""

    one_lost_s: float  # after the node that led most was lost
    all_restarted_s: float  # after every node restarted (the lost one back first)


async def _scenario(seed: int, partitions: int) -> ElectionTimes:
    cluster = Cluster(seed, 3, RaftSettings())
    for node_id, sim in cluster.nodes.items():
        sim.base_fsync_s = sim.fsync_s = STORAGE_CALL_S
        sim.one_storage_thread = True
        cluster.network.set_cpu(node_id, CPU_PER_MESSAGE_S)
    async with trio.open_nursery() as nursery:
        for node_id in cluster.nodes:
            await cluster.start(nursery, node_id)
        await cluster.create_topic("many", partitions, timeout_s=60.0)
        await _until_all_lead(cluster, 60.0, "the topic was created")
        await trio.sleep(2.0)  # the groups go quiet
        led = {
            i: sum(g.core.is_leader for g in s.node.groups.values())
            for i, s in cluster.nodes.items()
        }
        lost = max(led, key=led.get)  # the node that leads most
        await cluster.crash(lost)
        one_lost_s = await _until_all_lead(cluster, ONE_LOST_BOUND_S, "a node was lost")
        # One run measures both events: a topic of hundreds of groups costs as much
        # simulation as the two events together.
        await cluster.start(nursery, lost)
        await _until_all_lead(cluster, 60.0, "the lost node came back")
        await trio.sleep(2.0)
        for node_id in cluster.nodes:
            await cluster.crash(node_id)
        await trio.sleep(1.0)
        for node_id in cluster.nodes:
            await cluster.start(nursery, node_id)
        all_restarted_s = await _until_all_lead(cluster, ALL_RESTARTED_BOUND_S, "all restarted")
        nursery.cancel_scope.cancel()
    return ElectionTimes(one_lost_s, all_restarted_s)


def run_elections(seed: int, partitions: int = 600) -> ElectionTimes:
    """Simulated seconds until every group leads again after one node is lost, then after
    every node restarted; raises Violation past either bound."""
    return run_deterministic(seed, _scenario, seed, partitions)
