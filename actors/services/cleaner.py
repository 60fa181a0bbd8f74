"""The node's log cleaner: compacts the logs of its compacted topics' replicas (log/cleaner.py),
one pass at a time, the dirtiest log first, never on the append path.

A pass is planned and adopted in its replica's task (between rounds, as retention is) and
runs in between on a thread of its own, reading and writing no faster than
`[log] cleaner_io_bytes_per_s`: appends keep the event loop and the fsync thread.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
import trio

from quorumlog.log.batch import BatchError
from quorumlog.log.cleaner import CleanerPass, PassResult
from quorumlog.log.files import StorageError
from quorumlog.log.wal import Log

logger = structlog.get_logger("quorumlog.cleaner")

CLEAN_CHECK_S = 5.0
RunSync = Callable[..., Awaitable[Any]]


@dataclass(slots=True)
class CleanerStats:
    """What the cleaner did since the node started (metrics, `status`)."""

    passes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    bytes_reclaimed: int = 0
    records_removed: int = 0


class Throttle:
    """Holds a pass's thread to a rate of bytes per second (its own clock: it sleeps on the
    cleaner's thread, never on the event loop)."""

    def __init__(self, bytes_per_s: int):
        self.bytes_per_s = bytes_per_s
        self._started = time.monotonic()
        self._bytes = 0

    def __call__(self, size: int) -> None:
        self._bytes += size
        ahead_s = self._bytes / self.bytes_per_s - (time.monotonic() - self._started)
        if ahead_s > 0.01:
            time.sleep(ahead_s)


async def in_cleaner_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """A node's passes: on a thread of trio's, left to finish on its own when the node
    stops (what it wrote is in the side folder, which the log's next open deletes)."""
    return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)


class CompactedReplica(Protocol):
    """What the cleaner needs of a replica (actors/replica/actor.py): its log, to see
    whether it compacts and how dirty it is, and the two requests of a pass."""

    group_id: int
    log: Log

    async def plan_clean(self, now_ms: int) -> CleanerPass | None: ...

    async def adopt_cleaned(self, result: PassResult, now_ms: int) -> None: ...


class LogCleaner:
    def __init__(
        self,
        replicas: Callable[[], Iterable[CompactedReplica]],
        run_sync: RunSync,
        wall_clock_ms: Callable[[], int],
        throttled: bool = True,
    ):
        self._replicas = replicas
        self._run_sync = run_sync
        self._wall_clock_ms = wall_clock_ms
        self._throttled = throttled  # a simulation's passes run inline, unthrottled
        self.stats = CleanerStats()
        self._started = False

    def start(self, nursery: trio.Nursery) -> None:
        """Run in `nursery` from now on (the node starts it once one of its replicas
        compacts); a second start does nothing."""
        if not self._started:
            self._started = True
            nursery.start_soon(self._run)

    async def _run(self) -> None:
        while True:
            await trio.sleep(CLEAN_CHECK_S)
            await self.clean_all()

    async def clean_all(self) -> None:
        """A pass over each compacted log that is due one, the dirtiest first."""
        compacting = [g for g in self._replicas() if g.log.config.compacts]
        compacting.sort(key=lambda g: -g.log.dirty_share())
        for group in compacting:
            await self.clean(group)

    async def clean(self, group: CompactedReplica) -> PassResult | None:
        now_ms = self._wall_clock_ms()
        planned = await group.plan_clean(now_ms)
        if planned is None:
            return None
        if self._throttled:
            planned.throttle = Throttle(group.log.config.cleaner_io_bytes_per_s)
        try:
            result = await self._run_sync(planned.run)
        except (StorageError, BatchError, OSError, ValueError) as exc:
            # A segment retention dropped meanwhile (its file closed), or damage that the
            # log's readers will report: the next pass starts over.
            logger.warning("clean_pass_failed", group=group.group_id, error=str(exc))
            return None
        await group.adopt_cleaned(result, now_ms)
        stats = self.stats
        stats.passes += 1
        stats.bytes_read += result.bytes_read
        stats.bytes_written += result.bytes_written
        stats.bytes_reclaimed += result.bytes_reclaimed
        stats.records_removed += result.records_removed
        if result.records_removed:
            logger.info(
                "log_cleaned",
                group=group.group_id,
                end=result.end,
                reclaimed=result.bytes_reclaimed,
                removed=result.records_removed,
            )
        return result
