"""Deterministic simulation of whole clusters (docs/reliability.md).

A cluster runs inside one `trio.run` with `MockClock(autojump_threshold=0)`, the in-memory
network of transport/memory.py and one in-memory disk per node. A seeded schedule crashes
and restarts nodes (losing or tearing what was not flushed), partitions and heals links,
and makes them lossy; clients append with all three acks levels, to `default` and, with
`topics`, to the partitions of three topics of four partitions each (created through the
controller at the start; the controller's leader crashes like any node), and with
`topic_changes` an operator alters, grows, moves and trims those topics meanwhile
(bench/sim_topics.py). After the faults heal the checker verifies the invariants in every
Raft group. Trio's scheduler is seeded too, so a seed replays exactly:
`run_seed(seed)` twice gives the same trace hash.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import trio
import trio.testing

from quorumlog.actors.cluster.leader_table import DIGEST_INTERVAL_S
from quorumlog.bench.sim_checks import (
    STANDSTILL_PASSES,
    StandStill,
    Violation,
    check_cluster,
    commits_checked,
    committed_log,
    partitions_not_placed,
    stale_leader_tables,
)
from quorumlog.bench.sim_cluster import LOG_CONFIG, SETTINGS, Cluster, until
from quorumlog.bench.sim_compaction import KEYS, clean_everywhere, create_compacted_topic
from quorumlog.bench.sim_faults import chaos, lost_leader_tables, membership_chaos
from quorumlog.bench.sim_topics import SMALL_SEGMENTS, TOPIC_CONFIG, TopicChaos

TABLE_REPAIR_BOUND_S = 4 * DIGEST_INTERVAL_S


async def wait_placed(cluster: Cluster, timeout_s: float) -> bool:
    """I7: every partition's group holds the voters its controller committed."""
    return await until(lambda: not partitions_not_placed(cluster), timeout_s, 0.5)


async def wait_tables_current(cluster: Cluster, timeout_s: float) -> bool:
    """Every node's leader table names every partition's leader."""
    return await until(lambda: not stale_leader_tables(cluster), timeout_s, 0.1)


def trace_hash(cluster: Cluster) -> str:
    """What the run did (its trace, the leaders seen, every replica's committed log): a
    seed run twice must give the same hash."""
    logs = [
        (gid, i, committed_log(g))
        for gid in sorted(cluster.group_ids())
        for i, g in sorted(cluster.replicas(gid).items())
    ]
    digest = hashlib.sha256()
    for line in cluster.trace:
        digest.update(line.encode() + b"\n")
    digest.update(repr(sorted(cluster.leaders.items())).encode())
    digest.update(repr(logs).encode())
    return digest.hexdigest()


async def _scenario(
    seed: int,
    size: int,
    clients: int,
    appends: int,
    chaos_s: float,
    membership: bool,
    topics: bool,
    follower_flush: str,
    topic_changes: bool,
    compact: bool,
) -> str:
    settings = replace(SETTINGS, follower_flush=follower_flush)
    log_config = SMALL_SEGMENTS if topic_changes or compact else LOG_CONFIG
    cluster = Cluster(seed, size, settings, log_config)
    if compact:
        cluster.keys = KEYS
    changes = TopicChaos(cluster) if topic_changes else None
    with commits_checked(cluster), trio.CancelScope() as scope:
        watchdog = StandStill(scope)
        trio.lowlevel.add_instrument(watchdog)
        try:
            return await _run(
                cluster, membership, topics, changes, clients, appends, chaos_s, compact
            )
        finally:
            trio.lowlevel.remove_instrument(watchdog)
    raise Violation(
        f"seed {seed}: {STANDSTILL_PASSES} passes of the scheduler at simulated time "
        f"{watchdog.instant:.3f} s: a loop that takes no time (the run would never end)"
    )


async def _run(
    cluster: Cluster,
    membership: bool,
    topics: bool,
    changes: TopicChaos | None,
    clients: int,
    appends: int,
    chaos_s: float,
    compact: bool,
) -> str:
    async with trio.open_nursery() as nursery:
        for i in cluster.nodes:
            await cluster.start(nursery, i)
        nursery.start_soon(cluster.observe)
        if compact:
            await create_compacted_topic(cluster)
        elif topics or changes:
            await cluster.create_topics(TOPIC_CONFIG if changes else None)
        async with trio.open_nursery() as work:
            work.start_soon(chaos, cluster, nursery, chaos_s)
            work.start_soon(lost_leader_tables, cluster, chaos_s)
            if membership:
                work.start_soon(membership_chaos, cluster, chaos_s)
            if changes:
                nursery.start_soon(changes.watch)
                work.start_soon(changes.run, chaos_s)
            for c in range(clients):
                work.start_soon(cluster.client, c, appends)
        await cluster.heal_all(nursery)
        converged = await cluster.wait_converged(timeout_s=10.0)
        # A move retried after a backoff of up to 30 s, rechecked every 30 s (actors/cluster/mover.py).
        placed = converged and await wait_placed(cluster, timeout_s=120.0)
        # Every loss of a table message repaired within a few digest rounds.
        tables = not placed or await wait_tables_current(cluster, TABLE_REPAIR_BOUND_S)
        if changes and converged:
            cluster.failures += changes.problems(await changes.wait_configured())
        if compact and converged:
            await clean_everywhere(cluster)
        check_cluster(cluster, converged, placed, tables)
        digest = trace_hash(cluster)
        nursery.cancel_scope.cancel()
    return digest


def run_deterministic(seed: int, async_fn, *args):
    """`trio.run(async_fn, *args)` on a mock clock, with trio's scheduler seeded: the same
    seed replays the same run."""
    run_module = trio._core._run
    state = run_module._r.getstate()
    old = run_module._ALLOW_DETERMINISTIC_SCHEDULING
    run_module._ALLOW_DETERMINISTIC_SCHEDULING = True
    run_module._r.seed(seed)
    try:
        return trio.run(async_fn, *args, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        run_module._ALLOW_DETERMINISTIC_SCHEDULING = old
        run_module._r.setstate(state)


def run_seed(
    seed: int,
    size: int = 3,
    clients: int = 2,
    appends: int = 30,
    chaos_s: float = 5.0,
    membership: bool = False,
    topics: bool = False,
    follower_flush: str = "quorum",
    topic_changes: bool = False,
    compact: bool = False,
) -> str:
    """Run one seed; returns its trace hash. Raises Violation with the seed in the message.
    `follower_flush` is the `[raft]` setting of every node (raft/settings.py);
    `topic_changes` adds an operator who changes the topics as the faults go on
    (bench/sim_topics.py; the topics are created for it); `compact` makes the topics
    compacted ones, written with keys (bench/sim_compaction.py)."""
    return run_deterministic(
        seed,
        _scenario,
        seed,
        size,
        clients,
        appends,
        chaos_s,
        membership,
        topics,
        follower_flush,
        topic_changes,
        compact,
    )
