"""The batch format: one byte string on disk and on the wire.

A batch is a fixed 60-byte header followed by an opaque payload. The client encodes and
compresses the payload once; nodes check the checksums, patch `base_offset` and `term`, and
never decode or recompress the payload on the replication path.

Layout (little-endian):

    off size field
    0   4    magic          b"QLB1", lets recovery find the next batch after damage
    4   4    header_crc     CRC32C of bytes 8..60 (so patching the header is cheap)
    8   8    base_offset    offset of the first record (patched by the leader)
    16  8    term           term the batch was appended in (patched by the leader)
    24  8    producer_id    idempotent producer id, -1 when none
    32  4    producer_seq   sequence of this batch for its producer, -1 when none
    36  4    record_count   the offsets [base_offset, base_offset + record_count - 1] it
                           spans: one record each, but in a COMPACTED batch some
    40  8    timestamp_ms   the largest of its records' timestamps (flag MAX_TIMESTAMP;
                           without it, when the producer made the batch), or the leader's
                           clock when it appended it (flag LOG_APPEND_TIME); retention by
                           age and the time index (log/timeindex.py) go by it
    48  1    batch_type     data | config | barrier
    49  1    compression    none | zstd | kafka (a Kafka record batch, log/kafka_batch.py)
    50  2    flags          LOG_APPEND_TIME: every record's timestamp is `timestamp_ms`;
                           TYPES_CHECKED: the maker checked every field is bytes;
                           SNAPSHOT: a state machine's whole state (a compaction point);
                           MAX_TIMESTAMP: `timestamp_ms` is the records' largest timestamp;
                           COMPACTED: the cleaner kept some of the records it spans;
                           TRANSACTIONAL: a transaction's batch; TXN_MARKER: a
                           transaction's commit or abort marker (log/transactions.py)
    52  4    payload_bytes  length of the payload
    56  4    payload_crc    CRC32C of the payload
    60  ..   payload

`header_crc` covers `payload_crc`, so together they cover every byte of the batch.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from typing import NamedTuple

from crc32c import crc32c

MAGIC = b"QLB1"
HEADER = struct.Struct("<4sIqqqiIqBBHII")
HEADER_BYTES = HEADER.size
assert HEADER_BYTES == 60

# Offsets of the fields patched or checked without unpacking the whole header.
_CRC_POS = 4
_CRC_FROM = 8
_BASE_OFFSET_TERM = struct.Struct("<qq")
_BASE_OFFSET_POS = 8

# flags: the leader stamped the batch (log/stamping.py); readers take `timestamp_ms` as every
# record's timestamp, as Kafka does for its LogAppendTime topics.
LOG_APPEND_TIME = 0x1
# flags: the batch was made by quorumlog's own encoder (0.4 on), which checks that every
# value, key and header value is bytes (or None) first; a leader checks the records of
# batches without it (an older or foreign client) before they reach the log.
TYPES_CHECKED = 0x2
# flags: a command holding a state machine's whole state (a `__groups` snapshot): in a log
# compacted to its snapshots (LogConfig.compact_to_snapshots), everything before the last
# committed one may go.
SNAPSHOT = 0x4
# flags: `timestamp_ms` is the largest of the records' own timestamps, which a time index
# can trust (every maker sets it since there is one: a Kafka batch's is what its records
# hold, found on append). A data batch made before, with neither this nor LOG_APPEND_TIME,
# holds when it was made: its records are read for their times.
MAX_TIMESTAMP = 0x8
# flags: the cleaner rewrote the batch (a compacted topic, log/cleaner.py): it still spans
# `record_count` offsets from `base_offset`, so that no offset moves, but holds only the
# records it kept, each with its offset (`records.offset_records`). Only the cleaner makes
# such a batch; an append carrying the flag is refused.
COMPACTED = 0x10
# flags: a transactional producer's batch (log/transactions.py): its producer id is the
# transactional id's number and epoch, and read_committed readers see its records once a
# commit marker of its producer follows it, never when an abort marker does.
TRANSACTIONAL = 0x20
# flags: a transaction's commit or abort marker in this partition, written by its leader
# on the coordinator's word. It takes one record offset, as Kafka's markers do, and holds
# no record a reader sees (a Kafka reader gets a control batch in its place).
TXN_MARKER = 0x40

PAYLOAD_BYTES_MAX = 64 * 1024 * 1024
RECORD_COUNT_MAX = 1 << 24


class BatchType(enum.IntEnum):
    DATA = 0
    CONFIG = 1
    BARRIER = 2


class Compression(enum.IntEnum):
    """How the payload is encoded: quorumlog's record codec (`log/records.py`), plain or
    zstd, or a Kafka record batch as a Kafka producer sent it (`log/kafka_batch.py`)."""

    NONE = 0
    ZSTD = 1
    KAFKA = 2


_BATCH_TYPES = {t.value: t for t in BatchType}
_COMPRESSIONS = {c.value: c for c in Compression}


class BatchError(ValueError):
    """A byte string is not a valid batch (bad magic, checksum or length)."""


class BatchHeader(NamedTuple):
    """A batch's header, unpacked. A named tuple rather than a frozen dataclass: one is made
    for every batch that enters a node, and a tuple is made several times faster."""

    base_offset: int
    term: int
    producer_id: int
    producer_seq: int
    record_count: int
    timestamp_ms: int
    batch_type: BatchType
    compression: Compression
    payload_bytes: int
    payload_crc: int
    flags: int = 0

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def total_bytes(self) -> int:
        return HEADER_BYTES + self.payload_bytes

    def placed(self, base_offset: int, term: int) -> BatchHeader:
        """This header at `base_offset` in `term` (the leader's patch)."""
        return BatchHeader(
            base_offset,
            term,
            self.producer_id,
            self.producer_seq,
            self.record_count,
            self.timestamp_ms,
            self.batch_type,
            self.compression,
            self.payload_bytes,
            self.payload_crc,
            self.flags,
        )

    def record_timestamp(self, own_ms: int) -> int:
        """A record's timestamp: its own (`own_ms`), or the leader's stamp of the batch."""
        return self.timestamp_ms if self.flags & LOG_APPEND_TIME else own_ms


def build_batch(
    payload: bytes | memoryview,
    *,
    record_count: int,
    batch_type: BatchType = BatchType.DATA,
    compression: Compression = Compression.NONE,
    base_offset: int = 0,
    term: int = 0,
    producer_id: int = -1,
    producer_seq: int = -1,
    timestamp_ms: int = 0,
    flags: int = 0,
) -> bytes:
    """Make a batch from an already encoded payload."""
    if not 1 <= record_count <= RECORD_COUNT_MAX:
        raise BatchError(f"record_count {record_count} outside 1..{RECORD_COUNT_MAX}")
    if len(payload) > PAYLOAD_BYTES_MAX:
        raise BatchError(f"payload of {len(payload)} bytes exceeds {PAYLOAD_BYTES_MAX}")
    header = bytearray(
        HEADER.pack(
            MAGIC,
            0,
            base_offset,
            term,
            producer_id,
            producer_seq,
            record_count,
            timestamp_ms,
            batch_type,
            compression,
            flags,
            len(payload),
            crc32c(payload),
        )
    )
    seal_header(header)
    return bytes(header) + payload


def seal_header(header: bytearray | memoryview) -> None:
    crc = crc32c(header[_CRC_FROM:HEADER_BYTES])
    struct.pack_into("<I", header, _CRC_POS, crc)


def parse_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Unpack and check the header at `pos`; the payload checksum is not checked here."""
    if len(data) - pos < HEADER_BYTES:
        raise BatchError(f"{len(data) - pos} bytes is shorter than a batch header")
    fields = HEADER.unpack_from(data, pos)
    if fields[0] != MAGIC:
        raise BatchError("bad batch magic")
    if crc32c(memoryview(data)[pos + _CRC_FROM : pos + HEADER_BYTES]) != fields[1]:
        raise BatchError("batch header checksum mismatch")
    batch_type = _BATCH_TYPES.get(fields[8])
    compression = _COMPRESSIONS.get(fields[9])
    if batch_type is None or compression is None:
        raise BatchError(f"unknown batch type {fields[8]} or compression {fields[9]}")
    record_count = fields[6]
    payload_bytes = fields[11]
    if not 1 <= record_count <= RECORD_COUNT_MAX:
        raise BatchError(f"record_count {record_count} outside 1..{RECORD_COUNT_MAX}")
    if payload_bytes > PAYLOAD_BYTES_MAX:
        raise BatchError(f"payload of {payload_bytes} bytes exceeds {PAYLOAD_BYTES_MAX}")
    return BatchHeader(
        fields[2],  # base_offset
        fields[3],  # term
        fields[4],  # producer_id
        fields[5],  # producer_seq
        record_count,
        fields[7],  # timestamp_ms
        batch_type,
        compression,
        payload_bytes,
        fields[12],  # payload_crc
        fields[10],  # flags
    )


def check_payload(data: bytes | memoryview, header: BatchHeader, pos: int = 0) -> None:
    """Check the payload of the batch at `pos` against its header."""
    start = pos + HEADER_BYTES
    end = start + header.payload_bytes
    if len(data) < end:
        raise BatchError("batch payload is truncated")
    if crc32c(memoryview(data)[start:end]) != header.payload_crc:
        raise BatchError("batch payload checksum mismatch")


def parse_batch(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Check the whole batch at `pos` (header and payload) and return its header."""
    header = parse_header(data, pos)
    check_payload(data, header, pos)
    return header


def split_batches(data: bytes | memoryview) -> list[tuple[BatchHeader, memoryview]]:
    """Check and split a concatenation of whole batches; every byte must belong to one."""
    view = memoryview(data)
    out = []
    pos = 0
    while pos < len(view):
        header = parse_batch(view, pos)
        end = pos + header.total_bytes
        out.append((header, view[pos:end]))
        pos = end
    return out


def check_continues(
    batches: Sequence[tuple[BatchHeader, memoryview]], next_offset: int, end: int
) -> int:
    """Where placed batches that continue a run at `next_offset`, none reaching `end`,
    leave it (the next chunk of a copy: log/backfill.py); BatchError if they do not."""
    for header, _ in batches:
        if header.base_offset != next_offset or header.last_offset >= end:
            raise BatchError(
                f"batch {header.base_offset}-{header.last_offset} does not continue the "
                f"copy at {next_offset} (it ends before {end})"
            )
        next_offset = header.last_offset + 1
    return next_offset


def with_offset_and_term(batch: bytes | memoryview, base_offset: int, term: int) -> bytes:
    """Return a copy of `batch` placed at `base_offset` in `term` (the leader's patch):
    a new header joined to the same payload, which is copied once."""
    view = memoryview(batch)
    return b"".join((placed_header(view, base_offset, term), view[HEADER_BYTES:]))


def placed_header(batch: bytes | memoryview, base_offset: int, term: int) -> bytearray:
    """The header of `batch` placed at `base_offset` in `term`, sealed."""
    header = bytearray(batch[:HEADER_BYTES])
    _BASE_OFFSET_TERM.pack_into(header, _BASE_OFFSET_POS, base_offset, term)
    seal_header(header)
    return header


def place_batches(
    batches: Sequence[bytes | memoryview],
    next_offset: int,
    term: int,
    headers: Sequence[BatchHeader] | None = None,
) -> list[tuple[BatchHeader, bytes]]:
    """Whole batches placed one after another from `next_offset` in `term`, each with its
    header (`headers`, when the caller parsed them already, saves parsing them again)."""
    placed = []
    for i, batch in enumerate(batches):
        header = parse_header(batch) if headers is None else headers[i]
        placed.append(
            (header.placed(next_offset, term), with_offset_and_term(batch, next_offset, term))
        )
        next_offset += header.record_count
    return placed
