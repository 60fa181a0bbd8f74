"""Kafka's record batch (magic v2), the payload of batches written through the Kafka listener.

A Kafka producer's batch is stored as it arrives, inside a quorumlog batch whose header says
`Compression.KAFKA`: the leader checks it, never re-encodes it, and a Kafka fetch hands it back
with only its base offset and leader epoch patched (Kafka's CRC leaves both out). Native
readers decode its records here. Batches written natively are encoded into this format when a
Kafka consumer fetches them (`encode_batch`).

Layout (big-endian), from Kafka's documentation of the message format:

    off size field
    0   8    base_offset
    8   4    batch_length            bytes after this field
    12  4    partition_leader_epoch
    16  1    magic                   2
    17  4    crc                     CRC-32C of bytes 21..end
    21  2    attributes              compression (bits 0-2), timestamp type, transactional,
                                     control
    23  4    last_offset_delta
    27  8    base_timestamp
    35  8    max_timestamp
    43  8    producer_id
    51  2    producer_epoch
    53  4    base_sequence
    57  4    records_count
    61  ..   records, each: length, attributes, timestamp delta, offset delta, key, value,
             headers (zig-zag varints for every length and delta)
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from quorumlog.log import kafka_compression
from quorumlog.log.batch import BatchError
from quorumlog.log.kafka_compression import (  # check_for_append raises it: callers catch it here
    UnsupportedCompressionError as UnsupportedCompressionError,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = HEADER.size
assert HEADER_BYTES == 61
_CRC_FROM = 21
_OFFSET_EPOCH = struct.Struct(">qii")  # base offset, batch length, leader epoch

NO_TIMESTAMP = -1  # an empty batch's times, as Kafka writes them
COMPRESSION_MASK = 0x07
TRANSACTIONAL = 0x10
CONTROL = 0x20
DECOMPRESSED_BYTES_MAX = 256 * 1024 * 1024


class KafkaHeader(NamedTuple):
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def total_bytes(self) -> int:
        return 12 + self.batch_length

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK


def parse_header(data: bytes | memoryview, pos: int = 0) -> KafkaHeader:
    """The header of the batch at `pos`, checked (magic, length, CRC of the whole batch)."""
    if len(data) - pos < HEADER_BYTES:
        raise BatchError("shorter than a Kafka record batch header")
    header = KafkaHeader(*HEADER.unpack_from(data, pos))
    if header.magic != 2:
        raise BatchError(f"Kafka record batch magic {header.magic}: only v2 is supported")
    if header.batch_length < HEADER_BYTES - 12 or pos + header.total_bytes > len(data):
        raise BatchError(f"Kafka record batch length {header.batch_length} is out of bounds")
    end = pos + header.total_bytes
    if crc32c(memoryview(data)[pos + _CRC_FROM : end]) != header.crc:
        raise BatchError("Kafka record batch CRC mismatch")
    return header


def split_batches(data: bytes | memoryview) -> list[tuple[KafkaHeader, memoryview]]:
    """Check and split a concatenation of whole record batches (a Produce's records)."""
    view = memoryview(data)
    out = []
    pos = 0
    while pos < len(view):
        header = parse_header(view, pos)
        end = pos + header.total_bytes
        out.append((header, view[pos:end]))
        pos = end
    return out


def check_for_append(header: KafkaHeader) -> None:
    """What a batch must be to be appended: data records with offsets 0..count-1, in a codec
    this node can read back; a transaction's with its producer's id (only a coordinator
    writes control batches, as markers: log/transactions.py)."""
    if header.attributes & CONTROL:
        raise BatchError("control batches are written by a transaction coordinator only")
    if header.attributes & TRANSACTIONAL and header.producer_id < 0:
        raise BatchError("a transactional batch without a producer id")
    kafka_compression.check_codec(header.compression)
    if header.records_count < 1 or header.last_offset_delta != header.records_count - 1:
        raise BatchError(
            f"a batch of {header.records_count} records with last offset delta "
            f"{header.last_offset_delta}"
        )


def placed(batch: bytes | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """A copy of `batch` at `base_offset` in `leader_epoch`: neither is under the CRC."""
    out = bytearray(batch)
    length = struct.unpack_from(">i", out, 8)[0]
    _OFFSET_EPOCH.pack_into(out, 0, base_offset, length, leader_epoch)
    return bytes(out)


LOG_APPEND_TIME_TYPE = 0x08  # attributes bit 3: the broker's time, in max_timestamp
_ATTRIBUTES_POS = 21
_MAX_TIMESTAMP_POS = 35


def stamp_in_place(batch: bytearray | memoryview, stamp_ms: int) -> None:
    """Make the batch's records carry the broker's time `stamp_ms` (Kafka's LogAppendTime:
    the type bit set, max_timestamp the time, the CRC computed again)."""
    attributes = struct.unpack_from(">h", batch, _ATTRIBUTES_POS)[0]
    struct.pack_into(">h", batch, _ATTRIBUTES_POS, attributes | LOG_APPEND_TIME_TYPE)
    struct.pack_into(">q", batch, _MAX_TIMESTAMP_POS, stamp_ms)
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[_CRC_FROM:]))


# ------------------------------------------------------------------------ records


class KafkaRecord(NamedTuple):
    offset_delta: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at `pos`: (value, position after it)."""
    b = buf[pos]
    pos += 1
    raw = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift > 63:
            raise BatchError("varint longer than 64 bits")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        shift += 7
    return (raw >> 1) ^ -(raw & 1), pos


def _bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    size, pos = _varint(buf, pos)
    if size < 0:
        return None, pos
    end = pos + size
    if end > len(buf):
        raise BatchError("record field runs past its batch")
    return buf[pos:end], end


def records_of(batch: bytes | memoryview, header: KafkaHeader) -> list[KafkaRecord]:
    """The records of a checked batch, decompressed and decoded; BatchError if malformed."""
    body = memoryview(batch)[HEADER_BYTES : header.total_bytes]
    buf = kafka_compression.decompress(body, header.compression, DECOMPRESSED_BYTES_MAX)
    out: list[KafkaRecord] = []
    pos = 0
    try:
        for _ in range(header.records_count):
            length, pos = _varint(buf, pos)
            end = pos + length
            pos += 1  # attributes, unused
            ts_delta, pos = _varint(buf, pos)
            offset_delta, pos = _varint(buf, pos)
            key, pos = _bytes(buf, pos)
            value, pos = _bytes(buf, pos)
            count, pos = _varint(buf, pos)
            headers = []
            for _ in range(count):
                name, pos = _bytes(buf, pos)
                header_value, pos = _bytes(buf, pos)
                if name is None:
                    raise BatchError("a record header without a name")
                headers.append((name.decode("utf-8", "surrogateescape"), header_value))
            if pos != end:
                raise BatchError("a record's length does not match its fields")
            out.append(
                KafkaRecord(offset_delta, header.base_timestamp + ts_delta, key, value, headers)
            )
    except IndexError:
        raise BatchError("records run past their batch") from None
    if pos != len(buf):
        raise BatchError("bytes left over after the batch's records")
    return out


def check_records(batch: bytes | memoryview, header: KafkaHeader) -> int:
    """That the records of a checked batch decode (what `records_of` would read), without
    making them: a leader checks every batch a producer sends with this. Returns the
    largest timestamp they hold, which the time index goes by (the header's max_timestamp
    is what the producer says; Kafka's broker does not trust it either).

    The leader's hottest loop (about a microsecond a record): the one-byte varints most
    fields are read inline, the longer ones by `_varint` (a call each cost a third more)."""
    body = memoryview(batch)[HEADER_BYTES : header.total_bytes]
    buf = kafka_compression.decompress(body, header.compression, DECOMPRESSED_BYTES_MAX)
    pos = 0
    ts_delta_max = -(1 << 63)
    try:
        for _ in range(header.records_count):
            length, pos = _varint(buf, pos)
            end = pos + length
            b = buf[pos + 1]  # after the attributes: the timestamp delta
            if b < 0x80:
                ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                ts_delta, pos = _varint(buf, pos + 1)
            if ts_delta > ts_delta_max:
                ts_delta_max = ts_delta
            b = buf[pos]  # the offset delta
            pos = pos + 1 if b < 0x80 else _varint(buf, pos)[1]
            b = buf[pos]  # the key (a negative size: null), unrolled with the value
            if b < 0x80:
                pos += 1 + max((b >> 1) ^ -(b & 1), 0)
            else:
                size, pos = _varint(buf, pos)
                pos += max(size, 0)
            b = buf[pos]  # the value
            if b < 0x80:
                pos += 1 + max((b >> 1) ^ -(b & 1), 0)
            else:
                size, pos = _varint(buf, pos)
                pos += max(size, 0)
            if buf[pos] == 0:  # no headers
                pos += 1
            else:
                count, pos = _varint(buf, pos)
                for _ in range(count):
                    size, pos = _varint(buf, pos)
                    if size < 0:
                        raise BatchError("a record header without a name")
                    pos += size
                    size, pos = _varint(buf, pos)
                    pos += max(size, 0)
            if pos != end:
                raise BatchError("a record's length does not match its fields")
    except IndexError:
        raise BatchError("records run past their batch") from None
    if pos != len(buf):
        raise BatchError("bytes left over after the batch's records")
    return header.base_timestamp + (ts_delta_max if header.records_count else 0)


# ----------------------------------------------------------------------- encoding


def _zigzag(n: int) -> bytes:
    raw = (n << 1) ^ (n >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


_SMALL = [_zigzag(n) for n in range(-1, 64)]


def _field(data: bytes | None) -> bytes:
    if data is None:
        return _SMALL[0]
    size = len(data)
    return (_SMALL[size + 1] if size < 63 else _zigzag(size)) + data


def encode_batch(
    base_offset: int,
    leader_epoch: int,
    records: list[tuple[bytes | None, bytes | None, int, list | None]],
    deltas: list[int] | None = None,
    span: int | None = None,
    transaction: tuple[int, int] | None = None,
) -> bytes:
    """An uncompressed batch of `(key, value, timestamp_ms, headers)` records at consecutive
    offsets from `base_offset`, or at `deltas` from it in a batch spanning `span` offsets
    (a compacted one, perhaps empty: Kafka's clients step over its holes); `transaction`:
    the transactional producer's (id, epoch) that wrote it."""
    base_ts = records[0][2] if records else NO_TIMESTAMP
    parts = []
    offsets = range(len(records)) if deltas is None else deltas
    for delta, (key, value, ts, headers) in zip(offsets, records, strict=True):
        body = [b"\x00", _zigzag(ts - base_ts), _zigzag(delta), _field(key), _field(value)]
        body.append(_zigzag(len(headers) if headers else 0))
        for name, header_value in headers or ():
            body.append(_field(name.encode("utf-8", "surrogateescape")))
            body.append(_field(header_value))
        encoded = b"".join(body)
        parts.append(_zigzag(len(encoded)))
        parts.append(encoded)
    max_ts = max((r[2] for r in records), default=NO_TIMESTAMP)
    last_delta = len(records) - 1 if span is None else span - 1
    attributes = 0 if transaction is None else TRANSACTIONAL
    return _seal(
        base_offset,
        leader_epoch,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        len(records),
        parts,
        transaction or (-1, -1),
    )


CONTROL_ABORT, CONTROL_COMMIT = 0, 1  # a control record's type, in its key


def control_batch(
    base_offset: int,
    leader_epoch: int,
    transaction: tuple[int, int],
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """A transaction's marker as Kafka writes it: a control batch of the producer's (id,
    epoch) holding one record, whose key is (version 0, commit or abort) and value (version
    0, the coordinator's epoch)."""
    key = struct.pack(">hh", 0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = struct.pack(">hi", 0, coordinator_epoch)
    body = b"".join([b"\x00", _zigzag(0), _zigzag(0), _field(key), _field(value), _zigzag(0)])
    return _seal(
        base_offset,
        leader_epoch,
        TRANSACTIONAL | CONTROL,
        0,
        timestamp_ms,
        timestamp_ms,
        1,
        [_zigzag(len(body)), body],
        transaction,
    )


def control_type(record: KafkaRecord) -> int:
    """A control record's type (CONTROL_ABORT, CONTROL_COMMIT, ...), from its key."""
    if record.key is None or len(record.key) < 4:
        raise BatchError("a control record's key is (version, type)")
    return struct.unpack_from(">hh", record.key)[1]


def _seal(
    base_offset: int,
    leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_ts: int,
    max_ts: int,
    count: int,
    parts: list[bytes],
    transaction: tuple[int, int] = (-1, -1),
) -> bytes:
    records = b"".join(parts)
    header = bytearray(
        HEADER.pack(
            base_offset,
            HEADER_BYTES - 12 + len(records),
            leader_epoch,
            2,
            0,
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            transaction[0],
            transaction[1],
            -1,
            count,
        )
    )
    crc = crc32c(records, crc32c(memoryview(header)[_CRC_FROM:]))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + records
