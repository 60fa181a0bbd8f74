"""The time index: the first record stamped at or after a time, found through each segment's
sparse index, against a plain scan of every record; kept through rolls and truncations,
and rebuilt when its file is missing or damaged (it never stops a log opening)."""

from __future__ import annotations

import random
import struct

import pytest
from crc32c import crc32c

from quorumlog.log import kafka_batch
from quorumlog.log.batch import (
    LOG_APPEND_TIME,
    TYPES_CHECKED,
    BatchType,
    build_batch,
    parse_batch,
)
from quorumlog.log.config import LogConfig
from quorumlog.log.files import OsFileSystem, read_whole_file, write_file_atomically
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.records import encode_records, make_data_batch
from quorumlog.log.stamping import stamp
from quorumlog.log.timeindex import TimedOffset, TimeIndex
from quorumlog.log.wal import Log
from tests.log.helpers import SMALL, open_log

FAST = LogConfig(segment_bytes_max=2_000, index_interval_bytes=300, verify_on_open=False)
BASE_MS = 1_764_320_400_000  # 2025-11-28T09:00:00Z


@pytest.fixture(params=["os", "memory"])
def disk(request, tmp_path):
    if request.param == "os":
        return OsFileSystem(), str(tmp_path / "log")
    return MemoryFileSystem(), "/data/log"


def oracle(stamps: dict[int, int], timestamp_ms: int, upto: int) -> TimedOffset | None:
    """The first record up to `upto` stamped at or after the time, by looking at all."""
    for offset in sorted(stamps):
        if offset <= upto and stamps[offset] >= timestamp_ms:
            return TimedOffset(offset, stamps[offset])
    return None


def fill(log: Log, rng: random.Random, batches: int, term: int = 1) -> dict[int, int]:
    """Batches of 1-4 records whose stamps mostly rise but often go back (CreateTime from
    many producers' clocks), with a barrier now and then; offset -> timestamp."""
    stamps = {}
    clock = BASE_MS
    for _ in range(batches):
        if rng.random() < 0.1:
            log.append([build_batch(b"", record_count=1, batch_type=BatchType.BARRIER)], term)
            continue
        records = []
        for _ in range(rng.randint(1, 4)):
            clock += rng.randint(0, 40)
            records.append((None, b"x" * rng.randint(10, 80), clock - rng.randint(0, 300), None))
        first = log.dirty_offset + 1
        log.append([make_data_batch(records)], term)
        stamps.update({first + i: r[2] for i, r in enumerate(records)})
    return stamps


def targets(stamps: dict[int, int]) -> list[int]:
    values = sorted(set(stamps.values()))
    return [values[0] - 1_000, *values, *(v + 1 for v in values), values[-1] + 1_000]


def check_all(log: Log, stamps: dict[int, int], upto: int | None = None) -> None:
    upto = log.dirty_offset if upto is None else upto
    for t in targets(stamps):
        assert log.offset_for_time(t, upto) == oracle(stamps, t, upto), t


async def test_lookups_with_timestamps_out_of_order_match_a_scan_of_every_record(disk):
    log = open_log(*disk)
    stamps = fill(log, random.Random(1), 200)
    assert len(log._segments) > 5, "the records span many segments"
    check_all(log, stamps)
    for near in (17, log.dirty_offset // 2, log.dirty_offset - 3):
        check_all(log, stamps, log.batch_start(near) - 1)  # a commit ends a batch


async def test_the_index_is_sparse_and_a_lookup_starts_inside_the_segment(disk):
    """One entry per offset-index entry; a time in a segment's middle is looked up from
    an entry past its start (a lookup that read each segment whole would not need it)."""
    log = open_log(*disk)
    stamps = fill(log, random.Random(2), 200)
    segment = max(log._segments, key=lambda s: len(s.time_index))
    entries = len(segment.time_index)
    assert 2 <= entries < segment.last_offset - segment.base_offset
    assert list(segment.time_index.offsets) == list(segment.index_offsets)
    middle = segment.time_index.timestamps[entries - 1]
    assert segment.time_index.scan_from(middle + 1) > segment.base_offset
    check_all(log, stamps)


def test_an_entry_bounds_every_record_before_it():
    """Looked up from the last entry stamped before the time, not the first at or after
    it: a record between two sparse entries may be the answer."""
    index = TimeIndex()
    index.add(100, 0)
    index.add(500, 40)  # a record at 20 stamped 300 was not indexed: it lies before 40
    assert index.scan_from(300) == 0
    assert index.scan_from(100) is None
    assert index.scan_from(501) == 40


async def test_batches_from_older_clients_and_stamped_batches_are_indexed_by_their_records(disk):
    """A batch made before headers held the largest timestamp says when it was made; a
    stamped one (log-append time) holds the leader's time for every record."""
    log = open_log(*disk)
    records = [(None, b"late", BASE_MS + 5_000, None), (None, b"early", BASE_MS, None)]
    payload, compression = encode_records(records)
    old = build_batch(
        payload,
        record_count=2,
        compression=compression,
        timestamp_ms=BASE_MS - 1,
        flags=TYPES_CHECKED,
    )
    log.append([old], term=1)
    fresh = make_data_batch([(None, b"f", BASE_MS + 100, None)])
    header, stamped = stamp(parse_batch(fresh), fresh, BASE_MS + 9_000)
    assert header.flags & LOG_APPEND_TIME
    log.append([stamped], term=1)
    assert log.offset_for_time(BASE_MS + 10) == TimedOffset(0, BASE_MS + 5_000)
    assert log.offset_for_time(BASE_MS + 5_001) == TimedOffset(2, BASE_MS + 9_000)
    assert log.offset_for_time(BASE_MS + 9_001) is None


async def test_roll_and_truncation_keep_the_index_true(disk):
    log = open_log(*disk)
    rng = random.Random(3)
    stamps = fill(log, rng, 120)
    cut = log.batch_start(log._segments[-2].base_offset + 2)
    log.truncate_suffix(cut)
    stamps = {o: t for o, t in stamps.items() if o < cut}
    check_all(log, stamps)
    stamps.update(fill(log, rng, 60, term=2))
    check_all(log, stamps)


@pytest.mark.parametrize("verify_on_open", [True, False])
@pytest.mark.parametrize("damage", ["deleted", "truncated", "flipped", "old_format", "disordered"])
async def test_a_missing_or_damaged_index_file_is_rebuilt(disk, damage, verify_on_open):
    fs, d = disk
    log = open_log(fs, d)
    stamps = fill(log, random.Random(4), 150)
    await log.flush()
    sealed = log._segments[:-1]
    built = [s.index_file_bytes() for s in sealed]
    victim = sealed[1]
    assert len(victim.time_index) >= 2
    log.close()
    _damage(fs, victim.index_path, damage)
    config = FAST if not verify_on_open else SMALL
    log = open_log(fs, d, config)
    check_all(log, stamps)
    assert [s.index_file_bytes() for s in log._segments[:-1]] == built
    await log.flush()
    assert read_whole_file(fs, victim.index_path) == built[1], "the rebuilt file is written"


def _damage(fs, path: str, how: str) -> None:
    data = bytearray(read_whole_file(fs, path))
    match how:
        case "deleted":
            fs.remove(path)
            return
        case "truncated":
            data = data[: len(data) - 20]
        case "flipped":
            data[len(data) // 2] ^= 0x40
        case "old_format":  # an index file from before the time index
            data[:4] = b"QLI1"
        case "disordered":  # checksum intact, time entries out of order
            body = data[:-4]
            n_times = struct.unpack_from("<I", body, 12)[0]
            times_at = len(body) - 16 * n_times
            first, second = struct.unpack_from("<qq", body, times_at)
            struct.pack_into("<qq", body, times_at, second + 1, first)
            data = body + struct.pack("<I", crc32c(bytes(body)))
    write_file_atomically(fs, path, bytes(data))


def test_a_kafka_batch_is_indexed_by_what_its_records_hold():
    """A Kafka producer's max_timestamp is its word; the leader reads the records' own."""
    stamps = [BASE_MS + 50, BASE_MS + 900, BASE_MS + 10]
    batch = kafka_batch.encode_batch(0, -1, [(None, b"v", t, []) for t in stamps])
    header = kafka_batch.parse_header(batch)
    assert kafka_batch.check_records(batch, header) == BASE_MS + 900


async def test_any_time_before_every_record_finds_the_first_data_record_past_control_batches(
    disk,
):
    """A barrier is indexed with no time (-1): a lookup of a time that early must still
    skip it, not decode it as records (it raised, and the node answering stopped)."""
    log = open_log(*disk)
    log.append([build_batch(b"", record_count=1, batch_type=BatchType.BARRIER)], 1)
    stamps = fill(log, random.Random(4), 60)
    for t in (-5, -1, 0):
        assert log.offset_for_time(t) == oracle(stamps, t, log.dirty_offset)


async def test_a_lookup_from_a_readers_start_finds_nothing_before_it(disk):
    log = open_log(*disk)
    stamps = fill(log, random.Random(5), 200)
    for start in (1, log.dirty_offset // 3, log.dirty_offset // 2 + 1, log.dirty_offset):
        later = {o: t for o, t in stamps.items() if o >= start}
        for t in targets(stamps):
            found = log.offset_for_time(t, log.dirty_offset, from_offset=start)
            assert found == oracle(later, t, log.dirty_offset), (start, t)
