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

import structlog

from quorumlog.log.batch import BatchError, split_batches
from quorumlog.membership.changes import ConfigChangeError
from quorumlog.raft.messages import BackfillChunk, BackfillReply
from quorumlog.raft.progress import BackfillCopy, Progress
from quorumlog.raft.replication import RECOVERY_INFLIGHT_MAX
from quorumlog.raft.roles import NotLeaderError, Role

logger = structlog.get_logger("quorumlog.raft")


class BackfillRules:
    """RaftCore's rules for copying old records in (mixed into RaftCore)."""

    # ----------------------------------------------------------------------- leader

    def start_backfill(self, node_id: int) -> None:
        """Copy to `node_id` the records before its log start, unless it holds them."""
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id)
        p = self.tracker.get(node_id)
        if p is None:
            raise ConfigChangeError(f"node {node_id} is not a member")
        p.backfill_wanted = True

    def holds_whole_log(self, node_id: int) -> bool:
        """Whether a follower's log starts where this leader's does (as it last said)."""
        p = self.tracker.get(node_id)
        return p is not None and self.holds_the_log(p)

    def _send_backfill(self, p: Progress) -> None:
        if not p.backfill_wanted or p.log_start is None:
            return
        log = self.log
        start = log.log_start_offset
        if p.log_start <= start:
            p.backfill_wanted, p.backfill, p.floor = False, None, 0
            return
        copy = p.backfill
        if copy is None or copy.start != start or copy.end != p.log_start:
            # New, or retention moved our start, or the follower's log started again.
            copy = p.backfill = BackfillCopy(start, p.log_start, start, start)
            copy.last_reply_s = self.now
            logger.info(
                "backfill_started",
                node_id=self.id,
                group=self.group_id,
                peer=p.node_id,
                start=start,
                end=copy.end,
            )
        s = self.settings
        # The window of a recovery: its bytes in chunks, as many as a link's queue holds.
        window = min(RECOVERY_INFLIGHT_MAX, max(1, s.recovery_window_bytes // s.chunk_bytes_max))
        while copy.inflight < window and copy.next_offset < copy.end:
            chunk = log.read(copy.next_offset, s.chunk_bytes_max, copy.end - 1)
            self._send(
                p.node_id,
                BackfillChunk(
                    group=self.group_id,
                    term=self.term,
                    leader_id=self.id,
                    start=copy.start,
                    end=copy.end,
                    offset=copy.next_offset,
                    batches=chunk.data,
                ),
            )
            copy.inflight += 1
            copy.next_offset = chunk.last_offset + 1

    def _on_backfill_reply(self, sender: int, reply: BackfillReply, now: float) -> None:
        p = self.tracker.get(sender)
        if self.role is not Role.LEADER or p is None:
            return
        p.log_start = reply.log_start
        copy = p.backfill
        if copy is None or reply.start != copy.start:
            return
        copy.last_reply_s = now
        copy.acked = max(copy.acked, reply.next_offset)
        copy.inflight = max(0, copy.inflight - 1)
        if reply.gap:
            copy.send_again()

    def _retransmit_backfill(self, now: float) -> None:
        """Chunks or replies lost: send again from what the follower holds."""
        for p in self.tracker:
            copy = p.backfill
            if (
                copy is not None
                and copy.inflight
                and (now - copy.last_reply_s >= self.settings.retransmit_timeout_s)
            ):
                copy.send_again()
                copy.last_reply_s = now

    # ----------------------------------------------------------------------- follower

    def _report_backfilled(self) -> None:
        """After a flush: once the copy moved in, the leader hears of the new log start
        at once (batched heartbeats carry no per-group replies)."""
        end, leader = self.following.backfill_moving
        if self.log.log_start_offset < end:
            self.following.backfill_moving = None
            self._send(leader, self.heartbeat_reply())

    def _on_backfill_chunk(self, sender: int, chunk: BackfillChunk, now: float) -> None:
        log = self.log
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
                        node_id=self.id,
                        group=self.group_id,
                        leader=sender,
                        error=str(exc),
                    )
                    gap = True
                if next_offset == chunk.end:
                    self.outbox.flush_soon()  # one flush moves the copy in
                    self.following.backfill_moving = (chunk.end, sender)
        else:
            next_offset = chunk.start  # our log starts elsewhere now: the leader sees why
        self._send(
            sender,
            BackfillReply(
                group=self.group_id,
                node_id=self.id,
                term=self.term,
                start=chunk.start,
                next_offset=next_offset,
                log_start=log.log_start_offset,
                gap=gap,
            ),
        )
