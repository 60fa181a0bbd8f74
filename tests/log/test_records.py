"""The record codec: zstd where it pays, raw where it cannot; no value is not an empty one."""

from __future__ import annotations

import json
import random

import msgpack

from quorumlog.log import records as records_module
from quorumlog.log.batch import Compression, parse_batch
from quorumlog.log.records import (
    COMPRESS_PROBE_BYTES,
    RawRecord,
    batch_records,
    encode_records,
    make_data_batch,
)


def _records(values: list[bytes]) -> list[RawRecord]:
    return [RawRecord(None, value, 1_000 + i) for i, value in enumerate(values)]


def _round_trip(records: list[RawRecord]) -> list[RawRecord]:
    batch = make_data_batch(records)
    return batch_records(batch, parse_batch(batch))


def test_a_large_batch_of_alike_records_is_compressed():
    rng = random.Random(1)
    events = [
        json.dumps({"user": rng.randrange(10**6), "page": f"/p/{rng.randrange(999)}"}).encode()
        for _ in range(20_000)
    ]
    records = _records(events)
    payload, compression = encode_records(records)
    assert compression is Compression.ZSTD
    assert len(payload) < sum(map(len, events)) // 3
    assert _round_trip(records) == records


def test_a_large_batch_of_random_records_is_stored_raw_after_a_probe_only(monkeypatch):
    compressed: list[int] = []
    real = records_module._compressor

    class Counting:
        def compress(self, data):
            compressed.append(len(data))
            return real().compress(data)

    monkeypatch.setattr(records_module, "_compressor", Counting)
    rng = random.Random(2)
    records = _records([rng.randbytes(1024) for _ in range(1024)])
    _, compression = encode_records(records)
    assert compression is Compression.NONE
    assert compressed == [COMPRESS_PROBE_BYTES]  # the whole megabyte never went through zstd
    assert _round_trip(records) == records


def test_the_probe_reads_the_opening_bytes_only():
    # Random first, alike after: the probe sees only the random part (a batch's records
    # are taken to be alike; such a batch is stored raw, which costs room, not data).
    rng = random.Random(3)
    values = [rng.randbytes(1024) for _ in range(2 * COMPRESS_PROBE_BYTES // 1024)]
    values += [b"a" * 1024] * 512
    records = _records(values)
    assert encode_records(records)[1] is Compression.NONE
    assert encode_records(records[len(values) - 512 :])[1] is Compression.ZSTD
    assert _round_trip(records) == records


def test_a_thread_does_not_keep_a_packer_grown_by_a_large_value():
    records = records_module
    small = records.packb([b"x"])
    kept = records._codecs.pack
    assert records.packb([b"x"]) == small and records._codecs.pack is kept
    large = [b"y" * (records.PACKER_KEPT_BYTES_MAX + 1)]
    assert records.packb(large) == msgpack.packb(large)
    assert getattr(records._codecs, "pack", None) is None  # dropped with its buffer
    assert records.packb([b"x"]) == small  # and made again when next needed


def test_a_str_stored_by_an_older_client_reads_as_its_bytes():
    """Clients before 0.4 stored a str given as a value (or key, or header value) as it
    was; every reader of the partition, Kafka fetches included, then failed on it."""
    poisoned = [(None, "poison", 1, None), ("k", b"v", 2, [("h", "x")]), (b"k", b"ok", 3, None)]
    batch = records_module.make_data_batch(poisoned)
    read = records_module.batch_records(batch, parse_batch(batch))
    assert read == [
        RawRecord(None, b"poison", 1, None),
        RawRecord(b"k", b"v", 2, [("h", b"x")]),
        RawRecord(b"k", b"ok", 3, None),
    ]


def test_no_value_is_not_an_empty_value():
    """A tombstone (a key and no value: Kafka's null) reads back as None, an empty value
    as b"", with or without other fields that push the decoder off its fast path."""
    records = [
        RawRecord(b"gone", None, 1),
        RawRecord(b"empty", b"", 2),
        RawRecord(b"gone", None, 3, [("h", b"v")]),
        RawRecord(None, b"x" * 300, 4),  # enough for zstd: a compressed payload too
    ]
    assert _round_trip(records) == records
