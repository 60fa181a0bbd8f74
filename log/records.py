"""The record codec used by clients inside a batch payload; the log calls it only for the
times of batches made before their headers held them (log/timeindex.py).

A payload is a msgpack array of records, each `[key, value, timestamp_ms, headers]` with
`key` bytes or nil, `value` bytes or nil (no value: a tombstone, Kafka's null value, which
a compacted topic reads as "this key is deleted") and `headers` a list of `[name, value]`
pairs or nil, compressed with zstd when that pays. msgpack's C packer does the per-record work, not a Python loop.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import NamedTuple

import msgpack
import zstandard

from quorumlog.log import kafka_batch
from quorumlog.log.batch import (
    COMPACTED,
    HEADER_BYTES,
    LOG_APPEND_TIME,
    MAX_TIMESTAMP,
    TRANSACTIONAL,
    TXN_MARKER,
    TYPES_CHECKED,
    BatchError,
    BatchHeader,
    BatchType,
    Compression,
    build_batch,
)

# Below this size zstd's frame overhead outweighs what it saves.
COMPRESS_BYTES_MIN = 256
# A larger payload is compressed only if its opening this many bytes shrink by at least
# 1/PROBE_SAVING_MIN: records that do not compress (already compressed, encrypted,
# random) then cost a probe rather than a pass of zstd over the whole, which for a 1 MiB
# batch of them was most of a client's encoding time (1.2 of 1.7 ms).
COMPRESS_PROBE_BYTES = 16 * 1024
PROBE_SAVING_MIN = 32
ZSTD_LEVEL = 1
# A thread's Packer keeps the buffer it grew; after a value larger than this (a client's
# batches are at most 1 MiB) it is dropped rather than kept.
PACKER_KEPT_BYTES_MAX = 2 * 1024 * 1024
DECOMPRESSED_BYTES_MAX = 256 * 1024 * 1024


class RawRecord(NamedTuple):
    key: bytes | None
    value: bytes | None  # None: no value (a tombstone), not the same as empty
    timestamp_ms: int
    headers: list[tuple[str, bytes]] | None = None


_codecs = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    # zstd contexts are not safe to share between threads; one per thread is cheap.
    c = getattr(_codecs, "compressor", None)
    if c is None:
        c = _codecs.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c


def packb(value: object) -> bytes:
    """msgpack.packb with a Packer kept per thread (the record codec's and the transport's
    frames): packb makes a new Packer each call, whose fresh buffer costs more than the
    packing for anything but a small value (960 records of 1 KiB: 1.45 ms against
    0.17 ms; one record: 13.9 -> 8.0 us for the whole request)."""
    pack = getattr(_codecs, "pack", None)
    if pack is None:
        pack = _codecs.pack = msgpack.Packer(use_bin_type=True).pack
    packed = pack(value)
    if len(packed) > PACKER_KEPT_BYTES_MAX:
        del _codecs.pack  # its buffer, grown to this size, is not kept for the thread
    return packed


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_codecs, "decompressor", None)
    if d is None:
        d = _codecs.decompressor = zstandard.ZstdDecompressor()
    return d


def encode_records(
    records: Sequence[RawRecord | tuple], compress: bool = True
) -> tuple[bytes, Compression]:
    """Encode records into a payload; returns the payload and how it is compressed."""
    packed = packb(records)
    if compress and len(packed) >= COMPRESS_BYTES_MIN and _compresses(packed):
        squeezed = _compressor().compress(packed)
        if len(squeezed) < len(packed):
            return squeezed, Compression.ZSTD
    return packed, Compression.NONE


def _compresses(packed: bytes) -> bool:
    """Whether compressing `packed` is worth a try, judged from its opening bytes."""
    if len(packed) <= 2 * COMPRESS_PROBE_BYTES:
        return True  # compressing it whole costs about what a probe would
    probe = _compressor().compress(memoryview(packed)[:COMPRESS_PROBE_BYTES])
    return len(probe) <= COMPRESS_PROBE_BYTES - COMPRESS_PROBE_BYTES // PROBE_SAVING_MIN


def decode_records(payload: bytes | memoryview, compression: Compression) -> list[RawRecord]:
    """Decode a payload made by `encode_records` or a Kafka producer; raises BatchError on
    anything else."""
    if compression == Compression.KAFKA:
        return _kafka_records(payload)
    try:
        return [
            RawRecord(k, v, ts, h)
            if h is None and (type(v) is bytes or v is None) and (k is None or type(k) is bytes)
            else _mended(k, v, ts, h)
            for k, v, ts, h in _unpacked(payload, compression)
        ]
    except (ValueError, TypeError, zstandard.ZstdError, msgpack.UnpackException) as exc:
        raise BatchError(f"undecodable record payload: {exc}") from None


def _unpacked(payload: bytes | memoryview, compression: Compression) -> list:
    if compression == Compression.ZSTD:
        payload = _decompressor().decompress(payload, max_output_size=DECOMPRESSED_BYTES_MAX)
    return msgpack.unpackb(payload, raw=False, use_list=True)


def _mended(key, value, timestamp_ms: int, headers) -> RawRecord:
    """A record whose value, key or header values may not be bytes: clients before 0.4
    stored a str given as a value as it was, and every reader of its partition failed on
    it. Read as its UTF-8 bytes (a header's null value as empty)."""
    return RawRecord(
        None if key is None else _as_bytes(key),
        None if value is None else _as_bytes(value),
        timestamp_ms,
        None if headers is None else [(str(n), _as_bytes(v)) for n, v in headers],
    )


def _as_bytes(value) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return b"" if value is None else str(value).encode()


def _kafka_records(payload: bytes | memoryview) -> list[RawRecord]:
    """A Kafka batch's records as quorumlog records: a null value stays None (a tombstone),
    a null header value (which native headers do not have) reads as empty bytes."""
    header = kafka_batch.parse_header(payload)
    return [
        RawRecord(r.key, r.value, r.timestamp_ms, [(n, v or b"") for n, v in r.headers] or None)
        for r in kafka_batch.records_of(payload, header)
    ]


def make_data_batch(
    records: Sequence[RawRecord | tuple],
    *,
    producer_id: int = -1,
    producer_seq: int = -1,
    compress: bool = True,
    flags: int = 0,
) -> bytes:
    """Encode records into one data batch, ready to append. Every value, key and header
    value must be bytes (or None): the client checks them at the call (quorumlog/
    protocol.py) and the node's own records are bytes, so the batch says so
    (TYPES_CHECKED) and the leader need not decode it to check again. Its header holds
    the records' largest timestamp (MAX_TIMESTAMP), what the time index goes by."""
    payload, compression = encode_records(records, compress)
    return build_batch(
        payload,
        record_count=len(records),
        batch_type=BatchType.DATA,
        compression=compression,
        producer_id=producer_id,
        producer_seq=producer_seq,
        timestamp_ms=max(r[2] for r in records),
        flags=TYPES_CHECKED | MAX_TIMESTAMP | flags,
    )


def field_type_problem(batch: bytes | memoryview, header: BatchHeader) -> str | None:
    """What is not bytes in a data batch made without TYPES_CHECKED (by a client from
    before 0.4, or another one), or None: a str stored as a value made every reader of
    its partition fail."""
    if header.compression == Compression.KAFKA:
        return None  # Kafka's record format holds nothing but bytes
    payload = memoryview(batch)[HEADER_BYTES : HEADER_BYTES + header.payload_bytes]
    try:
        for i, (key, value, _, headers) in enumerate(_unpacked(payload, header.compression)):
            for name, field in (("value", value), ("key", key)):
                if field is not None and type(field) is not bytes:
                    return f"record {i}: its {name} is {type(field).__name__}, not bytes"
            for pair in headers or ():
                if type(pair[0]) is not str or (pair[1] is not None and type(pair[1]) is not bytes):
                    return f"record {i}: a header is not a (str, bytes) pair"
    except (ValueError, TypeError, IndexError, zstandard.ZstdError, msgpack.UnpackException) as exc:
        return f"undecodable record payload: {exc}"
    return None


def batch_records(batch: bytes | memoryview, header: BatchHeader) -> list[RawRecord]:
    """The records of a data batch whose header has been parsed, without their offsets
    (`offset_records` gives them: in a COMPACTED batch they are not one after another).
    A transaction's marker holds none."""
    if header.flags & (COMPACTED | TXN_MARKER):
        return [record for _, record in offset_records(batch, header)]
    payload = memoryview(batch)[HEADER_BYTES : HEADER_BYTES + header.payload_bytes]
    records = decode_records(payload, header.compression)
    if len(records) != header.record_count:
        raise BatchError(
            f"batch claims {header.record_count} records but its payload holds {len(records)}"
        )
    if header.flags & LOG_APPEND_TIME:  # the leader's stamp is every record's time
        return [r._replace(timestamp_ms=header.timestamp_ms) for r in records]
    return records


def offset_records(batch: bytes | memoryview, header: BatchHeader) -> list[tuple[int, RawRecord]]:
    """The records of a data batch with their offsets: one after another from its base
    offset, or, in a batch the cleaner rewrote (COMPACTED), each at the offset it kept."""
    if header.flags & TXN_MARKER:
        return []
    if not header.flags & COMPACTED:
        return list(zip(itertools.count(header.base_offset), batch_records(batch, header)))
    payload = memoryview(batch)[HEADER_BYTES : HEADER_BYTES + header.payload_bytes]
    try:
        items = _unpacked(payload, header.compression)
        out = []
        previous = -1
        for key, value, ts, headers, delta in items:
            if not previous < delta < header.record_count:
                raise BatchError(
                    f"a compacted batch of {header.record_count} offsets holds a record at "
                    f"{delta} after {previous}"
                )
            previous = delta
            if (
                headers is None
                and (type(value) is bytes or value is None)
                and (key is None or type(key) is bytes)
            ):
                record = RawRecord(key, value, ts, None)
            else:
                record = _mended(key, value, ts, headers)
            out.append((header.base_offset + delta, record))
        return out
    except (ValueError, TypeError, zstandard.ZstdError, msgpack.UnpackException) as exc:
        raise BatchError(f"undecodable compacted payload: {exc}") from None


def make_compacted_batch(
    kept: Sequence[tuple[int, RawRecord]],
    base_offset: int,
    span: int,
    term: int,
    transactional_producer: int = -1,
) -> bytes:
    """What the cleaner writes for `span` offsets from `base_offset` (all in `term`, as the
    batches it replaces were): the records `kept` at their offsets, none when none is, each
    record's own timestamp (a leader's stamp resolved) and their largest in the header. A
    transaction's batch stays one (`transactional_producer`: its producer id), so that its
    records stay hidden or shown with their transaction's."""
    payload, compression = encode_records(
        [(r.key, r.value, r.timestamp_ms, r.headers, offset - base_offset) for offset, r in kept]
    )
    return build_batch(
        payload,
        record_count=span,
        compression=compression,
        base_offset=base_offset,
        term=term,
        producer_id=transactional_producer,
        timestamp_ms=max((r.timestamp_ms for _, r in kept), default=0),
        flags=TYPES_CHECKED
        | MAX_TIMESTAMP
        | COMPACTED
        | (TRANSACTIONAL if transactional_producer >= 0 else 0),
    )


def keyless_record(batch: bytes | memoryview, header: BatchHeader) -> int | None:
    """The index in its batch of the first record without a key, or None (BatchError if the
    payload does not decode: the caller checked it)."""
    for i, record in enumerate(batch_records(batch, header)):
        if record.key is None:
            return i
    return None


# What the cleaner decides by, of a record: (offset, key, whether it is a tombstone, its
# timestamp). A plain tuple: the cleaner makes one for every record it reads, twice.
KeyedEntry = tuple[int, bytes | None, bool, int]


def keyed_entries(batch: bytes | memoryview, header: BatchHeader) -> list[KeyedEntry]:
    """The cleaner's view of a data batch's records, without making records of them."""
    if header.flags & TXN_MARKER:
        return []
    if header.compression == Compression.KAFKA or header.flags & LOG_APPEND_TIME:
        return [
            (at, r.key, r.value is None, r.timestamp_ms) for at, r in offset_records(batch, header)
        ]
    payload = memoryview(batch)[HEADER_BYTES : HEADER_BYTES + header.payload_bytes]
    base = header.base_offset
    try:
        items = _unpacked(payload, header.compression)
        if header.flags & COMPACTED:
            return [
                (base + d, k if k is None or type(k) is bytes else _as_bytes(k), v is None, ts)
                for k, v, ts, _, d in items
            ]
        return [
            (base + n, k if k is None or type(k) is bytes else _as_bytes(k), v is None, ts)
            for n, (k, v, ts, _) in enumerate(items)
        ]
    except (ValueError, TypeError, zstandard.ZstdError, msgpack.UnpackException) as exc:
        raise BatchError(f"undecodable record payload: {exc}") from None
