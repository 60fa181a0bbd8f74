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


class MemoryFileSystem:
    """Implements `log.files.FileSystem` in memory."""

    def __init__(self) -> None:
        self._names: dict[str, _Inode] = {}
        self._durable_names: dict[str, _Inode] = {}
        self._dirs: set[str] = set()
        self.fail_fsync = False

    # FileSystem interface

    def listdir(self, path: str) -> list[str]:
        path = os.path.normpath(path)
        children = {p for p in (*self._names, *self._dirs) if os.path.dirname(p) == path}
        return sorted(os.path.basename(p) for p in children if p != path)

    def exists(self, path: str) -> bool:
        path = os.path.normpath(path)
        return path in self._names or path in self._dirs

    def makedirs(self, path: str) -> None:
        # Directories themselves are always durable: the log only creates them at set-up.
        path = os.path.normpath(path)
        while path not in self._dirs and path != os.path.dirname(path):
            self._dirs.add(path)
            path = os.path.dirname(path)

    def open(self, path: str, create: bool = False) -> MemoryFile:
        path = os.path.normpath(path)
        inode = self._names.get(path)
        if inode is None:
            if not create:
                raise StorageError(f"cannot open {path}: no such file")
            if os.path.dirname(path) not in self._dirs:
                raise StorageError(f"cannot open {path}: no such directory")
            inode = self._names[path] = _Inode()
        return MemoryFile(self, inode, path)

    def rename(self, src: str, dst: str) -> None:
        src, dst = os.path.normpath(src), os.path.normpath(dst)
        if src in self._dirs:  # a directory and all it holds (durably, as directories are)
            inside = src + os.sep
            for table in (self._names, self._durable_names):
                for name in [n for n in table if n.startswith(inside)]:
                    table[dst + name[len(src) :]] = table.pop(name)
            self._dirs = {dst + d[len(src) :] if d.startswith(inside) else d for d in self._dirs}
            self._dirs.discard(src)
            self.makedirs(dst)
            return
        if src not in self._names:
            raise StorageError(f"rename {src} -> {dst} failed: no such file")
        self._names[dst] = self._names.pop(src)

    def remove(self, path: str) -> None:
        path = os.path.normpath(path)
        if self._names.pop(path, None) is None:
            raise StorageError(f"remove {path} failed: no such file")

    def remove_tree(self, path: str) -> None:
        path = os.path.normpath(path)
        inside = path + os.sep
        for table in (self._names, self._durable_names):
            for name in [n for n in table if n.startswith(inside)]:
                del table[name]
        self._dirs = {d for d in self._dirs if d != path and not d.startswith(inside)}

    def fsync_dir(self, path: str) -> None:
        if self.fail_fsync:
            raise StorageError(f"fsync of directory {path} failed: injected fault")
        path = os.path.normpath(path)
        for name in [n for n in self._durable_names if os.path.dirname(n) == path]:
            del self._durable_names[name]
        for name, inode in self._names.items():
            if os.path.dirname(name) == path:
                self._durable_names[name] = inode

    # Faults

    def crash(self, rng: random.Random | None = None) -> None:
        """Lose everything not fsynced. With `rng`, keep a torn prefix of unsynced appends."""
        self._names = dict(self._durable_names)
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
        inode = self._names[os.path.normpath(path)]
        inode.data[bit // 8] ^= 1 << (bit % 8)
        if bit // 8 < len(inode.durable):
            durable = bytearray(inode.durable)
            durable[bit // 8] ^= 1 << (bit % 8)
            inode.durable = bytes(durable)

    def cut(self, path: str, size: int) -> None:
        """Damage at rest: cut a file to `size` bytes, durable image included."""
        inode = self._names[os.path.normpath(path)]
        del inode.data[size:]
        inode.durable = inode.durable[:size]

    def file_bytes(self, path: str) -> bytes:
        return bytes(self._names[os.path.normpath(path)].data)
