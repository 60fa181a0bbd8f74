"""Unit tests of every log operation, on the real disk and on the in-memory one."""

from __future__ import annotations

import pytest

from quorumlog.log.batch import parse_batch, split_batches
from quorumlog.log.config import LogConfig
from quorumlog.log.files import CorruptionError, OsFileSystem
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.wal import Log, OffsetOutOfRangeError
from tests.log.helpers import SMALL, batch_of, open_log, read_all, values_in


@pytest.fixture(params=["os", "memory"])
def disk(request, tmp_path):
    if request.param == "os":
        return OsFileSystem(), str(tmp_path / "log")
    return MemoryFileSystem(), "/data/log"


def fill(log: Log, batches: int, per_batch: int = 3, term: int = 1) -> list[bytes]:
    values = []
    for _ in range(batches):
        vals = [b"v%d-%d" % (log.dirty_offset + 1, i) * 8 for i in range(per_batch)]
        log.append([batch_of(*vals)], term=term)
        values.extend(vals)
    return values


async def test_empty_log(disk):
    log = open_log(*disk)
    assert (log.log_start_offset, log.dirty_offset, log.flushed_offset) == (0, -1, -1)
    assert log.last_term == 0
    assert log.read(0, 1000).data == b""
    assert log.last_offset_of_term(3) is None
    assert await log.flush() == -1
    with pytest.raises(OffsetOutOfRangeError):
        log.term_at(0)


async def test_one_batch_round_trip(disk):
    log = open_log(*disk)
    assert log.append([batch_of(b"a", b"b", b"c")], term=2) == 2
    assert log.flushed_offset == -1
    assert await log.flush() == 2
    assert values_in(log.read(0, 10).data) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert log.term_at(1) == 2
    header = parse_batch(log.read(1, 10).data)
    assert (header.base_offset, header.term) == (0, 2)


async def test_offsets_are_dense_across_appends_and_segments(disk):
    log = open_log(*disk)
    values = fill(log, 60)
    assert len(log._segments) > 3, "segments must roll over at segment_bytes_max"
    assert all(s.size_bytes <= SMALL.segment_bytes_max for s in log._segments)
    assert [v for _, v in read_all(log)] == values
    assert [o for o, _ in read_all(log)] == list(range(len(values)))


async def test_read_respects_byte_budget_and_upto(disk):
    log = open_log(*disk)
    fill(log, 10)
    one = log.read(0, 1).data
    assert len(split_batches(one)) == 1, "at least one whole batch even over budget"
    upto = log.read(0, 10_000, upto_offset=5).data
    assert values_in(upto)[-1][0] == 5
    assert values_in(log.read(0, 10_000, upto_offset=4).data)[-1][0] == 2, "no batch past upto"
    assert log.read(log.dirty_offset + 1, 100).data == b""


async def test_read_from_inside_a_batch_starts_at_that_batch(disk):
    log = open_log(*disk)
    fill(log, 5)
    assert values_in(log.read(4, 1).data)[0][0] == 3


async def test_reopen_keeps_everything(disk):
    fs, d = disk
    log = open_log(fs, d)
    values = fill(log, 40, term=1) + fill(log, 10, term=3)
    await log.flush()
    log.close()
    log = open_log(fs, d)
    assert [v for _, v in read_all(log)] == values
    assert log.last_term == 3
    assert log.flushed_offset == log.dirty_offset == len(values) - 1


async def test_reopen_from_index_files_without_scanning(disk):
    fs, d = disk
    log = open_log(fs, d)
    values = fill(log, 40, term=1) + fill(log, 20, term=2)
    await log.flush()
    terms = [log.term_at(o) for o in range(len(values))]
    log.close()
    fast = LogConfig(segment_bytes_max=2_000, index_interval_bytes=300, verify_on_open=False)
    log = open_log(fs, d, fast)
    assert [v for _, v in read_all(log)] == values
    assert [log.term_at(o) for o in range(len(values))] == terms


async def test_missing_or_damaged_index_file_is_rebuilt(disk):
    fs, d = disk
    log = open_log(fs, d)
    values = fill(log, 40)
    await log.flush()
    first = log._segments[0]
    fs.remove(first.index_path)
    second = log._segments[1]
    log.close()
    f = fs.open(second.index_path)
    f.truncate(10)
    f.close()
    fast = LogConfig(segment_bytes_max=2_000, index_interval_bytes=300, verify_on_open=False)
    log = open_log(fs, d, fast)
    assert [v for _, v in read_all(log)] == values
    await log.flush()
    assert fs.exists(first.index_path), "a rebuilt index is written back"


async def test_terms_and_last_offset_of_term(disk):
    log = open_log(*disk)
    fill(log, 4, term=1)  # offsets 0..11
    fill(log, 4, term=3)  # 12..23
    fill(log, 4, term=4)  # 24..35
    assert [log.term_at(o) for o in (0, 11, 12, 23, 24, 35)] == [1, 1, 3, 3, 4, 4]
    assert log.last_offset_of_term(1) == 11
    assert log.last_offset_of_term(2) == 11, "a missing term answers with the one below it"
    assert log.last_offset_of_term(3) == 23
    assert log.last_offset_of_term(9) == 35
    assert log.last_offset_of_term(0) is None
    with pytest.raises(ValueError):
        log.append([batch_of(b"x")], term=2)


async def test_truncate_suffix_within_and_across_segments(disk):
    fs, d = disk
    log = open_log(fs, d)
    values = fill(log, 60)
    await log.flush()
    segments_before = len(log._segments)
    log.truncate_suffix(90)
    assert log.dirty_offset == 89
    assert log.flushed_offset == 89
    assert len(log._segments) < segments_before
    assert [v for _, v in read_all(log)] == values[:90]
    fill(log, 2, term=2)
    await log.flush()
    log.close()
    log = open_log(fs, d)
    assert log.dirty_offset == 95
    assert log.term_at(90) == 2
    assert [v for _, v in read_all(log)][:90] == values[:90]


async def test_truncate_suffix_must_hit_a_batch_start(disk):
    log = open_log(*disk)
    fill(log, 3)
    with pytest.raises(ValueError):
        log.truncate_suffix(4)
    log.truncate_suffix(100)  # past the end: nothing to do
    assert log.dirty_offset == 8


async def test_truncate_everything_then_append(disk):
    log = open_log(*disk)
    fill(log, 30)
    log.truncate_suffix(0)
    assert (log.dirty_offset, log.log_start_offset) == (-1, 0)
    fill(log, 1, term=5)
    assert log.term_at(0) == 5


async def test_truncation_during_flush_voids_its_result(disk):
    """Storage rule 3: a flush that raced a truncation must not report the old dirty."""
    log = open_log(*disk)
    fill(log, 5)  # offsets 0..14

    async def truncating_sync(fn, *args):
        log.truncate_suffix(6)
        fn(*args)

    log._run_sync = truncating_sync
    assert await log.flush() == -1, "the flush covered offsets that were truncated meanwhile"
    assert log.dirty_offset == 5
    assert await log.flush() == 5


async def test_prefix_truncation_and_retention(disk):
    fs, d = disk
    config = LogConfig(segment_bytes_max=2_000, index_interval_bytes=300, retention_bytes=5_000)
    log = open_log(fs, d, config)
    values = fill(log, 80)
    await log.flush()
    start = log.truncate_prefix(30)
    assert 0 < start <= 30
    with pytest.raises(OffsetOutOfRangeError):
        log.read(start - 1, 100)
    assert [v for _, v in read_all(log)] == values[start:]
    log.apply_retention(now_ms=0)
    assert log.size_bytes <= 5_000 + config.segment_bytes_max
    assert log.log_start_offset > start
    log.close()
    log = open_log(fs, d, config)
    assert [v for _, v in read_all(log)] == values[log.log_start_offset :]


async def test_retention_by_age(disk):
    config = LogConfig(segment_bytes_max=2_000, index_interval_bytes=300, retention_ms=1_000)
    log = open_log(*disk, config)
    for i in range(40):
        log.append([batch_of(b"x" * 100, timestamp_ms=i * 100)], term=1)
    log.apply_retention(now_ms=3_000)
    assert log._segments[0].max_timestamp_ms >= 2_000 or len(log._segments) == 1
    assert log.log_start_offset > 0


async def test_reset_continues_at_a_later_offset(disk):
    fs, d = disk
    log = open_log(fs, d)
    fill(log, 10)
    log.reset(1000, 900)
    assert (log.log_start_offset, log.dirty_offset) == (1000, 999)
    assert log.records_before(1000) == 900
    log.append([batch_of(b"a")], term=7)
    await log.flush()
    log.close()
    log = open_log(fs, d)
    assert values_in(log.read(1000, 100).data) == [(1000, b"a")]
    assert (log.records_before(1000), log.position_of(900)) == (900, 1000)


async def test_placed_batches_must_continue_the_log(disk):
    leader = open_log(*disk)
    fill(leader, 4, term=2)
    follower_fs = MemoryFileSystem()
    follower = open_log(follower_fs, "/f/log")
    data = leader.read(0, 10_000).data
    assert follower.append_placed(split_batches(data), keep_recent=False) == leader.dirty_offset
    with pytest.raises(ValueError):
        follower.append_placed(split_batches(data))  # offsets no longer continue the log
    assert read_all(follower) == read_all(leader)


async def test_corrupt_sealed_segment_refuses_to_open(disk):
    fs, d = disk
    log = open_log(fs, d)
    fill(log, 60)
    await log.flush()
    path = log._segments[1].path
    log.close()
    damage(fs, path, 100)
    with pytest.raises(CorruptionError) as err:
        open_log(fs, d)
    assert path in str(err.value)


async def test_missing_middle_segment_refuses_to_open(disk):
    fs, d = disk
    log = open_log(fs, d)
    fill(log, 60)
    await log.flush()
    path = log._segments[1].path
    log.close()
    fs.remove(path)
    with pytest.raises(CorruptionError, match="missing"):
        open_log(fs, d)


def damage(fs, path: str, position: int) -> None:
    if isinstance(fs, MemoryFileSystem):
        fs.flip_bit(path, position * 8)
        return
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x40]))
