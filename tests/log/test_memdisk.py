"""The in-memory disk loses exactly what a power loss would."""

from __future__ import annotations

import random

import pytest

from quorumlog.log.files import StorageError, write_file_atomically
from quorumlog.log.memdisk import MemoryFileSystem


@pytest.fixture
def fs():
    disk = MemoryFileSystem()
    disk.makedirs("/d")
    return disk


def test_crash_drops_unsynced_writes(fs):
    f = fs.open("/d/a", create=True)
    f.append(b"durable")
    f.fsync()
    fs.fsync_dir("/d")
    f.append(b"-lost")
    fs.crash()
    assert fs.file_bytes("/d/a") == b"durable"


def test_crash_forgets_files_created_without_a_directory_fsync(fs):
    f = fs.open("/d/new", create=True)
    f.append(b"x")
    f.fsync()
    fs.crash()
    assert not fs.exists("/d/new")


def test_crash_forgets_a_rename_without_a_directory_fsync(fs):
    write_file_atomically(fs, "/d/meta", b"old")
    tmp = fs.open("/d/meta.tmp", create=True)
    tmp.append(b"new")
    tmp.fsync()
    fs.rename("/d/meta.tmp", "/d/meta")
    assert fs.file_bytes("/d/meta") == b"new"
    fs.crash()
    assert fs.file_bytes("/d/meta") == b"old"


def test_atomic_write_survives_a_crash(fs):
    write_file_atomically(fs, "/d/meta", b"v1")
    write_file_atomically(fs, "/d/meta", b"v2")
    fs.crash()
    assert fs.file_bytes("/d/meta") == b"v2"
    assert not fs.exists("/d/meta.tmp")


def test_unsynced_truncation_can_come_back(fs):
    f = fs.open("/d/a", create=True)
    f.append(b"0123456789")
    f.fsync()
    fs.fsync_dir("/d")
    f.truncate(4)
    fs.crash()
    assert fs.file_bytes("/d/a") == b"0123456789"


def test_torn_crash_keeps_a_prefix_of_unsynced_appends():
    seen = set()
    for seed in range(50):
        fs = MemoryFileSystem()
        fs.makedirs("/d")
        f = fs.open("/d/a", create=True)
        f.append(b"A" * 100)
        f.fsync()
        fs.fsync_dir("/d")
        f.append(b"B" * 2000)
        fs.crash(random.Random(seed))
        data = fs.file_bytes("/d/a")
        assert data[:100] == b"A" * 100
        assert len(data) <= 2100
        seen.add(len(data))
        # Only the last (torn) sector may hold garbage.
        intact = data[100 : 100 + (len(data) - 100) // 512 * 512]
        assert intact == b"B" * len(intact)
    assert len(seen) > 10, "tears land at many places"


def test_damage_at_rest(fs):
    f = fs.open("/d/a", create=True)
    f.append(b"\x00\x00")
    f.fsync()
    fs.fsync_dir("/d")
    fs.flip_bit("/d/a", 9)
    assert fs.file_bytes("/d/a") == b"\x00\x02"
    fs.cut("/d/a", 1)
    fs.crash()
    assert fs.file_bytes("/d/a") == b"\x00"


def test_injected_fsync_failure(fs):
    f = fs.open("/d/a", create=True)
    fs.fail_fsync = True
    with pytest.raises(StorageError):
        f.fsync()


def test_listing_and_errors(fs):
    fs.open("/d/b", create=True)
    fs.open("/d/a", create=True)
    assert fs.listdir("/d") == ["a", "b"]
    fs.remove("/d/a")
    assert fs.listdir("/d") == ["b"]
    with pytest.raises(StorageError):
        fs.open("/d/missing")
    with pytest.raises(StorageError):
        fs.open("/nodir/x", create=True)
