"""The log keeps only its newest `page_cache_window_bytes` in the kernel's page cache once
they are durable, and reads back what it let go. Real files: residency is asked of the
kernel itself (mincore), so these run only on Linux."""

from __future__ import annotations

import ctypes
import mmap
import os
import sys

import pytest

from quorumlog.log.config import LogConfig
from quorumlog.log.files import OsFileSystem
from quorumlog.log.wal import Log
from tests.log.helpers import batch_of, open_log, read_all

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="mincore and fadvise: Linux")

PAGE = mmap.PAGESIZE
KIB = 1024


def resident_pages(path: str) -> list[int]:
    """The numbers of the file's pages that the kernel holds in its page cache."""
    size = os.path.getsize(path)
    if size == 0:
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return [page for page, bits in enumerate(vec) if bits & 1]
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


@pytest.fixture
def log_dir(tmp_path) -> str:
    """A folder whose file system drops durable pages when asked (tmpfs, say, does not:
    its pages are its storage)."""
    probe = tmp_path / "probe"
    probe.write_bytes(os.urandom(4 * PAGE))
    f = OsFileSystem().open(str(probe))
    try:
        f.fsync()
        f.drop_cached(0, 4 * PAGE)
    finally:
        f.close()
    if resident_pages(str(probe)):
        pytest.skip("this file system keeps its pages in memory whatever it is told")
    return str(tmp_path / "log")


def config(window: int, segment_bytes: int = 256 * KIB) -> LogConfig:
    return LogConfig(
        segment_bytes_max=segment_bytes,
        index_interval_bytes=16 * KIB,
        verify_on_open=False,
        page_cache_window_bytes=window,
    )


def append_mib(log: Log, mib: int = 1) -> list[bytes]:
    """About `mib` MiB of incompressible records, 8 KiB a batch."""
    values = []
    for _ in range(mib * 128):
        batch = [os.urandom(1000) for _ in range(8)]
        log.append([batch_of(*batch)], term=1)
        values.extend(batch)
    return values


def residency(log: Log) -> list[tuple[int, int]]:
    """(pages resident, pages in the file) of every segment, oldest first."""
    return [(len(resident_pages(s.path)), (s.size_bytes + PAGE - 1) // PAGE) for s in log._segments]


async def test_only_the_window_stays_in_the_page_cache(log_dir):
    window = 128 * KIB
    log = open_log(OsFileSystem(), log_dir, config(window))
    values = append_mib(log, 2)
    await log.flush()

    pages = residency(log)
    assert len(pages) >= 8 and log._segments[-1].size_bytes > window
    newest = log._segments[-1]
    # Whole pages: the newest `window` bytes, rounded out to the page that holds their first.
    first_kept = (newest.size_bytes - window) // PAGE
    assert resident_pages(newest.path) == list(range(first_kept, pages[-1][1]))
    assert all(resident == 0 for resident, _ in pages[:-1]), pages  # sealed: to the last page

    assert [v for _, v in read_all(log)] == values  # what was dropped reads from the disk


async def test_a_flush_after_every_small_write_leaves_no_large_folio_behind(log_dir):
    """The kernel caches a large write as one large folio, which it drops only whole: the
    ranges of many small flushes cut through folios, and each must go all the same."""
    config = LogConfig(
        segment_bytes_max=4 * 1024 * KIB,
        index_interval_bytes=64 * KIB,
        verify_on_open=False,
        page_cache_window_bytes=256 * KIB,
    )
    log = open_log(OsFileSystem(), log_dir, config)
    for _ in range(160):  # 64 KiB writes, each flushed: about 10 MiB
        log.append([batch_of(*[os.urandom(1000) for _ in range(8)]) for _ in range(8)], term=1)
        await log.flush()

    pages = residency(log)
    assert len(pages) >= 3
    assert all(resident == 0 for resident, _ in pages[:-1]), pages
    newest = log._segments[-1]
    window_and_a_folio = (256 * KIB + 2 * 1024 * KIB) // PAGE + 1
    assert len(resident_pages(newest.path)) <= window_and_a_folio, pages[-1]


async def test_a_window_larger_than_the_log_leaves_it_all_cached(tmp_path):
    log = open_log(OsFileSystem(), str(tmp_path / "log"), config(1 << 40))
    append_mib(log)
    await log.flush()
    assert all(resident == total for resident, total in residency(log))


async def test_a_truncated_and_rewritten_range_leaves_the_cache_again(log_dir):
    """A suffix truncation below what was dropped moves the mark back: the new bytes there
    leave the cache once the window has passed them. One segment of several 2 MiB blocks,
    so that the mark, not the folio rounding, decides."""
    log = open_log(OsFileSystem(), log_dir, config(64 * KIB, segment_bytes=16 * 1024 * KIB))
    append_mib(log, 6)
    await log.flush()
    segment = log._segments[-1]
    assert segment.uncached_to > 5 * 1024 * KIB
    cut = segment.base_offset + 8 * 384  # about 3 MiB in
    log.truncate_suffix(cut)
    cut_page = segment.size_bytes // PAGE
    values = append_mib(log, 4)
    await log.flush()

    assert log._segments == [segment]
    edge = (segment.size_bytes - 64 * KIB) // PAGE
    assert [p for p in resident_pages(segment.path) if cut_page <= p < edge] == []
    assert [v for _, v in read_all(log, cut)] == values
