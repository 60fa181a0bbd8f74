"""The leader's cache of the batches it appended last, and what a read returns."""

from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import NamedTuple

NODE_BYTES_MAX = 64 * 1024 * 1024  # every leader's cache of one node together


class LogChunk(NamedTuple):
    """Whole batches read from the log, and the offset of the last record they hold."""

    data: bytes
    last_offset: int


class OffsetOutOfRangeError(LookupError):
    """An offset before the log start (or otherwise not held by this log)."""


def read_upto(from_offset: int, upto_offset: int | None, log_start: int, dirty: int) -> int:
    """The last offset a read from `from_offset` may return: `upto_offset`, at most the
    log's end (below `from_offset`: nothing to read). Raises before the log start."""
    if from_offset < log_start:
        raise OffsetOutOfRangeError(f"offset {from_offset} is before the log start {log_start}")
    return dirty if upto_offset is None else min(upto_offset, dirty)


class TailCache:
    """The batches the leader appended last, kept in memory so that replicating them to the
    followers costs no read from the page cache (Redpanda's batch cache, in small).

    Invariant: entries are contiguous and end at the log's dirty offset, or it is empty.
    """

    BYTES_MAX = 4 * 1024 * 1024

    def __init__(self, bytes_max: float = BYTES_MAX, budget: TailBudget | None = None) -> None:
        self._bytes_max = bytes_max  # math.inf: keeps everything (a Raft core's unstable tail)
        self._budget = budget
        self._bytes = 0
        self.clear()

    @property
    def bytes(self) -> int:
        return self._bytes

    def add(self, base_offset: int, last_offset: int, batch: bytes | memoryview) -> None:
        before = self._bytes
        self._bases.append(base_offset)
        self._entries.append((last_offset, batch))
        self._bytes += len(batch)
        while self._bytes > self._bytes_max and self._first < len(self._entries) - 1:
            self._bytes -= len(self._entries[self._first][1])
            self._entries[self._first] = (self._entries[self._first][0], b"")  # let it go now
            self._first += 1
        if self._first > 64 and self._first * 2 > len(self._entries):
            del self._bases[: self._first], self._entries[: self._first]
            self._first = 0
        if self._budget is not None:
            self._budget.appended(self, self._bytes - before)

    def read(self, from_offset: int, bytes_max: int, upto_offset: int) -> LogChunk | None:
        """Whole batches from the one holding `from_offset`, or None if it is not cached."""
        first = self._first
        if first >= len(self._bases) or from_offset < self._bases[first]:
            return None
        i = bisect.bisect_right(self._bases, from_offset, lo=first) - 1
        parts: list[bytes] = []
        size = 0
        last = from_offset - 1
        for last_offset, batch in self._entries[i:]:
            if last_offset > upto_offset or (parts and size + len(batch) > bytes_max):
                break
            parts.append(batch)
            size += len(batch)
            last = last_offset
        return LogChunk(b"".join(parts), last)

    def drop_before(self, offset: int) -> None:
        """Let go of the batches that end before `offset` (the cleaner rewrote them)."""
        before = self._bytes
        while self._first < len(self._entries) and self._entries[self._first][0] < offset:
            self._bytes -= len(self._entries[self._first][1])
            self._entries[self._first] = (self._entries[self._first][0], b"")
            self._first += 1
        if self._budget is not None:
            self._budget.released(self, before - self._bytes)

    def truncate(self, from_offset: int) -> None:
        before = self._bytes
        while len(self._bases) > self._first and self._bases[-1] >= from_offset:
            self._bases.pop()
            self._bytes -= len(self._entries.pop()[1])
        if self._budget is not None:
            self._budget.released(self, before - self._bytes)

    def clear(self) -> None:
        """Hold nothing (also what closing the log does: the node's budget forgets it)."""
        held = self._bytes
        self._bases: list[int] = []
        self._entries: list[tuple[int, bytes]] = []  # (last offset, batch)
        self._first = 0  # entries before this index were evicted
        self._bytes = 0
        if self._budget is not None and held:
            self._budget.released(self, held)


class TailBudget:
    """What the tail caches of one node's logs hold together, at most `bytes_max`: beyond
    it the caches appended to least recently are emptied, whole, until it fits (a log
    written long ago has no follower left to serve from it; its readers read the file).
    Without it a node leading a thousand written partitions could keep 4 MiB for each."""

    def __init__(self, bytes_max: int = NODE_BYTES_MAX) -> None:
        self.bytes_max = bytes_max
        self.bytes = 0
        self._holding: OrderedDict[int, TailCache] = OrderedDict()  # least recent first

    def appended(self, cache: TailCache, grew: int) -> None:
        self.bytes += grew
        self._holding[id(cache)] = cache
        self._holding.move_to_end(id(cache))
        while self.bytes > self.bytes_max and len(self._holding) > 1:
            _, oldest = self._holding.popitem(last=False)
            oldest.clear()

    def released(self, cache: TailCache, shrank: int) -> None:
        self.bytes -= shrank
        if not cache.bytes:
            self._holding.pop(id(cache), None)

    @property
    def caches(self) -> int:
        """The caches holding anything."""
        return len(self._holding)
