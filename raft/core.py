"""One Raft group's rules, as plain synchronous code on plain state (etcd's raft.Step style).

`RaftCore` takes inputs (a peer message, a tick, "persisted up to N", a client proposal) with
the current time, changes its state, and leaves what must be done in its outputs, which the
node actor around it takes as one `Ready` at the end of a round (raft/ready.py): the hard
state to persist before sending anything (storage rule 1), the log's writes (the core never
writes the node's log: raft/raft_log.py), the messages, the reads answered.
No trio, no sockets, no clock here: every time is passed in, all randomness comes from the
`random.Random` the node is given.

The rules are split by concern: elections (`raft/election.py`), the follower
(`raft/follower.py`), the leader's replication (`raft/replication.py`) and configuration
changes (`raft/reconfiguration.py`); this module holds the state, the inputs and status.
Some state is a part of its own, which owns it and is told what happened rather than
sharing `self` (the way etcd splits its raft into a log, a tracker, readOnly):
`HardState` (raft/hard_state.py), `Outbox` (raft/ready.py), `LogIndex`
(raft/log_index.py), `ReadOnly` (raft/read_index.py), `RaftLog` (raft/raft_log.py),
`ConfigTracker` (raft/configs.py); the mixins follow, one at a time.

Modifications to textbook Raft, from the seeds:
- pre-vote, and vote requests ignored within the minimum election timeout of hearing from a
  leader, except for a leadership transfer (seed 000, 001, 002);
- a leader that has not heard from a majority for an election timeout steps down;
- a new leader appends a barrier batch of its term; older entries commit through it (002);
- commit = largest offset at most min(match, flushed) on a majority of voters, of the
  current term (seed 004); the leader counts its own flushed offset like a follower's and
  need not be in that majority (dissertation 10.2.1), a follower commits no further than
  it flushed (RELIABILITY I4);
- followers report flushed and dirty offsets; lagging followers get 32 KiB chunks without
  forced flushes (seed 004's recovery).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import structlog

from quorumlog.log.batch import (
    BatchHeader,
    BatchType,
    split_batches,
)
from quorumlog.log.metadata import ConsensusMetadata
from quorumlog.log.stamping import stamp
from quorumlog.membership.config import Configuration
from quorumlog.raft.backfill import BackfillRules
from quorumlog.raft.conditions import NodeConditions
from quorumlog.raft.configs import ConfigTracker, config_of
from quorumlog.raft.election import Election, ElectionRules
from quorumlog.raft.follower import FollowerRules, FollowerState
from quorumlog.raft.hard_state import HardState
from quorumlog.raft.leader import Leadership
from quorumlog.raft.log_index import LogIndex
from quorumlog.raft.messages import (
    AppendEntries,
    AppendEntriesReply,
    AppendResult,
    BackfillChunk,
    BackfillReply,
    Heartbeat,
    RaftMessage,
    TimeoutNow,
    VoteReply,
    VoteRequest,
)
from quorumlog.raft.producers import ProducerTable, StaleSequenceError
from quorumlog.raft.progress import Progress, ProgressTracker
from quorumlog.raft.quiescence import QuiescenceRules
from quorumlog.raft.raft_log import RaftLog
from quorumlog.raft.read_index import ReadOnly, ReadState
from quorumlog.raft.ready import Outbox, Ready
from quorumlog.raft.reconfiguration import ReconfigurationRules
from quorumlog.raft.replication import ReplicationRules
from quorumlog.raft.roles import NotLeaderError, Role
from quorumlog.raft.settings import RaftSettings
from quorumlog.raft.storage import LogStorage
from quorumlog.raft.witness import hand_over_target

logger = structlog.get_logger("quorumlog.raft")

# How much of the log's tail a starting node reads to learn recent producer sequences.
PRODUCER_SCAN_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Proposal:
    """A client append: its batches, checked and parsed, and whether a caller waits for
    their commit (acks=quorum: `follower_flush = "quorum"` asks followers to fsync them)."""

    batches: list[tuple[BatchHeader, memoryview]]
    awaited: bool


class RaftCore(
    ElectionRules,
    FollowerRules,
    ReplicationRules,
    ReconfigurationRules,
    QuiescenceRules,
    BackfillRules,
):
    def __init__(
        self,
        node_id: int,
        group_id: int,
        log: LogStorage,
        meta: ConsensusMetadata,
        settings: RaftSettings,
        rng: random.Random,
        now: float,
        *,
        witnesses_from_commit: bool = True,
    ):
        self.id = node_id
        self.group_id = group_id  # every message this core sends carries it
        self.log = RaftLog(log)
        self.hard = HardState(meta)
        self.settings = settings
        self.rng = rng
        # Whether a witness may join with the uncommitted tail only: not where every member
        # applies the whole log to a state machine it serves (the controller's group).
        self.witnesses_from_commit = witnesses_from_commit
        # Where an operator's trim starts the readers (actors/replica/actor.py keeps it here):
        # nobody needs the records before it, a member that would lead neither.
        self.log_floor = 0
        self.conditions = NodeConditions()  # what its node last said of itself
        committed = Configuration.from_wire(meta.config) if meta.config is not None else None
        self.configs = ConfigTracker(committed, meta.config_offset)
        self.leader_id: int | None = None
        self.following = FollowerState()  # of its leader (raft/follower.py)
        self.leading: Leadership | None = None  # while it leads (raft/leader.py)
        self.tracker = ProgressTracker()  # followers and votes (raft/progress.py)
        self.reads = ReadOnly()  # linearizable reads (raft/read_index.py)
        self.index = LogIndex()  # producers, snapshots, stamps (raft/log_index.py)
        self.election = Election(group_id, settings, rng)  # the timer (raft/election.py)
        self.now = now  # time of the input being handled
        self._replay_tail()
        self.role = Role.FOLLOWER if self.configs.takes_part(self.id) else Role.LEARNER
        # Outputs for the node actor.
        self.outbox = Outbox()
        self._reset_election_deadline(now)

    # ----------------------------------------------------------------- state and outputs

    @property
    def term(self) -> int:
        return self.hard.term

    @property
    def meta(self) -> ConsensusMetadata:
        """Term, vote and committed configuration as of now (raft/hard_state.py)."""
        return self.hard.meta

    @property
    def progress(self) -> dict[int, Progress]:
        """The leader's followers, by node id (raft/progress.py)."""
        return self.tracker.progress

    @property
    def serves_clients(self) -> bool:
        """Leads and may serve appends and reads: not a witness that only hands over
        (raft/witness.py)."""
        return self.role is Role.LEADER and self.configs.can_lead(self.id)

    @property
    def transfer(self) -> tuple[int, float] | None:
        """A leadership transfer under way: (target, give up at)."""
        return None if self.leading is None else self.leading.transfer

    @property
    def commit_offset(self) -> int:
        """The highest offset known committed (raft/raft_log.py)."""
        return self.log.committed

    @property
    def persisted_offset(self) -> int:
        """The log's durable end, as this core knows it (raft/raft_log.py)."""
        return self.log.persisted

    @property
    def elections_started(self) -> int:
        return self.election.started

    @property
    def recovery_bytes_sent(self) -> int:
        return self.tracker.recovery_bytes_sent

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def config(self) -> Configuration | None:
        """The configuration in effect: the last one appended (None before joining)."""
        return self.configs.current

    def next_deadline(self) -> float:
        if self.quiet:
            return math.inf  # the node's heartbeat manager wakes the group
        if self.role is Role.LEADER:
            return self.leading.heartbeat_deadline_s
        if self.role is Role.LEARNER:
            return math.inf
        return self.election.deadline_s

    def term_at(self, offset: int) -> int:
        if offset < self.log.log_start_offset:
            return 0  # before the retained log (or -1): only ever compared as committed
        return self.log.term_at(offset)

    def _send(self, to: int, message: RaftMessage) -> None:
        self.outbox.send(to, message)

    def _set_term(self, term: int, voted_for: int | None) -> None:
        self.hard.vote(term, voted_for)

    def _reset_election_deadline(self, now: float) -> None:
        # A node whose disk was slow lately campaigns an election timeout late, so that a
        # healthy voter wins first (actors/services/disk_health.py), and still when none does.
        self.election.reset(now, late=self.conditions.campaign_late)

    def _in_lease(self, now: float) -> bool:
        """Heard from a live leader within the minimum election timeout (or we lead)."""
        if self.role is Role.LEADER:
            return True
        return self.leader_id is not None and self.election.leader_recent(now)

    # ----------------------------------------------------------------------- roles

    def become_follower(self, term: int, leader_id: int | None, now: float) -> None:
        was = self.role
        if term > self.term or leader_id != self.leader_id:
            self.following.new_leader()
        if term > self.term:
            self._set_term(term, None)
        self.role = Role.FOLLOWER if self.configs.takes_part(self.id) else Role.LEARNER
        self.leader_id = leader_id
        self.tracker.reset()
        self.reads.drop()
        self.leading = None
        self._reset_election_deadline(now)
        if was is Role.LEADER:
            logger.info("stepped_down", node_id=self.id, group=self.group_id, term=self.term)

    # ----------------------------------------------------------------------- inputs

    def observe(self, conditions: NodeConditions) -> None:
        """What the node says of itself now (raft/conditions.py), for the inputs to come."""
        self.conditions = conditions

    def set_time(self, now: float) -> None:
        """The time of the node's next call, an input that carries none of its own."""
        self.now = now

    def set_log_floor(self, offset: int) -> None:
        """An operator's trim starts readers at `offset`: a member need not hold what
        precedes it (raft/reconfiguration.py)."""
        self.log_floor = offset

    def tick(self, now: float) -> None:
        """Time passed: heartbeats, elections, lost-message recovery, leader step-down."""
        self.now = now
        if self.role is Role.LEADER:
            if now >= self.leading.heartbeat_deadline_s:
                self._broadcast_heartbeat(now)
            self._check_quorum(now)
            if self.role is Role.LEADER:
                transfer = self.leading.transfer
                if transfer is not None and now >= transfer[1]:
                    logger.warning(
                        "transfer_failed", node_id=self.id, group=self.group_id, target=transfer[0]
                    )
                    self.leading.transfer = None
                self._retransmit_stalled(now)
                self._retransmit_backfill(now)
                self._hand_over_as_witness()
                self._maybe_leave_joint()
                self._maybe_promote()
                self._abandon_stalled_learners()
                self._release_departed()
                self.pump()
        elif self.role is not Role.LEARNER and now >= self.election.deadline_s:
            self._on_election_timeout(now)

    def _hand_over_as_witness(self) -> None:
        """Leading as a witness: transfer to the best live voter (raft/witness.py)."""
        if self.configs.can_lead(self.id) or self.transfer is not None:
            return
        target = hand_over_target(self.live_voters(), self.tracker)
        if target is not None:
            logger.info("witness_hands_over", node_id=self.id, group=self.group_id, target=target)
            self.transfer_leadership(target)

    def step(self, sender: int, message: RaftMessage, now: float) -> None:
        """A message from a peer. The term check happens once, here (etcd's Step)."""
        self.now = now
        if isinstance(message, VoteRequest):
            # From a node no configuration lists, it missed its removal's commit: whatever
            # its term, this leader tells it (raft/reconfiguration.py).
            self.track_if_departed(sender)
        term = message.term
        if term > self.term:
            match message:
                case VoteRequest(pre_vote=True):
                    pass  # a pre-vote does not raise anyone's term
                case VoteReply(pre_vote=True, granted=True):
                    pass  # granted pre-votes carry the term we would take
                case VoteRequest(transfer=transfer) if self._in_lease(now) and not transfer:
                    return  # a live leader exists: do not let this node disrupt it
                case AppendEntries() | Heartbeat() | TimeoutNow() | BackfillChunk():
                    self.become_follower(term, message.leader_id, now)
                case _:
                    self.become_follower(term, None, now)
        elif term < self.term:
            match message:
                case AppendEntries() | Heartbeat():
                    # Tell the stale leader about the newer term so that it steps down.
                    self._send(sender, self._append_reply(AppendResult.FAILURE))
                case VoteRequest():
                    self._send(sender, self._vote_reply(self.term, False, message.pre_vote))
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
            case AppendEntriesReply():
                self._on_append_reply(sender, message, now)
            case BackfillChunk():
                self._on_backfill_chunk(sender, message, now)
            case BackfillReply():
                self._on_backfill_reply(sender, message, now)
            case TimeoutNow():
                if (
                    self.configs.can_lead(self.id)
                    and self.role is not Role.LEADER
                    and not self.conditions.stopping
                ):
                    self._campaign(now, transfer=True)
            case _:
                raise AssertionError(f"not a Raft message: {message!r}")

    def on_persisted(self, offset: int, now: float) -> None:
        """The flusher made the log durable up to `offset` (or moved in a copy of older
        records): commit may advance; waiting replies can go."""
        self.now = now
        flushed = self.log.stable_to(offset)
        if self.role is Role.LEADER:
            self._maybe_commit()
            return
        self._follow_commit()
        if self.following.backfill_moving is not None:
            self._report_backfilled()
        if self.leader_id is None:
            return
        ready = self.following.flushed(flushed)
        for leader in ready:  # one reply each: it reports all that was flushed
            self._send(leader, self._append_reply(AppendResult.SUCCESS))
        if not ready and self.following.unreported(flushed):
            # A background flush ended: report it now rather than at the next heartbeat.
            self._send(self.leader_id, self.heartbeat_reply())

    def read_index(self) -> int:
        """A linearizable read (raft/read_index.py): returns its context; its `ReadState`
        comes in a `Ready`, once a quorum confirmed this leader after the request."""
        if self.role is not Role.LEADER or self.term_at(self.commit_offset) != self.term:
            return self.reads.refuse()
        ctx = self.reads.wait(self.commit_offset, self.id)
        heartbeat = replace(self.heartbeat_message(), read_ctx=ctx)
        for peer in self.config.voters - {self.id}:
            self._send(peer, heartbeat)
        self.reads.confirm(self.config)  # a single voter confirms alone
        return ctx

    def take_read_states(self) -> list[ReadState]:
        return self.reads.take()

    def take_outbox(self) -> list[tuple[int, RaftMessage]]:
        return self.outbox.take_messages()

    def ready(self) -> Ready:
        """What the node must do now, in order (raft/ready.py); taken once."""
        return Ready(
            hard_state=self.hard.take(),
            writes=self.log.take_writes(),
            messages=self.outbox.take_messages(),
            read_states=self.reads.take(),
            flush_urgent=self.outbox.take_flush(),
        )

    def propose(
        self, proposals: Sequence[Proposal], now: float, stamp_ms: int | None = None
    ) -> list[tuple[int, int] | StaleSequenceError]:
        """Append a round of client appends on the leader with one log append (they share
        its write, the next AppendEntries and the next flush), each data batch stamped
        `stamp_ms` if given (log/stamping.py). Returns each one's (first,
        last) offsets; a retried idempotent append gets its earlier offsets and takes none,
        and one too old to tell gets the error that says so. Duplicate detection happens here only: a retry
        within the round is found like one of an earlier round."""
        self.now = now
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id)
        placed: list[memoryview | bytes] = []
        headers: list[BatchHeader] = []
        results: list[tuple[int, int] | StaleSequenceError] = []
        next_offset = self.log.dirty_offset + 1
        awaited = False
        for proposal in proposals:
            batches = proposal.batches
            if len(batches) == 1 and batches[0][0].producer_id >= 0:
                header = batches[0][0]
                try:
                    earlier = self.index.producers.find(header.producer_id, header.producer_seq)
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
                self.index.note(header.placed(next_offset, self.term), now)
                headers.append(header)
                placed.append(batch)
                next_offset += header.record_count
            results.append((first, next_offset - 1))
            awaited = awaited or proposal.awaited
        if placed:
            last = self.log.append(placed, self.term, headers)
            assert last == next_offset - 1, (last, next_offset)
            if awaited:
                self.leading.awaited_offset = last
        return results

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
        """Account for a batch now in the log: configurations, producer sequences, stamps."""
        is_config = header.batch_type is BatchType.CONFIG
        self.index.note(header, self.now, producers=producers and not is_config)
        if is_config:
            self.configs.appended(header.base_offset, config_of(batch, header))

    @property
    def producers(self) -> ProducerTable:
        return self.index.producers

    @property
    def max_stamp_ms(self) -> int:
        """The largest leader stamp in the log (actors/replica/stamper.py)."""
        return self.index.max_stamp_ms

    def committed_snapshot(self) -> int | None:
        """The last committed batch flagged SNAPSHOT (raft/log_index.py)."""
        return self.index.committed_snapshot(self.commit_offset)

    # ----------------------------------------------------------------------- reporting

    def majority_offsets(self) -> tuple[int, int]:
        """(flushed, dirty) offsets reached by a majority, as the leader sees them now."""
        return self.tracker.majority_offsets(
            self.config, self.id, self.persisted_offset, self.log.dirty_offset
        )

    def status(self) -> dict:
        log = self.log
        out = {
            "node_id": self.id,
            "role": self.role.label,
            "term": self.term,
            "leader_id": self.leader_id,
            "commit_offset": self.commit_offset,
            "dirty_offset": log.dirty_offset,
            "flushed_offset": self.persisted_offset,
            "log_start_offset": log.log_start_offset,
            "config": self.config.to_json() if self.config else None,
        }
        if self.role is Role.LEADER:
            out["followers"] = {str(p.node_id): p.to_json() for p in self.tracker}
        return out
