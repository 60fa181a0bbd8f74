"""What a group actor's mailbox carries, and how an answer gets back to whoever asked.

Every input of a group is a mailbox item, local ones too ("flushed" comes from the
flusher, admin calls come as `CoreCall`), so that one task owns the core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from quorumlog.actors.stats import NodeStats
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
    """Mailbox message: a quiet group must run its timers again (actors/heartbeats.py)."""

    __slots__ = ()


WAKE_UP = WakeUp()


@dataclass(frozen=True, slots=True)
class PeerConnected:
    """Mailbox message: this node's link to `peer` connected (transport/network.py)."""

    peer: int


@dataclass(frozen=True, slots=True)
class PeerInput:
    sender: int
    message: Message
    processed: trio.Event | None = None


@dataclass(frozen=True, slots=True)
class ClientAppend:
    proposal: Proposal  # batches checked by the handler
    acks: Acks
    reply: Pending | Answered | None


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
