"""Reading ahead for a consumer: one task per partition it consumes fetches records into a
buffer while the application handles the last ones and commits, so `poll` is usually
answered from memory and every partition is read at once (as Kafka's fetcher does).

What all the partitions hold read ahead together is bounded (`ReadAheadBudget`, Kafka's
fetch.max.bytes, librdkafka's queued.max.messages.kbytes): each partition may fill its
share of the budget, and a read asks for no more than the room left, so one consumer of a
thousand partitions holds what it was given, not a thousand read-aheads. The bound is
exceeded only by a batch larger than the room it was read into (a read returns at least
one whole batch, so that a partition always moves on).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import trio

from quorumlog.client.aclient import AsyncClient
from quorumlog.client.errors import (
    CallTimeoutError,
    OffsetOutOfRangeError,
    QuorumLogError,
    UnreachableError,
)
from quorumlog.client.protocol import READ_BYTES_MAX, Record

BUFFER_BYTES = 64 * 1024 * 1024  # the default read-ahead of one consumer, all partitions
SHARE_BYTES_MIN = 64 * 1024  # a partition's share never drops below this
# What a Record read ahead costs in memory besides its bytes: the Record, its ints and its
# place in the buffer (measured with tracemalloc: 262 bytes for a 101-byte value).
RECORD_OVERHEAD_BYTES = 250
FETCH_RECORDS = 2000
IDLE_PAUSE_S_MIN = 0.005  # at the end of a partition: wait, doubling up to the max
IDLE_PAUSE_S_MAX = 0.05


def footprint(record: Record) -> int:
    """What `record` is counted as in the budget: its bytes and the objects holding them."""
    size = RECORD_OVERHEAD_BYTES + len(record.value or b"") + len(record.key or b"")
    if record.headers:
        size += sum(len(name) + len(value or b"") for name, value in record.headers)
    return size


class ReadAheadBudget:
    """The bytes one consumer may hold read ahead, shared fairly by its partitions."""

    def __init__(self, total_bytes: int) -> None:
        if total_bytes < SHARE_BYTES_MIN:
            raise ValueError(f"buffer_bytes must be at least {SHARE_BYTES_MIN}")
        self.total_bytes = total_bytes
        self.used = 0  # buffered, plus the room of reads on their way
        self.partitions = 1
        self._freed = trio.Event()

    @property
    def share(self) -> int:
        return max(SHARE_BYTES_MIN, self.total_bytes // max(1, self.partitions))

    async def take_room(self, wanted: int) -> int:
        """Up to `wanted` bytes of room (at least the smallest share), waiting for some."""
        while self.total_bytes - self.used < SHARE_BYTES_MIN:
            self._freed = trio.Event()
            await self._freed.wait()
        room = min(wanted, self.total_bytes - self.used)
        self.used += room
        return room

    def hold(self, size: int) -> None:
        self.used += size

    def give_back(self, size: int) -> None:
        self.used -= size
        self._freed.set()


class PartitionFetch:
    """One partition a consumer consumes: `position` is the next offset `take` returns,
    `fetched_to` the next one to read from the cluster."""

    def __init__(self, topic: str, partition: int, position: int, budget: ReadAheadBudget):
        self.topic = topic
        self.partition = partition
        self.position = position
        self.fetched_to = position
        self.scope = trio.CancelScope()
        self._budget = budget
        self._buffer: deque[tuple[Record, int]] = deque()  # with each one's footprint
        self._bytes = 0
        self._room = trio.Event()

    def take(self, max_records: int) -> list[Record]:
        out = []
        freed = 0
        while self._buffer and len(out) < max_records:
            record, size = self._buffer.popleft()
            freed += size
            out.append(record)
        if out:
            self.position = out[-1].offset + 1
            self._bytes -= freed
            self._budget.give_back(freed)
        if not self._buffer:  # past any control batches read over too
            self.position = max(self.position, self.fetched_to)
        if self._bytes < self._budget.share:
            self._room.set()
        return out

    def drop(self) -> None:
        """Stop holding what was read ahead (the partition was revoked)."""
        self._budget.give_back(self._bytes)
        self._bytes = 0
        self._buffer.clear()

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
                while self._bytes >= self._budget.share:
                    self._room = trio.Event()
                    await self._room.wait()
                wanted = min(READ_BYTES_MAX, self._budget.share - self._bytes)
                room = await self._budget.take_room(wanted)
                try:
                    records, self.fetched_to = await client.read_on(
                        self.fetched_to, FETCH_RECORDS, self.topic, self.partition, max_bytes=room
                    )
                except OffsetOutOfRangeError:  # retention dropped them: go on from the start
                    self.fetched_to = await client.start_offset(self.topic, self.partition)
                    continue
                except (CallTimeoutError, UnreachableError):
                    continue  # a failover: the client found no leader in time; again
                except QuorumLogError as exc:
                    failed(exc)
                    return
                finally:
                    self._budget.give_back(room)
                if records:
                    sizes = [footprint(r) for r in records]
                    self._buffer.extend(zip(records, sizes, strict=True))
                    self._bytes += sum(sizes)
                    self._budget.hold(sum(sizes))
                    arrived()
                    pause = IDLE_PAUSE_S_MIN
                else:
                    await trio.sleep(pause)
                    pause = min(pause * 2, IDLE_PAUSE_S_MAX)
        if self.scope.cancel_called:
            # Dropped (revoked): a read that ended as it was cancelled still buffered
            # what it got; give that room back too, or the budget would shrink for good.
            self.drop()
