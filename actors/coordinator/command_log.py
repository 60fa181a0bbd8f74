"""An internal topic's partition as a replicated state machine, as the replica leading it
sees it: the state applied from the partition's committed commands, the appends of new
ones, and now and then a snapshot of the whole state (the partition's log is compacted to
its last committed one: LogConfig.compact_to_snapshots). `__groups` (consumer groups,
actors/coordinator/coordination.py) and `__transactions` (actors/coordinator/txn_coordination.py)
are two.

A leader applies the partition up to its commit offset before it answers anything (its
term's barrier committed first, so nothing a former leader committed is missed), and
proposes commands decided on that state; each command's outcome (None, or why it changed
nothing) goes back to the call that proposed it once applied."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgpack
import structlog
import trio

from quorumlog.actors.cluster.leader_calls import ask_node, leader_of
from quorumlog.actors.replica.commands import (
    PassBack,
    Submitted,
    append_command,
    committed,
    committed_batches,
    not_leader,
    submit_command,
)
from quorumlog.actors.replica.mailbox import Pending
from quorumlog.actors.replica.outcomes import Outcomes
from quorumlog.actors.replica.read_index import term_committed
from quorumlog.log.batch import BatchType
from quorumlog.log.records import offset_records
from quorumlog.transport.messages import ErrorCode, ErrorReply, Message

if TYPE_CHECKING:
    from quorumlog.actors.cluster.member import ClusterMember
    from quorumlog.actors.replica.actor import ReplicaActor

logger = structlog.get_logger("quorumlog.coordinator")

# A snapshot of a partition's state after this many commands, or this long after the first
# command since the last one. The environment variable QUORUMLOG_GROUPS_SNAPSHOT_EVERY sets
# another count, for tests and benchmarks (0: never).
SNAPSHOT_EVERY = int(os.environ.get("QUORUMLOG_GROUPS_SNAPSHOT_EVERY", "10000"))
SNAPSHOT_AFTER_S = 60.0
PENDING_PRUNE = 1024  # submitted commands remembered before the answered ones are dropped
L = TypeVar("L", bound="CommandLog")


class State(Protocol):
    """A pure state machine of commands (consumers/state.py, transactions/state.py)."""

    whole: bool  # False while applying a log that starts after offset 0, to its first snapshot

    def apply(self, command: Any, offset: int) -> str | None: ...


@dataclass(frozen=True)
class Machine:
    """What a command log needs of its state machine."""

    new_state: Callable[[bool], State]  # an empty state; whole, unless the log starts later
    from_wire: Callable[[Any], Any]  # a command from its msgpack form (CommandError if bad)
    to_wire: Callable[[Any], Any]
    snapshot_of: Callable[[Any], Any]  # the Snapshot command of a state
    is_snapshot: Callable[[Any], bool]
    errors: tuple[type[Exception], ...]  # what from_wire raises on a malformed command


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


class CommandLog:
    """One partition of an internal topic as its replica here applies it."""

    def __init__(self, replica: ReplicaActor, partition: int, machine: Machine):
        self.replica = replica
        self.partition = partition
        self.machine = machine
        self.state: Any = machine.new_state(True)
        self.next_offset = 0  # the next offset of the partition to apply
        self.term = -1  # the term in which this leader took over
        self._results = Outcomes()  # why a command did nothing, for the call that proposed it
        self._proposed_from = 0  # commands before it were not proposed by this leader
        self.gate = AppendGate()
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
            self.state = self.machine.new_state(start == 0)
            self.next_offset = start
        for header, batch in committed_batches(self.replica, self.next_offset):
            if header.batch_type is not BatchType.DATA:
                continue
            for at, record in offset_records(batch, header):
                self._apply(record.value, at)
        self.next_offset = commit + 1

    def _apply(self, value: bytes, offset: int) -> None:
        machine = self.machine
        try:
            command = machine.from_wire(msgpack.unpackb(value, raw=False))
        except (*machine.errors, ValueError, msgpack.UnpackException) as exc:
            logger.error("bad_command", partition=self.partition, offset=offset, error=str(exc))
            return
        why = self.state.apply(command, offset)
        self.since_snapshot = 0 if machine.is_snapshot(command) else self.since_snapshot + 1
        if offset >= self._proposed_from:
            self._results.put(offset, why)

    def take_over(self, now: float) -> None:
        """This replica leads in a new term: what it proposes from now on is answered."""
        view = self.replica.view
        self.term = view.term
        self._proposed_from = view.commit_offset + 1

    def is_current(self) -> bool:
        """Led here and applied up to this term."""
        view = self.replica.view
        return view.settled and view.term == self.term

    def outcomes_kept(self) -> int:
        return len(self._results)

    async def propose(self, command: Any) -> str | None:
        """Append with acks=quorum; once applied, why it did nothing (or None)."""
        return await self.outcome(await self.submit(command))

    async def submit(self, command: Any) -> Submitted:
        """Put a command in the partition's mailbox, after every one submitted before it;
        `outcome` waits for it. The next may be decided meanwhile (queue mode's leases)."""
        value = msgpack.packb(self.machine.to_wire(command), use_bin_type=True)
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
            value = msgpack.packb(
                self.machine.to_wire(self.machine.snapshot_of(self.state)), use_bin_type=True
            )
            offset = await append_command(self.replica, value, snapshot=True)
            self.catch_up()
        logger.info("state_snapshot", partition=self.partition, offset=offset, bytes=len(value))


async def led(
    node: ClusterMember,
    topic: str,
    partition: int,
    logs: dict[int, L],
    make: Callable[[ReplicaActor, int], L],
) -> L:
    """The command log of a partition of `topic` this node leads, caught up with its term;
    PassBack with the leader to ask otherwise. `logs` keeps them (`make` a new one)."""
    replica = node.replica(topic, partition)
    if replica is None:
        leader = node.controller_actor.leader_hint(topic, partition)
        raise PassBack(
            ErrorReply(
                ErrorCode.NOT_LEADER,
                f"node {node.id} holds no replica of {topic}/{partition}",
                leader,
                node.address_of(leader),
            )
        )
    c = logs.get(partition)
    if c is None or c.replica is not replica:  # new, or its task was restarted
        c = logs[partition] = make(replica, partition)
    term = replica.view.term
    if not await term_committed(replica):
        raise not_leader(replica)
    c.catch_up()
    if c.term != term:
        c.take_over(trio.current_time())
    return c


async def ask_leader(
    node: ClusterMember,
    topic: str,
    partition: int,
    request: Message,
    here: Callable[[Any], Awaitable[Message]],
) -> Message | None:
    """`request` answered by the leader of a partition of `topic`: by `here` if this node
    leads it, else by the node taken for its leader."""
    replica = node.replica(topic, partition)
    if replica is not None and replica.view.is_leader:
        return await here(request)
    return await ask_node(node, leader_of(node, (topic, partition), replica), request)
