"""The cleaner's progress in a compacted log's folder (Kafka's cleaner-offset-checkpoint), so
that a restart does not count the whole log as dirty and read all of it again.

Written by the log's flush after the folder's fsync, the one that made the renames of the
pass's segments durable: the file never claims a pass whose segments a crash could undo.
It notes the log's first offset when written: a log whose beginning moved back since (older
records copied in, log/backfill.py) counts as dirty again, as it would have in memory. A
damaged or unreadable file is ignored (the log is dirty again): it holds no data.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack

from quorumlog.log.files import FileSystem, framed, read_whole_file, unframed

CLEANER_CHECKPOINT_FILE = "cleaner-checkpoint"
_MAGIC = b"QLC1"


@dataclass(frozen=True)
class CleanerCheckpoint:
    log_start: int  # the log's first offset when written
    cleaned_to: int  # where the last pass ended
    tombstones_due_ms: int | None  # when a tombstone that pass kept may go

    def to_bytes(self) -> bytes:
        return framed(
            _MAGIC, msgpack.packb([self.log_start, self.cleaned_to, self.tombstones_due_ms])
        )

    def holds_for(self, log_start: int) -> bool:
        """Whether it describes a log that now starts at `log_start`: one whose start only
        moved forward (retention, a reset past its end) since it was written."""
        return self.log_start <= log_start


def read_checkpoint(fs: FileSystem, path: str) -> CleanerCheckpoint | None:
    if not fs.exists(path):
        return None
    try:
        body = unframed(_MAGIC, read_whole_file(fs, path))
        if body is None:
            return None
        log_start, cleaned_to, tombstones_due_ms = msgpack.unpackb(body)
    except (OSError, ValueError, TypeError, msgpack.UnpackException):
        return None
    if not isinstance(log_start, int) or not isinstance(cleaned_to, int):
        return None
    if tombstones_due_ms is not None and not isinstance(tombstones_due_ms, int):
        return None
    return CleanerCheckpoint(log_start, cleaned_to, tombstones_due_ms)
