"""A call's leader gone silent: have the other nodes elected another?

A leader that is paused (SIGSTOP, a stalled VM, a long pause of its process) keeps its
connections open and answers nothing. The other nodes elect a new leader within an
election timeout, but a client waiting for its attempt's `ATTEMPT_S` would learn of it only
then. So an attempt that has waited `WATCH_AFTER_S` for a partition's leader asks the
other brokers who leads the partition (`LeaderRequest`). The answer with the newest term
wins; if it names another node in a newer term than any answer naming the one we wait
on, the attempt ends and the call goes to that node at once (an idempotent retry: nothing
is written twice). A leader that is merely slow is still named by the others, and kept.

`newer_leader` is the rule, plain code; `LeaderWatch` runs it for the clients (one task
for every waiting call).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable
from contextlib import suppress
from dataclasses import dataclass

import trio

from quorumlog.client.errors import QuorumLogError
from quorumlog.transport.errors import ConnectionClosed
from quorumlog.transport.messages import LeaderReply, LeaderRequest, Message

# Nobody can have replaced a leader before the minimum election timeout (300 ms).
WATCH_AFTER_S = 0.3
WATCH_EVERY_S = 0.1
ASK_TIMEOUT_S = 0.25


class Terms:
    """The newest term in which some node named each (route, address) as leader."""

    def __init__(self) -> None:
        self._terms: dict[tuple[Hashable, str], int] = {}

    def newer_leader(self, route: Hashable, address: str, replies: Iterable[Message]) -> str | None:
        """The leader to go to instead of `address`, from the other nodes' answers."""
        answers = [r for r in replies if isinstance(r, LeaderReply) and r.term >= 0]
        key = (route, address)
        known = self._terms.get(key, -1)
        for reply in answers:
            if reply.leader_address == address:
                known = max(known, reply.term)
        self._terms[key] = known
        named = [r for r in answers if r.leader_address is not None]
        newest = max(named, key=lambda r: r.term, default=None)
        if newest is None or newest.leader_address == address or newest.term <= known:
            return None
        return newest.leader_address


@dataclass(eq=False)
class Waiting:
    """An attempt waiting on `address`, the leader of `route` as far as the call knows."""

    route: tuple[str, int]
    address: str
    scope: trio.CancelScope
    since: float
    moved_to: str | None = None  # set when the watch ended the attempt


class LeaderWatch:
    def __init__(
        self, brokers: list[str], ask: Callable[[str, Message], Awaitable[Message]]
    ) -> None:
        self._brokers = brokers
        self._ask = ask
        self._waiting: set[Waiting] = set()
        self._terms = Terms()

    def waiting(self, route: tuple[str, int], address: str, scope: trio.CancelScope) -> Waiting:
        entry = Waiting(route, address, scope, trio.current_time())
        self._waiting.add(entry)
        return entry

    def done(self, entry: Waiting) -> None:
        self._waiting.discard(entry)

    async def run(self) -> None:
        while True:
            await trio.sleep(WATCH_EVERY_S)
            now = trio.current_time()
            silent = {(w.route, w.address) for w in self._waiting if now - w.since >= WATCH_AFTER_S}
            if silent:
                async with trio.open_nursery() as nursery:
                    for route, address in silent:
                        nursery.start_soon(self._check, route, address)

    async def _check(self, route: tuple[str, int], address: str) -> None:
        replies: list[Message] = []

        async def ask(broker: str) -> None:
            with trio.move_on_after(ASK_TIMEOUT_S), suppress(QuorumLogError, ConnectionClosed):
                replies.append(await self._ask(broker, LeaderRequest(*route)))

        async with trio.open_nursery() as nursery:
            for broker in self._brokers:
                if broker != address:
                    nursery.start_soon(ask, broker)
        moved_to = self._terms.newer_leader(route, address, replies)
        if moved_to is None:
            return
        for entry in [w for w in self._waiting if (w.route, w.address) == (route, address)]:
            entry.moved_to = moved_to
            entry.scope.cancel()
