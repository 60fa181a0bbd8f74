"""A leader's replication: heartbeats, the AppendEntries each follower's window allows
(one state per follower: probing, replicating, recovering in chunks as seed 004 has it;
raft/progress.py), the replies, and the commit rule."""

from __future__ import annotations

import structlog

from quorumlog.log.tailcache import LogChunk
from quorumlog.raft.configs import config_batch
from quorumlog.raft.messages import AppendEntries, AppendEntriesReply, AppendResult, Heartbeat
from quorumlog.raft.progress import Progress, ReplicationState
from quorumlog.raft.roles import Role

logger = structlog.get_logger("quorumlog.raft")


# prev_term of an AppendEntries whose prev_offset lies before the leader's retained log.
UNKNOWN_TERM = -1
# Recoveries shorter than this are not logged: under load a follower may be a little more
# than steady_bytes_max behind for a moment, many times a second, and a log line each time
# costs more than the AppendEntries.
RECOVERY_LOG_BYTES_MIN = 1024 * 1024
# AppendEntries in flight to a recovering follower at most, whatever the chunk size: a
# connection's send queue holds 128 frames (transport.network.Limits), heartbeats included.
RECOVERY_INFLIGHT_MAX = 64


class ReplicationRules:
    """RaftCore's leader rules for replication (mixed into RaftCore, whose state they use)."""

    # ----------------------------------------------------------------------- leader

    def under_replicated(self, now: float) -> bool:
        """Leading with a voter that is down, being recovered, or short of the commit
        offset without progress for an election timeout (Kafka's in-sync rule, on Raft's
        clock): one more failure from losing writes or availability."""
        if self.role is not Role.LEADER or self.config is None:
            return False
        window = self.settings.election_timeout_max_s
        return self.tracker.lagging_voter(
            self.config, self.commit_offset, self.conditions.unreachable, now, window
        )

    def _broadcast_heartbeat(self, now: float) -> None:
        # Seeded jitter: equal deadlines would be ordered by object identity (not replayable).
        interval = self.settings.heartbeat_interval_s
        self.leading.heartbeat_deadline_s = now + interval * (1 + 0.01 * self.rng.random())
        for p in self.tracker:
            self._send(p.node_id, self.heartbeat_message())

    def heartbeat_message(self) -> Heartbeat:
        return Heartbeat(
            group=self.group_id, term=self.term, leader_id=self.id, leader_commit=self.commit_offset
        )

    def _retransmit_stalled(self, now: float) -> None:
        for p in self.tracker:
            if now - p.last_reply_s < self.settings.retransmit_timeout_s:
                continue
            if p.inflight:
                sent = p.inflight[-1][0]
                if (
                    p.dirty_offset >= sent > p.flushed_offset
                    and now - p.last_reply_s < self.settings.election_timeout_max_s
                ):
                    # It holds what we sent (heartbeats say): its reply waits on fsync. Not
                    # for longer than an election timeout: the reply may have been lost
                    # after the fsync, and a follower with nothing left to say goes quiet
                    # and sends no more heartbeat replies (seed 7002: a move waited for good).
                    continue
                # Requests or replies were lost: probe again; the reply's hint repositions us.
                p.probe()
                p.last_reply_s = now
            elif p.flushed_offset < p.match_offset and not p.probing:
                # The report of its flush may have been lost, and a follower that sent it
                # goes quiet (seed 10002: a move waited for a learner that had caught up).
                # An empty AppendEntries wakes it, and its answer says what it flushed.
                p.probe()
                p.last_reply_s = now

    def peer_connected(self, peer: int) -> None:
        """A link to `peer` connected: what was sent to it before was dropped or may have
        been lost with the old connection, so probe again now rather than after the
        retransmit timeout (a new member's first messages go while it is being dialled)."""
        p = self.tracker.get(peer)
        if self.role is not Role.LEADER or p is None:
            return
        if p.inflight:
            p.probe()
        if p.backfill is not None:
            p.backfill.send_again()

    def pump(self) -> None:
        """Send every follower what its window allows (called after each round of inputs)."""
        if self.role is not Role.LEADER:
            return
        for p in self.tracker:
            self._send_appends(p)
            self._send_backfill(p)

    def _may_send(self, p: Progress) -> bool:
        """Whether the window has room for another AppendEntries to this follower."""
        count = len(p.inflight)
        if p.probing:
            return count == 0
        s = self.settings
        if p.recovering:
            # At least one in flight, then up to the window's bytes (a batch larger than a
            # chunk is sent whole, so chunks vary).
            return count == 0 or (
                count < RECOVERY_INFLIGHT_MAX and p.inflight_bytes < s.recovery_window_bytes
            )
        return count < s.steady_inflight_max

    def _send_appends(self, p: Progress) -> None:
        log = self.log
        s = self.settings
        while self._may_send(p):
            if p.next_offset > log.dirty_offset and not p.probing:
                return  # caught up; heartbeats carry the commit offset
            start = log.log_start_offset
            if p.floor > start and self.config.is_learner(p.node_id):
                start = p.floor  # a witness to be: its log starts there (seed 000 appendix)
            if p.next_offset < start:
                # It needs records retention removed here, or is a witness that needs only
                # the uncommitted tail: it restarts at `start`.
                p.next_offset = start
            prev = p.next_offset - 1
            # Below the start the follower takes the term as unknown: all is committed there.
            prev_term = UNKNOWN_TERM if 0 <= prev < start else self.term_at(prev)
            if prev_term == UNKNOWN_TERM and not self.configs.can_lead(self.id):
                return  # a witness leading: it cannot vouch for its log's past (raft/witness.py)
            base_config = b""
            committed = self.configs.committed
            if (
                prev_term == UNKNOWN_TERM
                and committed is not None
                and self.configs.committed_offset < start
            ):
                base_config = config_batch(committed)  # its entry is not sent
            if p.next_offset <= log.dirty_offset:
                # A probe may be refused: keep it small.
                steady = p.state is ReplicationState.REPLICATE
                budget = s.steady_bytes_max if steady else s.chunk_bytes_max
                chunk = log.read(p.next_offset, budget)
                if steady and chunk.last_offset < log.dirty_offset:
                    # More than one steady message behind: a recovery, in chunks from its
                    # first message on (it was up to steady_bytes_max).
                    chunk = log.read(p.next_offset, s.chunk_bytes_max)
            else:
                chunk = LogChunk(b"", prev)  # a probe: does the follower hold our last entry?
            # More than this message to send: the follower is recovering (seed 004).
            more_to_send = chunk.last_offset < log.dirty_offset
            if more_to_send and p.state is ReplicationState.REPLICATE:
                p.recover(self.tracker.recovery_bytes_sent)
                # Bytes behind, estimated from this chunk's bytes per offset.
                behind = len(chunk.data) * (log.dirty_offset - prev) // (chunk.last_offset - prev)
                if behind >= RECOVERY_LOG_BYTES_MIN:
                    logger.info(
                        "recovery_started",
                        node_id=self.id,
                        group=self.group_id,
                        peer=p.node_id,
                        match_offset=p.match_offset,
                        dirty_offset=log.dirty_offset,
                    )
            if p.recovering or (more_to_send and p.probing):
                self.tracker.recovery_bytes_sent += len(chunk.data)
                flush = s.recovery_flush_every_chunk
            else:
                flush = s.follower_flush == "always" or (
                    s.follower_flush == "quorum" and self.leading.awaited_offset >= p.next_offset
                )
            self._send(
                p.node_id,
                AppendEntries(
                    group=self.group_id,
                    term=self.term,
                    leader_id=self.id,
                    prev_offset=prev,
                    prev_term=prev_term,
                    leader_commit=self.commit_offset,
                    batches=chunk.data,
                    flush=flush,
                    base_config=base_config,
                    prev_records=log.records_before(prev + 1) if prev_term == UNKNOWN_TERM else 0,
                ),
            )
            p.sent(chunk.last_offset, len(chunk.data))
            if p.probing:
                return  # wait for the answer before sending more
            p.next_offset = chunk.last_offset + 1

    def _on_append_reply(self, sender: int, reply: AppendEntriesReply, now: float) -> None:
        p = self.tracker.get(sender)
        if self.role is not Role.LEADER or p is None:
            return
        p.last_contact_s = now
        p.log_start = reply.log_start
        p.commit_offset = max(p.commit_offset, reply.commit_offset)
        is_append = not reply.heartbeat
        if is_append:
            p.last_reply_s = now
        elif reply.read_ctx:
            self.reads.ack(sender, reply.read_ctx, self.config)
        if reply.last_dirty < p.match_offset:
            # The follower knows less than we thought: it restarted (and may have lost its
            # unflushed tail), or this reply is older than one already seen. Flushed entries
            # survive a crash, so match falls back no further than them; probe from there.
            p.match_offset = max(reply.last_dirty, p.flushed_offset)
            p.probe()
        if reply.result is AppendResult.SUCCESS:
            if reply.last_dirty > p.match_offset:
                p.advanced_s = now
            p.match_offset = max(p.match_offset, reply.last_dirty)
            p.flushed_offset = max(p.flushed_offset, min(reply.last_flushed, p.match_offset))
            p.dirty_offset = reply.last_dirty
            if p.probing and is_append:
                # The match point is found, by the probe's answer or by a late answer to a
                # message sent before the probe: send again from just past it. (Keeping a
                # next offset beyond it, with nothing in flight, left a follower behind for
                # good once the leader had nothing new to send: a simulation seed.)
                p.matched()
            elif is_append:
                p.answered_to(reply.last_dirty)
            p.next_offset = max(p.next_offset, p.match_offset + 1)
            if sender in self.config.learners_to_promote:
                p.rate = p.rate.observe(now, p.match_offset)
                self._maybe_promote()
            if self.transfer is not None and self.transfer[0] == sender:
                self._maybe_timeout_now()
            if p.recovering and p.match_offset >= self.log.dirty_offset:
                p.state = ReplicationState.REPLICATE
                sent = self.tracker.recovery_bytes_sent - p.recovery_started_bytes
                if sent >= RECOVERY_LOG_BYTES_MIN:
                    logger.info(
                        "recovery_finished",
                        node_id=self.id,
                        group=self.group_id,
                        peer=p.node_id,
                        match_offset=p.match_offset,
                        bytes_sent=sent,
                    )
            self._maybe_commit()
        elif reply.result is AppendResult.FAILURE and is_append:
            p.probe()
            if reply.conflict_offset < p.match_offset:
                # Its log is shorter than we believed matched: it lost entries it had
                # reported (a damaged or lying disk). Trust what it says now.
                p.match_offset = reply.conflict_offset
                p.flushed_offset = min(p.flushed_offset, p.match_offset)
            p.next_offset = self._next_after_hint(reply.conflict_offset, reply.conflict_term, p)
        if p.departing_until_s is not None:
            self._release_departed()  # it may know now that it was removed

    def _next_after_hint(self, hint_offset: int, hint_term: int, p: Progress) -> int:
        """Where to resume after a rejection: just past the last entry of ours that can
        match the follower's hint, at a batch start, never before the known match."""
        log = self.log
        candidate = min(hint_offset, log.dirty_offset)
        last_of_term = log.last_offset_of_term(hint_term)
        candidate = min(candidate, last_of_term if last_of_term is not None else -1)
        next_offset = max(candidate + 1, p.match_offset + 1, log.log_start_offset)
        if next_offset <= log.dirty_offset:
            next_offset = log.batch_start(next_offset)
        return next_offset

    def _maybe_commit(self) -> None:
        """Commit what a majority of voters flushed, this leader counted like any other
        (Raft dissertation 10.2.1: the leader writes its log in parallel with replication
        and need not be in the majority). A leader with a slow disk then does not hold
        commits back; whatever it has not flushed is durable on the followers that were
        counted, so a crash of this node loses nothing committed."""
        candidate = self.tracker.committed(self.config, self.id, self.persisted_offset)
        if candidate > self.commit_offset and self.term_at(candidate) == self.term:
            self._commit_to(candidate)
