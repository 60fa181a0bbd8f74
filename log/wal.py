"""The segmented write-ahead log: append, flush, read, truncate, retain, term lookups.

Positions: every batch takes as many as it has records, Raft's own batches one each; what
readers see are record offsets, which skip those (`records_before`, `position_of`:
log/offsets.py). The offsets below are positions.

Three offsets describe it: `log_start_offset` (first retained), `dirty_offset` (last
appended) and `flushed_offset` (last fsynced); -1 / start-1 when empty. Appends write to the
page cache on the caller's thread; `flush()` runs fsync through `run_sync` (a worker thread
in a node) and coalesces
everything appended meanwhile into the next one (group commit is the flusher's loop).

Invariants (checked on open, kept by every operation):
- segments are contiguous: each starts at the offset after the last of the one before;
- batch offsets are dense and terms never decrease along the log;
- log_start_offset <= flushed_offset + 1 and flushed_offset <= dirty_offset.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from quorumlog.log.backfill import Backfill
from quorumlog.log.batch import TXN_MARKER, BatchHeader, BatchType, place_batches, split_batches
from quorumlog.log.cleaner import (
    CleanerPass,
    CleanSummary,
    PassResult,
    cleanable_end,
    dirty_ratio,
    is_due,
)
from quorumlog.log.cleaner import drop_unfinished as drop_unfinished_pass
from quorumlog.log.cleaner_checkpoint import (
    CLEANER_CHECKPOINT_FILE,
    CleanerCheckpoint,
    read_checkpoint,
)
from quorumlog.log.config import LogConfig
from quorumlog.log.files import File, FileSystem
from quorumlog.log.flushjob import FlushJob, uncache_ranges
from quorumlog.log.loading import load_segments
from quorumlog.log.offsets import (
    RECORD_START_FILE,
    OffsetTranslator,
    read_record_start,
    write_record_start,
)
from quorumlog.log.segment import Segment, segment_file_name
from quorumlog.log.tailcache import (
    LogChunk,
    OffsetOutOfRangeError,
    TailBudget,
    TailCache,
    read_upto,
)
from quorumlog.log.timeindex import TimedOffset
from quorumlog.log.transactions import AbortedTxn, marker_of

logger = structlog.get_logger("quorumlog.log")

RunSync = Callable[..., Awaitable[Any]]


async def run_inline(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a blocking call on the event loop: for the in-memory disk in simulations."""
    return fn(*args)


def _base_offset(segment: Segment) -> int:
    return segment.base_offset


class Log:
    """One node's log. Not thread-safe: one owner calls it; only fsync leaves the loop."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        config: LogConfig,
        run_sync: RunSync,
        tail_budget: TailBudget | None = None,
    ):
        self._fs = fs
        self._dir = directory
        self._config = config
        self._run_sync = run_sync
        self._segments: list[Segment] = []
        self._flushed_offset = -1
        self._unsynced: set[Segment] = set()  # segments with writes not yet fsynced
        self._unindexed: list[Segment] = []  # sealed segments whose index file is not written
        self._dir_dirty = False
        self._truncations = 0  # bumped by every suffix truncation (storage rule 3)
        self._flushing = False
        self._retired: list[File] = []  # files of removed segments, closed after a flush
        self._tail = TailCache(budget=tail_budget)  # the node's budget bounds them all
        self._backfill: Backfill | None = None  # records before the start, being copied in
        self._offsets = OffsetTranslator()
        # The cleaner's: where its last pass ended (what follows is the dirty part; the
        # whole log after a restart), when a tombstone it kept may go, and what it did.
        self.cleaned_to = 0
        self.tombstones_due_ms: int | None = None  # when a tombstone it kept may go
        self.last_clean: CleanSummary | None = None
        self._checkpoint_due = False  # the next flush writes the cleaner's progress
        self._record_start_path = os.path.join(directory, RECORD_START_FILE)

    # Opening

    @classmethod
    def open(
        cls,
        fs: FileSystem,
        directory: str,
        config: LogConfig | None = None,
        *,
        run_sync: RunSync,
        repair: bool = False,
        tail_budget: TailBudget | None = None,
    ) -> Log:
        """Open (or create) the log in `directory`, recovering a torn tail.

        A damaged batch with valid data after it, a missing segment, or damage in a sealed
        segment raises CorruptionError naming the file and position, and deletes nothing.
        With `repair=True` the log is cut at the damage instead (dangerous: data after it
        is lost on this node).
        """
        log = cls(fs, directory, config or LogConfig(), run_sync, tail_budget)
        fs.makedirs(directory)
        loaded = load_segments(fs, directory, log._config, repair)
        log._segments = loaded.segments or [log._create_segment(0)]
        log._unindexed = loaded.unindexed
        # What a previous process wrote may still be only in the page cache: make it
        # durable now, so that flushed_offset can start at dirty_offset.
        for segment in log._segments:
            segment.file.fsync()
        fs.fsync_dir(directory)
        log._flushed_offset = log.dirty_offset
        log._offsets = log._load_translator()
        log._load_cleaner_checkpoint()
        return log

    def _load_cleaner_checkpoint(self) -> None:
        checkpoint = read_checkpoint(self._fs, os.path.join(self._dir, CLEANER_CHECKPOINT_FILE))
        if checkpoint is not None and checkpoint.holds_for(self.log_start_offset):
            self.cleaned_to = min(checkpoint.cleaned_to, self.dirty_offset + 1)
            self.tombstones_due_ms = checkpoint.tombstones_due_ms

    def _load_translator(self) -> OffsetTranslator:
        """The control batches of every segment, and the records before the first one's
        base: from the record start file, written before the start last moved forward,
        counted back over what the log still holds before that position (a drop or a copy
        of older records the file does not describe yet). A log without the file started at
        position 0, or was written before record offsets: its first position then counts as
        that many records (what it dropped before cannot be told)."""
        start = self.log_start_offset
        written = read_record_start(self._fs, self._record_start_path)
        position, records = written if written is not None else (start, start)
        translator = OffsetTranslator(position, records)
        controls = [c for s in self._segments for c in s.controls]
        # Controls between the log's start and the file's position: counted back.
        before = [c for c in controls if c[0] < position]
        if start < position:
            translator.prepend(start, before)
        else:
            translator.trim(start)
        for offset, width in controls[len(before) :]:
            translator.add_control(offset, width)
        return translator

    # Offsets and terms

    @property
    def config(self) -> LogConfig:
        return self._config

    def can_drop_before(self, offset: int) -> bool:
        """Whether a whole segment (not the last) lies before `offset`."""
        return len(self._segments) > 1 and self._segments[0].last_offset < offset

    def reconfigure(self, config: LogConfig) -> None:
        """A topic's settings changed (retention, segment size, ...): they hold from the
        next append and the next retention pass; what is written stays as it is."""
        self._config = config

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def dirty_offset(self) -> int:
        return self._segments[-1].last_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def truncations(self) -> int:
        """Suffix truncations so far: a flush begun before the last one made durable only
        what lies before it."""
        return self._truncations

    @property
    def last_term(self) -> int:
        for segment in reversed(self._segments):
            if segment.last_term is not None:
                return segment.last_term
        return 0

    @property
    def unflushed(self) -> bool:
        """Whether a flush has anything to do (appends, truncations, new files)."""
        return self.dirty_offset > self._flushed_offset or bool(
            self._unsynced
            or self._unindexed
            or self._dir_dirty
            or self._splice_due
            or self._checkpoint_due
        )

    @property
    def retains_all(self) -> bool:
        config = self._config
        return (
            not config.deletes or (config.retention_bytes is None and config.retention_ms is None)
        ) and not config.compact_to_snapshots

    @property
    def segment_count(self) -> int:
        """Its segments, each an open file while the log is."""
        return len(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    def records_before(self, offset: int) -> int:
        """The record offset of a data record at `offset`: the data records before it."""
        return self._offsets.records_before(offset)

    def position_of(self, record: int) -> int:
        """The offset of the record `record` (past the end: where it would be placed if
        only data came before it)."""
        return self._offsets.position_of(record)

    def offset_map(self) -> dict:
        """What `records_before` and `position_of` go by, in msgpack's types."""
        return self._offsets.to_wire()

    # Transactions (log/transactions.py)

    def open_transactions(self) -> dict[int, int]:
        """The transactions open at the log's end: producer -> position of its first batch."""
        return self._segments[-1].txns.open

    def first_unstable(self, commit_offset: int) -> int:
        """The first position a read_committed reader may not read yet (Kafka's last stable
        offset): the first batch of the earliest transaction still open after
        `commit_offset` (its marker unwritten or not committed), else `commit_offset + 1`.
        The markers after `commit_offset` are read from the log's uncommitted tail, which
        is short, and only where transactions touch it."""
        stable = commit_offset + 1
        firsts = list(self.open_transactions().values())
        tail = [s for s in self._segments if s.last_offset >= stable]
        offset = stable if any(s.txns.involved for s in tail) else self.dirty_offset + 1
        while offset <= self.dirty_offset:
            chunk = self.read(offset, 1 << 20)
            for header, batch in split_batches(chunk.data):
                if header.flags & TXN_MARKER and header.base_offset >= stable:
                    firsts.append(marker_of(batch, header).first)
            offset = chunk.last_offset + 1
        return min([stable, *(f for f in firsts if f >= 0)])

    def aborted_between(self, first: int, last: int) -> list[AbortedTxn]:
        """The aborted transactions with batches between positions `first` and `last` (what
        a read_committed reader of them drops), in the order of their markers. A marker
        past `last` ends a transaction begun by then only if that transaction was open
        where the marker's segment starts: the walk stops at a segment with none."""
        out = []
        for segment in self._segments:
            if segment.last_offset < first:
                continue
            if segment.base_offset > last and all(
                began > last for began in segment.txns.open_at_start.values()
            ):
                break
            out += [a for a in segment.txns.aborted if a.marker >= first and a.first <= last]
        return out

    def term_at(self, offset: int) -> int:
        """Term of the batch holding `offset`."""
        return self._segment_holding(offset).term_at(offset)

    def recent_start_offset(self, bytes_min: int) -> int:
        """Base offset of the oldest of the newest segments that hold `bytes_min` bytes."""
        held = 0
        for segment in reversed(self._segments):
            held += segment.size_bytes
            if held >= bytes_min:
                return segment.base_offset
        return self.log_start_offset

    def offset_for_time(
        self, timestamp_ms: int, upto_offset: int | None = None, from_offset: int = 0
    ) -> TimedOffset | None:
        """The first data record stamped at or after `timestamp_ms`, none before
        `from_offset` (a reader's start) nor past `upto_offset` (default: the dirty offset):
        in the first segment whose records reach that time, by its time index. None when
        no record there does."""
        upto = self.dirty_offset if upto_offset is None else min(upto_offset, self.dirty_offset)
        for segment in self._segments:
            if segment.base_offset > upto:
                break
            if segment.last_offset < from_offset:
                continue
            found = segment.offset_for_time(timestamp_ms, upto, from_offset)
            if found is not None:
                return found
        return None

    def batch_start(self, offset: int) -> int:
        """Base offset of the batch holding `offset`."""
        return self._segment_holding(offset).position_of(offset)[1].base_offset

    def last_offset_of_term(self, term: int) -> int | None:
        """Last offset whose term is at most `term` (Raft's fast back-off), or None."""
        for i in range(len(self._segments) - 1, -1, -1):
            segment = self._segments[i]
            starts = segment.term_starts
            j = bisect.bisect_right(starts, term, key=lambda ts: ts[0])
            if j == 0:
                continue
            if j < len(starts):
                return starts[j][1] - 1
            return segment.last_offset
        return None

    def _segment_holding(self, offset: int) -> Segment:
        if offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is before the log start {self.log_start_offset}"
            )
        if offset > self.dirty_offset:
            raise OffsetOutOfRangeError(f"offset {offset} is past the log end {self.dirty_offset}")
        last = self._segments[-1]
        if offset >= last.base_offset:
            return last  # the active segment: most reads
        i = bisect.bisect_right(self._segments, offset, key=_base_offset) - 1
        return self._segments[i]

    # Appending

    def append(
        self,
        batches: Sequence[bytes | memoryview],
        term: int,
        headers: Sequence[BatchHeader] | None = None,
    ) -> int:
        """Place whole batches at the next offsets in `term` (a leader's path); returns
        dirty. `headers`, when the caller parsed them already, saves parsing them again."""
        return self.append_placed(place_batches(batches, self.dirty_offset + 1, term, headers))

    def append_placed(
        self,
        placed: Sequence[tuple[BatchHeader, bytes | memoryview]],
        keep_recent: bool = True,
    ) -> int:
        """Whole batches that already carry their offsets and terms, which must continue
        this log exactly. `keep_recent`: a leader's, kept in memory for replicating them
        (a follower's replace what was kept). Returns dirty."""
        expected_offset = self.dirty_offset + 1
        expected_term = self.last_term
        for header, _ in placed:
            if header.base_offset != expected_offset:
                raise ValueError(
                    f"batch at offset {header.base_offset}, expected {expected_offset}"
                )
            if header.term < expected_term:
                raise ValueError(f"batch of term {header.term} after term {expected_term}")
            expected_offset = header.last_offset + 1
            expected_term = header.term
        self._write(placed)
        if keep_recent:
            for header, batch in placed:
                self._tail.add(header.base_offset, header.last_offset, batch)
        else:
            self._tail.clear()
        return self.dirty_offset

    def _write(self, placed: Sequence[tuple[BatchHeader, bytes | memoryview]]) -> None:
        active = self._segments[-1]
        pending: list[bytes | memoryview] = []
        position = active.size_bytes
        for header, batch in placed:
            if position > 0 and (
                position + header.total_bytes > self._config.segment_bytes_max
                or self._aged(active, header)
            ):
                self._append_to(active, pending)
                active = self._roll(header.base_offset)
                pending, position = [], 0
            pending.append(batch)
            active.note_batch(header, position, batch)
            if header.batch_type is not BatchType.DATA:
                self._offsets.add_control(header.base_offset, header.record_count)
            position += header.total_bytes
        self._append_to(active, pending)

    def _aged(self, segment: Segment, header: BatchHeader) -> bool:
        """Whether `header`'s batch is stamped segment.ms or more after the first records of
        `segment`: it then starts a new one, so that a log written slowly still closes
        segments (the cleaner compacts only closed ones). Record time, as Kafka's roll goes
        by: every replica rolls at the same batch."""
        first = segment.first_data_ms
        return (
            first is not None
            and header.batch_type is BatchType.DATA
            and header.timestamp_ms - first >= self._config.segment_ms
        )

    def _append_to(self, segment: Segment, pending: list[bytes | memoryview]) -> None:
        if pending:
            segment.file.append(b"".join(pending))
            self._unsynced.add(segment)

    def _roll(self, base_offset: int) -> Segment:
        sealed = self._segments[-1]
        self._unindexed.append(sealed)
        segment = self._create_segment(base_offset, sealed.txns.open)
        self._segments.append(segment)
        return segment

    def _create_segment(self, base_offset: int, open_txns: dict[int, int] | None = None) -> Segment:
        # Created empty under its final name: it holds nothing durable until the next flush
        # fsyncs it and the directory, so a crash before that loses only unflushed data.
        path = os.path.join(self._dir, segment_file_name(base_offset))
        segment = Segment(
            self._fs,
            path,
            base_offset,
            self._fs.open(path, create=True),
            self._config.index_interval_bytes,
            open_txns,
        )
        self._dir_dirty = True
        self._unsynced.add(segment)
        return segment

    # Flushing

    async def flush(self) -> int:
        """fsync everything appended so far (through `run_sync`); returns flushed_offset.
        A node's flusher does the same for many logs at once (`begin_flush`, `end_flush`)."""
        job = self.begin_flush()
        try:
            await self._run_sync(job.run)
        except BaseException:
            self.end_flush(job, durable=False)
            raise
        return self.end_flush(job, durable=True)

    def begin_flush(self) -> FlushJob:
        """Take what is to be made durable now; `job.run()` (blocking) syncs it."""
        assert not self._flushing, "one flush at a time: the flusher owns it"
        splice = self._backfill.splice() if self._splice_due else None
        files = [s.file for s in self._unsynced]
        self._unsynced.clear()
        indexes = [(s.index_path, s.index_file_bytes()) for s in self._unindexed]
        self._unindexed.clear()
        if self._checkpoint_due:  # after the folder's fsync, as the indexes: see its module
            indexes.append((os.path.join(self._dir, CLEANER_CHECKPOINT_FILE), self._checkpoint()))
            self._checkpoint_due = False
        sync_dir = self._dir_dirty or bool(indexes)
        self._dir_dirty = False
        self._flushing = True
        return FlushJob(
            self._fs,
            self._dir,
            self.dirty_offset,
            self._truncations,
            files,
            indexes,
            sync_dir,
            uncache_ranges(
                self._segments,
                self._config.page_cache_window_bytes,
                self._config.segment_bytes_max,
            ),
            splice,
        )

    def end_flush(self, job: FlushJob, durable: bool) -> int:
        """After `job.run()`: the flushed offset moves to the job's target unless a
        truncation happened meanwhile, which makes its result void (storage rule 3)."""
        self._flushing = False
        for f in self._retired:
            f.close()
        self._retired.clear()
        if durable and job.truncations == self._truncations and job.target > self._flushed_offset:
            self._flushed_offset = job.target
        if job.splice is not None and durable:
            self._end_backfill()
        return self._flushed_offset

    # Copying in the records before the start (log/backfill.py)

    def _copy_from(self, start: int) -> Backfill:
        """The copy of the offsets from `start` to this log's start, begun now unless one
        of exactly those is under way."""
        copy = self._backfill
        if self._splice_due:
            return copy  # done: the next flush moves it in
        if copy is None or copy.start != start or copy.end != self.log_start_offset:
            if copy is not None:
                copy.discard()
            copy = self._backfill = Backfill(
                self._fs, self._dir, start, self.log_start_offset, self._config
            )
        return copy

    def backfill_next(self, start: int) -> int:
        """The next offset of the copy from `start` under way (`start`: none is); a copy
        done, waiting for the flush that moves it in, answers its end, whatever `start`."""
        copy = self._backfill
        if self._splice_due:
            return copy.end
        if copy is None or copy.start != start or copy.end != self.log_start_offset:
            return start
        return copy.next_offset

    def write_backfill(self, start: int, batches: Sequence[tuple[BatchHeader, memoryview]]) -> None:
        """The next batches of the copy from `start` (BatchError unless they continue it)."""
        self._copy_from(start).write(batches)

    @property
    def _splice_due(self) -> bool:
        copy = self._backfill
        return copy is not None and copy.complete and copy.end == self.log_start_offset

    def _end_backfill(self) -> None:
        """The copy's files moved into the log's folder: they become its first segments.
        A reset meanwhile started the log elsewhere: what was moved in is removed."""
        copy, self._backfill = self._backfill, None
        segments = copy.spliced_segments()
        if copy.end != self.log_start_offset:
            for segment in segments:
                self._remove_segment(segment)
            return
        self._segments[:0] = segments
        self.cleaned_to = 0  # what was copied in is not cleaned here
        self._checkpoint_due = self._config.compacts
        self._offsets.prepend(copy.start, [c for s in segments for c in s.controls])
        self._unindexed.extend(segments)  # their index files are written by the next flush
        logger.info("log_backfilled", directory=self._dir, log_start_offset=copy.start)

    # Compaction (log/cleaner.py)

    def _checkpoint(self) -> bytes:
        return CleanerCheckpoint(
            self.log_start_offset, self.cleaned_to, self.tombstones_due_ms
        ).to_bytes()

    def dirty_share(self) -> float:
        """The share of its closed segments written since the cleaner's last pass."""
        return dirty_ratio(self._segments, self.cleaned_to, self._segments[-1].base_offset)

    def dirty_since_ms(self) -> int | None:
        """The newest timestamp of the oldest closed segment no pass has cleaned (None: all
        closed ones are clean): how far behind the cleaner is."""
        for segment in self._segments[:-1]:
            if segment.base_offset >= self.cleaned_to and segment.max_timestamp_ms >= 0:
                return segment.max_timestamp_ms
        return None

    def plan_clean(self, commit_offset: int, now_ms: int) -> CleanerPass | None:
        """The next pass of the cleaner over this log, if one is due; it cleans no further
        than what is committed and durable here, nor into the active segment."""
        limit = min(commit_offset, self._flushed_offset)
        end = cleanable_end(self._segments, limit, now_ms, self._config)
        dirty_from = max(self.cleaned_to, self.log_start_offset)
        tombstones_due = self.tombstones_due_ms is not None and self.tombstones_due_ms <= now_ms
        if not tombstones_due and not is_due(self._segments, dirty_from, end, now_ms, self._config):
            return None
        segments = [s for s in self._segments if s.base_offset < end]
        return CleanerPass(self._fs, self._dir, self._config, segments, dirty_from, end, now_ms)

    def adopt_cleaned(self, result: PassResult, now_ms: int) -> None:
        """The pass's segments take the places of those they rewrote; one whose old segment
        left the log meanwhile (retention, a reset) is dropped. Their index files are
        written, and the folder synced, by the next flush."""
        self.cleaned_to = max(self.cleaned_to, result.end)
        self.tombstones_due_ms = result.tombstones_due_ms
        self._checkpoint_due = True
        self.last_clean = CleanSummary(now_ms, result.bytes_reclaimed, result.records_removed)
        for cleaned in result.cleaned:
            old, new = cleaned.old, cleaned.new
            at = next((i for i, s in enumerate(self._segments) if s is old), None)
            if at is None:
                new.file.close()
                continue
            self._remove_index_file(old)
            self._fs.rename(new.path, old.path)
            new.moved_to(old.path)
            self._segments[at] = new
            self._unsynced.discard(old)
            if old in self._unindexed:
                self._unindexed.remove(old)
            self._unindexed.append(new)
            self._retire(old.file)
            self._tail.drop_before(new.last_offset + 1)  # it may hold what was taken out
        self._dir_dirty = True
        drop_unfinished_pass(self._fs, self._dir)

    # Reading

    def read(self, from_offset: int, bytes_max: int, upto_offset: int | None = None) -> LogChunk:
        """Whole batches from the one holding `from_offset`: at most `bytes_max` bytes but at
        least one batch, none past `upto_offset` (default: the dirty offset). Empty when
        `from_offset` is past the end; OffsetOutOfRangeError before the log start."""
        upto = read_upto(from_offset, upto_offset, self.log_start_offset, self.dirty_offset)
        if from_offset > upto:
            return LogChunk(b"", from_offset - 1)
        cached = self._tail.read(from_offset, bytes_max, upto)
        if cached is not None:
            return cached
        return LogChunk(*self._segment_holding(from_offset).read(from_offset, bytes_max, upto))

    # Truncation and retention

    def truncate_suffix(self, from_offset: int) -> None:
        """Remove the batch starting at `from_offset` and all after it (a Raft conflict)."""
        if from_offset > self.dirty_offset:
            return
        if from_offset < self.log_start_offset:
            raise OffsetOutOfRangeError(
                f"cannot truncate from {from_offset}: before the log start {self.log_start_offset}"
            )
        while len(self._segments) > 1 and self._segments[-1].base_offset >= from_offset:
            self._remove_segment(self._segments.pop())
        segment = self._segments[-1]
        if from_offset <= segment.last_offset:
            segment.truncate_from(from_offset)
        self._unsynced.add(segment)
        self._remove_index_file(segment)
        self._tail.truncate(from_offset)
        self._offsets.truncate(from_offset)
        self._truncations += 1
        self._flushed_offset = min(self._flushed_offset, from_offset - 1)
        logger.info("log_truncated", from_offset=from_offset, dirty_offset=self.dirty_offset)

    def truncate_prefix(self, offset: int) -> int:
        """Drop whole segments that lie entirely before `offset`; returns log_start_offset."""
        drop = 0
        while drop < len(self._segments) - 1 and self._segments[drop].last_offset < offset:
            drop += 1
        self._drop_first(drop)
        return self.log_start_offset

    def apply_retention(self, now_ms: int, keep_from_offset: int | None = None) -> int:
        """Drop the oldest sealed segments beyond the byte and age limits, but none that
        holds `keep_from_offset` or later; returns the log start. A log whose policy is
        compaction alone keeps everything (its cleaner keeps each key's latest)."""
        config = self._config
        if not config.deletes:
            return self.log_start_offset
        open_txns = self.open_transactions()
        if open_txns:  # a transaction's records stay until it ends
            oldest = min(open_txns.values())
            keep_from_offset = oldest if keep_from_offset is None else min(oldest, keep_from_offset)
        drop, size = 0, self.size_bytes
        while drop < len(self._segments) - 1:
            oldest = self._segments[drop]
            if keep_from_offset is not None and oldest.last_offset >= keep_from_offset:
                break
            too_big = config.retention_bytes is not None and size > config.retention_bytes
            too_old = (
                config.retention_ms is not None
                and oldest.max_timestamp_ms < now_ms - config.retention_ms
            )
            if not (too_big or too_old):
                break
            drop += 1
            size -= oldest.size_bytes
        self._drop_first(drop)
        return self.log_start_offset

    def _drop_first(self, count: int) -> None:
        """Remove the first `count` segments, once the records before the new start are
        durably counted (nothing left in the log could tell them after)."""
        if count == 0:
            return
        start = self._segments[count].base_offset
        write_record_start(self._fs, self._record_start_path, start, self.records_before(start))
        for segment in self._segments[:count]:
            self._remove_segment(segment)
        del self._segments[:count]
        self._offsets.trim(start)

    def reset(self, next_offset: int, records_before: int) -> None:
        """Drop everything and continue at `next_offset`, with `records_before` data records
        before it (a follower whose log is behind the leader's retained start)."""
        write_record_start(self._fs, self._record_start_path, next_offset, records_before)
        self.truncate_suffix(self.log_start_offset)
        old = self._segments.pop()
        self._remove_segment(old)
        self._segments.append(self._create_segment(next_offset))
        self.cleaned_to = 0
        self._checkpoint_due = self._config.compacts
        self._offsets.reset(next_offset, records_before)
        self._truncations += 1
        self._flushed_offset = min(self._flushed_offset, next_offset - 1)

    def _remove_segment(self, segment: Segment) -> None:
        self._fs.remove(segment.path)
        self._remove_index_file(segment)
        self._unsynced.discard(segment)
        if segment in self._unindexed:
            self._unindexed.remove(segment)
        self._dir_dirty = True
        self._retire(segment.file)

    def _retire(self, file: File) -> None:
        if self._flushing:
            self._retired.append(file)  # a worker thread may be fsyncing it
        else:
            file.close()

    def _remove_index_file(self, segment: Segment) -> None:
        if self._fs.exists(segment.index_path):
            self._fs.remove(segment.index_path)
            self._dir_dirty = True

    def close(self) -> None:
        self._tail.clear()
        if self._backfill is not None:
            self._backfill.discard()
        for segment in self._segments:
            segment.file.close()
        self._segments.clear()
