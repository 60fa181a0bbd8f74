"""The rules of Raft, as plain synchronous code on plain state (etcd's raft.Step style).

`RaftCore` takes inputs (a peer message, a tick, "flushed up to N", a client proposal) with
the current time, changes its state, writes to the log's page cache, and leaves what must be
done in its outputs: `outbox` (messages to send) and `metadata_dirty` (term or vote changed:
persist before sending anything, storage rule 1). The node actor around it performs them.
No trio, no sockets, no clock here: every time is passed in, all randomness comes from the
`random.Random` the node is given.

Modifications to textbook Raft, from the seeds:
- pre-vote, and vote requests ignored within the minimum election timeout of hearing from a
  leader, except for a leadership transfer (seed 000, 001, 002);
- a leader that has not heard from a majority for an election timeout steps down;
- a new leader appends a barrier batch of its term; older entries commit through it (002);
- commit = largest offset at most min(match, flushed) on a majority, of the current term,
  and never above the node's own flushed offset (seed 004, RELIABILITY I4);
- followers report flushed and dirty offsets; lagging followers get 32 KiB chunks without
  forced flushes (seed 004's recovery).
"""

from __future__ import annotations

import enum
import math
import random
from dataclasses import replace

import structlog

from actors.configs import ConfigTracker, config_batch, config_of
from actors.producers import ProducerAppend, ProducerTable
from actors.progress import Progress
from actors.settings import RaftSettings
from log.batch import BatchError, BatchHeader, BatchType, build_batch, split_batches
from log.metadata import ConsensusMetadata
from log.wal import Log, LogChunk
from membership.catchup import is_caught_up
from membership.changes import ConfigChangeError, check_safe_transition, leave_joint, promote
from membership.config import Configuration
from membership.quorum import VoteResult, committed_offset, has_quorum, vote_result
from transport.messages import (
    AppendEntries,
    AppendEntriesReply,
    AppendResult,
    Heartbeat,
    HeartbeatReply,
    Message,
    TimeoutNow,
    VoteReply,
    VoteRequest,
)

logger = structlog.get_logger("quorumlog.raft")

GROUP = 0  # one Raft group per cluster for now; every message carries it
# prev_term of an AppendEntries whose prev_offset lies before the leader's retained log.
UNKNOWN_TERM = -1
# How much of the log's tail a starting node reads to learn recent producer sequences.
PRODUCER_SCAN_BYTES = 64 * 1024 * 1024
# Recoveries shorter than this are not logged: under load a follower may be a little more
# than steady_bytes_max behind for a moment, many times a second, and a log line each time
# costs more than the AppendEntries.
RECOVERY_LOG_BYTES_MIN = 1024 * 1024
# AppendEntries in flight to a recovering follower at most, whatever the chunk size: a
# connection's send queue holds 128 frames (transport.network.Limits), heartbeats included.
RECOVERY_INFLIGHT_MAX = 64


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre_candidate"  # asking for pre-votes
    CANDIDATE = "candidate"
    LEADER = "leader"
    LEARNER = "learner"

    @property
    def label(self) -> str:
        """The role as `status` shows it (CONTRACT.md): a pre-candidate is a candidate."""
        return "candidate" if self is Role.PRE_CANDIDATE else self.value


class NotLeaderError(Exception):
    def __init__(self, leader_id: int | None):
        super().__init__(f"not the leader (leader: {leader_id})")
        self.leader_id = leader_id


def barrier_batch() -> bytes:
    """The empty batch a new leader appends so that older entries commit through it."""
    return build_batch(b"", record_count=1, batch_type=BatchType.BARRIER)


class RaftCore:
    def __init__(
        self,
        node_id: int,
        log: Log,
        meta: ConsensusMetadata,
        settings: RaftSettings,
        rng: random.Random,
        now: float,
    ):
        self.id = node_id
        self.log = log
        self.meta = meta
        self.settings = settings
        self.rng = rng
        committed = Configuration.from_wire(meta.config) if meta.config is not None else None
        self.configs = ConfigTracker(committed, meta.config_offset)
        self.leader_id: int | None = None
        # Highest offset known committed; never above our flushed offset (I4).
        self.commit_offset = -1
        # Follower: highest offset known to match the current leader's log, and the last
        # commit offset that leader announced (re-applied when a flush completes, rule 2).
        self.verified_offset = -1
        self.leader_commit = -1
        self.last_leader_contact_s = -math.inf
        self.election_deadline_s = 0.0
        self.heartbeat_deadline_s = math.inf
        self.leader_since_s = 0.0
        self.votes: dict[int, bool] = {}
        self.progress: dict[int, Progress] = {}
        # Leader: entries up to here have a caller waiting for their commit (quorum appends,
        # configurations, the term's barrier); `follower_flush = "quorum"` asks followers to
        # fsync them before replying.
        self.awaited_offset = -1
        # Follower replies waiting for a flush: (offset that must be flushed, leader id).
        self.pending_replies: list[tuple[int, int]] = []
        self.reported_flushed = -1
        self.producers = ProducerTable()
        self.elections_started = 0
        self.recovery_bytes_sent = 0
        self._replay_tail()
        self.role = Role.FOLLOWER if self._is_voter() else Role.LEARNER
        # Outputs for the node actor.
        self.outbox: list[tuple[int, Message]] = []
        self.metadata_dirty = False
        self.flush_urgent = False
        self.now = now  # time of the input being handled
        # Leadership transfer in progress: (target, give up at); appends wait meanwhile.
        self.transfer: tuple[int, float] | None = None
        self._reset_election_deadline(now)

    # ----------------------------------------------------------------- state and outputs

    @property
    def term(self) -> int:
        return self.meta.current_term

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def config(self) -> Configuration | None:
        """The configuration in effect: the last one appended (None before joining)."""
        return self.configs.current

    def _is_voter(self, node_id: int | None = None) -> bool:
        config = self.config
        return config is not None and config.is_voter(self.id if node_id is None else node_id)

    def take_outbox(self) -> list[tuple[int, Message]]:
        out, self.outbox = self.outbox, []
        return out

    def next_deadline(self) -> float:
        if self.role is Role.LEADER:
            return self.heartbeat_deadline_s
        if self.role is Role.LEARNER:
            return math.inf
        return self.election_deadline_s

    def term_at(self, offset: int) -> int:
        if offset < self.log.log_start_offset:
            return 0  # before the retained log (or -1): only ever compared as committed
        return self.log.term_at(offset)

    def _send(self, to: int, message: Message) -> None:
        self.outbox.append((to, message))

    def _set_term(self, term: int, voted_for: int | None) -> None:
        self.meta = self.meta.with_vote(term, voted_for)
        self.metadata_dirty = True

    def _reset_election_deadline(self, now: float) -> None:
        s = self.settings
        self.election_deadline_s = now + self.rng.uniform(
            s.election_timeout_min_s, s.election_timeout_max_s
        )

    def _in_lease(self, now: float) -> bool:
        """Heard from a live leader within the minimum election timeout (or we lead)."""
        if self.role is Role.LEADER:
            return True
        recent = now - self.last_leader_contact_s < self.settings.election_timeout_min_s
        return self.leader_id is not None and recent

    # ----------------------------------------------------------------------- roles

    def become_follower(self, term: int, leader_id: int | None, now: float) -> None:
        was = self.role
        if term > self.term:
            self._set_term(term, None)
        self.role = Role.FOLLOWER if self._is_voter() else Role.LEARNER
        if leader_id != self.leader_id:
            self.verified_offset = -1
        self.leader_id = leader_id
        self.progress.clear()
        self.votes.clear()
        self.transfer = None
        self.heartbeat_deadline_s = math.inf
        self._reset_election_deadline(now)
        if was is Role.LEADER:
            logger.info("stepped_down", node_id=self.id, term=self.term)

    def _start_pre_vote(self, now: float) -> None:
        self.role = Role.PRE_CANDIDATE
        self.leader_id = None
        self.votes = {self.id: True}
        self._reset_election_deadline(now)
        self._request_votes(self.term + 1, pre_vote=True, transfer=False)
        self._count_votes(now)

    def _campaign(self, now: float, transfer: bool = False) -> None:
        self.elections_started += 1
        self._set_term(self.term + 1, self.id)
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.votes = {self.id: True}
        self._reset_election_deadline(now)
        logger.info("election_started", node_id=self.id, term=self.term, transfer=transfer)
        self._request_votes(self.term, pre_vote=False, transfer=transfer)
        self._count_votes(now)

    def _request_votes(self, term: int, pre_vote: bool, transfer: bool) -> None:
        request = VoteRequest(
            GROUP, term, self.id, self.log.dirty_offset, self.log.last_term, pre_vote, transfer
        )
        for voter in self.config.voters - {self.id}:
            self._send(voter, request)

    def _count_votes(self, now: float) -> None:
        result = vote_result(self.config, self.votes)
        if result is VoteResult.WON:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(now)
            else:
                self._become_leader(now)
        elif result is VoteResult.LOST:
            self.become_follower(self.term, None, now)

    def _become_leader(self, now: float) -> None:
        self.role = Role.LEADER
        self.leader_id = self.id
        self.leader_since_s = now
        self.votes.clear()
        self.progress = {}
        self._sync_progress()
        self.log.append([barrier_batch()], self.term)
        self.awaited_offset = self.log.dirty_offset
        self.flush_urgent = True
        logger.info(
            "became_leader",
            node_id=self.id,
            term=self.term,
            dirty_offset=self.log.dirty_offset,
            commit_offset=self.commit_offset,
        )
        self._broadcast_heartbeat(now)
        self.pump()
        self._maybe_commit()

    # ----------------------------------------------------------------------- inputs

    def tick(self, now: float) -> None:
        """Time passed: heartbeats, elections, lost-message recovery, leader step-down."""
        self.now = now
        if self.role is Role.LEADER:
            if now >= self.heartbeat_deadline_s:
                self._broadcast_heartbeat(now)
            self._check_quorum(now)
            if self.transfer is not None and now >= self.transfer[1]:
                logger.warning("transfer_failed", node_id=self.id, target=self.transfer[0])
                self.transfer = None
            if self.role is Role.LEADER:
                self._retransmit_stalled(now)
                self._maybe_promote()
                self.pump()
        elif self.role is not Role.LEARNER and now >= self.election_deadline_s:
            self._start_pre_vote(now)

    def step(self, sender: int, message: Message, now: float) -> None:
        """A message from a peer. The term check happens once, here (etcd's Step)."""
        self.now = now
        term = message.term
        if term > self.term:
            match message:
                case VoteRequest(pre_vote=True):
                    pass  # a pre-vote does not raise anyone's term
                case VoteReply(pre_vote=True, granted=True):
                    pass  # granted pre-votes carry the term we would take
                case VoteRequest(transfer=transfer) if self._in_lease(now) and not transfer:
                    return  # a live leader exists: do not let this node disrupt it
                case AppendEntries() | Heartbeat() | TimeoutNow():
                    self.become_follower(term, message.leader_id, now)
                case _:
                    self.become_follower(term, None, now)
        elif term < self.term:
            match message:
                case AppendEntries() | Heartbeat():
                    # Tell the stale leader about the newer term so that it steps down.
                    self._send(sender, self._append_reply(AppendResult.FAILURE))
                case VoteRequest():
                    self._send(
                        sender,
                        VoteReply(GROUP, self.id, self.term, False, message.pre_vote),
                    )
            return
        match message:
            case VoteRequest():
                self._on_vote_request(sender, message, now)
            case VoteReply():
                self._on_vote_reply(sender, message, now)
            case AppendEntries():
                self._on_append_entries(sender, message, now)
            case Heartbeat():
                self._on_heartbeat(sender, message, now)
            case AppendEntriesReply() | HeartbeatReply():
                self._on_append_reply(sender, message, now)
            case TimeoutNow():
                if self._is_voter() and self.role is not Role.LEADER:
                    self._campaign(now, transfer=True)
            case _:
                raise AssertionError(f"not a Raft message: {message!r}")

    def on_flushed(self, now: float) -> None:
        """The log's flushed offset moved: commit may advance; waiting replies can go."""
        self.now = now
        flushed = self.log.flushed_offset
        if self.role is Role.LEADER:
            self._maybe_commit()
            return
        self._follow_commit()
        if self.leader_id is None:
            return
        ready = [p for p in self.pending_replies if p[0] <= flushed]
        self.pending_replies = [p for p in self.pending_replies if p[0] > flushed]
        for _, leader in ready:
            self._send(leader, self._append_reply(AppendResult.SUCCESS))
        if not ready and min(flushed, self.verified_offset) > self.reported_flushed:
            # A background flush ended: report it now rather than at the next heartbeat.
            self._send(self.leader_id, self.heartbeat_reply())

    def propose(
        self, batches: list[tuple[BatchHeader, memoryview]], now: float, awaited: bool
    ) -> tuple[int, int]:
        """Append client batches (checked, with their headers) on the leader; returns
        (first, last) offset. `awaited`: a client waits for their commit (acks=quorum)."""
        self.now = now
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id)
        first = self.log.dirty_offset + 1
        headers = [h for h, _ in batches]
        last = self.log.append([b for _, b in batches], self.term, headers)
        if awaited:
            self.awaited_offset = last
        offset = first
        for header in headers:
            if header.producer_id >= 0:
                self.producers.note_batch(header.placed(offset, self.term))
            offset += header.record_count
        return first, last

    def find_duplicate(self, header: BatchHeader) -> ProducerAppend | None:
        """An earlier append of this idempotent batch (raises StaleSequenceError if too old)."""
        if header.producer_id < 0:
            return None
        return self.producers.find(header.producer_id, header.producer_seq)

    def _replay_tail(self) -> None:
        """Learn recent producer sequences and the configurations appended after the last
        committed one, from the log as it was found on start."""
        log = self.log
        producers_from = log.recent_start_offset(PRODUCER_SCAN_BYTES)
        offset = max(log.log_start_offset, min(producers_from, self.configs.committed_offset + 1))
        while offset <= log.dirty_offset:
            chunk = log.read(offset, 1 << 20)
            for header, batch in split_batches(chunk.data):
                self._note_batch(header, batch, producers=header.base_offset >= producers_from)
            offset = chunk.last_offset + 1

    def _note_batch(self, header: BatchHeader, batch, producers: bool = True) -> None:
        """Account for a batch now in the log: producer sequences, configurations."""
        if header.batch_type is BatchType.CONFIG:
            self.configs.appended(header.base_offset, config_of(batch, header))
        elif producers:
            self.producers.note_batch(header)

    # ----------------------------------------------------------------------- votes

    def _on_vote_request(self, sender: int, req: VoteRequest, now: float) -> None:
        up_to_date = (req.last_term, req.last_offset) >= (self.log.last_term, self.log.dirty_offset)
        # Storage rule 6: a repaired node votes again only once it has caught up.
        may_vote = self._is_voter() and self.log.dirty_offset >= self.meta.vote_after_offset
        if req.pre_vote:
            granted = (
                may_vote
                and up_to_date
                and req.term > self.term
                and (req.transfer or not self._in_lease(now))
            )
            reply_term = req.term if granted else self.term
            self._send(sender, VoteReply(GROUP, self.id, reply_term, granted, True))
            return
        granted = may_vote and up_to_date and self.meta.voted_for in (None, req.candidate_id)
        if granted and self.meta.voted_for is None:
            self._set_term(self.term, req.candidate_id)
        if granted:
            self._reset_election_deadline(now)
        self._send(sender, VoteReply(GROUP, self.id, self.term, granted, False))

    def _on_vote_reply(self, sender: int, reply: VoteReply, now: float) -> None:
        if reply.pre_vote != (self.role is Role.PRE_CANDIDATE):
            return
        if self.role not in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            return
        self.votes[sender] = reply.granted
        self._count_votes(now)

    # ----------------------------------------------------------------------- follower

    def _heard_from_leader(self, leader_id: int, now: float) -> None:
        if self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE) or self.leader_id != leader_id:
            self.become_follower(self.term, leader_id, now)
        self.last_leader_contact_s = now
        self._reset_election_deadline(now)

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
                    next_offset=prev + 1,
                    dirty_offset=log.dirty_offset,
                    commit_offset=self.commit_offset,
                )
                log.reset(prev + 1)
                self.producers.truncate(0)
                self.configs.truncated(0)
                self.verified_offset = prev
                if req.base_config:
                    self._adopt_base_config(req.base_config, prev)
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
            logger.error("bad_batch_from_leader", node_id=self.id, leader=sender, error=str(exc))
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
                self.producers.truncate(header.base_offset)
                self.configs.truncated(header.base_offset)
                self.verified_offset = min(self.verified_offset, header.base_offset - 1)
                break
            first_new += 1  # already have this very batch (same offset and term)
        if first_new < len(batches):
            log.append_replicated(batches[first_new:])
            for header, batch in batches[first_new:]:
                self._note_batch(header, batch)
            self._config_changed()
        self.verified_offset = max(self.verified_offset, last_new)
        self.leader_commit = max(self.leader_commit, req.leader_commit)
        self._follow_commit()
        if req.flush and log.flushed_offset < last_new:
            self.pending_replies.append((last_new, sender))
            self.flush_urgent = True
        else:
            self._send(sender, self._append_reply(AppendResult.SUCCESS))

    def _adopt_base_config(self, data: bytes, offset: int) -> None:
        """The committed configuration in force at `offset`, just below our log, which
        starts again after it: it becomes ours, durably (a restart must not fall back)."""
        try:
            ((header, batch),) = split_batches(data)
            if header.batch_type is not BatchType.CONFIG:
                raise BatchError(f"a {header.batch_type.name} batch")
            config = config_of(batch, header)
        except (BatchError, ValueError) as exc:
            logger.error("bad_base_config_from_leader", node_id=self.id, error=str(exc))
            return
        if self.configs.committed is not None and self.configs.committed_offset > offset:
            return  # ours is later (the leader may not know yet that it committed)
        self.configs = ConfigTracker(config, offset)
        self.meta = replace(self.meta, config=config.to_wire(), config_offset=offset)
        self.metadata_dirty = True
        self._config_changed()
        logger.info("config_from_leader", node_id=self.id, offset=offset, config=config.to_json())

    def _on_heartbeat(self, sender: int, hb: Heartbeat, now: float) -> None:
        self._heard_from_leader(hb.leader_id, now)
        self.leader_commit = max(self.leader_commit, hb.leader_commit)
        self._follow_commit()
        self._send(sender, self.heartbeat_reply())

    def _follow_commit(self) -> None:
        """Commit what the leader committed, as far as we verifiably hold and flushed it."""
        target = min(self.leader_commit, self.verified_offset, self.log.flushed_offset)
        if target > self.commit_offset:
            self._commit_to(target)

    def _commit_to(self, offset: int) -> None:
        self.commit_offset = offset
        if self.configs.commit(offset):
            # The committed configuration is durable state too (seed 000: "made durable on
            # commit"); the node persists it before sending anything.
            self.meta = replace(
                self.meta,
                config=self.configs.committed.to_wire(),
                config_offset=self.configs.committed_offset,
            )
            self.metadata_dirty = True
            logger.info(
                "config_committed",
                node_id=self.id,
                offset=self.configs.committed_offset,
                config=self.configs.committed.to_json(),
            )
            if self.role is Role.LEADER:
                self._leader_config_committed()

    def _reject(self, leader: int, hint_offset: int, hint_term: int) -> None:
        self._send(
            leader,
            AppendEntriesReply(
                GROUP,
                self.id,
                self.term,
                self._reported_flushed(),
                self.verified_offset,
                AppendResult.FAILURE,
                hint_offset,
                hint_term,
            ),
        )

    def _reported_flushed(self) -> int:
        flushed = min(self.log.flushed_offset, self.verified_offset)
        self.reported_flushed = max(self.reported_flushed, flushed)
        return flushed

    def _append_reply(self, result: AppendResult) -> AppendEntriesReply:
        return AppendEntriesReply(
            GROUP,
            self.id,
            self.term,
            self._reported_flushed(),
            self.verified_offset,
            result,
            -1,
            -1,
        )

    def heartbeat_reply(self) -> HeartbeatReply:
        return HeartbeatReply(
            GROUP,
            self.id,
            self.term,
            self._reported_flushed(),
            self.verified_offset,
            AppendResult.SUCCESS,
            -1,
            -1,
        )

    # ----------------------------------------------------------------------- leader

    def _broadcast_heartbeat(self, now: float) -> None:
        # Seeded jitter: equal deadlines would be ordered by object identity (not replayable).
        interval = self.settings.heartbeat_interval_s
        self.heartbeat_deadline_s = now + interval * (1 + 0.01 * self.rng.random())
        for peer in self.progress:
            self._send(peer, self.heartbeat_message())

    def heartbeat_message(self) -> Heartbeat:
        return Heartbeat(GROUP, self.term, self.id, -1, 0, self.commit_offset)

    def _check_quorum(self, now: float) -> None:
        """Step down if a majority has not answered within an election timeout."""
        window = self.settings.election_timeout_max_s
        if now - self.leader_since_s < window:
            return
        recent = {self.id} | {
            p.node_id for p in self.progress.values() if now - p.last_contact_s < window
        }
        if not has_quorum(self.config, recent):
            logger.warning("lost_quorum_contact", node_id=self.id, term=self.term)
            self.become_follower(self.term, None, now)

    def _retransmit_stalled(self, now: float) -> None:
        for p in self.progress.values():
            if p.inflight and now - p.last_reply_s >= self.settings.retransmit_timeout_s:
                sent = p.inflight[-1][0]
                if p.dirty_offset >= sent > p.flushed_offset:
                    continue  # it holds what we sent (heartbeats say): its reply waits on fsync
                # Requests or replies were lost: probe again; the reply's hint repositions us.
                p.forget_inflight()
                p.probing = True
                p.last_reply_s = now

    def pump(self) -> None:
        """Send every follower what its window allows (called after each round of inputs)."""
        if self.role is not Role.LEADER:
            return
        for p in self.progress.values():
            self._send_appends(p)

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
            if p.next_offset < log.log_start_offset:
                # It needs records retention removed here: it restarts at our log start.
                p.next_offset = log.log_start_offset
            prev = p.next_offset - 1
            # Below our log start the term is unknown: everything there is committed.
            prev_term = UNKNOWN_TERM if 0 <= prev < log.log_start_offset else self.term_at(prev)
            base_config = b""
            committed = self.configs.committed
            if (
                prev_term == UNKNOWN_TERM
                and committed is not None
                and self.configs.committed_offset < log.log_start_offset
            ):
                base_config = config_batch(committed)  # its entry is gone from our log
            if p.next_offset <= log.dirty_offset:
                steady = not (p.recovering or p.probing)  # a probe may be refused: keep it small
                budget = s.steady_bytes_max if steady else s.chunk_bytes_max
                chunk = log.read(p.next_offset, budget)
            else:
                chunk = LogChunk(b"", prev)  # a probe: does the follower hold our last entry?
            # More than this message to send: the follower is recovering (seed 004).
            if chunk.last_offset < log.dirty_offset and not p.recovering:
                p.recovering = True
                p.recovery_started_bytes = self.recovery_bytes_sent
                # Bytes behind, estimated from this chunk's bytes per offset.
                behind = len(chunk.data) * (log.dirty_offset - prev) // (chunk.last_offset - prev)
                if behind >= RECOVERY_LOG_BYTES_MIN:
                    logger.info(
                        "recovery_started",
                        node_id=self.id,
                        peer=p.node_id,
                        match_offset=p.match_offset,
                        dirty_offset=log.dirty_offset,
                    )
            if p.recovering:
                self.recovery_bytes_sent += len(chunk.data)
                flush = s.recovery_flush_every_chunk
            else:
                flush = s.follower_flush == "always" or (
                    s.follower_flush == "quorum" and self.awaited_offset >= p.next_offset
                )
            self._send(
                p.node_id,
                AppendEntries(
                    GROUP,
                    self.term,
                    self.id,
                    prev,
                    prev_term,
                    self.commit_offset,
                    chunk.data,
                    flush,
                    base_config,
                ),
            )
            p.sent(chunk.last_offset, len(chunk.data))
            if p.probing:
                return  # wait for the answer before sending more
            p.next_offset = chunk.last_offset + 1

    def _on_append_reply(
        self, sender: int, reply: AppendEntriesReply | HeartbeatReply, now: float
    ) -> None:
        p = self.progress.get(sender)
        if self.role is not Role.LEADER or p is None:
            return
        p.last_contact_s = now
        is_append = isinstance(reply, AppendEntriesReply)
        if is_append:
            p.last_reply_s = now
        if reply.last_dirty < p.match_offset:
            # The follower knows less than we thought: it restarted (and may have lost its
            # unflushed tail), or this reply is older than one already seen. Flushed entries
            # survive a crash, so match falls back no further than them; probe from there.
            p.match_offset = max(reply.last_dirty, p.flushed_offset)
            p.probing = True
            p.forget_inflight()
        if reply.result is AppendResult.SUCCESS:
            p.match_offset = max(p.match_offset, reply.last_dirty)
            p.flushed_offset = max(p.flushed_offset, min(reply.last_flushed, p.match_offset))
            p.dirty_offset = reply.last_dirty
            if p.probing and is_append:
                p.probing = False
                p.forget_inflight()
            elif is_append:
                p.answered_to(reply.last_dirty)
            p.next_offset = max(p.next_offset, p.match_offset + 1)
            if sender in self.config.learners_to_promote:
                p.rate = p.rate.observe(now, p.match_offset)
                self._maybe_promote()
            if self.transfer is not None and self.transfer[0] == sender:
                self._maybe_timeout_now()
            if p.recovering and p.match_offset >= self.log.dirty_offset:
                p.recovering = False
                sent = self.recovery_bytes_sent - p.recovery_started_bytes
                if sent >= RECOVERY_LOG_BYTES_MIN:
                    logger.info(
                        "recovery_finished",
                        node_id=self.id,
                        peer=p.node_id,
                        match_offset=p.match_offset,
                        bytes_sent=sent,
                    )
            self._maybe_commit()
        elif reply.result is AppendResult.FAILURE and is_append:
            p.probing = True
            p.forget_inflight()
            if reply.conflict_offset < p.match_offset:
                # Its log is shorter than we believed matched: it lost entries it had
                # reported (a damaged or lying disk). Trust what it says now.
                p.match_offset = reply.conflict_offset
                p.flushed_offset = min(p.flushed_offset, p.match_offset)
            p.next_offset = self._next_after_hint(reply.conflict_offset, reply.conflict_term, p)

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
        acked = {p.node_id: p.acked_offset for p in self.progress.values()}
        acked[self.id] = self.log.flushed_offset
        candidate = min(committed_offset(self.config, acked), self.log.flushed_offset)
        if candidate > self.commit_offset and self.term_at(candidate) == self.term:
            self._commit_to(candidate)

    # ----------------------------------------------------------------------- membership

    def _config_changed(self) -> None:
        """A configuration was appended or truncated: this node's role and the leader's
        followers follow it at once (seed 000: a configuration applies on append)."""
        if self.role is Role.LEADER:
            self._sync_progress()
            return
        voter = self._is_voter()
        if self.role is Role.LEARNER and voter:
            self.role = Role.FOLLOWER
            self._reset_election_deadline(self.now)
        elif not voter and self.role is not Role.LEARNER:
            self.role = Role.LEARNER  # removed or demoted: never campaigns again
            self.votes.clear()

    def _sync_progress(self) -> None:
        """Replicate to every member of the current and the last committed configuration
        (a removed node still learns of its removal)."""
        members = set(self.config.members)
        if self.configs.committed is not None:
            members |= self.configs.committed.members
        members.discard(self.id)
        for peer in members - self.progress.keys():
            self.progress[peer] = Progress(
                peer, self.log.dirty_offset + 1, last_contact_s=self.now, last_reply_s=self.now
            )
        for peer in self.progress.keys() - members:
            del self.progress[peer]

    def propose_config(self, config: Configuration) -> int:
        """Append a configuration on the leader; returns its offset. It takes effect now."""
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id)
        check_safe_transition(self.config, config)
        self.log.append([config_batch(config)], self.term)
        offset = self.awaited_offset = self.log.dirty_offset
        self.configs.appended(offset, config)
        self._sync_progress()
        logger.info("config_appended", node_id=self.id, offset=offset, config=config.to_json())
        return offset

    def _leader_config_committed(self) -> None:
        committed = self.configs.committed
        if not committed.is_voter(self.id):
            # A leader outside C(new) steps down once C(new) commits (seed 001).
            logger.info("leaving_as_leader", node_id=self.id, term=self.term)
            self.become_follower(self.term, None, self.now)
            return
        if committed.is_joint and not self.configs.change_in_flight:
            # Never stay in C(old,new): once it commits, move on to C(new) (seed 001).
            self.propose_config(leave_joint(committed))
        self._sync_progress()
        self._maybe_promote()

    def _maybe_promote(self) -> None:
        """Promote a learner marked for it once its lag could be replicated within one
        election timeout (Ongaro 4.2.1; Kudu's PRE_FOLLOWER); one change at a time."""
        if self.role is not Role.LEADER or self.configs.change_in_flight:
            return
        config = self.config
        for learner in sorted(config.learners_to_promote):
            p = self.progress.get(learner)
            if p is not None and self.caught_up(p):
                self.propose_config(promote(config, learner))
                return

    def caught_up(self, p: Progress) -> bool:
        return is_caught_up(
            self.log.dirty_offset,
            p.match_offset,
            p.flushed_offset,
            p.rate.offsets_per_s,
            self.settings.election_timeout_min_s,
        )

    def transfer_leadership(self, target: int) -> None:
        """Move leadership to `target`: appends wait, the target is brought up to date and
        told to campaign at once (TimeoutNow); given up after an election timeout."""
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id)
        if target == self.id:
            return
        if not self._is_voter(target):
            raise ConfigChangeError(f"node {target} is not a voter: it cannot lead")
        self.transfer = (target, self.now + self.settings.election_timeout_max_s)
        logger.info("transfer_started", node_id=self.id, target=target, term=self.term)
        self._maybe_timeout_now()

    def _maybe_timeout_now(self) -> None:
        if self.transfer is None:
            return
        target, _ = self.transfer
        p = self.progress.get(target)
        if p is not None and p.match_offset >= self.log.dirty_offset:
            self._send(target, TimeoutNow(GROUP, self.term, self.id))

    # ----------------------------------------------------------------------- reporting

    def majority_offsets(self) -> tuple[int, int]:
        """(flushed, dirty) offsets reached by a majority, as the leader sees them now."""
        flushed = {p.node_id: p.flushed_offset for p in self.progress.values()}
        dirty = {p.node_id: p.match_offset for p in self.progress.values()}
        flushed[self.id] = self.log.flushed_offset
        dirty[self.id] = self.log.dirty_offset
        return committed_offset(self.config, flushed), committed_offset(self.config, dirty)

    def status(self) -> dict:
        log = self.log
        out = {
            "node_id": self.id,
            "role": self.role.label,
            "term": self.term,
            "leader_id": self.leader_id,
            "commit_offset": self.commit_offset,
            "dirty_offset": log.dirty_offset,
            "flushed_offset": log.flushed_offset,
            "log_start_offset": log.log_start_offset,
            "config": self.config.to_json() if self.config else None,
        }
        if self.role is Role.LEADER:
            out["followers"] = {str(p.node_id): p.to_json() for p in self.progress.values()}
        return out
