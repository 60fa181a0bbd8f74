"""The flusher: one per node, fsyncs every group's log in the background with group
commit across partitions.

A group asks for a flush after each round of inputs that left its log ahead of its
flushed offset. Each partition has its own log; with the node's fsync threads the files of a
pass are synced by that many threads at once, so that the file system's journal commits
them together (100 partitions each appending: a pass of 25 ms one file after another,
about 5 ms with 16 threads; docs/decisions/storage.md, "One log per partition"). An urgent request (quorum appends waiting, a follower that owes a reply,
any follower: its flushed offset is what commits) starts a pass at once; a lazy one waits
up to `interval_s` for company. One pass takes every group that asked, syncs all their
files in one job on the node's storage thread (whatever is appended meanwhile goes in the
next pass), then tells each group whose flushed offset moved how far its log is durable
(`ReplicaActor.persisted`: the group's core takes that as an input, it never asks the log). A
failed fsync raises: fatal to the node (storage rule 8).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import trio

from quorumlog.actors.services.disk_health import DiskHealth
from quorumlog.actors.services.stats import NodeStats
from quorumlog.log.flushjob import FlushJob
from quorumlog.log.wal import Log, RunSync


class Flushed(Protocol):
    """A replica as the flusher sees it (a `ReplicaActor` is one)."""

    group_id: int
    log: Log

    def persisted(self, offset: int, truncations: int) -> None:
        """Its log is durable up to `offset`, as of its `truncations`."""


class Flusher:
    def __init__(
        self,
        run_sync: RunSync,
        interval_s: float,
        stats: NodeStats,
        disk_health: DiskHealth,
        pool: ThreadPoolExecutor | None = None,
    ):
        self._run_sync = run_sync
        self._disk_health = disk_health
        self._pool = pool  # the node's fsync threads (None: one file after another)
        self._interval_s = interval_s
        self._stats = stats
        self._asked: dict[int, Flushed] = {}  # by group id, in the order they asked
        self._wanted = trio.Event()
        self._urgent = trio.Event()
        self._pass = trio.Lock()  # held while a pass works on the groups' logs

    def request(self, group: Flushed, urgent: bool) -> None:
        self._asked[group.group_id] = group
        self._wanted.set()
        if urgent:
            self._urgent.set()

    async def forget(self, group_id: int) -> None:
        """Before a group's log closes: no pass is flushing it when this returns."""
        async with self._pass:
            self._asked.pop(group_id, None)

    async def run(self) -> None:
        while True:
            await self._wanted.wait()
            if not self._urgent.is_set():
                with trio.move_on_after(self._interval_s):
                    await self._urgent.wait()
            self._wanted = trio.Event()
            self._urgent = trio.Event()
            async with self._pass:
                await self._flush_pass()

    def _run_all(self, jobs: list[FlushJob]) -> None:
        """Blocking, on the node's storage thread."""
        if self._pool is None or len(jobs) == 1:
            for job in jobs:
                job.run()
        else:
            list(self._pool.map(FlushJob.run, jobs))  # raises the first job's error

    async def _flush_pass(self) -> None:
        asked, self._asked = list(self._asked.values()), {}
        work = [(g, g.log.flushed_offset, g.log.begin_flush()) for g in asked if g.log.unflushed]
        if not work:
            return
        jobs = [job for _, _, job in work]
        started = trio.current_time()
        self._disk_health.pass_started(started)
        try:
            await self._run_sync(self._run_all, jobs)
        except BaseException:
            for group, _, job in work:
                group.log.end_flush(job, durable=False)
            raise
        ended = trio.current_time()
        self._stats.fsync_latency_s.observe(ended - started)
        self._disk_health.pass_ended(ended - started, ended)
        for group, before, job in work:
            flushed = group.log.end_flush(job, durable=True)
            # A copy of older records moved in counts too: the group reports it.
            if flushed != before or job.splice is not None:
                group.persisted(flushed, job.truncations)
