"""Copying the records before a follower's log start (a witness, which joined with the
log's tail only, about to become a voter that may lead: seed 000's appendix, step t=5).

The leader streams the offsets [its log start, the follower's log start) in chunks of
`chunk_bytes_max`, a window of them in flight, the way a recovery goes (seed 004): no
flush per chunk; the follower writes them beside its log and, once the last one is in,
one flush makes them durable and moves them in front of it (log/backfill.py). The copy is
done when the follower's replies say its log starts where the leader's does. The records
are committed, hence the same in every log, so any leader may continue a copy another
began, and a copy lost with a crash or a leader change costs only its time.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from quorumlog.log.batch import BatchError, split_batches
from quorumlog.raft.host import CoreHost
from quorumlog.raft.messages import AppendEntriesReply, BackfillChunk, BackfillReply
from quorumlog.raft.progress import RECOVERY_INFLIGHT_MAX, BackfillCopy, Progress

logger = structlog.get_logger("quorumlog.raft")


class BackfillSender:
    """The leader's side (a part of raft/leader.py `Leader`): what it copies to whom is
    in each follower's Progress (`backfill_wanted`, `backfill`)."""

    def __init__(self, core: CoreHost) -> None:
        self.core = core

    def send(self, p: Progress) -> None:
        if not p.backfill_wanted or p.log_start is None:
            return
        core = self.core
        log = core.log
        start = log.log_start_offset
        if p.log_start <= start:
            p.backfill_wanted, p.backfill, p.floor = False, None, 0
            return
        copy = p.backfill
        if copy is None or copy.start != start or copy.end != p.log_start:
            # New, or retention moved our start, or the follower's log started again.
            copy = p.backfill = BackfillCopy(start, p.log_start, start, start)
            copy.last_reply_s = core.now
            logger.info(
                "backfill_started",
                node_id=core.id,
                group=core.group_id,
                peer=p.node_id,
                start=start,
                end=copy.end,
            )
        s = core.settings
        # The window of a recovery: its bytes in chunks, as many as a link's queue holds.
        window = min(RECOVERY_INFLIGHT_MAX, max(1, s.recovery_window_bytes // s.chunk_bytes_max))
        while copy.inflight < window and copy.next_offset < copy.end:
            chunk = log.read(copy.next_offset, s.chunk_bytes_max, copy.end - 1)
            core.send(
                p.node_id,
                BackfillChunk(
                    group=core.group_id,
                    term=core.term,
                    leader_id=core.id,
                    start=copy.start,
                    end=copy.end,
                    offset=copy.next_offset,
                    batches=chunk.data,
                ),
            )
            copy.inflight += 1
            copy.next_offset = chunk.last_offset + 1

    def on_reply(self, p: Progress, reply: BackfillReply, now: float) -> None:
        p.log_start = reply.log_start
        copy = p.backfill
        if copy is None or reply.start != copy.start:
            return
        copy.last_reply_s = now
        copy.acked = max(copy.acked, reply.next_offset)
        copy.inflight = max(0, copy.inflight - 1)
        if reply.gap:
            copy.send_again()

    def retransmit(self, now: float) -> None:
        """Chunks or replies lost: send again from what the follower holds."""
        timeout = self.core.settings.retransmit_timeout_s
        for p in self.core.tracker:
            copy = p.backfill
            if copy is not None and copy.inflight and now - copy.last_reply_s >= timeout:
                copy.send_again()
                copy.last_reply_s = now


class BackfillReceiver:
    """The follower's side (a part of raft/follower.py `Follower`): the chunks go beside
    the log, and it owns the complete copy waiting for the flush that moves it in."""

    def __init__(self, core: CoreHost) -> None:
        self.core = core
        self.moving: tuple[int, int] | None = None  # (the copy's end, the leader)

    def on_chunk(self, sender: int, chunk: BackfillChunk) -> None:
        core = self.core
        log = core.log
        gap = False
        if chunk.end == log.log_start_offset:
            next_offset = log.backfill_next(chunk.start)
            if chunk.offset > next_offset:
                gap = True
            elif chunk.offset == next_offset < chunk.end:
                try:  # written beside the log at the round's end (raft/raft_log.py)
                    next_offset = log.backfill(chunk.start, split_batches(chunk.batches))
                except BatchError as exc:
                    logger.error(
                        "bad_backfill_chunk",
                        node_id=core.id,
                        group=core.group_id,
                        leader=sender,
                        error=str(exc),
                    )
                    gap = True
                if next_offset == chunk.end:
                    core.outbox.flush_soon()  # one flush moves the copy in
                    self.moving = (chunk.end, sender)
        else:
            next_offset = chunk.start  # our log starts elsewhere now: the leader sees why
        core.send(
            sender,
            BackfillReply(
                group=core.group_id,
                node_id=core.id,
                term=core.term,
                start=chunk.start,
                next_offset=next_offset,
                log_start=log.log_start_offset,
                gap=gap,
            ),
        )

    def on_persisted(self, heartbeat_reply: Callable[[], AppendEntriesReply]) -> None:
        """After a flush: once the copy moved in, the leader hears of the new log start
        at once (batched heartbeats carry no per-group replies)."""
        if self.moving is None:
            return
        end, leader = self.moving
        if self.core.log.log_start_offset < end:
            self.moving = None
            self.core.send(leader, heartbeat_reply())
