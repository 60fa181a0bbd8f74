"""Transactions in the log: a marker reads as no record and as Kafka's control batch; each
segment's open and aborted transactions, and the first unstable position after any commit
offset, agree with a reference model through rolls,
truncations, restarts (index files loaded, rebuilt, or written by the release before),
retention and the cleaner."""

from __future__ import annotations

import random
import struct

import pytest
from crc32c import crc32c

from quorumlog.log import kafka_batch
from quorumlog.log.batch import TRANSACTIONAL, TXN_MARKER, parse_header, split_batches
from quorumlog.log.config import LogConfig
from quorumlog.log.files import read_whole_file, write_file_atomically
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.records import (
    RawRecord,
    batch_records,
    keyed_entries,
    make_data_batch,
    offset_records,
)
from quorumlog.log.transactions import (
    AbortedTxn,
    TxnMarker,
    make_marker_batch,
    marker_of,
    number_and_epoch,
    producer_id,
)
from quorumlog.log.wal import Log
from tests.log.helpers import batch_of, open_log

DIR = "/data/log"


def txn_batch(number: int, epoch: int = 0, key: bytes | None = None) -> bytes:
    return make_data_batch(
        [RawRecord(key, b"in a transaction", 0, None)],
        producer_id=producer_id(number, epoch),
        flags=TRANSACTIONAL,
    )


def marker(number: int, commit: bool, first: int, epoch: int = 0) -> bytes:
    return make_marker_batch(producer_id(number, epoch), TxnMarker(commit, 7, first), 1_000)


def test_a_marker_takes_an_offset_and_holds_no_record():
    batch = marker(5, commit=False, first=40, epoch=3)
    header = parse_header(batch)
    assert header.flags & TXN_MARKER and header.record_count == 1
    assert number_and_epoch(header.producer_id) == (5, 3)
    assert marker_of(batch, header) == TxnMarker(False, 7, 40)
    assert batch_records(batch, header) == []
    assert offset_records(batch, header) == []
    assert keyed_entries(batch, header) == []


def test_kafka_reads_a_marker_as_a_control_batch():
    data = kafka_batch.control_batch(
        41, 2, (5, 3), commit=True, coordinator_epoch=7, timestamp_ms=9
    )
    header = kafka_batch.parse_header(data)  # checks the CRC
    assert header.attributes == kafka_batch.TRANSACTIONAL | kafka_batch.CONTROL
    assert (header.base_offset, header.leader_epoch, header.records_count) == (41, 2, 1)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 3, -1)
    assert (header.base_timestamp, header.max_timestamp) == (9, 9)
    (record,) = kafka_batch.records_of(data, header)
    assert kafka_batch.control_type(record) == kafka_batch.CONTROL_COMMIT
    assert record.value == struct.pack(">hi", 0, 7)  # version 0, the coordinator's epoch


def test_a_transactional_batch_tells_kafka_its_producer():
    data = kafka_batch.encode_batch(3, 0, [(b"k", b"v", 5, None)], transaction=(9, 1))
    header = kafka_batch.parse_header(data)
    assert header.attributes & kafka_batch.TRANSACTIONAL
    assert not header.attributes & kafka_batch.CONTROL
    assert (header.producer_id, header.producer_epoch) == (9, 1)


class Model:
    """What the log should know: its batches in order, as (position, kind, number, commit)."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, str, int, bool]] = []

    def replay(self, upto: int | None = None) -> tuple[dict[int, int], list[AbortedTxn]]:
        """The transactions open after the batches up to position `upto` (default: all),
        and those aborted by then."""
        open_txns: dict[int, int] = {}
        aborted = []
        for position, kind, number, commit in self.entries:
            if upto is not None and position > upto:
                break
            if kind == "txn":
                open_txns.setdefault(number, position)
            elif kind == "marker":
                first = open_txns.pop(number, None)
                if first is not None and not commit:
                    aborted.append(AbortedTxn(number, first, position))
        return open_txns, aborted

    def truncate(self, position: int) -> None:
        self.entries = [e for e in self.entries if e[0] < position]


def check(log: Log, model: Model, rng: random.Random) -> None:
    open_txns, aborted = model.replay()
    assert log.open_transactions() == open_txns
    end = log.dirty_offset
    assert log.aborted_between(0, end) == aborted
    for _ in range(3):
        lo = rng.randrange(end + 2)
        hi = rng.randrange(lo, end + 2)
        expected = [a for a in aborted if a.marker >= lo and a.first <= hi]
        assert log.aborted_between(lo, hi) == expected, (lo, hi)
        commit = rng.randrange(-1, end + 1)
        stable = min([commit + 1, *model.replay(upto=commit)[0].values()])
        assert log.first_unstable(commit) == stable, commit


@pytest.mark.parametrize("seed", range(30))
async def test_open_and_aborted_transactions_follow_a_reference_model(seed):
    rng = random.Random(seed)
    fs = MemoryFileSystem()
    log = open_log(fs, DIR)
    model = Model()
    for _ in range(250):
        roll = rng.random()
        number = rng.randrange(4)
        if roll < 0.35:
            position = log.dirty_offset + 1
            log.append([txn_batch(number, epoch=rng.randrange(2))], term=1)
            model.entries.append((position, "txn", number, False))
        elif roll < 0.5:
            position = log.dirty_offset + 1
            log.append([batch_of(b"plain", b"records")], term=1)
            model.entries.append((position, "plain", 0, False))
        elif roll < 0.68:
            position = log.dirty_offset + 1
            commit = rng.random() < 0.5
            # What a leader writes: where the transaction began here (-1: it did not).
            first = log.open_transactions().get(number, -1)
            log.append([marker(number, commit, first, epoch=rng.randrange(2))], term=1)
            model.entries.append((position, "marker", number, commit))
        elif roll < 0.75 and model.entries:
            position = rng.choice(model.entries)[0]
            log.truncate_suffix(position)
            model.truncate(position)
        elif roll < 0.82:
            await log.flush()
            log.close()
            for segment_index in fs.listdir(DIR):
                if segment_index.endswith(".index") and rng.random() < 0.3:
                    fs.remove(f"{DIR}/{segment_index}")
            verify = rng.random() < 0.5
            config = LogConfig(
                segment_bytes_max=2_000, index_interval_bytes=300, verify_on_open=verify
            )
            log = open_log(fs, DIR, config)
        check(log, model, rng)


async def test_an_index_file_of_the_release_before_reads_as_no_transactions():
    fs = MemoryFileSystem()
    log = open_log(fs, DIR)
    for i in range(40):
        log.append([batch_of(b"record %d" % i)], term=1)
    await log.flush()
    sealed = log._segments[:-1]
    assert sealed
    for segment in sealed:  # as the release before wrote them: QLI3, no transactions
        data = read_whole_file(fs, segment.index_path)
        body = b"QLI3" + data[4 : len(data) - 8 - len(segment.txns.to_bytes())]
        write_file_atomically(fs, segment.index_path, body + struct.pack("<I", crc32c(body)))
    log.close()
    fast = LogConfig(segment_bytes_max=2_000, index_interval_bytes=300, verify_on_open=False)
    log = open_log(fs, DIR, fast)
    assert not log._unindexed, "the old index files were adopted, not rebuilt"
    assert all(not s.txns.involved for s in log._segments)
    assert log.open_transactions() == {} and log.aborted_between(0, log.dirty_offset) == []
    assert log.read(0, 1 << 20).data  # and the records read as before


async def test_retention_keeps_an_open_transactions_records():
    fs = MemoryFileSystem()
    config = LogConfig(segment_bytes_max=2_000, index_interval_bytes=300, retention_bytes=3_000)
    log = open_log(fs, DIR, config)
    for _ in range(5):
        log.append([batch_of(b"x" * 100)], term=1)
    began = log.dirty_offset + 1
    log.append([txn_batch(1)], term=1)
    for _ in range(60):
        log.append([batch_of(b"x" * 100)], term=1)
    await log.flush()
    assert log.apply_retention(now_ms=0) <= began, "dropped an open transaction's batch"
    log.append([marker(1, commit=True, first=began)], term=1)
    assert log.apply_retention(now_ms=0) > began, "an ended transaction holds nothing back"


async def test_the_cleaner_keeps_markers_and_transactional_batches():
    fs = MemoryFileSystem()
    config = LogConfig(
        segment_bytes_max=2_000,
        index_interval_bytes=300,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.01,
    )
    log = open_log(fs, DIR, config)
    began = log.dirty_offset + 1
    log.append([txn_batch(2, key=b"k")], term=1)
    log.append([marker(2, commit=False, first=began)], term=1)
    for _ in range(40):  # later records of the same key: the transaction's is compacted away
        log.append([make_data_batch([RawRecord(b"k", b"v" * 50, 0, None)])], term=1)
    await log.flush()
    before = log.aborted_between(0, log.dirty_offset)
    cleaner = log.plan_clean(log.dirty_offset, now_ms=10**9)
    result = cleaner.run()
    log.adopt_cleaned(result, now_ms=10**9)
    await log.flush()
    batches = split_batches(log.read(0, 1 << 20).data)
    (txn_header, txn_bytes), (marker_header, marker_bytes) = batches[0], batches[1]
    assert txn_header.flags & TRANSACTIONAL and number_and_epoch(txn_header.producer_id)[0] == 2
    assert offset_records(txn_bytes, txn_header) == [], "its record was compacted away"
    assert marker_of(marker_bytes, marker_header) == TxnMarker(False, 7, began)
    assert log.aborted_between(0, log.dirty_offset) == before == [AbortedTxn(2, began, began + 1)]
