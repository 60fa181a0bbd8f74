"""An in-memory disk with crashes, for deterministic simulation (docs/reliability.md).

Each file has its current bytes and its durable image; `fsync` promotes the first to the
second. Directory entries are durable only once their directory is fsynced, so a crash forgets
files created or renamed since. `crash()` models a power loss: every file returns to its
durable image, optionally keeping a prefix of the unsynced appended bytes torn at a sector
(the kernel writes back in order here; out-of-order write-back is out of scope), with
garbage in the torn sector. Damage at rest (`flip_bit`, `cut`) is injected by the tests.
"""

from __future__ import annotations

import os
import random

from quorumlog.log.files import StorageError

SECTOR_BYTES = 512


class _Inode:
    __slots__ = ("data", "durable")

    def __init__(self) -> None:
        self.data = bytearray()
        self.durable = b""


class MemoryFile:
    __slots__ = ("_disk", "_inode", "_path")

    def __init__(self, disk: MemoryFileSystem, inode: _Inode, path: str):
        self._disk = disk
        self._inode = inode
        self._path = path

    def size(self) -> int:
        return len(self._inode.data)

    def read_at(self, position: int, size: int) -> bytes:
        return bytes(self._inode.data[position : position + size])

    def append(self, data: bytes | memoryview) -> None:
        self._inode.data += data

    def truncate(self, size: int) -> None:
        del self._inode.data[size:]

    def fsync(self) -> None:
        if self._disk.fail_fsync:
            raise StorageError(f"fsync of {self._path} failed: injected fault")
        self._inode.durable = bytes(self._inode.data)

    def drop_cached(self, start: int, end: int) -> None:
        pass  # no page cache here: the bytes are the disk

    def close(self) -> None:
        pass


class _Names:
    """File names by directory: a directory's entries are found without a scan of them all
    (the simulation's nodes hold thousands of files, and every log fsyncs its directory)."""

    __slots__ = ("by_dir",)

    def __init__(self, by_dir: dict[str, dict[str, _Inode]] | None = None) -> None:
        self.by_dir = {} if by_dir is None else by_dir

    def get(self, path: str) -> _Inode | None:
        head, tail = os.path.split(path)
        entries = self.by_dir.get(head)
        return None if entries is None else entries.get(tail)

    def put(self, path: str, inode: _Inode) -> None:
        head, tail = os.path.split(path)
        self.by_dir.setdefault(head, {})[tail] = inode

    def pop(self, path: str) -> _Inode | None:
        head, tail = os.path.split(path)
        entries = self.by_dir.get(head)
        if entries is None:
            return None
        inode = entries.pop(tail, None)
        if not entries:
            del self.by_dir[head]
        return inode

    def in_dir(self, path: str) -> dict[str, _Inode]:
        return self.by_dir.get(path, {})

    def set_dir(self, path: str, entries: dict[str, _Inode]) -> None:
        if entries:
            self.by_dir[path] = dict(entries)
        else:
            self.by_dir.pop(path, None)

    def copy(self) -> _Names:
        return _Names({d: dict(entries) for d, entries in self.by_dir.items()})

    def items(self) -> list[tuple[str, _Inode]]:
        return [
            (os.path.join(d, name), inode)
            for d, entries in self.by_dir.items()
            for name, inode in entries.items()
        ]

    def move_tree(self, src: str, dst: str) -> None:
        inside = src + os.sep
        for d in [d for d in self.by_dir if d == src or d.startswith(inside)]:
            self.by_dir[dst + d[len(src) :]] = self.by_dir.pop(d)

    def drop_tree(self, path: str) -> None:
        inside = path + os.sep
        for d in [d for d in self.by_dir if d == path or d.startswith(inside)]:
            del self.by_dir[d]


class MemoryFileSystem:
    """Implements `log.files.FileSystem` in memory."""

    def __init__(self) -> None:
        self._names = _Names()
        self._durable_names = _Names()
        self._dirs: set[str] = set()
        self._subdirs: dict[str, set[str]] = {}  # a directory's subdirectories, by name
        self.fail_fsync = False

    # FileSystem interface

    def listdir(self, path: str) -> list[str]:
        path = os.path.normpath(path)
        return sorted({*self._names.in_dir(path), *self._subdirs.get(path, ())})

    def exists(self, path: str) -> bool:
        path = os.path.normpath(path)
        return self._names.get(path) is not None or path in self._dirs

    def makedirs(self, path: str) -> None:
        # Directories themselves are always durable: the log only creates them at set-up.
        path = os.path.normpath(path)
        while path not in self._dirs and path != os.path.dirname(path):
            self._dirs.add(path)
            self._subdirs.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
            path = os.path.dirname(path)

    def open(self, path: str, create: bool = False) -> MemoryFile:
        path = os.path.normpath(path)
        inode = self._names.get(path)
        if inode is None:
            if not create:
                raise StorageError(f"cannot open {path}: no such file")
            if os.path.dirname(path) not in self._dirs:
                raise StorageError(f"cannot open {path}: no such directory")
            inode = _Inode()
            self._names.put(path, inode)
        return MemoryFile(self, inode, path)

    def rename(self, src: str, dst: str) -> None:
        src, dst = os.path.normpath(src), os.path.normpath(dst)
        if src in self._dirs:  # a directory and all it holds (durably, as directories are)
            self._names.move_tree(src, dst)
            self._durable_names.move_tree(src, dst)
            moved = self._drop_dirs(src)
            self.makedirs(dst)
            for d, subdirs in moved.items():
                self._dirs.add(dst + d[len(src) :])
                self._subdirs[dst + d[len(src) :]] = subdirs
            return
        inode = self._names.pop(src)
        if inode is None:
            raise StorageError(f"rename {src} -> {dst} failed: no such file")
        self._names.put(dst, inode)

    def remove(self, path: str) -> None:
        path = os.path.normpath(path)
        if self._names.pop(path) is None:
            raise StorageError(f"remove {path} failed: no such file")

    def remove_tree(self, path: str) -> None:
        path = os.path.normpath(path)
        self._names.drop_tree(path)
        self._durable_names.drop_tree(path)
        self._drop_dirs(path)

    def _drop_dirs(self, path: str) -> dict[str, set[str]]:
        """Forget the directory `path` and those under it: each with its subdirectories."""
        inside = path + os.sep
        gone = {
            d: self._subdirs.pop(d, set()) for d in self._dirs if d == path or d.startswith(inside)
        }
        self._dirs -= gone.keys()
        parent = self._subdirs.get(os.path.dirname(path))
        if parent is not None:
            parent.discard(os.path.basename(path))
        return gone

    def fsync_dir(self, path: str) -> None:
        if self.fail_fsync:
            raise StorageError(f"fsync of directory {path} failed: injected fault")
        path = os.path.normpath(path)
        self._durable_names.set_dir(path, self._names.in_dir(path))

    # Faults

    def crash(self, rng: random.Random | None = None) -> None:
        """Lose everything not fsynced. With `rng`, keep a torn prefix of unsynced appends."""
        self._names = self._durable_names.copy()
        # In path order, each inode once (two durable names may share one): the rng's draws
        # must not follow a set's order, which for these id-hashed objects varies per run.
        for inode in dict.fromkeys(inode for _, inode in sorted(self._names.items())):
            kept = inode.durable
            extra = bytes(inode.data[len(kept) :])
            if rng is not None and extra and inode.data.startswith(kept):
                torn = rng.randrange(len(extra) + 1)
                tail = bytearray(extra[:torn])
                if torn % SECTOR_BYTES and rng.random() < 0.5:
                    # The torn sector holds garbage past the last byte that landed.
                    start = torn - torn % SECTOR_BYTES
                    tail[start:] = rng.randbytes(torn - start)
                kept += bytes(tail)
            inode.data = bytearray(kept)
            inode.durable = kept
        self.fail_fsync = False

    def flip_bit(self, path: str, bit: int) -> None:
        """Damage at rest: flip one bit of a file, durable image included."""
        inode = self._file(path)
        inode.data[bit // 8] ^= 1 << (bit % 8)
        if bit // 8 < len(inode.durable):
            durable = bytearray(inode.durable)
            durable[bit // 8] ^= 1 << (bit % 8)
            inode.durable = bytes(durable)

    def cut(self, path: str, size: int) -> None:
        """Damage at rest: cut a file to `size` bytes, durable image included."""
        inode = self._file(path)
        del inode.data[size:]
        inode.durable = inode.durable[:size]

    def file_bytes(self, path: str) -> bytes:
        return bytes(self._file(path).data)

    def _file(self, path: str) -> _Inode:
        inode = self._names.get(os.path.normpath(path))
        if inode is None:
            raise KeyError(path)
        return inode
