"""Crash and damage tests on real files: cut files and flip bits, then reopen.

Expectations (docs/reliability.md, storage rules 4 and 5): damage in the last batch of
the newest segment, or of one no flush sealed, is a torn tail and is cut; damage anywhere
else refuses to open, names the file, and deletes nothing; everything before the damage is
intact.
"""

from __future__ import annotations

import os
import random

import pytest

from quorumlog.log.batch import split_batches
from quorumlog.log.config import LogConfig
from quorumlog.log.files import CorruptionError, OsFileSystem
from quorumlog.log.segment import SEGMENT_SUFFIX
from tests.log.helpers import batch_of, open_log, read_all

CONFIG = LogConfig(segment_bytes_max=4_000, index_interval_bytes=500)
SEEDS = range(40)


async def build(directory: str, rng: random.Random) -> list[tuple[int, bytes]]:
    log = open_log(OsFileSystem(), directory, CONFIG)
    for term in (1, 2):
        for _ in range(rng.randint(10, 25)):
            values = [rng.randbytes(rng.randint(1, 120)) for _ in range(rng.randint(1, 4))]
            log.append([batch_of(*values)], term=term)
    await log.flush()
    contents = read_all(log)
    log.close()
    return contents


def segments(directory: str) -> list[str]:
    return sorted(
        os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(SEGMENT_SUFFIX)
    )


def batch_bounds(path: str) -> list[tuple[int, int, int]]:
    """(start position, end position, base offset) of each batch in a segment file."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    for header, batch in split_batches(data):
        out.append((pos, pos + len(batch), header.base_offset))
        pos += len(batch)
    return out


def snapshot(directory: str) -> dict[str, bytes]:
    return {n: open(os.path.join(directory, n), "rb").read() for n in sorted(os.listdir(directory))}


@pytest.mark.parametrize("seed", SEEDS)
async def test_cut_newest_segment_is_a_torn_tail(tmp_path, seed):
    rng = random.Random(seed)
    d = str(tmp_path)
    contents = await build(d, rng)
    newest = segments(d)[-1]
    bounds = batch_bounds(newest)
    cut = rng.randrange(os.path.getsize(newest))
    os.truncate(newest, cut)
    log = open_log(OsFileSystem(), d, CONFIG)
    first_lost = next(base for start, end, base in bounds if end > cut)
    expected_dirty = first_lost - 1
    assert log.dirty_offset == expected_dirty
    assert read_all(log) == [r for r in contents if r[0] <= expected_dirty]


@pytest.mark.parametrize("seed", SEEDS)
async def test_bit_flip_is_cut_at_the_tail_and_refused_elsewhere(tmp_path, seed):
    rng = random.Random(seed)
    d = str(tmp_path)
    contents = await build(d, rng)
    files = segments(d)
    victim = rng.choice(files)
    bounds = batch_bounds(victim)
    position = rng.randrange(os.path.getsize(victim))
    with open(victim, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ (1 << rng.randrange(8))]))
    hit = next(b for b in bounds if b[0] <= position < b[1])
    is_tail = victim == files[-1] and hit == bounds[-1]
    before = snapshot(d)
    if is_tail:
        log = open_log(OsFileSystem(), d, CONFIG)
        assert log.dirty_offset == hit[2] - 1
        assert read_all(log) == [r for r in contents if r[0] < hit[2]]
    else:
        with pytest.raises(CorruptionError) as err:
            open_log(OsFileSystem(), d, CONFIG)
        assert victim in str(err.value)
        assert snapshot(d) == before, "a refused open deletes nothing"


async def test_repair_flag_truncates_from_the_damage(tmp_path):
    d = str(tmp_path)
    contents = await build(d, random.Random(7))
    victim = segments(d)[0]
    start, _, base = batch_bounds(victim)[2]
    with open(victim, "r+b") as f:
        f.seek(start + 70)
        f.write(b"\xff")
    with pytest.raises(CorruptionError):
        open_log(OsFileSystem(), d, CONFIG)
    log = open_log(OsFileSystem(), d, CONFIG, repair=True)
    assert log.dirty_offset == base - 1
    assert read_all(log) == [r for r in contents if r[0] < base]
    assert len(segments(d)) == 1


@pytest.mark.parametrize("seed", range(30))
async def test_segments_made_during_a_flush_whose_data_tore_end_the_log(seed):
    """A flush's folder fsync makes durable the names of segments rolled while it ran,
    not their data: a crash then leaves a segment before the newest one torn, empty, or
    ending short of the next one's base (seed 80299 of `bench sim` could not restart).
    None of it was ever reported flushed, so the log ends at the tear, keeping all that
    was."""
    from quorumlog.log.memdisk import MemoryFileSystem

    rng = random.Random(seed)
    fs, d = MemoryFileSystem(), "/log"
    small = LogConfig(segment_bytes_max=600, index_interval_bytes=200)
    log = open_log(fs, d, small)
    for _ in range(rng.randint(1, 12)):
        log.append([batch_of(rng.randbytes(rng.randint(20, 150)))], term=1)
    await log.flush()
    flushed = read_all(log)
    segments_before = len(log._segments)
    while len(log._segments) == segments_before:  # a roll: the flush syncs the folder
        log.append([batch_of(rng.randbytes(rng.randint(20, 150)))], term=1)
    job = log.begin_flush()
    assert job.sync_dir
    for _ in range(rng.randint(8, 20)):  # rolls segments while the flush runs
        log.append([batch_of(rng.randbytes(rng.randint(20, 150)))], term=1)
    appended = read_all(log)
    job.run()
    log.end_flush(job, durable=True)
    fs.crash(rng)

    again = open_log(fs, d, small)
    kept = read_all(again)
    assert kept == appended[: len(kept)] and len(kept) >= len(flushed)
    again.append([batch_of(b"after")], term=2)
    await again.flush()
    again.close()
    assert read_all(open_log(fs, d, small))[-1][1] == b"after"
