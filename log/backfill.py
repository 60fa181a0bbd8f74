"""The records before a log's start, copied in from the leader: how a witness, which holds
only the log's tail (seed 000's appendix), becomes a full replica before it may lead.

The copy is written to segment files of its own in a side folder, without fsyncs (the
records are committed and held by a majority, so losing the copy in a crash costs only
its time). Once the last record arrived, one flush makes the files durable and moves them
into the log's folder, newest first, syncing the folder after each move: at every point
the log's folder holds contiguous segments, the log starting at the lowest one moved so
far. A copy cut short by a crash is dropped when the log opens; the leader starts it again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from quorumlog.log.batch import BatchHeader, check_continues
from quorumlog.log.config import LogConfig
from quorumlog.log.files import File, FileSystem
from quorumlog.log.segment import Segment, segment_file_name

BACKFILL_DIR = "backfill"


def drop_unfinished(fs: FileSystem, log_dir: str) -> None:
    """A copy a crash cut short: the leader sends it again."""
    folder = os.path.join(log_dir, BACKFILL_DIR)
    if fs.exists(folder):
        fs.remove_tree(folder)


@dataclass(slots=True)
class Splice:
    """The blocking part of finishing a copy (run by a flush, on a storage thread)."""

    fs: FileSystem
    folder: str
    log_dir: str
    files: list[File]
    moves: list[tuple[str, str]]  # (from, to), newest segment first

    def run(self) -> None:
        for f in self.files:
            f.fsync()
        self.fs.fsync_dir(self.folder)
        for src, dst in self.moves:
            self.fs.rename(src, dst)
            self.fs.fsync_dir(self.log_dir)
        self.fs.remove_tree(self.folder)


class Backfill:
    """A copy of the offsets [start, end) in progress, `end` being the log's start."""

    def __init__(self, fs: FileSystem, log_dir: str, start: int, end: int, config: LogConfig):
        self.fs = fs
        self.log_dir = log_dir
        self.folder = os.path.join(log_dir, BACKFILL_DIR)
        self.start = start
        self.end = end
        self.config = config
        self.segments: list[Segment] = []
        self.next_offset = start
        drop_unfinished(fs, log_dir)
        fs.makedirs(self.folder)

    @property
    def complete(self) -> bool:
        return self.next_offset == self.end

    @property
    def bytes_copied(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    def write(self, batches: Sequence[tuple[BatchHeader, memoryview]]) -> None:
        """Whole batches at the next offsets, none past the copy's end (BatchError)."""
        check_continues(batches, self.next_offset, self.end)
        for header, batch in batches:
            active = self.segments[-1] if self.segments else None
            full = active is not None and (
                active.size_bytes + header.total_bytes > self.config.segment_bytes_max
            )
            if active is None or full:
                active = self._new_segment(header.base_offset)
            active.file.append(batch)
            active.note_batch(header, active.size_bytes, batch)
            self.next_offset = header.last_offset + 1

    def _new_segment(self, base_offset: int) -> Segment:
        path = os.path.join(self.folder, segment_file_name(base_offset))
        segment = Segment(
            self.fs,
            path,
            base_offset,
            self.fs.open(path, create=True),
            self.config.index_interval_bytes,
        )
        self.segments.append(segment)
        return segment

    def splice(self) -> Splice:
        """The work that makes the complete copy part of the log."""
        assert self.complete
        moves = [
            (s.path, os.path.join(self.log_dir, segment_file_name(s.base_offset)))
            for s in reversed(self.segments)
        ]
        return Splice(self.fs, self.folder, self.log_dir, [s.file for s in self.segments], moves)

    def spliced_segments(self) -> list[Segment]:
        """After the splice ran: the copy's segments, at their places in the log's folder."""
        for segment in self.segments:
            segment.moved_to(os.path.join(self.log_dir, segment_file_name(segment.base_offset)))
        return self.segments

    def discard(self) -> None:
        for segment in self.segments:
            segment.file.close()
        self.segments.clear()
        drop_unfinished(self.fs, self.log_dir)
