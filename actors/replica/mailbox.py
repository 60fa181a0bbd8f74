"""What a group actor's mailbox carries, and how an answer gets back to whoever asked.

Every input of a group is a mailbox item, local ones too (the flusher's and the timer's
wake-ups, admin calls as `CoreCall`), so that one task owns the core.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from quorumlog.actors.services.stats import NodeStats
from quorumlog.raft.core import Proposal, RaftCore
from quorumlog.transport.messages import Acks, AppendReply, Message
from quorumlog.transport.network import Answer


class Pending:
    """A result that the group's main loop fills in for a waiting task."""

    __slots__ = ("_done", "error", "value")

    def __init__(self) -> None:
        self._done = trio.Event()
        self.value: Any = None
        self.error: Exception | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def resolve(self, value: Any) -> None:
        if not self._done.is_set():
            self.value = value
            self._done.set()

    def fail(self, error: Exception) -> None:
        if not self._done.is_set():
            self.error = error
            self._done.set()

    async def wait(self) -> Any:
        await self._done.wait()
        if self.error is not None:
            raise self.error
        return self.value


class Answered:
    """A client append's result, handed straight to the connection's reply path
    (`take_request`): no task waits for it. Counts the append in the node's stats."""

    __slots__ = ("_acks", "_answer", "_bytes", "_done", "_started", "_stats")

    def __init__(
        self, answer: Answer, stats: NodeStats, acks: Acks, size: int, started: float
    ) -> None:
        self._answer = answer
        self._stats = stats
        self._acks = acks
        self._bytes = size
        self._started = started
        self._done = False

    def resolve(self, value: Message) -> None:
        if self._done:
            return
        self._done = True
        if type(value) is AppendReply:
            elapsed = trio.current_time() - self._started
            self._stats.append_done(self._acks.name.lower(), self._bytes, elapsed)
        self._answer(value)


class WakeUp:
    """Mailbox message: a quiet group must run its timers again (actors/services/heartbeats.py)."""

    __slots__ = ()


WAKE_UP = WakeUp()


class TimerFired:
    """Mailbox message: the core's deadline passed (`RoundTimer`). Unlike WAKE_UP it does
    not wake a quiet group: one that went quiet as its deadline passed stays quiet."""

    __slots__ = ()


TIMER_FIRED = TimerFired()


class RoundTimer:
    """Wakes a group's main loop (`wake`, a TIMER_FIRED in its mailbox) when the deadline
    the loop last set passes. One cancel scope waits for the deadline, moved after every round,
    instead of one scope entered around every wait for the mailbox (about 12 us a round).
    """

    def __init__(self, wake: Callable[[], None]):
        self._wake = wake
        self._deadline = math.inf
        self._scope: trio.CancelScope | None = None

    def set(self, deadline: float) -> None:
        if deadline != self._deadline:
            self._deadline = deadline
            if self._scope is not None:
                self._scope.deadline = deadline

    async def run(self) -> None:
        while True:
            with trio.CancelScope(deadline=self._deadline) as self._scope:
                await trio.sleep_forever()
            self._deadline = math.inf  # until the loop sets the next one
            self._wake()


@dataclass(frozen=True, slots=True)
class PeerConnected:
    """Mailbox message: this node's link to `peer` connected (transport/network.py)."""

    peer: int


@dataclass(frozen=True, slots=True)
class PeerInput:
    sender: int
    message: Message


@dataclass(frozen=True, slots=True)
class ClientAppend:
    proposal: Proposal  # batches checked by the handler
    acks: Acks
    reply: Pending | Answered | None
    # Answered in record offsets (log/offsets.py), as every reader counts; the node's own
    # state machines (actors/replica/commands.py) count their logs' positions.
    records: bool = True


@dataclass(frozen=True, slots=True)
class CoreCall:
    """Run `fn(core)` in the main loop (admin calls change the core only from there)."""

    fn: Callable[[RaftCore], Any]
    reply: Pending


@dataclass(slots=True)
class QuorumWaiter:
    term: int
    first_offset: int
    last_offset: int
    reply: Pending | Answered
    records: bool  # as ClientAppend's
