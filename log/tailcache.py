"""The leader's cache of the batches it appended last, and what a read returns."""

from __future__ import annotations

import bisect
from typing import NamedTuple


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

    def __init__(self, bytes_max: float = BYTES_MAX) -> None:
        self._bytes_max = bytes_max  # math.inf: keeps everything (a Raft core's unstable tail)
        self.clear()

    def add(self, base_offset: int, last_offset: int, batch: bytes | memoryview) -> None:
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

    def truncate(self, from_offset: int) -> None:
        while len(self._bases) > self._first and self._bases[-1] >= from_offset:
            self._bases.pop()
            self._bytes -= len(self._entries.pop()[1])

    def clear(self) -> None:
        self._bases: list[int] = []
        self._entries: list[tuple[int, bytes]] = []  # (last offset, batch)
        self._first = 0  # entries before this index were evicted
        self._bytes = 0
