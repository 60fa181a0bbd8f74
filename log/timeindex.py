"""A segment's time index (Kafka's `.timeindex`): which record is the first stamped at or
after a time.

Records' timestamps may go backwards in offset order (a producer's own clock, CreateTime),
so the index is keyed by the running maximum, as Kafka's is: a sparse list of entries
(largest timestamp so far, batch offset), one per entry of the segment's offset index.
Every record before an entry's batch, and in it, is stamped at most the entry's time; the
running maximum never decreases, so a lookup bisects for the last entry stamped before the
time asked and reads forward from its batch. A batch's largest timestamp comes from its
header (flag MAX_TIMESTAMP or LOG_APPEND_TIME, or a Kafka batch's, found on append); a
batch made before headers held it is read for it. The index is derived: it is saved in the
segment's index file (log/segment.py) and rebuilt by the scan that rebuilds the rest.
"""

from __future__ import annotations

import bisect
from array import array
from typing import NamedTuple

from quorumlog.log.batch import (
    LOG_APPEND_TIME,
    MAX_TIMESTAMP,
    BatchError,
    BatchHeader,
    BatchType,
    Compression,
    split_batches,
)
from quorumlog.log.records import batch_records, offset_records

NO_TIMESTAMP = -1  # the largest timestamp of what holds no data record


class TimedOffset(NamedTuple):
    """A record's offset and timestamp."""

    offset: int
    timestamp_ms: int


def batch_max_timestamp(header: BatchHeader, batch: bytes | memoryview) -> int:
    """The largest timestamp of a batch's records (NO_TIMESTAMP for a control batch)."""
    if header.batch_type is not BatchType.DATA:
        return NO_TIMESTAMP
    if header.flags & (MAX_TIMESTAMP | LOG_APPEND_TIME) or header.compression is Compression.KAFKA:
        return header.timestamp_ms
    try:  # made before headers held it (an older client): its records say
        return max(r.timestamp_ms for r in batch_records(batch, header))
    except BatchError:
        # Never stops the log: its payload is checked where it arrives, and a reader of
        # it fails there. The header's time is the best guess left.
        return header.timestamp_ms


class TimeIndex:
    """The entries of one segment: timestamps never decrease, offsets increase."""

    __slots__ = ("offsets", "timestamps")

    def __init__(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, max_timestamp_ms: int, offset: int) -> None:
        """Every record up to the batch at `offset`, included, is stamped at most
        `max_timestamp_ms`, which is at least the last entry's."""
        assert not self.offsets or (
            offset > self.offsets[-1] and max_timestamp_ms >= self.timestamps[-1]
        )
        self.timestamps.append(max_timestamp_ms)
        self.offsets.append(offset)

    def scan_from(self, timestamp_ms: int) -> int | None:
        """Offset of a batch from which a forward read finds the first record stamped at
        or after `timestamp_ms`; None: from the segment's start."""
        i = bisect.bisect_left(self.timestamps, timestamp_ms)
        return self.offsets[i - 1] if i else None

    def truncate(self, offset: int) -> None:
        """Drop the entries of batches from `offset` on."""
        keep = bisect.bisect_left(self.offsets, offset)
        del self.timestamps[keep:]
        del self.offsets[keep:]

    def to_bytes(self) -> bytes:
        return self.timestamps.tobytes() + self.offsets.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> TimeIndex | None:
        """The index saved by `to_bytes`, or None if it breaks an invariant."""
        index = cls()
        half = len(data) // 2
        index.timestamps = array("q", data[:half])
        index.offsets = array("q", data[half:])
        ordered = all(
            index.offsets[i] < index.offsets[i + 1]
            and index.timestamps[i] <= index.timestamps[i + 1]
            for i in range(len(index.offsets) - 1)
        )
        return index if ordered else None


def first_at_or_after(data: bytes, timestamp_ms: int, from_offset: int) -> TimedOffset | None:
    """The first data record at or after `from_offset` stamped at or after `timestamp_ms`
    in whole batches `data`; batches whose largest timestamp is earlier are not decoded."""
    for header, batch in split_batches(data):
        if header.batch_type is not BatchType.DATA:
            continue  # a barrier or a configuration: no record, and not indexed as one
        if header.last_offset < from_offset or batch_max_timestamp(header, batch) < timestamp_ms:
            continue
        for at, record in offset_records(batch, header):
            if at >= from_offset and record.timestamp_ms >= timestamp_ms:
                return TimedOffset(at, record.timestamp_ms)
    return None
