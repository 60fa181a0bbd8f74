"""The cleaner of a compacted log (cleanup.policy=compact): closed segments rewritten to keep
each key's latest record, every offset where it was.

A pass over one log, as Kafka's cleaner makes it:
1. Its end (`cleanable_end`): nothing from the first uncommitted offset on, nothing of the
   active segment, nothing of a segment holding a record younger than min.compaction.lag.ms.
2. The key map: for the part written since the last pass (the dirty part), each key's latest
   offset, keyed by the key itself when short and by a 16-byte digest of it when not, so that
   an entry has a bounded size. When the dirty part holds more keys than the map may (the
   dedupe buffer), the pass ends after the last whole segment that fits, and the next one
   goes on from there.
3. Every segment from the log's start to that end is rewritten: a record whose key the map
   holds at a later offset goes; a tombstone (a key and no value) goes once it is older
   than delete.retention.ms; Raft's control batches and records without a key stay. A
   batch that lost records becomes a COMPACTED batch (log/batch.py) spanning the same
   offsets in the same term, empty if it kept none; one that lost nothing is copied as it
   is. Batches are never merged: a follower's log ends where one of its leader's batches
   ends (Raft appends whole batches), and a leader whose batch began before that end
   could not continue it (simulation seed 20003 of the compact kind).
4. Each new segment is written in a side folder and fsynced; the log's owner then renames it
   over the old one (`Log.adopt_cleaned`) and its next flush syncs the folder. A crash leaves
   the old file or the new, both whole: a rewrite only keeps a segment that shrank, so the
   other file's index (which records the size of its segment) is never taken for its own.
   An unfinished side folder is deleted when the log opens.

Only committed records are cleaned, and every replica cleans its own copy by the same rules:
once each has cleaned as far, they hold the same records (the simulation checks it).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from quorumlog.log.batch import (
    TRANSACTIONAL,
    BatchType,
    parse_header,
)
from quorumlog.log.config import LogConfig
from quorumlog.log.files import FileSystem
from quorumlog.log.records import KeyedEntry, keyed_entries, make_compacted_batch, offset_records
from quorumlog.log.segment import Segment, segment_file_name

CLEANING_DIR = "cleaning"
# A key map entry: a dict slot, a key of at most 16 bytes (or its digest) and an int.
KEY_ENTRY_BYTES = 100
_DIGEST_FROM = 16  # shorter keys are their own entry; a digest is 16 bytes, never shorter


def _digest(key: bytes) -> bytes:
    """A long key's entry in the key map (a short key is its own: inlined where it counts)."""
    return hashlib.blake2b(key, digest_size=16).digest()


def drop_unfinished(fs: FileSystem, log_dir: str) -> None:
    """A pass a crash cut short: its segments were never adopted."""
    folder = os.path.join(log_dir, CLEANING_DIR)
    if fs.exists(folder):
        fs.remove_tree(folder)


def cleanable_end(
    segments: list[Segment], commit_offset: int, now_ms: int, config: LogConfig
) -> int:
    """The offset a pass may clean up to (exclusive): the base of the first segment that is
    the active one, holds anything uncommitted, or holds a record younger than the lag."""
    for segment in segments[:-1]:
        if segment.last_offset > commit_offset:
            return segment.base_offset
        if segment.max_timestamp_ms > now_ms - config.min_compaction_lag_ms:
            return segment.base_offset
    return segments[-1].base_offset


def dirty_ratio(segments: list[Segment], dirty_from: int, end: int) -> float:
    """The share of the cleanable bytes written since the last pass ended at `dirty_from`."""
    total = dirty = 0
    for segment in segments:
        if segment.base_offset >= end:
            break
        total += segment.size_bytes
        if segment.base_offset >= dirty_from:
            dirty += segment.size_bytes
    return dirty / total if total else 0.0


def is_due(
    segments: list[Segment], dirty_from: int, end: int, now_ms: int, config: LogConfig
) -> bool:
    """Whether a pass is due: enough of the log is dirty, or its oldest dirty segment's
    records are all older than max.compaction.lag.ms."""
    dirty = [s for s in segments if dirty_from <= s.base_offset < end]
    if not dirty:
        return False
    if dirty_ratio(segments, dirty_from, end) >= config.min_cleanable_dirty_ratio:
        return True
    lag = config.max_compaction_lag_ms
    return lag is not None and dirty[0].max_timestamp_ms < now_ms - lag


@dataclass(frozen=True, slots=True)
class CleanSummary:
    """A log's last pass, for `topic describe` and the console."""

    at_ms: int
    bytes_reclaimed: int
    records_removed: int


@dataclass(slots=True)
class CleanedSegment:
    """A rewritten segment in the side folder, fsynced, to take the place of `old`."""

    old: Segment
    new: Segment


@dataclass(slots=True)
class PassResult:
    end: int  # the offset the pass cleaned up to (exclusive): the next one's dirty part starts here
    cleaned: list[CleanedSegment] = field(default_factory=list)
    # When the first tombstone it kept may go (None: it kept none): a pass is due then,
    # however clean the log (Kafka's delete horizon).
    tombstones_due_ms: int | None = None
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0

    @property
    def bytes_reclaimed(self) -> int:
        return sum(c.old.size_bytes - c.new.size_bytes for c in self.cleaned)


@dataclass(slots=True)
class CleanerPass:
    """One pass over a log, planned by its owner (`Log.plan_clean`) and run, blocking, on a
    storage thread: it reads only closed segments, which nothing writes while it runs (a
    segment retention drops meanwhile is not adopted)."""

    fs: FileSystem
    log_dir: str
    config: LogConfig
    segments: list[Segment]  # from the log's start to `end`
    dirty_from: int
    end: int
    now_ms: int
    # Called with the bytes of every batch read or written: a node's holds the pass to the
    # cleaner's I/O budget (it runs on a storage thread; the simulation's runs inline).
    throttle: Callable[[int], None] = lambda size: None

    def run(self) -> PassResult:
        keys, end, read = self._key_map()
        result = PassResult(end, bytes_read=read)
        folder = os.path.join(self.log_dir, CLEANING_DIR)
        drop_unfinished(self.fs, self.log_dir)
        self.fs.makedirs(folder)
        for segment in self.segments:
            if segment.base_offset >= end:
                break
            new = self._rewrite(segment, keys, folder, result)
            if new.size_bytes < segment.size_bytes:
                new.file.fsync()
                result.cleaned.append(CleanedSegment(segment, new))
            else:  # nothing to take out: the old one stays
                new.file.close()
                self.fs.remove(new.path)
        self.fs.fsync_dir(folder)
        return result

    def _key_map(self) -> tuple[dict[bytes, int], int, int]:
        """Each key's latest offset in the dirty part, as far as whole segments fit in the
        dedupe buffer (the first always does), the end it reached, and the bytes read."""
        keys_max = max(1, self.config.cleaner_dedupe_buffer_bytes // KEY_ENTRY_BYTES)
        keys: dict[bytes, int] = {}
        read = 0
        for segment in self.segments:
            if segment.base_offset < self.dirty_from:
                continue
            if segment.base_offset >= self.end:
                break
            found: dict[bytes, int] = {}
            for header, batch in segment.batches():
                self.throttle(header.total_bytes)
                if header.batch_type is BatchType.DATA:
                    for offset, key, _, _ in keyed_entries(batch, header):
                        if key is not None:
                            found[key if len(key) < _DIGEST_FROM else _digest(key)] = offset
            if keys and len(keys.keys() | found.keys()) > keys_max:
                return keys, segment.base_offset, read
            keys.update(found)
            read += segment.size_bytes
        return keys, self.end, read

    def _rewrite(
        self, segment: Segment, keys: dict[bytes, int], folder: str, result: PassResult
    ) -> Segment:
        path = os.path.join(folder, segment_file_name(segment.base_offset))
        new = Segment(
            self.fs,
            path,
            segment.base_offset,
            self.fs.open(path, create=True),
            self.config.index_interval_bytes,
            open_txns=segment.txns.open_at_start,
        )
        for header, batch in segment.batches():
            self.throttle(header.total_bytes)
            result.bytes_read += header.total_bytes
            if header.batch_type is BatchType.DATA:
                entries = keyed_entries(batch, header)
                gone = {e[0] for e in entries if not self._keeps(e, keys, result)}
                if gone:  # only now are its records decoded
                    result.records_removed += len(gone)
                    kept = [(at, r) for at, r in offset_records(batch, header) if at not in gone]
                    span = header.record_count
                    transactional = header.flags & TRANSACTIONAL
                    batch = make_compacted_batch(
                        kept,
                        header.base_offset,
                        span,
                        header.term,
                        header.producer_id if transactional else -1,
                    )
                    header = parse_header(batch)
            new.file.append(batch)
            new.note_batch(header, new.size_bytes, batch)
        result.bytes_written += new.size_bytes
        return new

    def _keeps(self, entry: KeyedEntry, keys: dict[bytes, int], result: PassResult) -> bool:
        offset, key, tombstone, timestamp_ms = entry
        if key is None:
            return True  # written before the topic compacted: nothing says what replaced it
        if keys.get(key if len(key) < _DIGEST_FROM else _digest(key), offset) > offset:
            return False  # a later record of its key is in the log
        if tombstone:  # the latest of its key, a tombstone: kept for a while
            due_ms = timestamp_ms + self.config.delete_retention_ms
            if due_ms <= self.now_ms:
                return False
            if result.tombstones_due_ms is None or due_ms < result.tombstones_due_ms:
                result.tombstones_due_ms = due_ms
        return True
