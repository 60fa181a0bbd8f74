"""The file layer under the log: a small interface, the real one, and its errors.

The log reaches the disk only through `FileSystem` and `File`, so that the simulation tests
can swap in `log.memdisk.MemoryFileSystem`, which loses what was not fsynced on a crash.
All methods are blocking; the log runs `fsync` through a worker thread (`run_sync`), and
the in-memory disk runs it inline so that a simulation stays deterministic.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from typing import Protocol

from crc32c import crc32c


class StorageError(Exception):
    """A write, fsync or read failed. Fatal to the node: it must stop, never retry."""


class CorruptionError(StorageError):
    """Stored data is damaged in a way the log must not repair on its own."""

    def __init__(self, path: str, position: int, reason: str, offset: int | None = None):
        where = f"{path} at byte {position}"
        if offset is not None:
            where += f" (near offset {offset})"
        super().__init__(f"corrupt log data in {where}: {reason}")
        self.path = path
        self.position = position
        self.offset = offset
        self.reason = reason


class File(Protocol):
    def size(self) -> int: ...
    def read_at(self, position: int, size: int) -> bytes: ...
    def append(self, data: bytes | memoryview) -> None: ...
    def truncate(self, size: int) -> None: ...
    def fsync(self) -> None: ...
    def drop_cached(self, start: int, end: int) -> None: ...
    def close(self) -> None: ...


class FileSystem(Protocol):
    def listdir(self, path: str) -> list[str]: ...
    def exists(self, path: str) -> bool: ...
    def makedirs(self, path: str) -> None: ...
    def open(self, path: str, create: bool = False) -> File: ...
    def rename(self, src: str, dst: str) -> None: ...
    def remove(self, path: str) -> None: ...
    def fsync_dir(self, path: str) -> None: ...
    def remove_tree(self, path: str) -> None: ...


def write_file_atomically(fs: FileSystem, path: str, data: bytes) -> None:
    """Write a whole file so that a crash leaves either the old or the new one (rule 7)."""
    tmp = path + ".tmp"
    if fs.exists(tmp):
        fs.remove(tmp)
    f = fs.open(tmp, create=True)
    try:
        f.append(data)
        f.fsync()
    finally:
        f.close()
    fs.rename(tmp, path)
    fs.fsync_dir(os.path.dirname(path) or ".")


def read_whole_file(fs: FileSystem, path: str) -> bytes:
    f = fs.open(path)
    try:
        return f.read_at(0, f.size())
    finally:
        f.close()


_FRAME = struct.Struct("<4sI")  # a small file's magic, and the CRC32C of its body


def framed(magic: bytes, body: bytes) -> bytes:
    """A small file's bytes: its kind (`magic`), a checksum, then `body`."""
    return _FRAME.pack(magic, crc32c(body)) + body


def unframed(magic: bytes, data: bytes) -> bytes | None:
    """The body of a file `framed` wrote, or None if it is short, of another kind, or
    damaged (what that means is the caller's: an error, or a file to ignore)."""
    if len(data) < _FRAME.size:
        return None
    found, crc = _FRAME.unpack_from(data)
    body = data[_FRAME.size :]
    if found != magic or crc32c(body) != crc:
        return None
    return body


# In a data directory of the fault harness: fsync delay in milliseconds (SyncJournal).
FSYNC_DELAY_FILE = "fault-fsync-delay-ms"


class SyncJournal:
    """For the fault harness: a line "PATH<TAB>BYTES" after every fsync, saying how much of
    PATH is durable. After a SIGKILL the page cache still holds every write, so a harness
    that wants the disk of a power loss cuts each file back to its last line (bench/faults.py).
    Appended without fsync: the page cache keeps it across a kill, which is all it models.
    `fsync_delay_s` makes every fsync that much slower, as a slow device would, so that more
    is unsynced at any moment for the harness to take away; a number of milliseconds in
    the file `delay_path`, while it exists, replaces it (the harness's slow-disk fault)."""

    def __init__(self, path: str, fsync_delay_s: float = 0.0, delay_path: str | None = None):
        self._path = path
        self._fd: int | None = None  # opened at the first record: the directory comes later
        self.fsync_delay_s = fsync_delay_s
        self._delay_path = delay_path

    def delay_s(self) -> float:
        if self._delay_path is not None:
            try:
                with open(self._delay_path) as f:
                    return float(f.read()) / 1000
            except (OSError, ValueError):
                pass  # no such file, or half written: the usual delay
        return self.fsync_delay_s

    def record(self, path: str, durable_bytes: int) -> None:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, f"{path}\t{durable_bytes}\n".encode())


class OsFile:
    """A file opened for reading and appending; errors become StorageError."""

    __slots__ = ("_durable", "_fd", "_journal", "_path")

    def __init__(self, path: str, create: bool, journal: SyncJournal | None = None):
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        try:
            self._fd = os.open(path, flags, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open {path}: {exc}") from exc
        self._path = path
        self._journal = journal
        self._durable = self.size()  # as far as the journal knows: a harness cuts no further

    def size(self) -> int:
        return os.fstat(self._fd).st_size

    def read_at(self, position: int, size: int) -> bytes:
        try:
            return os.pread(self._fd, size, position)
        except OSError as exc:
            raise StorageError(f"read of {self._path} failed: {exc}") from exc

    def append(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            raise StorageError(f"write to {self._path} failed: {exc}") from exc

    def truncate(self, size: int) -> None:
        try:
            os.ftruncate(self._fd, size)
        except OSError as exc:
            raise StorageError(f"truncate of {self._path} failed: {exc}") from exc
        if self._journal is not None and size < self._durable:
            self._durable = size
            self._journal.record(self._path, size)

    def fsync(self) -> None:
        # A failed fsync may have dropped dirty pages: never retry it (rule 8).
        size = 0
        if self._journal is not None:
            size = self.size()  # what this fsync covers
            time.sleep(self._journal.delay_s())  # on the log's fsync thread
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise StorageError(f"fsync of {self._path} failed: {exc}") from exc
        if self._journal is not None and size != self._durable:
            self._durable = size
            self._journal.record(self._path, size)

    def drop_cached(self, start: int, end: int) -> None:
        """Tell the kernel it may drop the cached pages of [start, end), which are durable:
        a later read comes from the disk. Advice only: it changes no data."""
        if hasattr(os, "posix_fadvise"):  # not on macOS
            try:
                os.posix_fadvise(self._fd, start, end - start, os.POSIX_FADV_DONTNEED)
            except OSError as exc:
                raise StorageError(f"fadvise of {self._path} failed: {exc}") from exc

    def close(self) -> None:
        os.close(self._fd)


class OsFileSystem:
    """The real disk; with a `sync_journal`, fsyncs are also recorded there."""

    def __init__(self, sync_journal: SyncJournal | None = None):
        self._journal = sync_journal

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def open(self, path: str, create: bool = False) -> OsFile:
        return OsFile(path, create, self._journal)

    def rename(self, src: str, dst: str) -> None:
        try:
            os.rename(src, dst)
        except OSError as exc:
            raise StorageError(f"rename {src} -> {dst} failed: {exc}") from exc

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except OSError as exc:
            raise StorageError(f"remove {path} failed: {exc}") from exc

    def remove_tree(self, path: str) -> None:
        try:
            shutil.rmtree(path)
        except OSError as exc:
            raise StorageError(f"remove of {path} failed: {exc}") from exc

    def fsync_dir(self, path: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StorageError(f"fsync of directory {path} failed: {exc}") from exc
