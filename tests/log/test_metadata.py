"""Consensus metadata: durable, atomic, and never half-read."""

from __future__ import annotations

import pytest

from quorumlog.log.files import CorruptionError, OsFileSystem
from quorumlog.log.memdisk import MemoryFileSystem
from quorumlog.log.metadata import ConsensusMetadata
from quorumlog.log.metadata_store import MetadataStore


def test_round_trip_and_missing(tmp_path):
    store = MetadataStore(OsFileSystem(), str(tmp_path))
    assert store.load() is None
    meta = ConsensusMetadata(incarnation="abc", config={"voters": [1, 2, 3]})
    store.save(meta.with_vote(7, 2))
    assert store.load() == ConsensusMetadata("abc", 7, 2, {"voters": [1, 2, 3]})


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "magic"])
def test_damaged_file_is_corruption(tmp_path, damage):
    store = MetadataStore(OsFileSystem(), str(tmp_path))
    store.save(ConsensusMetadata(incarnation="abc", current_term=3))
    with open(store.path, "rb") as f:
        data = bytearray(f.read())
    if damage == "flip":
        data[-2] ^= 1
    elif damage == "truncate":
        del data[len(data) // 2 :]
    elif damage == "empty":
        data.clear()
    else:
        data[0:4] = b"XXXX"
    with open(store.path, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(CorruptionError) as err:
        store.load()
    assert store.path in str(err.value)


def test_a_vote_survives_a_crash_right_after_save():
    fs = MemoryFileSystem()
    store = MetadataStore(fs, "/node")
    store.save(ConsensusMetadata(incarnation="i", current_term=1))
    store.save(ConsensusMetadata(incarnation="i", current_term=2, voted_for=3))
    fs.crash()
    assert store.load().voted_for == 3
