"""Which partition an append goes to: Kafka's default partitioner, so that a keyed record
lands in the same partition whichever client (or protocol) wrote it.

Keyed: murmur2 of the key, made positive, modulo the partition count. Unkeyed: round robin
per topic, by the client that appends: per call for `append` (one call is one batch in one
partition, placed by its first record), per record for `append_spread`.
"""

from __future__ import annotations

from collections.abc import Sequence

_MASK = 0xFFFFFFFF
_M = 0x5BD1E995
_SEED = 0x9747B28C


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (a 32-bit MurmurHash2), as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_of_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def spread(keys: Sequence[bytes | None], partitions: int, turn: int) -> tuple[list[int], int]:
    """Each record's partition, by its own key (as `partition_of_key`), and the unkeyed in
    turn from `turn` (round robin per record); and the turn after them."""
    out = []
    for key in keys:
        if key is None:
            out.append(turn % partitions)
            turn += 1
        else:
            out.append(partition_of_key(key, partitions))
    return out, turn
