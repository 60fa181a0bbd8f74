"""One segment file of the log, its sparse offset and time indexes and its term starts.

A segment holds whole batches at consecutive offsets from `base_offset`, in a file named by
that offset. In memory it keeps a sparse index (the position of one batch every
`index_interval_bytes`), beside each entry one of the time index (log/timeindex.py), and
the first offset of every term inside it, where its control batches are (Raft's own:
log/offsets.py) and its transactions (log/transactions.py), all small. Once sealed and
fsynced, they are
written next to it in an index file, so that a later open can skip scanning it; a missing
or damaged index file is rebuilt by a scan (it is derived: it never stops a log opening).
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from crc32c import crc32c

from quorumlog.log.batch import (
    HEADER_BYTES,
    MAGIC,
    TRANSACTIONAL,
    TXN_MARKER,
    BatchError,
    BatchHeader,
    BatchType,
    parse_batch,
    parse_header,
)
from quorumlog.log.files import CorruptionError, File, FileSystem
from quorumlog.log.timeindex import (
    NO_TIMESTAMP,
    TimedOffset,
    TimeIndex,
    batch_max_timestamp,
    first_at_or_after,
)
from quorumlog.log.transactions import AbortedTxn, SegmentTxns

SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
SCAN_CHUNK_BYTES = 1024 * 1024
READ_ENDS_MAX = 64
TIME_SCAN_BYTES = 64 * 1024  # a time lookup reads about an index interval, in reads this big

# QLI2 added the time index, QLI3 the control batches: an index file of before is rebuilt
# by the scan on open. QLI4 added the transactions: a QLI3 file is read as holding none
# (the releases that wrote one refused transactional batches).
_INDEX_MAGIC = b"QLI4"
_INDEX_MAGIC_V3 = b"QLI3"
_INDEX_HEAD = struct.Struct("<4sIIIIqqq")
_TXNS_BYTES = struct.Struct("<I")
_CRC = struct.Struct("<I")


def segment_file_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_file_name(name: str) -> int | None:
    stem = name[: -len(SEGMENT_SUFFIX)]
    if name.endswith(SEGMENT_SUFFIX) and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


@dataclass(slots=True)
class ScanFailure:
    """Where a scan met a batch it could not accept, and why."""

    position: int
    offset: int
    reason: str


class Segment:
    """The in-memory view of one segment file. Owned by the log; not thread-safe."""

    def __init__(
        self,
        fs: FileSystem,
        path: str,
        base_offset: int,
        file: File,
        index_interval_bytes: int,
        open_txns: dict[int, int] | None = None,
    ):
        self.fs = fs
        self.moved_to(path)
        self.base_offset = base_offset
        self.file = file
        self.index_interval_bytes = index_interval_bytes
        self.size_bytes = 0
        # The file's bytes below this are out of the page cache (LogConfig.page_cache_window_bytes).
        self.uncached_to = 0
        self.last_offset = base_offset - 1
        # The largest timestamp of its data records (retention by age, time lookups). A
        # truncation leaves it as it was: too large is safe, a time lookup reads more.
        self.max_timestamp_ms = NO_TIMESTAMP
        # The timestamp of its first data batch, which segment.ms counts from (known for the
        # newest segment, which is always scanned on open; None before a data batch).
        self.first_data_ms: int | None = None
        # Sparse index: base offset and file position of one batch every index_interval_bytes,
        # and the largest timestamp up to that batch (the time index).
        self.index_offsets = array("q")
        self.index_positions = array("q")
        self.time_index = TimeIndex()
        # (term, first offset of that term in this segment), ascending in both.
        self.term_starts: list[tuple[int, int]] = []
        # (offset, width) of every batch that is not data (record offsets skip them).
        self.controls: list[tuple[int, int]] = []
        # The transactions open where it starts (`open_txns`: what the segment before it
        # left open) and ends, and those aborted in it.
        self.txns = SegmentTxns(open_txns)
        # Where recent reads ended (offset -> position of the batch starting there), so that
        # sequential readers skip the index walk. Bounded; cleared by truncation.
        self._read_ends: dict[int, int] = {}
        self._last_batch_bytes = HEADER_BYTES

    def moved_to(self, path: str) -> None:
        """Its file was renamed to `path` (log/backfill.py), still open."""
        self.path = path
        self.index_path = path[: -len(SEGMENT_SUFFIX)] + INDEX_SUFFIX

    @property
    def is_empty(self) -> bool:
        return self.last_offset < self.base_offset

    @property
    def last_term(self) -> int | None:
        return self.term_starts[-1][0] if self.term_starts else None

    def note_batch(
        self, header: BatchHeader, position: int, batch: bytes | memoryview
    ) -> AbortedTxn | None:
        """Account for `batch`, written (or found) at `position`; returns the transaction it
        ends if it is a marker (log/transactions.py)."""
        batch_ms = batch_max_timestamp(header, batch)
        self.max_timestamp_ms = max(self.max_timestamp_ms, batch_ms)
        if self.first_data_ms is None and header.batch_type is BatchType.DATA:
            self.first_data_ms = batch_ms
        if (
            not self.index_positions
            or position - self.index_positions[-1] >= self.index_interval_bytes
        ):
            self.index_offsets.append(header.base_offset)
            self.index_positions.append(position)
            self.time_index.add(self.max_timestamp_ms, header.base_offset)
        if not self.term_starts or self.term_starts[-1][0] != header.term:
            self.term_starts.append((header.term, header.base_offset))
        if header.batch_type is not BatchType.DATA:
            self.controls.append((header.base_offset, header.record_count))
        self.last_offset = header.last_offset
        self.size_bytes = position + header.total_bytes
        if header.flags & (TRANSACTIONAL | TXN_MARKER):
            return self.txns.note(header, batch)
        return None

    # Scanning

    def scan(self, min_term: int = 0, check_payloads: bool = True) -> ScanFailure | None:
        """Read batches from where this view ends to the end of the file, checking each one
        (offsets dense, terms at least `min_term` and never decreasing).

        Stops at the first batch that is damaged, incomplete or out of sequence and returns
        where; everything before it is accounted for.
        """
        file_bytes = self.file.size()
        position = self.size_bytes
        expected_offset = self.last_offset + 1
        expected_term = max(min_term, self.last_term or 0)
        while position < file_bytes:
            chunk = self.file.read_at(position, max(SCAN_CHUNK_BYTES, HEADER_BYTES))
            view = memoryview(chunk)
            at = 0
            while at < len(view):
                try:
                    header = parse_header(view, at)
                except BatchError as exc:
                    if len(view) - at < HEADER_BYTES and position + len(view) < file_bytes:
                        break  # the header continues in the next chunk
                    return ScanFailure(position + at, expected_offset, str(exc))
                if at + header.total_bytes > len(view):
                    if position + at + header.total_bytes > file_bytes:
                        return ScanFailure(position + at, expected_offset, "incomplete batch")
                    if at == 0:  # a batch larger than a chunk: read exactly it
                        view = memoryview(self.file.read_at(position, header.total_bytes))
                        continue
                    break
                if check_payloads:
                    try:
                        parse_batch(view, at)
                    except BatchError as exc:
                        return ScanFailure(position + at, expected_offset, str(exc))
                if header.base_offset != expected_offset:
                    return ScanFailure(
                        position + at,
                        expected_offset,
                        f"batch at offset {header.base_offset} where {expected_offset} was expected",
                    )
                if header.term < expected_term:
                    return ScanFailure(
                        position + at,
                        expected_offset,
                        f"term {header.term} after term {expected_term}",
                    )
                self.note_batch(header, position + at, view[at : at + header.total_bytes])
                expected_offset = header.last_offset + 1
                expected_term = header.term
                at += header.total_bytes
            position += at
        return None

    def valid_batch_after(self, position: int) -> int | None:
        """Position of a whole, valid batch after `position`, if any (damage or torn tail?)."""
        file_bytes = self.file.size()
        search_from = position + 1
        while search_from < file_bytes:
            chunk = self.file.read_at(search_from, SCAN_CHUNK_BYTES + len(MAGIC))
            hit = chunk.find(MAGIC)
            if hit < 0:
                search_from += SCAN_CHUNK_BYTES
                continue
            candidate = search_from + hit
            try:
                header = parse_header(self.file.read_at(candidate, HEADER_BYTES))
                if candidate + header.total_bytes <= file_bytes:
                    parse_batch(self.file.read_at(candidate, header.total_bytes))
                    return candidate
            except BatchError:
                pass
            search_from = candidate + 1
        return None

    # Reading

    def position_of(self, offset: int) -> tuple[int, BatchHeader]:
        """File position and header of the batch that holds `offset` (which it must hold)."""
        position = self._read_ends.get(offset)
        if position is None:
            position = self.index_positions[bisect.bisect_right(self.index_offsets, offset) - 1]
        while True:
            try:
                header = parse_header(self.file.read_at(position, HEADER_BYTES))
            except BatchError as exc:
                raise CorruptionError(self.path, position, str(exc), offset) from None
            if header.last_offset >= offset:
                return position, header
            position += header.total_bytes

    def read(self, from_offset: int, bytes_max: int, upto_offset: int) -> tuple[bytes, int]:
        """Whole batches from the one holding `from_offset`, at most `bytes_max` bytes (but
        at least one batch), none past `upto_offset`, and the last offset they hold.

        Headers are checked here; payload checksums are checked where batches arrive (a
        follower's append, a client's decode), as Kafka brokers do, to keep reads at disk speed.
        """
        start = self._read_ends.get(from_offset)
        if start is not None and start < self.size_bytes:
            # A sequential reader: a batch starts right here. Read it and what follows in
            # one call, guessing its size from the last batch read; read again if short.
            data = self.file.read_at(start, max(bytes_max, self._last_batch_bytes))
            try:
                first = parse_header(data)
            except BatchError as exc:
                raise CorruptionError(self.path, start, str(exc), from_offset) from None
            if first.base_offset != from_offset:
                raise CorruptionError(
                    self.path, start, "read hint points into a batch", from_offset
                )
            if first.total_bytes > len(data):
                data = self.file.read_at(start, first.total_bytes)
        else:
            start, first = self.position_of(from_offset)
            data = self.file.read_at(start, max(bytes_max, first.total_bytes))
        if first.last_offset > upto_offset:
            return b"", from_offset - 1
        self._last_batch_bytes = first.total_bytes
        end, last_offset = first.total_bytes, first.last_offset
        try:
            while end + HEADER_BYTES <= len(data):
                header = parse_header(data, end)
                if end + header.total_bytes > len(data) or header.last_offset > upto_offset:
                    break
                end += header.total_bytes
                last_offset = header.last_offset
        except BatchError as exc:
            raise CorruptionError(self.path, start + end, str(exc), from_offset) from None
        if len(self._read_ends) >= READ_ENDS_MAX:
            self._read_ends.clear()
        self._read_ends[last_offset + 1] = start + end
        return (data[:end] if end < len(data) else data), last_offset

    def offset_for_time(
        self, timestamp_ms: int, upto_offset: int, from_offset: int = 0
    ) -> TimedOffset | None:
        """The first data record stamped at or after `timestamp_ms`, none before
        `from_offset` nor past `upto_offset`: read from the time index's batch on (or
        `from_offset`'s, if later), about an index interval."""
        if self.is_empty or self.max_timestamp_ms < timestamp_ms:
            return None
        offset = self.time_index.scan_from(timestamp_ms)
        offset = max(self.base_offset if offset is None else offset, from_offset)
        upto_offset = min(upto_offset, self.last_offset)
        while offset <= upto_offset:
            data, last_offset = self.read(offset, TIME_SCAN_BYTES, upto_offset)
            if not data:
                return None  # the batch holding `offset` ends past `upto_offset`
            found = first_at_or_after(data, timestamp_ms, offset)
            if found is not None:
                return found
            offset = last_offset + 1
        return None

    def term_at(self, offset: int) -> int:
        i = bisect.bisect_right(self.term_starts, offset, key=lambda ts: ts[1]) - 1
        return self.term_starts[i][0]

    # Truncation

    def truncate_from(self, offset: int) -> None:
        """Drop the batch starting at `offset` and everything after it."""
        position, header = self.position_of(offset)
        if header.base_offset != offset:
            raise ValueError(f"offset {offset} is inside the batch at {header.base_offset}")
        self.truncate_at_position(position, offset)

    def truncate_at_position(self, position: int, offset: int) -> None:
        self.file.truncate(position)
        self._read_ends.clear()
        self.size_bytes = position
        if position == 0:
            self.first_data_ms = None
        self.uncached_to = min(self.uncached_to, position)
        self.last_offset = offset - 1
        keep = bisect.bisect_left(self.index_offsets, offset)
        del self.index_offsets[keep:]
        del self.index_positions[keep:]
        self.time_index.truncate(offset)
        self.term_starts = [ts for ts in self.term_starts if ts[1] < offset]
        self.controls = [c for c in self.controls if c[0] < offset]
        if self.txns.involved:  # counted again over what is left
            self.txns.restart()
            for header, batch in self.batches():
                if header.flags & (TRANSACTIONAL | TXN_MARKER):
                    self.txns.note(header, batch)

    def batches(self) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Every batch of the segment, checked, read from its file in large chunks."""
        position, end = 0, self.size_bytes
        while position < end:
            view = memoryview(self.file.read_at(position, min(SCAN_CHUNK_BYTES, end - position)))
            at = 0
            while at < len(view):
                header = parse_header(view, at) if len(view) - at >= HEADER_BYTES else None
                if header is None or at + header.total_bytes > len(view):
                    if at == 0:  # a batch larger than a chunk: read exactly it
                        header = parse_header(self.file.read_at(position, HEADER_BYTES))
                        view = memoryview(self.file.read_at(position, header.total_bytes))
                        continue
                    break
                parse_batch(view, at)
                yield header, view[at : at + header.total_bytes]
                at += header.total_bytes
            position += at

    # The index file

    def index_file_bytes(self) -> bytes:
        body = bytearray(
            _INDEX_HEAD.pack(
                _INDEX_MAGIC,
                len(self.index_offsets),
                len(self.term_starts),
                len(self.time_index),
                len(self.controls),
                self.size_bytes,
                self.last_offset,
                self.max_timestamp_ms,
            )
        )
        body += self.index_offsets.tobytes()
        body += self.index_positions.tobytes()
        body += array("q", [v for ts in self.term_starts for v in ts]).tobytes()
        body += self.time_index.to_bytes()
        body += array("q", [v for c in self.controls for v in c]).tobytes()
        txns = self.txns.to_bytes()
        body += _TXNS_BYTES.pack(len(txns)) + txns
        body += _CRC.pack(crc32c(body))
        return bytes(body)

    def load_index_file(self, data: bytes) -> bool:
        """Adopt an index file if it is intact and matches the segment file; else False."""
        if len(data) < _INDEX_HEAD.size + _CRC.size:
            return False
        if crc32c(data[: -_CRC.size]) != _CRC.unpack_from(data, len(data) - _CRC.size)[0]:
            return False
        magic, n_index, n_terms, n_times, n_controls, size_bytes, last_offset, max_ts = (
            _INDEX_HEAD.unpack_from(data)
        )
        fixed_len = _INDEX_HEAD.size + 16 * (n_index + n_terms + n_times + n_controls)
        txns = SegmentTxns()
        if magic == _INDEX_MAGIC and len(data) >= fixed_len + _TXNS_BYTES.size + _CRC.size:
            (txns_len,) = _TXNS_BYTES.unpack_from(data, fixed_len)
            expected_len = fixed_len + _TXNS_BYTES.size + txns_len + _CRC.size
            at = fixed_len + _TXNS_BYTES.size
            txns = SegmentTxns.from_bytes(data[at : at + txns_len])
        elif magic == _INDEX_MAGIC_V3:
            expected_len = fixed_len + _CRC.size
        else:
            return False
        if txns is None or len(data) != expected_len or size_bytes != self.file.size():
            return False
        if n_index == 0 or n_terms == 0 or last_offset < self.base_offset:
            return False
        at = _INDEX_HEAD.size
        offsets = array("q", data[at : at + 8 * n_index])
        positions = array("q", data[at + 8 * n_index : at + 16 * n_index])
        flat = array("q", data[at + 16 * n_index : at + 16 * n_index + 16 * n_terms])
        terms = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        at += 16 * (n_index + n_terms)
        times = TimeIndex.from_bytes(data[at : at + 16 * n_times])
        at += 16 * n_times
        flat = array("q", data[at : at + 16 * n_controls])
        controls = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        if offsets[0] != self.base_offset or positions[0] != 0 or terms[0][1] != self.base_offset:
            return False
        if times is None or times.offsets != offsets or max(times.timestamps) > max_ts:
            return False
        if any(not self.base_offset <= c[0] <= last_offset for c in controls):
            return False
        self.index_offsets, self.index_positions, self.term_starts = offsets, positions, terms
        self.controls = controls
        self.txns = txns
        self.time_index = times
        self.size_bytes, self.last_offset, self.max_timestamp_ms = size_bytes, last_offset, max_ts
        return True
