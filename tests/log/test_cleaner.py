"""The cleaner against a reference model: after a pass, a compacted log holds each key's
latest record (and a tombstone while it is young), every record where it was, the rest of
the log untouched; a crash at any point of a pass loses nothing."""

from __future__ import annotations

import dataclasses
import random

import pytest

from quorumlog.log.batch import parse_batch, split_batches
from quorumlog.log.cleaner import CLEANING_DIR, KEY_ENTRY_BYTES
from quorumlog.log.cleaner_checkpoint import CLEANER_CHECKPOINT_FILE, CleanerCheckpoint
from quorumlog.log.config import LogConfig
from quorumlog.log.files import read_whole_file, write_file_atomically
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.records import RawRecord, make_data_batch, offset_records
from quorumlog.log.wal import Log
from tests.log.helpers import open_log

COMPACT = LogConfig(
    segment_bytes_max=2_000,
    index_interval_bytes=300,
    cleanup_policy="compact",
    delete_retention_ms=1_000,
    min_cleanable_dirty_ratio=0.01,
)
DIR = "/data/log"
NOW_MS = 100_000


def records_of(log: Log) -> dict[int, RawRecord]:
    """Every data record the log holds, by offset."""
    out = {}
    offset = log.log_start_offset
    while offset <= log.dirty_offset:
        chunk = log.read(offset, 1 << 20)
        for header, batch in split_batches(chunk.data):
            if header.batch_type.name == "DATA":
                out.update((at, r) for at, r in offset_records(batch, header) if at >= offset)
        offset = chunk.last_offset + 1
    return out


def batch_bases(log: Log) -> list[int]:
    out = []
    offset = log.log_start_offset
    while offset <= log.dirty_offset:
        chunk = log.read(offset, 1 << 20)
        out += [header.base_offset for header, _ in split_batches(chunk.data)]
        offset = chunk.last_offset + 1
    return out


def write(log: Log, rng: random.Random, batches: int, keys: int, term: int = 1) -> None:
    for _ in range(batches):
        records = []
        for _ in range(rng.randrange(1, 6)):
            key = b"key-%d" % rng.randrange(keys)
            value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(40))
            records.append(RawRecord(key, value, rng.randrange(NOW_MS - 5_000, NOW_MS)))
        log.append([make_data_batch(records)], term=term)


def expected(before: dict[int, RawRecord], end: int) -> dict[int, RawRecord]:
    """The reference: below `end`, each key's latest record, a tombstone only while young;
    from `end` on, everything."""
    latest = {r.key: at for at, r in before.items() if at < end}
    return {
        at: r
        for at, r in before.items()
        if at >= end
        or (
            latest[r.key] == at
            and (r.value is not None or r.timestamp_ms > NOW_MS - COMPACT.delete_retention_ms)
        )
    }


async def clean(log: Log) -> int:
    """One pass, adopted and flushed; the offset it cleaned up to."""
    cleaner_pass = log.plan_clean(log.dirty_offset, NOW_MS)
    assert cleaner_pass is not None, "a pass is due"
    result = cleaner_pass.run()
    log.adopt_cleaned(result, NOW_MS)
    await log.flush()
    return result.end


async def filled(fs: MemoryFileSystem, seed: int, terms: int = 1) -> Log:
    log = open_log(fs, DIR, COMPACT)
    rng = random.Random(seed)
    for term in range(1, terms + 1):
        write(log, rng, 60 // terms, keys=12, term=term)
    await log.flush()
    return log


@pytest.mark.parametrize("seed", range(5))
async def test_a_pass_leaves_what_the_model_leaves_and_moves_no_offset(seed):
    fs = MemoryFileSystem()
    log = await filled(fs, seed, terms=3)
    before = records_of(log)
    bases = batch_bases(log)
    terms = {at: log.term_at(at) for at in before}
    records_before = {at: log.records_before(at) for at in before}
    size = log.size_bytes
    end = await clean(log)
    assert end == log._segments[-1].base_offset, "all but the active segment"
    after = records_of(log)
    assert after == expected(before, end)
    assert {at: log.term_at(at) for at in after} == {at: terms[at] for at in after}
    assert {at: log.records_before(at) for at in after} == {at: records_before[at] for at in after}
    assert log.size_bytes < size
    assert batch_bases(log) == bases, "batches keep their bounds: followers end at them"
    reopened = open_log(fs, DIR, COMPACT)
    assert records_of(reopened) == after, "the cleaned log opens as it was left"


async def test_a_second_pass_removes_what_newer_records_replaced():
    fs = MemoryFileSystem()
    log = await filled(fs, 7)
    end = await clean(log)
    write(log, random.Random(8), 40, keys=12)
    await log.flush()
    before = records_of(log)
    end = await clean(log)
    assert records_of(log) == expected(before, end)


async def test_a_tombstone_goes_only_once_older_than_delete_retention():
    fs = MemoryFileSystem()
    log = open_log(fs, DIR, COMPACT)
    log.append([make_data_batch([RawRecord(b"k", b"v", NOW_MS - 10)])], term=1)
    log.append([make_data_batch([RawRecord(b"k", None, NOW_MS - 500)])], term=1)
    log.append([make_data_batch([RawRecord(b"old", None, NOW_MS - 5_000)])], term=1)
    big = random.Random(1).randbytes(2_000)  # does not compress: the segment rolls
    log.append([make_data_batch([RawRecord(b"x", big, NOW_MS)])], term=1)
    await log.flush()
    await clean(log)
    assert [(at, r.key, r.value) for at, r in records_of(log).items()] == [
        (1, b"k", None),  # young: kept, so that readers learn the key is gone
        (3, b"x", big),
    ]


async def test_the_key_map_budget_ends_a_pass_early_and_the_next_goes_on():
    fs = MemoryFileSystem()
    log = await filled(fs, 9)
    log.reconfigure(dataclasses.replace(COMPACT, cleaner_dedupe_buffer_bytes=5 * KEY_ENTRY_BYTES))
    before = records_of(log)
    ends = [await clean(log)]
    while ends[-1] < log._segments[-1].base_offset:
        ends.append(await clean(log))
    assert len(ends) > 1, "the budget held the first pass short"
    latest = {r.key: at for at, r in before.items() if at < ends[-1]}
    after = records_of(log)
    assert all(at in after for at in latest.values() if before[at].value is not None)
    assert set(after) <= set(before)
    assert all(after[at] == before[at] for at in after)


async def test_uncommitted_and_unflushed_segments_are_not_cleaned():
    fs = MemoryFileSystem()
    log = await filled(fs, 10)
    first = log._segments[0]
    assert log.plan_clean(first.last_offset - 1, NOW_MS) is None, "nothing wholly committed"
    write(log, random.Random(11), 30, keys=12)  # not flushed
    cleaner_pass = log.plan_clean(log.dirty_offset, NOW_MS)
    assert cleaner_pass.end <= log.flushed_offset + 1


@pytest.mark.parametrize("seed", range(8))
async def test_a_crash_anywhere_in_a_pass_loses_nothing(seed):
    """Crash after the rewrite (before adoption), after adoption (before the flush that
    syncs the folder), or after it: the log opens whole, each key's latest still there,
    every record still at its offset, and the side folder gone."""
    fs = MemoryFileSystem()
    log = await filled(fs, seed)
    before = records_of(log)
    cleaner_pass = log.plan_clean(log.dirty_offset, NOW_MS)
    result = cleaner_pass.run()
    step = seed % 3
    if step >= 1:
        log.adopt_cleaned(result, NOW_MS)
    if step >= 2:
        await log.flush()
    fs.crash(random.Random(seed))
    reopened = open_log(fs, DIR, COMPACT)
    after = records_of(reopened)
    assert all(after[at] == before[at] for at in after), "records are only ever removed"
    must = expected(before, result.end)
    assert set(must) <= set(after), "no key's latest record is lost"
    assert not fs.exists(f"{DIR}/{CLEANING_DIR}")
    # The progress the reopened log starts from is a pass whose segments are durable.
    assert reopened.cleaned_to == (result.end if step == 2 else 0)
    keys = [r.key for at, r in after.items() if at < reopened.cleaned_to]
    assert len(keys) == len(set(keys)), "below its progress, one record per key"


async def test_the_cleaners_progress_survives_a_restart():
    """Kafka's cleaner-offset-checkpoint: a restart does not make the whole log dirty."""
    fs = MemoryFileSystem()
    log = await filled(fs, 12)
    end = await clean(log)
    due = log.tombstones_due_ms
    log.close()
    reopened = open_log(fs, DIR, COMPACT)
    assert (reopened.cleaned_to, reopened.tombstones_due_ms) == (end, due)
    assert reopened.dirty_share() == 0.0
    assert reopened.plan_clean(reopened.dirty_offset, NOW_MS) is None, "nothing to clean"


async def test_a_damaged_or_outdated_checkpoint_makes_the_log_dirty_again():
    fs = MemoryFileSystem()
    log = await filled(fs, 13)
    end = await clean(log)
    start = log.log_start_offset
    log.close()
    path = f"{DIR}/{CLEANER_CHECKPOINT_FILE}"
    good = read_whole_file(fs, path)
    for data in (
        good[:-1] + bytes([good[-1] ^ 1]),  # a flipped bit
        good[:3],  # cut short
        CleanerCheckpoint(start + 1, end, None).to_bytes(),  # the log's start moved back
    ):
        write_file_atomically(fs, path, data)
        reopened = open_log(fs, DIR, COMPACT)
        assert reopened.cleaned_to == 0, data
        reopened.close()
    write_file_atomically(fs, path, CleanerCheckpoint(start, end + 10**6, None).to_bytes())
    reopened = open_log(fs, DIR, COMPACT)
    assert reopened.cleaned_to == reopened.dirty_offset + 1, "never past the log's end"


async def test_a_segment_is_closed_after_segment_ms_even_if_not_full():
    fs = MemoryFileSystem()
    config = LogConfig(segment_ms=1_000)
    log = open_log(fs, DIR, config)
    log.append([make_data_batch([RawRecord(b"k", b"1", 5_000)])], term=1)
    log.append([make_data_batch([RawRecord(b"k", b"2", 5_999)])], term=1)
    assert len(log._segments) == 1
    log.append([make_data_batch([RawRecord(b"k", b"3", 6_000)])], term=1)
    assert [s.base_offset for s in log._segments] == [0, 2]


async def test_retention_removes_nothing_of_a_log_that_only_compacts():
    fs = MemoryFileSystem()
    config = LogConfig(segment_bytes_max=2_000, cleanup_policy="compact", retention_ms=1)
    log = open_log(fs, DIR, config)
    for i in range(20):
        log.append([make_data_batch([RawRecord(b"k%d" % i, b"v" * 300, 0)])], term=1)
    await log.flush()
    assert log.apply_retention(NOW_MS, keep_from_offset=log.dirty_offset + 1) == 0
    header = parse_batch(log.read(0, 10_000).data)
    assert header.base_offset == 0


async def test_a_pass_is_due_when_a_kept_tombstone_may_go_though_nothing_was_written():
    fs = MemoryFileSystem()
    log = open_log(fs, DIR, COMPACT)
    log.append([make_data_batch([RawRecord(b"k", None, NOW_MS - 500)])], term=1)
    big = random.Random(2).randbytes(2_000)
    log.append([make_data_batch([RawRecord(b"x", big, NOW_MS)])], term=1)
    await log.flush()
    await clean(log)
    assert 0 in records_of(log), "young: kept"
    assert log.plan_clean(log.dirty_offset, NOW_MS + 100) is None, "nothing due yet"
    later = NOW_MS + COMPACT.delete_retention_ms
    result = log.plan_clean(log.dirty_offset, later).run()
    log.adopt_cleaned(result, later)
    assert 0 not in records_of(log) and log.tombstones_due_ms is None
    assert log.plan_clean(log.dirty_offset, later + 10**9) is None, "and then none"
