"""A leader's rules: heartbeats, the AppendEntries each follower's window allows (one state
per follower: probing, replicating, recovering in chunks as seed 004 has it;
raft/progress.py), the replies, the commit rule, client appends, leadership transfer, and
stepping down when a majority stops answering.

`Leader` is the core's part for this role (raft/core.py), made when it wins and dropped when
it steps down, so none of its state outlives a term (etcd keeps the same beside its
tracker: heartbeat elapsed, pendingConfIndex, leadTransferee). Its own parts are the
membership changes it makes (raft/reconfiguration.py) and the copies of older records it
sends (raft/backfill.py). It reads the core's log, configurations and tracker, and asks the
core to commit or to step down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import structlog

from quorumlog.log.batch import BatchHeader
from quorumlog.log.stamping import stamp
from quorumlog.log.tailcache import LogChunk
from quorumlog.membership.changes import ConfigChangeError
from quorumlog.raft.backfill import BackfillSender
from quorumlog.raft.configs import config_batch
from quorumlog.raft.host import CoreHost
from quorumlog.raft.messages import (
    UNKNOWN_TERM,
    AppendEntries,
    AppendEntriesReply,
    AppendResult,
    BackfillReply,
    Heartbeat,
    TimeoutNow,
)
from quorumlog.raft.producers import StaleSequenceError
from quorumlog.raft.progress import RECOVERY_INFLIGHT_MAX, Progress, ReplicationState
from quorumlog.raft.reconfiguration import MembershipChanges
from quorumlog.raft.witness import hand_over_target

logger = structlog.get_logger("quorumlog.raft")

# Recoveries shorter than this are not logged: under load a follower may be a little more
# than steady_bytes_max behind for a moment, many times a second, and a log line each time
# costs more than the AppendEntries.
RECOVERY_LOG_BYTES_MIN = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Proposal:
    """A client append: its batches, checked and parsed, and whether a caller waits for
    their commit (acks=quorum: `follower_flush = "quorum"` asks followers to fsync them)."""

    batches: list[tuple[BatchHeader, memoryview]]
    awaited: bool


class Leader:
    def __init__(self, core: CoreHost, now: float) -> None:
        self.core = core
        self.since_s = now  # when it won: the check-quorum rule gives it an election timeout
        self.heartbeat_deadline_s = math.inf
        # Entries up to here have a caller waiting for their commit (quorum appends,
        # configurations, the term's barrier); `follower_flush = "quorum"` asks followers
        # to fsync them before replying.
        self.awaited_offset = -1
        # Leadership transfer in progress: (target, give up at); appends wait meanwhile.
        self.transfer: tuple[int, float] | None = None
        self.changes = MembershipChanges(core, self)
        self.backfill = BackfillSender(core)

    def first_steps(self, barrier: bytes, now: float) -> None:
        """Just elected: replicate to every member, append the term's `barrier` (older
        entries commit through it, seed 002), and tell everyone."""
        core = self.core
        self.changes.sync_progress()
        core.log.append([barrier], core.term)
        self.awaited_offset = core.log.dirty_offset
        core.outbox.flush_soon()
        logger.info(
            "became_leader",
            node_id=core.id,
            group=core.group_id,
            term=core.term,
            dirty_offset=core.log.dirty_offset,
            commit_offset=core.commit_offset,
        )
        self.broadcast_heartbeat(now)
        self.pump()
        self.maybe_commit()

    def tick(self, now: float) -> None:
        """Time passed: heartbeats, step-down, lost messages, the changes that wait."""
        core = self.core
        if now >= self.heartbeat_deadline_s:
            self.broadcast_heartbeat(now)
        if not self._quorum_heard(now):
            logger.warning(
                "lost_quorum_contact", node_id=core.id, group=core.group_id, term=core.term
            )
            core.become_follower(core.term, None, now)
            return
        transfer = self.transfer
        if transfer is not None and now >= transfer[1]:
            logger.warning(
                "transfer_failed", node_id=core.id, group=core.group_id, target=transfer[0]
            )
            self.transfer = None
        self._retransmit_stalled(now)
        self.backfill.retransmit(now)
        self._hand_over_as_witness()
        changes = self.changes
        changes.maybe_leave_joint()
        changes.maybe_promote()
        changes.abandon_stalled_learners()
        changes.release_departed()
        self.pump()

    def _quorum_heard(self, now: float) -> bool:
        """Whether a majority answered within an election timeout (or it won since)."""
        core = self.core
        window = core.settings.election_timeout_max_s
        if now - self.since_s < window:
            return True
        return core.tracker.quorum_heard(core.config, core.id, now, window)

    def wake(self, now: float) -> None:
        """The group leaves the quiet state: heartbeats go at once."""
        self.heartbeat_deadline_s = now

    def settled(self) -> bool:
        """Nothing is left for its timers (the core checked its own log): a majority heard
        from lately (a leader cut off stays awake, so that its check-quorum rule steps it
        down), no transfer or change under way, every reachable follower up to date."""
        core = self.core
        configs = core.configs
        window = core.settings.election_timeout_min_s
        return (
            core.tracker.quorum_heard(core.config, core.id, core.now, window)
            and self.transfer is None
            and configs.can_lead(core.id)  # a witness leading hands over (raft/witness.py)
            and not configs.change_in_flight
            and not core.config.learners_to_promote
            # A follower whose node is down waits for it to come back: its link's
            # reconnection wakes the group (PeerConnected), and a leader kept awake by it
            # would retransmit to nobody, a node down costing a core.
            and core.tracker.settled(core.log.dirty_offset, core.conditions.unreachable)
        )

    # ----------------------------------------------------------------------- appends

    def propose(
        self, proposals: Sequence[Proposal], now: float, stamp_ms: int | None
    ) -> list[tuple[int, int] | StaleSequenceError]:
        """Append a round of client appends with one log append (raft/core.py `propose`)."""
        core = self.core
        placed: list[memoryview | bytes] = []
        headers: list[BatchHeader] = []
        results: list[tuple[int, int] | StaleSequenceError] = []
        next_offset = core.log.dirty_offset + 1
        awaited = False
        for proposal in proposals:
            batches = proposal.batches
            if len(batches) == 1 and batches[0][0].producer_seq >= 0:
                header = batches[0][0]
                try:
                    earlier = core.index.producers.find(header.producer_id, header.producer_seq)
                except StaleSequenceError as exc:
                    results.append(exc)
                    continue
                if earlier is not None:
                    results.append((earlier.first_offset, earlier.last_offset))
                    continue
            first = next_offset
            for header, batch in batches:
                if stamp_ms is not None:
                    header, batch = stamp(header, batch, stamp_ms)
                # Noted as placed, before the write below: a retry later in this round
                # finds it.
                core.index.note(header.placed(next_offset, core.term), now)
                headers.append(header)
                placed.append(batch)
                next_offset += header.record_count
            results.append((first, next_offset - 1))
            awaited = awaited or proposal.awaited
        if placed:
            last = core.log.append(placed, core.term, headers)
            assert last == next_offset - 1, (last, next_offset)
            if awaited:
                self.awaited_offset = last
        return results

    # ----------------------------------------------------------------------- replication

    def broadcast_heartbeat(self, now: float) -> None:
        core = self.core
        # Seeded jitter: equal deadlines would be ordered by object identity (not replayable).
        interval = core.settings.heartbeat_interval_s
        self.heartbeat_deadline_s = now + interval * (1 + 0.01 * core.rng.random())
        for p in core.tracker:
            core.send(p.node_id, self.heartbeat_message())

    def heartbeat_message(self) -> Heartbeat:
        core = self.core
        return Heartbeat(
            group=core.group_id,
            term=core.term,
            leader_id=core.id,
            leader_commit=core.commit_offset,
        )

    def _retransmit_stalled(self, now: float) -> None:
        s = self.core.settings
        for p in self.core.tracker:
            if now - p.last_reply_s < s.retransmit_timeout_s:
                continue
            if p.inflight:
                sent = p.inflight[-1][0]
                if (
                    p.dirty_offset >= sent > p.flushed_offset
                    and now - p.last_reply_s < s.election_timeout_max_s
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
        p = self.core.tracker.get(peer)
        if p is None:
            return
        if p.inflight:
            p.probe()
        if p.backfill is not None:
            p.backfill.send_again()

    def pump(self) -> None:
        """Send every follower what its window allows (after each round of inputs)."""
        for p in self.core.tracker:
            self._send_appends(p)
            self.backfill.send(p)

    def _may_send(self, p: Progress) -> bool:
        """Whether the window has room for another AppendEntries to this follower."""
        count = len(p.inflight)
        if p.probing:
            return count == 0
        s = self.core.settings
        if p.recovering:
            # At least one in flight, then up to the window's bytes (a batch larger than a
            # chunk is sent whole, so chunks vary).
            return count == 0 or (
                count < RECOVERY_INFLIGHT_MAX and p.inflight_bytes < s.recovery_window_bytes
            )
        return count < s.steady_inflight_max

    def _send_appends(self, p: Progress) -> None:
        core = self.core
        log = core.log
        s = core.settings
        while self._may_send(p):
            if p.next_offset > log.dirty_offset and not p.probing:
                return  # caught up; heartbeats carry the commit offset
            start = log.log_start_offset
            if p.floor > start and core.config.is_learner(p.node_id):
                start = p.floor  # a witness to be: its log starts there (seed 000 appendix)
            if p.next_offset < start:
                # It needs records retention removed here, or is a witness that needs only
                # the uncommitted tail: it restarts at `start`.
                p.next_offset = start
            prev = p.next_offset - 1
            # Below the start the follower takes the term as unknown: all is committed there.
            prev_term = UNKNOWN_TERM if 0 <= prev < start else core.term_at(prev)
            if prev_term == UNKNOWN_TERM and not core.configs.can_lead(core.id):
                return  # a witness leading: it cannot vouch for its log's past (raft/witness.py)
            base_config = b""
            committed = core.configs.committed
            if (
                prev_term == UNKNOWN_TERM
                and committed is not None
                and core.configs.committed_offset < start
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
                p.recover(core.tracker.recovery_bytes_sent)
                # Bytes behind, estimated from this chunk's bytes per offset.
                behind = len(chunk.data) * (log.dirty_offset - prev) // (chunk.last_offset - prev)
                if behind >= RECOVERY_LOG_BYTES_MIN:
                    logger.info(
                        "recovery_started",
                        node_id=core.id,
                        group=core.group_id,
                        peer=p.node_id,
                        match_offset=p.match_offset,
                        dirty_offset=log.dirty_offset,
                    )
            if p.recovering or (more_to_send and p.probing):
                core.tracker.recovery_bytes_sent += len(chunk.data)
                flush = s.recovery_flush_every_chunk
            else:
                flush = s.follower_flush == "always" or (
                    s.follower_flush == "quorum" and self.awaited_offset >= p.next_offset
                )
            core.send(
                p.node_id,
                AppendEntries(
                    group=core.group_id,
                    term=core.term,
                    leader_id=core.id,
                    prev_offset=prev,
                    prev_term=prev_term,
                    leader_commit=core.commit_offset,
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

    def on_append_reply(self, p: Progress, reply: AppendEntriesReply, now: float) -> None:
        core = self.core
        p.last_contact_s = now
        p.log_start = reply.log_start
        p.commit_offset = max(p.commit_offset, reply.commit_offset)
        is_append = not reply.heartbeat
        if is_append:
            p.last_reply_s = now
        elif reply.read_ctx:
            core.reads.ack(p.node_id, reply.read_ctx, core.config)
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
            if p.node_id in core.config.learners_to_promote:
                p.rate = p.rate.observe(now, p.match_offset)
                self.changes.maybe_promote()
            if self.transfer is not None and self.transfer[0] == p.node_id:
                self._maybe_timeout_now()
            if p.recovering and p.match_offset >= core.log.dirty_offset:
                p.state = ReplicationState.REPLICATE
                sent = core.tracker.recovery_bytes_sent - p.recovery_started_bytes
                if sent >= RECOVERY_LOG_BYTES_MIN:
                    logger.info(
                        "recovery_finished",
                        node_id=core.id,
                        group=core.group_id,
                        peer=p.node_id,
                        match_offset=p.match_offset,
                        bytes_sent=sent,
                    )
            self.maybe_commit()
        elif reply.result is AppendResult.FAILURE and is_append:
            p.probe()
            if reply.conflict_offset < p.match_offset:
                # Its log is shorter than we believed matched: it lost entries it had
                # reported (a damaged or lying disk). Trust what it says now.
                p.match_offset = reply.conflict_offset
                p.flushed_offset = min(p.flushed_offset, p.match_offset)
            p.next_offset = self._next_after_hint(reply.conflict_offset, reply.conflict_term, p)
        if p.departing_until_s is not None:
            self.changes.release_departed()  # it may know now that it was removed

    def on_backfill_reply(self, p: Progress, reply: BackfillReply, now: float) -> None:
        self.backfill.on_reply(p, reply, now)

    def _next_after_hint(self, hint_offset: int, hint_term: int, p: Progress) -> int:
        """Where to resume after a rejection: just past the last entry of ours that can
        match the follower's hint, at a batch start, never before the known match."""
        log = self.core.log
        candidate = min(hint_offset, log.dirty_offset)
        last_of_term = log.last_offset_of_term(hint_term)
        candidate = min(candidate, last_of_term if last_of_term is not None else -1)
        next_offset = max(candidate + 1, p.match_offset + 1, log.log_start_offset)
        if next_offset <= log.dirty_offset:
            next_offset = log.batch_start(next_offset)
        return next_offset

    def maybe_commit(self) -> None:
        """Commit what a majority of voters flushed, this leader counted like any other
        (Raft dissertation 10.2.1: the leader writes its log in parallel with replication
        and need not be in the majority). A leader with a slow disk then does not hold
        commits back; whatever it has not flushed is durable on the followers that were
        counted, so a crash of this node loses nothing committed."""
        core = self.core
        candidate = core.tracker.committed(core.config, core.id, core.persisted_offset)
        if candidate > core.commit_offset and core.term_at(candidate) == core.term:
            core.commit_to(candidate)

    def under_replicated(self, now: float) -> bool:
        """A voter is down, being recovered, or short of the commit offset without progress
        for an election timeout (Kafka's in-sync rule, on Raft's clock): one more failure
        from losing writes or availability."""
        core = self.core
        if core.config is None:
            return False
        window = core.settings.election_timeout_max_s
        return core.tracker.lagging_voter(
            core.config, core.commit_offset, core.conditions.unreachable, now, window
        )

    # ----------------------------------------------------------------------- transfer

    def live_voters(self) -> list[int]:
        """The other voters that may lead (no witness) this leader heard from within the
        minimum election timeout: where leadership may be handed."""
        core = self.core
        timeout = core.settings.election_timeout_min_s
        return core.tracker.heard_within(core.now, timeout, core.configs.can_lead)

    def transfer_leadership(self, target: int) -> None:
        """Move leadership to `target`: appends wait, the target is brought up to date and
        told to campaign at once (TimeoutNow); given up after an election timeout."""
        core = self.core
        if target == core.id:
            return
        if not core.configs.is_voter(target):
            raise ConfigChangeError(f"node {target} is not a voter: it cannot lead")
        if not core.configs.can_lead(target):
            raise ConfigChangeError(f"node {target} is a witness: it never leads")
        self.transfer = (target, core.now + core.settings.election_timeout_max_s)
        logger.info(
            "transfer_started", node_id=core.id, group=core.group_id, target=target, term=core.term
        )
        self._maybe_timeout_now()

    def _maybe_timeout_now(self) -> None:
        if self.transfer is None:
            return
        core = self.core
        target, _ = self.transfer
        p = core.tracker.get(target)
        if p is not None and p.match_offset >= core.log.dirty_offset:
            core.send(target, TimeoutNow(group=core.group_id, term=core.term, leader_id=core.id))

    def _hand_over_as_witness(self) -> None:
        """Leading as a witness: transfer to the best live voter (raft/witness.py)."""
        core = self.core
        if core.configs.can_lead(core.id) or self.transfer is not None:
            return
        target = hand_over_target(self.live_voters(), core.tracker)
        if target is not None:
            logger.info("witness_hands_over", node_id=core.id, group=core.group_id, target=target)
            self.transfer_leadership(target)

    def read_index(self) -> int:
        """A linearizable read (raft/read_index.py) once this term committed an entry."""
        core = self.core
        if core.term_at(core.commit_offset) != core.term:
            return core.reads.refuse()
        ctx = core.reads.wait(core.commit_offset, core.id)
        heartbeat = replace(self.heartbeat_message(), read_ctx=ctx)
        for peer in core.config.voters - {core.id}:
            core.send(peer, heartbeat)
        core.reads.confirm(core.config)  # a single voter confirms alone
        return ctx
