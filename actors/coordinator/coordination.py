"""One `__groups` partition as the coordinator leading it sees it: its groups' state,
applied from the partition's committed commands, the members' sessions (soft state no log
holds), and the appends of new commands, snapshots among them (actors/coordinator/coordinator.py
answers the calls)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgpack
import structlog
import trio

from quorumlog.actors.coordinator.queue_reads import ReadAhead
from quorumlog.actors.replica.commands import (
    Submitted,
    append_command,
    committed,
    committed_batches,
    submit_command,
)
from quorumlog.actors.replica.mailbox import Pending
from quorumlog.actors.replica.outcomes import Outcomes
from quorumlog.consumers.assignment import TopicPartition
from quorumlog.consumers.state import (
    Command,
    CommandError,
    Group,
    GroupError,
    GroupsState,
    Snapshot,
    from_wire,
    snapshot_of,
    to_wire,
)
from quorumlog.log.batch import BatchType
from quorumlog.log.records import offset_records

if TYPE_CHECKING:
    from quorumlog.actors.replica.actor import ReplicaActor

logger = structlog.get_logger("quorumlog.coordinator")

# Members heartbeat every tenth of their session timeout, at most this long apart: a
# partition freed by a member leaving reaches its next owner within one interval.
HEARTBEAT_INTERVAL_S_MAX = 0.5
HEARTBEAT_INTERVAL_S_MIN = 0.05
# Queue mode: a lease given before this coordinator took over runs this long from then,
# unless its holder said otherwise since.
LEASE_S_DEFAULT = 30.0
MEMBER_ID_CHARS_MAX = 200
# A snapshot of a `__groups` partition's state after this many commands, or this long after
# the first command since the last one. The environment variable
# QUORUMLOG_GROUPS_SNAPSHOT_EVERY sets another count, for tests and benchmarks (0: never).
SNAPSHOT_EVERY = int(os.environ.get("QUORUMLOG_GROUPS_SNAPSHOT_EVERY", "10000"))
SNAPSHOT_AFTER_S = 60.0
PENDING_PRUNE = 1024  # submitted commands remembered before the answered ones are dropped


class NotMember(Exception):
    """The caller is not (or no longer) a member of the group: it must rejoin."""


class AppendGate:
    """Commands are submitted together, each appended in the order submitted; a snapshot
    waits until every command submitted before it is committed (or failed) and applied,
    and holds new ones back until it is appended itself, so that it is the state every
    command before it built."""

    def __init__(self) -> None:
        self._open = trio.Event()
        self._open.set()
        self._entering = 0  # admitted, not yet in the group's mailbox
        self._entered = trio.Event()
        self._pending: list[Pending] = []  # in the mailbox, perhaps not yet committed

    async def admit(self) -> None:
        while not self._open.is_set():
            await self._open.wait()
        self._entering += 1

    def submitted(self, submitted: Submitted | None) -> None:
        """What `submit_command` gave (None: it failed) for an admitted command."""
        self._entering -= 1
        if self._entering == 0:
            self._entered.set()
        if isinstance(submitted, Pending):
            if len(self._pending) >= PENDING_PRUNE:
                self._pending = [p for p in self._pending if not p.done]
            self._pending.append(submitted)

    @contextlib.asynccontextmanager
    async def alone(self) -> AsyncIterator[None]:
        while not self._open.is_set():
            await self._open.wait()
        self._open = trio.Event()
        try:
            while self._entering:
                self._entered = trio.Event()
                await self._entered.wait()
            pending, self._pending = self._pending, []
            for p in pending:
                with contextlib.suppress(Exception):
                    await p.wait()
            yield
        finally:
            self._open.set()


@dataclass(slots=True)
class Leasing:
    """Queue mode, one group and partition: the offsets of the leases submitted and not
    yet applied, and the first fresh offset after them, so that the next lease is decided
    before they commit without handing out the same record twice."""

    offsets: set[int]
    next: int


@dataclass(slots=True)
class Session:
    last_seen: float
    timeout_s: float
    # The partitions the member last said it consumes; None: not heard from since this
    # coordinator took over, so it may still consume anything it was given before.
    owned: frozenset[TopicPartition] | None
    lease_timeout_s: float = 30.0  # queue mode: as the member's calls say (LEASE_S_DEFAULT)


class Coordination:
    """One `__groups` partition as its replica here applies it, and the sessions of its
    groups' members while that replica leads."""

    def __init__(self, replica: ReplicaActor, partition: int):
        self.replica = replica
        self.partition = partition
        self.state = GroupsState()
        self.next_offset = 0  # the next offset of the partition to apply
        self.term = -1  # the term in which the sessions were set up
        self.sessions: dict[str, dict[str, Session]] = {}  # group -> member -> session
        self.locks: dict[str, trio.Lock] = {}  # group -> one membership change at a time
        self.rotation = 0  # queue mode: the partition a lease call looks at first
        # queue mode: (group, topic partition, offset) -> when its lease runs out
        self.lease_deadlines: dict[tuple[str, TopicPartition, int], float] = {}
        # queue mode: leases submitted and not yet applied (the window learns them then)
        self.leasing: dict[tuple[str, TopicPartition], Leasing] = {}
        self.read_ahead: dict[tuple[str, TopicPartition], ReadAhead] = {}
        self._results = Outcomes()  # why a command did nothing, for the call that proposed it
        self._proposed_from = 0  # commands before it were not proposed by this leader
        self.gate = AppendGate()
        self.counting = trio.Lock()  # actors/coordinator/offsets_upgrade.py, once
        self.since_snapshot = 0  # commands applied since the last snapshot
        self.first_since_snapshot_s = 0.0  # when the first of them was proposed

    def catch_up(self) -> None:
        commit = self.replica.view.commit_offset
        if commit < self.next_offset:
            return
        start = self.replica.log.log_start_offset
        if self.next_offset < start:
            # The log was compacted past what this replica applied (or it starts again
            # at its leader's start): apply it from its start, up to its first snapshot.
            self.state = GroupsState(whole=start == 0)
            self.next_offset = start
        for header, batch in committed_batches(self.replica, self.next_offset):
            if header.batch_type is not BatchType.DATA:
                continue
            for at, record in offset_records(batch, header):
                self._apply(record.value, at)
        self.next_offset = commit + 1

    def _apply(self, value: bytes, offset: int) -> None:
        try:
            command = from_wire(msgpack.unpackb(value, raw=False))
        except (CommandError, ValueError, msgpack.UnpackException) as exc:
            logger.error("bad_group_command", offset=offset, error=str(exc))
            return
        why = self.state.apply(command, offset)
        self.since_snapshot = 0 if isinstance(command, Snapshot) else self.since_snapshot + 1
        if offset >= self._proposed_from:
            self._results.put(offset, why)

    def take_over(self, now: float) -> None:
        """This replica leads in a new term: every member gets a fresh session."""
        view = self.replica.view
        self.term = view.term
        self._proposed_from = view.commit_offset + 1
        self.leasing = {}
        self.read_ahead = {}
        self.sessions = {
            name: {m: Session(now, ms / 1000, None) for m, ms in group.members.items()}
            for name, group in self.state.groups.items()
        }

    def is_current(self) -> bool:
        """Led here, applied up to this term, its offsets counted as records."""
        view = self.replica.view
        return view.settled and view.term == self.term and self.state.records

    def outcomes_kept(self) -> int:
        return len(self._results)

    async def propose(self, command: Command) -> str | None:
        """Append with acks=quorum; once applied, why it did nothing (or None)."""
        return await self.outcome(await self.submit(command))

    async def submit(self, command: Command) -> Submitted:
        """Put a command in the partition's mailbox, after every one submitted before it;
        `outcome` waits for it. The next may be decided meanwhile (queue mode's leases)."""
        value = msgpack.packb(to_wire(command), use_bin_type=True)
        if self.since_snapshot == 0:
            self.first_since_snapshot_s = trio.current_time()
        await self.gate.admit()
        submitted = None
        try:
            submitted = await submit_command(self.replica, value)
        finally:
            self.gate.submitted(submitted)
        return submitted

    async def outcome(self, submitted: Submitted) -> str | None:
        """Once a submitted command is committed and applied: why it did nothing, or None."""
        offset = await committed(submitted)
        self.catch_up()  # committed now: apply it here before answering
        return self._results.take(offset)

    async def snapshot_if_due(self, now: float) -> None:
        """Append a snapshot of the whole state once enough commands came since the last
        one (none while the state is not whole: nothing to compact to yet)."""
        due = self.since_snapshot >= SNAPSHOT_EVERY or (
            self.since_snapshot and now - self.first_since_snapshot_s >= SNAPSHOT_AFTER_S
        )
        if not due or not self.state.whole or SNAPSHOT_EVERY == 0:
            return
        async with self.gate.alone():
            self.catch_up()
            value = msgpack.packb(to_wire(snapshot_of(self.state)), use_bin_type=True)
            offset = await append_command(self.replica, value, snapshot=True)
            self.catch_up()
        logger.info(
            "groups_snapshot",
            partition=self.partition,
            offset=offset,
            groups=len(self.state.groups),
            bytes=len(value),
        )

    def note_leased(
        self, name: str, member: str, tp: TopicPartition, offsets: tuple[int, ...]
    ) -> None:
        """Queue mode: when the leases just given run out."""
        session = self.sessions.get(name, {}).get(member)
        deadline = trio.current_time() + (session.lease_timeout_s if session else LEASE_S_DEFAULT)
        for o in offsets:
            self.lease_deadlines[(name, tp, o)] = deadline

    def lock(self, name: str) -> trio.Lock:
        return self.locks.setdefault(name, trio.Lock())

    def free_for(self, group: Group, member: str, tp: TopicPartition) -> bool:
        """Whether `member` may consume `tp` now: no other member consumes it, as far as
        this coordinator knows."""
        sessions = self.sessions.get(group.name, {})
        for other in group.members:
            if other == member:
                continue
            session = sessions.get(other)
            if session is None or session.owned is None or tp in session.owned:
                return False
        return True


def member_id(args: dict) -> str:
    member = args["member"]
    if not isinstance(member, str) or not 1 <= len(member) <= MEMBER_ID_CHARS_MAX:
        raise GroupError(f"a member id has 1-{MEMBER_ID_CHARS_MAX} characters")
    return member


def membership(c: Coordination, name: str, member: str) -> tuple[Group, Session]:
    """The group and the session of one of its members; NotMember if it is not one."""
    group = c.state.groups.get(name)
    session = c.sessions.get(name, {}).get(member)
    if group is None or member not in group.members or session is None:
        raise NotMember(f"member {member!r} is not in the group {name!r}: rejoin")
    return group, session


def heartbeat_interval_s(session_timeout_s: float) -> float:
    return max(HEARTBEAT_INTERVAL_S_MIN, min(HEARTBEAT_INTERVAL_S_MAX, session_timeout_s / 10))
