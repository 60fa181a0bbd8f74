"""A group actor: one Raft group replica on this node, the task that owns its core.

The main loop reads the group's mailbox: peer messages, client appends, wake-ups, calls.
After each round of inputs it proposes the round's client appends together (one write, one
AppendEntries per follower, one flush for all of them), takes the core's `Ready`: applies
its writes to the log (the core itself never writes it: raft/raft_log.py), persists term
and vote if they changed (before anything is sent: storage rule 1), answers the appends
whose durability was reached, asks the flusher for a flush and sends the messages. Client
appends come without a task each: the transport hands them over (`take_append`) and the
main loop answers them through the connection's reply path. Timers are the core's deadlines, waited
for on trio's clock. A storage error anywhere raises out of `run` (fail-stop).
"""

from __future__ import annotations

import contextlib
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import replace

import structlog
import trio

from quorumlog.actors.replica.appends import AppendIntake
from quorumlog.actors.replica.campaigns import CampaignSlots, CampaignTurn
from quorumlog.actors.replica.handle import ReplicaHandle
from quorumlog.actors.replica.mailbox import (
    TIMER_FIRED,
    WAKE_UP,
    ClientAppend,
    CoreCall,
    PeerConnected,
    PeerInput,
    Pending,
    QuorumWaiter,
    RoundTimer,
    TimerFired,
    WakeUp,
)
from quorumlog.actors.replica.read_index import (
    end_offset,
    offset_for_time,
    read_committed,
    unsettled,
)
from quorumlog.actors.replica.retention import keep_retention
from quorumlog.actors.replica.stamper import Stamper
from quorumlog.actors.replica.txn_markers import write_marker
from quorumlog.actors.services.disk_health import DiskHealth
from quorumlog.actors.services.flusher import Flusher
from quorumlog.actors.services.heartbeats import HeartbeatManager
from quorumlog.actors.services.metadata_writer import MetadataWriter
from quorumlog.actors.services.stats import NodeStats
from quorumlog.actors.services.storage import GroupStorage
from quorumlog.controller.state import CONTROLLER_GROUP
from quorumlog.log.cleaner import CleanerPass, PassResult
from quorumlog.log.config import LogConfig
from quorumlog.membership.config import Configuration
from quorumlog.raft.conditions import NodeConditions
from quorumlog.raft.core import RaftCore
from quorumlog.raft.messages import Heartbeat
from quorumlog.raft.producers import StaleSequenceError
from quorumlog.raft.settings import RaftSettings
from quorumlog.transport.messages import (
    Acks,
    AppendReply,
    AppendRequest,
    EndOffsetRequest,
    ErrorCode,
    ErrorReply,
    Message,
    OffsetForTimeRequest,
    OffsetMapReply,
    OffsetMapRequest,
    PartitionCall,
    PositionReply,
    PositionRequest,
    ReadRequest,
    TxnMarkerRequest,
)
from quorumlog.transport.network import NodeTransport

logger = structlog.get_logger("quorumlog.group")

MAILBOX_MAX = 1024
# Inputs handled per round before the outputs go out: bounds latency, lets sends coalesce.
ROUND_INPUTS_MAX = 256


class ReplicaActor(ReplicaHandle, AppendIntake):
    def __init__(
        self,
        node_id: int,
        storage: GroupStorage,
        *,
        settings: RaftSettings,
        rng: random.Random,
        stats: NodeStats,
        flusher: Flusher,
        metadata_writer: MetadataWriter,
        campaign_slots: CampaignSlots,
        heartbeats: HeartbeatManager,
        disk_health: DiskHealth,
        on_changed: Callable[[ReplicaActor], None],
        wall_clock_ms: Callable[[], int],
        peer_alive: Callable[[int], bool],
        node_stopping: Callable[[], bool],
    ):
        self.node_id = node_id
        self.group_id = group_id = storage.group_id
        self.storage = storage
        self.settings = settings
        self.stats = stats
        self._on_changed = on_changed
        self.peer_alive = peer_alive  # whether this node's link to a peer is up
        self._node_stopping = node_stopping
        self.log = storage.log
        self.core = RaftCore(
            node_id,
            group_id,
            storage.log,
            storage.meta,
            settings,
            rng,
            trio.current_time(),
            witnesses_from_commit=group_id != CONTROLLER_GROUP,
        )
        ReplicaHandle.__init__(self, self.core)
        self.core.set_log_floor(storage.log_floor)
        self._inbox, self._mailbox = trio.open_memory_channel[object](MAILBOX_MAX)
        self._timer = RoundTimer(self._timer_fired)  # the core's next deadline
        self._flusher = flusher
        self._metadata_writer = metadata_writer
        self._turn = CampaignTurn(
            campaign_slots, group_id, self.wake_up, exempt=group_id == CONTROLLER_GROUP
        )
        self._heartbeats = heartbeats
        self._disk_health = disk_health
        self._led = False  # registered with the heartbeats as this group's leader
        # What the flusher last reported durable: (offset, the log's truncations then).
        self._persisted: tuple[int, int] | None = None
        self._waiters: deque[QuorumWaiter] = deque()
        self.read_waiters: dict[int, Pending] = {}  # ReadIndex requests, by context (read_index.py)
        # Appends that arrived during a leadership transfer, or while a new leader waits
        # for its clock to pass the last stamp in its log: they wait, they do not fail.
        self._held: deque[ClientAppend] = deque()
        self._wall_clock_ms = wall_clock_ms
        self._stamper = self._stamper_for(storage.log.config)
        self._nursery: trio.Nursery | None = None
        self.retaining = False  # actors/replica/retention.py runs for this group
        self._hold_until_s = -math.inf  # the end of a commit-wait (actors/replica/stamper.py)
        self.transport: NodeTransport | None = None
        # What the node last heard of this group (its peer links and leader table follow).
        self._config_seen: Configuration | None = None
        self._leader_seen: tuple[int | None, int] | None = None
        # The replica move under way here (actors/cluster/admin_calls.py): its controller revision and
        # scope, cancelled when a move of a later revision arrives.
        self.move: tuple[int, trio.CancelScope] | None = None
        self._logger = logger.bind(node_id=node_id, group=group_id)

    # ------------------------------------------------------------------- running

    async def run(self, transport: NodeTransport, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled; raises StorageError on a disk fault (fail-stop)."""
        self._logger.info(
            "group_started",
            term=self.core.term,
            dirty_offset=self.log.dirty_offset,
            config=self.core.config.to_json() if self.core.config else None,
        )
        self.transport = transport
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._timer.run)
            self._keep_retention()  # a trim kept may have left segments to drop
            task_status.started(self)
            await self._main_loop()

    def reconfigure(self, config: LogConfig) -> None:
        """Its topic's settings changed (the controller's log): the log takes them, and a
        change of timestamp type holds from the next round of appends."""
        self.log.reconfigure(config)
        self._stamper = self._stamper_for(config)
        self._keep_retention()

    def trim(self, log_start: int) -> None:
        """Readers start at `log_start` now; the segments wholly before it go as they are
        committed here (the retention task: not awaited, the controller's work goes on)."""
        self.core.set_log_floor(log_start)
        self._keep_retention()

    @property
    def log_floor(self) -> int:
        """Where an operator's trim starts readers (the controller's state says; retention
        drops the segments wholly before it): reads see max(it, the log's start). The
        core keeps it: a member need not hold what precedes it."""
        return self.core.log_floor

    async def plan_clean(self, now_ms: int) -> CleanerPass | None:
        """The node's cleaner asks for the next pass over this compacted log, if one is
        due (planned in the replica's task: it reads what is committed here)."""
        return await self.in_task(lambda core: self.log.plan_clean(core.commit_offset, now_ms))

    async def adopt_cleaned(self, result: PassResult, now_ms: int) -> None:
        """A pass that ran: its segments take their places in the log (in the replica's
        task, between rounds, as retention's changes are made)."""
        await self.in_task(lambda core: self.log.adopt_cleaned(result, now_ms))

    def wall_clock_ms(self) -> int:
        """The node's wall clock (a simulation's is simulated)."""
        return self._wall_clock_ms()

    def read_start(self) -> int:
        """The first offset readers may read: the log's start or the trim's, the later."""
        return max(self.log.log_start_offset, self.log_floor)

    # Record offsets (log/offsets.py): what readers see, where the core counts positions.

    def records_before(self, position: int) -> int:
        """The record offset of a data record at `position` (the core's log: what this
        round appended counts too)."""
        return self.core.log.records_before(position)

    def last_record(self, position: int) -> int:
        """The offset of the last record at or before `position` (-1: none)."""
        return self.core.log.records_before(position + 1) - 1

    def producer_appends_uncommitted(self) -> int:
        """The idempotent appends its core holds in log order (status's `tables`)."""
        return self.core.producers.uncommitted

    def record_start(self) -> int:
        """The first record offset readers may read."""
        return self.records_before(self.read_start())

    def _stamper_for(self, config: LogConfig) -> Stamper | None:
        if config.timestamp_type != "log_append":
            return None
        return Stamper(self._wall_clock_ms, config.timestamp_wait_max_ms, self.group_id)

    def _keep_retention(self) -> None:
        """A task that applies retention and trims while the log has anything to drop (it
        ends when it has none)."""
        if self.prunes() and not self.retaining and self._nursery is not None:
            self.retaining = True
            self._nursery.start_soon(keep_retention, self)

    def prunes(self) -> bool:
        """Whether the log has retention settings, or segments wholly before a trim."""
        return not self.log.retains_all or self.log.can_drop_before(self.log_floor)

    async def _main_loop(self) -> None:
        core = self.core
        mailbox = self._mailbox
        appends: list[ClientAppend] = []
        while True:
            self._timer.set(min(self._next_deadline(), self._hold_release_s()))
            item = await mailbox.receive()
            self._observe_node()
            if core.quiet and item is not TIMER_FIRED:  # before the input: what the node heard
                core.wake(
                    trio.current_time(),
                    self._heartbeats.contacts_for(self.group_id, core.is_leader),
                )
                self._heartbeats.active(self.group_id)
            self._handle_input(item, appends)
            for _ in range(ROUND_INPUTS_MAX - 1):
                try:
                    self._handle_input(mailbox.receive_nowait(), appends)
                except trio.WouldBlock:
                    break
            now = trio.current_time()
            if core.is_leader:
                core.note_contacts(self._heartbeats.answered_by)
            if self._persisted is not None:
                # The flusher made more durable: commit may advance, waiting replies go
                # (or it moved in a copy of older records: raft/backfill.py).
                offset, truncations = self._persisted
                self._persisted = None
                if truncations != self.log.truncations:
                    offset = self.log.flushed_offset  # cut since: durable up to the cut
                core.on_persisted(offset, now)
            if appends:
                # The round's appends go to the log together (they were independent of
                # the round's other inputs: a step-down among them answers them
                # not_leader, as it should).
                self._append(appends, now)
                appends = []
            if now >= self._next_deadline() and not (
                core.campaign_due(now) and not self._turn.may_campaign()
            ):
                core.tick(now)
            core.pump()
            await self._perform()

    def _observe_node(self) -> None:
        """Tell the core what its node is like now (raft/conditions.py): before it takes
        inputs, and again after any wait."""
        core = self.core
        core.observe(
            NodeConditions(
                frozenset(n for n in core.peer_ids() if not self.peer_alive(n)),
                self._node_stopping(),
                self._disk_health.avoided(self.node_id, trio.current_time()),
            )
        )

    def _next_deadline(self) -> float:
        """When the core's timers want a tick (none while waiting for a campaign slot)."""
        return math.inf if self._turn.waiting() else self.core.next_deadline()

    def _handle_input(self, item: object, appends: list[ClientAppend]) -> None:
        core = self.core
        match item:
            case ClientAppend():
                appends.append(item)
                return
            case PeerInput(sender, message):
                core.step(sender, message, trio.current_time())
            case WakeUp() | TimerFired():
                pass  # the round takes what was persisted, runs due timers; a quiet core wakes
            case PeerConnected(peer):
                core.peer_connected(peer)
            case CoreCall():
                core.set_time(trio.current_time())
                self.run_call(item, core)
            case _:
                raise AssertionError(f"unknown mailbox item {item!r}")

    def _hold_release_s(self) -> float:
        """When held appends are to go to the log after a commit-wait (inf: none waits)."""
        waiting = self._held and self._hold_until_s > trio.current_time()
        return self._hold_until_s if waiting else math.inf

    def _append(self, appends: list[ClientAppend], now: float) -> None:
        """Propose a round's client appends; answer or queue a waiter for each."""
        core = self.core
        if core.serves_clients and core.transfer is not None:
            self._held.extend(appends)
            return
        if not core.serves_clients:
            answer = self.not_leader(core.leader_id)
            for item in appends:
                if item.reply is not None:
                    item.reply.resolve(answer)
            return
        stamp_ms = None
        if self._stamper is not None:
            stamp_ms, wait_s = self._stamper.stamp_or_wait(core.max_stamp_ms)
            if stamp_ms is None:
                self._held.extend(appends)
                self._hold_until_s = now + wait_s
                return
        results = core.propose([item.proposal for item in appends], now, stamp_ms)
        commit = core.commit_offset
        reached = None  # computed once for all answered now
        for item, result in zip(appends, results, strict=True):
            reply = item.reply
            if reply is None:
                continue
            if isinstance(result, StaleSequenceError):
                reply.resolve(ErrorReply(ErrorCode.REFUSED, str(result)))
                continue
            first, last = result
            if item.acks is Acks.QUORUM and last > commit:
                self._waiters.append(QuorumWaiter(core.term, first, last, reply, item.records))
            else:
                reached = reached or self._reached()
                reply.resolve(self._append_reply(first, last, item.records, reached))

    def _reached(self) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(commit, majority flushed, majority dirty) as positions and as the offsets of
        the last records there."""
        core = self.core
        positions = (core.commit_offset, *core.majority_offsets())
        return positions, tuple(self.last_record(p) for p in positions)

    def reached_records(self) -> tuple[int, int, int]:
        """The offsets of the last committed, majority-flushed and majority-appended
        records."""
        return self._reached()[1]

    def _append_reply(self, first: int, last: int, records: bool, reached) -> AppendReply:
        positions, last_records = reached
        if not records:
            return AppendReply(first, last, *positions)
        # One append's batches take consecutive positions, records all.
        first_record = self.records_before(first)
        return AppendReply(first_record, first_record + last - first, *last_records)

    async def _perform(self) -> None:
        core = self.core
        if self._held and core.transfer is None and trio.current_time() >= self._hold_until_s:
            held, self._held = self._held, deque()
            self._append(list(held), trio.current_time())
        ready = core.ready()  # the round's last input to the core is in
        if ready.writes is not None:
            ready.writes.apply(self.log)  # the page cache: before the core is read again
        if ready.hard_state is not None:
            await self.save_metadata()
            self._observe_node()  # what changed while it waited
        self._answer_waiters()
        for state in ready.read_states:
            if (waiting := self.read_waiters.pop(state.ctx, None)) is not None:
                waiting.resolve(state.offset)
        self._turn.round_ended(core, trio.current_time())
        log = self.log
        if log.dirty_offset > log.flushed_offset or ready.flush_urgent:
            # A follower's reply waits for its flush; a leader's, for quorum appends.
            urgent = not core.is_leader or bool(self._waiters) or ready.flush_urgent
            self._flusher.request(self, urgent)
        self._tell_heartbeats()
        self.publish(core)
        if core.config is not self._config_seen or (core.leader_id, core.term) != self._leader_seen:
            # Before the sends: a new member's link must exist for its first message.
            self._config_seen = core.config
            self._leader_seen = (core.leader_id, core.term)
            self._on_changed(self)
        transport = self.transport
        assert transport is not None
        for to, message in ready.messages:
            # Heartbeats: the node sends them batched, but for ReadIndex's. A send not
            # made: counted.
            if type(message) is Heartbeat and not message.read_ctx:
                continue
            if not transport.send_nowait(to, message):
                self.stats.messages_dropped += 1

    def _tell_heartbeats(self) -> None:
        """What the node's batched heartbeats need: the group it leads, or that this group
        went quiet (nothing to do until something happens: raft/core.py `quiesce`)."""
        core = self.core
        heartbeats = self._heartbeats
        if core.is_leader:
            heartbeats.leading(self.group_id, core.term, core.commit_offset, tuple(core.progress))
        elif self._led:
            heartbeats.not_leading(self.group_id)
        self._led = core.is_leader
        if self._waiters or self._held or not core.can_quiesce():
            return
        core.quiesce()
        if core.is_leader:
            heartbeats.quiet_leader(self.group_id)
        else:
            heartbeats.quiet_follower(self.group_id, core.leader_id)

    def _answer_waiters(self) -> None:
        core = self.core
        waiters = self._waiters
        if waiters and waiters[0].last_offset <= core.commit_offset:
            reached = self._reached()  # once for all answered in this round
            while waiters and waiters[0].last_offset <= core.commit_offset:
                w = waiters.popleft()
                w.reply.resolve(
                    self._append_reply(w.first_offset, w.last_offset, w.records, reached)
                )
        if waiters and (not core.is_leader or waiters[0].term != core.term):
            # Leadership moved: the outcome of these appends is unknown to us now.
            while waiters:
                waiters.popleft().reply.resolve(
                    ErrorReply(
                        ErrorCode.UNKNOWN,
                        "leadership changed before the append was committed: its outcome "
                        "is unknown",
                        core.leader_id,
                        self.address_of(core.leader_id),
                    )
                )

    async def save_metadata(self) -> None:
        """Persist term, vote and configuration (and, in passing, the commit offset known)."""
        core = self.core
        meta = replace(core.meta, known_commit_offset=core.commit_offset)
        await self._metadata_writer.save(self.storage.store, meta)

    def address_of(self, node_id: int | None) -> str | None:
        config = self.core.config
        return None if node_id is None or config is None else config.addresses.get(node_id)

    def not_leader(self, leader_id: int | None) -> ErrorReply:
        """Who leads, if known; never this node (a witness leading for a moment serves no
        client: it hands over, raft/witness.py)."""
        if leader_id == self.node_id:
            leader_id = None
        return ErrorReply(
            ErrorCode.NOT_LEADER,
            f"node {self.node_id} is not the leader",
            leader_id,
            self.address_of(leader_id),
        )

    def _timer_fired(self) -> None:
        with contextlib.suppress(trio.WouldBlock):  # a full mailbox: a round comes anyway
            self._inbox.send_nowait(TIMER_FIRED)

    def wake_up(self) -> None:
        """From the heartbeat manager: a quiet group must run its timers again."""
        with contextlib.suppress(trio.WouldBlock):
            self._inbox.send_nowait(WAKE_UP)

    def deliver_nowait(self, sender: int, message: Message) -> None:
        """A Raft message from the heartbeat manager; dropped if the mailbox is full (as
        the network may drop it: Raft resends)."""
        with contextlib.suppress(trio.WouldBlock):
            self._inbox.send_nowait(PeerInput(sender, message))

    def peer_connected(self, peer: int) -> None:
        """From the transport: what went to `peer` while it was unreachable can go again."""
        with contextlib.suppress(trio.WouldBlock):  # a full mailbox: the retransmit timer
            self._inbox.send_nowait(PeerConnected(peer))

    def persisted(self, offset: int, truncations: int) -> None:
        """From the flusher: this log is durable up to `offset`, as of its `truncations`."""
        self._persisted = (offset, truncations)
        self.wake_up()  # a full mailbox: a round comes anyway

    # ------------------------------------------------------------------- inputs

    async def deliver(self, sender: int, message: Message) -> None:
        """A Raft message from a peer (its answer, if any, goes back one-way too)."""
        item = PeerInput(sender, message)
        try:
            self._inbox.send_nowait(item)  # the reader passes through the scheduler enough
        except trio.WouldBlock:
            await self._inbox.send(item)
        return None

    async def answer(self, message: PartitionCall) -> Message:
        """A client's call on this partition, as the node's handler and the coordinator's
        calls on a leader (actors/cluster/leader_calls.py) both answer it."""
        match message:
            case AppendRequest():
                return await self.append(message)
            case TxnMarkerRequest():
                return await write_marker(self, message)
            case ReadRequest(offset, max_bytes, leader_only=leader_only):
                refusal = await unsettled(self) if leader_only else None
                return refusal or read_committed(self, offset, max_bytes)
            case EndOffsetRequest(linearizable, leader_only=leader_only):
                refusal = await unsettled(self) if leader_only else None
                return refusal or await end_offset(self, linearizable)
            case OffsetForTimeRequest(timestamp_ms, leader_only=leader_only):
                refusal = await unsettled(self) if leader_only else None
                return refusal or offset_for_time(self, timestamp_ms)
            case PositionRequest(offset):
                # Past the committed records: the committed end's, never a position an
                # uncommitted batch of Raft's own may move.
                end = self.view.commit_offset + 1
                return await unsettled(self) or PositionReply(
                    min(self.log.position_of(offset), end)
                )
            case OffsetMapRequest():
                return await unsettled(self) or OffsetMapReply(self.log.offset_map())

    def campaign_soon(self) -> None:
        """Before the group runs (a partition just placed with this node first): campaign
        at its first tick."""
        self.core.campaign_soon(trio.current_time())

    def replica_status(self) -> dict:
        """This replica's Raft state: role, term, offsets, configuration, followers, and
        the bytes its log holds (how far a replica being added got: actors/cluster/topic_changes.py)."""
        out = self.core.status()
        last = self.last_record
        for key in ("commit_offset", "dirty_offset", "flushed_offset"):
            out[key] = last(out[key])
        for follower in out.get("followers", {}).values():
            for key in ("match", "flushed", "dirty"):
                follower[key] = last(follower[key])
        out["size_bytes"] = self.log.size_bytes
        out["log_start_offset"] = self.record_start()
        if self.log.config.compacts:  # what its cleaner did (`topic describe`)
            last = self.log.last_clean
            out["cleaner"] = {
                "dirty_ratio": round(self.log.dirty_share(), 4),
                "last_clean_ms": None if last is None else last.at_ms,
                "bytes_reclaimed": 0 if last is None else last.bytes_reclaimed,
            }
        return out

    def under_replicated(self, now: float) -> bool:
        self._observe_node()  # a quiet leader's last round may be long past
        return self.core.under_replicated(now)

    def status(self) -> dict:
        """As `replica_status`, with the members' addresses (`status`'s command line)."""
        out = self.replica_status()
        config = self.core.config
        addresses = config.addresses if config is not None else {}
        out["members"] = {str(m): a for m, a in sorted(addresses.items())}
        return out
