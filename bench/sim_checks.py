"""The simulation's final checks: what every Raft group's replicas hold after the faults
healed, against what the clients were told (I1-I3, I6, I7; bench/simulation.py runs them),
and whether each partition's group came to the voters its controller committed (I7); I4
on every leader at the moment it commits; and a watchdog for a run whose clock stands
still."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import trio

from quorumlog.bench.sim_cluster import Cluster, Outcome, Route
from quorumlog.bench.sim_compaction import check_compacted_group
from quorumlog.controller.state import CONTROLLER_GROUP, DEFAULT_GROUP, ClusterState
from quorumlog.log.batch import LOG_APPEND_TIME, BatchType, split_batches
from quorumlog.log.records import offset_records
from quorumlog.membership.quorum import has_quorum
from quorumlog.raft.core import RaftCore
from quorumlog.transport.messages import Acks

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor
    from quorumlog.membership.config import Configuration


class Violation(AssertionError):
    pass


# Scheduler passes at one simulated instant before a run counts as stuck: a few dozen at
# most in healthy runs.
STANDSTILL_PASSES = 100_000


def committed_log(group: ReplicaActor) -> list[tuple[int, int, bytes]]:
    """(offset, term, batch bytes) of every batch up to the replica's commit offset."""
    out = []
    log = group.log
    offset = log.log_start_offset
    while offset <= group.core.commit_offset:
        chunk = log.read(offset, 1 << 20, upto_offset=group.core.commit_offset)
        for header, batch in split_batches(chunk.data):
            out.append((header.base_offset, header.term, bytes(batch)))
        offset = chunk.last_offset + 1
    return out


def check_cluster(cluster: Cluster, converged: bool, placed: bool, tables_current: bool) -> None:
    """Raise Violation naming every broken invariant of a run that ended."""
    problems = list(cluster.failures)
    if not tables_current:
        stale = stale_leader_tables(cluster)
        problems.append(f"leader tables still stale after the faults healed: {stale[:5]}")
    if not placed:
        off = partitions_not_placed(cluster)
        problems.append(f"I7: these partitions did not reach their replica sets: {off}")
    if not converged:
        stuck = {
            gid: {i: g.core.status() for i, g in cluster.replicas(gid).items()}
            for gid in cluster.group_ids()
            if not cluster.group_converged(gid)
        }
        problems.append(f"I7: these groups did not converge after the faults healed: {stuck}")
        if behind := cluster.controllers_behind():
            problems.append(f"I7: the controllers of nodes {behind} did not apply all committed")
    else:
        nodes = {i: s.node for i, s in cluster.nodes.items() if s.node}
        latest = max(nodes.values(), key=lambda n: n.controller.core.commit_offset)
        members = latest.controller.core.config.members  # a node removed knows no more
        named = {i: n.cluster.identity.cluster_id for i, n in nodes.items() if i in members}
        if len(set(named.values())) != 1 or None in named.values():
            problems.append(f"the nodes do not agree on one cluster id: {named}")
    for (gid, term), who in cluster.leaders.items():
        if len(who) > 1:
            problems.append(f"I6: group {gid} term {term} had leaders {sorted(who)}")
    routes = _routes_of_groups(cluster)
    starts = trimmed_starts(cluster)
    for gid in sorted(cluster.group_ids()):
        route = routes.get(gid)
        outcomes = [o for o in cluster.outcomes if o.route == route]
        trimmed = starts.get(route, 0)
        dropped = max(trimmed, cluster.retained_from.get(route, 0))
        if any(r.log.config.compacts for r in cluster.replicas(gid).values()):
            check_compacted_group(cluster, gid, outcomes, problems)
        else:
            _check_group(cluster, gid, outcomes, trimmed, dropped, problems)
    if problems:
        raise Violation(f"seed {cluster.seed}: " + "; ".join(problems[:10]))


def _routes_of_groups(cluster: Cluster) -> dict[int, Route]:
    return {
        group.group_id: key
        for s in cluster.nodes.values()
        if s.node
        for key, group in s.node.partitions.items()
    }


def trimmed_starts(cluster: Cluster) -> dict[Route, int]:
    """Each partition's log start as its controller committed it (an operator's trim):
    records before it were deleted on purpose."""
    state = controller_state(cluster)
    if state is None:
        return {}
    return {
        (p.topic, p.partition): p.log_start for t in state.topics.values() for p in t.partitions
    }


def controller_state(cluster: Cluster) -> ClusterState | None:
    """The cluster's metadata as the controller's leader applied it (None: no leader)."""
    controller = cluster.leader_of(CONTROLLER_GROUP)
    if controller is None or controller.core.config is None:
        return None
    node = next(
        s.node for s in cluster.nodes.values() if s.node and controller in s.node.groups.values()
    )
    return node.controller_actor.state


def _check_group(
    cluster: Cluster,
    gid: int,
    outcomes: list[Outcome],
    log_start: int,
    dropped: int,
    problems: list[str],
) -> None:
    """`log_start`: the partition's trimmed start (acknowledged records before it may be
    gone); `dropped`: committed entries before it may be gone from every replica (a trim,
    or retention: bench/sim_topics.py)."""
    # The replicas' committed logs, as one: where two hold a batch at the same offset it is
    # the same batch. (A witness's log starts at the commit offset of its join.)
    merged: dict[int, tuple[int, bytes]] = {}
    for i, replica in cluster.replicas(gid).items():
        for base, term, batch in committed_log(replica):
            if merged.setdefault(base, (term, batch)) != (term, batch):
                problems.append(f"I2: node {i}'s committed batch of group {gid} at {base} differs")
                break
    longest = [(base, *merged[base]) for base in sorted(merged)]
    next_base = longest[0][0] if longest else 0
    for base, _term, batch in longest:
        if next_base < base <= dropped:
            next_base = base  # what no replica holds any more was dropped on purpose
        if base != next_base:
            problems.append(f"I2: group {gid}'s committed batches overlap or leave a gap at {base}")
            break
        next_base = split_batches(batch)[0][0].last_offset + 1
    records = _check_record_offsets(cluster, gid, longest, problems)
    trimmed = _trimmed_records(list(cluster.replicas(gid).values()), log_start, dropped)
    where: dict[bytes, list[int]] = {}
    stamped = cluster.stamps_log_append(gid)
    last_stamp = 0
    for base, _term, batch in longest:
        header = split_batches(batch)[0][0]
        if header.batch_type is not BatchType.DATA:
            continue
        if stamped and not header.flags & LOG_APPEND_TIME:
            problems.append(f"I8: group {gid} batch at {base} has no leader stamp")
        elif stamped and header.timestamp_ms < last_stamp:
            problems.append(
                f"I8: group {gid} timestamp went back at {base}: "
                f"{header.timestamp_ms} after {last_stamp}"
            )
        last_stamp = max(last_stamp, header.timestamp_ms)
        for at, record in offset_records(batch, header):
            where.setdefault(record.value, []).append(records.get(base, base) + at - base)
    written = {outcome.value for outcome in outcomes}  # unique per client append
    for value, offsets in where.items():
        # Only clients' values are unique: the controller may append a command twice (a
        # partition moved away and back gets the same replica set again).
        if len(offsets) > 1 and value in written:
            problems.append(f"I3: {value!r} at offsets {offsets}")
    for outcome in outcomes:
        acked = outcome.acks is Acks.QUORUM and outcome.offset is not None
        if acked and outcome.offset < trimmed and outcome.value not in where:
            continue  # trimmed: before the partition's log start, gone on purpose
        if acked and where.get(outcome.value) != [outcome.offset]:
            problems.append(
                f"I1: quorum-acked {outcome.value!r} at {outcome.route} {outcome.offset} "
                f"found at {where.get(outcome.value)}"
            )


def _trimmed_records(replicas: list[ReplicaActor], log_start: int, dropped: int) -> int:
    """Clients count records: the trim's position as a record offset, read where a replica
    still holds it. Where retention has dropped that position since on every replica (a
    front segment of Raft's own batches only has no timestamp: always past retention.ms),
    the first record any replica keeps: what lay between went by retention, also on
    purpose."""
    for g in replicas:
        if g.log.log_start_offset <= log_start:
            return g.log.records_before(log_start)
    starts = [g.log.log_start_offset for g in replicas]
    if not starts or max(starts) > dropped:
        return 0
    return min(g.log.records_before(g.log.log_start_offset) for g in replicas)


def _check_record_offsets(
    cluster: Cluster, gid: int, longest: list[tuple[int, int, bytes]], problems: list[str]
) -> dict[int, int]:
    """I9: record offsets are dense (Raft's own batches take none) and every replica gives
    a committed data batch the same one; a log that starts at 0 numbers its first record 0.
    Returns each data batch's record offset, by position."""
    out: dict[int, int] = {}
    replicas = cluster.replicas(gid)
    expected = 0 if longest and longest[0][0] == 0 else None
    next_base = longest[0][0] if longest else 0
    for base, _term, batch in longest:
        header = split_batches(batch)[0][0]
        if base != next_base:
            expected = None  # dropped on purpose before: counting starts again here
        next_base = header.last_offset + 1
        if header.batch_type is not BatchType.DATA:
            continue
        seen = {
            i: g.log.records_before(base)
            for i, g in replicas.items()
            if g.log.log_start_offset <= base <= g.core.commit_offset
        }
        if len(set(seen.values())) > 1:
            problems.append(f"I9: group {gid}'s batch at {base} has record offsets {seen}")
            return out
        record = out[base] = next(iter(seen.values()))
        if expected is not None and record != expected:
            problems.append(f"I9: group {gid}'s batch at {base} is record {record}, not {expected}")
            return out
        expected = record + header.record_count
    return out


@contextlib.contextmanager
def commits_checked(cluster: Cluster) -> Iterator[None]:
    """Every commit of a leader is checked as it happens: checked a few ms later, the
    followers would have flushed by then whatever the leader counted."""
    original = RaftCore.commit_to

    def commit_to(core: RaftCore, offset: int) -> None:
        # The configuration the commit was decided under: committing may put another one
        # in force (a learner promoted, say), which did not count for this commit.
        config = core.config
        led = core.is_leader  # a leader outside C(new) steps down as C(new) commits
        original(core, offset)
        if led:
            cluster.note_leader(core)
            check_commit_flushed(cluster, core, config)

    RaftCore.commit_to = commit_to
    try:
        yield
    finally:
        RaftCore.commit_to = original


def check_commit_flushed(cluster: Cluster, core: RaftCore, config: Configuration) -> None:
    """I4 on a leader, at the moment it commits: the offset is flushed on a majority of
    the voters of `config`, the configuration it decided under, with or without itself
    (dissertation 10.2.1). A voter that is down, or holds no replica now, cannot be
    looked at and is given the benefit of the doubt."""
    leader, gid, offset = core.id, core.group_id, core.commit_offset
    term = core.term_at(offset)
    holding = set()
    for v in config.members:
        node = cluster.nodes[v].node if v in cluster.nodes else None
        group = node.groups.get(gid) if node is not None else None
        if (
            group is None
            or offset < group.log.log_start_offset
            or (group.log.flushed_offset >= offset and group.core.term_at(offset) == term)
        ):
            holding.add(v)
    if not has_quorum(config, holding):
        cluster.failures.append(
            f"node {leader} group {gid} committed {offset}, flushed only on {sorted(holding)}"
        )


def stale_leader_tables(cluster: Cluster) -> list[str]:
    """Entries of the nodes' leader tables that do not name their partition's leader
    (on the nodes of the controller's configuration: a node removed hears no more)."""
    controller = cluster.leader_of(CONTROLLER_GROUP)
    if controller is None or controller.core.config is None:
        return ["the controller has no leader"]
    stale = []
    for i, sim in sorted(cluster.nodes.items()):
        ctl = sim.node.controller_actor if sim.node else None
        if ctl is None or i not in controller.core.config.members:
            continue
        for topic in ctl.state.topics.values():
            for p in topic.partitions:
                leader = cluster.leader_of(p.group_id)
                entry = ctl.leaders.get(p.topic, p.partition)
                believed = None if entry is None else entry.leader_id
                if leader is not None and believed != leader.node_id:
                    stale.append(
                        f"node {i}: {p.topic}/{p.partition} led by {leader.node_id}, not {believed}"
                    )
    return stale


def partitions_not_placed(cluster: Cluster) -> list[str]:
    """Partitions whose group's voters are not what the controller's leader committed
    for them, or that keep learners: a move that never finished, or `default` left
    behind the cluster's membership (its voters, when the controller's group is in no
    change and has no learners: see the mover)."""
    state = controller_state(cluster)
    if state is None:
        return ["the controller has no leader"]
    membership = cluster.leader_of(CONTROLLER_GROUP).core.config
    off = []
    for topic in state.topics.values():
        for p in topic.partitions:
            if p.group_id != DEFAULT_GROUP:
                wanted = set(p.replicas)
            elif membership.learners or membership.is_joint:
                continue
            else:
                wanted = membership.voters
            leader = cluster.leader_of(p.group_id)
            config = None if leader is None else leader.core.config
            if config is None:
                off.append(f"{p.topic}/{p.partition}: no leader")
            elif p.group_id == DEFAULT_GROUP and _tail_only(leader, wanted - config.voters):
                continue  # only an operator can mend it: "add a full replica instead"
            elif config.voters != wanted or config.learners:
                off.append(
                    f"{p.topic}/{p.partition} (group {p.group_id}): wanted {sorted(wanted)}, "
                    f"voters {sorted(config.voters)}, learners {sorted(config.learners)}"
                )
    return off


def _tail_only(leader: ReplicaActor, node_ids: set[int]) -> bool:
    """Whether one of `node_ids` holds only the tail of the leader's log (it joined as a
    witness): it may not become a full voter, so `default` cannot follow by itself."""
    core = leader.core
    progress = [core.progress.get(n) for n in node_ids]
    return any(
        p is not None and p.log_start is not None and not core.holds_the_log(p) for p in progress
    )


class StandStill(trio.abc.Instrument):
    """Cancels the run when the scheduler passes STANDSTILL_PASSES times without the
    simulated clock moving: tasks that wake each other at one instant for ever (seed 30095
    once hung `bench sim` so) would keep the clock from ever jumping."""

    def __init__(self, scope: trio.CancelScope):
        self.scope = scope
        self.instant = -1.0
        self.passes = 0

    def before_io_wait(self, timeout: float) -> None:
        now = trio.current_time()
        if now != self.instant:
            self.instant, self.passes = now, 0
        self.passes += 1
        if self.passes == STANDSTILL_PASSES:
            self.scope.cancel()
