"""A follower's rules: AppendEntries and heartbeats from its leader, the commit it may
follow, and the replies that report its flushed and dirty offsets (seed 004)."""

from __future__ import annotations

import structlog

from quorumlog.log.batch import BatchError, BatchType, split_batches
from quorumlog.raft.configs import ConfigTracker, config_of
from quorumlog.raft.messages import AppendEntries, AppendEntriesReply, AppendResult, Heartbeat
from quorumlog.raft.replication import UNKNOWN_TERM
from quorumlog.raft.roles import Role

logger = structlog.get_logger("quorumlog.raft")

# Follower replies waiting for a flush (a slow disk under a leader's pipeline of appends).
PENDING_REPLIES_MAX = 64


class FollowerState:
    """What a follower knows of its leader's log and owes it: how far its own log is known
    to match the leader's, the commit the leader announced, the replies waiting for a
    flush, what it last reported flushed, and a back-filled copy waiting to move in."""

    def __init__(self) -> None:
        # Highest offset known to match the current leader's log, and the last commit
        # offset that leader announced (re-applied when a flush completes, rule 2).
        self.verified_offset = -1
        self.leader_commit = -1
        # Replies waiting for a flush: (offset that must be flushed, leader id), at most
        # PENDING_REPLIES_MAX (a reply reports everything before it too).
        self.pending_replies: list[tuple[int, int]] = []
        self.reported_flushed = -1
        # A complete copy of older records to move in, (its end, the leader).
        self.backfill_moving: tuple[int, int] | None = None

    def new_leader(self) -> None:
        """What matched the log of one leader in one term proves nothing about the next,
        even the same node's: it may have lost its unflushed tail and won again without
        it (seed 30095), and our copy of that tail must not commit."""
        self.verified_offset = -1

    def matched(self, offset: int) -> None:
        self.verified_offset = max(self.verified_offset, offset)

    def cut(self, from_offset: int) -> None:
        """Our log lost its entries from `from_offset` on."""
        self.verified_offset = min(self.verified_offset, from_offset - 1)

    def log_restarted_at(self, next_offset: int) -> None:
        """Our log starts again where the leader's does: everything before `next_offset`
        is the leader's own, by its word."""
        self.verified_offset = next_offset - 1

    def announced(self, leader_commit: int) -> None:
        self.leader_commit = max(self.leader_commit, leader_commit)

    def commit_target(self, persisted: int) -> int:
        """What it may commit: what the leader committed, as far as it verifiably holds
        and flushed it."""
        return min(self.leader_commit, self.verified_offset, persisted)

    def wait_flush(self, offset: int, leader: int) -> None:
        """Answer `leader` once `offset` is durable. At most PENDING_REPLIES_MAX wait: the
        oldest goes first, as the reply to a later one reports it too."""
        pending = self.pending_replies
        pending.append((offset, leader))
        if len(pending) > PENDING_REPLIES_MAX:
            del pending[0]

    def flushed(self, offset: int) -> set[int]:
        """The log is durable up to `offset`: the leaders whose replies may go now."""
        ready = {leader for waited, leader in self.pending_replies if waited <= offset}
        self.pending_replies = [p for p in self.pending_replies if p[0] > offset]
        return ready

    def report(self, persisted: int) -> int:
        """The flushed offset a reply reports (what matches and is durable)."""
        flushed = min(persisted, self.verified_offset)
        self.reported_flushed = max(self.reported_flushed, flushed)
        return flushed

    def unreported(self, persisted: int) -> bool:
        """Whether more is durable than the leader was told."""
        return min(persisted, self.verified_offset) > self.reported_flushed

    def settled(self, dirty: int) -> bool:
        """Holds, verified and reported everything up to `dirty`, committed as its leader
        did, and owes no reply (raft/quiescence.py)."""
        return (
            not self.pending_replies
            and self.verified_offset == dirty
            and self.leader_commit == dirty
            and self.reported_flushed == dirty
        )


class FollowerRules:
    """RaftCore's follower rules (mixed into RaftCore, whose state they use)."""

    # ----------------------------------------------------------------------- follower

    def _heard_from_leader(self, leader_id: int, now: float) -> None:
        if self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE) or self.leader_id != leader_id:
            self.become_follower(self.term, leader_id, now)
        self.election.heard_from_leader(now, late=self.conditions.campaign_late)

    def _on_append_entries(self, sender: int, req: AppendEntries, now: float) -> None:
        self._heard_from_leader(req.leader_id, now)
        log = self.log
        prev = req.prev_offset
        if req.prev_term == UNKNOWN_TERM:
            # The leader's log starts after `prev` (retention): everything up to it is
            # committed. If our commit covers it, our log matches there; if not, we cannot
            # vouch for it and start our log again where the leader's does.
            if self.commit_offset < prev:
                logger.warning(
                    "log_reset_to_leader_start",
                    node_id=self.id,
                    group=self.group_id,
                    next_offset=prev + 1,
                    dirty_offset=log.dirty_offset,
                    commit_offset=self.commit_offset,
                )
                log.reset(prev + 1, req.prev_records)
                self.index.truncated(0)
                self.configs.truncated(0)
                self.following.log_restarted_at(prev + 1)
                if req.base_config:
                    self._adopt_base_config(req.base_config, prev)
                else:
                    self._forget_config(prev)
        elif prev > log.dirty_offset:
            self._reject(sender, log.dirty_offset, log.last_term)
            return
        elif prev >= log.log_start_offset and log.term_at(prev) != req.prev_term:
            # Skip back to the last entry that can match (etcd's findConflictByTerm).
            last_of_term = log.last_offset_of_term(req.prev_term)
            hint = min(prev, -1 if last_of_term is None else last_of_term)
            hint = max(hint, log.log_start_offset - 1)
            self._reject(sender, hint, self.term_at(hint) if hint >= 0 else 0)
            return
        try:
            batches = split_batches(req.batches)
        except BatchError as exc:
            logger.error(
                "bad_batch_from_leader",
                node_id=self.id,
                group=self.group_id,
                leader=sender,
                error=str(exc),
            )
            self._reject(sender, prev, self.term_at(prev) if prev >= 0 else 0)
            return
        last_new = batches[-1][0].last_offset if batches else prev
        first_new = 0
        for header, _ in batches:
            if header.base_offset > log.dirty_offset:
                break
            if log.term_at(header.base_offset) != header.term:
                # A conflict: drop our entry and all after it (Raft paper 5.3).
                assert header.base_offset > self.commit_offset, "would truncate committed entries"
                log.truncate_suffix(header.base_offset)
                self.index.truncated(header.base_offset)
                self.configs.truncated(header.base_offset)
                self.following.cut(header.base_offset)
                break
            first_new += 1  # already have this very batch (same offset and term)
        if first_new < len(batches):
            log.append_replicated(batches[first_new:])
            for header, batch in batches[first_new:]:
                self._note_batch(header, batch)
            self._config_changed()
        self.following.matched(last_new)
        self.following.announced(req.leader_commit)
        self._follow_commit()
        if req.flush and self.persisted_offset < last_new:
            self._reply_when_flushed(last_new, sender)
        else:
            self._send(sender, self._append_reply(AppendResult.SUCCESS))

    def _reply_when_flushed(self, offset: int, leader: int) -> None:
        """Answer `leader` once `offset` is durable. At most PENDING_REPLIES_MAX wait: the
        oldest goes first, as the reply to a later one reports it too."""
        self.following.wait_flush(offset, leader)
        self.outbox.flush_soon()

    def _forget_config(self, offset: int) -> None:
        """Our log starts again after `offset`, and the leader's committed configuration is
        in the entries it sends from there. Until they come this node knows none (and acts
        as a learner): the one it had is older than them, and no entry of the new log
        follows it, so a truncation must not fall back to it."""
        self.configs = ConfigTracker(None, offset)
        self.hard.keep_config(None, offset)
        self._config_changed()

    def _adopt_base_config(self, data: bytes, offset: int) -> None:
        """The committed configuration in force at `offset`, just below our log, which
        starts again after it: it becomes ours, durably (a restart must not fall back)."""
        try:
            ((header, batch),) = split_batches(data)
            if header.batch_type is not BatchType.CONFIG:
                raise BatchError(f"a {header.batch_type.name} batch")
            config = config_of(batch, header)
        except (BatchError, ValueError) as exc:
            logger.error(
                "bad_base_config_from_leader", node_id=self.id, group=self.group_id, error=str(exc)
            )
            return
        if self.configs.committed is not None and self.configs.committed_offset > offset:
            return  # ours is later (the leader may not know yet that it committed)
        self.configs = ConfigTracker(config, offset)
        self.hard.keep_config(config.to_wire(), offset)
        self._config_changed()
        logger.info(
            "config_from_leader",
            node_id=self.id,
            group=self.group_id,
            offset=offset,
            config=config.to_json(),
        )

    def _on_heartbeat(self, sender: int, hb: Heartbeat, now: float) -> None:
        self._heard_from_leader(hb.leader_id, now)
        self.following.announced(hb.leader_commit)
        self._follow_commit()
        self._send(sender, self.heartbeat_reply(hb.read_ctx))

    def _follow_commit(self) -> None:
        """Commit what the leader committed, as far as we verifiably hold and flushed it."""
        target = self.following.commit_target(self.persisted_offset)
        if target > self.commit_offset:
            self._commit_to(target)

    def _commit_to(self, offset: int) -> None:
        self.log.committed = offset
        self.index.committed(offset, self.now)
        changed = self.configs.commit(offset)
        if changed:
            # The committed configuration is durable state too (seed 000: "made durable on
            # commit"); the node persists it before sending anything.
            self.hard.keep_config(self.configs.committed.to_wire(), self.configs.committed_offset)
            logger.info(
                "config_committed",
                node_id=self.id,
                group=self.group_id,
                offset=self.configs.committed_offset,
                config=self.configs.committed.to_json(),
            )
        if self.role is Role.LEADER and (changed or self._joint_left_behind()):
            self._leader_config_committed()
        elif changed:
            self._config_changed()  # left out of what committed: it only learns from now

    def _joint_left_behind(self) -> bool:
        """A joint configuration that committed under an earlier leader, not yet left: this
        leader leaves it once its own term's first entry commits, or no one ever would
        (seed 30217: a leader crashed between the two entries)."""
        committed = self.configs.committed
        return committed is not None and committed.is_joint and not self.configs.change_in_flight

    def _reject(self, leader: int, hint_offset: int, hint_term: int) -> None:
        self._send(
            leader,
            self._append_reply(
                AppendResult.FAILURE, conflict_offset=hint_offset, conflict_term=hint_term
            ),
        )

    def _append_reply(self, result: AppendResult, **conflict: int) -> AppendEntriesReply:
        return AppendEntriesReply(
            group=self.group_id,
            node_id=self.id,
            term=self.term,
            last_flushed=self.following.report(self.persisted_offset),
            last_dirty=self.following.verified_offset,
            result=result,
            log_start=self.log.log_start_offset,
            commit_offset=self.commit_offset,
            **conflict,
        )

    def heartbeat_reply(self, read_ctx: int = 0) -> AppendEntriesReply:
        return AppendEntriesReply(
            group=self.group_id,
            node_id=self.id,
            term=self.term,
            last_flushed=self.following.report(self.persisted_offset),
            last_dirty=self.following.verified_offset,
            result=AppendResult.SUCCESS,
            heartbeat=True,
            log_start=self.log.log_start_offset,
            read_ctx=read_ctx,
            commit_offset=self.commit_offset,
        )
