"""Opening a log's folder: its segments, checked and indexed, a torn tail cut, a copy of
older records that a crash cut short dropped (log/backfill.py); damage anywhere else is an
error that names the file, or with `repair` a cut there (log/wal.py's `Log.open`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import structlog

from quorumlog.log import cleaner
from quorumlog.log.backfill import drop_unfinished
from quorumlog.log.config import LogConfig
from quorumlog.log.files import CorruptionError, FileSystem, read_whole_file
from quorumlog.log.segment import (
    INDEX_SUFFIX,
    SEGMENT_SUFFIX,
    Segment,
    parse_segment_file_name,
    segment_file_name,
)

logger = structlog.get_logger("quorumlog.log")


@dataclass(slots=True)
class LoadedSegments:
    segments: list[Segment] = field(default_factory=list)
    unindexed: list[Segment] = field(default_factory=list)  # index files to write again


def load_segments(
    fs: FileSystem, directory: str, config: LogConfig, repair: bool
) -> LoadedSegments:
    """The segments found in `directory`, oldest first (none in a new log)."""
    drop_unfinished(fs, directory)
    cleaner.drop_unfinished(fs, directory)
    names = fs.listdir(directory)
    for name in names:
        if name.endswith(".tmp"):
            fs.remove(os.path.join(directory, name))
    bases = sorted(b for b in map(parse_segment_file_name, names) if b is not None)
    loaded = LoadedSegments()
    segments = loaded.segments
    last_term = 0
    # A sealed segment gets its index file in the flush that synced its data. One without
    # (but the newest) was never whole on disk, and nothing from where its data ends was
    # ever reported flushed; the next segments' names can still be durable (a folder's
    # fsync during that flush: seed 80299 of `bench sim`). Its tear ends the log there.
    for i, base in enumerate(bases):
        path = os.path.join(directory, segment_file_name(base))
        previous = segments[-1] if segments else None
        if previous is not None and base != previous.last_offset + 1:
            if not fs.exists(previous.index_path):
                _remove_segments_after(fs, directory, previous.base_offset)
                break
            raise CorruptionError(
                path,
                0,
                f"segment starts at {base}, expected {previous.last_offset + 1}"
                " (a segment is missing or damaged)",
                offset=previous.last_offset + 1,
            )
        # A segment scanned continues the transactions the one before it left open.
        open_txns = previous.txns.open if previous is not None else None
        segment = Segment(fs, path, base, fs.open(path), config.index_interval_bytes, open_txns)
        segments.append(segment)
        newest = i == len(bases) - 1
        if not newest and not config.verify_on_open and _load_index(fs, segment):
            last_term = segment.last_term or last_term
            continue
        failure = segment.scan(min_term=last_term)
        last_term = segment.last_term or last_term
        sealed = not newest and fs.exists(segment.index_path)
        if failure is None:
            if not newest:
                if segment.is_empty and not sealed:
                    _remove_segments_after(fs, directory, segment.base_offset)
                    break
                if segment.is_empty:
                    raise CorruptionError(segment.path, 0, "empty segment before the newest one")
                if _read_index_file(fs, segment) != segment.index_file_bytes():
                    loaded.unindexed.append(segment)  # rebuilt: rewritten by the next flush
            continue
        if not sealed and segment.valid_batch_after(failure.position) is None:
            _cut_torn_tail(segment, failure.position, failure.offset, failure.reason)
            _remove_segments_after(fs, directory, segment.base_offset)
            break
        if not repair:
            raise CorruptionError(segment.path, failure.position, failure.reason, failure.offset)
        _repair_from(fs, directory, segment, failure.position, failure.offset, failure.reason)
        break
    return loaded


def _load_index(fs: FileSystem, segment: Segment) -> bool:
    data = _read_index_file(fs, segment)
    return data is not None and segment.load_index_file(data)


def _read_index_file(fs: FileSystem, segment: Segment) -> bytes | None:
    if not fs.exists(segment.index_path):
        return None
    return read_whole_file(fs, segment.index_path)


def _cut_torn_tail(segment: Segment, position: int, offset: int, reason: str) -> None:
    cut_bytes = segment.file.size() - position
    segment.truncate_at_position(position, offset)
    logger.warning(
        "torn_tail_cut",
        file=segment.path,
        position=position,
        offset=offset,
        bytes=cut_bytes,
        reason=reason,
    )


def _repair_from(
    fs: FileSystem, directory: str, segment: Segment, position: int, offset: int, reason: str
) -> None:
    logger.error(
        "log_repaired_by_truncation",
        file=segment.path,
        position=position,
        offset=offset,
        reason=reason,
        warning="records from this offset on are deleted on this node",
    )
    segment.truncate_at_position(position, offset)
    _remove_segments_after(fs, directory, segment.base_offset)
    if fs.exists(segment.index_path):
        fs.remove(segment.index_path)


def _remove_segments_after(fs: FileSystem, directory: str, base_offset: int) -> None:
    """The segment files after the one based at `base_offset`, and their index files."""
    for name in fs.listdir(directory):
        base = parse_segment_file_name(name)
        if base is not None and base > base_offset:
            path = os.path.join(directory, name)
            fs.remove(path)
            index = path[: -len(SEGMENT_SUFFIX)] + INDEX_SUFFIX
            if fs.exists(index):
                fs.remove(index)
