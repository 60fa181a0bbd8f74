"""A group's reads: committed records from any replica (`read_committed`), its end
(`end_offset`), the first committed record at or after a time (`offset_for_time`), and what a leader may answer only once sure it still leads: its term's
barrier committed (`term_committed`, `unsettled`), then ReadIndex (`read_index`: the core
confirms leadership with a quorum, raft/read_index.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from quorumlog.actors.replica.mailbox import Pending
from quorumlog.log.batch import parse_header
from quorumlog.log.offsets import as_records
from quorumlog.log.tailcache import OffsetOutOfRangeError
from quorumlog.transport.messages import (
    EndOffsetReply,
    ErrorCode,
    ErrorReply,
    Message,
    OffsetForTimeReply,
    ReadReply,
)

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor
    from quorumlog.raft.core import RaftCore


async def unsettled(group: ReplicaActor) -> ErrorReply | None:
    """None once the replica leads with its term's barrier committed: its commit offset
    then covers every acknowledged append. A follower, or a leader just elected (after a
    restart its commit offset starts at -1), would answer a reader "nothing there"."""
    view = group.view
    if view.serves_clients and (view.settled or await term_committed(group)):
        return None
    return group.not_leader(group.view.leader_id)


async def term_committed(group: ReplicaActor) -> bool:
    """Waits (up to an election timeout) until the group's leader term has an entry
    committed (its barrier): then its commit offset covers everything committed before it.
    False if it is not, or no longer, the leader of that term."""
    term = group.view.term
    with trio.move_on_after(group.settings.election_timeout_max_s):
        # The barrier of this term commits soon.
        await group.wait_until(lambda view: view.settled or not view.is_leader or view.term != term)
    view = group.view
    return view.settled and view.term == term


async def read_index(group: ReplicaActor) -> int | None:
    """Once an entry of this term is committed, the commit offset, confirmed by a quorum
    that this node still leads; None if it could not be (within an election timeout)."""
    if not await term_committed(group):
        return None
    answer = Pending()

    def ask(core: RaftCore) -> int:
        ctx = core.read_index()
        group.read_waiters[ctx] = answer  # answered at the end of a round: this one, or later
        return ctx

    ctx = await group.in_task(ask)
    with trio.move_on_after(group.settings.election_timeout_min_s):
        return await answer.wait()
    group.read_waiters.pop(ctx, None)
    return None


READ_BYTES_MAX = 4 * 1024 * 1024


def read_committed(
    group: ReplicaActor, offset: int, bytes_max: int, upto: int | None = None
) -> Message:
    """Committed records only (I5), from any replica, up to the commit offset it knows (or
    the position `upto` before it): from the record `offset` on, its data batches based
    at their record offsets."""
    log = group.log
    commit = group.view.commit_offset
    upto = commit if upto is None else min(upto, commit)
    start = group.record_start()
    if offset < start:  # the log's own check, or an operator's trim
        return ErrorReply(
            ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is before the log start {start}"
        )
    try:
        chunk = log.read(
            log.position_of(offset), min(max(bytes_max, 1), READ_BYTES_MAX), upto_offset=upto
        )
    except OffsetOutOfRangeError as exc:
        return ErrorReply(ErrorCode.OFFSET_OUT_OF_RANGE, str(exc))
    data = chunk.data
    if data:
        data = as_records(data, log.records_before(parse_header(data).base_offset))
    return ReadReply(data, group.last_record(commit), start)


def offset_for_time(group: ReplicaActor, timestamp_ms: int) -> Message:
    """The first committed record (I5) from the readers' start on stamped at or after
    `timestamp_ms`, by the log's time index, from any replica up to the commit offset it
    knows. A time before the epoch is refused (no record has one)."""
    if timestamp_ms < 0:
        return ErrorReply(ErrorCode.REFUSED, f"a time is at or after the epoch, not {timestamp_ms}")
    log, commit, start = group.log, group.view.commit_offset, group.read_start()
    found = log.offset_for_time(timestamp_ms, upto_offset=commit, from_offset=start)
    offset, stamp = (None, None) if found is None else (log.records_before(found[0]), found[1])
    return OffsetForTimeReply(offset, stamp, group.last_record(commit), group.record_start())


async def end_offset(group: ReplicaActor, linearizable: bool) -> Message:
    """The last committed record this replica knows of, or, linearizable, its leader's
    confirmed one."""
    view = group.view
    if not linearizable:
        return EndOffsetReply(group.last_record(view.commit_offset), group.record_start())
    if not view.is_leader:
        return group.not_leader(view.leader_id)
    commit = await read_index(group)
    if commit is None and not group.view.is_leader:
        return group.not_leader(group.view.leader_id)  # the client asks the new leader
    if commit is None:
        return ErrorReply(ErrorCode.TIMEOUT, "could not confirm leadership with a quorum")
    return EndOffsetReply(group.last_record(commit), group.record_start())
