"""The leader's timestamp on a batch: log-append time (seed 002, KUDU-430).

A topic created with log-append timestamps has every data batch stamped by its leader as it
appends it: the header's `timestamp_ms` becomes the leader's clock and its LOG_APPEND_TIME
flag tells readers to take it as every record's time (`log.records.batch_records`). A Kafka
batch stored as it arrived is stamped the way a Kafka broker does it, so that Kafka
consumers read the same time. Which time the leader picks, and why it never goes back
across leader changes, is `actors/replica/stamper.py`.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from quorumlog.log import kafka_batch
from quorumlog.log.batch import HEADER_BYTES, LOG_APPEND_TIME, BatchHeader, Compression, seal_header

_TIMESTAMP = struct.Struct("<q")
_TIMESTAMP_POS = 40
_FLAGS = struct.Struct("<H")
_FLAGS_POS = 50
_PAYLOAD_CRC = struct.Struct("<I")
_PAYLOAD_CRC_POS = 56


def stamp(
    header: BatchHeader, batch: bytes | memoryview, stamp_ms: int
) -> tuple[BatchHeader, bytes]:
    """A copy of data batch `batch` stamped `stamp_ms`, and its header."""
    patched = bytearray(batch)
    payload_crc = header.payload_crc
    if header.compression is Compression.KAFKA:
        payload = memoryview(patched)[HEADER_BYTES:]
        kafka_batch.stamp_in_place(payload, stamp_ms)
        payload_crc = crc32c(payload)
        _PAYLOAD_CRC.pack_into(patched, _PAYLOAD_CRC_POS, payload_crc)
    flags = header.flags | LOG_APPEND_TIME
    _TIMESTAMP.pack_into(patched, _TIMESTAMP_POS, stamp_ms)
    _FLAGS.pack_into(patched, _FLAGS_POS, flags)
    seal_header(patched)
    stamped = header._replace(timestamp_ms=stamp_ms, flags=flags, payload_crc=payload_crc)
    return stamped, bytes(patched)
