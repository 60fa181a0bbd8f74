"""The metadata writer: one per node, saves the groups' consensus metadata (term, vote,
configuration) in passes, with group commit across partitions.

A group must make its term and vote durable before it sends anything that depends on them
(storage rule 1): a campaign, a vote granted, a higher term seen. Each save is a whole file
written atomically (two fsyncs). One after another on the node's storage thread, beside
the flusher's passes, the saves of an election across a third of 1,000 groups (225 ms for
333 here) held each vote reply until after the candidate's timer had run out again
(docs/decisions/raft.md, "Elections with many partitions"). Here every group that asks while a
pass runs waits for the next one, and a pass saves all of them at once, on the storage
thread, with the node's fsync threads (72 ms for 333).
"""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import ThreadPoolExecutor

import trio

from quorumlog.log.metadata import ConsensusMetadata
from quorumlog.log.metadata_store import MetadataStore
from quorumlog.log.wal import RunSync


class _Pass:
    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None


class MetadataWriter:
    def __init__(self, run_sync: RunSync, pool: ThreadPoolExecutor | None):
        self._run_sync = run_sync
        self._pool = pool
        self._queued: dict[str, tuple[MetadataStore, ConsensusMetadata]] = {}  # by file
        self._next = _Pass()
        self._wanted = trio.Event()
        self._running = False

    async def save(self, store: MetadataStore, meta: ConsensusMetadata) -> None:
        """Return once `meta` is durable; raises the storage error of a failed save."""
        if not self._running:  # the node is stopping (or not started): save it alone
            await self._run_sync(store.save, meta)
            return
        entry = (store, meta)
        self._queued[store.path] = entry
        this = self._next
        self._wanted.set()
        try:
            await this.done.wait()
        except BaseException:
            # Cancelled (its group stops, its partition is being deleted): a save no pass
            # took yet is dropped, or it would write the folder again after its removal.
            if self._queued.get(store.path) is entry:
                del self._queued[store.path]
            raise
        if this.error is not None:
            raise this.error

    async def run(self) -> None:
        self._running = True
        try:
            while True:
                await self._wanted.wait()
                self._wanted = trio.Event()
                saves, self._queued = list(self._queued.values()), {}
                this, self._next = self._next, _Pass()
                try:
                    await self._run_sync(self._save_all, saves)
                except Exception as exc:  # each waiter raises it: its group stops the node
                    this.error = exc
                this.done.set()
        finally:
            self._running = False

    def _save_all(self, saves: list[tuple[MetadataStore, ConsensusMetadata]]) -> None:
        """Blocking, on the node's storage thread; returns (or raises the first error) once
        every save has ended, so that nothing still writes when the node closes."""
        if self._pool is None or len(saves) == 1:
            for store, meta in saves:
                store.save(meta)
            return
        futures = [self._pool.submit(store.save, meta) for store, meta in saves]
        concurrent.futures.wait(futures)
        for future in futures:
            future.result()
