"""Retention: every few seconds, a group drops its log's oldest segments by the log's
settings (`[log] retention_bytes`, `retention_ms`, `compact_to_snapshots`). Committed
records only: a lagging follower then starts its log again at this one's start."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from quorumlog.raft.core import RaftCore

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor

RETENTION_CHECK_S = 5.0


async def keep_retention(group: ReplicaActor) -> None:
    """While the log has retention settings (a topic's change can lift them) or segments
    wholly before a trim (a lagging replica drops them once it has committed them)."""
    try:
        while group.prunes():
            await trio.sleep(RETENTION_CHECK_S)
            # Wall-clock time, the node's (as its leaders stamp records with): retention by
            # age compares with the records' timestamps.
            now_ms = group.wall_clock_ms()
            await group.in_task(lambda core, now_ms=now_ms: retain(group, core, now_ms))
    finally:
        group.retaining = False


def retain(group: ReplicaActor, core: RaftCore, now_ms: int) -> None:
    """In the group's task: drop what retention lets go, what an operator's trim put
    before the log start, and in a log compacted to its snapshots everything before the
    last committed one. Committed records only."""
    log = group.log
    committed_end = core.commit_offset + 1
    snapshot = core.committed_snapshot()
    if log.config.compact_to_snapshots and snapshot is not None:
        log.truncate_prefix(snapshot)
    if group.log_floor > log.log_start_offset:
        log.truncate_prefix(min(group.log_floor, committed_end))
    log.apply_retention(now_ms, keep_from_offset=committed_end)
