"""`RaftLog`: the log as a core sees it, the node's log with the core's unapplied writes in
front. Whatever it answers before its writes are applied, the node's log answers after."""

from __future__ import annotations

import random

import pytest

from quorumlog.log.batch import BatchType, build_batch, place_batches, split_batches
from quorumlog.log.config import LogConfig
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.wal import Log, OffsetOutOfRangeError, run_inline
from quorumlog.raft.raft_log import RaftLog
from tests.log.helpers import batch_of

CONFIG = LogConfig(segment_bytes_max=2048)  # a few batches a segment: cuts cross segments


def fresh_log() -> Log:
    return Log.open(MemoryFileSystem(), "/log", CONFIG, run_sync=run_inline)


def batch_starts(log: Log | RaftLog) -> list[int]:
    starts, offset = [], log.log_start_offset
    while offset <= log.dirty_offset:
        chunk = log.read(offset, 1 << 20)
        starts += [header.base_offset for header, _ in split_batches(chunk.data)]
        offset = chunk.last_offset + 1
    return starts


def control_batch() -> bytes:
    """A batch of Raft's own (a barrier): it takes an offset but holds no record."""
    return build_batch(b"", record_count=1, batch_type=BatchType.BARRIER)


def same_answers(view: RaftLog, log: Log) -> None:
    assert (view.log_start_offset, view.dirty_offset, view.last_term) == (
        log.log_start_offset,
        log.dirty_offset,
        log.last_term,
    )
    starts = batch_starts(log)
    assert batch_starts(view) == starts
    for offset in range(log.log_start_offset, log.dirty_offset + 1):
        assert view.term_at(offset) == log.term_at(offset)
        assert view.batch_start(offset) == log.batch_start(offset)
    for offset in range(log.log_start_offset, log.dirty_offset + 2):
        assert view.records_before(offset) == log.records_before(offset)
    for start in starts:
        # Whole batches from there; either may stop sooner (a segment's end, the stored
        # part's end), never with other bytes.
        ours, theirs = view.read(start, 1 << 20).data, log.read(start, 1 << 20).data
        assert ours and theirs and (ours.startswith(theirs) or theirs.startswith(ours))
    for term in range(8):
        assert view.last_offset_of_term(term) == log.last_offset_of_term(term)
    with pytest.raises(OffsetOutOfRangeError):
        view.term_at(log.dirty_offset + 1)


@pytest.mark.parametrize("seed", range(40))
def test_the_view_answers_as_the_log_does_once_its_writes_are_applied(seed):
    """Random leader appends, follower appends, cuts and resets, applied at random points:
    the view (writes pending) and a log written directly agree after every step, and the
    log the writes were applied to ends up holding the same batches."""
    rng = random.Random(seed)
    stored, direct = fresh_log(), fresh_log()
    view = RaftLog(stored)
    term = 1
    for _ in range(60):
        op = rng.random()
        starts = batch_starts(direct)
        if op < 0.35:
            term += rng.random() < 0.2
            batches = [
                batch_of(rng.randbytes(rng.randint(1, 300)))
                if rng.random() < 0.8
                else control_batch()
                for _ in range(3)
            ]
            batches = batches[: rng.randint(1, 3)]
            view.append(batches, term)
            direct.append(batches, term)
        elif op < 0.6:
            term += rng.random() < 0.2
            placed = place_batches(
                [batch_of(b"r%d" % i) for i in range(2)], view.dirty_offset + 1, term
            )
            view.append_replicated(placed)
            direct.append_placed(placed, keep_recent=False)
        elif op < 0.75 and starts:
            cut = rng.choice(starts)
            view.truncate_suffix(cut)
            direct.truncate_suffix(cut)
        elif op < 0.8:
            next_offset = direct.dirty_offset + rng.randint(1, 50)
            records = rng.randint(0, next_offset)
            view.reset(next_offset, records)
            direct.reset(next_offset, records)
        elif (writes := view.take_writes()) is not None:
            writes.apply(stored)
        same_answers(view, direct)
    if (writes := view.take_writes()) is not None:
        writes.apply(stored)
    assert view.take_writes() is None, "taken once"
    same_answers(view, direct)
    assert batch_starts(stored) == batch_starts(direct)
    if direct.dirty_offset >= direct.log_start_offset:
        start = direct.log_start_offset
        assert stored.read(start, 1 << 30).data == direct.read(start, 1 << 30).data
