"""Transactions in one log: their markers, which are open, and which were aborted.

A transactional producer's batches carry the TRANSACTIONAL flag and a producer id that is
its transactional id's number and epoch (`id << 16 | epoch`); the transaction ends in this
partition with a marker the leader writes on its coordinator's word: a data batch of one
offset flagged TXN_MARKER that holds no record a reader sees (log/batch.py). A marker says
commit or abort, the coordinator's epoch, and where the transaction's first batch in this
log is (`first`, -1 when it wrote nothing here; the leader takes it from its log's open
transactions), so that each abort is known from its marker alone: a segment's aborted
transactions, and what the log's uncommitted tail ends, need nothing from before.

Each segment keeps what a read_committed reader and the last stable offset need
(Kafka's producer state and `.txnindex` in one): the transactions open where the segment
starts and where it ends, and the aborts whose markers it holds. Segments chain: one
starts with what the one before it left open. Everything is in positions; readers
translate to record offsets (log/offsets.py).
"""

from __future__ import annotations

from typing import NamedTuple

import msgpack

from quorumlog.log.batch import (
    HEADER_BYTES,
    MAX_TIMESTAMP,
    TRANSACTIONAL,
    TXN_MARKER,
    TYPES_CHECKED,
    BatchError,
    BatchHeader,
    build_batch,
)

EPOCH_BITS = 16


def producer_id(number: int, epoch: int) -> int:
    """A quorumlog producer id of a Kafka producer's id (`number`) and epoch."""
    return (number << EPOCH_BITS) | (epoch & 0xFFFF)


def number_and_epoch(producer_id: int) -> tuple[int, int]:
    """The Kafka producer id and epoch of a quorumlog producer id (`producer_id`'s inverse)."""
    return producer_id >> EPOCH_BITS, producer_id & 0xFFFF


def txn_producer(producer_id: int) -> int:
    """The transactional producer a batch's producer id names, whatever its epoch: a marker
    written after a newer epoch fenced the producer ends the transaction its older epoch
    began (Kafka keys its producer state by the id alone)."""
    return producer_id >> EPOCH_BITS


class TxnMarker(NamedTuple):
    commit: bool
    coordinator_epoch: int
    first: int  # the position of the transaction's first batch here, -1: none


def make_marker_batch(
    producer_id: int, marker: TxnMarker, timestamp_ms: int, term: int = 0
) -> bytes:
    """A marker for the producer's transaction (placed by the leader's append)."""
    return build_batch(
        msgpack.packb(list(marker)),
        record_count=1,
        producer_id=producer_id,
        term=term,
        timestamp_ms=timestamp_ms,
        flags=TXN_MARKER | MAX_TIMESTAMP | TYPES_CHECKED,  # it holds no record to check
    )


def marker_of(batch: bytes | memoryview, header: BatchHeader) -> TxnMarker:
    """The marker a TXN_MARKER batch holds (BatchError if it is not one)."""
    payload = memoryview(batch)[HEADER_BYTES : HEADER_BYTES + header.payload_bytes]
    try:
        commit, coordinator_epoch, first = msgpack.unpackb(payload)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise BatchError(f"undecodable transaction marker: {exc}") from None
    if type(commit) is not bool or type(coordinator_epoch) is not int or type(first) is not int:
        raise BatchError("a transaction marker is [commit, coordinator epoch, first position]")
    return TxnMarker(commit, coordinator_epoch, first)


class AbortedTxn(NamedTuple):
    producer: int  # txn_producer of its batches
    first: int  # position of its first batch in this log
    marker: int  # position of its abort marker


class SegmentTxns:
    """One segment's transactions: open where it starts (`open_at_start`) and where it ends
    so far (`open`), each as producer -> position of its first batch, and the aborts whose
    markers it holds, in log order."""

    __slots__ = ("aborted", "involved", "open", "open_at_start")

    def __init__(self, open_at_start: dict[int, int] | None = None) -> None:
        self.open_at_start = dict(open_at_start or {})
        self.open = dict(self.open_at_start)
        self.aborted: list[AbortedTxn] = []
        # Whether a transaction touches the segment (else a truncation recounts nothing).
        self.involved = bool(self.open_at_start)

    def note(self, header: BatchHeader, batch: bytes | memoryview) -> AbortedTxn | None:
        """Account for a batch of the segment, in log order; returns the transaction it
        closes (as an AbortedTxn, whatever the outcome) if it is a marker."""
        self.involved = True
        if header.flags & TRANSACTIONAL:
            self.open.setdefault(txn_producer(header.producer_id), header.base_offset)
        elif header.flags & TXN_MARKER:
            producer = txn_producer(header.producer_id)
            self.open.pop(producer, None)
            marker = marker_of(batch, header)
            if marker.first < 0:
                return None  # it wrote nothing here
            first = marker.first
            closed = AbortedTxn(producer, first, header.base_offset)
            if not marker.commit:
                self.aborted.append(closed)
            return closed
        return None

    def restart(self) -> None:
        """Forget what was counted (the segment is counted again from its start)."""
        self.open = dict(self.open_at_start)
        self.aborted = []
        self.involved = bool(self.open_at_start)

    # The segment's index file holds them (log/segment.py).

    def to_bytes(self) -> bytes:
        return msgpack.packb(
            [
                list(self.open_at_start.items()),
                list(self.open.items()),
                [list(a) for a in self.aborted],
                self.involved,
            ]
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> SegmentTxns | None:
        """The state `to_bytes` wrote, or None if it does not decode."""
        try:
            at_start, at_end, aborted, involved = msgpack.unpackb(data)
            txns = cls({int(p): int(f) for p, f in at_start})
            txns.open = {int(p): int(f) for p, f in at_end}
            txns.aborted = [AbortedTxn(int(p), int(f), int(m)) for p, f, m in aborted]
            txns.involved = bool(involved)
        except (ValueError, TypeError, msgpack.UnpackException):
            return None
        return txns
