"""One log's share of a flush pass: what to make durable, taken when the flush began, and
the blocking work that makes it so (run on a storage thread, many logs at once)."""

from __future__ import annotations

from dataclasses import dataclass

from quorumlog.log.files import File, FileSystem, write_file_atomically


@dataclass(slots=True)
class FlushJob:
    fs: FileSystem
    directory: str
    target: int  # the dirty offset when the flush began
    truncations: int  # the log's truncation count then: one since voids the job
    files: list[File]
    indexes: list[tuple[str, bytes]]  # (path, contents) of segment indexes to write
    sync_dir: bool

    def run(self) -> None:
        """Blocking: fsync the files, the folder, write the indexes."""
        for f in self.files:
            f.fsync()
        if self.sync_dir:
            self.fs.fsync_dir(self.directory)
        for path, data in self.indexes:
            write_file_atomically(self.fs, path, data)
