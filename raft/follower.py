"""A follower's rules: AppendEntries and heartbeats from its leader, the commit it may
follow, and the replies that report its flushed and dirty offsets (seed 004).

`Follower` is the core's part for this role (raft/core.py): it owns what a follower knows
of its leader's log and owes it, reads the core's log and configurations, and asks the
core for what changes the whole replica: a leader heard of, a commit, a configuration that
starts again. It outlives role changes: a leader's replies owed before it won still go.
"""

from __future__ import annotations

import structlog

from quorumlog.log.batch import BatchError, BatchType, split_batches
from quorumlog.raft.backfill import BackfillReceiver
from quorumlog.raft.configs import config_of
from quorumlog.raft.host import CoreHost
from quorumlog.raft.messages import (
    UNKNOWN_TERM,
    AppendEntries,
    AppendEntriesReply,
    AppendResult,
    BackfillChunk,
    Heartbeat,
)

logger = structlog.get_logger("quorumlog.raft")

# Follower replies waiting for a flush (a slow disk under a leader's pipeline of appends).
PENDING_REPLIES_MAX = 64


class Follower:
    def __init__(self, core: CoreHost) -> None:
        self.core = core
        # Highest offset known to match the current leader's log, and the last commit
        # offset that leader announced (re-applied when a flush completes, rule 2).
        self.verified_offset = -1
        self.leader_commit = -1
        # Replies waiting for a flush: (offset that must be flushed, leader id), at most
        # PENDING_REPLIES_MAX (a reply reports everything before it too).
        self.pending_replies: list[tuple[int, int]] = []
        self.reported_flushed = -1
        self.backfill = BackfillReceiver(core)  # older records copied in (raft/backfill.py)

    def new_leader(self) -> None:
        """What matched the log of one leader in one term proves nothing about the next,
        even the same node's: it may have lost its unflushed tail and won again without
        it (seed 30095), and our copy of that tail must not commit."""
        self.verified_offset = -1

    # ----------------------------------------------------------------------- inputs

    def on_append_entries(self, sender: int, req: AppendEntries, now: float) -> None:
        core = self.core
        core.heard_from_leader(req.leader_id, now)
        log = core.log
        prev = req.prev_offset
        if req.prev_term == UNKNOWN_TERM:
            # The leader's log starts after `prev` (retention): everything up to it is
            # committed. If our commit covers it, our log matches there; if not, we cannot
            # vouch for it and start our log again where the leader's does.
            if core.commit_offset < prev:
                logger.warning(
                    "log_reset_to_leader_start",
                    node_id=core.id,
                    group=core.group_id,
                    next_offset=prev + 1,
                    dirty_offset=log.dirty_offset,
                    commit_offset=core.commit_offset,
                )
                log.reset(prev + 1, req.prev_records)
                core.index.truncated(0)
                core.configs.truncated(0)
                # Everything before the new start is the leader's own, by its word.
                self.verified_offset = prev
                self._restart_config(req.base_config, prev)
        elif prev > log.dirty_offset:
            self._reject(sender, log.dirty_offset, log.last_term)
            return
        elif prev >= log.log_start_offset and log.term_at(prev) != req.prev_term:
            # Skip back to the last entry that can match (etcd's findConflictByTerm).
            last_of_term = log.last_offset_of_term(req.prev_term)
            hint = min(prev, -1 if last_of_term is None else last_of_term)
            hint = max(hint, log.log_start_offset - 1)
            self._reject(sender, hint, core.term_at(hint) if hint >= 0 else 0)
            return
        try:
            batches = split_batches(req.batches)
        except BatchError as exc:
            logger.error(
                "bad_batch_from_leader",
                node_id=core.id,
                group=core.group_id,
                leader=sender,
                error=str(exc),
            )
            self._reject(sender, prev, core.term_at(prev) if prev >= 0 else 0)
            return
        last_new = batches[-1][0].last_offset if batches else prev
        first_new = 0
        for header, _ in batches:
            if header.base_offset > log.dirty_offset:
                break
            if log.term_at(header.base_offset) != header.term:
                # A conflict: drop our entry and all after it (Raft paper 5.3).
                assert header.base_offset > core.commit_offset, "would truncate committed entries"
                log.truncate_suffix(header.base_offset)
                core.index.truncated(header.base_offset)
                core.configs.truncated(header.base_offset)
                self.verified_offset = min(self.verified_offset, header.base_offset - 1)
                break
            first_new += 1  # already have this very batch (same offset and term)
        if first_new < len(batches):
            log.append_replicated(batches[first_new:])
            for header, batch in batches[first_new:]:
                core.note_batch(header, batch)
            core.config_changed()
        self.verified_offset = max(self.verified_offset, last_new)
        self.leader_commit = max(self.leader_commit, req.leader_commit)
        self.follow_commit()
        if req.flush and core.persisted_offset < last_new:
            self._reply_when_flushed(last_new, sender)
        else:
            core.send(sender, self.append_reply(AppendResult.SUCCESS))

    def on_heartbeat(self, sender: int, hb: Heartbeat, now: float) -> None:
        self.core.heard_from_leader(hb.leader_id, now)
        self.leader_commit = max(self.leader_commit, hb.leader_commit)
        self.follow_commit()
        self.core.send(sender, self.heartbeat_reply(hb.read_ctx))

    def on_backfill_chunk(self, sender: int, chunk: BackfillChunk) -> None:
        self.backfill.on_chunk(sender, chunk)

    def on_persisted(self, flushed: int) -> None:
        """The log is durable up to `flushed`: commit may follow, waiting replies go."""
        core = self.core
        self.follow_commit()
        self.backfill.on_persisted(self.heartbeat_reply)
        if core.leader_id is None:
            return
        ready = {leader for waited, leader in self.pending_replies if waited <= flushed}
        self.pending_replies = [p for p in self.pending_replies if p[0] > flushed]
        for leader in ready:  # one reply each: it reports all that was flushed
            core.send(leader, self.append_reply(AppendResult.SUCCESS))
        if not ready and min(flushed, self.verified_offset) > self.reported_flushed:
            # A background flush ended: report it now rather than at the next heartbeat.
            core.send(core.leader_id, self.heartbeat_reply())

    # ----------------------------------------------------------------------- rules

    def follow_commit(self) -> None:
        """Commit what the leader committed, as far as we verifiably hold and flushed it."""
        core = self.core
        target = min(self.leader_commit, self.verified_offset, core.persisted_offset)
        if target > core.commit_offset:
            core.commit_to(target)

    def _reply_when_flushed(self, offset: int, leader: int) -> None:
        """Answer `leader` once `offset` is durable. At most PENDING_REPLIES_MAX wait: the
        oldest goes first, as the reply to a later one reports it too."""
        pending = self.pending_replies
        pending.append((offset, leader))
        if len(pending) > PENDING_REPLIES_MAX:
            del pending[0]
        self.core.outbox.flush_soon()

    def _restart_config(self, data: bytes, offset: int) -> None:
        """Our log starts again after `offset`. The leader sends the committed
        configuration in force there (`data`), which becomes ours, durably (a restart must
        not fall back); or none, when it is in the entries to come: until they come this
        node knows none (and acts as a learner), as the one it had is older than them, and
        no entry of the new log follows it, so a truncation must not fall back to it."""
        core = self.core
        if not data:
            core.restart_config(None, offset)
            return
        try:
            ((header, batch),) = split_batches(data)
            if header.batch_type is not BatchType.CONFIG:
                raise BatchError(f"a {header.batch_type.name} batch")
            config = config_of(batch, header)
        except (BatchError, ValueError) as exc:
            logger.error(
                "bad_base_config_from_leader", node_id=core.id, group=core.group_id, error=str(exc)
            )
            return
        if core.configs.committed is not None and core.configs.committed_offset > offset:
            return  # ours is later (the leader may not know yet that it committed)
        core.restart_config(config, offset)
        logger.info(
            "config_from_leader",
            node_id=core.id,
            group=core.group_id,
            offset=offset,
            config=config.to_json(),
        )

    def settled(self, dirty: int) -> bool:
        """Holds, verified and reported everything up to `dirty`, committed as its leader
        did, and owes no reply (quiet groups: raft/core.py)."""
        return (
            not self.pending_replies
            and self.verified_offset == dirty
            and self.leader_commit == dirty
            and self.reported_flushed == dirty
        )

    # ----------------------------------------------------------------------- replies

    def _reject(self, leader: int, hint_offset: int, hint_term: int) -> None:
        self.core.send(
            leader,
            self.append_reply(
                AppendResult.FAILURE, conflict_offset=hint_offset, conflict_term=hint_term
            ),
        )

    def _reported_flushed(self) -> int:
        """The flushed offset a reply reports (what matches and is durable)."""
        flushed = min(self.core.persisted_offset, self.verified_offset)
        self.reported_flushed = max(self.reported_flushed, flushed)
        return flushed

    def append_reply(self, result: AppendResult, **conflict: int) -> AppendEntriesReply:
        core = self.core
        return AppendEntriesReply(
            group=core.group_id,
            node_id=core.id,
            term=core.term,
            last_flushed=self._reported_flushed(),
            last_dirty=self.verified_offset,
            result=result,
            log_start=core.log.log_start_offset,
            commit_offset=core.commit_offset,
            **conflict,
        )

    def heartbeat_reply(self, read_ctx: int = 0) -> AppendEntriesReply:
        core = self.core
        return AppendEntriesReply(
            group=core.group_id,
            node_id=core.id,
            term=core.term,
            last_flushed=self._reported_flushed(),
            last_dirty=self.verified_offset,
            result=AppendResult.SUCCESS,
            heartbeat=True,
            log_start=core.log.log_start_offset,
            read_ctx=read_ctx,
            commit_offset=core.commit_offset,
        )
