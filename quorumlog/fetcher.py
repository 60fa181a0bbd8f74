"""Reading ahead for a consumer: one task per partition it consumes fetches records into a
bounded buffer while the application handles the last ones and commits, so `poll` is
usually answered from memory and every partition is read at once (as Kafka's fetcher does).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import trio

from quorumlog.aclient import AsyncClient
from quorumlog.errors import (
    CallTimeoutError,
    OffsetOutOfRangeError,
    QuorumLogError,
    UnreachableError,
)
from quorumlog.protocol import Record

PREFETCH_BYTES = 2 * 1024 * 1024  # per partition, read ahead of `poll`
FETCH_RECORDS = 2000
IDLE_PAUSE_S_MIN = 0.005  # at the end of a partition: wait, doubling up to the max
IDLE_PAUSE_S_MAX = 0.05


class PartitionFetch:
    """One partition a consumer consumes: `position` is the next offset `take` returns,
    `fetched_to` the next one to read from the cluster."""

    def __init__(self, topic: str, partition: int, position: int):
        self.topic = topic
        self.partition = partition
        self.position = position
        self.fetched_to = position
        self.scope = trio.CancelScope()
        self._buffer: deque[Record] = deque()
        self._bytes = 0
        self._room = trio.Event()

    def take(self, max_records: int) -> list[Record]:
        out = []
        while self._buffer and len(out) < max_records:
            record = self._buffer.popleft()
            self._bytes -= len(record.value)
            out.append(record)
        if out:
            self.position = out[-1].offset + 1
        if not self._buffer:  # past any control batches read over too
            self.position = max(self.position, self.fetched_to)
        if self._bytes < PREFETCH_BYTES:
            self._room.set()
        return out

    async def run(
        self,
        client: AsyncClient,
        arrived: Callable[[], None],
        failed: Callable[[QuorumLogError], None],
    ) -> None:
        """Fetch until cancelled (`scope`); `arrived()` after each batch of records,
        `failed(error)` on a definite error (the topic was deleted, say)."""
        pause = IDLE_PAUSE_S_MIN
        with self.scope:
            while True:
                while self._bytes >= PREFETCH_BYTES:
                    self._room = trio.Event()
                    await self._room.wait()
                try:
                    records, self.fetched_to = await client.read_on(
                        self.fetched_to, FETCH_RECORDS, self.topic, self.partition
                    )
                except OffsetOutOfRangeError:  # retention dropped them: go on from the start
                    self.fetched_to = await client.start_offset(self.topic, self.partition)
                    continue
                except (CallTimeoutError, UnreachableError):
                    continue  # a failover: the client found no leader in time; again
                except QuorumLogError as exc:
                    failed(exc)
                    return
                if records:
                    self._buffer.extend(records)
                    self._bytes += sum(len(r.value) for r in records)
                    arrived()
                    pause = IDLE_PAUSE_S_MIN
                else:
                    await trio.sleep(pause)
                    pause = min(pause * 2, IDLE_PAUSE_S_MAX)
