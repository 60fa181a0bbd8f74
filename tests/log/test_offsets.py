"""Record offsets (log/offsets.py): a data record's offset counts the data records before
it, across Raft's own batches, truncations, drops of the log's beginning, resets and
reopening, the way a model that remembers every position's kind counts them."""

from __future__ import annotations

import random

import pytest

from quorumlog.log.batch import BatchType, build_batch
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.offsets import OffsetTranslator
from tests.log.helpers import SMALL, batch_of, open_log


def control() -> bytes:
    return build_batch(b"", record_count=1, batch_type=BatchType.BARRIER)


class Model:
    """What the log should answer: its start, the records before it, and for every
    position from there whether a data record holds it."""

    def __init__(self) -> None:
        self.start, self.start_records, self.data = 0, 0, []

    def records_before(self, position: int) -> int:
        return self.start_records + sum(self.data[: position - self.start])

    def positions_of_records(self) -> dict[int, int]:
        out, record = {}, self.start_records
        for i, is_data in enumerate(self.data):
            if is_data:
                out[record] = self.start + i
                record += 1
        return out


def same_answers(log, model: Model) -> None:
    assert log.log_start_offset == model.start
    for position in range(model.start, model.start + len(model.data) + 1):
        assert log.records_before(position) == model.records_before(position), position
    for record, position in model.positions_of_records().items():
        assert log.position_of(record) == position, record
    # Past the end: where the next record goes if only data comes.
    end = model.start + len(model.data)
    assert log.position_of(model.records_before(end)) == end


@pytest.mark.parametrize("seed", range(30))
async def test_record_offsets_follow_appends_cuts_drops_resets_and_reopens(seed):
    rng = random.Random(seed)
    fs = MemoryFileSystem()
    log = open_log(fs, "/log")
    model = Model()
    term = 1
    for _ in range(80):
        op = rng.random()
        if op < 0.5:
            term += rng.random() < 0.1
            kinds = [rng.random() < 0.75 for _ in range(rng.randint(1, 4))]
            batches = [
                batch_of(rng.randbytes(rng.randint(1, 400))) if d else control() for d in kinds
            ]
            log.append(batches, term)
            model.data += kinds
        elif op < 0.6 and model.data:
            cut = log.batch_start(rng.randint(model.start, log.dirty_offset))
            log.truncate_suffix(cut)
            del model.data[cut - model.start :]
        elif op < 0.75:
            start = log.truncate_prefix(rng.randint(model.start, log.dirty_offset + 1))
            model.start_records = model.records_before(start)
            del model.data[: start - model.start]
            model.start = start
        elif op < 0.8:
            start = log.dirty_offset + rng.randint(1, 30)
            records = model.records_before(log.dirty_offset + 1) + rng.randint(0, 20)
            log.reset(start, records)
            model.start, model.start_records, model.data = start, records, []
        else:
            await log.flush()
            log.close()
            log = open_log(fs, "/log")
        same_answers(log, model)
    await log.flush()
    log.close()
    same_answers(open_log(fs, "/log"), model)


async def test_a_log_of_before_record_offsets_counts_from_its_first_position():
    """A log written before record offsets has no record start file: its control batches
    are found by the scan (its index files are of the older kind), and a log that still
    starts at position 0 counts exactly."""
    fs = MemoryFileSystem()
    log = open_log(fs, "/log")
    log.append([control(), batch_of(b"a"), batch_of(b"b"), control(), batch_of(b"c")], term=1)
    await log.flush()
    log.close()
    log = open_log(fs, "/log")
    assert [log.position_of(r) for r in range(3)] == [1, 2, 4]
    assert log.records_before(log.dirty_offset + 1) == 3


async def test_index_files_keep_the_control_batches():
    """Sealed segments are not scanned when their index files are intact: the controls
    come from the index file."""
    fs = MemoryFileSystem()
    log = open_log(fs, "/log", SMALL)
    for i in range(40):
        log.append([control() if i % 7 == 0 else batch_of(b"x" * 200)], term=1)
    await log.flush()
    await log.flush()  # index files of the segments sealed by the first flush
    expected = [log.records_before(p) for p in range(log.dirty_offset + 2)]
    log.close()
    log = open_log(fs, "/log", SMALL)
    assert len(log._segments) > 3
    assert [log.records_before(p) for p in range(log.dirty_offset + 2)] == expected


def test_the_translator_counts_back_over_copied_in_positions():
    translator = OffsetTranslator(start=10, start_records=7)
    translator.add_control(12, 1)
    translator.prepend(4, [(5, 1), (6, 1)])
    # Positions 4..9 hold 4 records and 2 controls: 3 records came before position 4.
    assert (translator.start, translator.start_records) == (4, 3)
    assert [translator.records_before(p) for p in (4, 5, 7, 10, 12, 13)] == [3, 4, 4, 7, 9, 9]
    assert [translator.position_of(r) for r in (3, 4, 5, 9)] == [4, 7, 8, 13]
