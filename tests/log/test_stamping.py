"""A leader's stamp on a batch (log-append time): what readers of both protocols see."""

from __future__ import annotations

from quorumlog.log import kafka_batch
from quorumlog.log.batch import LOG_APPEND_TIME, Compression, build_batch, parse_batch
from quorumlog.log.records import RawRecord, batch_records, make_data_batch
from quorumlog.log.stamping import stamp

RECORDS = [RawRecord(b"k", b"one", 1_000), RawRecord(None, b"two", 5_000, [("h", b"v")])]
STAMP = 1_800_000_000_123


def test_a_stamped_native_batch_reads_with_the_leaders_time_and_checks():
    batch = make_data_batch(RECORDS)
    header, stamped = stamp(parse_batch(batch), batch, STAMP)
    assert parse_batch(stamped) == header  # both checksums hold
    assert header.flags & LOG_APPEND_TIME and header.timestamp_ms == STAMP
    read = batch_records(stamped, header)
    assert [(r.key, r.value, r.timestamp_ms, r.headers) for r in read] == [
        (b"k", b"one", STAMP, None),
        (None, b"two", STAMP, [("h", b"v")]),
    ]
    unstamped = parse_batch(batch)
    assert [r.timestamp_ms for r in batch_records(batch, unstamped)] == [1_000, 5_000]


def test_a_stamped_kafka_batch_carries_log_append_time_for_kafka_consumers():
    inner = kafka_batch.encode_batch(0, -1, [(b"k", b"one", 1_000, None)])
    batch = build_batch(inner, record_count=1, compression=Compression.KAFKA, timestamp_ms=1_000)
    header, stamped = stamp(parse_batch(batch), batch, STAMP)
    assert parse_batch(stamped) == header
    ((kafka_header, _),) = kafka_batch.split_batches(stamped[60:])  # its CRC holds
    assert kafka_header.attributes & kafka_batch.LOG_APPEND_TIME_TYPE
    assert kafka_header.max_timestamp == STAMP
    assert [r.timestamp_ms for r in batch_records(stamped, header)] == [STAMP]
