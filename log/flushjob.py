"""One log's share of a flush pass: what to make durable, taken when the flush began, and
the blocking work that makes it so (run on a storage thread, many logs at once)."""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass

from quorumlog.log.backfill import Splice
from quorumlog.log.files import File, FileSystem, write_file_atomically
from quorumlog.log.segment import Segment

PAGE_BYTES = mmap.PAGESIZE
FOLIO_BYTES_MAX = 2 * 1024 * 1024  # a PMD on x86-64: the page cache's largest folio


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
    splice: Splice | None = None  # a complete copy of the records before the log's start

    def run(self) -> None:
        """Blocking: fsync the files, the folder, write the indexes, uncache."""
        for f in self.files:
            f.fsync()
        if self.sync_dir:
            self.fs.fsync_dir(self.directory)
        if self.splice is not None:
            self.splice.run()
        for path, data in self.indexes:
            write_file_atomically(self.fs, path, data)
        for f, start, end in self.uncache:
            f.drop_cached(start, end)


def uncache_ranges(
    segments: Sequence[Segment], window_bytes: int, segment_bytes_max: int
) -> list[tuple[File, int, int]]:
    """What lies further than `window_bytes` behind the end of the log made of `segments`
    and is not yet out of the page cache, in whole pages; marks it as out. Taken when a
    flush begins, so it is durable once that flush's fsyncs are done.

    The kernel drops a large folio (up to 2 MiB of a file's pages held as one) only when
    the range covers all of it, so each range starts back at the 2 MiB boundary below the
    last one's end: the folio that end cut through goes now. A sealed segment wholly behind
    the window goes to its last folio's end, past the end of the file."""
    if window_bytes >= len(segments) * segment_bytes_max:
        return []  # the whole log fits: no walk over every segment at every flush
    keep = window_bytes
    ranges = []
    for segment in reversed(segments):
        if keep == 0 and segment is not segments[-1]:
            end = segment.size_bytes
            drop_to = -(-end // FOLIO_BYTES_MAX) * FOLIO_BYTES_MAX
        else:
            end = drop_to = max(0, segment.size_bytes - keep) // PAGE_BYTES * PAGE_BYTES
            keep = max(0, keep - segment.size_bytes)
        if end > segment.uncached_to:
            start = segment.uncached_to // FOLIO_BYTES_MAX * FOLIO_BYTES_MAX
            ranges.append((segment.file, start, drop_to))
            segment.uncached_to = end
        elif keep == 0:
            break  # the window's edge only moves forward: older segments are done
    return ranges
