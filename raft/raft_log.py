"""The log as a Raft core sees it (etcd's `raftLog`): the node's log, and in front of it
what the core appended or cut since the node last took its writes.

The core never writes the node's log. It places entries here (offsets and terms assigned once, the batches
patched once), cuts a conflicting suffix or starts the log again, and reads through this
one view: a leader replicates entries of this round from memory; a follower's copy of
older records (raft/backfill.py) waits here too. At the end of the round
the group actor takes the writes (`take_writes`, in the core's `Ready`) and applies them to
its log, then saves term and vote, then sends (storage rule 1); durability comes back later
as an input (`RaftCore.on_persisted`, which tells this view: `stable_to`).

It also holds the two positions Raft keeps of a log: how far it is durable (lowered by
its own cuts, so that a flush reported from before a cut vouches for nothing after it)
and how far it is committed.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from quorumlog.log.batch import BatchHeader, BatchType, check_continues, place_batches
from quorumlog.log.config import LogConfig
from quorumlog.log.tailcache import LogChunk, OffsetOutOfRangeError, TailCache, read_upto
from quorumlog.raft.storage import LogStorage


@dataclass(frozen=True, slots=True)
class LogWrites:
    """A round's changes to a log, in order: a cut (from `cut_from` on, or the whole log
    to start again there), the next chunks of a copy of older records, then whole placed
    batches."""

    cut_from: int | None
    reset: bool
    reset_records: int  # with `reset`: the data records before `cut_from`
    copy: BackfillWrite | None
    entries: list[tuple[BatchHeader, bytes | memoryview]]
    leader: bool  # placed by a leader: the log keeps them in memory for replicating

    def apply(self, log: LogStorage) -> None:
        if self.reset:
            log.reset(self.cut_from, self.reset_records)
        elif self.cut_from is not None:
            log.truncate_suffix(self.cut_from)
        if self.copy is not None:
            log.write_backfill(self.copy.start, self.copy.batches)
        if self.entries:
            log.append_placed(self.entries, keep_recent=self.leader)


@dataclass(slots=True)
class BackfillWrite:
    """The chunks of a copy of the records before the log's start taken this round."""

    start: int
    next_offset: int  # after them
    batches: list[tuple[BatchHeader, memoryview]]


class RaftLog:
    def __init__(self, stored: LogStorage):
        self.stored = stored
        self._copy: BackfillWrite | None = None
        self._clear()
        # The durable end, as the node's flusher last reported it (`stable_to`), lowered
        # by this log's own cuts: never read from the stored log behind the core's back.
        self.persisted = stored.flushed_offset
        # The highest offset known committed. A follower's is never above its own durable
        # end (I4); a leader's (or a former leader's) may be, when the majority that
        # flushed it did not include this node.
        self.committed = -1

    def stable_to(self, offset: int) -> int:
        """The flusher made the log durable up to `offset`: capped by this round's cut,
        not yet applied, so that a flush reported from before it does not vouch for the
        entries that replace the flushed ones. Returns the durable end."""
        self.persisted = min(offset, self.stored_end())
        return self.persisted

    def _clear(self) -> None:
        # The stored log loses everything from `_cut` on; with `_reset`, everything, and
        # starts again at `_cut`.
        self._cut: int | None = None
        self._reset = False
        self._reset_records = 0
        # The unstable entries, after the cut: in order, their base offsets, and kept for
        # reading as a leader's tail cache keeps them (whole batches at a time).
        self._entries: list[tuple[BatchHeader, bytes | memoryview]] = []
        self._bases: list[int] = []
        self._batches = TailCache(bytes_max=math.inf)
        self._leader = True

    def take_writes(self) -> LogWrites | None:
        """What to apply to the stored log now, in order; None: nothing."""
        if self._cut is None and not self._entries and self._copy is None:
            return None
        writes = LogWrites(
            self._cut, self._reset, self._reset_records, self._copy, self._entries, self._leader
        )
        self._clear()
        self._copy = None
        return writes

    # ----------------------------------------------------------------------- reading

    @property
    def config(self) -> LogConfig:
        return self.stored.config

    @property
    def log_start_offset(self) -> int:
        return self._cut if self._reset else self.stored.log_start_offset

    @property
    def dirty_offset(self) -> int:
        return self._entries[-1][0].last_offset if self._entries else self.stored_end()

    def stored_end(self) -> int:
        """The last offset of the stored log that is still ours: nothing after it can be
        durable yet (a cut not applied, entries not written)."""
        return self.stored.dirty_offset if self._cut is None else self._cut - 1

    @property
    def last_term(self) -> int:
        if self._entries:
            return self._entries[-1][0].term
        if self._cut is None:
            return self.stored.last_term
        end = self._cut - 1
        return 0 if self._reset or end < self.stored.log_start_offset else self.stored.term_at(end)

    def records_before(self, offset: int) -> int:
        """The record offset of a data record at `offset` (log/offsets.py): the stored
        log's count, then the unstable entries' data records."""
        if self._reset:
            base, records = self._cut, self._reset_records
        else:
            base = min(offset, self.stored_end() + 1)
            records = self.stored.records_before(base)
        for header, _ in self._entries:
            if header.base_offset >= offset:
                break
            if header.base_offset >= base and header.batch_type is BatchType.DATA:
                records += min(header.record_count, offset - header.base_offset)
        return records

    def _unstable_header(self, offset: int) -> BatchHeader | None:
        """The header of the unstable batch holding `offset`, if one does."""
        if not self._entries or offset < self._bases[0] or offset > self.dirty_offset:
            return None
        return self._entries[bisect.bisect_right(self._bases, offset) - 1][0]

    def _check_stored(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.stored_end():
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {self.log_start_offset}..{self.dirty_offset}"
            )

    def term_at(self, offset: int) -> int:
        header = self._unstable_header(offset)
        if header is not None:
            return header.term
        self._check_stored(offset)
        return self.stored.term_at(offset)

    def batch_start(self, offset: int) -> int:
        header = self._unstable_header(offset)
        if header is not None:
            return header.base_offset
        self._check_stored(offset)
        return self.stored.batch_start(offset)

    def last_offset_of_term(self, term: int) -> int | None:
        """Last offset whose term is at most `term` (Raft's fast back-off), or None."""
        for header, _ in reversed(self._entries):
            if header.term <= term:
                return header.last_offset
        if self._reset:
            return None
        found = self.stored.last_offset_of_term(term)
        if found is None or self._cut is None or found < self._cut:
            return found
        # Terms only grow along a log: all that is left before the cut qualifies.
        end = self._cut - 1
        return end if end >= self.stored.log_start_offset else None

    def recent_start_offset(self, bytes_min: int) -> int:
        return self.stored.recent_start_offset(bytes_min)

    def read(self, from_offset: int, bytes_max: int, upto_offset: int | None = None) -> LogChunk:
        """As the stored log's `read`: whole batches from the one holding `from_offset`,
        at least one, none past `upto_offset` (default: the end); a chunk ends where the
        stored part does."""
        upto = read_upto(from_offset, upto_offset, self.log_start_offset, self.dirty_offset)
        if from_offset > upto:
            return LogChunk(b"", from_offset - 1)
        if self._entries and from_offset >= self._bases[0]:
            chunk = self._batches.read(from_offset, bytes_max, upto)
            assert chunk is not None
            return chunk
        return self.stored.read(from_offset, bytes_max, min(upto, self.stored_end()))

    def backfill_next(self, start: int) -> int:
        """The next offset of a follower's copy from `start` of the records before its
        log's start (raft/backfill.py): `start` if none is under way."""
        if self._copy is not None and self._copy.start == start:
            return self._copy.next_offset
        return start if self._reset else self.stored.backfill_next(start)

    # ----------------------------------------------------------------------- writing

    def append(
        self,
        batches: Sequence[bytes | memoryview],
        term: int,
        headers: Sequence[BatchHeader] | None = None,
    ) -> int:
        """A leader's path: whole batches placed at the next offsets in `term`; returns
        the last offset."""
        self._add(place_batches(batches, self.dirty_offset + 1, term, headers), leader=True)
        return self.dirty_offset

    def append_replicated(self, batches: Sequence[tuple[BatchHeader, memoryview]]) -> None:
        """A follower's path: whole batches from the leader, already placed, continuing
        this log (`split_batches` checked them)."""
        self._add(batches, leader=False)

    def _add(self, placed: Sequence[tuple[BatchHeader, bytes | memoryview]], leader: bool) -> None:
        for header, batch in placed:
            self._entries.append((header, batch))
            self._bases.append(header.base_offset)
            self._batches.add(header.base_offset, header.last_offset, batch)
        self._leader = self._leader and leader

    def truncate_suffix(self, from_offset: int) -> None:
        """Drop the batch starting at `from_offset` and all after it (a Raft conflict)."""
        if from_offset > self.dirty_offset:
            return
        self.persisted = min(self.persisted, from_offset - 1)  # what was durable of them is gone
        if self._entries and from_offset >= self._bases[0]:
            self._batches.truncate(from_offset)
            while self._bases and self._bases[-1] >= from_offset:
                self._bases.pop()
                self._entries.pop()
            return
        self._check_stored(from_offset)  # raises after a reset: nothing stored is ours
        self._clear()
        self._cut = from_offset

    def backfill(self, start: int, batches: Sequence[tuple[BatchHeader, memoryview]]) -> int:
        """The next chunk of the copy from `start` to the log's start; returns its next
        offset (BatchError unless the batches continue the copy)."""
        next_offset = check_continues(batches, self.backfill_next(start), self.log_start_offset)
        if self._copy is None or self._copy.start != start:
            self._copy = BackfillWrite(start, start, [])
        self._copy.batches += batches
        self._copy.next_offset = next_offset
        return next_offset

    def reset(self, next_offset: int, records_before: int) -> None:
        """Drop everything and continue at `next_offset`, with `records_before` data records
        before it (a follower whose log is behind the leader's retained start)."""
        self._clear()
        self.persisted = min(self.persisted, next_offset - 1)
        self._copy = None  # it ended where the log started
        self._cut = next_offset
        self._reset = True
        self._reset_records = records_before
