"""Queue mode's reads: the records a coordinator leases, read from their partition's leader.

A lease is decided under its group's lock, and reading from the partition's leader there
made every member's call wait for the reads of the calls before it. So the coordinator
reads ahead (`ReadAhead`, per group and partition): the data batches after the group's
next fresh offset, up to READ_AHEAD_BYTES, refilled in the background once a lease took
half of them; a lease takes its fresh records from memory and reads under the lock only
when the read-ahead does not hold where it starts (the first call, after a redelivery
jumped, after a failover). Records are not decoded: a data batch's offsets are its records'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quorumlog.actors.cluster.leader_calls import ask_partition_leader
from quorumlog.consumers.assignment import TopicPartition
from quorumlog.log.batch import BatchType, parse_header, split_batches
from quorumlog.log.records import RawRecord, offset_records
from quorumlog.transport.messages import ReadReply, ReadRequest

if TYPE_CHECKING:
    from quorumlog.actors.coordinator.coordinator import Coordinator

READ_BYTES = 1024 * 1024
READ_AHEAD_BYTES = 4 * 1024 * 1024


class ReadAhead:
    """The data batches of one partition from `start` to `end`, as read from its leader:
    committed, so never changed."""

    def __init__(self, tp: TopicPartition):
        self.tp = tp
        self.start = self.end = 0
        self._bases: list[int] = []
        self._blobs: dict[int, bytes] = {}
        self.bytes = 0
        self.filling = False
        self._version = 0  # bumped by a start elsewhere: a fill under way drops its read

    def covers(self, offset: int) -> bool:
        return self.start <= offset < self.end

    def read_under_lock(self, offset: int, blobs: dict[int, bytes], end: int) -> None:
        """What a read under the lock found from `offset` up to `end`: it continues what is
        held, or starts it again elsewhere (a fill under way then drops what it reads)."""
        if not self.start <= offset <= self.end:
            self._version += 1
            self.start, self.end = offset, offset
            self._bases, self._blobs, self.bytes = [], {}, 0
        self._extend(blobs, end)

    def _extend(self, blobs: dict[int, bytes], end: int) -> None:
        for base in sorted(blobs):
            if not self._bases or base > self._bases[-1]:
                self._bases.append(base)
                self._blobs[base] = blobs[base]
                self.bytes += len(blobs[base])
        self.end = max(self.end, end)

    def take(self, first: int, wanted: int, below: int) -> tuple[dict[int, bytes], list[int]]:
        """Up to `wanted` record offsets from `first` on, below `below`, and the batches
        holding them; drops what lies before `first`."""
        self._drop_before(first)
        blobs: dict[int, bytes] = {}
        offsets: list[int] = []
        for base in self._bases:
            if base >= below or len(offsets) >= wanted:
                break
            blob = self._blobs[base]
            taken = range(max(base, first), min(_last(blob), below - 1) + 1)
            taken = taken[: wanted - len(offsets)]
            if taken:
                blobs[base] = blob
                offsets += taken
        return blobs, offsets

    def _drop_before(self, offset: int) -> None:
        cut = 0
        while cut < len(self._bases) and _last(self._blobs[self._bases[cut]]) < offset:
            self.bytes -= len(self._blobs.pop(self._bases[cut]))
            cut += 1
        del self._bases[:cut]
        self.start = max(self.start, offset)

    def wants_more(self) -> bool:
        return not self.filling and self.bytes < READ_AHEAD_BYTES // 2

    async def fill(self, co: Coordinator) -> None:
        """Read on from `end` until READ_AHEAD_BYTES are held or the partition ends."""
        self.filling = True
        version = self._version
        try:
            while self.bytes < READ_AHEAD_BYTES:
                offset = self.end
                reply = await _read(co, self.tp, offset)
                if version != self._version or not reply.batches:
                    return  # started again elsewhere, or the partition's end
                self._extend(*_data_batches(reply.batches, offset))
        finally:
            self.filling = False


async def read_batches(
    co: Coordinator, tp: TopicPartition, offset: int, max_records: int, below: int
) -> tuple[dict[int, bytes], int]:
    """The data batches holding the first `max_records` records from `offset` on, below
    offset `below`, by base offset, and the offset the reads reached; no record is decoded
    (a data batch's offsets are its records')."""
    out: dict[int, bytes] = {}
    count = 0
    while offset < below and count < max_records:
        reply = await _read(co, tp, offset)
        if not reply.batches:
            break
        for header, batch in split_batches(reply.batches):
            if count >= max_records or header.base_offset >= below:
                return out, offset
            if header.batch_type is BatchType.DATA and header.last_offset >= offset:
                out[header.base_offset] = bytes(batch)
                count += min(header.last_offset, below - 1) + 1 - max(offset, header.base_offset)
            offset = max(offset, header.last_offset + 1)
    return out, offset


async def _read(co: Coordinator, tp: TopicPartition, offset: int) -> ReadReply:
    return await ask_partition_leader(
        co.node, tp, ReadRequest(offset, READ_BYTES, *tp, leader_only=True), ReadReply
    )


def _data_batches(data: bytes, offset: int) -> tuple[dict[int, bytes], int]:
    """The data batches of a read from `offset`, and the offset it reached."""
    out = {}
    for header, batch in split_batches(data):
        if header.batch_type is BatchType.DATA and header.last_offset >= offset:
            out[header.base_offset] = bytes(batch)
        offset = max(offset, header.last_offset + 1)
    return out, offset


def holds(blobs: dict[int, bytes], offset: int) -> bool:
    return any(base <= offset <= _last(blob) for base, blob in blobs.items())


def offsets_in(blobs: dict[int, bytes], offset: int, max_records: int, below: int) -> list[int]:
    """The first `max_records` record offsets the batches hold from `offset`, below `below`."""
    out: list[int] = []
    for base, blob in sorted(blobs.items()):
        first, last = max(base, offset), min(_last(blob), below - 1)
        out += range(first, last + 1)
    return out[:max_records]


async def records_at(co: Coordinator, tp: TopicPartition, offset: int) -> list[RawRecord]:
    """The record at `offset`, decoded (for the dead-letter topic)."""
    out = []
    blobs, _ = await read_batches(co, tp, offset, 1, offset + 1)
    for blob in blobs.values():
        header = parse_header(blob)
        out += [r for at, r in offset_records(blob, header) if at == offset]
    return out


def _last(blob: bytes) -> int:
    return parse_header(blob).last_offset
