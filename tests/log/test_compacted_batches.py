"""The cleaner's batches: they keep the offsets they span and hold only the records kept,
for every reader (native, Kafka fetches, the time index); appends cannot forge one."""

from __future__ import annotations

import pytest

from quorumlog.actors.kafka.fetch import as_kafka
from quorumlog.actors.replica.append_check import checked_batches
from quorumlog.client.protocol import decode_batches
from quorumlog.log import kafka_batch
from quorumlog.log.batch import COMPACTED, BatchError, build_batch, parse_batch
from quorumlog.log.records import (
    RawRecord,
    batch_records,
    encode_records,
    make_compacted_batch,
    make_data_batch,
    offset_records,
)
from quorumlog.log.timeindex import first_at_or_after
from quorumlog.transport.messages import Acks, AppendRequest, ErrorReply

KEPT = [
    (102, RawRecord(b"a", b"latest a", 2_000)),
    (105, RawRecord(b"b", None, 2_500)),  # a tombstone still within its retention
    (109, RawRecord(b"c", b"c", 1_000, [("h", b"v")])),
]


def test_a_compacted_batch_keeps_its_span_and_its_records_offsets():
    batch = make_compacted_batch(KEPT, base_offset=100, span=10, term=3)
    header = parse_batch(batch)
    assert header.flags & COMPACTED
    assert (header.base_offset, header.last_offset, header.term) == (100, 109, 3)
    assert header.timestamp_ms == 2_500
    assert offset_records(batch, header) == KEPT
    assert batch_records(batch, header) == [r for _, r in KEPT]


def test_an_emptied_batch_still_covers_its_offsets():
    batch = make_compacted_batch([], base_offset=7, span=4, term=1)
    header = parse_batch(batch)
    assert (header.base_offset, header.last_offset) == (7, 10)
    assert offset_records(batch, header) == []


def test_a_dense_batch_counts_its_records_from_its_base():
    batch = make_data_batch([RawRecord(None, b"x", 1), RawRecord(None, b"y", 2)])
    header = parse_batch(batch)._replace(base_offset=40)
    assert [at for at, _ in offset_records(batch, header)] == [40, 41]


@pytest.mark.parametrize("deltas", [[0, 0], [3, 1], [0, 10], [-1]])
def test_offsets_out_of_order_or_outside_the_span_are_refused(deltas):
    payload, compression = encode_records([(None, b"v", 0, None, d) for d in deltas])
    batch = build_batch(payload, record_count=10, compression=compression, flags=COMPACTED)
    with pytest.raises(BatchError, match="compacted"):
        offset_records(batch, parse_batch(batch))


def test_a_reader_reads_the_kept_records_and_goes_on_after_the_span():
    batch = make_compacted_batch(KEPT, base_offset=100, span=10, term=3)
    records, next_offset, rest = decode_batches(batch, 104, 100, "t", 0)
    assert [(r.offset, r.key, r.value) for r in records] == [(105, b"b", None), (109, b"c", b"c")]
    assert next_offset == 110 and not rest
    records, next_offset, _ = decode_batches(make_compacted_batch([], 0, 5, 1), 2, 10, "t", 0)
    assert records == [] and next_offset == 5


def test_a_kafka_fetch_serves_the_holes_as_kafka_does():
    batches = make_compacted_batch(KEPT, 100, 10, 3) + make_compacted_batch([], 110, 5, 3)
    served = kafka_batch.split_batches(as_kafka(batches))
    (first, first_view), (empty, _) = served
    assert (first.base_offset, first.last_offset_delta, first.records_count) == (100, 9, 3)
    records = kafka_batch.records_of(first_view, first)
    assert [(r.offset_delta, r.key, r.value) for r in records] == [
        (2, b"a", b"latest a"),
        (5, b"b", None),
        (9, b"c", b"c"),
    ]
    assert (empty.base_offset, empty.last_offset_delta, empty.records_count) == (110, 4, 0)


def test_the_time_index_finds_a_kept_record_at_its_offset():
    batch = make_compacted_batch(KEPT, 100, 10, 3)
    found = first_at_or_after(batch, 2_100, 0)
    assert (found.offset, found.timestamp_ms) == (105, 2_500)


def test_an_append_cannot_carry_a_compacted_batch():
    batch = make_compacted_batch(KEPT, 0, 10, 0)
    answer = checked_batches(AppendRequest(batch, Acks.QUORUM, -1, -1), 1 << 20, None)
    assert isinstance(answer, ErrorReply) and "cleaner" in answer.message
