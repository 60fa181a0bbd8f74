"""One log's share of a flush pass: what to make durable, taken when the flush began, and
the blocking work that makes it so (run on a storage thread, many logs at once)."""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass

from quorumlog.log.files import File, FileSystem, write_file_atomically
from quorumlog.log.segment import Segment

PAGE_BYTES = mmap.PAGESIZE


@dataclass(slots=True)
class FlushJob:
    fs: FileSystem
    directory: str
    target: int  # the dirty offset when the flush began
    truncations: int  # the log's truncation count then: one since voids the job
    files: list[File]
    indexes: list[tuple[str, bytes]]  # (path, contents) of segment indexes to write
    sync_dir: bool
    # (file, start, end): byte ranges written before the flush began that the page cache
    # may drop once the fsyncs made them durable.
    uncache: list[tuple[File, int, int]]

    def run(self) -> None:
        """Blocking: fsync the files, the folder, write the indexes, uncache."""
        for f in self.files:
            f.fsync()
        if self.sync_dir:
            self.fs.fsync_dir(self.directory)
        for path, data in self.indexes:
            write_file_atomically(self.fs, path, data)
        for f, start, end in self.uncache:
            f.drop_cached(start, end)


def uncache_ranges(
    segments: Sequence[Segment], window_bytes: int, segment_bytes_max: int
) -> list[tuple[File, int, int]]:
    """What lies further than `window_bytes` behind the end of the log made of `segments`
    and is not yet out of the page cache, in whole pages; marks it as out. Taken when a
    flush begins, so it is durable once that flush's fsyncs are done."""
    if window_bytes >= len(segments) * segment_bytes_max:
        return []  # the whole log fits: no walk over every segment at every flush
    keep = window_bytes
    ranges = []
    for segment in reversed(segments):
        end = max(0, segment.size_bytes - keep) // PAGE_BYTES * PAGE_BYTES
        keep = max(0, keep - segment.size_bytes)
        if end > segment.uncached_to:
            start = segment.uncached_to // PAGE_BYTES * PAGE_BYTES  # a truncation's cut
            ranges.append((segment.file, start, end))
            segment.uncached_to = end
        elif keep == 0:
            break  # the window's edge only moves forward: older segments are done
    return ranges
