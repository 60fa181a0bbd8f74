"""The flusher: one per node, fsyncs the log in the background with group commit.

Whatever is appended while an fsync runs is covered by the next one. The node asks for a
flush after each round of inputs; an urgent request (quorum appends waiting, a follower
that owes a reply, any follower: its flushed offset is what commits) starts at once, a
lazy one waits up to `interval_s` for company. Each flush that moves the flushed offset
is reported to the node's mailbox. A failed fsync raises: fatal to the node (rule 8).
"""

from __future__ import annotations

import trio

from actors.stats import NodeStats
from log.wal import Log


class Flushed:
    """Mailbox message: the log's flushed offset moved."""

    __slots__ = ()


FLUSHED = Flushed()


class Flusher:
    def __init__(
        self, log: Log, mailbox: trio.MemorySendChannel, interval_s: float, stats: NodeStats
    ):
        self._log = log
        self._stats = stats
        self._mailbox = mailbox
        self._interval_s = interval_s
        self._wanted = trio.Event()
        self._urgent = trio.Event()

    def request(self, urgent: bool) -> None:
        self._wanted.set()
        if urgent:
            self._urgent.set()

    async def run(self) -> None:
        log = self._log
        while True:
            await self._wanted.wait()
            if not self._urgent.is_set():
                with trio.move_on_after(self._interval_s):
                    await self._urgent.wait()
            self._wanted = trio.Event()
            self._urgent = trio.Event()
            if log.flushed_offset >= log.dirty_offset:
                continue
            before = log.flushed_offset
            started = trio.current_time()
            flushed = await log.flush()
            self._stats.fsync_latency_s.observe(trio.current_time() - started)
            if flushed != before:
                await self._mailbox.send(FLUSHED)
