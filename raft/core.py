"""One Raft group's rules, as plain synchronous code on plain state (etcd's raft.Step style).

`RaftCore` takes inputs (a peer message, a tick, "persisted up to N", a client proposal) with
the current time, changes its state, and leaves what must be done in its outputs, which the
node actor around it takes as one `Ready` at the end of a round (raft/ready.py): the hard
state to persist before sending anything (storage rule 1), the log's writes (the core never
writes the node's log: raft/raft_log.py), the messages, the reads answered.
No trio, no sockets, no clock here: every time is passed in, all randomness comes from the
`random.Random` the node is given.

The core is composed of parts that own their state, the way etcd splits its raft into a
log, a tracker and readOnly beside the step functions of raft.go:
- the state every role reads: `HardState` (raft/hard_state.py), `RaftLog`
  (raft/raft_log.py), `ConfigTracker` (raft/configs.py), `LogIndex` (raft/log_index.py),
  `ProgressTracker` (raft/progress.py), `ReadOnly` (raft/read_index.py), `Election` (the
  timer: raft/election.py) and `Outbox` (raft/ready.py);
- a role's rules and the state only that role keeps: `Follower` (raft/follower.py), and
  while this node leads, `Leader` (raft/leader.py) with its `MembershipChanges`
  (raft/reconfiguration.py) and the copies of older records (raft/backfill.py).
  They see the core through raft/host.py's `CoreHost`: what they may read and ask of it.
This module takes the inputs and dispatches them, and keeps what changes the whole
replica: the role changes, campaigns and votes, commits, configurations, quiet groups.

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
from collections.abc import Mapping, Sequence

import structlog

from quorumlog.log.batch import BatchHeader, BatchType, split_batches
from quorumlog.log.metadata import ConsensusMetadata
from quorumlog.membership.catchup import is_caught_up
from quorumlog.membership.changes import ConfigChangeError
from quorumlog.membership.config import Configuration
from quorumlog.membership.quorum import VoteResult
from quorumlog.raft import witness
from quorumlog.raft.conditions import NodeConditions
from quorumlog.raft.configs import ConfigTracker, config_of
from quorumlog.raft.election import Election, barrier_batch
from quorumlog.raft.follower import Follower
from quorumlog.raft.hard_state import HardState
from quorumlog.raft.leader import Leader, Proposal
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
from quorumlog.raft.raft_log import RaftLog
from quorumlog.raft.read_index import ReadOnly, ReadState
from quorumlog.raft.ready import Outbox, Ready
from quorumlog.raft.roles import NotLeaderError, Role
from quorumlog.raft.settings import RaftSettings
from quorumlog.raft.storage import LogStorage

logger = structlog.get_logger("quorumlog.raft")

# How much of the log's tail a starting node reads to learn recent producer sequences.
PRODUCER_SCAN_BYTES = 64 * 1024 * 1024


class RaftCore:
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
        self.following = Follower(self)  # of its leader (raft/follower.py)
        self.leading: Leader | None = None  # while it leads (raft/leader.py)
        self.tracker = ProgressTracker()  # followers and votes (raft/progress.py)
        self.reads = ReadOnly()  # linearizable reads (raft/read_index.py)
        self.index = LogIndex()  # producers, snapshots, stamps (raft/log_index.py)
        self.election = Election(group_id, settings, rng)  # the timer (raft/election.py)
        self.quiet = False  # no timers run (`quiesce`)
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

    def send(self, to: int, message: RaftMessage) -> None:
        self.outbox.send(to, message)

    def _reset_election_deadline(self, now: float) -> None:
        # A node whose disk was slow lately campaigns an election timeout late, so that a
        # healthy voter wins first (actors/services/disk_health.py), and still when none does.
        self.election.reset(now, late=self.conditions.campaign_late)

    def _in_lease(self, now: float) -> bool:
        """Heard from a live leader within the minimum election timeout (or we lead)."""
        if self.role is Role.LEADER:
            return True
        return self.leader_id is not None and self.election.leader_recent(now)

    def _leader(self) -> Leader:
        if self.leading is None:
            raise NotLeaderError(self.leader_id)
        return self.leading

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
        if self.leading is not None:
            self.leading.tick(now)
        elif self.role is not Role.LEARNER and now >= self.election.deadline_s:
            self._on_election_timeout(now)

    def step(self, sender: int, message: RaftMessage, now: float) -> None:
        """A message from a peer. The term check happens once, here (etcd's Step)."""
        self.now = now
        if isinstance(message, VoteRequest) and self.leading is not None:
            # From a node no configuration lists, it missed its removal's commit: whatever
            # its term, this leader tells it (raft/reconfiguration.py).
            self.leading.changes.track_if_departed(sender)
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
                    self.send(sender, self.following.append_reply(AppendResult.FAILURE))
                case VoteRequest():
                    self.send(sender, self._vote_reply(self.term, False, message.pre_vote))
            return
        match message:
            case VoteRequest():
                self._on_vote_request(sender, message, now)
            case VoteReply():
                self._on_vote_reply(sender, message, now)
            case AppendEntries():
                self.following.on_append_entries(sender, message, now)
            case Heartbeat():
                self.following.on_heartbeat(sender, message, now)
            case BackfillChunk():
                self.following.on_backfill_chunk(sender, message)
            case AppendEntriesReply() | BackfillReply():
                p = self.tracker.get(sender)
                if self.leading is None or p is None:
                    return
                if isinstance(message, AppendEntriesReply):
                    self.leading.on_append_reply(p, message, now)
                else:
                    self.leading.on_backfill_reply(p, message, now)
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
        if self.leading is not None:
            self.leading.maybe_commit()
        else:
            self.following.on_persisted(flushed)

    def propose(
        self, proposals: Sequence[Proposal], now: float, stamp_ms: int | None = None
    ) -> list[tuple[int, int] | StaleSequenceError]:
        """Append a round of client appends on the leader with one log append (they share
        its write, the next AppendEntries and the next flush), each data batch stamped
        `stamp_ms` if given (log/stamping.py). Returns each one's (first, last) offsets; a
        retried idempotent append gets its earlier offsets and takes none, and one too old
        to tell gets the error that says so. Duplicate detection happens here only: a
        retry within the round is found like one of an earlier round."""
        self.now = now
        return self._leader().propose(proposals, now, stamp_ms)

    def read_index(self) -> int:
        """A linearizable read (raft/read_index.py): returns its context; its `ReadState`
        comes in a `Ready`, once a quorum confirmed this leader after the request."""
        if self.leading is None:
            return self.reads.refuse()
        return self.leading.read_index()

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

    # ------------------------------------------------------------- the leader's calls

    def pump(self) -> None:
        """Send every follower what its window allows (called after each round of inputs)."""
        if self.leading is not None:
            self.leading.pump()

    def heartbeat_message(self) -> Heartbeat:
        return self._leader().heartbeat_message()

    def heartbeat_reply(self) -> AppendEntriesReply:
        """What a follower says of its log between appends (raft/follower.py)."""
        return self.following.heartbeat_reply()

    def peer_connected(self, peer: int) -> None:
        """A link to `peer` connected: a leader probes it again at once (raft/leader.py)."""
        if self.leading is not None:
            self.leading.peer_connected(peer)

    def under_replicated(self, now: float) -> bool:
        """Leading with a voter that is down, recovering or stalled (raft/leader.py)."""
        return self.leading is not None and self.leading.under_replicated(now)

    def propose_config(self, config: Configuration) -> int:
        """Append a configuration on the leader; returns its offset. It takes effect now."""
        return self._leader().changes.propose_config(config)

    def transfer_leadership(self, target: int) -> None:
        """Move leadership to `target` (raft/leader.py)."""
        self._leader().transfer_leadership(target)

    def transfer_to_live_voter(self, target: int) -> bool:
        """Leader balancing, a slow disk: move leadership to `target` if it is a live
        voter (`live_voters`); True if a transfer started."""
        leading = self.leading
        if leading is None or leading.transfer is not None or target not in self.live_voters():
            return False
        leading.transfer_leadership(target)
        return True

    def live_voters(self) -> list[int]:
        """The other voters that may lead, heard from lately (raft/leader.py)."""
        return [] if self.leading is None else self.leading.live_voters()

    def caught_up(self, p: Progress) -> bool:
        """Whether a follower's lag could be replicated within an election timeout."""
        return is_caught_up(
            self.log.dirty_offset,
            p.match_offset,
            p.flushed_offset,
            p.rate.offsets_per_s,
            self.settings.election_timeout_min_s,
        )

    def holds_the_log(self, p: Progress) -> bool:
        """Whether a member holds every record this node holds (a witness that joined
        with the tail only does not, until retention passes its start), those before an
        operator's trim aside: a member that joined from a leader that had dropped them
        starts after them, and nobody reads them (simulation seed 10000 of the topic
        changes: such a member was never promoted, its move never finished). Records, not
        positions: a member whose log starts later by Raft's own batches only lacks none
        (time retention drops a front segment of them at once, as they carry no
        timestamp: seed 82584's learner was refused promotion for good)."""
        log = self.log
        start = max(log.log_start_offset, min(self.log_floor, self.commit_offset + 1))
        if p.floor > start or p.log_start is None:
            return False
        return p.log_start <= start or (
            p.log_start <= log.dirty_offset + 1
            and log.records_before(p.log_start) <= log.records_before(start)
        )

    def start_backfill(self, node_id: int) -> None:
        """Copy to `node_id` the records before its log start, unless it holds them
        (raft/backfill.py)."""
        self._leader()
        p = self.tracker.get(node_id)
        if p is None:
            raise ConfigChangeError(f"node {node_id} is not a member")
        p.backfill_wanted = True

    def holds_whole_log(self, node_id: int) -> bool:
        """Whether a follower's log starts where this leader's does (as it last said)."""
        p = self.tracker.get(node_id)
        return p is not None and self.holds_the_log(p)

    # ----------------------------------------------------------------------- roles

    def become_follower(self, term: int, leader_id: int | None, now: float) -> None:
        was = self.role
        if term > self.term or leader_id != self.leader_id:
            self.following.new_leader()
        if term > self.term:
            self.hard.vote(term, None)
        self.role = Role.FOLLOWER if self.configs.takes_part(self.id) else Role.LEARNER
        self.leader_id = leader_id
        self.tracker.reset()
        self.reads.drop()
        self.leading = None
        self._reset_election_deadline(now)
        if was is Role.LEADER:
            logger.info("stepped_down", node_id=self.id, group=self.group_id, term=self.term)

    def heard_from_leader(self, leader_id: int, now: float) -> None:
        """A message from the current term's leader: follow it, and the timer restarts."""
        if self.role in (Role.CANDIDATE, Role.PRE_CANDIDATE) or self.leader_id != leader_id:
            self.become_follower(self.term, leader_id, now)
        self.election.heard_from_leader(now, late=self.conditions.campaign_late)

    def campaign_soon(self, now: float) -> None:
        """Start an election at the next tick: a new group's preferred leader goes first
        (its placement spreads leaders evenly)."""
        self.election.soon(now)

    def campaign_due(self, now: float) -> bool:
        """Whether a tick now starts a pre-vote: the election timer ran out, and this
        voter's turn in the group's order came (the node may still make it wait for a
        campaign slot: actors/replica/campaigns.py)."""
        if self.role in (Role.LEADER, Role.LEARNER) or now < self.election.deadline_s:
            return False
        if self.conditions.stopping:
            return False
        if not self.configs.may_campaign(self.id):
            return witness.may_campaign(self.config, self.id, self.election.timeouts_as_witness)
        return self.election.turn_waited or self._campaign_rank() == 0

    def _campaign_rank(self) -> int:
        """The turns this voter gives the others before it campaigns (`Election.rank`)."""
        unreachable = self.conditions.unreachable
        return self.election.rank(
            self.id,
            self.config.voters,
            lambda n: self.configs.can_lead(n) and n not in unreachable,
        )

    def _on_election_timeout(self, now: float) -> None:
        if self.campaign_due(now):
            self._start_pre_vote(now)
        elif self.conditions.stopping or not self.configs.may_campaign(self.id):
            self._reset_election_deadline(now)  # a witness (or a node stopping) only votes
            self.election.timed_out_unable_to_campaign()
        else:
            self.election.wait_turns(now, self._campaign_rank())  # voters before it first

    def _start_pre_vote(self, now: float) -> None:
        self.election.pre_vote_started()
        self.role = Role.PRE_CANDIDATE
        self.leader_id = None
        self.tracker.start_votes(self.id)
        self._reset_election_deadline(now)
        self._request_votes(self.term + 1, pre_vote=True, transfer=False)
        self._count_votes(now)

    def _campaign(self, now: float, transfer: bool = False) -> None:
        self.election.campaign_started()
        self.hard.vote(self.term + 1, self.id)
        self.role = Role.CANDIDATE
        self.leader_id = None
        self.tracker.start_votes(self.id)
        self._reset_election_deadline(now)
        logger.info(
            "election_started",
            node_id=self.id,
            group=self.group_id,
            term=self.term,
            transfer=transfer,
        )
        self._request_votes(self.term, pre_vote=False, transfer=transfer)
        self._count_votes(now)

    def _request_votes(self, term: int, pre_vote: bool, transfer: bool) -> None:
        request = VoteRequest(
            group=self.group_id,
            term=term,
            candidate_id=self.id,
            last_offset=self.log.dirty_offset,
            last_term=self.log.last_term,
            pre_vote=pre_vote,
            transfer=transfer,
        )
        for voter in self.config.voters - {self.id}:
            self.send(voter, request)

    def _count_votes(self, now: float) -> None:
        result = self.tracker.vote_result(self.config)
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
        self.election.won()
        self.leading = Leader(self, now)
        self.tracker.reset()
        self.leading.first_steps(barrier_batch(), now)

    def _on_vote_request(self, sender: int, req: VoteRequest, now: float) -> None:
        up_to_date = (req.last_term, req.last_offset) >= (self.log.last_term, self.log.dirty_offset)
        # Storage rule 6: a repaired node votes again only once it has caught up. Whether
        # it is a voter does not matter here: the candidate counts only its voters' votes,
        # and a learner promoted by a joint entry it has not received yet must be able to
        # vote, or C(old,new) can elect no one (etcd's rule; a simulation seed stalled).
        may_vote = self.log.dirty_offset >= self.hard.meta.vote_after_offset
        # A replica that waits to be added (no configuration yet) votes for no one: it may
        # be a node's new replica of a group it was moved out of, its log deleted, and a
        # replica left behind with a configuration from before the move would count it
        # (simulation seed 10006 of the topic changes: two leaders, one of a stale set).
        may_vote = may_vote and self.config is not None
        if req.pre_vote:
            granted = (
                may_vote
                and up_to_date
                and req.term > self.term
                and (req.transfer or not self._in_lease(now))
            )
            reply_term = req.term if granted else self.term
            self.send(sender, self._vote_reply(reply_term, granted, pre_vote=True))
            return
        granted = may_vote and up_to_date and self.hard.meta.voted_for in (None, req.candidate_id)
        if granted and self.hard.meta.voted_for is None:
            self.hard.vote(self.term, req.candidate_id)
        if granted:
            self._reset_election_deadline(now)
        self.send(sender, self._vote_reply(self.term, granted, pre_vote=False))

    def _vote_reply(self, term: int, granted: bool, pre_vote: bool) -> VoteReply:
        return VoteReply(
            group=self.group_id, node_id=self.id, term=term, granted=granted, pre_vote=pre_vote
        )

    def _on_vote_reply(self, sender: int, reply: VoteReply, now: float) -> None:
        if reply.pre_vote != (self.role is Role.PRE_CANDIDATE):
            return
        if self.role not in (Role.PRE_CANDIDATE, Role.CANDIDATE):
            return
        self.tracker.record_vote(sender, reply.granted)
        self._count_votes(now)

    # -------------------------------------------------------- commits and configurations

    def commit_to(self, offset: int) -> None:
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
        if self.leading is not None and (changed or self.configs.joint_left_behind):
            self.leading.changes.config_committed()
        elif changed:
            self.config_changed()  # left out of what committed: it only learns from now

    def config_changed(self) -> None:
        """A configuration was appended or truncated: this node's role and the leader's
        followers follow it at once (seed 000: a configuration applies on append)."""
        if self.leading is not None:
            self.leading.changes.sync_progress()
            return
        voter = self.configs.takes_part(self.id)
        if self.role is Role.LEARNER and voter:
            self.role = Role.FOLLOWER
            self._reset_election_deadline(self.now)
        elif not voter and self.role is not Role.LEARNER:
            self.role = Role.LEARNER  # removed or demoted: never campaigns again
            self.tracker.clear_votes()

    def restart_config(self, config: Configuration | None, offset: int) -> None:
        """The log starts again after `offset` with `config` committed there (None: it is
        in the entries to come); durably, a restart must not fall back (raft/follower.py)."""
        self.configs = ConfigTracker(config, offset)
        self.hard.keep_config(None if config is None else config.to_wire(), offset)
        self.config_changed()

    def peer_ids(self) -> set[int]:
        """The nodes whose reachability the core asks of its node (raft/conditions.py):
        the members, and the departing ones a leader still replicates to."""
        return (
            self.configs.members_except(self.id) | self.tracker.peers()
            if self.config is not None
            else set()
        )

    def note_batch(self, header: BatchHeader, batch, producers: bool = True) -> None:
        """Account for a batch now in the log: configurations, producer sequences, stamps."""
        is_config = header.batch_type is BatchType.CONFIG
        self.index.note(header, self.now, producers=producers and not is_config)
        if is_config:
            self.configs.appended(header.base_offset, config_of(batch, header))

    def _replay_tail(self) -> None:
        """Learn recent producer sequences and the configurations appended after the last
        committed one, from the log as it was found on start."""
        log = self.log
        producers_from = log.recent_start_offset(PRODUCER_SCAN_BYTES)
        offset = max(log.log_start_offset, min(producers_from, self.configs.committed_offset + 1))
        while offset <= log.dirty_offset:
            chunk = log.read(offset, 1 << 20)
            for header, batch in split_batches(chunk.data):
                self.note_batch(header, batch, producers=header.base_offset >= producers_from)
            offset = chunk.last_offset + 1

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

    # ------------------------------------------------------------------- quiet groups
    #
    # An idle group runs no timers at all (CockroachDB's quiescence). A group whose every
    # replica holds, has flushed and has committed the same log has nothing to do until
    # something happens (a replica whose node is down is left out: it gets what it lacks
    # when its link connects again). Its leader stops ticking and its followers stop their
    # election timers; the node's heartbeat manager keeps them alive with one batched
    # message per node pair per interval, in which such a group costs only its id, and
    # watches the peers: a leader node that goes silent, or stops naming a group, wakes
    # that group's followers; a follower node that goes silent wakes the groups it follows
    # (actors/services/heartbeats.py). Any input wakes a group too. Waking brings in what
    # the node heard meanwhile (`wake`), so that the lease and the check-quorum rules see
    # the contacts the node had, not the last ones the core saw. Only timers stop: every
    # rule that decides anything runs as before once the group wakes, so quiescence can
    # delay an election, never make an unsafe one.

    def can_quiesce(self) -> bool:
        """Whether nothing is left for timers to do: everything is replicated, flushed and
        committed everywhere this node can tell, and no change or transfer is under way."""
        dirty = self.log.dirty_offset
        if self.persisted_offset != dirty or self.commit_offset != dirty:
            return False
        if self.leading is not None:
            return self.leading.settled()
        return (
            self.role in (Role.FOLLOWER, Role.LEARNER)
            and self.leader_id is not None
            # Its leader spoke for this group lately (not only for others on its node).
            and self.election.leader_recent(self.now)
            and self.following.settled(dirty)
        )

    def note_contacts(self, contacts: Mapping[int, float]) -> None:
        """A leader learns when the node last heard from each peer: quiet followers send
        no replies of their own, and must not look gone to the check-quorum rule."""
        self.tracker.note_contacts(contacts)

    def quiesce(self) -> None:
        """The node stops running this group's timers until something happens (it
        checked `can_quiesce`): its heartbeats stand for the group's meanwhile."""
        self.quiet = True

    def wake(self, now: float, contacts: Mapping[int, float]) -> None:
        """Leave the quiet state with what the node heard meanwhile: `contacts` are the
        last times each peer node answered, and the last time the leader's node named
        this group (actors/services/heartbeats.py)."""
        self.quiet = False
        self.now = now
        if self.leading is not None:
            self.note_contacts(contacts)
            self.leading.wake(now)
        elif self.leader_id is not None:
            election = self.election
            election.leader_heard_meanwhile(contacts.get(self.leader_id, -math.inf))
            # The timer runs again from the last contact, and not in the past: followers
            # woken together by a silent leader still campaign at random times.
            since = max(election.last_leader_contact_s, now - self.settings.election_timeout_min_s)
            self._reset_election_deadline(since)

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
